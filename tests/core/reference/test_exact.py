"""core.reference.field_posterior: the Wiener posterior of the field a run stores, against dense references.

Two independent references on tiny grids: the TF model's own dense posterior (the
engine's FieldModel: its field map as a matrix applied to basis latents, then Gaussian
conditioning by hand), and core.reference.wiener.dense_posterior of the unsmoothed field s with
the beam as an explicit matrix applied afterwards (core.reference.field_posterior folds the beam into the
prior instead).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.fft
import tensorflow as tf

from core.config import parse_config
from core.field.grid import Grid
from core.field.power_spectrum import PowerLaw
from core.reference.field_posterior import (
    ExactNotApplicable,
    exact_not_applicable,
    exact_posterior_for_config,
    stored_field_mode_variance,
)
from core.reference.wiener import dense_posterior

FIELD = """\
[model]
kind = "field"
[data]
path = "data.npz"
key = "data"
{noise}
{mask}
[grid]
box_size = [40.0, 36.0, 44.0]
[prior]
{prior}
[likelihood]
kind = "gaussian"
smoothing_scale = {beam}
field_mean = {field_mean}
[field]
dtype = "float64"
"""
POWER_LAW = 'kind = "power_law"\nk_pivot = 0.2\namplitude = 200.0\nindex = -1.2'


def write_case(tmp_path, shape=(4, 3, 6), *, mask=True, noise_map=True, beam=6.0, field_mean=0.3,
               prior=POWER_LAW, seed=0, extra=None):
    rng = np.random.default_rng(seed)
    arrays = {"data": rng.normal(size=shape) * 2.0, "noise": rng.uniform(0.5, 1.5, size=shape),
              "mask": rng.random(shape) > 0.3, **(extra or {})}
    np.savez(tmp_path / "data.npz", **arrays)
    text = FIELD.format(noise='noise_map = "noise"' if noise_map else "noise_sigma = 0.8",
                        mask='mask = "mask"' if mask else "", prior=prior, beam=beam,
                        field_mean=field_mean)
    return parse_config(text, base_dir=tmp_path), arrays


def tf_dense_posterior(cfg):
    """Mean and std of the stored field by conditioning the TF model's linear map by hand."""
    from core.engine.models import FieldModel

    model = FieldModel(cfg)
    post, obs = model.posterior, model.observations
    n = post.grid.n_cells
    basis = tf.reshape(tf.eye(n, dtype=tf.float64), (n, *post.grid.shape))
    a = tf.reshape(model.field([basis]), (n, n)).numpy().T - obs.field_mean   # x = a u + mean
    m = obs.mask.reshape(-1)
    noise_var = obs.noise.reshape(-1)[m] ** 2
    d = obs.data.reshape(-1)[m] - obs.field_mean
    precision = np.eye(n) + a[m].T @ (a[m] / noise_var[:, None])
    cov_u = np.linalg.inv(precision)
    mean = a @ (cov_u @ (a[m].T @ (d / noise_var))) + obs.field_mean
    std = np.sqrt(np.diag(a @ cov_u @ a.T))
    return mean.reshape(post.grid.shape), std.reshape(post.grid.shape), model


@pytest.mark.parametrize("case", [
    dict(),                                                   # mask, noise map, beam, field mean
    dict(mask=False, noise_map=False, beam=0.0),              # the closed form
    dict(mask=False, noise_map=False, beam=5.0, shape=(4, 4, 4)),
    dict(noise_map=False, beam=0.0, field_mean=-1.5, shape=(5, 4, 3)),
    dict(prior='kind = "power_law_cutoff"\nk_pivot = 0.2\namplitude = 300.0\nindex = -1.0\n'
               "cutoff_scale = 3.0"),
])
def test_exact_posterior_equals_the_tf_models_dense_posterior(tmp_path, case):
    cfg, _ = write_case(tmp_path, **case)
    mean, std, model = tf_dense_posterior(cfg)
    exact = exact_posterior_for_config(cfg, tol=1e-13)
    scale = np.abs(mean).max()
    np.testing.assert_allclose(exact.mean, mean, atol=1e-9 * scale)
    np.testing.assert_allclose(exact.std, std, rtol=1e-9)
    expected_mean = "closed_form" if not case.get("mask", True) and not case.get("noise_map", True) \
        else "cg"
    assert exact.mean_method == expected_mean
    assert exact.std_method == ("closed_form" if expected_mean == "closed_form" else "exact")
    # the stored observed data (NaN where masked) give the same posterior as the files
    observed = {name: np.asarray(values) for name, (_, values) in model.observed.items()}
    from_store = exact_posterior_for_config(cfg, observed, tol=1e-13)
    np.testing.assert_allclose(from_store.mean, exact.mean, atol=1e-12 * scale)
    np.testing.assert_allclose(from_store.std, exact.std, rtol=1e-12)


def test_exact_posterior_equals_wiener_dense_posterior_with_an_explicit_beam(tmp_path):
    cfg, arrays = write_case(tmp_path, shape=(4, 4, 6), beam=7.0, field_mean=0.7)
    exact = exact_posterior_for_config(cfg, tol=1e-13)
    grid = Grid((4, 4, 6), (40.0, 36.0, 44.0))
    k = grid.k_magnitude_half()
    spectrum = PowerLaw(amplitude=200.0, index=-1.2, k_pivot=0.2)
    s = np.where(k > 0, spectrum.evaluate(np.where(k > 0, k, 1.0)) * grid.n_cells**2 / grid.volume, 0.0)
    beam = np.exp(-0.5 * (k * 7.0) ** 2)
    mask = arrays["mask"]
    dense = dense_posterior(np.where(mask, arrays["data"] - 0.7, 0.0), s, arrays["noise"], mask, beam)
    # the stored field is B s + mean: apply B as a matrix (columns: B of unit impulses)
    n = grid.n_cells
    impulses = np.eye(n).reshape(n, *grid.shape)
    b = scipy.fft.irfftn(scipy.fft.rfftn(impulses, axes=(1, 2, 3)) * beam, s=grid.shape,
                         axes=(1, 2, 3)).reshape(n, n).T
    mean = b @ dense.mean.reshape(-1) + 0.7
    std = np.sqrt(np.diag(b @ dense.covariance @ b.T))
    np.testing.assert_allclose(exact.mean.reshape(-1), mean, atol=1e-9 * np.abs(mean).max())
    np.testing.assert_allclose(exact.std.reshape(-1), std, rtol=1e-8)
    # the posterior mean's spatial average is the fixed field mean (k = 0 mode not sampled)
    assert exact.mean.mean() == pytest.approx(0.7, abs=1e-12)


def test_mode_variance_includes_the_squared_beam(tmp_path):
    cfg, _ = write_case(tmp_path, shape=(4, 4, 4), beam=5.0)
    grid = Grid((4, 4, 4), (40.0, 36.0, 44.0))
    k = grid.k_magnitude_half()
    spectrum = PowerLaw(amplitude=200.0, index=-1.2, k_pivot=0.2)
    expected = np.where(k > 0, spectrum.evaluate(np.where(k > 0, k, 1.0)) * 64**2 / grid.volume
                        * np.exp(-(5.0 * k) ** 2), 0.0)
    np.testing.assert_allclose(stored_field_mode_variance(cfg, (4, 4, 4)), expected, rtol=1e-14)


def test_sampled_std_converges_to_the_exact_std_and_reports_progress(tmp_path):
    cfg, _ = write_case(tmp_path, shape=(8, 8, 8), beam=4.0)
    exact = exact_posterior_for_config(cfg, std="exact")
    reports = []
    sampled = exact_posterior_for_config(cfg, std="sample", n_samples=600, batch=200, seed=3,
                                         on_progress=reports.append)
    assert sampled.std_method == "sample" and sampled.n_samples == 600
    assert sampled.std_rel_error == pytest.approx(1 / np.sqrt(1200))
    np.testing.assert_allclose(sampled.mean, exact.mean, atol=1e-7 * np.abs(exact.mean).max())
    ratio = sampled.std / exact.std
    # per voxel the relative error is ~ 1/sqrt(2 n) = 2.9 %
    assert abs(ratio.mean() - 1) < 0.02 and np.abs(ratio - 1).max() < 6 * sampled.std_rel_error
    assert [r.n_samples for r in reports] == [0, 200, 400]
    assert reports[0].std is None and "computing" in reports[0].describe()
    np.testing.assert_array_equal(reports[0].mean, sampled.mean)
    # batches are seeded in order: the first batches do not depend on n_samples
    short = exact_posterior_for_config(cfg, std="sample", n_samples=200, batch=200, seed=3)
    np.testing.assert_array_equal(short.std, reports[1].std)


def test_a_progress_callback_can_abandon_the_computation(tmp_path):
    cfg, _ = write_case(tmp_path, shape=(8, 8, 8))

    class Stop(Exception):
        pass

    def stop(partial):
        raise Stop

    with pytest.raises(Stop):
        exact_posterior_for_config(cfg, std="sample", n_samples=8, on_progress=stop)


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.replace("index = -1.2", 'index = { dist = "normal", loc = -1.2, scale = 0.3 }'),
     r"index is sampled: the posterior is a mixture"),
    (lambda t: t.replace("amplitude = 200.0\nindex = -1.2",
                         'amplitude = { dist = "lognormal", loc = 5.0, scale = 0.3 }\n'
                         'index = { dist = "normal", loc = -1.2, scale = 0.3 }'),
     r"amplitude, index are sampled"),
    (lambda t: t.replace('k_pivot = 0.2\namplitude = 200.0\nindex = -1.2', 'n_bins = 3\n'
                         'band_power = { dist = "lognormal", loc = 5.0, scale = 1.0 }')
     .replace('kind = "power_law"', 'kind = "band_powers"'),
     r"the band powers are sampled: the posterior is a mixture"),
    (lambda t: t.replace('kind = "gaussian"', 'kind = "poisson_lognormal"\nmean_count = 2.0')
     .replace('noise_map = "noise"', ""),
     r"'poisson_lognormal' \(Poisson counts\), not Gaussian"),
])
def test_non_gaussian_configs_say_why(tmp_path, edit, message):
    cfg, _ = write_case(tmp_path)
    text = edit(FIELD.format(noise='noise_map = "noise"', mask='mask = "mask"', prior=POWER_LAW,
                             beam=0.0, field_mean=0.0))
    cfg = parse_config(text, base_dir=tmp_path)
    assert exact_not_applicable(cfg) is not None
    with pytest.raises(ExactNotApplicable, match=message):
        exact_posterior_for_config(cfg)


def test_the_integral_model_is_not_applicable(tmp_path):
    cfg = parse_config('[model]\nkind = "integral"\n[data]\npath = "s.csv"\n', base_dir=tmp_path)
    with pytest.raises(ExactNotApplicable, match="not a field run"):
        exact_posterior_for_config(cfg)


def test_bad_observed_data_give_clear_errors(tmp_path):
    cfg, arrays = write_case(tmp_path)
    with pytest.raises(ValueError, match="every voxel is masked"):
        exact_posterior_for_config(cfg, {"data": arrays["data"], "mask": np.zeros((4, 3, 6), bool),
                                         "noise": arrays["noise"]})
    with pytest.raises(ValueError, match="3-D"):
        exact_posterior_for_config(cfg, {"data": np.zeros((4, 3))})


def test_core_exact_imports_no_tensorflow():
    code = "import sys, core.reference.field_posterior; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"
