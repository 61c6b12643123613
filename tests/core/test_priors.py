"""Tests of core.priors, the registry of scalar priors: parsing and its messages, against
scipy.stats (logpdf, median, support, draws), the unconstrained maps, seeds."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from core import priors as P
from core.field.power_spectrum import FIELD_HYPERPRIOR_KINDS

# one instance of every kind (fixed too), with its scipy.stats twin
EXAMPLES = {
    "normal": (P.NormalPrior(loc=0.5, scale=2.0), stats.norm(0.5, 2.0)),
    "lognormal": (P.LogNormalPrior(loc=0.3, scale=0.7), stats.lognorm(0.7, scale=math.exp(0.3))),
    "halfnormal": (P.HalfNormalPrior(scale=1.5), stats.halfnorm(scale=1.5)),
    "uniform": (P.UniformPrior(low=-1.0, high=3.0), stats.uniform(-1.0, 4.0)),
}
SAMPLED = sorted(EXAMPLES)


def test_registry_holds_every_kind_once():
    assert list(P.PRIOR_KINDS) == ["fixed", "normal", "lognormal", "halfnormal", "uniform"]
    assert P.SAMPLED_KINDS == ("normal", "lognormal", "halfnormal", "uniform")
    for name, cls in P.PRIOR_KINDS.items():
        assert cls.dist == name
    assert {k: P.PRIOR_KINDS[k].parameters for k in P.PRIOR_KINDS} == {
        "fixed": ("value",), "normal": ("loc", "scale"), "lognormal": ("loc", "scale"),
        "halfnormal": ("scale",), "uniform": ("low", "high")}
    assert set(EXAMPLES) == set(P.SAMPLED_KINDS)


# --------------------------------------------------------------------------- parsing


def test_parse_prior_from_config_values():                 # was test_hyperprior_from_config
    fixed = P.parse_prior("prior.index", -2.0)
    assert fixed.is_fixed and fixed.value == -2.0
    assert P.parse_prior("prior.index", 3) == P.Fixed(3.0)
    assert P.parse_prior("prior.index", {"value": 3}) == P.Fixed(3.0)
    normal = P.parse_prior("prior.index", {"dist": "normal", "loc": -2.0, "scale": 0.5})
    assert normal == P.NormalPrior(-2.0, 0.5) and not normal.is_fixed
    uniform = P.parse_prior("prior.index", {"dist": "uniform", "low": 0.0, "high": 2.0})
    assert uniform.support == (0.0, 2.0)
    half = P.parse_prior("prior.sigma", {"dist": "halfnormal", "scale": np.float32(2.0)})
    assert half == P.HalfNormalPrior(2.0) and type(half.scale) is float
    for prior in (fixed, normal, uniform, half):
        assert P.parse_prior("prior.x", prior.to_config()) == prior
        assert P.parse_prior("prior.x", prior) is prior
        assert P.prior_to_config(prior) == prior.to_config()
    assert P.prior_to_config(1.5) == 1.5
    assert fixed.to_config() == -2.0
    assert normal.to_config() == {"dist": "normal", "loc": -2.0, "scale": 0.5}


@pytest.mark.parametrize("config, message", [
    ({"dist": "normal", "loc": 0.0, "sigma": 1.0},
     "prior.amplitude: normal prior takes ['loc', 'scale']; unknown ['sigma']"),
    ({"dist": "cauchy", "loc": 0.0, "scale": 1.0},
     "prior.amplitude: unknown dist 'cauchy'; known: ['halfnormal', 'lognormal', 'normal', "
     "'uniform']"),
    ({"dist": "normal", "loc": 0.0},
     "prior.amplitude: normal prior needs ['loc', 'scale']; missing ['scale']"),
    ({"dist": "normal", "loc": 0.0, "scale": -1.0}, "prior.amplitude.scale: must be > 0, got -1.0"),
    ({"dist": "normal", "loc": 0.0, "scale": 0}, "prior.amplitude.scale: must be > 0, got 0.0"),
    ({"dist": "normal", "loc": 0.0, "scale": 1.0, "low": 0.0},
     "prior.amplitude: normal prior takes ['loc', 'scale']; unknown ['low']"),
    ({"dist": "uniform", "low": 2.0, "high": 1.0},
     "prior.amplitude: uniform needs low < high, got low=2.0, high=1.0"),
    ({"value": 1.0, "dist": "normal", "loc": 0.0, "scale": 1.0},
     "prior.amplitude: give either value (fixed) or dist, not both"),
    ({"value": 1.0, "loc": 0.0}, "prior.amplitude: a fixed value takes no other keys; unknown ['loc']"),
    ({"dist": "normal", "loc": "zero", "scale": 1.0},
     "prior.amplitude.loc: must be a finite number, got 'zero'"),
    ({"dist": "lognormal", "loc": 0.0, "scale": math.inf},
     "prior.amplitude.scale: must be a finite number, got inf"),
    ({"dist": "halfnormal", "scale": True}, "prior.amplitude.scale: must be a finite number, got True"),
    ({}, "prior.amplitude: a prior mapping needs a 'dist' entry"),
    ({"dist": [1]}, "prior.amplitude.dist: must be a name (normal, lognormal, halfnormal, "
                    "uniform), got [1]"),
    ("normal", "prior.amplitude: must be a number (fixed) or a prior table such as "
               '{dist = "normal", loc = 0.0, scale = 1.0}, got \'normal\''),
    (True, "prior.amplitude: must be a number (fixed) or a prior table"),
    (float("inf"), "prior.amplitude: must be a finite number, got inf"),
    ({"value": "x"}, "prior.amplitude.value: must be a finite number, got 'x'"),
])
def test_bad_config_names_the_key_and_the_problem(config, message):
    # was test_hyperprior_bad_config_names_the_problem; the key is the full dotted key
    with pytest.raises(P.PriorError) as info:
        P.parse_prior("prior.amplitude", config)
    assert str(info.value).startswith(message), str(info.value)
    assert info.value.key.startswith("prior.amplitude")
    assert str(info.value) == f"{info.value.key}: {info.value.problem}"
    assert isinstance(info.value, ValueError)


def test_kinds_restrict_what_a_parameter_takes():
    with pytest.raises(P.PriorError, match=r"^prior.amplitude: unknown dist 'halfnormal'; "
                       r"known: \['lognormal', 'normal', 'uniform'\]"):
        P.parse_prior("prior.amplitude", {"dist": "halfnormal", "scale": 1.0},
                      FIELD_HYPERPRIOR_KINDS)
    with pytest.raises(P.PriorError, match="unknown dist 'halfnormal'"):
        P.parse_prior("prior.amplitude", P.HalfNormalPrior(1.0), FIELD_HYPERPRIOR_KINDS)
    assert P.parse_prior("prior.amplitude", 2.0, FIELD_HYPERPRIOR_KINDS) == P.Fixed(2.0)


# --------------------------------------------------------------------------- against scipy.stats


@pytest.mark.parametrize("name", SAMPLED)
def test_logpdf_median_support_match_scipy(name):
    prior, ref = EXAMPLES[name]
    lo, hi = ref.support()
    assert prior.support == (lo, hi)
    assert prior.median() == pytest.approx(ref.median(), rel=1e-14)
    x = np.concatenate([ref.ppf(np.linspace(0.001, 0.999, 41)), [lo - 1.0, hi + 1.0]])
    x = x[np.isfinite(x)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = prior.logpdf(x)
    want = ref.logpdf(x)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", SAMPLED)
def test_draws_follow_the_distribution_ks(name):
    prior, ref = EXAMPLES[name]
    draws = prior.draw(np.random.default_rng(20261201), 4000)
    assert draws.shape == (4000,) and draws.dtype == np.float64
    assert stats.kstest(draws, ref.cdf).pvalue > 1e-3
    # and a draw from another kind's distribution is told apart (the test can fail)
    other = EXAMPLES[SAMPLED[(SAMPLED.index(name) + 1) % len(SAMPLED)]][1]
    assert stats.kstest(draws, other.cdf).pvalue < 1e-6


def test_draws_use_the_same_stream_as_before():
    # seeds give the same draws as the old field hyperprior (numpy's own samplers)
    def same(prior, old):
        a = prior.draw(np.random.default_rng(5), (3, 2))
        b = old(np.random.default_rng(5))
        np.testing.assert_array_equal(a, b)
    same(P.NormalPrior(-2.0, 0.5), lambda r: r.normal(-2.0, 0.5, size=(3, 2)))
    same(P.LogNormalPrior(0.2, 0.3), lambda r: r.lognormal(0.2, 0.3, size=(3, 2)))
    same(P.UniformPrior(1.0, 3.0), lambda r: r.uniform(1.0, 3.0, size=(3, 2)))
    same(P.HalfNormalPrior(2.0), lambda r: np.abs(r.normal(0.0, 2.0, size=(3, 2))))
    np.testing.assert_array_equal(P.Fixed(1.5).draw(np.random.default_rng(0), 3), [1.5] * 3)
    assert np.shape(P.NormalPrior(0.0, 1.0).draw(np.random.default_rng(0))) == ()


def test_log_densities_against_closed_forms():     # was test_hyperprior_log_densities_...
    x = np.array([-1.0, 0.0, 0.5, 2.0])
    normal = P.NormalPrior(loc=0.5, scale=2.0)
    np.testing.assert_allclose(
        normal.logpdf(x),
        np.log(np.exp(-0.5 * ((x - 0.5) / 2.0) ** 2) / (2.0 * np.sqrt(2 * np.pi))))
    lognormal = P.LogNormalPrior(loc=0.3, scale=0.7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ld = lognormal.logpdf(x)
    assert ld[0] == -np.inf and ld[1] == -np.inf
    pos = x[2:]
    np.testing.assert_allclose(
        ld[2:], np.log(np.exp(-0.5 * ((np.log(pos) - 0.3) / 0.7) ** 2)
                       / (pos * 0.7 * np.sqrt(2 * np.pi))))
    uniform = P.UniformPrior(low=0.0, high=4.0)
    np.testing.assert_allclose(uniform.logpdf(x), [-np.inf, -np.log(4), -np.log(4), -np.log(4)])
    fixed = P.Fixed(0.5)
    np.testing.assert_array_equal(fixed.logpdf(x), [-np.inf, -np.inf, 0.0, -np.inf])
    assert fixed.support == (0.5, 0.5) and fixed.median() == 0.5


@settings(max_examples=20, deadline=None)
@given(loc=st.floats(-3, 3), scale=st.floats(0.1, 3))
def test_densities_integrate_to_one(loc, scale):     # was test_hyperprior_densities_...
    for prior, lo, hi in ((P.NormalPrior(loc, scale), loc - 12 * scale, loc + 12 * scale),
                          (P.UniformPrior(loc, loc + scale), loc - 1, loc + scale + 1),
                          (P.HalfNormalPrior(scale), -1.0, 12 * scale)):
        x = np.linspace(lo, hi, 200001)
        integral = np.trapezoid(np.exp(prior.logpdf(x)), x)
        assert integral == pytest.approx(1.0, abs=2e-3)
    lognormal = P.LogNormalPrior(loc, scale)
    u = np.linspace(loc - 12 * scale, loc + 12 * scale, 200001)   # x = exp(u)
    integral = np.trapezoid(np.exp(lognormal.logpdf(np.exp(u)) + u), u)
    assert integral == pytest.approx(1.0, abs=1e-6)


def test_draws_match_moments():                     # was test_hyperprior_draws_match_moments
    rng = np.random.default_rng(7)
    n = 20000
    d = P.NormalPrior(-2.0, 0.5).draw(rng, n)
    assert abs(d.mean() + 2.0) < 5 * 0.5 / np.sqrt(n) and abs(d.std() - 0.5) < 0.02
    d = P.LogNormalPrior(0.2, 0.3).draw(rng, n)
    assert abs(np.log(d).mean() - 0.2) < 5 * 0.3 / np.sqrt(n)
    d = P.UniformPrior(1.0, 3.0).draw(rng, n)
    assert d.min() >= 1.0 and d.max() <= 3.0 and abs(d.mean() - 2.0) < 0.03


# --------------------------------------------------------------------------- unconstrained maps


def _u_values(prior, n=25, seed=3):
    lo, hi = prior.unconstrained_range()
    lo, hi = max(lo, -8.0), min(hi, 8.0)
    return np.random.default_rng(seed).uniform(lo, hi, n)


@pytest.mark.parametrize("name", SAMPLED)
def test_inverse_undoes_forward(name):
    prior, _ = EXAMPLES[name]
    u = _u_values(prior)
    np.testing.assert_allclose(prior.inverse(prior.forward(u)), u, rtol=1e-9, atol=1e-9)
    x = prior.forward(u)
    assert np.all((x >= prior.support[0]) & (x <= prior.support[1]))
    assert prior.forward(prior.unconstrained_median()) == pytest.approx(prior.median(), rel=1e-14)
    assert prior.coordinate_prefix == {"identity": "", "log": "log_", "logit": "logit_"}[prior.transform]


@pytest.mark.parametrize("name", SAMPLED)
def test_log_jacobian_against_finite_differences(name):
    prior, _ = EXAMPLES[name]
    u = _u_values(prior)
    h = 1e-6
    fd = (prior.forward(u + h) - prior.forward(u - h)) / (2 * h)
    np.testing.assert_allclose(prior.log_jacobian(u), np.log(np.abs(fd)), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", SAMPLED)
def test_unconstrained_logpdf_is_logpdf_plus_jacobian(name):
    prior, ref = EXAMPLES[name]
    u = _u_values(prior)
    want = ref.logpdf(prior.forward(u)) + prior.log_jacobian(u)
    np.testing.assert_allclose(prior.unconstrained_logpdf(u), want, rtol=1e-10, atol=1e-10)


def test_log_forward_of_positive_kinds():
    for prior in (P.LogNormalPrior(0.0, 1.0), P.HalfNormalPrior(1.0), P.UniformPrior(0.0, 2.0),
                  P.UniformPrior(0.5, 2.0)):
        u = _u_values(prior)
        np.testing.assert_allclose(prior.log_forward(u), np.log(prior.forward(u)), rtol=1e-12)


def test_halfnormal_quadratic_limit_gives_minus_inf():
    prior = P.HalfNormalPrior(1.0)
    u = np.array([0.0, 10.0])           # 2 (u - log scale) = 0, 20
    assert np.all(np.isfinite(prior.unconstrained_logpdf(u)))
    out = prior.unconstrained_logpdf(u, quadratic_limit=10.0)
    assert np.isfinite(out[0]) and out[1] == -np.inf


def test_medians():
    assert P.NormalPrior(1.5, 2.0).median() == 1.5
    assert P.LogNormalPrior(0.7, 2.0).median() == math.exp(0.7)
    assert P.HalfNormalPrior(2.0).median() == pytest.approx(stats.halfnorm(scale=2.0).median(),
                                                            rel=1e-15)
    assert P.UniformPrior(1.0, 4.0).median() == 2.5
    assert P.HALFNORMAL_MEDIAN == pytest.approx(stats.halfnorm.median(), rel=1e-15)
