"""Tests of core.integral against independent references.

References: exact rational Taylor series (fractions.Fraction) for expm1(z)/z and
(expm1(z) - z)/z^2; scipy.integrate.cumulative_trapezoid on a grid built here; the
Euler-Maclaurin leading error term of the trapezoid rule; scipy.integrate.quad of
exp(A s) times np.interp(f); scipy.stats log-densities; scipy.integrate.quad_vec
(nested for 2D) on a density written here; the conjugate Gaussian posterior of c.
"""

from __future__ import annotations

import math
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, optimize, special, stats

from core import integral as im
from core import priors as pr

NORMAL_A = {"dist": "normal", "loc": 0.0, "scale": 1.0}


def demo_spec(n=40, refine=8, f=None, t_shift=0.0, **priors):
    s = im.make_demo_series(seed=3, n=n)
    p = {"A": NORMAL_A, "c": 1.0, "sigma": 0.5}
    p.update(priors)
    return im.IntegralModelSpec(s.t + t_shift, s.y, f, refine, p)


# --------------------------------------------------------------------------- independent references


def frac_series(z, first: int) -> float:
    return float(exact_series(z, first))


def exact_series(z, first: int) -> Fraction:
    """sum_k z^k / (k + first)! in exact rational arithmetic.

    Summed until a term is below 1e-40 of the total (|z| <= 30 here, so the tail is
    smaller still).
    """
    z = Fraction(z)
    total, power, fact = Fraction(0), Fraction(1), Fraction(math.factorial(first))
    k = 0
    while True:
        term = power / fact
        total += term
        if k > abs(z) + 2 and abs(term) < Fraction(1, 10**40) * abs(total):
            return total
        power *= z
        fact *= k + first + 1
        k += 1


def independent_trapezoid(t, A, f, refine):
    """Refined grid built by concatenating linspaces; scipy's cumulative trapezoid."""
    knots = np.concatenate([[0.0], t]) if t[0] > 0 else np.asarray(t)
    pieces, data_index = [np.array([knots[0]])], [0]
    for a, b in zip(knots[:-1], knots[1:]):
        pieces.append(np.linspace(a, b, refine + 1)[1:])
        data_index.append(data_index[-1] + refine)
    s = np.concatenate(pieces)
    fs = np.ones_like(s) if f is None else np.interp(s, t, f)
    cum = integrate.cumulative_trapezoid(np.exp(A * s) * fs, s, initial=0.0)
    idx = np.array(data_index)
    return cum[idx[1:]] if t[0] > 0 else cum[idx]


def own_log_density(spec, A, c, sigma):
    """log prior (constrained, scipy.stats) + log likelihood with the independent trapezoid."""
    I = independent_trapezoid(spec.t, A, spec.f, spec.refine)
    return float(np.sum(stats.norm.logpdf(spec.y, c + I, sigma)))


# --------------------------------------------------------------------------- closed form near 0


@pytest.mark.parametrize("A", [1e-8, 1e-4, 0.0, -1e-6, 0.3, -2.0, 0.049, 0.051])
def test_closed_form_matches_exact_series(A):
    t = np.array([0.0, 1e-3, 0.5, 1.0, 3.0, 10.0])
    got = im.closed_form_integral(t, A)
    for ti, gi in zip(t, got):
        # (exp(A t) - 1)/A = t * sum_k (A t)^k / (k+1)!, the product A*t formed exactly.
        want = float(Fraction(ti) * exact_series(Fraction(A) * Fraction(ti), 1))
        assert gi == pytest.approx(want, rel=4e-16, abs=0.0)
    assert np.all(np.isfinite(got))


@pytest.mark.parametrize("z", [0.5 * (1 - 1e-12), 0.5 * (1 + 1e-12), -0.5 * (1 - 1e-12),
                               -0.5 * (1 + 1e-12), 1e-300, -3e-9, 2.0, -30.0])
def test_phi_functions_match_series_across_switch(z):
    assert im.expm1_ratio(z) == pytest.approx(frac_series(z, 1), rel=4e-16)
    assert im.phi2(z) == pytest.approx(frac_series(z, 2), rel=1e-15)


def test_phi_functions_at_zero():
    assert im.expm1_ratio(0.0) == 1.0
    assert im.phi2(0.0) == 0.5
    assert im.closed_form_mean(np.array([0.0, 2.0]), 0.0, 1.5).tolist() == [1.5, 3.5]


def test_closed_form_float32_has_no_nan_and_is_accurate():
    t = np.linspace(0, 10, 11).astype(np.float32)
    for A in [0.0, 1e-30, 1e-8, -1e-6, 1e-3, 0.3, -3.0]:
        got = im.closed_form_integral(t, np.float32(A))
        assert got.dtype == np.float32
        assert np.all(np.isfinite(got))
        want = im.closed_form_integral(t.astype(np.float64), A)
        np.testing.assert_allclose(got, want, rtol=5e-7, atol=0)


# --------------------------------------------------------------------------- trapezoid rule


@pytest.mark.parametrize("t_shift", [0.0, 0.7])
@pytest.mark.parametrize("with_f", [False, True])
@pytest.mark.parametrize("refine", [1, 3])
def test_trapezoid_matches_independent_cumulative_trapezoid(t_shift, with_f, refine):
    t = np.sort(np.random.default_rng(0).uniform(0, 8, 25)) + t_shift
    t[0] = t_shift
    f = 2.0 + np.sin(t) if with_f else None
    for A in [0.3, -0.8, 0.0]:
        got = im.trapezoid_integral(t, A, f, refine)
        want = independent_trapezoid(t, A, f, refine)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)


def test_trapezoid_is_exact_for_constant_integrand():
    t = np.linspace(0.0, 10.0, 30)
    np.testing.assert_allclose(im.trapezoid_integral(t, 0.0, None, 5), t, rtol=1e-14)


@pytest.mark.parametrize("A", [0.3, -0.5, 1.2])
def test_trapezoid_converges_to_closed_form_at_order_two(A):
    t = np.linspace(0.0, 10.0, 100)  # the user's grid
    exact = im.closed_form_integral(t, A)
    errs = [np.max(np.abs(im.trapezoid_integral(t, A, None, r) - exact)) for r in (1, 2, 4, 8, 16)]
    orders = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all(np.abs(orders - 2.0) < 0.02), orders
    # Euler-Maclaurin: T - I = h^2/12 (g'(t) - g'(0)) + O(h^4), g'(s) = A exp(A s).
    for r in (1, 8):
        h = (t[1] - t[0]) / r
        lead = h * h / 12.0 * A * np.expm1(A * t)
        err = im.trapezoid_integral(t, A, None, r) - exact
        np.testing.assert_allclose(err[1:], lead[1:], rtol=0.02 * (h * abs(A)) ** 2 + 1e-6)


def test_trapezoid_with_sampled_f_converges_at_order_two():
    t = np.linspace(0.4, 10.0, 40)
    f = 2.0 + np.sin(t)
    exact = im.exact_integral(t, 0.3, f)
    errs = [np.max(np.abs(im.trapezoid_integral(t, 0.3, f, r) - exact)) for r in (2, 4, 8, 16)]
    orders = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all(np.abs(orders - 2.0) < 0.05), orders


@settings(max_examples=25, deadline=None)
@given(A=st.floats(-2.0, 1.5), shift=st.floats(0.0, 2.0))
def test_exact_piecewise_linear_integral_matches_quad(A, shift):
    t = np.array([0.0, 0.7, 1.5, 3.0, 3.2, 5.0]) + shift
    f = np.array([1.0, -2.0, 0.5, 3.0, 3.0, -1.0])
    got = im.exact_integral(t, A, f)
    g = lambda s: math.exp(A * s) * np.interp(s, t, f)  # held at f[0] below t[0]
    want = np.cumsum([integrate.quad(g, a, b, epsabs=0, epsrel=1e-13)[0]
                      for a, b in zip(np.r_[0.0, t[:-1]], t)])
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)


def test_integrals_broadcast_over_a_batch_of_A():
    t = np.linspace(0.0, 5.0, 7)
    A = np.array([[0.1, 0.2, 0.3], [-0.1, 0.0, 1e-9]])
    assert im.trapezoid_integral(t, A, None, 2).shape == (2, 3, 7)
    assert im.exact_integral(t, A, np.ones(7)).shape == (2, 3, 7)
    np.testing.assert_allclose(im.exact_integral(t, A, np.ones(7)), im.exact_integral(t, A),
                               rtol=1e-14)


def test_predictive_mean_uses_spec_refine_or_exact():
    spec = demo_spec(refine=4)
    got = im.predictive_mean(spec, 0.3, 1.0)
    np.testing.assert_allclose(got, 1.0 + independent_trapezoid(spec.t, 0.3, None, 4), rtol=1e-13)
    np.testing.assert_allclose(im.predictive_mean(spec, 0.3, 1.0, exact=True),
                               im.closed_form_mean(spec.t, 0.3, 1.0), rtol=1e-14)


# --------------------------------------------------------------------------- spec validation


def _spec_kwargs(**changes):
    s = im.make_demo_series(0, n=10)
    kw = dict(t=s.t, y=s.y, f=None, refine=4, priors={"A": NORMAL_A, "c": 1.0, "sigma": 0.5})
    kw.update(changes)
    return kw


def _priors(**changes):
    p = {"A": NORMAL_A, "c": 1.0, "sigma": 0.5}
    p.update(changes)
    return p


BAD_SPECS = [
    (dict(t=[0.0, 1.0, 1.0, 2.0] + list(range(3, 9))), r"t: must be strictly increasing; t\[2\]"),
    (dict(t=np.arange(10.0)[::-1]), "t: must be strictly increasing"),
    (dict(t=np.arange(10.0) - 1.0), r"t: t\[0\] = -1.0 < 0"),
    (dict(t=[0.0]), "t: need at least 2"),
    (dict(t=np.ones((2, 5))), "t: must be one-dimensional"),
    (dict(y=[1.0] * 4 + [np.nan] + [1.0] * 5), "y: value nan at index 4"),
    (dict(y=[1.0] * 9), "y: length 9 does not match t"),
    (dict(f=[1.0] * 11), "f: length 11"),
    (dict(f=[1.0] * 9 + [np.inf]), "f: value inf at index 9"),
    (dict(refine=0), "refine: must be >= 1"),
    (dict(refine=2.5), "refine: must be an integer"),
    (dict(priors={"A": 1.0, "c": 1.0}), r"priors: missing key\(s\) \['sigma'\]"),
    (dict(priors=_priors(B=1.0)), r"priors: unknown key\(s\) \['B'\]"),
    (dict(priors=_priors(sigma=0.0)), r"priors\['sigma'\]: the noise sd must be > 0"),
    (dict(priors=_priors(sigma=-1.0)), r"priors\['sigma'\]"),
    (dict(priors=_priors(sigma={"dist": "normal", "loc": 1, "scale": 1})), r"priors\['sigma'\]: a normal"),
    (dict(priors=_priors(sigma={"dist": "uniform", "low": -1, "high": 1})), r"priors\['sigma'\]: uniform low"),
    (dict(priors=_priors(A={"dist": "cauchy", "loc": 0, "scale": 1})), r"priors\['A'\]: unknown dist 'cauchy'"),
    (dict(priors=_priors(A={"loc": 0, "scale": 1})), r"priors\['A'\]: a prior mapping needs a 'dist'"),
    (dict(priors=_priors(A={"dist": "normal", "loc": 0})), r"priors\['A'\]: normal prior needs .* missing \['scale'\]"),
    (dict(priors=_priors(A={"dist": "normal", "loc": 0, "scale": 1, "df": 3})), r"unknown \['df'\]"),
    (dict(priors=_priors(A={"dist": "normal", "loc": 0, "scale": -1})), r"priors\['A'\]\.scale: must be > 0"),
    (dict(priors=_priors(c={"dist": "uniform", "low": 2, "high": 1})), r"priors\['c'\]: uniform needs low < high"),
    (dict(priors=_priors(c="one")), r"priors\['c'\]: must be a number \(fixed\) or a prior table"),
    (dict(priors=_priors(A=float("nan"))), r"priors\['A'\]: must be a finite number, got nan"),
    (dict(priors=_priors(A={"dist": "halfnormal", "scale": True})), r"priors\['A'\]\.scale: must be a finite number, got True"),
]


@pytest.mark.parametrize("changes,message", BAD_SPECS)
def test_bad_spec_raises_value_error_naming_the_key(changes, message):
    with pytest.raises(ValueError, match=message):
        im.IntegralModelSpec(**_spec_kwargs(**changes))


def test_spec_stores_read_only_float_arrays_and_prior_objects():
    spec = im.IntegralModelSpec(**_spec_kwargs(priors=_priors(
        sigma={"dist": "halfnormal", "scale": 1}, c={"dist": "uniform", "low": -1, "high": 3})))
    assert spec.t.dtype == np.float64 and not spec.t.flags.writeable
    assert isinstance(spec.priors["A"], pr.NormalPrior)
    assert isinstance(spec.priors["c"], pr.UniformPrior)
    assert spec.sampled_names == ("A", "c", "sigma")
    assert spec.unconstrained_names == ("A", "logit_c", "log_sigma")
    assert spec.priors["sigma"].to_config() == {"dist": "halfnormal", "scale": 1.0}
    values = {"A": np.array([0.3, -1.0]), "c": np.array([0.0, 2.9]), "sigma": np.array([0.1, 5.0])}
    back = spec.constrain(spec.unconstrain(values))
    for k in values:
        np.testing.assert_allclose(back[k], values[k], rtol=1e-12, atol=1e-14)


# --------------------------------------------------------------------------- overflow guard


def test_overflow_guard_raises_clear_message():
    spec = demo_spec()  # A ~ Normal(0, 1): up to 10; t_max = 10
    with pytest.raises(ValueError) as err:
        im.check_overflow(spec, np.float32)
    msg = str(err.value)
    for piece in ["priors['A']", "allows A up to 10", "normal loc + 10 scale", "t = 10",
                  "overflows float32", "max ~88.7/t", "Narrow the prior for A or use float64"]:
        assert piece in msg, msg
    im.check_overflow(spec, np.float64)  # 100 < 709 - margin


@pytest.mark.parametrize("prior,a_hi", [
    ({"dist": "normal", "loc": 1.0, "scale": 2.0}, 21.0),
    ({"dist": "uniform", "low": -1.0, "high": 7.5}, 7.5),
    ({"dist": "lognormal", "loc": 0.0, "scale": 0.2}, math.exp(2.0)),
    ({"dist": "halfnormal", "scale": 0.9}, 9.0),
    (7.9, 7.9),
])
def test_overflow_rule_per_prior_kind(prior, a_hi):
    spec = demo_spec(A=prior)
    limit = im.exponent_limit(spec, np.float32)
    assert limit == pytest.approx(math.log(np.finfo(np.float32).max) - math.log(4)
                                  - 2 * math.log(11.0) - math.log(2.0))
    if a_hi * spec.t_max > limit:
        with pytest.raises(ValueError, match=f"allows A up to {a_hi:.6g}"):
            im.check_overflow(spec, np.float32)
    else:
        im.check_overflow(spec, np.float32)


# --------------------------------------------------------------------------- numpy log-density


MIRROR_SPECS = {
    "normal-normal-halfnormal": dict(c={"dist": "normal", "loc": 0, "scale": 10},
                                     sigma={"dist": "halfnormal", "scale": 2}),
    "uniform-fixed-lognormal": dict(A={"dist": "uniform", "low": -1, "high": 1},
                                    sigma={"dist": "lognormal", "loc": math.log(0.5), "scale": 0.3}),
    "lognormal-uniform-uniform0": dict(A={"dist": "lognormal", "loc": math.log(0.3), "scale": 0.5},
                                       c={"dist": "uniform", "low": -5, "high": 5},
                                       sigma={"dist": "uniform", "low": 0, "high": 3}),
    "halfnormal-lognormal-uniform": dict(A={"dist": "halfnormal", "scale": 0.5},
                                         c={"dist": "lognormal", "loc": 0, "scale": 1},
                                         sigma={"dist": "uniform", "low": 0.1, "high": 2}),
}


def scipy_logpdf(prior, x):
    if isinstance(prior, pr.NormalPrior):
        return stats.norm.logpdf(x, prior.loc, prior.scale)
    if isinstance(prior, pr.LogNormalPrior):
        return stats.lognorm.logpdf(x, prior.scale, scale=math.exp(prior.loc))
    if isinstance(prior, pr.HalfNormalPrior):
        return stats.halfnorm.logpdf(x, scale=prior.scale)
    return stats.uniform.logpdf(x, prior.low, prior.high - prior.low)


def scipy_log_jacobian(prior, u):
    if isinstance(prior, pr.NormalPrior):
        return 0.0
    if isinstance(prior, (pr.LogNormalPrior, pr.HalfNormalPrior)):
        return u  # x = e^u
    s = 1.0 / (1.0 + math.exp(-u))
    return math.log((prior.high - prior.low) * s * (1.0 - s))


@pytest.mark.parametrize("name", sorted(MIRROR_SPECS))
def test_numpy_log_density_matches_scipy_stats(name):
    kw = MIRROR_SPECS[name]
    f = None
    if name.startswith("uniform"):
        f = 2.0 + np.sin(im.make_demo_series(3, n=40).t)
    spec = demo_spec(f=f, t_shift=0.5 if f is not None else 0.0, refine=3, **kw)
    rng = np.random.default_rng(5)
    truth = {"A": 0.3, "c": 1.0, "sigma": 0.5}
    u0 = spec.unconstrain({k: truth[k] for k in spec.sampled_names})
    u = u0 + 0.05 * rng.standard_normal((6, len(u0)))
    got = im.log_density(spec, u)
    vals = spec.constrain(u)
    for i in range(u.shape[0]):
        p = {k: (vals[k][i] if k in vals else spec.priors[k].value) for k in im.PARAMETERS}
        want = own_log_density(spec, p["A"], p["c"], p["sigma"])
        for j, k in enumerate(spec.sampled_names):
            want += scipy_logpdf(spec.priors[k], p[k]) + scipy_log_jacobian(spec.priors[k], u[i, j])
        assert got[i] == pytest.approx(want, rel=1e-12, abs=1e-10)
    as_dict = im.log_density(spec, dict(zip(spec.unconstrained_names, u.T)))
    np.testing.assert_array_equal(as_dict, got)


def test_numpy_log_density_is_minus_inf_beyond_the_exponent_limit():
    spec = demo_spec(c={"dist": "normal", "loc": 0, "scale": 10})
    for dtype in (np.float32, np.float64):
        a_lim = im.exponent_limit(spec, dtype) / spec.t_max
        u = np.array([[a_lim * (1 - 1e-9), 1.0], [a_lim * (1 + 1e-9), 1.0]])
        lp = im.log_density(spec, u, dtype=dtype)
        assert lp[1] == -np.inf and not np.isnan(lp[0])
    with pytest.raises(ValueError, match="last axis must have length 2"):
        im.log_density(spec, np.zeros((3, 3)))


# --------------------------------------------------------------------------- quadrature


def laplace_box(neg_lp, x0, width=14.0):
    """Mode by Nelder-Mead, sd from a finite-difference Hessian: independent integration limits."""
    res = optimize.minimize(neg_lp, x0, method="Nelder-Mead",
                            options={"xatol": 1e-12, "fatol": 1e-12, "maxiter": 20000})
    x = res.x
    d = len(x)
    h = 1e-4 * np.maximum(np.abs(x), 1e-2)
    H = np.empty((d, d))
    for i in range(d):
        for j in range(d):
            ei, ej = np.eye(d)[i] * h[i], np.eye(d)[j] * h[j]
            H[i, j] = (neg_lp(x + ei + ej) - neg_lp(x + ei - ej) - neg_lp(x - ei + ej)
                       + neg_lp(x - ei - ej)) / (4 * h[i] * h[j])
    sd = np.sqrt(np.diag(np.linalg.inv(H)))
    return x, sd, [(x[i] - width * sd[i], x[i] + width * sd[i]) for i in range(d)]


@pytest.mark.parametrize("prior_A", [NORMAL_A, {"dist": "uniform", "low": 0.0, "high": 1.0}])
def test_quadrature_1d_matches_scipy_quad(prior_A):
    spec = demo_spec(n=30, A=prior_A)
    pa = spec.priors["A"]
    lp = lambda a: own_log_density(spec, a, 1.0, 0.5) + scipy_logpdf(pa, a)
    mode, sd, [(lo, hi)] = laplace_box(lambda x: -lp(x[0]), [0.3])
    peak = lp(mode[0])
    vec = lambda a: math.exp(lp(a) - peak) * np.array([1.0, a, a * a])
    I, _ = integrate.quad_vec(vec, lo, hi, epsrel=1e-13, points=[mode[0]])
    mean = I[1] / I[0]
    want_sd = math.sqrt(I[2] / I[0] - mean ** 2)
    q = im.posterior_quadrature(spec)
    assert q.mean["A"] == pytest.approx(mean, rel=1e-10)
    assert q.sd["A"] == pytest.approx(want_sd, rel=1e-6)
    assert q.log_evidence == pytest.approx(peak + math.log(I[0]), abs=1e-8)
    assert set(q.mean) == {"A"}


def gauss_legendre(lo, hi, n=160):
    x, w = special.roots_legendre(n)
    return 0.5 * (hi - lo) * x + 0.5 * (hi + lo), 0.5 * (hi - lo) * w


def norm_logpdf(x, mu, s):
    return -0.5 * ((x - mu) / s) ** 2 - np.log(s) - 0.5 * math.log(2 * math.pi)


def test_quadrature_marginalises_c_analytically():
    """2D (A, c): adaptive quad_vec over A of a Gauss-Legendre rule over c, on the
    unmarginalised density written here."""
    cp = {"dist": "normal", "loc": 0.5, "scale": 0.4}
    spec = demo_spec(n=20, c=cp, sigma=0.8)

    def lp(a, c):  # c: scalar or array
        I = independent_trapezoid(spec.t, a, None, spec.refine)
        c = np.asarray(c, dtype=float)
        ll = np.sum(norm_logpdf(spec.y, c[..., None] + I, 0.8), axis=-1)
        return ll + norm_logpdf(a, 0.0, 1.0) + norm_logpdf(c, 0.5, 0.4)

    mode, sd, [(alo, ahi), (clo, chi)] = laplace_box(lambda x: -lp(*x), [0.3, 1.0])
    peak = lp(*mode)
    cx, cw = gauss_legendre(clo, chi)

    def inner(a):
        p = np.exp(lp(a, cx) - peak) * cw
        return np.array([p.sum(), a * p.sum(), a * a * p.sum(), p @ cx, p @ cx ** 2])

    I, _ = integrate.quad_vec(inner, alo, ahi, epsrel=1e-11, points=[mode[0]])
    Z = I[0]
    q = im.posterior_quadrature(spec)
    assert q.mean["A"] == pytest.approx(I[1] / Z, rel=1e-9)
    assert q.sd["A"] == pytest.approx(math.sqrt(I[2] / Z - (I[1] / Z) ** 2), rel=1e-5)
    assert q.mean["c"] == pytest.approx(I[3] / Z, rel=1e-8)
    assert q.sd["c"] == pytest.approx(math.sqrt(I[4] / Z - (I[3] / Z) ** 2), rel=1e-5)
    assert q.log_evidence == pytest.approx(peak + math.log(Z), abs=1e-7)


def test_quadrature_over_A_and_sigma_matches_nested_quad():
    spec = demo_spec(n=20, sigma={"dist": "halfnormal", "scale": 1.0})

    def lp(a, v):  # v = log sigma (scalar or array), Jacobian sigma
        I = independent_trapezoid(spec.t, a, None, spec.refine)
        v = np.asarray(v, dtype=float)
        s = np.exp(v)
        ll = np.sum(norm_logpdf(spec.y, 1.0 + I, s[..., None]), axis=-1)
        return ll + norm_logpdf(a, 0.0, 1.0) + math.log(2.0) + norm_logpdf(s, 0.0, 1.0) + v

    mode, sd, [(alo, ahi), (vlo, vhi)] = laplace_box(lambda x: -lp(*x), [0.3, math.log(0.5)])
    peak = lp(*mode)
    vx, vw = gauss_legendre(vlo, vhi)

    def inner(a):
        p = np.exp(lp(a, vx) - peak) * vw
        s = np.exp(vx)
        return np.array([p.sum(), a * p.sum(), a * a * p.sum(), p @ s, p @ s ** 2])

    I, _ = integrate.quad_vec(inner, alo, ahi, epsrel=1e-11, points=[mode[0]])
    Z = I[0]
    q = im.posterior_quadrature(spec)
    assert q.mean["A"] == pytest.approx(I[1] / Z, rel=1e-9)
    assert q.sd["A"] == pytest.approx(math.sqrt(I[2] / Z - (I[1] / Z) ** 2), rel=1e-5)
    assert q.mean["sigma"] == pytest.approx(I[3] / Z, rel=1e-8)
    assert q.sd["sigma"] == pytest.approx(math.sqrt(I[4] / Z - (I[3] / Z) ** 2), rel=1e-5)
    assert q.log_evidence == pytest.approx(peak + math.log(Z), abs=1e-7)
    assert q.weights.shape == (601, 601) and q.weights.sum() == pytest.approx(1.0)


def test_quadrature_conjugate_c_posterior():
    """A, sigma fixed, c ~ N(m0, s0^2): c | y ~ N(mu, 1/P) with P = n/sigma^2 + 1/s0^2."""
    spec = demo_spec(n=25, A=0.29, c={"dist": "normal", "loc": 2.0, "scale": 0.3}, sigma=0.5)
    r = spec.y - independent_trapezoid(spec.t, 0.29, None, spec.refine)
    P = r.size / 0.25 + 1 / 0.09
    mu = (r.sum() / 0.25 + 2.0 / 0.09) / P
    q = im.posterior_quadrature(spec)
    assert q.mean["c"] == pytest.approx(mu, rel=1e-13)
    assert q.sd["c"] == pytest.approx(1 / math.sqrt(P), rel=1e-13)
    # evidence: y ~ N(I + m0, sigma^2 I + s0^2 11^T)
    cov = 0.25 * np.eye(r.size) + 0.09
    want = stats.multivariate_normal.logpdf(r, np.full(r.size, 2.0), cov)
    assert q.log_evidence == pytest.approx(want, abs=1e-9)


def test_quadrature_needs_c_fixed_or_normal():
    spec = demo_spec(c={"dist": "uniform", "low": 0, "high": 2})
    with pytest.raises(ValueError, match=r"priors\['c'\].*normal prior"):
        im.posterior_quadrature(spec)
    with pytest.raises(ValueError, match="refine"):
        im.posterior_quadrature(demo_spec(), refine=4, exact=True)


# --------------------------------------------------------------------------- discretisation report


@pytest.mark.parametrize("with_f", [False, True])
def test_discretisation_report_bias_shrinks_fourfold(with_f):
    f = 2.0 + np.sin(np.linspace(0.0, 10.0, 40) + 0.5) if with_f else None
    spec = demo_spec(f=f, t_shift=0.5 if with_f else 0.0,
                     c={"dist": "normal", "loc": 0, "scale": 10})
    rep = im.discretisation_report(spec, refine=2)
    assert rep.bias_ratio == pytest.approx(4.0, abs=0.15)
    assert abs(rep.observed_order - 2.0) < 0.06
    # Richardson removes the h^2 term: its error is far below the bias at refine r.
    assert abs(rep.richardson_mean - rep.mean_exact) < 0.02 * abs(rep.bias_r)
    assert rep.richardson_bias_r == pytest.approx(rep.bias_r, rel=0.03)
    assert rep.reference == ("exact piecewise-linear f" if with_f else "closed form")
    text = rep.format()
    for piece in ["refine = 2", "refine 4", "Richardson (4 m4 - m2)/3", "posterior sd", "ratio"]:
        assert piece in text, text


def test_report_for_users_grid_and_refine_advice():
    s = im.make_demo_series(0)  # t = linspace(0, 10, 100), as in the user's question
    spec = im.IntegralModelSpec(s.t, s.y, None, 1, {"A": NORMAL_A, "c": 1.0, "sigma": 0.5})
    rep = im.discretisation_report(spec)
    assert rep.refine == 1
    assert abs(rep.bias_r_in_sd) < 0.1  # negligible on the user's grid
    assert rep.refine_for(0.1) == 1
    assert rep.refine_for(abs(rep.bias_r_in_sd) / 9) == 3
    with pytest.raises(ValueError, match=r"priors\['A'\]: A is fixed"):
        im.discretisation_report(demo_spec(A=0.3, c={"dist": "normal", "loc": 0, "scale": 1}))


# --------------------------------------------------------------------------- demo data and files


def test_demo_series_is_deterministic_and_follows_the_closed_form():
    a, b = im.make_demo_series(7), im.make_demo_series(7)
    np.testing.assert_array_equal(a.y, b.y)
    assert not np.array_equal(a.y, im.make_demo_series(8).y)
    assert a.t[0] == 0.0 and a.t[-1] == 10.0 and a.t.size == 100 and a.f is None
    resid = a.y - im.closed_form_mean(a.t, 0.3, 1.0)
    assert 0.4 < np.std(resid) < 0.6


# --------------------------------------------------------------------------- architecture


def test_importing_integral_model_does_not_load_tensorflow():
    code = "import sys, core.integral; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"
