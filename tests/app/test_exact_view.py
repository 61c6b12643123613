"""ExactComparisonView: the Wiener posterior from core.reference.field_posterior next to the HMC running moments.

Runs are built without TensorFlow: a run store written with RunStoreWriter (observed
data, config text, field moments) or RunState fed with engine-shaped chunk events. The
references are core.reference.field_posterior itself (the view must show exactly its arrays) and numpy
(z-scores, histogram, summary numbers).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from app.state.run_state import RunState
from app.views.exact import ExactComparisonView, compare_moments, nice_limit
from app.views.slices import slice_of
from core.config import parse_config
from core.reference.field_posterior import exact_posterior_for_config
from core.store.run_record import zero_stats
from core.store.run_store import ChunkRecord, RunStoreWriter
from support.runs import view_chunk

CONFIG = """\
[model]
kind = "field"
[data]
path = "data.npz"
noise_map = "noise"
mask = "mask"
[grid]
box_size = 60.0
[prior]
kind = "power_law"
k_pivot = 0.2
amplitude = 300.0
index = {index}
[likelihood]
kind = "{likelihood}"
smoothing_scale = 4.0
field_mean = 0.5
[sampler]
chains = 2
num_warmup = 10
num_samples = 100
"""


def make_case(tmp_path, shape=(8, 8, 6), index="-1.5", likelihood="gaussian", seed=0):
    """A config and the store-format observed data (data NaN where masked)."""
    rng = np.random.default_rng(seed)
    data = rng.normal(size=shape) + 0.5
    mask = rng.random(shape) > 0.2
    noise = rng.uniform(0.4, 0.8, size=shape)
    np.savez(tmp_path / "data.npz", data=data, mask=mask, noise=noise)
    text = CONFIG.format(index=index, likelihood=likelihood)
    if likelihood != "gaussian":
        text = text.replace('noise_map = "noise"\n', "").replace(
            'kind = "poisson_lognormal"', 'kind = "poisson_lognormal"\nmean_count = 2.0')
    observed = {"data": np.where(mask, data, np.nan), "mask": mask, "noise": np.where(mask, noise, 1.0)}
    return text, observed


def hmc_like_moments(exact, count, seed=1):
    """Moments as a sampler that is right would have them: mean off by ~std/sqrt(count)."""
    rng = np.random.default_rng(seed)
    mean = exact.mean + exact.std * rng.normal(size=exact.mean.shape) / np.sqrt(count)
    std = exact.std * (1 + 0.05 * rng.normal(size=exact.std.shape))
    return mean, std


def chunk_event(first_step, moments, chains=2):
    return view_chunk(first_step, chains=chains, moments=moments)


def state_for(text, tmp_path, observed, shape):
    state = RunState()
    state.reset({"chains": 2, "grid_shape": shape, "num_warmup": 10, "num_samples": 100, "thin": 1,
                 "model_kind": "field", "config_text": text, "config_dir": str(tmp_path),
                 "observed": observed})
    return state


def write_store(run_dir, text, observed, shape):
    # room for two chunks of 100 draws (the reader refuses progress beyond num_samples)
    writer = RunStoreWriter.create(
        run_dir, config_text=text, model_kind="field", chains=2, num_warmup=0, num_samples=200,
        thin=1, param_names=[], observed={name: (["x", "y", "z"], v) for name, v in observed.items()},
        grid_shape=shape, k_centres=[0.1, 0.2], k_counts=[6, 12])
    writer.set_status("running")
    return writer


def append_moments(writer, draws_before, n, moments):
    stats = zero_stats(2, n)
    writer.append(ChunkRecord(warmup_stats={}, stats=stats, warmup_params={}, params={},
                              moments=moments),
                  {"warmup_draws": 0, "draws": draws_before + n, "field_draws": 0, "chunks": 1})


@pytest.fixture
def exact_view(qtbot):
    views = []

    def make(state, **kwargs):
        view = ExactComparisonView(state, **kwargs)
        qtbot.addWidget(view)
        view.resize(1100, 750)
        views.append(view)
        return view

    yield make
    for view in views:
        view.cancel()


def wait_ready(qtbot, view, timeout=20000):
    view.refresh()
    qtbot.waitUntil(lambda: view.status in ("ready", "failed"), timeout=timeout)
    assert view.status == "ready", view.reason


def test_view_shows_core_exact_and_the_z_scores_of_a_stored_run(qtbot, tmp_path, exact_view):
    shape = (8, 8, 6)
    text, observed = make_case(tmp_path, shape)
    exact = exact_posterior_for_config(parse_config(text, base_dir=tmp_path), observed)
    writer = write_store(tmp_path / "run", text, observed, shape)
    mean, std = hmc_like_moments(exact, 200)
    append_moments(writer, 0, 100, (mean, std, 200))
    state = RunState()
    state.load_from_store(tmp_path / "run")
    view = exact_view(state)
    view.show()
    wait_ready(qtbot, view)
    # the Wiener arrays are core.reference.field_posterior's, exactly (dense std at 384 cells)
    assert view.exact.std_method == "exact"
    np.testing.assert_array_equal(view.exact.mean, exact.mean)
    np.testing.assert_array_equal(view.exact.std, exact.std)
    mid = shape[2] // 2
    np.testing.assert_array_equal(view.images["wiener_mean"].image,
                                  slice_of(exact.mean, 0, mid).astype(np.float32))
    np.testing.assert_array_equal(view.images["wiener_std"].image,
                                  slice_of(exact.std, 0, mid).astype(np.float32))
    np.testing.assert_array_equal(view.images["hmc_mean"].image, slice_of(mean, 0, mid).astype(np.float32))
    # the difference map is (HMC mean - Wiener mean) / Wiener std
    z = (mean - exact.mean) / exact.std
    np.testing.assert_allclose(view.comparison.z, z, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(view.images["z"].image, slice_of(z, 0, mid), rtol=1e-6, atol=1e-6)
    # the histogram is numpy's over every voxel, on edges symmetric about 0
    edges = view.hist_edges
    assert edges[0] == -edges[-1] and len(edges) == 61
    np.testing.assert_array_equal(view.hist_counts, np.histogram(z, bins=edges)[0])
    np.testing.assert_array_equal(view.hist_curve.getData()[1], view.hist_counts)
    # the range is the 1-2-5 value above the 99th percentile of |z|: a few voxels may be beyond
    assert edges[-1] == nice_limit(np.percentile(np.abs(z), 99))
    outside = int(np.sum(np.abs(z) > edges[-1]))
    assert view.hist_counts.sum() + outside == z.size
    # summary numbers
    assert view.comparison.rms_z == pytest.approx(np.sqrt(np.mean(z**2)), rel=1e-12)
    assert view.comparison.median_std_ratio == pytest.approx(np.median(std / exact.std), rel=1e-12)
    text_shown = view.summary_label.text()
    assert f"RMS z = {np.sqrt(np.mean(z**2)):.3g}" in text_shown
    assert f"median HMC std / Wiener std = {np.median(std / exact.std):.3f}" in text_shown
    assert (f"({outside} outside the histogram)" in text_shown) == (outside > 0)
    # a sampler that is right: RMS z ~ 1/sqrt(200)
    assert 0.5 / np.sqrt(200) < view.comparison.rms_z < 2 / np.sqrt(200)
    # another plane through the slider and combo
    view.set_plane(2, index=3)
    np.testing.assert_array_equal(view.images["wiener_mean"].image,
                                  slice_of(exact.mean, 2, 3).astype(np.float32))
    # live: a new chunk with new moments redraws z; no change, no redraw
    assert not view.refresh()
    mean2, std2 = hmc_like_moments(exact, 400, seed=7)
    append_moments(writer, 100, 100, (mean2, std2, 400))
    assert state.refresh_from_store(), state.error
    assert view.refresh()
    np.testing.assert_allclose(view.comparison.z, (mean2 - exact.mean) / exact.std, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(view.exact.mean, exact.mean)      # not recomputed
    assert view.export_png(tmp_path / "exact.png")
    assert (tmp_path / "exact.png").stat().st_size > 5000


def test_sampled_std_arrives_in_batches_and_equals_core_exact(qtbot, tmp_path, exact_view):
    shape = (16, 16, 17)                          # 4352 cells, masked: a Monte-Carlo std
    text, observed = make_case(tmp_path, shape)
    state = state_for(text, tmp_path, observed, shape)
    view = exact_view(state, n_samples=6, batch=2)
    reports = []
    view.exact_ready.connect(lambda: reports.append(None if view.exact.std is None else view.exact.n_samples))
    assert view.refresh()
    assert view.status == "computing" and "computing the exact posterior" in view.status_label.text()
    wait_ready(qtbot, view)
    assert reports == [None, 2, 4, 6]
    exact = exact_posterior_for_config(parse_config(text, base_dir=tmp_path), observed, n_samples=6, batch=2)
    np.testing.assert_array_equal(view.exact.std, exact.std)
    np.testing.assert_array_equal(view.exact.mean, exact.mean)
    assert "6 exact posterior draws" in view.status_label.text()
    # no moments yet: Wiener panels drawn, HMC panels and histogram empty with a note
    assert view.images["wiener_std"].image is not None and view.images["hmc_mean"].image is None
    assert view.comparison is None and "waiting for post-warmup draws" in view.summary_label.text()
    mean, std = hmc_like_moments(exact, 50)
    state.on_chunk(chunk_event(10, (mean.astype(np.float32), std.astype(np.float32), 50)))
    assert view.refresh()
    z = (mean.astype(np.float32) - exact.mean) / exact.std
    np.testing.assert_allclose(view.comparison.z, z, rtol=1e-12)
    np.testing.assert_array_equal(view.hist_counts, np.histogram(z, bins=view.hist_edges)[0])
    assert "Wiener std from 6 exact draws" in view.summary_label.text()


def test_results_of_a_superseded_run_are_discarded(qtbot, tmp_path, exact_view):
    shape = (16, 16, 17)
    text, observed = make_case(tmp_path, shape)
    state = state_for(text, tmp_path, observed, shape)
    view = exact_view(state, n_samples=100_000, batch=2)      # far longer than this test
    view.refresh()
    first_job = view._job
    qtbot.waitUntil(lambda: view.exact is not None and view.exact.n_samples >= 4, timeout=20000)
    assert first_job.thread.is_alive() and view.status == "computing"
    # a new run (another prior) replaces it before it finishes
    text_b = text.replace("amplitude = 300.0", "amplitude = 100.0")
    state.reset({"chains": 2, "grid_shape": shape, "model_kind": "field", "config_text": text_b,
                 "config_dir": str(tmp_path), "observed": observed})
    view.n_samples = 4
    wait_ready(qtbot, view)
    first_job.thread.join(timeout=20)
    assert not first_job.thread.is_alive()                       # it stopped at its next batch
    qtbot.wait(100)                                              # anything it emitted is delivered
    expected = exact_posterior_for_config(parse_config(text_b, base_dir=tmp_path), observed,
                                          n_samples=4, batch=2)
    np.testing.assert_array_equal(view.exact.mean, expected.mean)
    np.testing.assert_array_equal(view.exact.std, expected.std)


def test_closing_or_deleting_the_view_stops_its_computation(qtbot, tmp_path):
    shape = (16, 16, 17)
    text, observed = make_case(tmp_path, shape)
    state = state_for(text, tmp_path, observed, shape)
    view = ExactComparisonView(state, n_samples=100_000, batch=2)
    view.refresh()
    job = view._job
    qtbot.waitUntil(lambda: view.exact is not None, timeout=20000)
    view.deleteLater()
    qtbot.waitUntil(lambda: job.cancelled.is_set(), timeout=5000)
    job.thread.join(timeout=20)
    assert not job.thread.is_alive()


@pytest.mark.parametrize("index,likelihood,message", [
    ('{ dist = "normal", loc = -1.5, scale = 0.3 }', "gaussian", "index is sampled"),
    ("-1.5", "poisson_lognormal", "not Gaussian"),
])
def test_non_gaussian_runs_show_the_reason(qtbot, tmp_path, exact_view, index, likelihood, message):
    text, observed = make_case(tmp_path, index=index, likelihood=likelihood)
    state = state_for(text, tmp_path, observed, (8, 8, 6))
    view = exact_view(state)
    assert view.refresh()
    assert view.status == "not applicable" and not view.is_computing()
    assert "Exact comparison not available" in view.status_label.text()
    assert message in view.status_label.text()
    assert all(image.image is None for image in view.images.values())
    assert view.export_png(tmp_path / "na.png")


def test_integral_and_empty_runs(qtbot, tmp_path, exact_view):
    state = RunState()
    state.reset({"chains": 2, "param_names": ["A"], "model_kind": "integral", "grid_shape": None,
                 "config_text": '[model]\nkind = "integral"\n[data]\npath = "s.csv"\n'})
    view = exact_view(state)
    view.refresh()
    assert view.status == "not applicable" and "integral-model run" in view.status_label.text()
    empty = exact_view(RunState())
    empty.refresh()
    assert empty.status == "no run" and "no field run yet" in empty.status_label.text()


def test_bad_data_report_a_failure_not_a_traceback(qtbot, tmp_path, exact_view):
    shape = (8, 8, 6)
    text, observed = make_case(tmp_path, shape)
    observed["mask"] = np.zeros(shape, bool)
    state = state_for(text, tmp_path, observed, shape)
    view = exact_view(state)
    with qtbot.waitSignal(view.exact_failed, timeout=10000) as blocker:
        view.refresh()
    assert "every voxel is masked" in blocker.args[0]
    assert view.status == "failed" and "could not be computed" in view.status_label.text()


def test_compare_moments_and_nice_limit():
    rng = np.random.default_rng(0)
    wm, ws = rng.normal(size=(3, 4, 5)), rng.uniform(0.5, 1.0, size=(3, 4, 5))
    hm, hs = wm + 0.1 * ws, 1.1 * ws
    c = compare_moments(hm, hs, wm, ws)
    np.testing.assert_allclose(c.z, 0.1)
    assert c.rms_z == pytest.approx(0.1) and c.median_std_ratio == pytest.approx(1.1)
    assert c.equivalent_draws == pytest.approx(100.0)
    assert [nice_limit(v) for v in (0.03, 0.1, 0.11, 0.3, 0.7, 3.2, 0.0, float("nan"))] == \
        [0.05, 0.1, 0.2, 0.5, 1.0, 5.0, 1.0, 1.0]


def test_the_views_import_no_tensorflow():
    code = ("import sys, app.views.exact, app.views.integral, core.reference.field_posterior; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'tensorflow_probability', 'tf_keras')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def _assert_panes_show_the_slice(view, extent):
    """Every image pane's range is the slice (within a screen pixel), with square voxels."""
    width, height = extent
    for key, plot in view.plots.items():
        vb = plot.getViewBox()
        assert vb.state["aspectLocked"], key
        (x0, x1), (y0, y1) = vb.viewRange()
        pixel = max(width / vb.width(), height / vb.height())      # data units per screen pixel
        for got, want in ((x0, 0), (x1, width), (y0, 0), (y1, height)):
            assert abs(got - want) <= pixel, (key, vb.viewRange(), extent, vb.width(), vb.height())


def _wait_panes(qtbot, view, extent, timeout=5000):
    """The panes are re-fitted from a zero-delay timer after a resize (and Qt lays them out
    first): wait for it (a loaded machine takes longer than 50 ms), then check."""
    def fitted():
        try:
            _assert_panes_show_the_slice(view, extent)
            return True
        except AssertionError:
            return False

    try:
        qtbot.waitUntil(fitted, timeout=timeout)
    except Exception:
        pass
    _assert_panes_show_the_slice(view, extent)          # with the message if it never fitted


def test_image_panes_fill_with_the_slice_at_its_aspect_after_resizes_and_plane_changes(qtbot, tmp_path,
                                                                                        exact_view):
    """The panes used to show a 32-voxel slice small inside -20..60 axes: the view range is
    now the slice, aspect locked, re-fitted when the view is resized or the slice changes."""
    shape = (16, 16, 6)
    text, observed = make_case(tmp_path, shape)
    view = exact_view(state_for(text, tmp_path, observed, shape))
    view.show()
    qtbot.waitExposed(view)
    view.refresh()
    _wait_panes(qtbot, view, (16, 16))
    for size in ((700, 900), (1400, 500)):               # taller than wide, then wide and low
        view.resize(*size)
        _wait_panes(qtbot, view, (16, 16))
    view.set_plane(1)                                    # xz: 16 x 6 voxels
    _wait_panes(qtbot, view, (16, 6))
    view.resize(800, 800)
    _wait_panes(qtbot, view, (16, 6))
