"""Tests of core.engine.integral_density (TensorFlow) against independent references.

References: the numpy mirror ``core.integral.log_density`` (itself checked
against scipy.stats in test_integral_model), central finite differences in float64,
TFP's own distributions and bijector Jacobians, and the grid-quadrature posterior
(known-posterior test of a short HMC run).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from core import integral as im
from core import priors as pr
from core.engine.integral_density import make_log_density

tfd = tfp.distributions

NORMAL_A = {"dist": "normal", "loc": 0.0, "scale": 1.0}
NARROW_A = {"dist": "normal", "loc": 0.3, "scale": 0.1}  # float32-safe: 1.3 * 10 < 81.8

SPECS = {
    "normal-normal-halfnormal": dict(A=NORMAL_A, c={"dist": "normal", "loc": 0, "scale": 10},
                                     sigma={"dist": "halfnormal", "scale": 2}),
    "uniform-fixed-lognormal-f": dict(A={"dist": "uniform", "low": -1, "high": 1}, c=1.0,
                                      sigma={"dist": "lognormal", "loc": math.log(0.5),
                                             "scale": 0.3}),
    "lognormal-uniform-uniform0": dict(A={"dist": "lognormal", "loc": math.log(0.3), "scale": 0.3},
                                       c={"dist": "uniform", "low": -5, "high": 5},
                                       sigma={"dist": "uniform", "low": 0, "high": 3}),
    "halfnormal-lognormal-uniform": dict(A={"dist": "halfnormal", "scale": 0.5},
                                         c={"dist": "lognormal", "loc": 0, "scale": 1},
                                         sigma={"dist": "uniform", "low": 0.1, "high": 2}),
    "narrow-normal-fixed": dict(A=NARROW_A, c={"dist": "normal", "loc": 0, "scale": 10},
                                sigma=0.5),
}
TRUTH = {"A": 0.3, "c": 1.0, "sigma": 0.5}


def make_spec(name, n=40, refine=4):
    s = im.make_demo_series(seed=11, n=n)
    f, t = None, s.t
    if name.endswith("-f"):
        t = s.t + 0.5
        f = 2.0 + np.sin(t)
    return im.IntegralModelSpec(t, s.y, f, refine, SPECS[name])


def states(spec, batch=(5,), scale=0.03, seed=0):
    u0 = spec.unconstrain({k: TRUTH[k] for k in spec.sampled_names})
    rng = np.random.default_rng(seed)
    return u0 + scale * rng.standard_normal(batch + u0.shape)


def value_and_grad(ld, u):
    x = tf.constant(u, ld.dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        v = ld(x)
    return v.numpy(), tape.gradient(v, x).numpy()


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize("name", sorted(SPECS))
def test_float64_matches_numpy_mirror(name):
    spec = make_spec(name)
    ld = make_log_density(spec, tf.float64)
    u = states(spec, batch=(2, 3))
    got = ld(tf.constant(u)).numpy()
    want = im.log_density(spec, u)
    assert got.shape == (2, 3)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    as_dict = ld({k: u[..., i] for i, k in enumerate(ld.unconstrained_names)}).numpy()
    np.testing.assert_allclose(as_dict, got, rtol=0, atol=0)


def test_float32_matches_numpy_mirror():
    spec = make_spec("narrow-normal-fixed")
    ld = make_log_density(spec, tf.float32)
    u = states(spec, batch=(8,))
    got = ld(tf.constant(u, tf.float32)).numpy()
    assert got.dtype == np.float32
    want = im.log_density(spec, u.astype(np.float32).astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-5)


@pytest.mark.parametrize("A", [0.0, 1e-7, -0.5, 0.3, 0.8])
def test_float32_trapezoid_is_accurate(A):
    spec = make_spec("narrow-normal-fixed", n=100, refine=8)
    ld = make_log_density(spec, tf.float32)
    got = ld.integral(tf.constant(A, tf.float32)).numpy()
    want = im.trapezoid_integral(spec.t, np.float32(A), None, 8)
    np.testing.assert_allclose(got, want, rtol=4e-6, atol=1e-6)  # float32 cumsum: ~1e-6


def test_jit_matches_eager_and_batches_chains():
    spec = make_spec("normal-normal-halfnormal")
    ld = make_log_density(spec)
    u = tf.constant(states(spec, batch=(4,)))
    jitted = tf.function(ld, jit_compile=True)
    np.testing.assert_allclose(jitted(u).numpy(), ld(u).numpy(), rtol=1e-13)
    single = np.array([ld(u[i]).numpy() for i in range(4)])
    np.testing.assert_allclose(ld(u).numpy(), single, rtol=1e-14)


# --------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("name", sorted(SPECS))
def test_float64_gradient_matches_central_differences(name):
    spec = make_spec(name)
    ld = make_log_density(spec, tf.float64)
    u = states(spec, batch=(3,), seed=1)
    _, grad = value_and_grad(ld, u)
    for j in range(u.shape[-1]):
        h = 1e-6 * max(1.0, float(np.max(np.abs(u[:, j]))))
        e = np.zeros(u.shape[-1])
        e[j] = h
        fd = (im.log_density(spec, u + e) - im.log_density(spec, u - e)) / (2 * h)
        np.testing.assert_allclose(grad[:, j], fd, rtol=2e-6, atol=1e-5 * np.max(np.abs(fd)))


def test_float32_gradient_matches_central_differences():
    spec = make_spec("narrow-normal-fixed")
    ld = make_log_density(spec, tf.float32)
    u = states(spec, batch=(4,), seed=2).astype(np.float32).astype(np.float64)
    _, grad = value_and_grad(ld, u)
    for j in range(u.shape[-1]):
        e = np.zeros(u.shape[-1])
        e[j] = 1e-6
        fd = (im.log_density(spec, u + e) - im.log_density(spec, u - e)) / 2e-6
        np.testing.assert_allclose(grad[:, j], fd, rtol=2e-3, atol=2e-3 * np.max(np.abs(fd)))


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_gradient_finite_at_zero_near_and_beyond_the_overflow_bound(dtype):
    s = im.make_demo_series(2, n=30)
    spec = im.IntegralModelSpec(s.t, s.y, None, 4, {
        "A": NARROW_A, "c": {"dist": "normal", "loc": 0, "scale": 1},
        "sigma": {"dist": "halfnormal", "scale": 1}})
    ld = make_log_density(spec, dtype)
    np_dtype = dtype.as_numpy_dtype
    a_lim = im.exponent_limit(spec, np_dtype) / spec.t_max
    big = 1e30 if dtype == tf.float32 else 1e200
    rows = [
        [0.0, 1.0, 0.0],                       # A = 0 exactly
        [-0.0, 1.0, math.log(0.5)],
        [a_lim * (1 - 1e-5), 1.0, 0.0],        # just inside the computed region
        [a_lim * (1 + 1e-5), 1.0, 0.0],        # just outside: -inf
        [4.4, 1.0, 0.0],                       # exp(A t_max) ~ 1e19: squares overflow float32
        [1e6, 1.0, 0.0], [-1e6, 1.0, 0.0],
        [0.3, big, 0.0], [0.3, 1.0, -80.0], [0.3, 1.0, 80.0], [0.3, 1.0, 1e4], [0.3, 1.0, -1e4],
    ]
    v, g = value_and_grad(ld, np.array(rows, dtype=np_dtype))
    assert not np.any(np.isnan(v))
    assert np.all(np.isfinite(g)), g
    assert np.isfinite(v[0]) and np.isfinite(v[1])
    assert v[3] == -np.inf  # (v[2] is -inf too: the residuals there are ~1e35 / 1e300)
    # the -inf regions agree with the numpy mirror using the same dtype limits
    want = im.log_density(spec, np.array(rows, dtype=np_dtype).astype(np.float64), dtype=np_dtype)
    np.testing.assert_array_equal(np.isinf(v), np.isinf(want))
    jv = tf.function(ld, jit_compile=True)(tf.constant(rows, dtype)).numpy()
    np.testing.assert_array_equal(np.isinf(jv), np.isinf(v))


def test_gradient_at_A_zero_matches_differences():
    spec = make_spec("normal-normal-halfnormal")
    ld = make_log_density(spec)
    u = np.array([[0.0, 1.0, 0.5]])
    _, g = value_and_grad(ld, u)
    h = 1e-6
    fd = (im.log_density(spec, u + [h, 0, 0]) - im.log_density(spec, u - [h, 0, 0])) / (2 * h)
    assert g[0, 0] == pytest.approx(fd[0], rel=1e-6)


# --------------------------------------------------------------------------- priors and bijectors


def tfp_distribution(prior):
    if isinstance(prior, pr.NormalPrior):
        return tfd.Normal(np.float64(prior.loc), np.float64(prior.scale))
    if isinstance(prior, pr.LogNormalPrior):
        return tfd.LogNormal(np.float64(prior.loc), np.float64(prior.scale))
    if isinstance(prior, pr.HalfNormalPrior):
        return tfd.HalfNormal(np.float64(prior.scale))
    return tfd.Uniform(np.float64(prior.low), np.float64(prior.high))


@pytest.mark.parametrize("name", sorted(SPECS))
def test_prior_terms_match_tfp_distributions_and_bijector_jacobians(name):
    spec = make_spec(name)
    ld = make_log_density(spec)
    u = tf.constant(states(spec, batch=(6,), scale=0.5, seed=3))
    values = ld.constrain(u)
    for i, (k, bij) in enumerate(zip(ld.names, ld.bijectors)):
        x = bij.forward(u[:, i])
        np.testing.assert_allclose(values[k].numpy(), x.numpy(), rtol=1e-14)
        want = tfp_distribution(spec.priors[k]).log_prob(x) + bij.forward_log_det_jacobian(u[:, i], 0)
        got = ld._priors[k].log_prob(u[:, i])
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-11)
    back = ld.unconstrain(values)
    np.testing.assert_allclose(back.numpy(), u.numpy(), rtol=1e-9, atol=1e-12)


def test_names_follow_the_spec():
    ld = make_log_density(make_spec("lognormal-uniform-uniform0"))
    assert ld.names == ("A", "c", "sigma")
    assert ld.unconstrained_names == ("log_A", "logit_c", "logit_sigma")
    assert ld.dim == 3
    ld = make_log_density(make_spec("narrow-normal-fixed"))
    assert ld.names == ("A", "c") and ld.unconstrained_names == ("A", "c")


# --------------------------------------------------------------------------- errors


def test_overflow_guard_raises_for_float32_only():
    spec = make_spec("normal-normal-halfnormal")  # A up to 10, t_max = 10
    with pytest.raises(ValueError, match=r"priors\['A'\]: the prior allows A up to 10.*float32"):
        make_log_density(spec, tf.float32)
    make_log_density(spec, tf.float64)


def test_bad_state_and_dtype_raise_value_error():
    spec = make_spec("normal-normal-halfnormal")
    ld = make_log_density(spec)
    with pytest.raises(ValueError, match="last axis must have length 3"):
        ld(tf.zeros([4, 2], tf.float64))
    with pytest.raises(ValueError, match=r"missing \['log_sigma'\]"):
        ld({"A": 0.3, "c": 1.0})
    with pytest.raises(ValueError, match="dtype: must be float32 or float64"):
        make_log_density(spec, tf.float16)
    fixed = im.IntegralModelSpec(spec.t, spec.y, None, 2, {"A": 0.3, "c": 1.0, "sigma": 0.5})
    with pytest.raises(ValueError, match="nothing to sample"):
        make_log_density(fixed)


# --------------------------------------------------------------------------- HMC


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_hmc_one_step_runs_under_jit_and_is_seed_reproducible(dtype):
    spec = make_spec("narrow-normal-fixed")
    ld = make_log_density(spec, dtype)
    kernel = tfp.mcmc.HamiltonianMonteCarlo(ld, step_size=tf.constant([1e-4, 0.02], dtype),
                                            num_leapfrog_steps=3)

    @tf.function(jit_compile=True)
    def step(x, seed):
        return kernel.one_step(x, kernel.bootstrap_results(x), seed=seed)

    x0 = tf.constant(states(spec, batch=(4,), scale=1e-4), dtype)
    seed = tf.constant([3, 4], tf.int32)
    x1, res = step(x0, seed)
    x1b, _ = step(x0, seed)
    assert x1.shape == (4, 2) and x1.dtype == dtype
    assert np.all(np.isfinite(x1.numpy())) and np.all(np.isfinite(res.accepted_results.target_log_prob.numpy()))
    np.testing.assert_array_equal(x1.numpy(), x1b.numpy())


def test_hmc_recovers_the_quadrature_posterior():
    """Known-posterior test: 16 chains x 800 draws against grid quadrature."""
    s = im.make_demo_series(seed=0, n=100)
    spec = im.IntegralModelSpec(s.t, s.y, None, 2, {
        "A": NORMAL_A, "c": {"dist": "normal", "loc": 0, "scale": 10},
        "sigma": {"dist": "halfnormal", "scale": 2}})
    q = im.posterior_quadrature(spec)
    ld = make_log_density(spec)
    mean = {k: q.mean[k] for k in ld.names}
    sd_u = np.array([q.sd["A"], q.sd["c"], q.sd["sigma"] / q.mean["sigma"]])
    kernel = tfp.mcmc.HamiltonianMonteCarlo(ld, step_size=tf.constant(0.4 * sd_u),
                                            num_leapfrog_steps=6)

    @tf.function(jit_compile=True)
    def run(x0, seed):
        return tfp.mcmc.sample_chain(800, x0, kernel=kernel, num_burnin_steps=100,
                                     trace_fn=lambda _, r: r.is_accepted, seed=seed)

    x0 = tf.tile(ld.unconstrain(mean)[None], [16, 1]) + tf.constant(
        0.5 * sd_u * np.random.default_rng(0).standard_normal((16, 3)))
    draws, accepted = run(x0, tf.constant([7, 8], tf.int32))
    assert np.mean(accepted.numpy()) > 0.6
    values = ld.constrain(draws)
    for k in ld.names:
        v = values[k].numpy()  # [draws, chains]
        chain_means = v.mean(axis=0)
        se = chain_means.std(ddof=1) / math.sqrt(v.shape[1])  # between-chain standard error
        assert abs(v.mean() - q.mean[k]) < 5 * se + 1e-3 * q.sd[k], (k, v.mean(), q.mean[k], se)
        assert v.std() == pytest.approx(q.sd[k], rel=0.1)
