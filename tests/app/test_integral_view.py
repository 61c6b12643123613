"""IntegralView: data with the posterior predictive, parameter traces and histograms, and
the discretisation report of an integral-model run.

Runs are built without TensorFlow: a run store written with RunStoreWriter + ChunkRecord
(draws of A, c, sigma around the quadrature posterior of core.integral) or a
RunState fed with engine-shaped chunk events. References: core.integral
(predictive_mean, discretisation_report), numpy (quantiles, histograms) and scipy's
normal distribution (the predictive band's mixture quantiles).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.special import ndtr

from app.state.run_state import RunState
from app.views.integral import IntegralView, band_subset, mixture_quantiles
from core import integral as im
from core.io import save_series_csv
from core.store.run_record import zero_stats
from core.store.run_store import ChunkRecord, RunStoreWriter
from support.gui import growing_only_axes
from support.runs import view_chunk

CONFIG = """\
[model]
kind = "integral"
[data]
path = "series.csv"
[integral]
refine = {refine}
[prior]
A = {{ dist = "normal", loc = 0.0, scale = 1.0 }}
c = {c}
sigma = {sigma}
[sampler]
chains = 2
num_warmup = 20
num_samples = 150
"""
NORMAL_C = '{ dist = "normal", loc = 0.0, scale = 10.0 }'
HALFNORMAL_SIGMA = '{ dist = "halfnormal", scale = 2.0 }'


def make_series(tmp_path, n=60, seed=3):
    series = im.make_demo_series(seed, n=n)
    save_series_csv(tmp_path / "series.csv", series.t, series.y)
    return series


def spec_of(series, refine=8, c=NORMAL_C, sigma=HALFNORMAL_SIGMA):
    priors = {"A": {"dist": "normal", "loc": 0.0, "scale": 1.0},
              "c": {"dist": "normal", "loc": 0.0, "scale": 10.0} if c == NORMAL_C else float(c),
              "sigma": {"dist": "halfnormal", "scale": 2.0} if sigma == HALFNORMAL_SIGMA else float(sigma)}
    return im.IntegralModelSpec(series.t, series.y, refine=refine, priors=priors)


def posterior_like_draws(spec, names, chains, n, seed=0, widen=1.0):
    """Draws around the quadrature posterior (normal approximations of its marginals)."""
    post = im.posterior_quadrature(spec)
    rng = np.random.default_rng(seed)
    return {name: post.mean[name] + widen * post.sd[name] * rng.standard_normal((chains, n))
            for name in names}


def chunk_event(first_step, params, phase="sampling"):
    chains, n = next(iter(params.values())).shape
    return view_chunk(first_step, chains=chains, n_steps=n, phase=phase, params=params)


@pytest.fixture
def integral_view(qtbot):
    views = []

    def make(state, **kwargs):
        view = IntegralView(state, **kwargs)
        qtbot.addWidget(view)
        view.resize(1200, 800)
        views.append(view)
        return view

    yield make
    for view in views:
        view.cancel()


def wait_band(qtbot, view, n_draws, timeout=20000):
    qtbot.waitUntil(lambda: view.band is not None and view.band.n_draws == n_draws
                    and not view._band_job, timeout=timeout)


def test_stored_run_band_histograms_traces_and_report(qtbot, tmp_path, integral_view):
    series = make_series(tmp_path)
    spec = spec_of(series)
    text = CONFIG.format(refine=8, c=NORMAL_C, sigma=HALFNORMAL_SIGMA)
    names = ["A", "c", "sigma"]
    warm = posterior_like_draws(spec, names, 2, 20, seed=1, widen=5.0)
    post = posterior_like_draws(spec, names, 2, 150, seed=2)
    writer = RunStoreWriter.create(
        tmp_path / "run", config_text=text, model_kind="integral", chains=2, num_warmup=20,
        num_samples=150, thin=1, param_names=names,
        observed={"t": (["time"], series.t), "y": (["time"], series.y)})
    writer.append(ChunkRecord(warmup_stats=zero_stats(2, 20), stats=zero_stats(2, 150),
                              warmup_params=warm, params=post),
                  {"warmup_draws": 20, "draws": 150, "field_draws": 0, "chunks": 1})
    writer.set_status("finished")
    state = RunState()
    state.load_from_store(tmp_path / "run")
    view = integral_view(state, max_band_draws=1000)
    view.show()
    with qtbot.waitSignal(view.report_ready, timeout=20000):
        assert view.refresh()
    wait_band(qtbot, view, 300)
    assert view.status == "ok"
    count, loose = growing_only_axes(view)        # data, residuals, 3 traces, 3 histograms
    assert count == 4 * 8 and loose == []
    # pooled post-warmup draws, chain-major
    for name in names:
        np.testing.assert_array_equal(view.draws[name], post[name].reshape(-1))
    A, c, sigma = (post[name].reshape(-1) for name in names)
    mu = im.predictive_mean(spec, A, c)
    band = view.band
    np.testing.assert_allclose(band.mean, mu.mean(axis=0), rtol=1e-13)
    lo, hi = np.quantile(mu, [0.05, 0.95], axis=0)
    np.testing.assert_allclose(band.lo, lo, rtol=1e-13)
    np.testing.assert_allclose(band.hi, hi, rtol=1e-13)
    # the predictive band holds 5 % / 95 % of the mixture of N(mu_d, sigma_d^2)
    cdf = lambda x: np.mean(ndtr((x - mu) / sigma[:, None]), axis=0)  # noqa: E731
    np.testing.assert_allclose(cdf(band.pred_lo), 0.05, atol=1e-9)
    np.testing.assert_allclose(cdf(band.pred_hi), 0.95, atol=1e-9)
    assert np.all(band.pred_lo < band.lo) and np.all(band.pred_hi > band.hi)
    inside = np.mean((series.y >= band.pred_lo) & (series.y <= band.pred_hi))
    assert 0.75 <= inside <= 1.0                      # ~90 % of the data, as it should
    # what is drawn is what was computed
    np.testing.assert_array_equal(view.mean_curve.getData()[1], band.mean)
    np.testing.assert_array_equal(view.lo_curve.getData()[1], band.lo)
    np.testing.assert_array_equal(view.pred_hi_curve.getData()[1], band.pred_hi)
    np.testing.assert_array_equal(view.data_points.getData()[1], series.y)
    # histograms: numpy's, over the pooled post-warmup draws; traces: every step per chain
    for name in names:
        counts, edges = np.histogram(post[name].reshape(-1), bins=40)
        np.testing.assert_array_equal(view.hists[name][1], counts)
        np.testing.assert_array_equal(view.hists[name][0], edges)
        np.testing.assert_array_equal(view.hist_curves[name].getData()[1], counts)
        for chain in range(2):
            x, y = view.trace_curves[name][chain].getData()
            np.testing.assert_array_equal(x, np.arange(170))
            np.testing.assert_array_equal(y, np.concatenate([warm[name][chain], post[name][chain]]))
    # the discretisation report is core's, with its numbers
    report = im.discretisation_report(spec)
    assert view.report_text == report.format()
    for value in (report.mean_r, report.mean_2r, report.mean_exact):
        assert f"{value:.12g}" in view.report_box.toPlainText()
    line = [item for item in view._quadrature_items if hasattr(item, "value")][0]
    assert line.value() == pytest.approx(report.mean_r)
    assert "60 data points, refine 8" in view.status_label.text()
    assert "bands from 300 of 300 post-warmup draws" in view.status_label.text()
    assert not view.refresh()                          # nothing changed
    assert view.export_png(tmp_path / "integral.png")
    assert (tmp_path / "integral.png").stat().st_size > 5000


def test_live_run_with_fixed_sigma_uses_a_subset_and_follows_new_chunks(qtbot, tmp_path, integral_view):
    series = make_series(tmp_path, n=40, seed=5)
    spec = spec_of(series, refine=4, sigma="0.5")
    text = CONFIG.format(refine=4, c=NORMAL_C, sigma="0.5")
    state = RunState()
    state.reset({"chains": 2, "param_names": ["A", "c"], "num_warmup": 20, "num_samples": 150,
                 "model_kind": "integral", "grid_shape": None, "config_text": text,
                 "config_dir": str(tmp_path)})
    view = integral_view(state, max_band_draws=50)
    view.refresh()
    # no observed data in the state: the series comes from the config's file
    np.testing.assert_array_equal(view.spec.y, series.y)
    assert "fixed: sigma = 0.5" in view.status_label.text()
    warm = posterior_like_draws(spec, ["A", "c"], 2, 20, seed=3, widen=4.0)
    state.on_chunk(chunk_event(0, warm, phase="warmup"))
    view.refresh()
    assert view.band is None and "waiting for post-warmup draws" in view.data_hint.toPlainText()
    post = posterior_like_draws(spec, ["A", "c"], 2, 150, seed=4)
    for first in range(0, 150, 30):                  # chunks land faster than bands are computed
        state.on_chunk(chunk_event(20 + first, {k: v[:, first:first + 30] for k, v in post.items()}))
        view.refresh()
    wait_band(qtbot, view, 50)
    qtbot.waitUntil(lambda: not view.is_computing(), timeout=20000)
    pooled = {k: v.reshape(-1) for k, v in post.items()}
    np.testing.assert_array_equal(view.draws["A"], pooled["A"])
    # the band used 50 evenly spaced draws of all 300, first and last included
    used = view.band_draws["A"]
    assert len(used) == 50 and used[0] == pooled["A"][0] and used[-1] == pooled["A"][-1]
    index = [int(np.flatnonzero(pooled["A"] == a)[0]) for a in used]
    assert index == sorted(index) and max(np.diff(index)) - min(np.diff(index)) <= 1
    np.testing.assert_array_equal(view.band_draws["c"], pooled["c"][index])
    np.testing.assert_array_equal(view.band_draws["sigma"], np.full(50, 0.5))
    mu = im.predictive_mean(spec, used, view.band_draws["c"])
    np.testing.assert_allclose(view.band.lo, np.quantile(mu, 0.05, axis=0), rtol=1e-13)
    np.testing.assert_allclose(view.band.hi, np.quantile(mu, 0.95, axis=0), rtol=1e-13)
    cdf = np.mean(ndtr((view.band.pred_hi - mu) / 0.5), axis=0)
    np.testing.assert_allclose(cdf, 0.95, atol=1e-9)
    assert set(view.hists) == {"A", "c"} and set(view.trace_curves) == {"A", "c"}
    np.testing.assert_array_equal(view.hists["c"][1], np.histogram(pooled["c"], bins=40)[0])


def test_report_unavailable_is_said_not_raised(qtbot, tmp_path, integral_view):
    series = make_series(tmp_path)
    text = CONFIG.format(refine=8, c='{ dist = "uniform", low = -5.0, high = 5.0 }',
                         sigma=HALFNORMAL_SIGMA)
    state = RunState()
    state.reset({"chains": 2, "param_names": ["A", "c", "sigma"], "model_kind": "integral",
                 "config_text": text, "config_dir": str(tmp_path),
                 "observed": {"t": series.t, "y": series.y}})
    view = integral_view(state)
    with qtbot.waitSignal(view.report_ready, timeout=20000) as blocker:
        view.refresh()
    assert blocker.args[0].startswith("no discretisation report:")
    assert "needs c fixed or with a normal prior" in view.report_box.toPlainText()
    assert view.status == "ok"


def test_a_field_run_and_no_run(qtbot, integral_view):
    state = RunState()
    state.reset({"chains": 2, "grid_shape": (4, 4, 4), "model_kind": "field"})
    view = integral_view(state)
    view.refresh()
    assert view.status == "not integral"
    assert "not an integral-model run" in view.status_label.text()
    assert view.trace_plots == {} and view.band is None
    empty = integral_view(RunState())
    empty.refresh()
    assert empty.status == "no run" and "no integral-model run yet" in empty.status_label.text()


def test_bad_series_data_give_a_message(qtbot, tmp_path, integral_view):
    text = CONFIG.format(refine=8, c=NORMAL_C, sigma=HALFNORMAL_SIGMA)
    state = RunState()
    state.reset({"chains": 2, "param_names": ["A"], "model_kind": "integral", "config_text": text,
                 "config_dir": str(tmp_path),
                 "observed": {"t": np.array([0.0, 2.0, 1.0]), "y": np.zeros(3)}})
    view = integral_view(state)
    view.refresh()
    assert view.status == "failed"
    assert "cannot build the model" in view.status_label.text() and "strictly increasing" in \
        view.status_label.text()
    # and with neither observed data nor a readable file
    state.reset({"chains": 2, "param_names": ["A"], "model_kind": "integral", "config_text": text,
                 "config_dir": str(tmp_path / "nowhere")})
    view.refresh()
    assert view.status == "failed" and "series.csv" in view.status_label.text()


def test_mixture_quantiles_and_band_subset():
    # one component: the normal quantiles
    mu = np.array([[1.0, -2.0, 30.0]])
    got = mixture_quantiles(mu, np.array([0.7]), (0.05, 0.5, 0.95))
    np.testing.assert_allclose(got, stats.norm.ppf([[0.05], [0.5], [0.95]], loc=mu, scale=0.7), rtol=1e-10)
    # two well separated components: the 25 % quantile is the first one's median
    got = mixture_quantiles(np.array([[0.0], [100.0]]), np.array([1.0, 1.0]), (0.25,))
    assert got[0, 0] == pytest.approx(0.0, abs=1e-8)
    np.testing.assert_array_equal(band_subset(5, 10), np.arange(5))
    idx = band_subset(1000, 7)
    assert idx[0] == 0 and idx[-1] == 999 and len(idx) == 7
