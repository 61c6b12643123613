"""An exponential-integral regression model and its discretisation, in numpy/scipy.

The GUI process imports this module (specs, data files, the numpy reference posterior),
so it uses numpy and scipy only and never imports TensorFlow. The TensorFlow
log-density of the same model lives in ``core.integral_density``.

Model
-----
Data y_i at times t_0 < t_1 < ... < t_{n-1} (t_0 >= 0; the integral starts at s = 0):

    y_i = c + I(t_i; A) + e_i,        e_i ~ Normal(0, sigma^2) independently,
    I(t; A) = integral_0^t exp(A s) f(s) ds.

f is either the constant 1 or a column of the data file sampled at the data times.
A sampled f is interpolated linearly between data times, and held at its first value,
f(s) = f(t_0), on 0 <= s < t_0 (so a file need not start at t = 0).

Discretisation (what the density actually computes). The interval [0, t_{n-1}] is cut
into segments at the data times, [0, t_0] (only when t_0 > 0), [t_0, t_1], ...,
[t_{n-2}, t_{n-1}], and each segment [a, b] into ``refine`` equal steps h = (b - a) / r.
On each segment the trapezoid rule with g(s) = exp(A s) f(s),

    T[a, b] = h * (g(s_0) / 2 + g(s_1) + ... + g(s_{r-1}) + g(s_r) / 2),   s_k = a + k h,

and I(t_i) is the cumulative sum of the segment values up to t_i (I(0) = 0). This is
the cumulative trapezoid rule on the refined grid (a user's
``0.5 * dt * cumsum(g[:-1] + g[1:])`` is refine = 1), and the data times are grid nodes,
so the piecewise-linear f has its kinks at nodes and the global error is O(h^2):

    T - I = (h^2 / 12) * sum over segments of (g'(b) - g'(a)) + O(h^4).

Gradients of the discretised density with respect to A are the exact gradients of
the discretised model; how far its posterior sits from the converged (h -> 0) one is
what ``discretisation_report`` measures.

Exact integrals (the h -> 0 limit). With phi1(z) = (exp(z) - 1) / z = expm1(z) / z and
phi2(z) = (exp(z) - 1 - z) / z^2 (both evaluated by their Taylor series for |z| < 1/2,
so nothing divides 0 by 0 near A = 0):

    constant f:          I(t) = t * phi1(A t)                   (= expm1(A t) / A)
    piecewise-linear f:  integral_a^b exp(A s) f(s) ds
                           = exp(A a) * D * (f(b) phi1(A D) - (f(b) - f(a)) phi2(A D)),  D = b - a.

Parameters, priors, unconstrained coordinates
---------------------------------------------
A, c and sigma are each fixed (a number) or sampled with a prior given as a mapping,
e.g. ``{"dist": "normal", "loc": 0, "scale": 1}``. Prior kinds (``PRIOR_KINDS``) and
the unconstrained coordinate u a sampler moves in:

    normal(loc, scale)       x real      u = x                 log p(u) = log N(u; loc, scale)
    lognormal(loc, scale)    x > 0       u = log x             log p(u) = log N(u; loc, scale)
    halfnormal(scale)        x > 0       u = log x             log p(u) = log 2 N(e^u; 0, scale) + u
    uniform(low, high)       low<x<high  u = logit((x-low)/(high-low))
                                                               log p(u) = -softplus(u) - softplus(-u)

i.e. log p(u) = log p_x(x(u)) + log |dx/du| (the Jacobian term). sigma needs a prior
on positive values (halfnormal, lognormal, or uniform with low >= 0); for sigma the
unconstrained coordinate of the halfnormal and lognormal priors is log sigma. The
sampled parameters are ordered A, c, sigma (``IntegralModelSpec.sampled_names``).

Overflow
--------
exp(A t) overflows at A t > log(max float) (88.72 in float32, 709.78 in float64), and
the integral and its A-gradient are t_max and t_max^2 times larger. The density is
computed only where

    A * t_max <= exponent_limit = log(max float) - log 4 - 2 log(1 + t_max) - log(1 + F),

F = max |f| (1 for constant f); elsewhere it is -inf (an HMC proposal there is rejected)
with a zero gradient. Before a run ``check_overflow`` computes the largest A the prior
gives non-negligible mass (``Prior.upper_bound``: normal loc + 10 scale, lognormal
exp(loc + 10 scale), halfnormal 10 scale, uniform high; a fixed A is its value) and
raises ValueError when that A times t_max passes the limit for the run's dtype.
The Gaussian quadratic form sum r_i^2 / sigma^2 is computed in log space and treated
the same way (-inf beyond log(max float) - log 16).

Brute-force posterior
---------------------
``posterior_quadrature`` integrates the discretised (or exact) posterior on a grid:
over A (in its unconstrained coordinate) and, when sigma is sampled, over its
unconstrained coordinate too (a 2D tensor-product grid). A sampled c must have a normal
prior; it enters linearly and is integrated out analytically (Gaussian integral). The
grid is found automatically (coarse scan of the prior range, then zoom until the
region within ``drop`` = 40 log-units of the maximum holds >= 100 grid points along
each axis); the trapezoid rule then converges spectrally because the integrand is
smooth and negligible at the grid ends. The posterior is assumed unimodal; a second
mode found by the coarse scan raises ValueError.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field
from typing import Callable, Mapping, NamedTuple

import numpy as np
from scipy.special import expit

__all__ = [
    "PARAMETERS",
    "PRIOR_KINDS",
    "Fixed",
    "NormalPrior",
    "LogNormalPrior",
    "HalfNormalPrior",
    "UniformPrior",
    "parse_prior",
    "IntegralModelSpec",
    "expm1_ratio",
    "phi2",
    "closed_form_integral",
    "closed_form_mean",
    "segment_grid",
    "SegmentGrid",
    "trapezoid_integral",
    "exact_integral",
    "predictive_mean",
    "exponent_limit",
    "quadratic_limit",
    "positive_exp_limit",
    "check_overflow",
    "log_density",
    "QuadraturePosterior",
    "posterior_quadrature",
    "DiscretisationReport",
    "discretisation_report",
    "Series",
    "DEMO_PARAMETERS",
    "make_demo_series",
    "save_series_csv",
    "load_series_csv",
]

PARAMETERS = ("A", "c", "sigma")
_LOG_2PI = math.log(2.0 * math.pi)
_SERIES_RADIUS = 0.5
_SERIES_TERMS = 22  # 0.5^22 / 23! ~ 1e-29: far below float64 resolution on |z| < 1/2.


# --------------------------------------------------------------------------- phi functions


def _series(z: np.ndarray, first_factorial: int) -> np.ndarray:
    """sum_{k>=0} z^k / (k + first_factorial)!  by Horner, in z's dtype."""
    coeffs = [1.0 / math.factorial(k + first_factorial) for k in range(_SERIES_TERMS)]
    out = np.full_like(z, coeffs[-1])
    for a in reversed(coeffs[:-1]):
        out = out * z + z.dtype.type(a)
    return out


def _as_float_array(z) -> np.ndarray:
    z = np.asarray(z)
    if not np.issubdtype(z.dtype, np.floating):
        z = z.astype(np.float64)
    return z


def expm1_ratio(z) -> np.ndarray:
    """phi1(z) = (exp(z) - 1) / z = expm1(z) / z, with phi1(0) = 1.

    Taylor series 1 + z/2 + z^2/6 + ... for |z| < 1/2 (no 0/0, full precision near 0),
    expm1(z) / z elsewhere. Keeps the floating dtype of z (float32 stays float32).
    """
    z = _as_float_array(z)
    out = np.empty_like(z)
    small = np.abs(z) < _SERIES_RADIUS
    out[small] = _series(z[small], 1)
    big = ~small
    with np.errstate(over="ignore"):
        out[big] = np.expm1(z[big]) / z[big]
    return out


def phi2(z) -> np.ndarray:
    """phi2(z) = (exp(z) - 1 - z) / z^2, with phi2(0) = 1/2 (series for |z| < 1/2).

    integral_0^1 v exp(z v) dv = phi1(z) - phi2(z): the weight of the slope of f in the
    exact integral of exp(A s) times a linear f.
    """
    z = _as_float_array(z)
    out = np.empty_like(z)
    small = np.abs(z) < _SERIES_RADIUS
    out[small] = _series(z[small], 2)
    big = ~small
    with np.errstate(over="ignore", invalid="ignore"):
        zb = z[big]
        out[big] = (np.expm1(zb) - zb) / (zb * zb)
    return out


def closed_form_integral(t, A) -> np.ndarray:
    """integral_0^t exp(A s) ds = expm1(A t) / A = t * phi1(A t)  (= t at A = 0).

    Broadcasts t against A; float32 inputs give a float32 result.
    """
    t = _as_float_array(t)
    A = _as_float_array(A)
    z = A * t
    return t * expm1_ratio(z)


def closed_form_mean(t, A, c) -> np.ndarray:
    """y(t) = c + expm1(A t) / A: the model mean for constant f (t * phi1(A t) form)."""
    return closed_form_integral(t, A) + c


# --------------------------------------------------------------------------- discretisation


class SegmentGrid(NamedTuple):
    """The refined grid of the cumulative trapezoid rule, segment by segment.

    s, f, w: arrays (n_segments, refine + 1) of nodes, f at the nodes, and trapezoid
    weights h * (1/2, 1, ..., 1, 1/2); the integral over segment j is sum_k w[j,k] g(s[j,k]).
    leading_zero: True when t_0 == 0, so I(t_0) = 0 and the cumulative sum of the
    segment values gives I(t_1), ..., I(t_{n-1}); when t_0 > 0 the first segment is
    [0, t_0] and the cumulative sum gives I(t_0), ..., I(t_{n-1}).
    """

    s: np.ndarray
    f: np.ndarray
    w: np.ndarray
    leading_zero: bool


def segment_grid(t, f=None, refine: int = 8) -> SegmentGrid:
    """Build the refined grid: ``refine`` equal steps on each data interval and on [0, t_0].

    f (values at the data times, or None for f = 1) is interpolated linearly on the
    nodes and held at f(t_0) on [0, t_0).
    """
    t = np.asarray(t, dtype=np.float64)
    refine = int(refine)
    leading_zero = bool(t[0] == 0.0)
    knots = t if leading_zero else np.concatenate([[0.0], t])
    a, b = knots[:-1], knots[1:]
    frac = np.arange(refine + 1) / refine
    s = a[:, None] + (b - a)[:, None] * frac
    s[:, -1] = b  # exact right ends, so the data times are nodes to the last bit
    unit = np.ones(refine + 1)
    unit[0] = unit[-1] = 0.5
    w = ((b - a) / refine)[:, None] * unit
    if f is None:
        fs = np.ones_like(s)
    else:
        fs = np.interp(s, t, np.asarray(f, dtype=np.float64))  # constant below t_0
    return SegmentGrid(s, fs, w, leading_zero)


def _chunks(n_items: int, per_item: int, budget: int = 4_000_000):
    step = max(1, budget // max(per_item, 1))
    for start in range(0, n_items, step):
        yield slice(start, min(n_items, start + step))


def trapezoid_integral(t, A, f=None, refine: int = 8) -> np.ndarray:
    """I(t_i) by the cumulative trapezoid rule with ``refine`` steps per segment.

    A: array of any shape; returns shape A.shape + (n,), float64. Nothing divides by A,
    so A = 0 needs no special case.
    """
    grid = segment_grid(t, f, refine)
    A = np.asarray(A, dtype=np.float64)
    flat = A.reshape(-1)
    n = len(np.asarray(t))
    out = np.empty((flat.size, n))
    with np.errstate(over="ignore", invalid="ignore"):
        for sl in _chunks(flat.size, grid.s.size):
            g = np.exp(flat[sl, None, None] * grid.s) * grid.f
            seg = np.sum(g * grid.w, axis=-1)
            cum = np.cumsum(seg, axis=-1)
            if grid.leading_zero:
                out[sl, 0] = 0.0
                out[sl, 1:] = cum
            else:
                out[sl] = cum
    return out.reshape(A.shape + (n,))


def exact_integral(t, A, f=None) -> np.ndarray:
    """I(t_i) exactly (the h -> 0 limit of the trapezoid rule); shape A.shape + (n,).

    Constant f: t * phi1(A t). Piecewise-linear f: segment by segment,
    exp(A a) * D * (f(b) phi1(A D) - (f(b) - f(a)) phi2(A D)), cumulatively summed.
    """
    t = np.asarray(t, dtype=np.float64)
    A = np.asarray(A, dtype=np.float64)
    if f is None:
        return closed_form_integral(t, A[..., None])
    f = np.asarray(f, dtype=np.float64)
    leading_zero = t[0] == 0.0
    knots = t if leading_zero else np.concatenate([[0.0], t])
    fk = f if leading_zero else np.concatenate([[f[0]], f])
    a, d = knots[:-1], np.diff(knots)
    fa, fb = fk[:-1], fk[1:]
    z = A[..., None] * d
    with np.errstate(over="ignore", invalid="ignore"):
        seg = np.exp(A[..., None] * a) * d * (fb * expm1_ratio(z) - (fb - fa) * phi2(z))
    cum = np.cumsum(seg, axis=-1)
    if leading_zero:
        cum = np.concatenate([np.zeros(A.shape + (1,)), cum], axis=-1)
    return cum


def predictive_mean(spec: "IntegralModelSpec", A, c, refine: int | None = None,
                    exact: bool = False) -> np.ndarray:
    """Model mean c + I(t_i; A) at the data times; shape broadcast(A, c) + (n,).

    I is the trapezoid integral with ``refine`` (default ``spec.refine``) steps per
    interval, or the exact integral when exact=True.
    """
    A, c = np.broadcast_arrays(np.asarray(A, dtype=np.float64), np.asarray(c, dtype=np.float64))
    if exact:
        I = exact_integral(spec.t, A, spec.f)
    else:
        I = trapezoid_integral(spec.t, A, spec.f, spec.refine if refine is None else refine)
    return c[..., None] + I


# --------------------------------------------------------------------------- priors


def _number(key: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"priors[{key!r}]: {name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"priors[{key!r}]: {name} must be finite, got {value!r}")
    return value


def _positive(key: str, name: str, value) -> float:
    value = _number(key, name, value)
    if value <= 0:
        raise ValueError(f"priors[{key!r}]: {name} must be > 0, got {value!r}")
    return value


def _softplus(u: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, u)


def _neg_half_exp(e: np.ndarray, limit: float) -> np.ndarray:
    """-exp(e) / 2 where e <= limit, else -inf (the TensorFlow twin is gradient-safe)."""
    e = np.asarray(e, dtype=np.float64)
    ok = e <= limit
    return np.where(ok, -0.5 * np.exp(np.where(ok, e, 0.0)), -np.inf)


@dataclass(frozen=True)
class Fixed:
    """A parameter held at a value (not sampled)."""

    value: float
    dist = "fixed"

    def as_config(self):
        return self.value


@dataclass(frozen=True)
class NormalPrior:
    """x ~ Normal(loc, scale); unconstrained u = x."""

    loc: float
    scale: float
    dist = "normal"
    support = "real"
    bound_rule = "loc + 10 scale"

    def upper_bound(self) -> float:
        return self.loc + 10.0 * self.scale

    def unconstrained_range(self) -> tuple[float, float]:
        return self.loc - 10.0 * self.scale, self.loc + 10.0 * self.scale

    def forward(self, u):
        return np.asarray(u, dtype=np.float64)

    def inverse(self, x):
        return np.asarray(x, dtype=np.float64)

    def logpdf(self, x):
        z = (np.asarray(x, dtype=np.float64) - self.loc) / self.scale
        with np.errstate(over="ignore"):
            return -0.5 * z * z - math.log(self.scale) - 0.5 * _LOG_2PI

    def unconstrained_logpdf(self, u, dtype=np.float64):
        return self.logpdf(u)

    def as_config(self) -> dict:
        return {"dist": self.dist, "loc": self.loc, "scale": self.scale}


class _LogCoordinate:
    """Positive parameters sampled in u = log x: x = exp(u), log x = u."""

    def forward(self, u):
        with np.errstate(over="ignore"):
            return np.exp(np.asarray(u, dtype=np.float64))

    def log_forward(self, u):
        return np.asarray(u, dtype=np.float64)

    def inverse(self, x):
        return np.log(np.asarray(x, dtype=np.float64))


@dataclass(frozen=True)
class LogNormalPrior(_LogCoordinate):
    """log x ~ Normal(loc, scale); unconstrained u = log x, so log p(u) = log N(u; loc, scale)."""

    loc: float
    scale: float
    dist = "lognormal"
    support = "positive"
    bound_rule = "exp(loc + 10 scale)"

    def upper_bound(self) -> float:
        with np.errstate(over="ignore"):
            return float(np.exp(self.loc + 10.0 * self.scale))

    def unconstrained_range(self) -> tuple[float, float]:
        return self.loc - 10.0 * self.scale, self.loc + 10.0 * self.scale

    def logpdf(self, x):
        x = np.asarray(x, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            lx = np.log(x)
            z = (lx - self.loc) / self.scale
            out = -0.5 * z * z - math.log(self.scale) - 0.5 * _LOG_2PI - lx
        return np.where(x > 0, out, -np.inf)

    def unconstrained_logpdf(self, u, dtype=np.float64):
        z = (np.asarray(u, dtype=np.float64) - self.loc) / self.scale
        with np.errstate(over="ignore"):
            return -0.5 * z * z - math.log(self.scale) - 0.5 * _LOG_2PI

    def as_config(self) -> dict:
        return {"dist": self.dist, "loc": self.loc, "scale": self.scale}


@dataclass(frozen=True)
class HalfNormalPrior(_LogCoordinate):
    """x ~ HalfNormal(scale), density 2 N(x; 0, scale) on x > 0; unconstrained u = log x.

    log p(u) = log 2 - log(scale) - log(2 pi)/2 - exp(2 (u - log scale)) / 2 + u, the
    exp computed only below ``quadratic_limit`` (-inf beyond).
    """

    scale: float
    dist = "halfnormal"
    support = "positive"
    bound_rule = "10 scale"

    def upper_bound(self) -> float:
        return 10.0 * self.scale

    def unconstrained_range(self) -> tuple[float, float]:
        # P(x < scale * e^-30) ~ 1e-13: the lower tail in u decays only like e^u.
        return math.log(self.scale) - 30.0, math.log(self.scale) + math.log(10.0)

    def logpdf(self, x):
        x = np.asarray(x, dtype=np.float64)
        z = x / self.scale
        out = math.log(2.0) - math.log(self.scale) - 0.5 * _LOG_2PI - 0.5 * z * z
        return np.where(x >= 0, out, -np.inf)

    def unconstrained_logpdf(self, u, dtype=np.float64):
        u = np.asarray(u, dtype=np.float64)
        quad = _neg_half_exp(2.0 * (u - math.log(self.scale)), quadratic_limit(dtype))
        return math.log(2.0) - math.log(self.scale) - 0.5 * _LOG_2PI + quad + u

    def as_config(self) -> dict:
        return {"dist": self.dist, "scale": self.scale}


@dataclass(frozen=True)
class UniformPrior:
    """x ~ Uniform(low, high); unconstrained u = logit((x - low) / (high - low)).

    x = low + (high - low) sigmoid(u), log p(u) = -softplus(u) - softplus(-u)
    (the prior density 1/(high - low) times the Jacobian (high - low) s (1 - s)).
    """

    low: float
    high: float
    dist = "uniform"
    support = "interval"
    bound_rule = "high"

    def upper_bound(self) -> float:
        return self.high

    def unconstrained_range(self) -> tuple[float, float]:
        return -35.0, 35.0  # sigmoid(-35) ~ 6e-16: the mass left out is ~1e-15

    def forward(self, u):
        return self.low + (self.high - self.low) * expit(np.asarray(u, dtype=np.float64))

    def log_forward(self, u):
        u = np.asarray(u, dtype=np.float64)
        if self.low == 0.0:
            return math.log(self.high) - _softplus(-u)
        return np.log(self.forward(u))

    def inverse(self, x):
        p = (np.asarray(x, dtype=np.float64) - self.low) / (self.high - self.low)
        with np.errstate(divide="ignore"):
            return np.log(p) - np.log1p(-p)

    def logpdf(self, x):
        x = np.asarray(x, dtype=np.float64)
        inside = (x > self.low) & (x < self.high)
        return np.where(inside, -math.log(self.high - self.low), -np.inf)

    def unconstrained_logpdf(self, u, dtype=np.float64):
        u = np.asarray(u, dtype=np.float64)
        return -_softplus(u) - _softplus(-u)

    def as_config(self) -> dict:
        return {"dist": self.dist, "low": self.low, "high": self.high}


def _make_normal(key, p):
    return NormalPrior(_number(key, "loc", p["loc"]), _positive(key, "scale", p["scale"]))


def _make_lognormal(key, p):
    return LogNormalPrior(_number(key, "loc", p["loc"]), _positive(key, "scale", p["scale"]))


def _make_halfnormal(key, p):
    return HalfNormalPrior(_positive(key, "scale", p["scale"]))


def _make_uniform(key, p):
    low, high = _number(key, "low", p["low"]), _number(key, "high", p["high"])
    if not low < high:
        raise ValueError(f"priors[{key!r}]: uniform needs low < high, got low={low!r}, high={high!r}")
    return UniformPrior(low, high)


# name -> (required parameters, constructor). Add a kind here and in
# core.integral_density._TF_PRIOR_KINDS; a test checks the two registries agree.
PRIOR_KINDS: dict[str, tuple[tuple[str, ...], Callable]] = {
    "normal": (("loc", "scale"), _make_normal),
    "lognormal": (("loc", "scale"), _make_lognormal),
    "halfnormal": (("scale",), _make_halfnormal),
    "uniform": (("low", "high"), _make_uniform),
}

Prior = NormalPrior | LogNormalPrior | HalfNormalPrior | UniformPrior


def parse_prior(key: str, value):
    """A number (fixed value), a prior mapping ``{"dist": ..., ...}``, or a prior object."""
    if isinstance(value, Fixed | Prior):
        return value
    if isinstance(value, Mapping):
        if "dist" not in value:
            raise ValueError(f"priors[{key!r}]: a prior mapping needs a 'dist' entry "
                             f"(one of {sorted(PRIOR_KINDS)}), got keys {sorted(value)}")
        dist = value["dist"]
        if dist not in PRIOR_KINDS:
            raise ValueError(f"priors[{key!r}]: unknown dist {dist!r}; "
                             f"known: {sorted(PRIOR_KINDS)}")
        needed, make = PRIOR_KINDS[dist]
        given = set(value) - {"dist"}
        missing = [p for p in needed if p not in given]
        extra = sorted(given - set(needed))
        if missing:
            raise ValueError(f"priors[{key!r}]: {dist} prior needs {list(needed)}; "
                             f"missing {missing}")
        if extra:
            raise ValueError(f"priors[{key!r}]: {dist} prior takes {list(needed)}; "
                             f"unknown {extra}")
        return make(key, value)
    return Fixed(_number(key, "the fixed value", value))


# --------------------------------------------------------------------------- spec


def _float_vector(name: str, value) -> np.ndarray:
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: not an array of numbers ({exc})") from None
    if arr.ndim != 1:
        raise ValueError(f"{name}: must be one-dimensional, got shape {arr.shape}")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{name}: value {float(arr[bad[0]])!r} at index {bad[0]} is not finite")
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class IntegralModelSpec:
    """Data, discretisation and priors of the integral model (see the module docstring).

    t: increasing data times, t[0] >= 0 (the integral starts at s = 0).
    y: observations at t (same length, finite).
    f: values of f at t, or None for f = 1.
    refine: trapezoid steps per data interval (and on [0, t_0] when t_0 > 0), >= 1.
    priors: {"A": ..., "c": ..., "sigma": ...}, each a number (fixed) or a prior mapping
        such as {"dist": "normal", "loc": 0, "scale": 1}; all three keys are required.

    Invalid input raises ValueError naming the key and value. Arrays are stored as
    read-only float64 copies; priors as ``Fixed`` / prior objects.
    """

    t: np.ndarray
    y: np.ndarray
    f: np.ndarray | None = None
    refine: int = 8
    priors: Mapping = field(default_factory=dict)

    def __post_init__(self):
        t = _float_vector("t", self.t)
        if t.size < 2:
            raise ValueError(f"t: need at least 2 data times, got {t.size}")
        steps = np.diff(t)
        bad = np.flatnonzero(steps <= 0)
        if bad.size:
            i = bad[0] + 1
            raise ValueError(f"t: must be strictly increasing; t[{i}] = {float(t[i])!r} "
                             f"follows t[{i - 1}] = {float(t[i - 1])!r}")
        if t[0] < 0:
            raise ValueError(f"t: t[0] = {float(t[0])!r} < 0; the integral starts at s = 0")
        y = _float_vector("y", self.y)
        if y.size != t.size:
            raise ValueError(f"y: length {y.size} does not match t (length {t.size})")
        f = None
        if self.f is not None:
            f = _float_vector("f", self.f)
            if f.size != t.size:
                raise ValueError(f"f: length {f.size} does not match t (length {t.size})")
        refine = self.refine
        if isinstance(refine, bool) or not isinstance(refine, (int, np.integer)):
            raise ValueError(f"refine: must be an integer >= 1, got {refine!r}")
        if refine < 1:
            raise ValueError(f"refine: must be >= 1, got {refine!r}")
        if not isinstance(self.priors, Mapping):
            raise ValueError(f"priors: must be a mapping with keys {list(PARAMETERS)}, "
                             f"got {type(self.priors).__name__}")
        unknown = sorted(set(self.priors) - set(PARAMETERS))
        if unknown:
            raise ValueError(f"priors: unknown key(s) {unknown}; expected {list(PARAMETERS)}")
        missing = [k for k in PARAMETERS if k not in self.priors]
        if missing:
            raise ValueError(f"priors: missing key(s) {missing} (give a number to fix a "
                             f"parameter, or a prior mapping to sample it)")
        priors = {k: parse_prior(k, self.priors[k]) for k in PARAMETERS}
        sig = priors["sigma"]
        if isinstance(sig, Fixed) and sig.value <= 0:
            raise ValueError(f"priors['sigma']: the noise sd must be > 0, got {sig.value!r}")
        if isinstance(sig, NormalPrior):
            raise ValueError("priors['sigma']: a normal prior allows sigma <= 0; use "
                             "halfnormal, lognormal, or uniform with low >= 0")
        if isinstance(sig, UniformPrior) and sig.low < 0:
            raise ValueError(f"priors['sigma']: uniform low = {sig.low!r} < 0; sigma must "
                             "be positive (use low >= 0)")
        object.__setattr__(self, "t", t)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "f", f)
        object.__setattr__(self, "refine", int(refine))
        object.__setattr__(self, "priors", priors)

    @property
    def sampled_names(self) -> tuple[str, ...]:
        """Names of the sampled parameters, in state order (a subset of A, c, sigma)."""
        return tuple(k for k in PARAMETERS if not isinstance(self.priors[k], Fixed))

    @property
    def unconstrained_names(self) -> tuple[str, ...]:
        """Names of the unconstrained coordinates: 'A', 'log_sigma', 'logit_A', ..."""
        prefix = {"real": "", "positive": "log_", "interval": "logit_"}
        return tuple(prefix[self.priors[k].support] + k for k in self.sampled_names)

    @property
    def t_max(self) -> float:
        return float(self.t[-1])

    @property
    def f_max(self) -> float:
        """F = max |f| (1 for constant f), used by the overflow limit."""
        return 1.0 if self.f is None else float(np.max(np.abs(self.f)))

    def with_refine(self, refine: int) -> "IntegralModelSpec":
        return IntegralModelSpec(self.t, self.y, self.f, refine, self.priors)

    def constrain(self, u) -> dict[str, np.ndarray]:
        """Unconstrained state (..., d) -> {name: value} for the sampled parameters."""
        u = np.asarray(u, dtype=np.float64)
        return {k: self.priors[k].forward(u[..., i]) for i, k in enumerate(self.sampled_names)}

    def unconstrain(self, values: Mapping) -> np.ndarray:
        """{name: value} for every sampled parameter -> unconstrained state (..., d)."""
        return np.stack([self.priors[k].inverse(values[k]) for k in self.sampled_names], -1)


# --------------------------------------------------------------------------- overflow limits


def _log_max(dtype) -> float:
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype: must be float32 or float64, got {dtype}")
    return float(np.log(np.finfo(dtype).max))


def exponent_limit(spec: IntegralModelSpec, dtype=np.float64) -> float:
    """Largest A * t_max at which the density is computed (beyond it: -inf).

    log(max float) - log 4 - 2 log(1 + t_max) - log(1 + F): keeps exp(A t), the integral
    (<= t_max F exp(A t_max)) and its A-derivative (<= t_max^2 F exp(A t_max)) finite,
    with room for adding y and c.
    """
    return (_log_max(dtype) - math.log(4.0) - 2.0 * math.log1p(spec.t_max)
            - math.log1p(spec.f_max))


def quadratic_limit(dtype=np.float64) -> float:
    """Largest log(sum r^2 / sigma^2) (or log(x^2 / scale^2)) that is exponentiated."""
    return _log_max(dtype) - math.log(16.0)


def positive_exp_limit(dtype=np.float64) -> float:
    """Largest unconstrained u for which x = exp(u) is computed (log-transformed priors)."""
    return _log_max(dtype) - 1.0


def check_overflow(spec: IntegralModelSpec, dtype=np.float64) -> None:
    """Raise ValueError if the prior for A reaches the exp(A t) overflow region.

    The largest A with non-negligible prior mass is ``prior.upper_bound()`` (normal
    loc + 10 scale, lognormal exp(loc + 10 scale), halfnormal 10 scale, uniform high;
    a fixed A is its value); it must satisfy A * t_max <= ``exponent_limit``.
    """
    prior = spec.priors["A"]
    limit = exponent_limit(spec, dtype)
    name = np.dtype(dtype).name
    if isinstance(prior, Fixed):
        a_hi, rule = prior.value, "the fixed value"
    else:
        a_hi, rule = prior.upper_bound(), f"{prior.dist} {prior.bound_rule}"
    if a_hi * spec.t_max > limit:
        what = ("overflows" if a_hi * spec.t_max > _log_max(dtype)
                else "comes too close to the overflow of")
        raise ValueError(
            f"priors['A']: the prior allows A up to {a_hi:.6g} ({rule}); exp(A*t) at "
            f"t = {spec.t_max:.6g} {what} {name} (max ~{_log_max(dtype):.1f}/t; with the "
            f"margin for the integral and its gradient A*t must stay <= {limit:.1f}, i.e. "
            f"A <= {limit / spec.t_max:.6g}). Narrow the prior for A"
            + (" or use float64." if name == "float32" else "."))


# --------------------------------------------------------------------------- numpy log-density


def _log_quadratic(r: np.ndarray) -> np.ndarray:
    """log(sum_i r_i^2) over the last axis without overflow (scaled by max |r|)."""
    m = np.maximum(np.max(np.abs(r), axis=-1), np.finfo(np.float64).tiny)
    inner = np.sum((r / m[..., None]) ** 2, axis=-1)
    return 2.0 * np.log(m) + np.log(np.maximum(inner, np.finfo(np.float64).tiny))


def log_density(spec: IntegralModelSpec, u, *, dtype=np.float64) -> np.ndarray:
    """The numpy mirror of ``core.integral_density``: log prior + log likelihood.

    u: unconstrained state (..., d) in ``spec.sampled_names`` order, or a mapping
    {unconstrained name: array}. Returns shape (...). Computed in float64; ``dtype``
    only selects the overflow limits (so the -inf regions match a float32 density).

        log p(u) = sum_k log p_k(u_k)                          (priors with Jacobians)
                   - n/2 log(2 pi) - n log sigma - exp(log(sum_i r_i^2) - 2 log sigma) / 2,
        r_i = y_i - c - T_i(A)                                  (T: the trapezoid integral)

    and -inf where A * t_max > exponent_limit (or the quadratic form overflows).
    """
    if isinstance(u, Mapping):
        u = np.stack([np.asarray(u[k], dtype=np.float64) for k in spec.unconstrained_names], -1)
    u = np.asarray(u, dtype=np.float64)
    names = spec.sampled_names
    if u.shape[-1:] != (len(names),):
        raise ValueError(f"state: last axis must have length {len(names)} "
                         f"({', '.join(spec.unconstrained_names)}), got shape {u.shape}")
    batch = u.shape[:-1]
    total = np.zeros(batch)
    value, ok = {}, np.ones(batch, dtype=bool)
    for i, k in enumerate(names):
        prior, ui = spec.priors[k], u[..., i]
        total = total + prior.unconstrained_logpdf(ui, dtype)
        if prior.support == "positive":
            ok_u = ui <= positive_exp_limit(dtype)
            ok &= ok_u
            ui = np.where(ok_u, ui, 0.0)
        value[k] = prior.forward(ui) * np.ones(batch)
    for k in PARAMETERS:
        if isinstance(spec.priors[k], Fixed):
            value[k] = np.full(batch, spec.priors[k].value)
    ok &= value["A"] * spec.t_max <= exponent_limit(spec, dtype)
    A = np.where(ok, value["A"], 0.0)
    sig = spec.priors["sigma"]
    if isinstance(sig, Fixed):
        log_sigma = np.full(batch, math.log(sig.value))
    else:
        ui = u[..., names.index("sigma")]
        if sig.support == "positive":
            ui = np.where(ui <= positive_exp_limit(dtype), ui, 0.0)
        log_sigma = sig.log_forward(ui)
    r = spec.y - value["c"][..., None] - trapezoid_integral(spec.t, A, spec.f, spec.refine)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        quad = _neg_half_exp(_log_quadratic(r) - 2.0 * log_sigma, quadratic_limit(dtype))
    n = spec.y.size
    loglik = -0.5 * n * _LOG_2PI - n * log_sigma + quad
    return np.where(ok, total + loglik, -np.inf)


# --------------------------------------------------------------------------- quadrature


@dataclass(frozen=True)
class QuadraturePosterior:
    """Posterior moments from grid quadrature.

    refine: trapezoid steps per interval, or None for the exact integral.
    mean, sd: {name: value} for each sampled parameter (constrained values).
    log_evidence: log of the integral of prior x likelihood (all constants included).
    box: {name: (lo, hi)} of the grid in unconstrained coordinates (reusable via ``box=``).
    grid: {name: unconstrained nodes}; weights: normalised posterior mass per node,
        shape (len(grid['A']) or 1, len(grid['sigma']) or 1).
    """

    refine: int | None
    mean: dict
    sd: dict
    log_evidence: float
    box: dict
    grid: dict
    weights: np.ndarray


class _GridTarget:
    """log p(u_A, u_sigma) on a tensor grid, with c fixed or integrated out analytically."""

    def __init__(self, spec: IntegralModelSpec, refine: int | None):
        self.spec = spec
        self.refine = refine
        c = spec.priors["c"]
        if not isinstance(c, (Fixed, NormalPrior)):
            raise ValueError(f"priors['c']: posterior_quadrature integrates c out "
                             f"analytically and needs c fixed or with a normal prior, "
                             f"got {c.dist}")

    def integral(self, A: np.ndarray) -> np.ndarray:
        s = self.spec
        if self.refine is None:
            return exact_integral(s.t, A, s.f)
        return trapezoid_integral(s.t, A, s.f, self.refine)

    def axis_values(self, name: str, u: np.ndarray | None):
        """(value or log value, prior log-density) along one axis."""
        prior = self.spec.priors[name]
        if isinstance(prior, Fixed):
            v = prior.value if name == "A" else math.log(prior.value)
            return np.array([v]), np.zeros(1)
        lp = prior.unconstrained_logpdf(u)
        if name == "A":
            return prior.forward(u), lp
        return prior.log_forward(u), lp

    def __call__(self, uA, uS, with_c: bool = False):
        spec = self.spec
        n = spec.y.size
        A, lpA = self.axis_values("A", uA)
        log_s, lpS = self.axis_values("sigma", uS)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            r0 = spec.y - self.integral(A)  # (nA, n)
            s2 = np.exp(2.0 * log_s)[None, :]
            c = spec.priors["c"]
            if isinstance(c, Fixed):
                S = np.sum((r0 - c.value) ** 2, axis=-1)[:, None]
                ll = -0.5 * n * _LOG_2PI - n * log_s[None, :] - 0.5 * S / s2
                extra = None
            else:
                m0, v0 = c.loc, c.scale ** 2
                rbar = np.mean(r0, axis=-1)[:, None]
                SS = np.sum((r0 - rbar) ** 2, axis=-1)[:, None]
                tau2 = s2 / n + v0
                ll = (-0.5 * (n - 1) * (_LOG_2PI + 2.0 * log_s[None, :]) - 0.5 * math.log(n)
                      - 0.5 * np.log(2.0 * math.pi * tau2)
                      - 0.5 * SS / s2 - 0.5 * (rbar - m0) ** 2 / tau2)
                prec = n / s2 + 1.0 / v0
                extra = ((n * rbar / s2 + m0 / v0) / prec, 1.0 / prec)
            lp = lpA[:, None] + lpS[None, :] + ll
        lp = np.where(np.isnan(lp), -np.inf, lp)
        if with_c:
            return lp, A, np.exp(log_s), extra
        return lp


def _axis(prior, u_grid):
    return None if isinstance(prior, Fixed) else u_grid


def _trapezoid_weights(x: np.ndarray | None) -> np.ndarray:
    if x is None or x.size == 1:
        return np.ones(1)
    w = np.full(x.size, x[1] - x[0])
    w[0] = w[-1] = 0.5 * (x[1] - x[0])
    return w


def _find_box(target: _GridTarget, ranges: list, drop: float, n_coarse=(4001, 401),
              n_scan=401, min_inside=100, max_iter=200) -> list:
    """Zoom from a coarse scan of the prior range to the region lp > max - drop."""

    def evaluate(grids):
        return target(grids[0], grids[1])

    grids = [None if r is None else np.linspace(r[0], r[1], n) for r, n in zip(ranges, n_coarse)]
    lp = evaluate(grids)
    if not np.isfinite(lp).any():
        raise ValueError("posterior density is zero on the whole prior range; check the "
                         "data and priors")
    k = np.unravel_index(np.argmax(lp), lp.shape)
    coarse, coarse_lp = grids, lp
    box = []
    for axis, g in enumerate(grids):
        box.append(None if g is None else (g[max(k[axis] - 1, 0)], g[min(k[axis] + 1, g.size - 1)]))
    for _ in range(max_iter):
        grids = [None if b is None else np.linspace(b[0], b[1], n_scan) for b in box]
        lp = evaluate(grids)
        inside = lp > np.max(lp) - drop
        done = True
        for axis, g in enumerate(grids):
            if g is None:
                continue
            idx = np.flatnonzero(inside.any(axis=1 - axis))
            i0, i1 = idx[0], idx[-1]
            lo, hi = box[axis]
            width = hi - lo
            r_lo, r_hi = ranges[axis]
            new_lo = max(r_lo, lo - width) if (i0 == 0 and lo > r_lo) else lo
            new_hi = min(r_hi, hi + width) if (i1 == g.size - 1 and hi < r_hi) else hi
            if (new_lo, new_hi) != (lo, hi):
                box[axis] = (new_lo, new_hi)
                done = False
            elif i1 - i0 + 1 < min_inside:
                new = (g[max(i0 - 1, 0)], g[min(i1 + 1, g.size - 1)])
                if new[1] - new[0] <= 1e-13 * max(1.0, abs(new[0]), abs(new[1])):
                    raise ValueError("posterior too narrow to resolve on a float64 grid")
                box[axis] = new
                done = False
        if done:
            _check_single_mode(coarse, coarse_lp, box, np.max(lp), drop)
            return box
    raise ValueError("could not bracket the posterior (grid search did not converge)")


def _check_single_mode(coarse, coarse_lp, box, peak, drop):
    outside = np.zeros(coarse_lp.shape, dtype=bool)
    for axis, g in enumerate(coarse):
        if g is None:
            continue
        lo, hi = box[axis]
        out_axis = (g < lo) | (g > hi)
        outside |= out_axis[:, None] if axis == 0 else out_axis[None, :]
    if np.any(coarse_lp[outside] > peak - 0.75 * drop):
        raise ValueError("posterior looks multimodal (a second region of high density "
                         "outside the located peak); grid quadrature assumes one mode")


def spec_from_config(config, t, y, f=None) -> "IntegralModelSpec":
    """The spec of an integral-model run config (``core.config.RunConfig``) for the series
    t, y (f): refine from ``[integral]``; A, c and sigma each fixed (a number) or given
    their prior (a ``core.config.Distribution``, as its config mapping)."""
    priors = {}
    for name in ("A", "c", "sigma"):
        value = getattr(config.prior, name)
        priors[name] = value.to_config() if hasattr(value, "to_config") else float(value)
    return IntegralModelSpec(t, y, f=f, refine=config.integral.refine, priors=priors)


def posterior_quadrature(spec: IntegralModelSpec, refine: int | None = None, *,
                         exact: bool = False, box: Mapping | None = None,
                         n_final: int = 601, drop: float = 40.0) -> QuadraturePosterior:
    """Posterior mean and sd of the sampled parameters by grid quadrature.

    refine: trapezoid steps per interval (default ``spec.refine``); exact=True uses the
    exact integral instead (the converged posterior). A is integrated over its
    unconstrained coordinate, sigma (when sampled) over its own (2D grid); c (fixed or
    normal prior) is integrated out analytically: given A and sigma, with r_i = y_i - I_i,
    rbar = mean(r), SS = sum (r_i - rbar)^2, prior c ~ N(m0, s0^2), tau^2 = sigma^2/n + s0^2,

        log integral p(y | A, c, sigma) p(c) dc = -(n-1)/2 log(2 pi sigma^2) - log(n)/2
            - log(2 pi tau^2)/2 - SS / (2 sigma^2) - (rbar - m0)^2 / (2 tau^2),

    and c | A, sigma, y ~ N(mu, 1/P), P = n/sigma^2 + 1/s0^2, mu = (n rbar/sigma^2 + m0/s0^2)/P,
    whose moments are averaged over the grid. ``box`` reuses a previous result's box
    (checked: if the density is not negligible at its edges the box is searched again).
    """
    if exact and refine is not None:
        raise ValueError("refine: give either refine or exact=True, not both")
    r = None if exact else (spec.refine if refine is None else int(refine))
    if r is not None and r < 1:
        raise ValueError(f"refine: must be >= 1, got {r!r}")
    check_overflow(spec, np.float64)
    target = _GridTarget(spec, r)
    ranges = []
    for name in ("A", "sigma"):
        prior = spec.priors[name]
        if isinstance(prior, Fixed):
            ranges.append(None)
            continue
        lo, hi = prior.unconstrained_range()
        if name == "A":  # stay where the float64 density is computed
            a_max = 0.999 * exponent_limit(spec, np.float64) / spec.t_max
            if prior.support == "real":
                hi = min(hi, a_max)
            elif prior.support == "positive":
                hi = min(hi, math.log(a_max)) if a_max > 0 else hi
        ranges.append((lo, hi))
    found = None
    if box is not None:
        found = [None if ranges[i] is None else tuple(box[name])
                 for i, name in enumerate(("A", "sigma"))]
    for attempt in range(2):
        if found is None:
            found = _find_box(target, ranges, drop)
        grids = [None if b is None else np.linspace(b[0], b[1], n_final) for b in found]
        lp, A, sigma, c_moments = target(grids[0], grids[1], with_c=True)
        peak = np.max(lp)
        edge_ok = True
        for axis, g in enumerate(grids):
            if g is None:
                continue
            prof = np.max(lp, axis=1 - axis)
            at_range = (found[axis][0] <= ranges[axis][0], found[axis][1] >= ranges[axis][1])
            if (prof[0] > peak - 0.75 * drop and not at_range[0]) or \
               (prof[-1] > peak - 0.75 * drop and not at_range[1]):
                edge_ok = False
        if edge_ok:
            break
        found = None
    else:
        raise ValueError("could not place the quadrature grid around the posterior")
    w = _trapezoid_weights(grids[0])[:, None] * _trapezoid_weights(grids[1])[None, :]
    mass = w * np.exp(lp - peak)
    Z = np.sum(mass)
    P = mass / Z
    mean, sd = {}, {}

    def moments(x):
        m = float(np.sum(P * x))
        v = float(np.sum(P * (x - m) ** 2))
        return m, math.sqrt(max(v, 0.0))

    if grids[0] is not None:
        mean["A"], sd["A"] = moments(np.broadcast_to(A[:, None], P.shape))
    if c_moments is not None:
        mu, var = c_moments
        m = float(np.sum(P * mu))
        v = float(np.sum(P * (var + (mu - m) ** 2)))
        mean["c"], sd["c"] = m, math.sqrt(max(v, 0.0))
    if grids[1] is not None:
        mean["sigma"], sd["sigma"] = moments(np.broadcast_to(sigma[None, :], P.shape))
    names = ("A", "sigma")
    return QuadraturePosterior(
        refine=r, mean=mean, sd=sd, log_evidence=float(peak + math.log(Z)),
        box={names[i]: tuple(map(float, b)) for i, b in enumerate(found) if b is not None},
        grid={names[i]: g for i, g in enumerate(grids) if g is not None},
        weights=P)


# --------------------------------------------------------------------------- report


@dataclass(frozen=True)
class DiscretisationReport:
    """How far the discretised posterior of A is from the converged one.

    mean_r/sd_r at ``refine`` = r, mean_2r/sd_2r at 2r, mean_exact/sd_exact with the
    exact integral (h -> 0). For an O(h^2) rule the bias b(r) = mean_r - mean_exact
    scales as 1/r^2, so b(r)/b(2r) ~ 4 and the Richardson extrapolation
    (4 mean_2r - mean_r) / 3 removes the leading term; mean_r - richardson_mean
    = 4 (mean_r - mean_2r) / 3 estimates b(r) without the exact posterior.
    """

    refine: int
    mean_r: float
    sd_r: float
    mean_2r: float
    sd_2r: float
    mean_exact: float
    sd_exact: float
    reference: str = "exact integral"

    @property
    def richardson_mean(self) -> float:
        return (4.0 * self.mean_2r - self.mean_r) / 3.0

    @property
    def bias_r(self) -> float:
        return self.mean_r - self.mean_exact

    @property
    def bias_2r(self) -> float:
        return self.mean_2r - self.mean_exact

    @property
    def bias_r_in_sd(self) -> float:
        return self.bias_r / self.sd_exact

    @property
    def bias_2r_in_sd(self) -> float:
        return self.bias_2r / self.sd_exact

    @property
    def bias_ratio(self) -> float:
        """b(r) / b(2r), ~4 for the O(h^2) trapezoid rule (nan when b(2r) = 0)."""
        return self.bias_r / self.bias_2r if self.bias_2r != 0 else math.nan

    @property
    def richardson_bias_r(self) -> float:
        return self.mean_r - self.richardson_mean

    @property
    def observed_order(self) -> float:
        return math.log2(abs(self.bias_ratio)) if self.bias_ratio == self.bias_ratio \
            and self.bias_ratio != 0 else math.nan

    def refine_for(self, tolerance_sd: float = 0.1) -> int:
        """Smallest refine whose predicted |bias| (b(r) (r/r')^2) is below tolerance_sd sd."""
        b = abs(self.bias_r_in_sd)
        if b <= tolerance_sd:
            return self.refine
        return int(math.ceil(self.refine * math.sqrt(b / tolerance_sd)))

    def format(self) -> str:
        r = self.refine
        b = self.bias_r_in_sd
        verdict = ("negligible (< 0.1 posterior sd)" if abs(b) < 0.1 else
                   "noticeable (0.1 to 0.5 posterior sd)" if abs(b) < 0.5 else
                   "large (> 0.5 posterior sd)")
        lines = [
            f"Discretisation of integral_0^t exp(A s) f(s) ds (cumulative trapezoid, "
            f"refine = {r} steps per data interval)",
            f"  {'posterior of A':<30}{'mean':>20}{'sd':>14}",
            f"  {f'refine {r}':<30}{self.mean_r:>20.12g}{self.sd_r:>14.6g}",
            f"  {f'refine {2 * r}':<30}{self.mean_2r:>20.12g}{self.sd_2r:>14.6g}",
            f"  {f'Richardson (4 m{2 * r} - m{r})/3':<30}{self.richardson_mean:>20.12g}",
            f"  {self.reference + ' (h -> 0)':<30}{self.mean_exact:>20.12g}{self.sd_exact:>14.6g}",
            f"  bias of the mean at refine {r}: {self.bias_r:+.3g} = {b:+.3g} posterior sd "
            f"(Richardson estimate {self.richardson_bias_r:+.3g})",
            f"  bias at refine {2 * r}: {self.bias_2r:+.3g} = {self.bias_2r_in_sd:+.3g} sd; "
            f"ratio {self.bias_ratio:.3g} (about 4 for an O(h^2) rule)",
            f"  sd at refine {r} differs from the converged sd by "
            f"{(self.sd_r - self.sd_exact) / self.sd_exact:+.2e} (relative)",
            f"  verdict: {verdict}; gradients through the trapezoid rule are exact for the "
            f"discretised model",
        ]
        if abs(b) >= 0.1:
            lines.append(f"  refine >= {self.refine_for(0.1)} keeps the bias below 0.1 sd")
        return "\n".join(lines)


def discretisation_report(spec: IntegralModelSpec, refine: int | None = None) -> DiscretisationReport:
    """Posterior mean/sd of A at refine r and 2r and with the exact integral.

    The exact integral is the closed form t * phi1(A t) for constant f and the
    segment-wise exact integral of exp(A s) times the piecewise-linear f otherwise, so
    the reference is the true h -> 0 limit in both cases. The three quadratures share
    one grid (the posteriors differ by far less than their width; each is checked).
    """
    if isinstance(spec.priors["A"], Fixed):
        raise ValueError("priors['A']: A is fixed; the discretisation report needs a prior for A")
    r = spec.refine if refine is None else int(refine)
    if r < 1:
        raise ValueError(f"refine: must be >= 1, got {r!r}")
    post_r = posterior_quadrature(spec, r)
    post_2r = posterior_quadrature(spec, 2 * r, box=post_r.box)
    post_x = posterior_quadrature(spec, exact=True, box=post_r.box)
    return DiscretisationReport(
        refine=r, mean_r=post_r.mean["A"], sd_r=post_r.sd["A"],
        mean_2r=post_2r.mean["A"], sd_2r=post_2r.sd["A"],
        mean_exact=post_x.mean["A"], sd_exact=post_x.sd["A"],
        reference="closed form" if spec.f is None else "exact piecewise-linear f")


# --------------------------------------------------------------------------- data files


class Series(NamedTuple):
    """A 1D data series: times t, observations y, optional f column (None: f = 1)."""

    t: np.ndarray
    y: np.ndarray
    f: np.ndarray | None = None


DEMO_PARAMETERS = {"A": 0.3, "c": 1.0, "sigma": 0.5}


def make_demo_series(seed: int = 0, n: int = 100, t_max: float = 10.0,
                     A: float = DEMO_PARAMETERS["A"], c: float = DEMO_PARAMETERS["c"],
                     sigma: float = DEMO_PARAMETERS["sigma"]) -> Series:
    """t = linspace(0, t_max, n), y = c + expm1(A t)/A + Normal(0, sigma^2) noise, f = 1.

    Defaults reproduce the user's setup (100 points on [0, 10]) with A = 0.3, c = 1,
    sigma = 0.5, so y rises from ~1 to ~68. Deterministic for a given seed.
    """
    if n < 2:
        raise ValueError(f"n: need at least 2 points, got {n!r}")
    if not sigma > 0:
        raise ValueError(f"sigma: must be > 0, got {sigma!r}")
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, t_max, n)
    y = closed_form_mean(t, A, c) + sigma * rng.standard_normal(n)
    return Series(t, y, None)


def save_series_csv(path, t, y, f=None) -> None:
    """Write ``t,y`` (or ``t,y,f``) with a header line and 17 significant digits."""
    t = _float_vector("t", t)
    y = _float_vector("y", y)
    cols = [t, y]
    header = ["t", "y"]
    if f is not None:
        cols.append(_float_vector("f", f))
        header.append("f")
    for name, col in zip(header[1:], cols[1:]):
        if col.size != t.size:
            raise ValueError(f"{name}: length {col.size} does not match t (length {t.size})")
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for row in zip(*cols):
            w.writerow([repr(float(v)) for v in row])


def load_series_csv(path) -> Series:
    """Read a ``t,y[,f]`` CSV file (header required; blank lines skipped).

    Raises ValueError naming the file and line for a bad header, a wrong number of
    fields, a value that is not a finite number, or times that do not increase.
    """
    name = os.fspath(path)
    with open(path, newline="") as fh:
        rows = [(i, row) for i, row in enumerate(csv.reader(fh), start=1)
                if row and any(cell.strip() for cell in row)]
    if not rows:
        raise ValueError(f"{name}: empty file; expected a header 't,y' or 't,y,f'")
    line, header = rows[0]
    header = [h.strip() for h in header]
    if header not in (["t", "y"], ["t", "y", "f"]):
        raise ValueError(f"{name}, line {line}: header must be 't,y' or 't,y,f', "
                         f"got {','.join(header)!r}")
    cols = [[] for _ in header]
    for line, row in rows[1:]:
        if len(row) != len(header):
            raise ValueError(f"{name}, line {line}: expected {len(header)} fields "
                             f"({','.join(header)}), got {len(row)}")
        for j, cell in enumerate(row):
            try:
                v = float(cell)
            except ValueError:
                raise ValueError(f"{name}, line {line}: column {header[j]!r}: "
                                 f"{cell.strip()!r} is not a number") from None
            if not math.isfinite(v):
                raise ValueError(f"{name}, line {line}: column {header[j]!r}: "
                                 f"{cell.strip()!r} is not finite")
            cols[j].append(v)
        t_col = cols[0]
        if len(t_col) >= 2 and not t_col[-1] > t_col[-2]:
            raise ValueError(f"{name}, line {line}: t = {t_col[-1]!r} does not increase "
                             f"(previous t = {t_col[-2]!r})")
    if len(cols[0]) < 2:
        raise ValueError(f"{name}: need at least 2 data rows, got {len(cols[0])}")
    arrays = [np.array(c) for c in cols]
    return Series(arrays[0], arrays[1], arrays[2] if len(arrays) == 3 else None)
