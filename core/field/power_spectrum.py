"""Isotropic power spectra P(k) and the priors of their hyperparameters (numpy only).

Conventions
-----------
k is an angular wavenumber |k| in 1 / (length unit) (k_i = 2 pi m / L_i); P(k) is in
(length unit)^3, normalised as in powerbox / nbodykit: with
delta_tilde(k) = (V / N) * DFT(delta)(k) (DFT = numpy's unnormalised forward fftn),
<|delta_tilde(k)|^2> = V P(|k|). A DFT mode therefore has variance P(k) N^2 / V and the
real-space variance is (1 / V) sum_k P(k) over the full grid (see ``core.field.grid``).

k = 0. The mean mode is not part of the random field (prior variance 0), so every
family returns P(0) = 0 -- also where its formula diverges (a negative index) -- and
never lets a divide-by-zero or overflow warning escape from k = 0. ``log_power``
returns -inf at k = 0. Negative or NaN k is an error.

Families (the registry ``SPECTRA`` maps config names to classes)
----------------------------------------------------------------
"power_law"         P(k) = A (k / k_p)^n
                    log P = log A + n log(k / k_p)
"power_law_cutoff"  P(k) = A (k / k_p)^n exp(-(k R)^2)
                    log P = log A + n log(k / k_p) - (k R)^2
"table"             a (k, P) table, linear interpolation in (log k, log P); beyond the
                    table, power laws continuing the first and last segments.
"band_powers"       P(k) = P_b for edges[b] <= k < edges[b + 1] (piecewise constant, bins
                    usually even in log k): a non-parametric spectrum whose hyperparameters
                    are the bin powers ``band_power_00``, ``band_power_01``, ... (unit^3, > 0).
                    Modes below the first edge take P_0, modes above the last edge the last
                    bin's power (the last bin is closed). Default edges: ``band_edges``. Its
                    optional smoothness prior is a Gaussian random walk in log P
                    (``BandPowers.log_random_walk_prior``), on top of each bin's own prior.

A = ``amplitude`` (unit^3, > 0), n = ``index`` (any finite number), k_p = ``k_pivot``
(1 / unit, > 0, a fixed convention, never sampled), R = ``cutoff_scale`` (unit, >= 0).
Each class lists the hyperparameters a sampler may treat as random in ``parameters``;
``evaluate(k, **overrides)`` / ``log_power(k, **overrides)`` take them separately
(scalars or arrays broadcasting against k), so a sampler can evaluate P for proposed
hyperparameters without building a new object. The TensorFlow density reimplements
the two analytic formulas above; these numpy versions are the reference.

Hyperparameter priors are ``core.priors`` objects (a fixed value, or one of
``FIELD_HYPERPRIOR_KINDS``).
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Mapping

import numpy as np

__all__ = [
    "PowerSpectrum",
    "PowerLaw",
    "PowerLawCutoff",
    "TabulatedPower",
    "BandPowers",
    "band_edges",
    "band_log_prior",
    "band_power_names",
    "hyperparameter_priors",
    "sampled_hyperparameter_names",
    "SPECTRA",
    "spectrum_from_config",
    "spectrum_to_json",
    "FIELD_HYPERPRIOR_KINDS",
]


def _is_real_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_k(k) -> np.ndarray:
    k = np.asarray(k, dtype=np.float64)
    if np.any(np.isnan(k)) or np.any(k < 0):
        bad = k[np.isnan(k) | (k < 0)].ravel()[0]
        raise ValueError(f"wavenumber k = {bad!r}: must be >= 0 (|k|, not a component)")
    return k


def _check_parameter(family: str, name: str, value, rule: str):
    """Validate a scalar or array hyperparameter against ``rule``; return float array."""
    arr = np.asarray(value, dtype=np.float64) if _is_real_number(value) or (
        isinstance(value, np.ndarray) and value.dtype.kind in "iuf") else None
    if arr is None:
        raise ValueError(f"{family} {name} = {value!r}: must be a number")
    ok = np.isfinite(arr)
    if rule == "positive":
        ok &= arr > 0
    elif rule == "nonnegative":
        ok &= arr >= 0
    if not np.all(ok):
        bad = arr[~ok].ravel()[0] if arr.ndim else arr
        need = {"positive": "positive and finite", "nonnegative": ">= 0 and finite",
                "finite": "finite"}[rule]
        raise ValueError(f"{family} {name} = {float(bad)!r}: must be {need}")
    return arr


class PowerSpectrum:
    """Base of the P(k) families. P in unit^3, k in 1 / unit (see module docstring).

    Subclasses set ``kind`` (the registry name), ``parameters`` (hyperparameters a
    sampler may sample) and implement ``log_power``; ``evaluate`` and calling the
    object are exp(log_power) with P(0) = 0.
    """

    kind: ClassVar[str] = ""
    parameters: ClassVar[tuple[str, ...]] = ()

    def log_power(self, k, **overrides) -> np.ndarray:
        raise NotImplementedError

    def evaluate(self, k, **overrides) -> np.ndarray:
        """P(k), float64, the shape of k broadcast with any array overrides; P(0) = 0."""
        logp = self.log_power(k, **overrides)
        with np.errstate(under="ignore"):
            return np.exp(logp)        # exp(-inf) = 0 at k = 0, silently

    def __call__(self, k) -> np.ndarray:
        return self.evaluate(k)

    def to_config(self) -> dict[str, Any]:
        """Constructor arguments as plain JSON-able values (without the kind)."""
        raise NotImplementedError

    def _merged(self, overrides: Mapping[str, Any]) -> dict[str, np.ndarray]:
        unknown = [name for name in overrides if name not in self.parameters]
        if unknown:
            raise ValueError(f"{self.kind}: unknown hyperparameter {unknown[0]!r} "
                             f"(this family has {', '.join(self.parameters) or 'none'})")
        values = {name: getattr(self, name) for name in self.parameters}
        values.update(overrides)
        return {name: _check_parameter(self.kind, name, value, self.parameter_rules[name])
                for name, value in values.items()}

    #: the rule of each hyperparameter (``_check_parameter``: positive, nonnegative, finite)
    parameter_rules: ClassVar[dict[str, str]] = {}
    #: the rule of each other number of the constructor (not sampled: k_pivot)
    fixed_rules: ClassVar[dict[str, str]] = {}

    def _check_numbers(self) -> None:
        """Every number of the constructor with a rule (``parameter_rules``, ``fixed_rules``),
        in field order: one number (ValueError naming the family, the name and the value
        otherwise), checked against its rule and stored as a float."""
        rules = {**self.parameter_rules, **self.fixed_rules}
        for name in (f.name for f in fields(self) if f.name in rules):
            value = getattr(self, name)
            if np.ndim(value) != 0:
                raise ValueError(f"{self.kind} {name} = {value!r}: must be one number")
            object.__setattr__(self, name, float(_check_parameter(self.kind, name, value, rules[name])))


def _log_k_over_pivot(k: np.ndarray, k_pivot: float) -> tuple[np.ndarray, np.ndarray]:
    """log(k / k_p) with 0 in place of -inf at k = 0, and the k > 0 mask."""
    positive = k > 0
    safe = np.where(positive, k, k_pivot)
    return np.log(safe / k_pivot), positive


@dataclass(frozen=True)
class PowerLaw(PowerSpectrum):
    """P(k) = A (k / k_p)^n, log P = log A + n log(k / k_p); P(0) = 0.

    amplitude A (unit^3, > 0), index n (finite), k_pivot k_p (1 / unit, > 0).
    """

    amplitude: float
    index: float
    k_pivot: float

    kind: ClassVar[str] = "power_law"
    parameters: ClassVar[tuple[str, ...]] = ("amplitude", "index")
    parameter_rules: ClassVar[dict[str, str]] = {"amplitude": "positive", "index": "finite"}

    fixed_rules: ClassVar[dict[str, str]] = {"k_pivot": "positive"}

    def __post_init__(self):
        self._check_numbers()

    def log_power(self, k, **overrides) -> np.ndarray:
        """log P(k); -inf at k = 0. Overrides: amplitude, index."""
        p = self._merged(overrides)
        log_kp, positive = _log_k_over_pivot(_check_k(k), self.k_pivot)
        logp = np.log(p["amplitude"]) + p["index"] * log_kp
        return np.where(positive, logp, -np.inf)

    def to_config(self) -> dict[str, Any]:
        return {"amplitude": self.amplitude, "index": self.index, "k_pivot": self.k_pivot}


@dataclass(frozen=True)
class PowerLawCutoff(PowerSpectrum):
    """P(k) = A (k / k_p)^n exp(-(k R)^2); log P = log A + n log(k / k_p) - (k R)^2.

    amplitude A (unit^3, > 0), index n (finite), k_pivot k_p (1 / unit, > 0),
    cutoff_scale R (unit, >= 0; R = 0 is the plain power law). P(0) = 0.
    """

    amplitude: float
    index: float
    k_pivot: float
    cutoff_scale: float

    kind: ClassVar[str] = "power_law_cutoff"
    parameters: ClassVar[tuple[str, ...]] = ("amplitude", "index", "cutoff_scale")
    parameter_rules: ClassVar[dict[str, str]] = {"amplitude": "positive", "index": "finite",
                                        "cutoff_scale": "nonnegative"}

    fixed_rules: ClassVar[dict[str, str]] = {"k_pivot": "positive"}

    def __post_init__(self):
        self._check_numbers()

    def log_power(self, k, **overrides) -> np.ndarray:
        """log P(k); -inf at k = 0. Overrides: amplitude, index, cutoff_scale."""
        p = self._merged(overrides)
        k = _check_k(k)
        log_kp, positive = _log_k_over_pivot(k, self.k_pivot)
        kr = k * p["cutoff_scale"]
        logp = np.log(p["amplitude"]) + p["index"] * log_kp - kr * kr
        return np.where(positive, logp, -np.inf)

    def to_config(self) -> dict[str, Any]:
        return {"amplitude": self.amplitude, "index": self.index, "k_pivot": self.k_pivot,
                "cutoff_scale": self.cutoff_scale}


class TabulatedPower(PowerSpectrum):
    """P(k) from a table of (k, P) rows, interpolated linearly in (log k, log P).

    Inside [k_1, k_m] the interpolant passes exactly through the nodes. Outside, it
    extrapolates as power laws with the slopes of the first and last segments:
    log P = log P_1 + s_first (log k - log k_1) below k_1, and likewise above k_m
    (documented choice: a table that stops short of the grid's k range still gives a
    finite, smooth spectrum; check the range if the ends matter). P(0) = 0.

    Validation: at least 2 rows, k and P finite, k > 0 strictly increasing, P > 0.
    Errors name ``source`` (the file, if any) and the offending row (``_rows``: how to
    name each row, e.g. its line in the file). The table has no sampled hyperparameters
    (``parameters`` is empty). Table files are read by ``core.io.load_power_table``.
    """

    kind: ClassVar[str] = "table"
    parameters: ClassVar[tuple[str, ...]] = ()

    def __init__(self, k, p, source: str | None = None, _rows: list[str] | None = None):
        self.source = None if source is None else str(source)
        where = f"power table {self.source!r}" if self.source else "power table"
        k_arr = np.asarray(k, dtype=np.float64)
        p_arr = np.asarray(p, dtype=np.float64)
        if k_arr.ndim != 1 or p_arr.ndim != 1 or k_arr.shape != p_arr.shape:
            raise ValueError(f"{where}: k and P must be 1-D of equal length, got shapes "
                             f"{k_arr.shape} and {p_arr.shape}")
        rows = _rows or [f"row {i + 1}" for i in range(k_arr.size)]
        if k_arr.size < 2:
            raise ValueError(f"{where}: needs at least 2 rows (k, P), got {k_arr.size}")
        for i in range(k_arr.size):
            if not (math.isfinite(k_arr[i]) and math.isfinite(p_arr[i])):
                raise ValueError(f"{where}, {rows[i]}: k = {k_arr[i]!r}, P = {p_arr[i]!r} "
                                 "must be finite")
            if k_arr[i] <= 0:
                raise ValueError(f"{where}, {rows[i]}: k = {k_arr[i]!r} must be positive")
            if p_arr[i] <= 0:
                raise ValueError(f"{where}, {rows[i]}: P = {p_arr[i]!r} must be positive")
            if i > 0 and k_arr[i] <= k_arr[i - 1]:
                raise ValueError(f"{where}, {rows[i]}: k = {k_arr[i]!r} is not greater than "
                                 f"the previous k = {k_arr[i - 1]!r} (k must increase)")
        self.k = k_arr
        self.p = p_arr
        self.k.setflags(write=False)
        self.p.setflags(write=False)
        self._log_k = np.log(k_arr)
        self._log_p = np.log(p_arr)
        self._slope_first = (self._log_p[1] - self._log_p[0]) / (self._log_k[1] - self._log_k[0])
        self._slope_last = ((self._log_p[-1] - self._log_p[-2])
                            / (self._log_k[-1] - self._log_k[-2]))

    def log_power(self, k, **overrides) -> np.ndarray:
        """log P(k) (log-log linear, power-law extrapolation); -inf at k = 0."""
        if overrides:
            raise ValueError(f"table: unknown hyperparameter {next(iter(overrides))!r} "
                             "(a table has none)")
        k = _check_k(k)
        positive = k > 0
        log_k = np.log(np.where(positive, k, 1.0))
        logp = np.interp(log_k, self._log_k, self._log_p)
        below = log_k < self._log_k[0]
        above = log_k > self._log_k[-1]
        logp = np.where(below, self._log_p[0] + self._slope_first * (log_k - self._log_k[0]),
                        logp)
        logp = np.where(above, self._log_p[-1] + self._slope_last * (log_k - self._log_k[-1]),
                        logp)
        return np.where(positive, logp, -np.inf)

    def to_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"k": self.k.tolist(), "p": self.p.tolist()}
        if self.source:
            config["source"] = self.source
        return config

    def __repr__(self) -> str:
        where = f", source={self.source!r}" if self.source else ""
        return (f"TabulatedPower({self.k.size} rows, k in [{self.k[0]:g}, {self.k[-1]:g}]"
                f"{where})")

    def __eq__(self, other) -> bool:
        return (isinstance(other, TabulatedPower) and np.array_equal(self.k, other.k)
                and np.array_equal(self.p, other.p))

    __hash__ = None


def band_power_names(n_bins: int) -> list[str]:
    """The hyperparameter names of ``n_bins`` band powers: band_power_00, band_power_01, ...
    (zero-padded to at least two digits, so that they sort in bin order)."""
    width = max(2, len(str(n_bins - 1)))
    return [f"band_power_{b:0{width}d}" for b in range(n_bins)]


def band_edges(k, n_bins: int) -> np.ndarray:
    """Default band-power edges for the wavenumbers ``k`` of a grid (any shape; k = 0 ignored).

    ``n_bins`` bins as even in log k as the grid's discrete |k| allow, none empty: the edges
    lie halfway (in log k) between consecutive distinct |k| of the grid, the outer ones half a
    step beyond the smallest and the largest. Chosen from the lowest bin up: each next edge is
    the admissible midpoint closest to an even split (in log k) of what is left, leaving at
    least one distinct |k| for every bin still to place. ValueError if the grid has fewer
    distinct nonzero |k| than ``n_bins``.
    """
    if not isinstance(n_bins, numbers.Integral) or isinstance(n_bins, bool) or n_bins < 1:
        raise ValueError(f"band powers: n_bins = {n_bins!r} must be a positive integer")
    k = np.asarray(k, dtype=np.float64).ravel()
    log_k = np.unique(np.round(np.log(k[k > 0]), 9))
    if log_k.size < n_bins:
        raise ValueError(f"band powers: n_bins = {n_bins} but the grid has only {log_k.size} "
                         "distinct |k|: use at most that many bins")
    if log_k.size == 1:
        return np.exp(log_k[0] + np.array([-0.05, 0.05]))
    cuts = 0.5 * (log_k[1:] + log_k[:-1])           # cut j: between distinct |k| j and j + 1
    low = log_k[0] - 0.5 * (log_k[1] - log_k[0])
    high = log_k[-1] + 0.5 * (log_k[-1] - log_k[-2])
    edges, first = [low], 0                          # first: the lowest |k| not yet in a bin
    for b in range(1, n_bins):
        target = edges[-1] + (high - edges[-1]) / (n_bins - b + 1)
        admissible = np.arange(first, log_k.size - 1 - (n_bins - b) + 1)
        j = admissible[np.argmin(np.abs(cuts[admissible] - target))]
        edges.append(cuts[j])
        first = j + 1
    edges.append(high)
    return np.exp(np.array(edges))


@dataclass(frozen=True)
class BandPowers(PowerSpectrum):
    """P(k) piecewise constant over bins in k: P(k) = P_b for edges[b] <= k < edges[b + 1].

    edges: increasing, > 0, length n_bins + 1 (unit^-1); powers: the n_bins values P_b
    (unit^3, > 0); modes below edges[0] take P_0 and modes from edges[-1] up the last
    power (documented choice: every mode of the grid has a bin). P(0) = 0.
    random_walk_scale: None (independent bins) or tau > 0, the prior sd of
    log P_{b+1} - log P_b: the smoothness prior (``log_random_walk_prior``). Hyperparameters:
    ``band_power_names(n_bins)``, each overriding one P_b.
    """

    edges: tuple
    powers: tuple
    random_walk_scale: float | None = None

    kind: ClassVar[str] = "band_powers"

    def __post_init__(self):
        edges = np.asarray(self.edges, dtype=np.float64)
        powers = np.asarray(self.powers, dtype=np.float64)
        if edges.ndim != 1 or edges.size < 2:
            raise ValueError(f"band_powers edges = {self.edges!r}: need at least 2 values")
        if not np.all(np.isfinite(edges)) or np.any(edges <= 0) or np.any(np.diff(edges) <= 0):
            raise ValueError(f"band_powers edges = {edges.tolist()!r}: must be positive, finite "
                             "and strictly increasing")
        if powers.shape != (edges.size - 1,):
            raise ValueError(f"band_powers: {powers.size} powers for {edges.size - 1} bins "
                             f"({edges.size} edges): give one power per bin")
        if not np.all(np.isfinite(powers) & (powers > 0)):
            raise ValueError(f"band_powers powers = {powers.tolist()!r}: must be positive and finite")
        scale = self.random_walk_scale
        if scale is not None and not (_is_real_number(scale) and math.isfinite(scale) and scale > 0):
            raise ValueError(f"band_powers random_walk_scale = {scale!r}: must be a positive number "
                             "(or None for independent bins)")
        object.__setattr__(self, "edges", tuple(edges.tolist()))
        object.__setattr__(self, "powers", tuple(powers.tolist()))
        object.__setattr__(self, "random_walk_scale", None if scale is None else float(scale))
        names = tuple(band_power_names(powers.size))
        object.__setattr__(self, "parameters", names)          # per instance: one per bin
        object.__setattr__(self, "parameter_rules", dict.fromkeys(names, "positive"))

    @property
    def n_bins(self) -> int:
        return len(self.powers)

    def _merged(self, overrides):
        unknown = [name for name in overrides if name not in self.parameters]
        if unknown:
            raise ValueError(f"band_powers: unknown hyperparameter {unknown[0]!r} (this spectrum "
                             f"has {self.parameters[0]} .. {self.parameters[-1]})")
        values = dict(zip(self.parameters, self.powers))
        values.update(overrides)
        return {name: _check_parameter(self.kind, name, value, "positive") for name, value in values.items()}

    def bin_index(self, k) -> np.ndarray:
        """The bin of each wavenumber (int64, the shape of k): 0 .. n_bins - 1, -1 at k = 0."""
        k = _check_k(k)
        inner = np.asarray(self.edges[1:-1])
        return np.where(k > 0, np.searchsorted(inner, k, side="right"), -1)

    def log_power(self, k, **overrides) -> np.ndarray:
        """log P(k); -inf at k = 0. Overrides: band_power_00, ... (any subset)."""
        p = self._merged(overrides)
        index = self.bin_index(k)
        logp = np.full(np.broadcast_shapes(index.shape, *[np.shape(v) for v in p.values()]), -np.inf)
        for b, name in enumerate(self.parameters):       # overrides broadcast against k
            logp = np.where(index == b, np.log(p[name]), logp)
        return logp

    def log_random_walk_prior(self, log_powers) -> np.ndarray:
        """sum_b log Normal(log P_{b+1} - log P_b; 0, tau) over the last axis of ``log_powers``
        (shape (..., n_bins)); 0 without a random walk. Normalised per step, so with each bin's
        own lognormal prior the joint prior is a proper Gaussian in log P."""
        log_powers = np.asarray(log_powers, dtype=np.float64)
        if self.random_walk_scale is None or log_powers.shape[-1] < 2:
            return np.zeros(log_powers.shape[:-1])
        tau = self.random_walk_scale
        step = np.diff(log_powers, axis=-1) / tau
        return np.sum(-0.5 * step * step - math.log(tau) - 0.5 * math.log(2.0 * math.pi), axis=-1)

    def to_config(self) -> dict[str, Any]:
        return {"edges": list(self.edges), "powers": list(self.powers),
                "random_walk_scale": self.random_walk_scale}


def band_log_prior(n_bins: int, loc: float, scale: float,
                   random_walk_scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(mean, covariance) of log P_b, the joint prior of band powers: each bin lognormal(loc,
    scale), times the random walk's N(log P_{b+1} - log P_b; 0, tau) when tau is given
    (``BandPowers.log_random_walk_prior``): a Gaussian in log P of precision
    I / scale^2 + D^T D / tau^2 (D the differences), mean loc in every bin (D 1 = 0)."""
    precision = np.eye(n_bins) / scale ** 2
    if random_walk_scale is not None and n_bins > 1:
        d = np.diff(np.eye(n_bins), axis=0)
        precision += d.T @ d / random_walk_scale ** 2
    return np.full(n_bins, float(loc)), np.linalg.inv(precision)


SPECTRA: dict[str, type[PowerSpectrum]] = {
    "power_law": PowerLaw,
    "power_law_cutoff": PowerLawCutoff,
    "table": TabulatedPower,
    "band_powers": BandPowers,
}


def _band_count(prior) -> int:
    return prior.n_bins if prior.edges is None else len(prior.edges) - 1


def hyperparameter_names(kind: str, n_bins: int | None = None) -> list[str]:
    """The hyperparameters of a config's P(k) family (``[prior] kind``); none for a table;
    for band powers one per bin (``n_bins`` needed)."""
    if kind == "table":
        return []
    if kind == "band_powers":
        if n_bins is None:
            raise ValueError("band_powers: the number of bins is needed for the names")
        return band_power_names(n_bins)
    return ["amplitude", "index"] + (["cutoff_scale"] if kind == "power_law_cutoff" else [])


def hyperparameter_priors(prior) -> dict:
    """name -> ``core.priors`` object (``Fixed`` for a fixed one) of every hyperparameter of a
    field config's ``[prior]`` section: the section's own value per name; for band powers
    every bin gets ``prior.band_power``. The engine's model builds its hyperparameters here."""
    from core.priors import parse_prior

    if prior.kind == "band_powers":
        return {name: parse_prior("prior.band_power", prior.band_power)
                for name in band_power_names(_band_count(prior))}
    return {name: parse_prior(f"prior.{name}", getattr(prior, name))
            for name in hyperparameter_names(prior.kind)}


def sampled_hyperparameter_names(prior) -> list[str]:
    """The hyperparameters a field config's ``[prior]`` section samples (``hyperparameter_priors``
    not fixed), in their order."""
    return [name for name, value in hyperparameter_priors(prior).items() if not value.is_fixed]


def prior_spectrum(prior, table: "TabulatedPower | None" = None,
                   values: Mapping[str, float] | None = None, grid=None) -> PowerSpectrum:
    """The P(k) of a field config's ``[prior]`` section (``core.config.PriorSection``).

    For ``prior.kind == "table"`` the caller gives the table read from ``prior.table``
    (``core.io.load_prior_table(config)``: this numpy module reads no files). A family takes
    ``values[name]`` for each hyperparameter given there and the section's number for the
    others; a sampled hyperparameter must be given (ValueError otherwise). Band powers
    without ``prior.edges`` need the ``grid`` (``core.field.grid.Grid``) for their default
    edges (``band_edges``). The engine's model, the exact posterior and the P(k) panel all
    build their spectrum here.
    """
    if prior.kind == "table":
        if not isinstance(table, TabulatedPower):
            raise ValueError("prior.kind = 'table': the table read from prior.table must be "
                             "given")
        return table
    if prior.kind == "band_powers":
        if prior.edges is not None:
            edges = np.asarray(prior.edges, dtype=np.float64)
        elif grid is None:
            raise ValueError("prior.kind = 'band_powers' without prior.edges: the grid is needed "
                             "for the default edges")
        else:
            edges = band_edges(grid.k_magnitude_full(), prior.n_bins)
        values = dict(values or {})
        powers = []
        for name in band_power_names(edges.size - 1):
            value = values.get(name, prior.band_power)
            if not isinstance(value, numbers.Real):
                raise ValueError(f"{name} (prior.band_power) is sampled: its value must be given")
            powers.append(float(value))
        return BandPowers(edges=tuple(edges), powers=tuple(powers),
                          random_walk_scale=prior.random_walk_scale)
    values = dict(values or {})
    params: dict[str, Any] = {"k_pivot": prior.k_pivot}
    for name in hyperparameter_names(prior.kind):
        value = values.get(name, getattr(prior, name))
        if not isinstance(value, numbers.Real):
            raise ValueError(f"prior.{name} is sampled: its value must be given")
        params[name] = float(value)
    return spectrum_from_config(prior.kind, params)


def spectrum_from_config(kind: str, params: Mapping[str, Any],
                         source: str | None = None) -> PowerSpectrum:
    """Build a spectrum from a registry name and plain parameters.

    ``params`` holds the constructor arguments as numbers (the inverse of
    ``to_config``); for "table" ``k`` and ``p`` lists (and optionally ``source``; a
    table file is read by ``core.io.load_power_table``). ``source`` prefixes error
    messages (e.g. the config file). Unknown kinds or keys raise ``ValueError`` naming
    them.
    """
    prefix = f"{source}: " if source else ""
    if kind not in SPECTRA:
        raise ValueError(f"{prefix}unknown power spectrum kind {kind!r} "
                         f"(known: {', '.join(SPECTRA)})")
    if not isinstance(params, Mapping):
        raise ValueError(f"{prefix}{kind} parameters must be a table of name = value, "
                         f"got {params!r}")
    if kind == "table":
        allowed = {"k", "p", "source"}
        unknown = [key for key in params if key not in allowed]
        if unknown:
            raise ValueError(f"{prefix}table: unknown key {unknown[0]!r} "
                             "(allowed: k, p, source)")
        if "k" not in params or "p" not in params:
            raise ValueError(f"{prefix}table: needs both 'k' and 'p'")
        return TabulatedPower(params["k"], params["p"], source=params.get("source"))
    cls = SPECTRA[kind]
    names = [f.name for f in fields(cls)]
    unknown = [key for key in params if key not in names]
    if unknown:
        raise ValueError(f"{prefix}{kind}: unknown key {unknown[0]!r} "
                         f"(allowed: {', '.join(names)})")
    missing = [name for name in names if name not in params]
    if missing:
        raise ValueError(f"{prefix}{kind}: missing key {missing[0]!r}")
    try:
        return cls(**params)
    except ValueError as exc:
        raise ValueError(f"{prefix}{exc}") from None


# ---------------------------------------------------------------------------
# Hyperparameter priors
# ---------------------------------------------------------------------------

#: The ``core.priors`` kinds a P(k) hyperparameter may be sampled from. The engine's
#: field density maps each through its unconstrained coordinate; halfnormal has never
#: been offered for P(k) (the amplitude's lognormal covers a positive scale).
FIELD_HYPERPRIOR_KINDS = ("normal", "lognormal", "uniform")


def spectrum_to_json(spectrum: PowerSpectrum) -> tuple[str, str]:
    """(kind, JSON of ``to_config()``) for storing a spectrum in a file."""
    return spectrum.kind, json.dumps(spectrum.to_config())
