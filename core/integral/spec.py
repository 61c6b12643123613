"""``IntegralModelSpec``: data, discretisation and priors of one integral-model run; the overflow
guard and the numpy log-density in the unconstrained coordinates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from core.integral.quadrature import exact_integral, trapezoid_integral
from core.io.series import series_column
from core.log_density import LOG_2PI, log_max, neg_half_exp, positive_exp_limit, quadratic_limit
from core.priors import parse_prior

__all__ = [
    "PARAMETERS", "IntegralModelSpec", "predictive_mean", "exponent_limit", "check_overflow", "log_density",
    "spec_from_config"
]

#: The integral model's parameters, in state order: THE list (the config, the GUI import it).
PARAMETERS = ("A", "c", "sigma")

# --------------------------------------------------------------------------- spec


def _data_times(value) -> np.ndarray:
    """The data times, checked: at least 2, strictly increasing, t[0] >= 0."""
    t = series_column("t", value)
    if t.size < 2:
        raise ValueError(f"t: need at least 2 data times, got {t.size}")
    bad = np.flatnonzero(np.diff(t) <= 0)
    if bad.size:
        i = bad[0] + 1
        raise ValueError(f"t: must be strictly increasing; t[{i}] = {float(t[i])!r} "
                         f"follows t[{i - 1}] = {float(t[i - 1])!r}")
    if t[0] < 0:
        raise ValueError(f"t: t[0] = {float(t[0])!r} < 0; the integral starts at s = 0")
    return t


def _model_priors(priors) -> dict:
    """{"A", "c", "sigma"} -> ``core.priors`` objects, checked: every key given, none other,
    and sigma's prior on positive values only."""
    if not isinstance(priors, Mapping):
        raise ValueError(f"priors: must be a mapping with keys {list(PARAMETERS)}, "
                         f"got {type(priors).__name__}")
    unknown = sorted(set(priors) - set(PARAMETERS))
    if unknown:
        raise ValueError(f"priors: unknown key(s) {unknown}; expected {list(PARAMETERS)}")
    missing = [k for k in PARAMETERS if k not in priors]
    if missing:
        raise ValueError(f"priors: missing key(s) {missing} (give a number to fix a "
                         f"parameter, or a prior mapping to sample it)")
    parsed = {k: parse_prior(f"priors[{k!r}]", priors[k]) for k in PARAMETERS}
    sig = parsed["sigma"]
    if sig.is_fixed and sig.value <= 0:
        raise ValueError(f"priors['sigma']: the noise sd must be > 0, got {sig.value!r}")
    if sig.dist == "normal":
        raise ValueError("priors['sigma']: a normal prior allows sigma <= 0; use "
                         "halfnormal, lognormal, or uniform with low >= 0")
    if sig.dist == "uniform" and sig.low < 0:
        raise ValueError(f"priors['sigma']: uniform low = {sig.low!r} < 0; sigma must "
                         "be positive (use low >= 0)")
    return parsed


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
    read-only float64 copies; priors as ``core.priors`` objects (``Fixed`` or a kind of
    ``core.priors.PRIOR_KINDS``).
    """

    t: np.ndarray
    y: np.ndarray
    f: np.ndarray | None = None
    refine: int = 8
    priors: Mapping = field(default_factory=dict)

    def __post_init__(self):
        t = _data_times(self.t)
        y = series_column("y", self.y)
        if y.size != t.size:
            raise ValueError(f"y: length {y.size} does not match t (length {t.size})")
        f = None
        if self.f is not None:
            f = series_column("f", self.f)
            if f.size != t.size:
                raise ValueError(f"f: length {f.size} does not match t (length {t.size})")
        refine = self.refine
        if isinstance(refine, bool) or not isinstance(refine, (int, np.integer)):
            raise ValueError(f"refine: must be an integer >= 1, got {refine!r}")
        if refine < 1:
            raise ValueError(f"refine: must be >= 1, got {refine!r}")
        object.__setattr__(self, "t", t)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "f", f)
        object.__setattr__(self, "refine", int(refine))
        object.__setattr__(self, "priors", _model_priors(self.priors))

    @property
    def sampled_names(self) -> tuple[str, ...]:
        """Names of the sampled parameters, in state order (a subset of A, c, sigma)."""
        return tuple(k for k in PARAMETERS if not self.priors[k].is_fixed)

    @property
    def unconstrained_names(self) -> tuple[str, ...]:
        """Names of the unconstrained coordinates: 'A', 'log_sigma', 'logit_A', ..."""
        return tuple(self.priors[k].coordinate_prefix + k for k in self.sampled_names)

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


def predictive_mean(spec: IntegralModelSpec, A, c, refine: int | None = None,
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


# --------------------------------------------------------------------------- overflow limits


def exponent_limit(spec: IntegralModelSpec, dtype=np.float64) -> float:
    """Largest A * t_max at which the density is computed (beyond it: -inf).

    log(max float) - log 4 - 2 log(1 + t_max) - log(1 + F): keeps exp(A t), the integral
    (<= t_max F exp(A t_max)) and its A-derivative (<= t_max^2 F exp(A t_max)) finite,
    with room for adding y and c.
    """
    return (log_max(dtype) - math.log(4.0) - 2.0 * math.log1p(spec.t_max)
            - math.log1p(spec.f_max))


def check_overflow(spec: IntegralModelSpec, dtype=np.float64) -> None:
    """Raise ValueError if the prior for A reaches the exp(A t) overflow region.

    The largest A with non-negligible prior mass is ``prior.upper_bound()`` (normal
    loc + 10 scale, lognormal exp(loc + 10 scale), halfnormal 10 scale, uniform high;
    a fixed A is its value); it must satisfy A * t_max <= ``exponent_limit``.
    """
    prior = spec.priors["A"]
    limit = exponent_limit(spec, dtype)
    name = np.dtype(dtype).name
    if prior.is_fixed:
        a_hi, rule = prior.value, "the fixed value"
    else:
        a_hi, rule = prior.upper_bound(), f"{prior.dist} {prior.bound_rule}"
    if a_hi * spec.t_max > limit:
        what = ("overflows" if a_hi * spec.t_max > log_max(dtype)
                else "comes too close to the overflow of")
        raise ValueError(
            f"priors['A']: the prior allows A up to {a_hi:.6g} ({rule}); exp(A*t) at "
            f"t = {spec.t_max:.6g} {what} {name} (max ~{log_max(dtype):.1f}/t; with the "
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
    """The numpy mirror of ``core.engine.integral_density``: log prior + log likelihood.

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
        total = total + prior.unconstrained_logpdf(ui, quadratic_limit(dtype))
        if prior.transform == "log":
            ok_u = ui <= positive_exp_limit(dtype)
            ok &= ok_u
            ui = np.where(ok_u, ui, 0.0)
        value[k] = prior.forward(ui) * np.ones(batch)
    for k in PARAMETERS:
        if spec.priors[k].is_fixed:
            value[k] = np.full(batch, spec.priors[k].value)
    ok &= value["A"] * spec.t_max <= exponent_limit(spec, dtype)
    A = np.where(ok, value["A"], 0.0)
    sig = spec.priors["sigma"]
    if sig.is_fixed:
        log_sigma = np.full(batch, math.log(sig.value))
    else:
        ui = u[..., names.index("sigma")]
        if sig.transform == "log":
            ui = np.where(ui <= positive_exp_limit(dtype), ui, 0.0)
        log_sigma = sig.log_forward(ui)
    r = spec.y - value["c"][..., None] - trapezoid_integral(spec.t, A, spec.f, spec.refine)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        quad = neg_half_exp(_log_quadratic(r) - 2.0 * log_sigma, quadratic_limit(dtype))
    n = spec.y.size
    loglik = -0.5 * n * LOG_2PI - n * log_sigma + quad
    return np.where(ok, total + loglik, -np.inf)


def spec_from_config(config, t, y, f=None) -> "IntegralModelSpec":
    """The spec of an integral-model run config (``core.config.RunConfig``) for the series
    t, y (f): refine from ``[integral]``; A, c and sigma each fixed (a number) or
    sampled (the config holds its ``core.priors`` object)."""
    priors = {name: getattr(config.prior, name) for name in PARAMETERS}
    return IntegralModelSpec(t, y, f=f, refine=config.integral.refine, priors=priors)


