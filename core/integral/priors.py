"""The integral model's parameter priors: fixed, normal, lognormal, half-normal, uniform, each
with its unconstrained map.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np
from scipy.special import expit

from core.integral.quadrature import _LOG_2PI, quadratic_limit

__all__ = ['PRIOR_KINDS', 'Fixed', 'NormalPrior', 'LogNormalPrior', 'HalfNormalPrior', 'UniformPrior', 'parse_prior']

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
# core.engine.integral_density._TF_PRIOR_KINDS; a test checks the two registries agree.
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


