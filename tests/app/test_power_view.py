"""The power-spectrum panel: its curves against core.field.power_estimator on the same fields, the
prior against the spectrum, the cosmic-variance band against a Monte Carlo of real fields,
live updates, stale results, and the fallbacks (no config, no field)."""

from __future__ import annotations

import csv
import threading
import time

import numpy as np
import pytest
from pyqtgraph.Qt import QtGui

from app.state.run_state import RunState
from app.views import power as pview
from app.views.power import PowerView, masked_data_field
from app.views.style import cubed_unit, inverse_unit
from core.field.grid import Grid
from core.field.power_estimator import measure_power, relative_error
from core.field.power_spectrum import BandPowers, PowerLaw, band_power_names
from support.configs import field_config_text
from support.runs import fake_run, feed, meta_for

GRID = (8, 6, 5)
BOX = (32.0, 30.0, 20.0)
CONFIG = field_config_text(box_size=list(BOX), unit="Mpc", prior={
    "kind": "power_law", "k_pivot": 0.2, "amplitude": 3.0,
    "index": {"dist": "normal", "loc": -1.5, "scale": 0.3}})
RTOL = 1e-6


def observed(seed=5):
    rng = np.random.default_rng(seed)
    truth = rng.normal(size=GRID)
    mask = np.ones(GRID, bool)
    mask[2:4, :, 1] = False
    data = truth + 0.5 * rng.normal(size=GRID) + 0.7       # an offset the panel subtracts
    data[~mask] = np.nan
    data[0, 0, 0] = np.nan                                 # a NaN value counts as masked
    return {"data": data, "mask": mask, "truth": truth, "noise": np.full(GRID, 0.5)}


def make_state(config_text=CONFIG, **kwargs):
    events, _ = fake_run(num_warmup=20, num_samples=40, chunk_size=12, thin=2, grid=GRID,
                         param_names=("index",), **kwargs)
    state = RunState()
    state.reset(meta_for(num_warmup=20, num_samples=40, thin=2, grid=GRID, param_names=("index",),
                         observed=observed(), config_text=config_text))
    return state, events


def shown(view, qtbot):
    qtbot.addWidget(view)
    view.resize(700, 600)
    view.show()
    qtbot.waitExposed(view)
    return view


def wait_measured(qtbot, view, field_version):
    qtbot.waitUntil(lambda: view.measured is not None and view.measured.field_version == field_version
                    and not view.job.busy, timeout=20000)


def data_of(curve):
    x, y = curve.getOriginalDataset()
    return np.asarray(x), np.asarray(y)


def check_posterior(view, state, k):
    """The spectrum's posterior: quantiles of P(k; index) over every chain's post-warmup draws."""
    assert 0 < state.n_warmup_seen < state.param("index").shape[1]
    post = state.param("index")[:, state.n_warmup_seen:].ravel().astype(np.float64)
    per_draw = 3.0 * (k[None, :] / 0.2) ** post[:, None]
    posterior = np.quantile(per_draw, [0.025, 0.16, 0.5, 0.84, 0.975], axis=0)
    np.testing.assert_allclose(view.posterior, posterior, rtol=1e-12)
    np.testing.assert_allclose(data_of(view.curves["posterior"])[1], posterior[2], rtol=1e-12)
    for width, (lo, hi) in ((95, (0, 4)), (68, (1, 3))):
        low, high, _fill = view.curves[f"posterior_{width}"]
        np.testing.assert_allclose(data_of(low)[1], posterior[lo], rtol=1e-12)
        np.testing.assert_allclose(data_of(high)[1], posterior[hi], rtol=1e-12)
    everything = state.param("index").ravel().astype(np.float64)       # warmup draws are not in it
    assert not np.allclose(np.median(3.0 * (k[None, :] / 0.2) ** everything[:, None], axis=0), posterior[2])
    return posterior


def check_export(view, tmp_path, k, counts, prior0, posterior):
    """Export: every curve as a column, the same numbers."""
    view.export_csv(tmp_path / "pk.csv")
    table = list(csv.DictReader((tmp_path / "pk.csv").open()))
    unit = view._unit()
    assert unit and f"k [{inverse_unit(unit)}]" in table[0] and f"data [{cubed_unit(unit)}]" in table[0]
    rows = [{name.split(" [")[0]: value for name, value in row.items()} for row in table]   # units in the header
    assert len(rows) == len(k)
    np.testing.assert_allclose([float(r["k"]) for r in rows], k, rtol=1e-15)
    np.testing.assert_allclose([float(r["latest_chain_1"]) for r in rows], data_of(view.curves["latest"][1])[1],
                               rtol=1e-15)
    np.testing.assert_allclose([float(r["prior_chain_0"]) for r in rows], prior0, rtol=1e-15)
    np.testing.assert_allclose([float(r["data"]) for r in rows], data_of(view.curves["data"])[1], rtol=1e-15)
    np.testing.assert_allclose([[float(r[name]) for r in rows] for name in
                                ("posterior_q2.5", "posterior_q16", "posterior_median", "posterior_q84",
                                 "posterior_q97.5")], posterior, rtol=1e-15)
    assert [int(float(r["mode_count"])) for r in rows] == list(counts)


def test_curves_equal_core_estimator_and_prior(qtbot, tmp_path):
    state, events = make_state()
    feed(state, events)
    view = shown(PowerView(state), qtbot)
    assert view.refresh()
    wait_measured(qtbot, view, state.field_version)
    grid = Grid(GRID, BOX)
    ref = measure_power(np.zeros(GRID), grid)
    k = ref.k
    # the latest draw of every chain, the running mean, the truth: core's estimator
    for c in range(2):
        x, y = data_of(view.curves["latest"][c])
        np.testing.assert_allclose(x, k, rtol=RTOL)
        np.testing.assert_allclose(y, measure_power(state.latest_field[c].astype(np.float64), grid).power,
                                   rtol=RTOL)
    np.testing.assert_allclose(data_of(view.curves["mean"])[1], measure_power(state.mean, grid).power, rtol=RTOL)
    obs = observed()
    np.testing.assert_allclose(data_of(view.curves["truth"])[1], measure_power(obs["truth"], grid).power,
                               rtol=RTOL)
    # the data: observed voxels minus their mean, zero elsewhere, divided by the observed fraction
    seen = obs["mask"] & np.isfinite(obs["data"])
    filled = np.zeros(GRID)
    filled[seen] = obs["data"][seen] - obs["data"][seen].mean()
    fraction = seen.sum() / seen.size
    np.testing.assert_allclose(data_of(view.curves["data"])[1],
                               measure_power(filled, grid).power / fraction, rtol=RTOL)
    assert f"f = {fraction:.3f}" in view.note.text()
    got_filled, got_fraction = masked_data_field(obs["data"], obs["mask"])
    np.testing.assert_allclose(got_filled, filled, atol=1e-12)
    # the noise level: <sigma^2> V / N
    np.testing.assert_allclose(data_of(view.curves["noise"])[1], 0.25 * grid.volume / grid.n_cells, rtol=1e-12)
    # the prior at each chain's latest index, the fixed amplitude from the config
    for c in range(2):
        index = state.param("index")[c, -1]
        expected = PowerLaw(amplitude=3.0, index=float(index), k_pivot=0.2).evaluate(k)
        np.testing.assert_allclose(data_of(view.curves["prior"][c])[1], expected, rtol=1e-12)
        np.testing.assert_allclose(view.prior_values[c], expected, rtol=1e-12)
        ratio = measure_power(state.latest_field[c].astype(np.float64), grid).power / expected
        np.testing.assert_allclose(data_of(view.ratio_curves[c])[1], ratio, rtol=RTOL)
    posterior = check_posterior(view, state, k)
    prior0 = view.prior_values[0]
    rel = np.sqrt(2.0 / ref.counts)
    np.testing.assert_allclose(data_of(view.curves["band_high"])[1], prior0 * (1 + rel), rtol=1e-12)
    np.testing.assert_allclose(data_of(view.curves["band_low"])[1],
                               prior0 * np.maximum(1 - rel, pview.BAND_FLOOR), rtol=1e-12)
    np.testing.assert_allclose(data_of(view.ratio_band_high)[1], 1 + rel, rtol=1e-12)
    assert not view.empty_hint.isVisible()
    check_export(view, tmp_path, k, ref.counts, prior0, posterior)
    view.export_png(tmp_path / "pk.png")
    assert QtGui.QImage(str(tmp_path / "pk.png")).width() == view.width()
    with pytest.raises(OSError, match="cannot write"):
        view.export_csv(tmp_path / "missing" / "pk.csv")


def test_the_relative_error_band_is_the_spread_of_real_gaussian_fields():
    """1 / sqrt(N_ind) = sqrt(2 / c), self-conjugate modes included, against 4000 white fields
    on an even/odd grid (every shell mixes conjugate pairs and self-conjugate modes)."""
    grid = Grid((6, 4, 5), (6.0, 4.0, 5.0))
    fields = np.random.default_rng(1).normal(size=(4000, 6, 4, 5))
    m = measure_power(fields, grid)
    spread = m.power.std(axis=0, ddof=1) / m.power.mean(axis=0)
    expected = relative_error(m.counts)
    np.testing.assert_array_equal(m.relative_error, expected)
    # the sd of a sample sd of 4000 draws is about 1.2 % (chi-square-ish shell powers)
    np.testing.assert_allclose(spread, expected, rtol=0.06)
    # counting the modes as c independent real ones (1 / sqrt(c)) would be 30 % off
    assert np.all(np.abs(spread * np.sqrt(m.counts) - 1) > 0.2)


def test_live_updates_only_when_the_fields_move(qtbot, monkeypatch):
    state, events = make_state()
    feed(state, events[:4])
    view = shown(PowerView(state), qtbot)
    view.refresh()
    wait_measured(qtbot, view, state.field_version)
    calls = []
    real = pview.measure_curves
    monkeypatch.setattr(pview, "measure_curves", lambda *a: calls.append(1) or real(*a))
    assert not view.refresh() and not view.job.busy and not calls
    first = data_of(view.curves["latest"][0])[1]
    feed(state, events[4:])
    assert view.refresh()
    wait_measured(qtbot, view, state.field_version)
    assert len(calls) == 1
    grid = Grid(GRID, BOX)
    latest = data_of(view.curves["latest"][0])[1]
    assert not np.allclose(latest, first)
    np.testing.assert_allclose(latest, measure_power(state.latest_field[0].astype(np.float64), grid).power,
                               rtol=RTOL)
    expected = PowerLaw(amplitude=3.0, index=float(state.param("index")[0, -1]), k_pivot=0.2)
    np.testing.assert_allclose(view.prior_values[0], expected.evaluate(view.measured.k), rtol=1e-12)


def test_a_stale_result_is_dropped_and_the_gui_thread_keeps_running(qtbot, monkeypatch):
    state, events = make_state()
    feed(state, events)
    release = threading.Event()
    real = pview.measure_curves
    threads = []

    def slow(*args):
        threads.append(threading.current_thread())
        if not release.is_set():
            release.wait(60)
        return real(*args)

    monkeypatch.setattr(pview, "measure_curves", slow)
    view = shown(PowerView(state), qtbot)
    t0 = time.perf_counter()
    view.refresh()
    assert time.perf_counter() - t0 < 5.0 and view.job.busy   # handed over: the work waits 60 s
    qtbot.wait(100)                                   # the event loop turns while it computes
    old_layout = state.layout_version
    other, other_events = make_state(seed=7)
    state.reset(meta_for(num_warmup=20, num_samples=40, thin=2, grid=GRID, param_names=("index",),
                         observed=observed(), config_text=CONFIG))
    feed(state, other_events)
    view.refresh()
    results = []
    view.computed.connect(lambda: results.append(view.measured.layout))
    release.set()
    wait_measured(qtbot, view, state.field_version)
    assert threading.main_thread() not in threads
    assert results and all(layout == state.layout_version != old_layout for layout in results)
    grid = Grid(GRID, BOX)
    np.testing.assert_allclose(data_of(view.curves["latest"][1])[1],
                               measure_power(state.latest_field[1].astype(np.float64), grid).power, rtol=RTOL)


def test_without_config_the_engine_power_is_shown(qtbot):
    state, events = make_state(config_text="")
    state.k_centres = np.array([0.1, 0.2, 0.3])
    feed(state, events)
    view = shown(PowerView(state), qtbot)
    view.refresh()
    qtbot.wait(50)
    assert view.measured is None and not view.job.busy
    for c in range(2):
        x, y = data_of(view.curves["latest"][c])
        np.testing.assert_array_equal(x, state.k_centres)
        np.testing.assert_array_equal(y, state.latest_power[c])
    assert "box size unknown" in view.note.text()
    assert not view.curves["prior"][0].isVisible()


def test_hints_before_draws_and_without_a_field(qtbot, tmp_path):
    state, events = make_state()
    view = shown(PowerView(state), qtbot)
    view.refresh()
    wait_measured(qtbot, view, state.field_version)      # the data and truth, no draw yet
    assert view.empty_hint.isVisible()
    assert "waiting for the first field draw" in view.empty_hint.textItem.toPlainText()
    assert "waiting for the first draw of the hyperparameters" in view.note.text()
    assert view.curves["data"].isVisible() and not view.curves["prior"][0].isVisible()
    integral = RunState()
    integral.reset({"chains": 2, "param_names": ["A"], "model_kind": "integral"})
    iview = shown(PowerView(integral), qtbot)
    iview.refresh()
    assert "no field" in iview.empty_hint.textItem.toPlainText()
    # a prior table that is not there: said in the note, the rest still drawn
    table_config = CONFIG.split("[prior]")[0] + '[prior]\nkind = "table"\ntable = "nope.txt"\n'
    bad = RunState()
    bad.reset(meta_for(grid=GRID, param_names=(), config_text=table_config, config_dir=str(tmp_path)))
    assert bad.config is not None and bad.config.prior.kind == "table"
    bview = shown(PowerView(bad), qtbot)
    bview.refresh()
    assert "nope.txt" in bview.note.text() and "prior table" in bview.note.text()


def test_the_band_skips_shells_where_the_prior_underflows_to_zero(qtbot):
    # a cutoff far below the grid's scales: exp(-(k c)^2) is 0 in float64 at the high shells
    # (as the demo's cutoff is on a 256^3 grid); the band is drawn where the prior is positive
    text = field_config_text(box_size=list(BOX), unit="Mpc", prior={
        "kind": "power_law_cutoff", "k_pivot": 0.2, "amplitude": 3.0, "cutoff_scale": 60.0,
        "index": {"dist": "normal", "loc": -1.5, "scale": 0.3}})
    state, events = make_state(text)
    feed(state, events)
    view = shown(PowerView(state), qtbot)
    view.refresh()
    wait_measured(qtbot, view, state.field_version)
    prior = view.prior_values[0]
    k = view.measured.k
    assert (prior == 0).any() and (prior > 0).any()           # the case this test is about
    kk, low = view.curves["band_low"].getOriginalDataset()
    positive = (k > 0) & (prior > 0)
    np.testing.assert_allclose(kk, k[positive])
    rel = relative_error(view.measured.counts)[positive]
    np.testing.assert_allclose(low, prior[positive] * np.maximum(1 - rel, pview.BAND_FLOOR), rtol=1e-12)


def test_posterior_quantiles_against_exact_ones_and_per_band():
    # a power law whose index is normal: log P(k) is normal, its quantiles exact
    rng = np.random.default_rng(4)
    k = np.array([0.05, 0.1, 0.4, 1.0, np.nan])
    spectrum = PowerLaw(amplitude=3.0, index=-1.5, k_pivot=0.2)
    draws = rng.normal(-1.5, 0.3, size=50_000)                 # thinned to POSTERIOR_DRAWS
    got = pview.posterior_quantiles(spectrum, k, {"index": draws})
    from scipy.stats import norm

    log_ratio = np.log(k[:4] / 0.2)
    z = norm.ppf(pview.POSTERIOR_QUANTILES)[:, None]
    exact = np.log(3.0) - 1.5 * log_ratio + z * 0.3 * np.abs(log_ratio)
    sd_of_quantile = 0.3 * np.abs(log_ratio) * 0.06                # ~2.5 / sqrt(2000) of sd at 2.5 %
    assert np.all(np.abs(np.log(got[:, :4]) - exact) < 3 * sd_of_quantile + 1e-9)
    assert np.all(np.isnan(got[:, 4]))
    # band powers: at a k in bin b, the quantiles of that bin's draws
    bands = BandPowers(edges=(0.03, 0.15, 0.3, 2.0), powers=(1.0, 2.0, 3.0))
    names = band_power_names(3)
    draws = {name: rng.lognormal(b, 0.5, size=300) for b, name in enumerate(names)}
    got = pview.posterior_quantiles(bands, k[:4], draws)
    for j, b in enumerate(bands.bin_index(k[:4])):
        np.testing.assert_allclose(got[:, j], np.quantile(draws[names[b]], pview.POSTERIOR_QUANTILES),
                                   rtol=1e-12)


def test_a_band_powers_run_shows_each_bins_posterior(qtbot, tmp_path):
    # a finished store whose prior is 4 band powers, edges from the grid (none in the config)
    from core.field.power_spectrum import band_edges
    from support.sampled_runs import FIELD_BOX, FIELD_SHAPE, field_run

    state = RunState()
    state.load_from_store(field_run(tmp_path / "bands", bands=4))
    view = shown(PowerView(state), qtbot)
    view.refresh()
    wait_measured(qtbot, view, state.field_version)
    assert view._spectrum_error == "" and view.posterior is not None
    k = view._k()
    edges = band_edges(Grid(FIELD_SHAPE, FIELD_BOX).k_magnitude_full(), 4)
    bins = BandPowers(tuple(edges), (1.0,) * 4).bin_index(k)
    for j, b in enumerate(bins):
        draws = state.param(band_power_names(4)[b])[:, state.n_warmup_seen:].ravel()
        np.testing.assert_allclose(view.posterior[:, j], np.quantile(draws, pview.POSTERIOR_QUANTILES),
                                   rtol=1e-12)
    assert len(set(bins)) == 4                       # every bin has shells
    np.testing.assert_allclose(data_of(view.curves["posterior"])[1], view.posterior[2], rtol=1e-12)
