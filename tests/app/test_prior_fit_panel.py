"""The Prior panel's "Fit to data": the fit runs off the GUI thread, is drawn over the data's
P(k), and its two actions write the config through the state (offscreen Qt, no engine)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from PySide6.QtCore import Qt

from app.panels.prior import fitted_text, round_to_error
from core.config import parse_config
from core.field.grid import Grid
from core.field.power_spectrum import PowerLaw
from core.field.synthetic import gaussian_smooth, make_dataset, save_dataset
from support.gui import open_prior_panel, write_config

TRUE = PowerLaw(amplitude=200.0, index=-2.0, k_pivot=0.3)


def write_case(folder, amplitude=200.0, sigma=1.0):
    grid = Grid((32, 32, 32), 100.0)
    spectrum = PowerLaw(amplitude=amplitude, index=-2.0, k_pivot=0.3)
    save_dataset(folder / "field.npz",
                 make_dataset(grid, spectrum, sigma, mask="slab", mask_fraction=0.25, seed=3))
    document = {
        "model": {"kind": "field"},
        "data": {"path": "field.npz", "key": "data", "noise_sigma": sigma, "mask": "mask"},
        "grid": {"box_size": 100.0},
        "prior": {"kind": "power_law", "k_pivot": 0.3, "amplitude": 1.0,
                  "index": {"dist": "normal", "loc": -1.0, "scale": 0.5}},
        "likelihood": {"kind": "gaussian"},
    }
    return write_config(folder, document)


def fit(qtbot, panel):
    assert panel.fit_button.isEnabled()
    qtbot.mouseClick(panel.fit_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not panel._fitter.busy and "fitting" not in panel.fit_label.text(),
                    timeout=30_000)


def test_fit_to_data_then_use_as_fixed_values_and_as_prior_centres(qtbot, tmp_path):
    state, panel = open_prior_panel(qtbot, write_case(tmp_path))
    fit(qtbot, panel)
    result = panel.fit_result
    assert result is not None, panel.fit_label.text()
    for name in ("amplitude", "index"):
        assert abs(result.values[name] - getattr(TRUE, name)) < 4 * result.errors[name]
    assert "amplitude A = " in panel.fit_label.text() and "±" in panel.fit_label.text()
    assert f"errors from {result.mocks} mock data sets under the mask" in panel.fit_label.text()
    # a positive hyperparameter known to worse than 10 % is written x +up −down (log-symmetric)
    wide = dataclasses.replace(result, errors={**result.errors, "amplitude": 0.5 * result.values["amplitude"]})
    up, down = (f"{result.values['amplitude'] * v:.2g}" for v in (math.exp(0.5) - 1, 1 - math.exp(-0.5)))
    assert fitted_text(wide, "amplitude").endswith(f" +{up} −{down}")
    assert " ± " in fitted_text(wide, "index")
    k, p = panel.fit_data.getOriginalDataset()            # the data's P(k) is drawn...
    detected = result.used & (result.power > 2 * result.power_error)
    assert len(k) == detected.sum() > 5
    assert not result.flagged and panel.use_fixed_button.isEnabled()
    assert not panel.accept_flagged.isVisibleTo(panel)
    k, p = panel.fit_curve.getOriginalDataset()           # ... with the fit over it
    np.testing.assert_allclose(p, result.spectrum.evaluate(k))
    assert len(panel.curve.getOriginalDataset()[0]) > 0   # and the current prior

    qtbot.mouseClick(panel.use_fixed_button, Qt.MouseButton.LeftButton)
    config = parse_config(state.to_toml(), base_dir=tmp_path)   # the config text, read back
    assert not state["prior.index.sampled"]
    assert config.prior.index == state["prior.index.value"]
    assert math.isclose(config.prior.index, result.values["index"], abs_tol=result.errors["index"])
    assert math.isclose(config.prior.amplitude, result.values["amplitude"],
                        rel_tol=0.1 * result.errors["amplitude"] / result.values["amplitude"])
    assert state.validate() == {}

    # sampled priors: a normal on the index, a lognormal on the amplitude; widths kept
    state.set_sampled("index", True)
    state.update({"prior.index.dist": "normal", "prior.index.loc": 0.0,
                  "prior.index.scale": 0.7, "prior.amplitude.sampled": True,
                  "prior.amplitude.dist": "lognormal", "prior.amplitude.loc": 0.0,
                  "prior.amplitude.scale": 1.0})
    assert panel.fit_result is result          # editing the priors keeps the fit
    qtbot.mouseClick(panel.use_centres_button, Qt.MouseButton.LeftButton)
    config = parse_config(state.to_toml(), base_dir=tmp_path).prior
    assert config.index.scale == 0.7 and config.amplitude.scale == 1.0
    assert abs(config.index.loc - result.values["index"]) < result.errors["index"]
    assert abs(math.exp(config.amplitude.loc) - result.values["amplitude"]) \
        < result.errors["amplitude"]
    assert state.validate() == {}

    state["likelihood.field_mean"] = 0.5       # the data's description changed: the fit goes
    assert panel.fit_result is None and not panel.use_fixed_button.isEnabled()


def test_data_with_no_usable_shells_show_a_message_not_a_traceback(qtbot, tmp_path):
    state, panel = open_prior_panel(qtbot, write_case(tmp_path, amplitude=1e-6))   # noise only
    fit(qtbot, panel)
    assert panel.fit_result is None
    text = panel.fit_label.text()
    assert text.startswith("No fit: power_law: 2 hyperparameters"), text
    assert "usable P(k) shell" in text and "Traceback" not in text
    assert not panel.use_fixed_button.isEnabled() and panel.fit_button.isEnabled()
    state["prior.kind"] = "table"
    assert not panel.fit_button.isEnabled() and "table" in panel.fit_button.toolTip()


def write_smooth_case(folder, sigma_set):
    """Issue 32's case, smaller: Gaussian-smoothed white noise (2 cells) plus white noise of sd
    0.3, a cube of NaN; a power law cannot describe it, and a noise level set 0.29 leaves
    noise at high k."""
    rng = np.random.default_rng(0)
    grid = Grid((32,) * 3, 64.0)
    signal = gaussian_smooth(rng.standard_normal(grid.shape), Grid((32,) * 3, 32.0), 2.0)
    data = (signal / signal.std() + 0.3 * rng.standard_normal(grid.shape)).astype(np.float32)
    data[12:20, 12:20, 12:20] = np.nan
    np.save(folder / "smooth.npy", data)
    document = {
        "model": {"kind": "field"},
        "data": {"path": "smooth.npy", "noise_sigma": sigma_set},
        "grid": {"box_size": 64.0},
        "prior": {"kind": "power_law_cutoff", "k_pivot": 0.3, "amplitude": 1.0,
                  "index": {"dist": "normal", "loc": -1.0, "scale": 0.5}, "cutoff_scale": 1.0},
        "likelihood": {"kind": "gaussian"},
    }
    return write_config(folder, document, "smooth.toml")


def test_a_flagged_fit_is_said_and_used_only_on_the_users_word(qtbot, tmp_path):
    state, panel = open_prior_panel(qtbot, write_smooth_case(tmp_path, 0.29))
    fit(qtbot, panel)
    result = panel.fit_result
    assert result is not None and result.kind == "power_law_cutoff", panel.fit_label.text()
    assert result.flagged and result.chi2_per_dof > 3
    text = panel.fit_label.text()
    assert "FLAGGED" in text and "noise level" in text and "chi²/dof" in text
    # the refit with the noise free finds what was wrong: the noise sd set
    assert "the noise level set is the likely cause" in text
    assert not panel.use_fixed_button.isEnabled() and not panel.use_centres_button.isEnabled()
    assert panel.accept_flagged.isVisibleTo(panel) and not panel.accept_flagged.isChecked()
    before = state.to_toml()
    panel.use_fit_as_centres()                       # not even called directly: nothing written
    assert state.to_toml() == before
    panel.accept_flagged.setChecked(True)            # the user's word
    assert panel.use_centres_button.isEnabled()
    qtbot.mouseClick(panel.use_centres_button, Qt.MouseButton.LeftButton)
    assert state["prior.index.loc"] == round_to_error(result.values["index"],
                                                      result.errors["index"])

    # the noise level fitted too: no flag, and the truth (n = 0, R = 2 cells = 4) recovered
    state["data.noise_sigma"] = 0.29
    panel.fit_noise.setChecked(True)
    fit(qtbot, panel)
    result = panel.fit_result
    assert result is not None and not result.flagged, panel.fit_label.text()
    assert result.noise_fitted and abs(result.noise_sigma - 0.3) < 4 * result.noise_sigma_error
    assert abs(result.values["index"]) < 3 * result.errors["index"]
    assert abs(result.values["cutoff_scale"] - 4.0) < 3 * result.errors["cutoff_scale"]
    assert "noise sd fitted" in panel.fit_label.text()
    assert "Best family by BIC: this one" in panel.fit_label.text()
    assert panel.use_fixed_button.isEnabled() and not panel.accept_flagged.isVisibleTo(panel)
