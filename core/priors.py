"""Scalar priors: THE registry of prior kinds (numpy/scipy only).

A scalar parameter -- a P(k) hyperparameter of the field model (amplitude, index,
cutoff_scale) or a parameter of the integral model (A, c, sigma) -- is fixed or sampled
from one of the kinds below. Each kind is defined once, here, with its config
parameters, their validation, log-density, draws, median, support and the
unconstrained coordinate u a sampler moves in (forward x(u), inverse u(x) and the
log-Jacobian log |dx/du|):

    kind        config (TOML)                             x            u                  log |dx/du|
    fixed       a number, or {value = x}                   x = value    (not sampled)
    normal      {dist = "normal", loc = m, scale = s}      real         u = x              0
    lognormal   {dist = "lognormal", loc = m, scale = s}   x > 0        u = log x          u
    halfnormal  {dist = "halfnormal", scale = s}           x >= 0       u = log x          u
    uniform     {dist = "uniform", low = a, high = b}      a < x < b    u = logit((x-a)/(b-a))
                                                                             log(b-a) - softplus(u) - softplus(-u)

normal: x ~ N(m, s^2); lognormal: log x ~ N(m, s^2); halfnormal: density 2 N(x; 0, s^2)
on x >= 0; uniform: 1 / (b - a) on [a, b]. scale > 0, low < high, all finite.
``unconstrained_logpdf(u)`` = logpdf(x(u)) + log |dx/du|, written in closed form per
kind (lognormal: log N(u; m, s); uniform: -softplus(u) - softplus(-u)).

The registry ``PRIOR_KINDS`` (kind name -> class) is the extension point: the config
parser, the GUI's prior editors and the TensorFlow twins in ``core.engine.prior_density``
all read it; add a kind here (and its TensorFlow twin there) and every caller knows it.
``SAMPLED_KINDS`` are the names a config may give as ``dist``. Which kinds a parameter
accepts is the parameter's business (the field model's hyperparameters take
``FIELD_HYPERPRIOR_KINDS``, see ``core.field.power_spectrum``; the integral model all).

Every validation error goes through ``_invalid(key, problem)``: a ``PriorError``
(a ValueError) whose message is "<key>: <problem>", key the full dotted key
("prior.index.scale: must be > 0, got -1.0").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from core.log_density import LOG_2PI, neg_half_exp

__all__ = [
    "PRIOR_KINDS",
    "SAMPLED_KINDS",
    "PriorError",
    "Fixed",
    "NormalPrior",
    "LogNormalPrior",
    "HalfNormalPrior",
    "UniformPrior",
    "Prior",
    "SampledPrior",
    "parse_prior",
    "prior_to_config",
    "HALFNORMAL_MEDIAN",
]

#: The median of |Z|, Z ~ N(0, 1): sqrt(2) erfinv(1/2).
HALFNORMAL_MEDIAN = 0.6744897501960817
_EXAMPLE = '{dist = "normal", loc = 0.0, scale = 1.0}'


class PriorError(ValueError):
    """An invalid prior; ``key`` is the full dotted key it concerns, ``problem`` the rest."""

    def __init__(self, key: str, problem: str):
        super().__init__(f"{key}: {problem}")
        self.key, self.problem = key, problem


def _invalid(key: str, problem: str):
    """Raise the one error every prior check raises ("<key>: <problem>")."""
    raise PriorError(key, problem)


def _is_number(value) -> bool:
    return (isinstance(value, (int, float, np.integer, np.floating))
            and not isinstance(value, (bool, np.bool_)))


def _finite(key: str, value) -> float:
    if not _is_number(value) or not math.isfinite(float(value)):
        _invalid(key, f"must be a finite number, got {value!r}")
    return float(value)


def _positive(key: str, value) -> float:
    value = _finite(key, value)
    if not value > 0:
        _invalid(key, f"must be > 0, got {value!r}")
    return value


def _softplus(u):
    return np.logaddexp(0.0, u)


class _Kind:
    """What every kind has. Class attributes: ``dist`` (the registry name),
    ``parameters`` (its config keys, in order), ``transform`` ("identity", "log" or
    "logit": the unconstrained map), ``is_fixed``."""

    dist: ClassVar[str]
    parameters: ClassVar[tuple[str, ...]]
    transform: ClassVar[str] = "identity"
    is_fixed: ClassVar[bool] = False

    @classmethod
    def from_parameters(cls, key: str, params: Mapping):
        """The prior from its config parameters (exactly ``parameters``), validated;
        errors name ``key``.<parameter>."""
        return cls(**{name: _finite(f"{key}.{name}", params[name]) for name in cls.parameters})

    def to_config(self) -> dict[str, Any]:
        """{"dist": ..., then the parameters}: the TOML table users write."""
        return {"dist": self.dist, **{name: getattr(self, name) for name in self.parameters}}

    @property
    def coordinate_prefix(self) -> str:
        """Prefix of the unconstrained coordinate's name: '', 'log_' or 'logit_'."""
        return {"identity": "", "log": "log_", "logit": "logit_"}[self.transform]

    def log_jacobian(self, u):
        """log |dx/du| at u."""
        u = np.asarray(u, dtype=np.float64)
        if self.transform == "identity":
            return np.zeros_like(u)
        return u.copy()


class _LogCoordinate(_Kind):
    """Positive parameters sampled in u = log x: x = exp(u), log x = u."""

    transform: ClassVar[str] = "log"

    def forward(self, u):
        with np.errstate(over="ignore"):
            return np.exp(np.asarray(u, dtype=np.float64))

    def log_forward(self, u):
        return np.asarray(u, dtype=np.float64)

    def inverse(self, x):
        with np.errstate(divide="ignore"):
            return np.log(np.asarray(x, dtype=np.float64))


@dataclass(frozen=True)
class Fixed(_Kind):
    """A parameter held at ``value`` (not sampled): a point mass."""

    value: float
    dist: ClassVar[str] = "fixed"
    parameters: ClassVar[tuple[str, ...]] = ("value",)
    is_fixed: ClassVar[bool] = True

    def to_config(self) -> float:
        return self.value

    @property
    def support(self) -> tuple[float, float]:
        return (self.value, self.value)

    def median(self) -> float:
        return self.value

    def logpdf(self, x):
        """0 at x = value, -inf elsewhere."""
        x = np.asarray(x, dtype=np.float64)
        return np.where(x == self.value, 0.0, -np.inf)

    def draw(self, rng: np.random.Generator, size=None):
        return np.full(() if size is None else size, self.value)


@dataclass(frozen=True)
class NormalPrior(_Kind):
    """x ~ Normal(loc, scale); unconstrained u = x."""

    loc: float
    scale: float
    dist: ClassVar[str] = "normal"
    parameters: ClassVar[tuple[str, ...]] = ("loc", "scale")
    bound_rule: ClassVar[str] = "loc + 10 scale"

    @classmethod
    def from_parameters(cls, key, params):
        return cls(_finite(f"{key}.loc", params["loc"]), _positive(f"{key}.scale", params["scale"]))

    support = (-math.inf, math.inf)

    def median(self) -> float:
        return self.loc

    def unconstrained_median(self) -> float:
        return self.loc

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
            return -0.5 * z * z - math.log(self.scale) - 0.5 * LOG_2PI

    def unconstrained_logpdf(self, u, quadratic_limit: float = math.inf):
        return self.logpdf(u)

    def draw(self, rng: np.random.Generator, size=None):
        return rng.normal(self.loc, self.scale, size=size)


@dataclass(frozen=True)
class LogNormalPrior(_LogCoordinate):
    """log x ~ Normal(loc, scale); u = log x, so log p(u) = log N(u; loc, scale)."""

    loc: float
    scale: float
    dist: ClassVar[str] = "lognormal"
    parameters: ClassVar[tuple[str, ...]] = ("loc", "scale")
    bound_rule: ClassVar[str] = "exp(loc + 10 scale)"

    @classmethod
    def from_parameters(cls, key, params):
        return cls(_finite(f"{key}.loc", params["loc"]), _positive(f"{key}.scale", params["scale"]))

    support = (0.0, math.inf)

    def median(self) -> float:
        return math.exp(self.loc)

    def unconstrained_median(self) -> float:
        return self.loc

    def upper_bound(self) -> float:
        with np.errstate(over="ignore"):
            return float(np.exp(self.loc + 10.0 * self.scale))

    def unconstrained_range(self) -> tuple[float, float]:
        return self.loc - 10.0 * self.scale, self.loc + 10.0 * self.scale

    def logpdf(self, x):
        x = np.asarray(x, dtype=np.float64)
        positive = x > 0
        log_x = np.log(np.where(positive, x, 1.0))
        z = (log_x - self.loc) / self.scale
        with np.errstate(over="ignore"):
            out = -0.5 * z * z - math.log(self.scale) - 0.5 * LOG_2PI - log_x
        return np.where(positive, out, -np.inf)

    def unconstrained_logpdf(self, u, quadratic_limit: float = math.inf):
        z = (np.asarray(u, dtype=np.float64) - self.loc) / self.scale
        with np.errstate(over="ignore"):
            return -0.5 * z * z - math.log(self.scale) - 0.5 * LOG_2PI

    def draw(self, rng: np.random.Generator, size=None):
        return rng.lognormal(self.loc, self.scale, size=size)


@dataclass(frozen=True)
class HalfNormalPrior(_LogCoordinate):
    """x ~ HalfNormal(scale), density 2 N(x; 0, scale) on x >= 0; u = log x.

    log p(u) = log 2 - log(scale) - log(2 pi)/2 - exp(2 (u - log scale)) / 2 + u, the
    exp computed only up to ``quadratic_limit`` (-inf beyond, as in the TensorFlow twin).
    """

    scale: float
    dist: ClassVar[str] = "halfnormal"
    parameters: ClassVar[tuple[str, ...]] = ("scale",)
    bound_rule: ClassVar[str] = "10 scale"

    @classmethod
    def from_parameters(cls, key, params):
        return cls(_positive(f"{key}.scale", params["scale"]))

    support = (0.0, math.inf)

    def median(self) -> float:
        return HALFNORMAL_MEDIAN * self.scale

    def unconstrained_median(self) -> float:
        return math.log(self.median())

    def upper_bound(self) -> float:
        return 10.0 * self.scale

    def unconstrained_range(self) -> tuple[float, float]:
        # P(x < scale * e^-30) ~ 1e-13: the lower tail in u decays only like e^u.
        return math.log(self.scale) - 30.0, math.log(self.scale) + math.log(10.0)

    def logpdf(self, x):
        x = np.asarray(x, dtype=np.float64)
        z = x / self.scale
        with np.errstate(over="ignore"):
            out = math.log(2.0) - math.log(self.scale) - 0.5 * LOG_2PI - 0.5 * z * z
        return np.where(x >= 0, out, -np.inf)

    def unconstrained_logpdf(self, u, quadratic_limit: float = math.inf):
        u = np.asarray(u, dtype=np.float64)
        with np.errstate(over="ignore"):
            quad = neg_half_exp(2.0 * (u - math.log(self.scale)), quadratic_limit)
        return math.log(2.0) - math.log(self.scale) - 0.5 * LOG_2PI + quad + u

    def draw(self, rng: np.random.Generator, size=None):
        return np.abs(rng.normal(0.0, self.scale, size=size))


@dataclass(frozen=True)
class UniformPrior(_Kind):
    """x ~ Uniform(low, high); u = logit((x - low) / (high - low)).

    x = low + (high - low) sigmoid(u), log p(u) = -softplus(u) - softplus(-u)
    (the density 1/(high - low) times the Jacobian (high - low) s (1 - s)).
    """

    low: float
    high: float
    dist: ClassVar[str] = "uniform"
    parameters: ClassVar[tuple[str, ...]] = ("low", "high")
    transform: ClassVar[str] = "logit"
    bound_rule: ClassVar[str] = "high"

    @classmethod
    def from_parameters(cls, key, params):
        low, high = _finite(f"{key}.low", params["low"]), _finite(f"{key}.high", params["high"])
        if not low < high:
            _invalid(key, f"uniform needs low < high, got low={low!r}, high={high!r}")
        return cls(low, high)

    @property
    def support(self) -> tuple[float, float]:
        return (self.low, self.high)

    def median(self) -> float:
        return 0.5 * (self.low + self.high)

    def unconstrained_median(self) -> float:
        return 0.0      # sigmoid(0) = 1/2: the midpoint

    def upper_bound(self) -> float:
        return self.high

    def unconstrained_range(self) -> tuple[float, float]:
        return -35.0, 35.0  # sigmoid(-35) ~ 6e-16: the mass left out is ~1e-15

    def forward(self, u):
        from scipy.special import expit  # here: importing core.priors stays scipy-free

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

    def log_jacobian(self, u):
        u = np.asarray(u, dtype=np.float64)
        return math.log(self.high - self.low) - _softplus(u) - _softplus(-u)

    def logpdf(self, x):
        """-log(high - low) on the closed interval [low, high], -inf outside."""
        x = np.asarray(x, dtype=np.float64)
        inside = (x >= self.low) & (x <= self.high)
        return np.where(inside, -math.log(self.high - self.low), -np.inf)

    def unconstrained_logpdf(self, u, quadratic_limit: float = math.inf):
        u = np.asarray(u, dtype=np.float64)
        return -_softplus(u) - _softplus(-u)

    def draw(self, rng: np.random.Generator, size=None):
        return rng.uniform(self.low, self.high, size=size)


#: kind name -> class: THE list of scalar prior kinds.
PRIOR_KINDS: dict[str, type] = {cls.dist: cls for cls in (
    Fixed, NormalPrior, LogNormalPrior, HalfNormalPrior, UniformPrior)}
#: The kinds a config names with ``dist`` (fixed is spelled as a number).
SAMPLED_KINDS: tuple[str, ...] = tuple(name for name in PRIOR_KINDS if name != "fixed")

SampledPrior = NormalPrior | LogNormalPrior | HalfNormalPrior | UniformPrior
Prior = Fixed | SampledPrior


def _prior_from_table(key: str, value: Mapping, kinds: tuple[str, ...]) -> Prior:
    """A prior from its config table: {value = x} (fixed) or {dist = ..., <parameters>} of one
    of ``kinds``, every key checked ("<key>: ..." errors)."""
    given = dict(value)
    if "value" in given:
        if "dist" in given:
            _invalid(key, "give either value (fixed) or dist, not both")
        extra = sorted(map(str, set(given) - {"value"}))
        if extra:
            _invalid(key, f"a fixed value takes no other keys; unknown {extra}")
        return Fixed.from_parameters(key, given)
    if "dist" not in given:
        _invalid(key, f"a prior mapping needs a 'dist' entry (one of {sorted(kinds)}), "
                      f"got keys {sorted(map(str, given))}")
    dist = given.pop("dist")
    if not isinstance(dist, str):
        _invalid(f"{key}.dist", f"must be a name ({', '.join(kinds)}), got {dist!r}")
    if dist not in kinds:
        _invalid(key, f"unknown dist {dist!r}; known: {sorted(kinds)}")
    cls = PRIOR_KINDS[dist]
    needed = list(cls.parameters)
    extra = sorted(map(str, set(given) - set(needed)))
    if extra:
        _invalid(key, f"{dist} prior takes {needed}; unknown {extra}")
    missing = [p for p in needed if p not in given]
    if missing:
        _invalid(key, f"{dist} prior needs {needed}; missing {missing}")
    return cls.from_parameters(key, given)


def parse_prior(key: str, value, kinds: tuple[str, ...] = SAMPLED_KINDS) -> Prior:
    """A prior from its config value: a number or {value = x} (fixed), a table
    {dist = ..., <parameters>} of one of ``kinds``, or a prior object (checked against
    ``kinds``). ``key`` is the full dotted key errors name ("prior.index")."""
    if isinstance(value, tuple(PRIOR_KINDS.values())):
        if not value.is_fixed and value.dist not in kinds:
            _invalid(key, f"unknown dist {value.dist!r}; known: {sorted(kinds)}")
        return value
    if isinstance(value, Mapping):
        return _prior_from_table(key, value, kinds)
    if not _is_number(value):
        _invalid(key, f"must be a number (fixed) or a prior table such as {_EXAMPLE}, "
                      f"got {value!r}")
    return Fixed(_finite(key, value))


def prior_to_config(value):
    """The config value of a prior: a number (fixed) or its TOML table; numbers pass."""
    return value.to_config() if isinstance(value, tuple(PRIOR_KINDS.values())) else value
