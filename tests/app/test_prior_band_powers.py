"""The Prior panel's band powers (#30): choosing the family, its bins, each bin's prior and the
random walk write a config that core.config reads back; the plot is the prior's median and
68 % band in log P (independent bins: the lognormal's own sd); a bad median is named; a field
is drawn from the prior (offscreen Qt, no engine)."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import Qt

from core.config import parse_config
from core.field.grid import Grid
from core.field.power_spectrum import PowerLaw, band_edges
from core.field.synthetic import make_dataset, save_dataset
from support.gui import open_prior_panel, write_config

GRID = Grid((16, 16, 16), 100.0)


def write_case(folder, prior=None):
    save_dataset(folder / "field.npz", make_dataset(GRID, PowerLaw(amplitude=200.0, index=-2.0, k_pivot=0.3),
                                                    1.0, seed=3))
    document = {
        "model": {"kind": "field"},
        "data": {"path": "field.npz", "key": "data", "noise_sigma": 1.0},
        "grid": {"box_size": 100.0},
        "prior": prior or {"kind": "power_law", "k_pivot": 0.3, "amplitude": 200.0, "index": -2.0},
        "likelihood": {"kind": "gaussian"},
    }
    return write_config(folder, document)


def curve(item):
    x, y = item.getOriginalDataset()
    return np.asarray(x), np.asarray(y)


def type_into(qtbot, edit, text):
    edit.setFocus()
    edit.selectAll()
    qtbot.keyClicks(edit, text)
    edit.clearFocus()


def test_band_powers_are_set_up_in_the_panel_and_read_back_by_the_config(qtbot, tmp_path):
    state, panel = open_prior_panel(qtbot, write_case(tmp_path))
    editor = panel.band_editor
    assert editor.isHidden()
    k = panel._k_values(panel.spectrum())
    level = np.exp(np.mean(np.log(PowerLaw(amplitude=200.0, index=-2.0, k_pivot=0.3).evaluate(k))))
    panel.kind_combo.setCurrentIndex(panel.kind_combo.findData("band_powers"))
    assert not editor.isHidden() and panel.pivot.isHidden()
    # each bin's prior starts at the level of the family chosen before
    assert math.isclose(state["prior.band_power"]["loc"], round(math.log(level), 2))
    assert state.validate() == {}
    prior = parse_config(state.to_toml(), base_dir=tmp_path).prior
    assert prior.kind == "band_powers" and prior.n_bins == 16 == editor.bins.value()   # the default count

    editor.bins.setValue(8)
    type_into(qtbot, editor.median, "250")
    type_into(qtbot, editor.log_sd, "2")
    prior = parse_config(state.to_toml(), base_dir=tmp_path).prior
    assert prior.n_bins == 8 and prior.random_walk_scale is None
    assert type(prior.band_power).__name__ == "LogNormalPrior"
    assert math.isclose(prior.band_power.loc, math.log(250.0)) and prior.band_power.scale == 2.0
    # the plot: the median, and the 68 % band of independent bins: 250 e^(+-2), bin for bin
    edges = band_edges(GRID.k_magnitude_full(), 8)
    x, y = curve(panel.curve)
    assert x[0] == edges[0] and x[-1] == edges[-1]
    np.testing.assert_allclose(y, 250.0, rtol=1e-12)
    np.testing.assert_allclose(curve(panel.band_hi)[1], 250.0 * math.exp(2.0), rtol=1e-12)
    np.testing.assert_allclose(curve(panel.band_lo)[1], 250.0 * math.exp(-2.0), rtol=1e-12)
    assert "8 band powers" in panel.plot_caption.text()

    # the random walk: on with a step sd, then every bin narrower than 2 in log P
    editor.smooth.setChecked(True)
    type_into(qtbot, editor.walk, "0.4")
    assert parse_config(state.to_toml(), base_dir=tmp_path).prior.random_walk_scale == 0.4
    high = curve(panel.band_hi)[1]
    assert np.all(high < 250.0 * math.exp(2.0)) and np.all(high > 250.0)
    assert "ties neighbouring bins" in panel.plot_caption.text()
    editor.smooth.setChecked(False)
    assert state["prior.random_walk_scale"] is None and state.validate() == {}

    # a field drawn from the prior, with the bins' powers it was drawn with
    qtbot.mouseClick(panel.draw_button, Qt.MouseButton.LeftButton)
    assert panel.last_draw.shape == GRID.shape and "8 band powers from" in panel.draw_caption.text()

    # a median that is not > 0 is named, not written as a log
    type_into(qtbot, editor.median, "-3")
    errors = state.validate()
    assert "prior.band_power" in errors and "must be > 0" in errors["prior.band_power"]
    assert "Fit to data" not in panel.fit_button.toolTip() and "band powers are" in panel.fit_button.toolTip()


def test_edges_a_config_gives_are_kept_until_a_number_of_bins_is_set(qtbot, tmp_path):
    prior = {"kind": "band_powers", "edges": [0.05, 0.1, 0.2, 0.4],
             "band_power": {"dist": "lognormal", "loc": 3.0, "scale": 1.0}, "random_walk_scale": 0.5}
    state, panel = open_prior_panel(qtbot, write_case(tmp_path, prior))
    editor = panel.band_editor
    assert not editor.isHidden() and editor.bins.value() == 3
    assert not editor.edges_note.isHidden() and "0.05" in editor.edges_note.text()
    assert editor.smooth.isChecked() and editor.walk.text() == "0.5"
    assert math.isclose(float(editor.median.text()), math.exp(3.0), rel_tol=1e-5)
    x, _ = curve(panel.curve)
    assert math.isclose(x[0], 0.05) and math.isclose(x[-1], 0.4)
    config = parse_config(state.to_toml(), base_dir=tmp_path).prior     # saved as it came
    assert config.edges == (0.05, 0.1, 0.2, 0.4) and config.random_walk_scale == 0.5
    editor.bins.setValue(5)
    config = parse_config(state.to_toml(), base_dir=tmp_path).prior
    assert config.edges is None and config.n_bins == 5 and editor.edges_note.isHidden()


def test_a_config_with_bad_band_settings_opens_and_names_them(qtbot, tmp_path):
    # written by hand (core.config's writer refuses these): the panel shows them, validation names them
    write_case(tmp_path)
    text = (tmp_path / "run.toml").read_text()
    start = text.index("[prior]")
    end = text.index("\n[", start + 1)
    (tmp_path / "bad.toml").write_text(text[:start] + '[prior]\nkind = "band_powers"\nn_bins = "many"\n'
                                       'edges = ["a", 0.2]\nband_power = { dist = "lognormal", loc = "x", '
                                       'scale = 1.0 }\n' + text[end:])
    state, panel = open_prior_panel(qtbot, tmp_path / "bad.toml")
    editor = panel.band_editor
    assert not editor.isHidden() and "not numbers" in editor.edges_note.text()
    assert editor.bins.value() == 16                      # the default count stands in
    assert "Band powers:" in panel.plot_caption.text()   # no plot, a reason
    assert not panel.band.isVisible()                    # not the last family's band left drawn
    errors = state.validate()
    assert any(key.startswith("prior.") for key in errors), errors
    editor.bins.setValue(6)                               # a count: edges from the grid again
    state["prior.band_power"] = {"dist": "lognormal", "loc": 2.0, "scale": 1.0}
    assert parse_config(state.to_toml(), base_dir=tmp_path).prior.n_bins == 6
    assert "6 band powers" in panel.plot_caption.text()
