"""The setup panels (no engine): they write valid configs and refuse invalid ones."""

from __future__ import annotations

import math
import sys

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QLineEdit

from core.config import load_config
from core.field.grid import Grid
from core.io import inspect_array, loader_for
from support.gui import message_of, tiny_case


def type_into(qtbot, edit: QLineEdit, text: str) -> None:
    edit.setFocus()
    edit.selectAll()
    qtbot.keyClicks(edit, text)


def edit_of(window, key) -> QLineEdit:
    edit = window.findChild(QLineEdit, key)
    assert edit is not None, key
    return edit




def test_typed_values_are_saved_as_the_toml_the_cli_runs(make_window, qtbot, tmp_path):
    config = tiny_case(tmp_path)
    window = make_window(config, engine=None)
    assert window.errors == {} and not window.start_action.isEnabled()   # no engine
    type_into(qtbot, edit_of(window, "sampler.num_warmup"), "12")
    type_into(qtbot, edit_of(window, "sampler.step_size"), "0.02")
    box = window.findChild(QComboBox, "sampler.algorithm")
    box.setCurrentIndex(box.findData("nuts"))
    assert window.state["sampler.num_warmup"] == 12
    assert window.windowTitle().endswith("*")
    out = tmp_path / "saved.toml"
    assert window.save_config(out)
    saved = load_config(out)
    assert saved.sampler.num_warmup == 12 and saved.sampler.step_size == 0.02
    assert saved.sampler.algorithm == "nuts"
    assert saved.data_path == config.parent / "tiny_field.npz"
    assert not window.windowTitle().endswith("*")


def test_every_registered_sampler_is_offered_and_hides_what_does_not_apply(make_window, qtbot, tmp_path):
    window = make_window(tiny_case(tmp_path), engine=None)
    box = window.findChild(QComboBox, "sampler.algorithm")
    leapfrog, target = edit_of(window, "sampler.num_leapfrog_steps"), edit_of(window, "sampler.target_accept")
    shown = {}
    assert [box.itemData(i) for i in range(box.count())] == ["hmc", "hmc_jittered", "nuts", "mclmc", "mams"]
    for algorithm in ("mclmc", "mams", "nuts", "hmc", "hmc_jittered"):
        box.setCurrentIndex(box.findData(algorithm))
        assert window.state["sampler.algorithm"] == algorithm
        shown[algorithm] = (not leapfrog.isHidden(), not target.isHidden())
        if algorithm == "mams":
            out = tmp_path / "mams.toml"
            assert window.save_config(out) and load_config(out).sampler.algorithm == "mams"
    assert shown == {"mclmc": (False, False), "mams": (False, True), "nuts": (False, True),
                     "hmc": (True, True), "hmc_jittered": (True, True)}


def test_the_sampler_panel_says_before_a_run_where_mclmc_is_biased_and_sets_mams(make_window, qtbot, tmp_path):
    """MCLMC sampling the index through the tiny case's slab mask: the panel shows the advice
    the summary would give after the run (core.store.advice.unadjusted_bias), its button sets
    MAMS; without the mask, with the index fixed, or with an adjusted sampler, nothing."""
    from PySide6.QtWidgets import QLabel, QPushButton

    from core.store.advice import coupling, unadjusted_bias

    window = make_window(tiny_case(tmp_path), engine=None)
    label = window.findChild(QLabel, "sampler.advice")
    button = window.findChild(QPushButton, "sampler.advice_action")
    box = window.findChild(QComboBox, "sampler.algorithm")

    def shown():
        return not label.isHidden() and not button.isHidden()

    assert window.state["sampler.algorithm"] == "hmc" and not shown()     # adjusted: no advice
    box.setCurrentIndex(box.findData("mclmc"))
    assert shown() and "MCLMC has no accept step" in label.text() and "mask coupling" in label.text()
    expected = unadjusted_bias("mclmc", coupling(True, False, "gaussian")).text
    assert label.text() == expected[0].upper() + expected[1:] + "."
    assert button.text() == "Use MAMS"
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert window.state["sampler.algorithm"] == "mams" and box.currentData() == "mams" and not shown()
    out = tmp_path / "advised.toml"
    assert window.save_config(out) and load_config(out).sampler.algorithm == "mams"
    box.setCurrentIndex(box.findData("mclmc"))
    assert shown()
    window.state["data.mask"] = ""                   # nothing couples the modes
    assert not shown()
    window.state["data.mask"] = "mask"
    assert shown()
    # the tiny case's mask is a slab: with "conditional" it couples nothing (exact there)
    window.state["sampler.preconditioner"] = "conditional"
    assert not shown()
    window.state["sampler.preconditioner"] = "fourier"
    assert shown()
    window.state.set_sampled("index", False)
    assert not shown()                               # P(k) fixed: MCLMC's bias stays in the field


def test_the_devices_setting_takes_a_number_or_all_names_a_wrong_one_and_is_saved(make_window, qtbot, tmp_path):
    window = make_window(tiny_case(tmp_path), engine=None)
    devices = edit_of(window, "sampler.devices")
    assert devices.text() == "1" and not devices.isHidden()
    type_into(qtbot, devices, "9")
    assert "sampler.devices: may be at most sampler.chains = 2" in message_of(window, "sampler.devices")
    type_into(qtbot, devices, "gpu")
    assert 'sampler.devices: must be "all" or a positive integer' in message_of(window, "sampler.devices")
    for value, saved_as in (("all", "all"), ("2", 2)):
        type_into(qtbot, devices, value)
        assert message_of(window, "sampler.devices") == ""
        out = tmp_path / f"devices_{value}.toml"
        assert window.save_config(out) and load_config(out).sampler.devices == saved_as


def test_the_field_across_devices_setting_names_what_it_needs_and_is_saved(make_window, qtbot, tmp_path):
    window = make_window(tiny_case(tmp_path), engine=None)
    box = window.findChild(QComboBox, "field.shard")
    assert box is not None and not box.isHidden() and box.currentData() == "none"
    box.setCurrentIndex(box.findData("slab"))
    # the tiny case: whitened latent, one device
    assert "field.shard = 'slab' cuts the field over sampler.devices: give 2 or more" in \
        message_of(window, "sampler.devices")
    type_into(qtbot, edit_of(window, "sampler.devices"), "4")       # more than the 2 chains: fine sharded
    assert message_of(window, "sampler.devices") == ""
    assert 'it needs "white_noise"' in message_of(window, "field.parameterisation")
    params = window.findChild(QComboBox, "field.parameterisation")
    params.setCurrentIndex(params.findData("white_noise"))
    assert message_of(window, "field.parameterisation") == ""
    out = tmp_path / "sharded.toml"
    assert window.save_config(out)
    saved = load_config(out)
    assert (saved.field.shard, saved.field.parameterisation, saved.sampler.devices) == ("slab", "white_noise", 4)
    box.setCurrentIndex(box.findData("none"))
    assert "sampler.devices: may be at most sampler.chains = 2" in message_of(window, "sampler.devices")


def test_the_dense_block_setting_shows_with_the_fourier_preconditioner_and_is_saved(make_window, qtbot, tmp_path):
    window = make_window(tiny_case(tmp_path), engine=None)
    box = window.findChild(QComboBox, "sampler.preconditioner")
    dense = edit_of(window, "sampler.dense_modes")
    shown = {}
    for preconditioner in ("identity", "fourier", "diagonal", "conditional"):
        box.setCurrentIndex(box.findData(preconditioner))
        shown[preconditioner] = not dense.isHidden()
    # the tiny case samples its index through a slab mask: "conditional" is exact there and builds
    # no dense block (core.engine.slab_conditional)
    assert shown == {"identity": False, "fourier": True, "diagonal": False, "conditional": False}
    box.setCurrentIndex(box.findData("fourier"))
    type_into(qtbot, edit_of(window, "sampler.dense_modes"), "5000")
    assert "sampler.dense_modes: may be at most 4,096" in message_of(window, "sampler.dense_modes")
    type_into(qtbot, edit_of(window, "sampler.dense_modes"), "300")
    out = tmp_path / "dense.toml"
    assert window.save_config(out)
    saved = load_config(out).sampler
    assert (saved.preconditioner, saved.dense_modes) == ("fourier", 300)


def test_invalid_values_get_an_inline_message_naming_the_key(make_window, qtbot, tmp_path):
    window = make_window(tiny_case(tmp_path), engine=None)
    type_into(qtbot, edit_of(window, "sampler.num_warmup"), "-3")
    type_into(qtbot, edit_of(window, "sampler.target_accept"), "1.5")
    assert message_of(window, "sampler.num_warmup").startswith("sampler.num_warmup: must be")
    assert "sampler.target_accept" in message_of(window, "sampler.target_accept")
    assert "sampler.num_warmup" in window.message_label.text()
    # a sampled hyperparameter with a bad scale: the message sits in its group
    window.docks[2].raise_()
    type_into(qtbot, edit_of(window, "prior.index.scale"), "-1")
    assert "prior.index" in message_of(window, "prior.index")
    # three box lengths, one negative
    grid = window.panel["grid"]
    grid.cube.setChecked(False)
    type_into(qtbot, grid.lengths[1], "-5")
    assert message_of(window, "grid.box_size").startswith("grid.box_size[1]")
    # nothing invalid is written
    target = tmp_path / "never.toml"
    assert not window.save_config(target)
    assert not target.exists() and "not saved" in window.last_message[1]
    # fixing them clears the messages
    type_into(qtbot, edit_of(window, "sampler.num_warmup"), "10")
    type_into(qtbot, edit_of(window, "sampler.target_accept"), "0.8")
    type_into(qtbot, edit_of(window, "prior.index.scale"), "0.3")
    type_into(qtbot, grid.lengths[1], "150")
    assert window.errors == {} and message_of(window, "sampler.num_warmup") == ""
    assert window.save_config(target)
    assert load_config(target).grid.box_size == (200.0, 150.0, 200.0)


def test_the_data_panel_reads_what_the_file_holds(make_window, qtbot, tmp_path):
    config = tiny_case(tmp_path)
    window = make_window(config, engine=None)
    data = window.panel["data"]
    s = window.state
    s.update({"data.key": "x", "data.mask": "", "grid.box_size": 1.0, "grid.unit": ""})
    assert "data.key" in window.errors
    data.open_file(config.parent / "tiny_field.npz")
    assert s["data.key"] == "data" and s["data.mask"] == "mask"
    assert s["grid.box_size"] == 200.0 and s["grid.unit"] == "Mpc/h"
    assert window.errors == {}
    loaded = loader_for(config.parent / "tiny_field.npz").load(config.parent / "tiny_field.npz",
                                                                "data")
    stats = inspect_array(loaded.array)
    info = data.info.text()
    assert f"shape {stats.shape}" in info and "NaN 0" in info
    assert f"min {stats.min:.4g}" in info and f"max {stats.max:.4g}" in info
    image = data.preview.image.image
    z = data.slider.value()
    # drawn as the Slices view draws the xy plane: x across (columns), y up (rows)
    np.testing.assert_allclose(image, loaded.array[:, :, z].T.astype(np.float32))
    # a file that is not what its name says: the loader's message, beside the widget
    bad = tmp_path / "broken.npz"
    bad.write_bytes(b"definitely not a zip archive")
    data.open_file(bad)
    assert str(bad) in message_of(window, "data.path")
    assert not window.start_action.isEnabled()


def test_the_grid_panel_shows_what_the_grid_implies(make_window, tmp_path):
    window = make_window(tiny_case(tmp_path), engine=None)
    text = window.panel["grid"].info.text()
    grid = Grid((8, 8, 8), 200.0, "Mpc/h")
    assert f"{2 * math.pi / 200.0:.4g}" in text            # k fundamental
    assert f"{math.pi * 8 / 200.0:.4g}" in text            # k Nyquist
    assert f"{grid.n_half_modes:,} stored half-spectrum modes" in text
    mem = grid.memory_estimate(chains=2, dtype="float32", n_field_draws_kept=-(-5 // 2) + 1)
    assert f"{mem.total / 2**10:.1f} KiB" in text
    assert "per gradient" in text and "Gflop/s" in text
    window.state["grid.box_size"] = [100.0, 200.0, 400.0]
    assert f"{2 * math.pi / 400.0:.4g}" in window.panel["grid"].info.text()
    # MAMS's gradients a draw: its tuned mean, 2 integration steps of 2 gradients, 8 steps with
    # P(k) sampled (the case samples the index); fixing the index updates the time at once
    window.state["sampler.algorithm"] = "mams"
    assert "per draw (16 gradients on average)" in window.panel["grid"].info.text()
    window.state.set_sampled("index", False)
    assert "per draw (4 gradients on average)" in window.panel["grid"].info.text()
    window.state["sampler.algorithm"] = "mclmc"
    assert "per draw (2 gradients)" in window.panel["grid"].info.text()


def test_the_prior_panel_plots_the_prior_and_draws_from_it(make_window, tmp_path):
    window = make_window(tiny_case(tmp_path), engine=None)
    prior = window.panel["prior"]
    k, p = prior.curve.getOriginalDataset()
    spectrum = prior.spectrum()
    assert spectrum.kind == "power_law_cutoff" and spectrum.cutoff_scale == 4.0
    np.testing.assert_allclose(p, spectrum.evaluate(k))
    assert k[0] == min(Grid((8, 8, 8), 200.0).k_fundamental)
    assert len(prior.band_lo.getOriginalDataset()[0]) == len(k)       # the index is sampled: a band
    assert not prior.editors["cutoff_scale"].isHidden()
    window.state["prior.kind"] = "power_law"
    assert prior.editors["cutoff_scale"].isHidden()
    assert prior.spectrum().kind == "power_law"
    prior.draw_from_prior()
    assert prior.last_draw.shape == (8, 8, 8)
    assert "seed" in prior.draw_caption.text() and "index = " in prior.draw_caption.text()
    window.state["prior.kind"] = "table"
    assert "prior.table" in window.errors
    table = tmp_path / "pk.txt"
    table.write_text("# k P\n0.01 100\n0.1 50\n1.0 1\n")
    window.state["prior.table"] = "pk.txt"
    assert window.errors == {}
    k, p = prior.curve.getOriginalDataset()
    np.testing.assert_allclose(np.interp(0.1, k, p), 50.0, rtol=0.05)


def test_likelihood_and_noise_choices_write_the_right_keys(make_window, qtbot, tmp_path):
    window = make_window(tiny_case(tmp_path), engine=None)
    data = window.panel["data"]
    kind = window.findChild(QComboBox, "likelihood.kind")
    kind.setCurrentIndex(kind.findData("poisson_lognormal"))
    assert data.sigma_edit.isHidden() and data.noise_combo.isHidden()
    assert not window.panel["likelihood"].mean_count.isHidden()
    assert "noise_sigma" not in window.state.document()["data"]
    kind.setCurrentIndex(kind.findData("gaussian"))
    data.noise_combo.setCurrentIndex(data.noise_combo.findData("map"))
    assert data.sigma_edit.isHidden() and not data.noise_map_combo.isHidden()
    data.noise_map_combo.setEditText("noise")
    assert window.state.document()["data"]["noise_map"] == "noise"
    assert window.errors == {}
    data.noise_map_combo.setEditText("nosie")
    assert "nosie" in message_of(window, "data.noise_map")


def test_opening_configs_that_are_wrong(make_window, tmp_path):
    config = tiny_case(tmp_path)
    window = make_window(engine=None)
    text = config.read_text().replace("num_samples = 20", "num_samples = 0")
    bad = tmp_path / "bad_value.toml"
    bad.write_text(text)
    assert window.open_config(bad)
    assert message_of(window, "sampler.num_samples").startswith("sampler.num_samples")
    broken = tmp_path / "broken.toml"
    broken.write_text("[sampler\n")
    assert not window.open_config(broken)
    title, message = window.last_message
    assert "broken.toml" in message and "TOML syntax error" in message
    assert window.state.path == bad                 # the previous config is kept
    assert window.isVisible()


def test_the_window_works_without_the_live_views(make_window, monkeypatch, tmp_path):
    """The views are imported defensively: if they break, a message takes their place."""
    from PySide6.QtWidgets import QLabel

    monkeypatch.setitem(sys.modules, "app.views", None)      # import raises ImportError
    monkeypatch.setitem(sys.modules, "app.views.live", None)  # (imported already by others)
    window = make_window(tiny_case(tmp_path), engine=None)
    assert window.views is None and isinstance(window.centralWidget(), QLabel)
    assert "app.views" in window.centralWidget().text()
    assert window.errors == {}
    window.refresh_views()                                     # a no-op, not an error


def test_an_integral_model_config_is_edited_too(make_window, tmp_path):
    from core.demo import write_demo

    paths = write_demo(tmp_path / "demo")
    window = make_window(paths["integral_config"], engine=None)
    assert window.errors == {}
    prior = window.panel["prior"]
    assert [n for n, e in prior.editors.items() if not e.isHidden()] == ["A", "c", "sigma"]
    assert not window.panel["grid"].isEnabled()
    assert "100 points" in window.panel["data"].info.text()
    window.state["prior.sigma.scale"] = -2.0
    assert window.errors["prior.sigma"].startswith("prior.sigma")
    window.state["prior.sigma.scale"] = 3.0
    out = tmp_path / "integral_copy.toml"
    assert window.save_config(out)
    saved = load_config(out)
    assert saved.prior.sigma.scale == 3.0 and saved.integral.refine == 8
