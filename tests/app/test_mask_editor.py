"""The mask editor (Data panel ▸ Edit mask…) on a user's plain .npy with NaNs and a noise map:
each tool gives the mask built by hand, OK writes <config stem>.mask.npy next to the config
and data.mask then names it and validates (offscreen Qt, no engine)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from app.panels.mask_editor import MaskEditor
from app.state.config_state import ConfigState
from core.config import load_config
from core.io import load_field_inputs
from support.gui import growing_only_axes, message_of

SHAPE = (12, 10, 8)          # not a cube: a plane's rows and columns are told apart


def write_case(folder, mask="mask"):
    """mydata.npy (NaNs at known voxels) and noise.npy (inf where unobserved), and a config
    as the issue's user had it: data.mask = "mask", which a plain .npy cannot hold."""
    rng = np.random.default_rng(5)
    data = rng.normal(size=SHAPE)
    data[0, 0, 0] = data[3, 4, 5] = data[11, 9, 7] = np.nan
    noise = rng.uniform(0.5, 3.0, size=SHAPE)
    noise[:, :, 0] = np.inf
    np.save(folder / "mydata.npy", data)
    np.save(folder / "noise.npy", noise)
    state = ConfigState(base_dir=folder)
    state.update({"data.path": "mydata.npy", "data.noise": "map", "data.noise_map": "noise.npy",
                  "data.mask": mask, "grid.box_size": 24.0})
    return state, data, noise


def open_editor(qtbot, state, parent=None, **kwargs) -> MaskEditor:
    editor = MaskEditor(state, parent, **kwargs)
    qtbot.addWidget(editor)
    editor.show()
    qtbot.waitUntil(lambda: not editor.busy and editor.mask is not None, timeout=20_000)
    return editor


def test_tools_give_the_hand_built_masks(qtbot, tmp_path):
    state, data, noise = write_case(tmp_path)
    state.save(tmp_path / "survey.toml")
    editor = open_editor(qtbot, state)
    count, loose = growing_only_axes(editor)
    assert count == 4 and loose == []
    assert "The current mask is not used: data.mask = 'mask'" in editor.note_label.text()
    # the NaN voxels are masked from the start, as a run masks them (issue #32 item 7: the
    # editor said "100 %" while a run left them out), and the count says so
    np.testing.assert_array_equal(editor.mask, ~np.isnan(data))
    assert (f"Observed: {data.size - 3} of {data.size} voxels" in editor.fraction_label.text()
            and "3 voxels whose data are NaN or infinite are masked" in editor.note_label.text())
    editor.clear()
    assert editor.mask.all() and "(100.0 %)" in editor.fraction_label.text()

    qtbot.mouseClick(editor.nan_button, Qt.MouseButton.LeftButton)
    np.testing.assert_array_equal(editor.mask, ~np.isnan(data))
    assert f"Observed: {data.size - 3} of {data.size} voxels" in editor.fraction_label.text()

    editor.clear()
    editor.set_threshold(low=-1.0, high=1.0)
    expected = (data >= -1.0) & (data <= 1.0)          # NaN is in no range
    np.testing.assert_array_equal(editor.threshold_mask, expected)
    k = int(expected.sum())
    assert f"with the threshold applied: {k} ({100 * k / data.size:.1f} %)" in \
        editor.fraction_label.text()
    assert editor.mask.all()                           # a preview only, until applied
    qtbot.mouseClick(editor.threshold_button, Qt.MouseButton.LeftButton)
    np.testing.assert_array_equal(editor.mask, expected)

    editor.undo()
    assert editor.mask.all()
    editor.set_threshold(high=2.0, source="noise")
    editor.apply_threshold()
    np.testing.assert_array_equal(editor.mask, noise <= 2.0)

    editor.clear()
    editor.axis_combo.setCurrentIndex(0)               # slices ⟂ x: y across, z up (as Slices' yz)
    editor.set_box(3, 2, 2, 4, slices=(5, 7))          # columns y 3..4, rows z 2..5
    qtbot.mouseClick(editor.box_button, Qt.MouseButton.LeftButton)
    expected = np.ones(SHAPE, dtype=bool)
    expected[5:8, 3:5, 2:6] = False
    np.testing.assert_array_equal(editor.mask, expected)

    editor.axis_combo.setCurrentIndex(2)               # slices ⟂ z: x across, y up (as Slices' xy)
    editor.slider.setValue(1)
    assert editor.plot.getPlotItem().getAxis("bottom").labelText == "x"
    assert editor.plot.getPlotItem().getAxis("left").labelText == "y"
    np.testing.assert_array_equal(editor.image.image, data[:, :, 1].T.astype(np.float32))   # rows y
    editor.set_box(10, 0, 5, 3, slices="this")         # columns x 10..14 cut to 10..11, rows y 0..2
    editor.mask_box()
    expected[10:12, 0:3, 1] = False
    np.testing.assert_array_equal(editor.mask, expected)
    editor.set_box(0, 8, 1, 2, slices="all")           # column x 0, rows y 8..9: a slab in z
    editor.mask_box()
    expected[0, 8:10, :] = False
    np.testing.assert_array_equal(editor.mask, expected)

    editor.invert()
    np.testing.assert_array_equal(editor.mask, ~expected)
    editor.reject()


def test_ok_writes_the_mask_next_to_the_config_and_data_mask_validates(qtbot, tmp_path):
    state, data, noise = write_case(tmp_path)
    config_path = state.save(tmp_path / "survey.toml")
    editor = open_editor(qtbot, state)
    editor.from_nans()
    editor.set_threshold(high=10.0, source="noise")    # the run needs a finite sd where observed
    editor.apply_threshold()
    expected = ~np.isnan(data) & np.isfinite(noise)
    qtbot.mouseClick(editor.buttons.button(QDialogButtonBox.StandardButton.Ok),
                     Qt.MouseButton.LeftButton)
    assert editor.result() == MaskEditor.DialogCode.Accepted
    target = tmp_path / "survey.mask.npy"
    np.testing.assert_array_equal(np.load(target), expected)
    assert state["data.mask"] == "survey.mask.npy"
    assert state.validate() == {}
    state.save(config_path)
    config = load_config(config_path)                   # the text parses
    assert config.data.mask == "survey.mask.npy"
    np.testing.assert_array_equal(load_field_inputs(config).mask, expected)

    # editing again replaces the config's own mask file; any other file only when asked
    editor = open_editor(qtbot, state)
    np.testing.assert_array_equal(editor.mask, expected)
    editor.clear()
    editor.set_box(0, 0, 1, 1, slices="all")
    editor.mask_box()
    assert editor.save() == "survey.mask.npy"
    assert np.load(target).sum() == data.size - SHAPE[2]
    state["data.mask"] = ""
    assert editor.save(replace=False) is None
    assert "exists; not replaced" in editor.error_label.text()
    assert np.load(target).sum() == data.size - SHAPE[2]
    editor.invert()
    editor.invert()
    editor.clear()
    assert editor.save() == "" and state["data.mask"] == ""     # all observed: no mask
    editor.reject()


def test_unsaved_config_mask_next_to_the_data_follows_the_config_when_saved(qtbot, tmp_path):
    (tmp_path / "in").mkdir()
    state, data, noise = write_case(tmp_path / "in", mask="")
    editor = open_editor(qtbot, state)
    editor.from_nans()
    editor.set_threshold(high=10.0, source="noise")
    editor.apply_threshold()
    assert editor.save(where="data") == "mydata.mask.npy"
    assert (tmp_path / "in" / "mydata.mask.npy").is_file()
    (tmp_path / "elsewhere").mkdir()
    saved = state.save(tmp_path / "elsewhere" / "run.toml")
    assert state["data.mask"] == str(tmp_path / "in" / "mydata.mask.npy")   # as data.path
    np.testing.assert_array_equal(load_field_inputs(load_config(saved)).mask,
                                  ~np.isnan(data) & np.isfinite(noise))
    editor.reject()


def test_data_panel_edit_mask_clears_the_bad_mask_message(qtbot, tmp_path, make_window):
    state, data, _ = write_case(tmp_path)
    config_path = state.save(tmp_path / "survey.toml")
    window = make_window(config_path, engine=None)
    assert "single .npy" in message_of(window, "data.mask")
    panel = window.panel["data"]
    assert panel.mask_button.isEnabled()
    qtbot.mouseClick(panel.mask_button, Qt.MouseButton.LeftButton)
    editor = panel.mask_editor
    assert editor is not None and editor.isVisible() and editor.save_config == window.save_config
    qtbot.waitUntil(lambda: not editor.busy and editor.mask is not None, timeout=20_000)
    editor.from_nans()
    editor.accept()
    qtbot.waitUntil(lambda: not editor.isVisible())
    assert panel.mask_combo.currentText() == "survey.mask.npy"
    assert message_of(window, "data.mask") == ""
    assert "data.mask" not in window.errors


def test_data_that_cannot_be_read_is_named_and_ok_stays_disabled(qtbot, tmp_path):
    np.save(tmp_path / "flat.npy", np.zeros((4, 5)))
    state = ConfigState(base_dir=tmp_path)
    state["data.path"] = "flat.npy"
    editor = MaskEditor(state)
    qtbot.addWidget(editor)
    qtbot.waitUntil(lambda: not editor.busy and editor.error_label.text() != "", timeout=20_000)
    text = editor.error_label.text()
    assert text.startswith("Cannot edit a mask: ") and "flat.npy" in text and "3-D" in text
    assert not editor.buttons.button(QDialogButtonBox.StandardButton.Ok).isEnabled()
    assert editor.save() is None and state["data.mask"] == ""
