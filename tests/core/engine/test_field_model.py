"""The field posterior (core.engine.field_density) against dense linear algebra and scipy.

Independent references: the prior covariance of the field built here from P(k) with an
explicit DFT matrix (not numpy.fft, not core.engine.fft); scipy's multivariate-normal and
Poisson densities; central finite differences; the P(k) estimator on prior draws.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from scipy import stats

from core.config import PARAMETERISATIONS
from core.engine.field_density import FieldPosterior
from core.field.grid import Grid
from core.field.observations import Observations
from core.field.power_estimator import measure_power
from core.field.power_spectrum import PowerLaw, PowerLawCutoff
from core.priors import LogNormalPrior, NormalPrior, UniformPrior


def dense_prior_covariance(grid: Grid, spectrum, beam_scale=None) -> np.ndarray:
    """C_ij = (1/N^2) sum_k B_k^2 S_k exp(i k.(x_i - x_j)), S_k = P(|k|) N^2 / V, S_0 = 0."""
    shape = grid.shape
    n = grid.n_cells
    idx = np.array(list(np.ndindex(*shape)))                     # (N, 3) positions = wave indices
    phase = np.zeros((n, n))
    for axis, length in enumerate(shape):
        phase += np.outer(idx[:, axis], idx[:, axis]) / length
    dft = np.exp(-2j * np.pi * phase)                            # dft[k, j] = exp(-2 pi i k.j/n)
    kvec = np.stack([2 * np.pi * np.where(idx[:, a] <= shape[a] // 2, idx[:, a], idx[:, a] - shape[a])
                     / grid.box_size[a] for a in range(3)], axis=1)
    kmag = np.sqrt((kvec**2).sum(axis=1))
    s = np.where(kmag > 0, spectrum.evaluate(np.where(kmag > 0, kmag, 1.0)) * n**2 / grid.volume, 0.0)
    if beam_scale is not None:
        s = s * np.exp(-(kmag * beam_scale) ** 2)
    return np.real(dft.conj().T @ np.diag(s) @ dft) / n**2


def field_matrix(post: FieldPosterior) -> np.ndarray:
    """A with field = A @ latent (flattened), by applying the map to basis vectors."""
    n = post.grid.n_cells
    basis = tf.reshape(tf.eye(n, dtype=post.dtype), (n, *post.grid.shape))
    return tf.reshape(post.field(basis), (n, n)).numpy().T


def tiny_case(shape=(4, 4, 4), mask=True, noise_map=True, beam=None, seed=0):
    rng = np.random.default_rng(seed)
    grid = Grid(shape, (40.0, 36.0, 44.0))
    spectrum = PowerLaw(amplitude=200.0, index=-1.2, k_pivot=0.2)
    data = rng.normal(size=shape)
    m = rng.random(shape) > 0.3 if mask else None
    noise = dict(noise_map=rng.uniform(0.5, 1.5, size=shape)) if noise_map else dict(noise_sigma=0.8)
    obs = Observations.create(data, mask=m, smoothing_scale=beam, field_mean=0.3, **noise)
    return grid, spectrum, obs


@pytest.mark.parametrize("parameterisation", PARAMETERISATIONS)
@pytest.mark.parametrize("shape,beam", [((4, 4, 4), None), ((3, 4, 5), 6.0), ((4, 2, 6), None)])
def test_prior_covariance_of_the_field_equals_dense(parameterisation, shape, beam):
    grid, spectrum, obs = tiny_case(shape, beam=beam)
    post = FieldPosterior(grid, spectrum, obs, parameterisation=parameterisation, dtype=tf.float64)
    a = field_matrix(post)
    if parameterisation == "raw_modes":
        # latent v has prior variance S at its full-grid wavevector (1 for the inert DC entry)
        latent_var = post._fixed_s_full.numpy().reshape(-1) * post._k_full_nonzero.numpy().reshape(-1)
        cov = a @ np.diag(latent_var) @ a.T
    else:
        cov = a @ a.T
    np.testing.assert_allclose(cov, dense_prior_covariance(grid, spectrum, beam), atol=1e-10 * np.abs(cov).max())


@pytest.mark.parametrize("parameterisation", PARAMETERISATIONS)
def test_log_density_equals_dense_gaussian_densities(parameterisation):
    grid, spectrum, obs = tiny_case((4, 4, 4), beam=5.0)
    post = FieldPosterior(grid, spectrum, obs, parameterisation=parameterisation, dtype=tf.float64)
    a = field_matrix(post)
    n = grid.n_cells
    rng = np.random.default_rng(1)
    latent = rng.normal(size=(3, *grid.shape))
    if parameterisation == "raw_modes":
        latent_var = np.where(post._k_full_nonzero.numpy() > 0, post._fixed_s_full.numpy(), 1.0).reshape(-1)
        latent = latent * np.sqrt(latent_var).reshape(grid.shape)
    else:
        latent_var = np.ones(n)
    got = post.log_prob(tf.constant(latent)).numpy()
    m = obs.mask.reshape(-1)
    for c in range(3):
        u = latent[c].reshape(-1)
        prior = stats.multivariate_normal(np.zeros(n), np.diag(latent_var)).logpdf(u)
        signal = a @ u + 0.3
        lik = stats.multivariate_normal(signal[m], np.diag(obs.noise.reshape(-1)[m] ** 2)).logpdf(
            obs.data.reshape(-1)[m])
        assert got[c] == pytest.approx(prior + lik, rel=1e-12, abs=1e-9)


def test_whitened_posterior_is_the_dense_gaussian_posterior():
    """log p(u, d) = log N(u; mu_post, Sigma_post) + log N(d; mean, M C M^T + N) exactly."""
    grid, spectrum, obs = tiny_case((4, 4, 4), beam=None)
    post = FieldPosterior(grid, spectrum, obs, dtype=tf.float64)
    a = field_matrix(post)
    m = obs.mask.reshape(-1)
    am = a[m]
    noise_cov = np.diag(obs.noise.reshape(-1)[m] ** 2)
    d = obs.data.reshape(-1)[m] - 0.3
    precision = np.eye(grid.n_cells) + am.T @ np.linalg.solve(noise_cov, am)
    cov_post = np.linalg.inv(precision)
    mu_post = cov_post @ am.T @ np.linalg.solve(noise_cov, d)
    evidence = stats.multivariate_normal(np.zeros(m.sum()), am @ am.T + noise_cov).logpdf(d)
    rng = np.random.default_rng(2)
    for _ in range(3):
        u = mu_post + rng.normal(size=grid.n_cells)
        expected = stats.multivariate_normal(mu_post, cov_post).logpdf(u) + evidence
        got = post.log_prob(tf.constant(u.reshape(grid.shape))).numpy()
        assert got == pytest.approx(expected, rel=1e-11)


def test_poisson_lognormal_likelihood_equals_scipy():
    rng = np.random.default_rng(3)
    grid = Grid((4, 5, 6), 30.0)
    spectrum = PowerLaw(amplitude=20.0, index=-1.0, k_pivot=0.3)
    counts = rng.poisson(3.0, size=grid.shape).astype(float)
    mask = rng.random(grid.shape) > 0.2
    obs = Observations.create(counts, kind="poisson_lognormal", mean_count=2.5, mask=mask)
    post = FieldPosterior(grid, spectrum, obs, dtype=tf.float64)
    latent = rng.normal(size=(2, *grid.shape))
    x = post.field(tf.constant(latent)).numpy()
    got = post.log_likelihood_of_signal(tf.constant(x)).numpy()
    for c in range(2):
        rate = 2.5 * np.exp(x[c])
        expected = stats.poisson(rate[mask]).logpmf(counts[mask]).sum()
        assert got[c] == pytest.approx(expected, rel=1e-12)


def test_sampled_hyperparameter_priors_carry_their_jacobians():
    grid, _, obs = tiny_case((4, 4, 4))
    spectrum = PowerLawCutoff(amplitude=200.0, index=-1.0, k_pivot=0.2, cutoff_scale=2.0)
    priors = {"amplitude": LogNormalPrior(loc=5.0, scale=0.5),
              "index": NormalPrior(loc=-1.0, scale=0.3),
              "cutoff_scale": UniformPrior(low=0.5, high=4.0)}
    post = FieldPosterior(grid, spectrum, obs, hyper_priors=priors, dtype=tf.float64)
    eta = np.array([[5.3, -0.8, 0.4]])
    u = np.zeros((1, *grid.shape))
    got = (post.log_prior(tf.constant(u), tf.constant(eta)) + 0.5 * grid.n_cells * math.log(2 * math.pi)).numpy()[0]
    # density of eta: normal(log A) for lognormal A; normal(index); uniform(c) * dc/deta
    c = 0.5 + 3.5 / (1 + math.exp(-0.4))
    dc_deta = 3.5 * math.exp(-0.4) / (1 + math.exp(-0.4)) ** 2
    expected = (stats.norm(5.0, 0.5).logpdf(5.3) + stats.norm(-1.0, 0.3).logpdf(-0.8)
                + stats.uniform(0.5, 3.5).logpdf(c) + math.log(dc_deta))
    assert got == pytest.approx(expected, rel=1e-12)
    theta = post.hyperparameters(tf.constant(eta))
    assert theta["amplitude"].numpy()[0] == pytest.approx(math.exp(5.3))
    assert theta["cutoff_scale"].numpy()[0] == pytest.approx(c)


def test_raw_modes_prior_normalisation_depends_on_amplitude():
    """With a sampled amplitude the raw-modes prior is a normalised N(0, S(theta))."""
    grid, spectrum, obs = tiny_case((4, 4, 4))
    priors = {"amplitude": LogNormalPrior(loc=5.0, scale=1.0)}
    post = FieldPosterior(grid, spectrum, obs, hyper_priors=priors, parameterisation="raw_modes",
                          dtype=tf.float64)
    rng = np.random.default_rng(4)
    v = rng.normal(size=(1, *grid.shape))
    for log_a in (4.0, 6.0):
        amplitude = math.exp(log_a)
        scaled = PowerLaw(amplitude=amplitude, index=spectrum.index, k_pivot=spectrum.k_pivot)
        k = grid.k_magnitude_full()
        var = np.where(k > 0, scaled.evaluate(np.where(k > 0, k, 1.0)) * grid.n_cells**2 / grid.volume, 1.0)
        expected = stats.norm(0, np.sqrt(var)).logpdf(v[0]).sum() + stats.norm(5.0, 1.0).logpdf(log_a)
        got = post.log_prior(tf.constant(v), tf.constant([[log_a]], tf.float64)).numpy()[0]
        assert got == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("parameterisation", PARAMETERISATIONS)
@pytest.mark.parametrize("kind", ["gaussian", "poisson_lognormal"])
def test_gradients_match_finite_differences(parameterisation, kind):
    rng = np.random.default_rng(5)
    grid = Grid((4, 5, 6), (30.0, 30.0, 36.0))
    spectrum = PowerLawCutoff(amplitude=5.0, index=-1.0, k_pivot=0.3, cutoff_scale=1.5)
    if kind == "gaussian":
        obs = Observations.create(rng.normal(size=grid.shape), noise_sigma=0.7,
                                  mask=rng.random(grid.shape) > 0.25, smoothing_scale=2.0)
    else:
        obs = Observations.create(rng.poisson(2.0, size=grid.shape), kind="poisson_lognormal",
                                  mean_count=2.0)
    priors = {"amplitude": LogNormalPrior(loc=1.5, scale=0.5),
              "index": NormalPrior(loc=-1.0, scale=0.3)}
    post = FieldPosterior(grid, spectrum, obs, hyper_priors=priors, parameterisation=parameterisation,
                          dtype=tf.float64)
    latent, eta = post.draw_prior(2, 7)
    latent = latent * 0.5
    with tf.GradientTape() as tape:
        tape.watch([latent, eta])
        lp = tf.reduce_sum(post.log_prob(latent, eta))
    g_lat, g_eta = tape.gradient(lp, [latent, eta])
    for _ in range(2):
        d_lat = rng.normal(size=latent.shape)
        d_eta = rng.normal(size=eta.shape)
        eps = 1e-6
        f = lambda s: float(tf.reduce_sum(post.log_prob(latent + s * eps * d_lat, eta + s * eps * d_eta)))
        fd = (f(1) - f(-1)) / (2 * eps)
        analytic = float(np.sum(g_lat.numpy() * d_lat) + np.sum(g_eta.numpy() * d_eta))
        assert analytic == pytest.approx(fd, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("parameterisation", PARAMETERISATIONS)
def test_prior_draws_have_the_prior_power_spectrum(parameterisation):
    grid = Grid((32, 32, 32), 200.0)
    spectrum = PowerLawCutoff(amplitude=400.0, index=-1.0, k_pivot=0.1, cutoff_scale=3.0)
    obs = Observations.create(np.zeros(grid.shape), noise_sigma=1.0)
    post = FieldPosterior(grid, spectrum, obs, parameterisation=parameterisation, dtype=tf.float64)
    fields = post.field(post.draw_prior(6, 11)[0]).numpy()
    measured = measure_power(fields, grid)
    mean_power = measured.power.mean(axis=0)
    expected = spectrum.evaluate(measured.k)
    # the shell averages of 6 independent draws: relative error sqrt(2/count)/sqrt(6)
    err = expected * measured.relative_error / math.sqrt(6)
    good = (measured.counts > 0) & (expected > 1e-8 * expected.max())
    z = (mean_power[good] - expected[good]) / err[good]
    assert np.all(np.abs(z) < 5), z
    assert abs(np.mean(z)) < 4 / math.sqrt(good.sum()) + 0.5


def test_jit_float32_and_tfp_hmc_step():
    grid, spectrum, obs = tiny_case((8, 8, 8), mask=True, noise_map=False)
    priors = {"index": NormalPrior(loc=-1.2, scale=0.3)}
    post = FieldPosterior(grid, spectrum, obs, hyper_priors=priors, dtype=tf.float32)
    state = post.initial_state(3, 1)
    kernel = tfp.mcmc.HamiltonianMonteCarlo(post.target_log_prob_fn(), step_size=0.05, num_leapfrog_steps=4)

    @tf.function(jit_compile=True)
    def step(state):
        results = kernel.bootstrap_results(state)
        new_state, results = kernel.one_step(state, results, seed=tf.constant([1, 2]))
        return new_state, results.accepted_results.target_log_prob

    new_state, lp = step(state)
    assert new_state[0].dtype == tf.float32 and lp.shape == (3,)
    assert np.all(np.isfinite(lp.numpy()))
    np.testing.assert_allclose(lp.numpy(), post.log_prob(*new_state).numpy(), rtol=1e-5)


@pytest.mark.parametrize("priors, message", [
    ({"amplitude": NormalPrior(loc=1.0, scale=1.0)}, "must be positive"),
    ({"cutoff_scale": NormalPrior(loc=1.0, scale=1.0)}, "not a hyperparameter"),
    ({"amplitude": UniformPrior(low=-1.0, high=1.0)}, "must be positive"),
])
def test_bad_hyperparameter_priors(priors, message):
    grid, spectrum, obs = tiny_case()
    with pytest.raises(ValueError, match=message):
        FieldPosterior(grid, spectrum, obs, hyper_priors=priors)


def test_bad_model_inputs():
    grid, spectrum, obs = tiny_case()
    with pytest.raises(ValueError, match="parameterisation"):
        FieldPosterior(grid, spectrum, obs, parameterisation="fourier")
    # the config's PARAMETERISATIONS are exactly what the model accepts (and names)
    for parameterisation in PARAMETERISATIONS:
        assert FieldPosterior(grid, spectrum, obs, parameterisation=parameterisation
                              ).parameterisation == parameterisation
    with pytest.raises(ValueError) as info:
        FieldPosterior(grid, spectrum, obs, parameterisation="whitend")
    assert str(info.value).endswith(f"(known: {', '.join(PARAMETERISATIONS)})")
    with pytest.raises(ValueError, match="does not match grid shape"):
        FieldPosterior(Grid((4, 4, 5), 10.0), spectrum, obs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(noise_sigma=-1.0), "noise_sigma"),
    (dict(noise_sigma=0.0), "noise_sigma"),
    (dict(noise_sigma=1.0, mask=np.zeros((4, 4, 4), bool)), "all voxels are masked"),
    (dict(noise_map=np.ones((4, 4, 3))), "does not match"),
    (dict(noise_sigma=1.0, mask=np.ones((4, 4, 3), bool)), "does not match"),
    (dict(noise_map=np.zeros((4, 4, 4))), "not positive"),
    (dict(noise_sigma=1.0, kind="poisson"), "not known"),
    (dict(kind="poisson_lognormal", mean_count=1.0), "integer counts"),
    (dict(), "exactly one"),
])
def test_bad_observations(kwargs, message):
    data = np.random.default_rng(0).normal(size=(4, 4, 4))
    with pytest.raises(ValueError, match=message):
        Observations.create(data, **kwargs)


def test_nan_data_become_masked_with_a_warning():
    data = np.random.default_rng(0).normal(size=(4, 4, 4))
    data[0, 0, :3] = np.nan
    with pytest.warns(UserWarning, match="3 voxel"):
        obs = Observations.create(data, noise_sigma=1.0)
    assert obs.n_observed == 61 and np.all(np.isfinite(obs.data))


def test_observations_module_does_not_import_tensorflow():
    code = "import sys, core.field.observations; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False"


def test_wiener_oracle_is_the_mean_of_this_posterior():
    """The TF model's dense posterior mean of the field equals core.reference.wiener's (masked, noise map)."""
    from core.reference.wiener import wiener_posterior

    grid, spectrum, obs = tiny_case((4, 4, 4), beam=None)
    post = FieldPosterior(grid, spectrum, obs, dtype=tf.float64)
    a = field_matrix(post)
    m = obs.mask.reshape(-1)
    noise_cov = np.diag(obs.noise.reshape(-1)[m] ** 2)
    d = obs.data.reshape(-1)[m] - 0.3
    cov_u = np.linalg.inv(np.eye(grid.n_cells) + a[m].T @ np.linalg.solve(noise_cov, a[m]))
    mean_field = a @ (cov_u @ a[m].T @ np.linalg.solve(noise_cov, d))
    std_field = np.sqrt(np.diag(a @ cov_u @ a.T))
    k = grid.k_magnitude_half()
    s_half = np.where(k > 0, spectrum.evaluate(np.where(k > 0, k, 1.0)) * grid.n_cells**2 / grid.volume, 0.0)
    result = wiener_posterior(obs.data - 0.3, s_half, obs.noise, mask=obs.mask, std="exact", tol=1e-13)
    np.testing.assert_allclose(result.mean.reshape(-1), mean_field, atol=1e-9 * np.abs(mean_field).max())
    np.testing.assert_allclose(result.std.reshape(-1), std_field, rtol=1e-9)
