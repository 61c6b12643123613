"""The TensorFlow twins of core.priors (core.engine.prior_density) against the numpy
registry, for every kind, on random values: both densities (the closed form the integral
model sums and the tfp route the field hyperparameters take), the maps and Jacobians."""

import numpy as np
import pytest
import tensorflow as tf

from core import priors as P
from core.engine.prior_density import TF_PRIOR_KINDS, default_limits, tf_prior

PRIORS = {
    "normal": P.NormalPrior(loc=0.4, scale=1.7),
    "lognormal": P.LogNormalPrior(loc=-0.3, scale=0.6),
    "halfnormal": P.HalfNormalPrior(scale=2.5),
    "uniform": P.UniformPrior(low=-1.5, high=2.0),
    "uniform0": P.UniformPrior(low=0.0, high=3.0),      # log_forward's low = 0 branch
}
TOL = {tf.float64: dict(rtol=1e-11, atol=1e-11), tf.float32: dict(rtol=2e-5, atol=2e-5)}


def test_every_sampled_kind_has_a_twin():
    assert tuple(TF_PRIOR_KINDS) == P.SAMPLED_KINDS
    assert {p.dist for p in PRIORS.values()} == set(P.SAMPLED_KINDS)


def _u(prior, seed):
    lo, hi = prior.unconstrained_range()
    return np.random.default_rng(seed).uniform(max(lo, -6.0), min(hi, 6.0), 50)


@pytest.mark.parametrize("dtype", [tf.float64, tf.float32])
@pytest.mark.parametrize("name", sorted(PRIORS))
def test_twin_matches_the_numpy_registry(name, dtype):
    prior = PRIORS[name]
    twin = tf_prior(prior, dtype)
    u = _u(prior, seed=sorted(PRIORS).index(name))
    ut = tf.constant(u, dtype)
    tol = TOL[dtype]
    want = prior.unconstrained_logpdf(u, default_limits(dtype)["quadratic"])
    # the closed form (integral model)
    np.testing.assert_allclose(twin.log_prob(ut).numpy(), want, **tol)
    # the tfp route (field hyperparameters): log p(x(u)) + log |dx/du|
    bij = twin.bijector()
    x = bij.forward(ut)
    route = twin.distribution().log_prob(x) + bij.forward_log_det_jacobian(ut, event_ndims=0)
    np.testing.assert_allclose(route.numpy(), want, rtol=1e-4 if dtype == tf.float32 else 1e-9,
                               atol=1e-4 if dtype == tf.float32 else 1e-9)
    np.testing.assert_allclose(twin.distribution().log_prob(x).numpy(),
                               prior.logpdf(x.numpy().astype(np.float64)), **tol)
    # the maps: forward, inverse, log-Jacobian, log x
    np.testing.assert_allclose(x.numpy(), prior.forward(u), **tol)
    fwd, ok = twin.forward(ut)
    assert ok.numpy().all()
    np.testing.assert_allclose(fwd.numpy(), prior.forward(u), **tol)
    np.testing.assert_allclose(bij.forward_log_det_jacobian(ut, event_ndims=0).numpy(),
                               prior.log_jacobian(u), **tol)
    if dtype == tf.float64:
        np.testing.assert_allclose(bij.inverse(tf.constant(prior.forward(u), dtype)).numpy(), u,
                                   rtol=1e-8, atol=1e-8)
    if prior.support[0] >= 0:           # log x: for positive parameters (sigma)
        np.testing.assert_allclose(twin.log_forward(ut).numpy(), prior.log_forward(u), **tol)


def test_log_coordinates_are_guarded_beyond_the_exp_limit():
    prior = P.LogNormalPrior(0.0, 1.0)
    twin = tf_prior(prior, tf.float32)
    limit = default_limits(tf.float32)["positive_exp"]
    x, ok = twin.forward(tf.constant([0.0, limit + 1.0], tf.float32))
    assert ok.numpy().tolist() == [True, False] and np.all(np.isfinite(x.numpy()))
