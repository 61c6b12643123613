"""The exact hyperparameter posterior (core.reference.hyper_posterior) against dense linear
algebra: the marginal likelihood of the observed voxels as one multivariate normal, and the
quadrature against brute-force integration of that dense density."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.linalg import solve_triangular
from scipy.stats import multivariate_normal

from core.field.grid import Grid
from core.field.observations import Observations
from core.field.power_spectrum import BandPowers, PowerLaw, PowerLawCutoff, band_edges
from core.priors import Fixed, LogNormalPrior, NormalPrior
from core.reference.hyper_posterior import GaussianMarginal, band_posterior, hyper_posterior, slab_axis


def dense_log_likelihood_fn(grid: Grid, obs: Observations):
    """(spectrum, **overrides) -> log N(d_obs; mean, C + sigma^2 I), with the prior covariance
    C_rr' = (N / V) ifftn(B^2 P)[r - r'] over the observed voxels built element by element in
    real space."""
    k = grid.k_magnitude_full()
    beam2 = 1.0 if obs.smoothing_scale is None else np.exp(-(k * obs.smoothing_scale)**2)
    where = np.argwhere(obs.mask)
    delta = (where[:, None, :] - where[None, :, :]) % np.array(grid.shape)
    noise = obs.uniform_noise**2 * np.eye(len(where))
    values = obs.data[obs.mask] - obs.field_mean

    def covariance(spectrum, **overrides):
        lag = np.fft.ifftn(spectrum.evaluate(k, **overrides) * beam2).real * grid.n_cells / grid.volume
        return lag[delta[..., 0], delta[..., 1], delta[..., 2]] + noise

    def log_likelihood(spectrum, **overrides) -> float:
        cov = covariance(spectrum, **overrides)
        chol = np.linalg.cholesky(cov)
        white = solve_triangular(chol, values, lower=True)
        return float(-0.5 * white @ white - np.sum(np.log(np.diag(chol))) - 0.5 * len(values) * math.log(2 * math.pi))
    log_likelihood.covariance = covariance
    return log_likelihood


def dense_log_likelihood(grid: Grid, obs: Observations, spectrum, **overrides) -> float:
    """The same by scipy's multivariate normal (eigendecomposition, not Cholesky)."""
    fn = dense_log_likelihood_fn(grid, obs)
    cov = fn.covariance(spectrum, **overrides)
    return float(multivariate_normal(np.zeros(len(cov)), cov).logpdf(obs.data[obs.mask] - obs.field_mean))


def observations(shape, box, spectrum, sigma, slab=None, smoothing=None, field_mean=0.0, seed=0):
    rng = np.random.default_rng(seed)
    grid = Grid(shape, box)
    k = grid.k_magnitude_half()
    s = spectrum.evaluate(k) * grid.n_cells**2 / grid.volume
    modes = (rng.normal(size=k.shape) + 1j * rng.normal(size=k.shape)) * np.sqrt(s / 2)
    field = np.fft.irfftn(modes, s=shape, axes=(0, 1, 2))
    data = field + field_mean + rng.normal(0.0, sigma, shape)
    mask = None
    if slab is not None:
        axis, planes = slab
        mask = np.ones(shape, bool)
        index = [slice(None)] * 3
        index[axis] = list(planes)
        mask[tuple(index)] = False
    return grid, Observations.create(data, mask=mask, noise_sigma=sigma, smoothing_scale=smoothing,
                                     field_mean=field_mean)


SPECTRUM = PowerLawCutoff(amplitude=40.0, index=-1.5, k_pivot=0.5, cutoff_scale=0.4)


@pytest.mark.parametrize("shape, slab, smoothing", [
    ((4, 4, 4), None, None), ((6, 6, 6), None, 0.5), ((6, 5, 4), None, None),
    ((4, 4, 4), (0, [1]), None), ((6, 6, 6), (1, [2, 3]), 0.5), ((6, 5, 4), (2, [0]), None),
    ((5, 6, 6), (0, [4, 0]), None)])
def test_marginal_likelihood_equals_dense_gaussian(shape, slab, smoothing):
    grid, obs = observations(shape, 10.0, SPECTRUM, sigma=0.7, slab=slab, smoothing=smoothing, field_mean=0.3)
    marginal = GaussianMarginal(grid, obs)
    assert marginal.axis == (None if slab is None else slab[0])
    for overrides in ({}, {"index": -3.0, "amplitude": 5.0}, {"cutoff_scale": 0.0}):
        exact = dense_log_likelihood(grid, obs, SPECTRUM, **overrides)
        assert float(marginal.for_spectrum(SPECTRUM, **overrides)) == pytest.approx(exact, abs=1e-9 * abs(exact))
    batch = marginal.for_spectrum(SPECTRUM, index=np.array([-1.0, -2.0]))
    assert batch.shape == (2,)
    assert batch[1] == pytest.approx(dense_log_likelihood(grid, obs, SPECTRUM, index=-2.0), rel=1e-10)


def test_only_slab_masks_are_accepted():
    mask = np.ones((4, 4, 4), bool)
    assert slab_axis(mask) is None
    mask[1, 2, 3] = False
    with pytest.raises(ValueError, match="slab"):
        slab_axis(mask)


def brute_force_moments(grid, obs, spectrum, sampled, lows, highs, n=201):
    """Posterior moments of theta by a plain grid in eta over the dense Gaussian density."""
    axes = [np.linspace(lo, hi, n) for lo, hi in zip(lows, highs)]
    mesh = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(sampled))
    dense = dense_log_likelihood_fn(grid, obs)
    lp = np.array([dense(spectrum, **{name: prior.forward(e[i])
                                                              for i, (name, prior) in enumerate(sampled)})
                   + sum(prior.unconstrained_logpdf(e[i]) for i, (_, prior) in enumerate(sampled))
                   for e in mesh])
    w = np.exp(lp - lp.max())
    w /= w.sum()
    out = {}
    for i, (name, prior) in enumerate(sampled):
        theta = prior.forward(mesh[:, i])
        mean = np.sum(w * theta)
        out[name] = (mean, math.sqrt(np.sum(w * (theta - mean)**2)))
    return out


@pytest.mark.parametrize("slab", [None, (0, [2])])
def test_index_posterior_matches_brute_force_integration(slab):
    spectrum = PowerLaw(amplitude=40.0, index=-1.5, k_pivot=0.5)
    grid, obs = observations((4, 4, 4), 10.0, spectrum, sigma=0.3, slab=slab, seed=2)
    priors = {"index": NormalPrior(-1.0, 1.0), "amplitude": Fixed(40.0)}
    post = hyper_posterior(grid, obs, spectrum, priors)
    guess = post.mean["index"]
    sd = post.sd["index"]
    brute = brute_force_moments(grid, obs, spectrum, [("index", priors["index"])],
                                [guess - 10 * sd], [guess + 10 * sd], n=201)
    assert post.mean["index"] == pytest.approx(brute["index"][0], abs=1e-6 * sd + 1e-9)
    assert post.sd["index"] == pytest.approx(brute["index"][1], rel=1e-5)


def test_index_and_amplitude_posterior_matches_brute_force_integration():
    spectrum = PowerLaw(amplitude=10.0, index=-1.5, k_pivot=1.5)
    grid, obs = observations((4, 4, 4), 10.0, spectrum, sigma=0.1, slab=(1, [0]), seed=4)
    priors = {"amplitude": LogNormalPrior(math.log(10.0), 1.0), "index": NormalPrior(-1.0, 1.0)}
    post = hyper_posterior(grid, obs, spectrum, priors)
    sampled = list(priors.items())
    lows = [post.eta_mean[n] - 9 * post.eta_sd[n] for n, _ in sampled]
    highs = [post.eta_mean[n] + 9 * post.eta_sd[n] for n, _ in sampled]
    brute = brute_force_moments(grid, obs, spectrum, sampled, lows, highs, n=61)
    for name, _ in sampled:
        assert post.mean[name] == pytest.approx(brute[name][0], abs=1e-4 * post.sd[name])
        assert post.sd[name] == pytest.approx(brute[name][1], rel=1e-4)


@pytest.mark.parametrize("walk", [None, 0.3])
def test_band_forward_backward_matches_tensor_quadrature(walk):
    """Three bins: the chain's forward-backward marginals equal a 3-D quadrature of the joint."""
    truth = PowerLaw(amplitude=40.0, index=-1.5, k_pivot=0.5)
    grid, obs = observations((8, 8, 8), 10.0, truth, sigma=0.5, seed=5)
    edges = band_edges(grid.k_magnitude_full(), 3)
    spectrum = BandPowers(tuple(edges), (1.0, 1.0, 1.0), random_walk_scale=walk)
    priors = dict.fromkeys(spectrum.parameters, LogNormalPrior(math.log(10.0), 2.0))
    chain = band_posterior(grid, obs, spectrum, priors)
    tensor = hyper_posterior(grid, obs, spectrum, priors, nodes=41)
    for name in spectrum.parameters:
        assert chain.mean[name] == pytest.approx(tensor.mean[name], abs=1e-4 * tensor.sd[name])
        assert chain.sd[name] == pytest.approx(tensor.sd[name], rel=1e-3)
        assert chain.eta_sd[name] == pytest.approx(tensor.eta_sd[name], rel=1e-3)
