"""Band powers in the TensorFlow density: P(k) equal to the numpy family's, and the prior of
the bins (lognormal per bin plus the random walk) equal to scipy's densities."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from core.engine.field_density import FieldPosterior
from core.field.grid import Grid
from core.field.observations import Observations
from core.field.power_spectrum import BandPowers, band_edges
from core.priors import LogNormalPrior


def band_case(walk=0.4, n_bins=5):
    grid = Grid((6, 6, 8), (20.0, 20.0, 30.0))
    edges = band_edges(grid.k_magnitude_full(), n_bins)
    spectrum = BandPowers(tuple(edges), tuple(np.linspace(3.0, 1.0, n_bins)), random_walk_scale=walk)
    obs = Observations.create(np.random.default_rng(0).normal(size=grid.shape), noise_sigma=0.5)
    priors = dict.fromkeys(spectrum.parameters, LogNormalPrior(1.0, 2.0))
    return grid, spectrum, obs, priors


@pytest.mark.parametrize("parameterisation, preconditioner", [
    ("whitened", "identity"), ("whitened", "fourier"), ("raw_modes", "fourier"), ("white_noise", "identity")])
def test_tf_band_power_mode_variance_equals_numpy(parameterisation, preconditioner):
    grid, spectrum, obs, priors = band_case()
    post = FieldPosterior(grid, spectrum, obs, hyper_priors=priors, parameterisation=parameterisation,
                          preconditioner=preconditioner, dtype=tf.float64)
    eta = np.random.default_rng(1).normal(1.0, 1.0, size=(2, spectrum.n_bins))
    got = post._sqrt_mode_variance(tf.constant(eta)).numpy()**2
    norm = grid.n_cells**2 / grid.volume
    for c in range(2):
        overrides = dict(zip(spectrum.parameters, np.exp(eta[c])))
        expected = spectrum.evaluate(grid.k_magnitude_half(), **overrides) * norm
        np.testing.assert_allclose(got[c], expected, rtol=1e-12, atol=0)
        if preconditioner == "fourier":
            full = np.exp(post._log_mode_variance_full(tf.constant(eta[c:c + 1])).numpy()[0])
            k = grid.k_magnitude_full()
            np.testing.assert_allclose(full[k > 0], (spectrum.evaluate(k, **overrides) * norm)[k > 0], rtol=1e-12)


@pytest.mark.parametrize("walk", [None, 0.4])
def test_band_prior_is_lognormal_per_bin_plus_random_walk(walk):
    grid, spectrum, obs, priors = band_case(walk)
    post = FieldPosterior(grid, spectrum, obs, hyper_priors=priors, dtype=tf.float64)
    eta = np.array([[0.5, 1.5, 1.0, -0.2, 0.3]])
    u = np.zeros((1, *grid.shape))
    got = (post.log_prior(tf.constant(u), tf.constant(eta)) + 0.5 * grid.n_cells * math.log(2 * math.pi)).numpy()[0]
    expected = stats.norm(1.0, 2.0).logpdf(eta[0]).sum()
    if walk is not None:
        expected += stats.norm(0.0, walk).logpdf(np.diff(eta[0])).sum()
        assert spectrum.log_random_walk_prior(eta)[0] == pytest.approx(
            stats.norm(0.0, walk).logpdf(np.diff(eta[0])).sum(), rel=1e-13)
    assert got == pytest.approx(expected, rel=1e-12)
    theta = post.hyperparameters(tf.constant(eta))
    assert theta["band_power_03"].numpy()[0] == pytest.approx(math.exp(-0.2))


def test_band_powers_refuse_other_priors():
    from core.priors import UniformPrior

    grid, spectrum, obs, priors = band_case()
    priors["band_power_01"] = UniformPrior(0.1, 10.0)
    with pytest.raises(ValueError, match="band powers take dist = \"lognormal\""):
        FieldPosterior(grid, spectrum, obs, hyper_priors=priors)
