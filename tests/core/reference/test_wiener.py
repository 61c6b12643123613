"""Tests for core.reference.wiener against a dense posterior built here, independently.

The reference builds the explicit DFT matrix E (E[k, i] = exp(-2 pi i k.x_i / n), a
double loop over full-grid modes k and voxels x_i), the full-grid spectra by explicit
Hermitian extension of the half grid, the prior covariance from its definition
Cov(E s) = diag(S)  =>  C = (1/N^2) E^H diag(S) E, the beam B = (1/N) E^H diag(B_k) E,
and then the posterior two ways: (a) the precision form restricted to an orthonormal
basis Q of the space orthogonal to the constant mode (pseudo-inverse of C), (b) the
data-space (Kalman) form C B^T (B C B^T + N_noise)^-1 on the observed voxels.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from core.reference import wiener
from core.reference.wiener import dense_posterior, posterior_samples, wiener_mean_closed_form, wiener_posterior

REPO = Path(__file__).resolve().parents[3]


# --------------------------------------------------------------------------- reference


def half_shape(shape):
    return (shape[0], shape[1], shape[2] // 2 + 1)


def kgrid_half(shape):
    """Integer-frequency |k| on the half grid (cycles per grid, numpy fftfreq convention)."""
    k0 = np.fft.fftfreq(shape[0]) * shape[0]
    k1 = np.fft.fftfreq(shape[1]) * shape[1]
    k2 = np.fft.rfftfreq(shape[2]) * shape[2]
    kk = np.meshgrid(k0, k1, k2, indexing="ij")
    return np.sqrt(sum(k**2 for k in kk))


def power_law_mode_variance(shape, amplitude=1.0, slope=-2.0):
    """S_k = amplitude * N * |k|^slope, S_0 = 0 (positive for every k != 0)."""
    k = kgrid_half(shape)
    s = np.zeros(k.shape)
    s[k > 0] = amplitude * math.prod(shape) * k[k > 0] ** slope
    return s


def gaussian_beam(shape, radius=0.6):
    return np.exp(-0.5 * (kgrid_half(shape) * radius) ** 2)


def full_from_half(half, shape):
    """Extend a half-grid array to the full grid by a_{-k} = a_k, explicitly."""
    n0, n1, n2 = shape
    m = n2 // 2 + 1
    full = np.empty(shape)
    for k0, k1, k2 in itertools.product(range(n0), range(n1), range(n2)):
        if k2 < m:
            full[k0, k1, k2] = half[k0, k1, k2]
        else:
            full[k0, k1, k2] = half[(-k0) % n0, (-k1) % n1, (-k2) % n2]
    return full


def dft_matrix(shape):
    """E[k, i] = exp(-2 pi i sum_a k_a x_a / n_a), k and x both in C order."""
    n = np.array(shape)
    points = list(itertools.product(*(range(s) for s in shape)))
    E = np.empty((len(points), len(points)), dtype=complex)
    for row, k in enumerate(points):
        for col, x in enumerate(points):
            E[row, col] = np.exp(-2j * np.pi * np.sum(np.array(k) * np.array(x) / n))
    return E


class Reference:
    """Dense posterior from explicit matrices (see the module docstring)."""

    def __init__(self, data, mode_var_half, sigma, mask=None, beam_half=None):
        shape = data.shape
        N = math.prod(shape)
        E = dft_matrix(shape)
        S = full_from_half(mode_var_half, shape).reshape(-1)
        Bk = np.ones(N) if beam_half is None else full_from_half(beam_half, shape).reshape(-1)
        C = E.conj().T @ np.diag(S) @ E / N**2
        B = E.conj().T @ np.diag(Bk) @ E / N
        assert np.abs(C.imag).max() < 1e-10 * max(1.0, np.abs(C).max())
        assert np.abs(B.imag).max() < 1e-10 * max(1.0, np.abs(B).max())
        self.E, self.S_full, self.C, self.B = E, S, C.real, B.real
        mask = np.ones(shape, bool) if mask is None else mask
        sigma_map = np.broadcast_to(np.asarray(sigma, float), shape)
        obs = mask.reshape(-1)
        w = np.where(obs, 1.0 / np.where(obs, sigma_map.reshape(-1), 1.0) ** 2, 0.0)
        d = np.where(obs, data.reshape(-1), 0.0)
        self.shape, self.obs, self.w, self.d = shape, obs, w, d
        self.sigma_obs = sigma_map.reshape(-1)[obs]

    def precision_form(self):
        """Q^T-restricted (C^-1 + B W B)^-1; needs S_k > 0 for every k != 0."""
        N = math.prod(self.shape)
        centring = np.eye(N) - np.ones((N, N)) / N
        U, sv, _ = np.linalg.svd(centring)
        Q = U[:, : N - 1]
        assert np.allclose(sv[: N - 1], 1) and abs(sv[-1]) < 1e-12
        prior_q = Q.T @ self.C @ Q
        lik = self.B @ np.diag(self.w) @ self.B
        post_q = np.linalg.inv(np.linalg.inv(prior_q) + Q.T @ lik @ Q)
        cov = Q @ post_q @ Q.T
        mean = cov @ (self.B @ (self.w * self.d))
        return mean.reshape(self.shape), cov

    def data_space_form(self):
        """m = C B^T Mo^T (Mo B C B^T Mo^T + diag(sigma_obs^2))^-1 d_obs, Cpost likewise."""
        R = self.B[self.obs]  # Mo B
        gram = R @ self.C @ R.T + np.diag(self.sigma_obs**2)
        gain = self.C @ R.T @ np.linalg.inv(gram)
        mean = gain @ self.d[self.obs]
        cov = self.C - gain @ R @ self.C
        return mean.reshape(self.shape), cov


def rel_err(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


SHAPES = [(4, 4, 4), (3, 4, 5), (4, 4, 2)]


def make_problem(shape, seed, *, mask_frac=0.0, noise_map=False, beam=False):
    rng = np.random.default_rng(seed)
    S = power_law_mode_variance(shape, amplitude=2.0)
    data = rng.normal(size=shape) * 1.5 + 0.7  # nonzero mean: must not leak into m
    sigma = rng.uniform(0.3, 1.5, size=shape) if noise_map else 0.8
    mask = None
    if mask_frac:
        mask = rng.random(shape) >= mask_frac
        mask.flat[0] = True
        data[~mask] = np.nan  # masked values must be ignored
    bm = gaussian_beam(shape) if beam else None
    return data, S, sigma, mask, bm


# --------------------------------------------------------------------------- conventions


@pytest.mark.parametrize("shape", SHAPES)
def test_prior_covariance_matches_mode_variance_definition(shape):
    data, S, sigma, mask, beam = make_problem(shape, 0)
    ref = Reference(data, S, sigma)
    dense = dense_posterior(data, S, sigma)
    np.testing.assert_allclose(dense.prior_covariance, ref.C, atol=1e-12 * np.abs(ref.C).max())
    # <|DFT(s)_k|^2> = S_k: E C E^H = diag(S) on the full grid
    modes = ref.E @ dense.prior_covariance @ ref.E.conj().T
    np.testing.assert_allclose(modes, np.diag(ref.S_full), atol=1e-10 * ref.S_full.max())
    # per-voxel prior variance (1/N^2) sum_k S_k
    N = math.prod(shape)
    np.testing.assert_allclose(np.diag(dense.prior_covariance), ref.S_full.sum() / N**2)


@pytest.mark.parametrize("shape", SHAPES)
def test_reference_forms_agree(shape):
    """The two reference formulations agree (guards the test's own algebra)."""
    ref = Reference(*make_problem(shape, 1, mask_frac=0.3, noise_map=True, beam=True))
    m1, c1 = ref.precision_form()
    m2, c2 = ref.data_space_form()
    assert rel_err(m1, m2) < 1e-10
    assert rel_err(c1, c2) < 1e-10


# --------------------------------------------------------------------------- closed form


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("beam", [False, True])
def test_closed_form_equals_dense_reference(shape, beam):
    data, S, sigma, _, bm = make_problem(shape, 2, beam=beam)
    ref_mean, ref_cov = Reference(data, S, sigma, None, bm).precision_form()
    result = wiener_mean_closed_form(data, S, sigma, beam=bm)
    assert result.mean_method == "closed_form" and result.iterations == 0
    assert rel_err(result.mean, ref_mean) < 1e-10
    np.testing.assert_allclose(result.std, np.sqrt(np.diag(ref_cov)).reshape(shape), rtol=1e-10)
    assert result.residual < 1e-12
    assert abs(result.mean.sum()) < 1e-10 * np.abs(result.mean).max() * data.size


def test_closed_form_per_mode_formula():
    """m_k = S_k B_k / (B_k^2 S_k + N sigma^2) d_k and the std formula, on an 8x6x5 grid."""
    shape = (8, 6, 5)
    N = math.prod(shape)
    rng = np.random.default_rng(3)
    S = power_law_mode_variance(shape)
    beam = gaussian_beam(shape, 0.3)
    sigma = 0.5
    d = rng.normal(size=shape)
    result = wiener_mean_closed_form(d, S, sigma, beam=beam)
    dk = np.fft.rfftn(d)
    np.testing.assert_allclose(
        np.fft.rfftn(result.mean), S * beam / (beam**2 * S + N * sigma**2) * dk, atol=1e-12
    )
    post = full_from_half(S * N * sigma**2 / (beam**2 * S + N * sigma**2), shape)
    np.testing.assert_allclose(result.std, np.sqrt(post.sum() / N**2), rtol=1e-12)


def test_closed_form_rejects_noise_map():
    data, S, _, _, _ = make_problem((4, 4, 4), 4)
    with pytest.raises(ValueError, match="uniform noise"):
        wiener_mean_closed_form(data, S, np.linspace(0.5, 1.0, 64).reshape(4, 4, 4))


# --------------------------------------------------------------------------- CG and exact std

CASES = [
    dict(mask_frac=0.3),
    dict(noise_map=True),
    dict(mask_frac=0.4, noise_map=True),
    dict(mask_frac=0.3, beam=True),
    dict(mask_frac=0.25, noise_map=True, beam=True),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(sorted(c)))
def test_cg_mean_and_exact_std_equal_dense_reference(shape, case):
    data, S, sigma, mask, beam = make_problem(shape, 5, **case)
    ref_mean, ref_cov = Reference(data, S, sigma, mask, beam).precision_form()
    result = wiener_posterior(data, S, sigma, mask, beam, std="exact", tol=1e-13)
    assert result.mean_method == "cg" and result.std_method == "exact"
    assert result.converged and result.residual <= 1e-13 and result.iterations > 0
    assert rel_err(result.mean, ref_mean) < 1e-9
    np.testing.assert_allclose(result.std, np.sqrt(np.diag(ref_cov)).reshape(shape), rtol=1e-9)
    assert result.std_rel_error == 0.0


@pytest.mark.parametrize("shape", SHAPES)
def test_dense_posterior_equals_reference(shape):
    data, S, sigma, mask, beam = make_problem(shape, 6, mask_frac=0.3, noise_map=True, beam=True)
    ref_mean, ref_cov = Reference(data, S, sigma, mask, beam).data_space_form()
    dense = dense_posterior(data, S, sigma, mask, beam)
    assert rel_err(dense.mean, ref_mean) < 1e-10
    assert rel_err(dense.covariance, ref_cov) < 1e-10
    np.testing.assert_allclose(dense.std, np.sqrt(np.diag(ref_cov)).reshape(shape), rtol=1e-9)
    # the constant mode has zero posterior variance and the mean has zero k=0 mode
    N = math.prod(shape)
    assert np.abs(dense.covariance @ np.ones(N)).max() < 1e-12 * np.abs(dense.covariance).max()
    assert abs(dense.mean.sum()) < 1e-12 * N * np.abs(dense.mean).max()


def test_default_tolerance_accuracy_and_bound():
    """With tol=1e-8 the whitened error bound ||xi - xi*|| <= tol ||b|| holds in practice."""
    shape = (6, 5, 4)
    data, S, sigma, mask, beam = make_problem(shape, 7, mask_frac=0.3, noise_map=True)
    dense = dense_posterior(data, S, sigma, mask, beam)
    result = wiener_posterior(data, S, sigma, mask, std="none")
    assert result.residual <= 1e-8 and result.tol == 1e-8 and result.std is None
    assert rel_err(result.mean, dense.mean) < 1e-6


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.tuples(*(st.integers(1, 5),) * 3),
    seed=st.integers(0, 2**32 - 1),
    use_beam=st.booleans(),
)
def test_cg_matches_dense_on_random_shapes(shape, seed, use_beam):
    rng = np.random.default_rng(seed)
    S = power_law_mode_variance(shape) * rng.uniform(0.1, 10)
    mask = rng.random(shape) < 0.7
    assume(mask.any())
    sigma = rng.uniform(0.2, 2.0, size=shape)
    data = rng.normal(size=shape)
    beam = gaussian_beam(shape, rng.uniform(0.1, 1.0)) if use_beam else None
    dense = dense_posterior(data, S, sigma, mask, beam)
    result = wiener_posterior(data, S, sigma, mask, beam, std="exact", tol=1e-13)
    scale = max(np.abs(dense.mean).max(), 1e-300)
    assert np.abs(result.mean - dense.mean).max() <= 1e-8 * scale + 1e-14
    np.testing.assert_allclose(result.std, dense.std, rtol=1e-8, atol=1e-14)


# --------------------------------------------------------------------------- Monte Carlo


def test_monte_carlo_std_within_reported_error():
    shape = (8, 8, 8)
    rng = np.random.default_rng(8)
    S = power_law_mode_variance(shape, amplitude=3.0)
    mask = np.ones(shape, bool)
    mask[:3, :, :4] = False  # a block hole
    mask &= rng.random(shape) > 0.2  # and scattered holes
    sigma = rng.uniform(0.5, 1.0, size=shape)
    data = rng.normal(size=shape)
    _, ref_cov = Reference(data, S, sigma, mask).data_space_form()
    ref_std = np.sqrt(np.diag(ref_cov)).reshape(shape)
    result = wiener_posterior(data, S, sigma, mask, std="sample", n_samples=64, rng=11)
    assert result.std_method == "sample"
    assert result.std_rel_error == pytest.approx(1 / math.sqrt(128))
    z = (result.std / ref_std - 1) / result.std_rel_error
    # z ~ N(0, 1) per voxel (correlated between voxels through the shared draws)
    assert 0.7 < np.sqrt(np.mean(z**2)) < 1.3
    assert np.mean(np.abs(z) < 2) > 0.9
    assert np.abs(z).max() < 5
    # the mean is the exact one whatever the std method
    exact = wiener_posterior(data, S, sigma, mask, std="exact", tol=1e-8)
    np.testing.assert_array_equal(result.mean, exact.mean)


def test_posterior_samples_have_posterior_mean_and_covariance():
    shape = (3, 4, 2)
    n = 4000
    data, S, sigma, mask, beam = make_problem(shape, 9, mask_frac=0.3, noise_map=True, beam=True)
    ref_mean, ref_cov = Reference(data, S, sigma, mask, beam).precision_form()
    draws = posterior_samples(data, S, sigma, mask, beam, n_samples=n, rng=12, tol=1e-10)
    assert draws.samples.shape == (n,) + shape
    assert draws.max_residual <= 1e-10
    assert rel_err(draws.mean, ref_mean) < 1e-8
    flat = draws.samples.reshape(n, -1)
    var = np.diag(ref_cov)
    z_mean = (flat.mean(axis=0) - ref_mean.reshape(-1)) / np.sqrt(var / n)
    assert np.abs(z_mean).max() < 4.5
    dev = flat - ref_mean.reshape(-1)  # centred on the known mean
    sample_cov = dev.T @ dev / n
    se = np.sqrt((np.outer(var, var) + ref_cov**2) / n)
    z_cov = (sample_cov - ref_cov) / se
    assert np.abs(z_cov).max() < 5
    assert 0.85 < np.sqrt(np.mean(z_cov**2)) < 1.15
    # every draw has a zero k=0 mode, like the posterior
    assert np.abs(flat.sum(axis=1)).max() < 1e-9


def test_samples_are_reproducible_and_prefix_stable():
    data, S, sigma, mask, beam = make_problem((4, 4, 2), 10, mask_frac=0.3)
    a = posterior_samples(data, S, sigma, mask, n_samples=5, rng=3).samples
    b = posterior_samples(data, S, sigma, mask, n_samples=5, rng=np.random.default_rng(3)).samples
    c = posterior_samples(data, S, sigma, mask, n_samples=3, rng=3).samples
    d = posterior_samples(data, S, sigma, mask, n_samples=5, rng=4).samples
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a[:3], c, rtol=0, atol=1e-7 * np.abs(a).max())
    assert not np.allclose(a, d)


def test_sampled_std_with_uniform_noise_matches_closed_form():
    shape = (6, 6, 6)
    data, S, sigma, _, _ = make_problem(shape, 13)
    closed = wiener_mean_closed_form(data, S, sigma)
    sampled = wiener_posterior(data, S, sigma, std="sample", n_samples=200, rng=0)
    ratio = np.mean(sampled.std**2) / closed.std[0, 0, 0] ** 2
    # the voxel-average of the variance estimate is much tighter than one voxel's
    assert abs(ratio - 1) < 4 * math.sqrt(2 / 200)


# --------------------------------------------------------------------------- API behaviour


def test_auto_std_method_selection(monkeypatch):
    data, S, sigma, mask, _ = make_problem((4, 4, 4), 14, mask_frac=0.3)
    assert wiener_posterior(np.nan_to_num(data), S, sigma).std_method == "closed_form"
    assert wiener_posterior(data, S, sigma, mask).std_method == "exact"
    monkeypatch.setattr(wiener, "AUTO_EXACT_STD_MAX_CELLS", 32)
    result = wiener_posterior(data, S, sigma, mask, n_samples=4, rng=0)
    assert result.std_method == "sample" and result.std_rel_error == pytest.approx(1 / math.sqrt(8))


def test_full_mask_and_uniform_noise_map_use_closed_form():
    data, S, _, _, _ = make_problem((4, 4, 4), 15)
    a = wiener_posterior(data, S, np.full((4, 4, 4), 0.8), np.ones((4, 4, 4), bool))
    b = wiener_posterior(data, S, 0.8)
    assert a.mean_method == b.mean_method == "closed_form"
    np.testing.assert_array_equal(a.mean, b.mean)


def test_masked_nans_are_ignored():
    data, S, sigma, mask, _ = make_problem((4, 4, 4), 16, mask_frac=0.3, noise_map=True)
    assert np.isnan(data).any()
    filled = np.where(mask, data, 123.0)
    a = wiener_posterior(data, S, sigma, mask, std="none", tol=1e-12)
    b = wiener_posterior(filled, S, sigma, mask, std="none", tol=1e-12)
    np.testing.assert_array_equal(a.mean, b.mean)
    assert np.all(np.isfinite(a.mean))


def test_unconverged_cg_warns_and_reports():
    data, S, sigma, mask, _ = make_problem((4, 4, 4), 17, mask_frac=0.3, noise_map=True)
    with pytest.warns(RuntimeWarning, match="maxiter=2"):
        result = wiener_posterior(data, S, sigma, mask, std="none", maxiter=2)
    assert not result.converged and result.iterations == 2 and result.residual > 1e-8


def test_zero_data_gives_zero_mean():
    shape = (4, 4, 4)
    _, S, sigma, mask, _ = make_problem(shape, 18, mask_frac=0.3, noise_map=True)
    result = wiener_posterior(np.zeros(shape), S, sigma, mask, std="none")
    assert result.iterations == 0 and result.residual == 0.0
    np.testing.assert_array_equal(result.mean, 0.0)


def test_module_does_not_import_tensorflow():
    code = (
        "import sys, core.reference.wiener\n"
        "bad = [m for m in ('tensorflow', 'PySide6', 'pyqtgraph', 'vispy') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)


# --------------------------------------------------------------------------- validation


def _good():
    shape = (4, 4, 4)
    return dict(
        data=np.random.default_rng(0).normal(size=shape),
        prior_mode_variance=power_law_mode_variance(shape),
        noise_sigma=0.5,
    )


def _with(**changes):
    kwargs = _good()
    kwargs.update(changes)
    return kwargs


S44 = power_law_mode_variance((4, 4, 4))

BAD_INPUTS = [
    (_with(data=np.zeros((4, 4))), r"3-d field.*\(4, 4\)"),
    (_with(data=np.zeros((4, 4, 4), complex)), "real numeric"),
    (_with(prior_mode_variance=np.ones((4, 4, 4))), r"\(4, 4, 4\).*\(4, 4, 3\)"),
    (_with(prior_mode_variance=np.where(S44 > 0, -1.0, 0.0)), "must be >= 0.*-1"),
    (_with(prior_mode_variance=np.where(S44 > 0, np.nan, 0.0)), "47 non-finite"),
    (_with(prior_mode_variance=S44 + 2.5), r"\[0, 0, 0\] = 2.5 must be 0"),
    (_with(prior_mode_variance=S44 * (1 + np.arange(48).reshape(4, 4, 3))), "not symmetric.*kz = 0"),
    (_with(noise_sigma=0.0), "noise_sigma must be > 0 and finite, got 0.0"),
    (_with(noise_sigma=-1.0), "got -1.0"),
    (_with(noise_sigma=np.inf), "got inf"),
    (_with(noise_sigma=np.ones((4, 4, 3))), r"noise_sigma has shape \(4, 4, 3\).*\(4, 4, 4\)"),
    (_with(noise_sigma=np.where(np.arange(64).reshape(4, 4, 4) < 3, 0.0, 1.0)), "3 value"),
    (_with(mask=np.zeros((4, 4, 4), bool)), "all voxels masked: the data carry no information"),
    (_with(mask=np.ones((4, 4, 4))), "boolean.*float64"),
    (_with(mask=np.ones((4, 4, 5), bool)), r"mask has shape \(4, 4, 5\).*\(4, 4, 4\)"),
    (_with(beam=np.ones((4, 4, 4))), r"beam has shape \(4, 4, 4\).*\(4, 4, 3\)"),
    (_with(beam=np.ones((4, 4, 3), complex)), "beam must be real"),
    (_with(std="fast"), r"std must be one of.*'fast'"),
    (_with(tol=0.0), r"tol must be in \(0, 1\), got 0.0"),
    (_with(tol=2.0), "got 2.0"),
    (_with(maxiter=0), "maxiter.*0"),
    (_with(std="sample", n_samples=1), "n_samples must be an integer >= 2, got 1"),
]


@pytest.mark.parametrize("kwargs,match", BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_raises_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        wiener_posterior(**kwargs)


def test_nan_in_observed_data_names_count():
    kwargs = _good()
    kwargs["data"][0, 0, :2] = np.nan
    with pytest.raises(ValueError, match="2 NaN/inf value"):
        wiener_posterior(**kwargs)


def test_exact_std_refuses_large_grids():
    shape = (24, 24, 16)
    with pytest.raises(ValueError, match=r"N = 9216"):
        wiener_posterior(
            np.zeros(shape), power_law_mode_variance(shape), 1.0,
            np.ones(shape, bool) & (np.arange(16) > 0), std="exact",
        )
