"""File > New from data and `fieldscope gui DATAFILE`: a fresh config for the user's own data,
no demo settings left behind, the box size asked for, runs in a folder named after the data."""

from __future__ import annotations

import tomllib

import numpy as np
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication, QDialog

from core import demo
from core.config import config_to_dict, new_config
from core.field.grid import Grid
from core.field.power_spectrum import PowerLaw
from core.field.synthetic import make_dataset, save_dataset

READY_MS = 90_000       # TensorFlow's import in the engine, on a busy 2-core machine


def leaves(document) -> dict:
    return {f"{table}.{key}": value for table, entries in document.items()
            for key, value in entries.items()}


def user_data(shape=(16, 16, 16), mask="none"):
    grid = Grid(shape, 60.0, "Mpc")
    return make_dataset(grid, PowerLaw(amplitude=20.0, index=-2.0, k_pivot=0.5), 0.7,
                        mask=mask, seed=3)


def test_new_from_data_on_a_plain_npy_asks_the_box_and_runs_in_a_folder_named_after_it(
        make_window, qtbot, tmp_path):
    data_dir = tmp_path / "mine"
    data_dir.mkdir()
    np.save(data_dir / "mydata.npy", user_data((8, 8, 8)).data)
    window = make_window()
    assert window.open_demo("field.toml")
    assert window.state["data.mask"] == "mask" and window.state["prior.kind"] == "power_law_cutoff"

    with qtbot.waitSignal(window.new_config_done, timeout=30_000) as done:
        assert window.new_from_data(data_dir / "mydata.npy")
        # the file is read and P(k) fitted on a worker thread: the call returns at once
        assert window._from_data.busy
        assert "reading mydata.npy and fitting P(k)" in window.message_label.text()
    assert done.args == [True]
    # no box size in a .npy: no modal question; the data are shown at once, in voxel units,
    # and the Grid panel asks for the box size without blocking
    assert not [w for w in QApplication.topLevelWidgets() if isinstance(w, QDialog) and w.isVisible()
                and w.windowTitle() == "Box size"]
    assert window.state["grid.box_size"] == 8.0 and window.state["grid.unit"] == "voxel"
    grid = window.panel["grid"]
    assert grid.asking_box_size and "mydata.npy does not state the size" in grid.box_question.text()
    qtbot.waitUntil(lambda: window.run_state.is_preview and window.run_state.grid_shape == (8, 8, 8),
                    timeout=10_000)
    assert not window.errors and not window.state.modified
    grid.lengths[0].clear()
    qtbot.keyClicks(grid.lengths[0], "60")
    assert not grid.asking_box_size and window.state["grid.unit"] == ""
    window.state["grid.unit"] = "Mpc"

    state = window.state
    assert state.path is None and state.base_dir == data_dir
    assert state["grid.box_size"] == 60.0 and state["grid.unit"] == "Mpc"
    text = state.to_toml()
    mine = leaves(tomllib.loads(text))
    demo_doc = leaves(tomllib.loads(demo.field_toml()))
    defaults = leaves(config_to_dict(new_config()))
    leaked = {k: v for k, v in mine.items() if demo_doc.get(k, object()) == v
              and defaults.get(k) != v and k != "model.kind"}
    assert not leaked, leaked
    assert "data.mask" not in mine and "prior.cutoff_scale" not in mine
    assert mine["data.path"] == "mydata.npy" and mine["prior.kind"] == "power_law"
    title, notes = window.last_message
    assert title == "New config for mydata.npy" and "ESTIMATE" in notes
    assert not window.errors
    assert window.save_as_default() == data_dir / "mydata.toml"

    # an unsaved config runs in the per-user folder, named after the data; the status bar says where
    # (a short run: what is checked is where it goes, not the sampling)
    state.update({"sampler.num_warmup": 2, "sampler.num_samples": 2, "sampler.chunk_size": 2,
                  "sampler.num_leapfrog_steps": 1, "sampler.thin": 1})
    qtbot.waitUntil(window.start_action.isEnabled, timeout=READY_MS)
    with qtbot.waitSignal(window.run_started, timeout=10_000) as started:
        assert window.start_run()
    run_dir = window.run_dir
    assert str(run_dir) == started.args[0]
    assert run_dir.parent == tmp_path / "xdg" / "fieldscope" / "runs"
    assert run_dir.name.startswith("mydata-")
    shown = window.message_label.text()
    assert str(run_dir) in shown and "config not saved" in shown
    assert sorted(p.name for p in data_dir.iterdir()) == ["mydata.npy"]   # nothing written there
    with qtbot.waitSignal(window.run_finished, timeout=180_000) as finished:
        pass
    assert finished.args == ["finished"]


def test_fieldscope_gui_datafile_opens_a_new_config_for_it(tmp_path, xla_cache):
    from test_gui_launch import launch

    data_dir = tmp_path / "survey"
    data_dir.mkdir()
    save_dataset(data_dir / "survey.npz", user_data(mask="slab"))    # box size, mask, noise
    png = tmp_path / "new.png"
    out = launch(["gui", str(data_dir / "survey.npz"), "--screenshot", str(png),
                  "--quit-after", "1"], tmp_path, xla_cache)
    assert out.returncode == 0, out.stderr[-3000:]
    assert QImage(str(png)).width() >= 1000
    assert "Cannot" not in out.stderr and "Traceback" not in out.stderr
    assert sorted(p.name for p in data_dir.iterdir()) == ["survey.npz"]


def test_new_from_data_on_a_file_it_cannot_use_says_why(make_window, qtbot, tmp_path):
    bad = tmp_path / "flat.npy"
    np.save(bad, np.zeros((8, 8)))                   # 2-D: not a field on a 3-D grid
    window = make_window()
    before = window.state.document()
    with qtbot.waitSignal(window.new_config_done, timeout=30_000) as done:
        assert window.new_from_data(bad)
    assert done.args == [False]
    title, text = window.last_message
    assert title == "Cannot make a config from the data" and "flat.npy" in text
    assert window.state.document() == before           # the config in the panels is kept
