"""The run configuration: one TOML file describes a run (GUI and CLI share it).

Pure Python + numpy: the GUI process imports this module, so it never imports
TensorFlow or Qt (the integral model's prior registry, which needs scipy, is imported
only when an integral config is validated).

Reading uses the standard library's ``tomllib``; writing uses ``to_toml``, a small
serializer for the subset a config needs (tables, nested inline tables, strings,
ints, floats written with ``repr`` so they round-trip exactly, bools, arrays).

Layout (field model; every key but ``data.path`` has a default, see ``default_config``)::

    [model]       kind = "field" | "integral"
    [data]        path (relative to the config file; .npy .npz .h5 .hdf5 .fits), key,
                  noise_sigma | noise_map (gaussian only), mask (optional)
    [grid]        box_size (one number or three), unit
    [prior]       kind = "power_law" | "power_law_cutoff" | "table"; k_pivot (fixed),
                  amplitude, index, cutoff_scale (power_law_cutoff only): a number is
                  fixed, a table such as {dist = "normal", loc = -2.0, scale = 0.5} is
                  sampled; kind "table" takes only ``table = "pk.txt"``
    [likelihood]  kind = "gaussian" | "poisson_lognormal", smoothing_scale (0 = none),
                  field_mean, mean_count (poisson_lognormal only)
    [field]       parameterisation = "whitened" | "white_noise" | "raw_modes",
                  dtype = "float32" | "float64"
    [sampler]     algorithm, num_warmup, num_samples, num_leapfrog_steps, step_size,
                  target_accept, adapt_mass_matrix, chains, seed, thin, chunk_size

Integral model: ``[model] kind = "integral"``, ``[data] path`` (.csv .txt .dat),
``[integral] refine``, and ``[prior]`` with A, c, sigma (number = fixed, or a prior
table with dist normal | lognormal | halfnormal | uniform). ``data.noise_sigma = s``
is accepted as a shorthand for ``prior.sigma = s`` and is stored (and written back)
as the latter, so sigma lives in one place.

Every problem raises ``ConfigError`` (a ``ValueError``) whose message names the key
path (``sampler.num_warmup: ...``) or the table (``[sampler] unknown key ...``), and,
for ``load_config``, the file. Data files are not opened here.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import tomllib
from dataclasses import dataclass, fields
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from core.observations import LIKELIHOOD_KINDS
from core.power_spectrum import SPECTRA, HyperPrior, spectrum_from_config

__all__ = [
    "ConfigError",
    "Distribution",
    "ModelSection",
    "DataSection",
    "GridSection",
    "PriorSection",
    "LikelihoodSection",
    "FieldSection",
    "SamplerSection",
    "IntegralSection",
    "RunConfig",
    "MODEL_KINDS",
    "PARAMETERISATIONS",
    "DTYPES",
    "ALGORITHMS",
    "FIELD_DATA_EXTENSIONS",
    "INTEGRAL_DATA_EXTENSIONS",
    "load_config",
    "parse_config",
    "config_from_dict",
    "config_to_dict",
    "dump_config",
    "default_config",
    "to_toml",
]

MODEL_KINDS = ("field", "integral")
# Mirrors core.field_model.PARAMETERISATIONS (that module imports TensorFlow; a test
# checks the two agree).
PARAMETERISATIONS = ("whitened", "white_noise", "raw_modes")
DTYPES = ("float32", "float64")
ALGORITHMS = ("hmc", "nuts")
FIELD_DATA_EXTENSIONS = (".npy", ".npz", ".h5", ".hdf5", ".fits", ".fit", ".fts")
INTEGRAL_DATA_EXTENSIONS = (".csv", ".txt", ".dat")
INTEGRAL_PARAMETERS = ("A", "c", "sigma")   # core.integral_model.PARAMETERS

_INT64_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A config that cannot be read or is invalid; the message names file/key/value."""


# --------------------------------------------------------------------------- sections


@dataclass(frozen=True)
class Distribution:
    """A sampled parameter's prior: ``dist`` and the parameters it takes.

    Field hyperparameters: normal(loc, scale), lognormal(loc, scale), uniform(low, high)
    (``core.power_spectrum.DISTRIBUTIONS``); integral parameters also halfnormal(scale)
    (``core.integral_model.PRIOR_KINDS``). Unused parameters are None.
    """

    dist: str
    loc: float | None = None
    scale: float | None = None
    low: float | None = None
    high: float | None = None

    def to_config(self) -> dict[str, Any]:
        """{"dist": ..., then the given parameters}: the form the model modules take."""
        out: dict[str, Any] = {"dist": self.dist}
        for name in ("loc", "scale", "low", "high"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


PriorValue = float | Distribution   # a number = fixed, a Distribution = sampled


def _prior_to_config(value: PriorValue):
    return value.to_config() if isinstance(value, Distribution) else value


@dataclass(frozen=True)
class ModelSection:
    kind: str = "field"


@dataclass(frozen=True)
class DataSection:
    """Where the data are. ``path`` is relative to the config file's directory.

    Field: ``key`` names the array in an .npz / dataset in an .h5; the gaussian noise is
    ``noise_sigma`` (a number) or ``noise_map`` (a key in the same file, or a path),
    exactly one of them (both None for poisson_lognormal); ``mask`` (key or path,
    true = observed) is optional. Integral: only ``path`` is used.
    """

    path: str
    key: str = "data"
    noise_sigma: float | None = 1.0
    noise_map: str | None = None
    mask: str | None = None


@dataclass(frozen=True)
class GridSection:
    box_size: tuple[float, float, float] = (100.0, 100.0, 100.0)
    unit: str = ""


@dataclass(frozen=True)
class PriorSection:
    """Field: the P(k) family and its hyperparameters; integral: A, c, sigma.

    Entries that do not apply to the kind are None (``cutoff_scale`` outside
    power_law_cutoff; amplitude, index, k_pivot for "table"; A, c, sigma for the field).
    """

    kind: str | None = "power_law"
    k_pivot: float | None = 0.1
    amplitude: PriorValue | None = 1.0
    index: PriorValue | None = Distribution("normal", loc=-2.0, scale=0.5)
    cutoff_scale: PriorValue | None = None
    table: str | None = None
    A: PriorValue | None = None
    c: PriorValue | None = None
    sigma: PriorValue | None = None


@dataclass(frozen=True)
class LikelihoodSection:
    kind: str = "gaussian"
    smoothing_scale: float = 0.0    # R of the beam exp(-(k R)^2 / 2); 0 = no beam
    field_mean: float = 0.0
    mean_count: float | None = None  # poisson_lognormal only


@dataclass(frozen=True)
class FieldSection:
    parameterisation: str = "whitened"
    dtype: str = "float32"


@dataclass(frozen=True)
class SamplerSection:
    algorithm: str = "hmc"
    num_warmup: int = 200
    num_samples: int = 500
    num_leapfrog_steps: int = 10
    step_size: float = 0.1            # initial; adapted during warmup
    target_accept: float = 0.75
    adapt_mass_matrix: bool = False
    chains: int = 2
    seed: int = 42
    thin: int = 5
    chunk_size: int = 25


@dataclass(frozen=True)
class IntegralSection:
    refine: int = 8


@dataclass(frozen=True)
class RunConfig:
    """A validated run. Sections that do not apply to ``model.kind`` are None
    (grid, likelihood and field for the integral model; integral for the field model).
    ``base_dir`` is the config file's directory (absolute); see ``resolve_path``."""

    model: ModelSection
    data: DataSection
    prior: PriorSection
    sampler: SamplerSection
    grid: GridSection | None = None
    likelihood: LikelihoodSection | None = None
    field: FieldSection | None = None
    integral: IntegralSection | None = None
    base_dir: Path = dataclass_field(default_factory=lambda: Path(os.path.abspath(".")))

    def resolve_path(self, p) -> Path:
        """``p`` (str or path) relative to the config file's directory; absolute and
        ``~`` paths are kept as they are."""
        path = Path(os.path.expanduser(os.fspath(p)))
        return path if path.is_absolute() else self.base_dir / path

    @property
    def data_path(self) -> Path:
        return self.resolve_path(self.data.path)


# --------------------------------------------------------------------------- value checks


def _show(value) -> str:
    """A value as the user wrote it (TOML spelling), shortened, with its type."""
    try:
        text = _toml_value(value)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "a table"}.get(type(value))
    return f"{text} ({kind})" if kind else text


def _fail(key: str, problem: str, value=None, *, show=True):
    raise ConfigError(f"{key}: {problem}" + (f", got {_show(value)}" if show else ""))


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int(key: str, value, minimum: int) -> int:
    what = ("a non-negative integer" if minimum == 0 else
            "a positive integer" if minimum == 1 else f"an integer >= {minimum}")
    if not _is_int(value) or not minimum <= value <= _INT64_MAX:
        _fail(key, f"must be {what}", value)
    return int(value)


def _float(key: str, value, rule: str = "finite") -> float:
    """rule: 'finite', 'positive' (> 0), 'nonnegative' (>= 0), 'open_unit' (0 < x < 1)."""
    need = {"finite": "a finite number", "positive": "a positive finite number",
            "nonnegative": "a finite number >= 0",
            "open_unit": "a number strictly between 0 and 1"}[rule]
    if not _is_number(value):
        _fail(key, f"must be {need}", value)
    x = float(value) if abs(value) < 1e308 or isinstance(value, float) else math.inf
    ok = math.isfinite(x) and {"finite": True, "positive": x > 0, "nonnegative": x >= 0,
                               "open_unit": 0 < x < 1}[rule]
    if not ok:
        _fail(key, f"must be {need}", value)
    return x


def _bool(key: str, value) -> bool:
    if not isinstance(value, bool):
        _fail(key, "must be true or false", value)
    return value


def _str(key: str, value, *, nonempty: bool = False) -> str:
    if not isinstance(value, str):
        _fail(key, "must be a string", value)
    if nonempty and not value.strip():
        _fail(key, "must not be empty", value)
    return value


def _choice(key: str, value, choices) -> str:
    if not isinstance(value, str) or value not in choices:
        hint = ""
        if isinstance(value, str):
            close = difflib.get_close_matches(value, choices, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{key}: must be one of {', '.join(map(repr, choices))}, "
                          f"got {_show(value)}{hint}")
    return value


def _table(name: str, raw: Mapping, *, required: bool = False) -> dict:
    if name not in raw:
        if required:
            raise ConfigError(f"missing table [{name}]")
        return {}
    value = raw[name]
    if not isinstance(value, dict):
        _fail(name, f"must be a table [{name}]", value)
    return value


def _check_keys(table: str, given: Mapping, allowed, known_elsewhere: Mapping[str, str]):
    """Reject keys outside ``allowed``; ``known_elsewhere`` maps keys that exist but do
    not apply here to the reason."""
    for key in given:
        if key in allowed:
            continue
        if key in known_elsewhere:
            raise ConfigError(f"[{table}] key {key!r} {known_elsewhere[key]}")
        close = difflib.get_close_matches(key, list(allowed), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else \
            f" (allowed: {', '.join(allowed) or 'none'})"
        raise ConfigError(f"[{table}] unknown key {key!r}{hint}")


def _data_path(key: str, value, extensions) -> str:
    path = _str(key, value, nonempty=True)
    suffix = os.path.splitext(path)[1].lower()
    if not path.lower().endswith(tuple(extensions)):   # endswith: a file named ".csv" too
        raise ConfigError(f"{key}: {path!r} has extension {suffix or '(none)'!r}; accepted: "
                          f"{', '.join(extensions)}")
    return path


# --------------------------------------------------------------------------- sections


_TABLES = ("model", "data", "grid", "prior", "likelihood", "field", "sampler", "integral")
_FIELD_ONLY = ("grid", "likelihood", "field")
_INTEGRAL_ONLY = ("integral",)


def _parse_model(raw) -> ModelSection:
    t = _table("model", raw)
    _check_keys("model", t, ("kind",), {})
    return ModelSection(kind=_choice("model.kind", t.get("kind", "field"), MODEL_KINDS))


def _parse_sampler(raw) -> SamplerSection:
    t = _table("sampler", raw)
    names = [f.name for f in fields(SamplerSection)]
    _check_keys("sampler", t, names, {})
    d = SamplerSection()
    get = lambda name: t.get(name, getattr(d, name))   # noqa: E731
    return SamplerSection(
        algorithm=_choice("sampler.algorithm", get("algorithm"), ALGORITHMS),
        num_warmup=_int("sampler.num_warmup", get("num_warmup"), 0),
        num_samples=_int("sampler.num_samples", get("num_samples"), 1),
        num_leapfrog_steps=_int("sampler.num_leapfrog_steps", get("num_leapfrog_steps"), 1),
        step_size=_float("sampler.step_size", get("step_size"), "positive"),
        target_accept=_float("sampler.target_accept", get("target_accept"), "open_unit"),
        adapt_mass_matrix=_bool("sampler.adapt_mass_matrix", get("adapt_mass_matrix")),
        chains=_int("sampler.chains", get("chains"), 1),
        seed=_int("sampler.seed", get("seed"), 0),
        thin=_int("sampler.thin", get("thin"), 1),
        chunk_size=_int("sampler.chunk_size", get("chunk_size"), 1),
    )


def _parse_grid(raw) -> GridSection:
    t = _table("grid", raw)
    _check_keys("grid", t, ("box_size", "unit"), {})
    box = t.get("box_size", 100.0)
    if isinstance(box, list):
        if len(box) != 3:
            _fail("grid.box_size", "must be one number or a list of three", box)
        sizes = tuple(_float(f"grid.box_size[{i}]", b, "positive") for i, b in enumerate(box))
    else:
        if not _is_number(box):
            _fail("grid.box_size", "must be one number or a list of three", box)
        sizes = (_float("grid.box_size", box, "positive"),) * 3
    return GridSection(box_size=sizes, unit=_str("grid.unit", t.get("unit", "")))


def _parse_field(raw) -> FieldSection:
    t = _table("field", raw)
    _check_keys("field", t, ("parameterisation", "dtype"), {})
    return FieldSection(
        parameterisation=_choice("field.parameterisation",
                                 t.get("parameterisation", "whitened"), PARAMETERISATIONS),
        dtype=_choice("field.dtype", t.get("dtype", "float32"), DTYPES))


def _parse_likelihood(raw) -> LikelihoodSection:
    t = _table("likelihood", raw)
    kind = _choice("likelihood.kind", t.get("kind", "gaussian"), LIKELIHOOD_KINDS)
    allowed = ["kind", "smoothing_scale", "field_mean"]
    elsewhere = {}
    if kind == "poisson_lognormal":
        allowed.append("mean_count")
    else:
        elsewhere["mean_count"] = "applies only to likelihood.kind = 'poisson_lognormal'"
    _check_keys("likelihood", t, allowed, elsewhere)
    return LikelihoodSection(
        kind=kind,
        smoothing_scale=_float("likelihood.smoothing_scale", t.get("smoothing_scale", 0.0),
                               "nonnegative"),
        field_mean=_float("likelihood.field_mean", t.get("field_mean", 0.0)),
        mean_count=(_float("likelihood.mean_count", t.get("mean_count", 1.0), "positive")
                    if kind == "poisson_lognormal" else None))


def _parse_data(raw, model_kind: str, likelihood_kind: str | None) -> DataSection:
    t = _table("data", raw)
    if model_kind == "integral":
        _check_keys("data", t, ("path", "noise_sigma"),
                    {k: "applies only to the field model" for k in ("key", "noise_map", "mask")})
    else:
        allowed = ["path", "key", "mask"]
        elsewhere = {}
        if likelihood_kind == "poisson_lognormal":
            for k in ("noise_sigma", "noise_map"):
                elsewhere[k] = ("does not apply to likelihood.kind = 'poisson_lognormal' "
                                "(counts carry their own noise)")
        else:
            allowed += ["noise_sigma", "noise_map"]
        _check_keys("data", t, allowed, elsewhere)
    if "path" not in t:
        raise ConfigError("data.path: missing (the data file, relative to the config file)")
    extensions = INTEGRAL_DATA_EXTENSIONS if model_kind == "integral" else FIELD_DATA_EXTENSIONS
    path = _data_path("data.path", t["path"], extensions)
    if model_kind == "integral":
        # noise_sigma is moved to prior.sigma by _parse_integral_prior.
        return DataSection(path=path, noise_sigma=None)
    key = _str("data.key", t.get("key", "data"), nonempty=True)
    mask = _str("data.mask", t["mask"], nonempty=True) if "mask" in t else None
    noise_sigma = noise_map = None
    if likelihood_kind != "poisson_lognormal":
        if "noise_sigma" in t and "noise_map" in t:
            raise ConfigError("data.noise_map: give either noise_sigma or noise_map, not both")
        if "noise_map" in t:
            noise_map = _str("data.noise_map", t["noise_map"], nonempty=True)
        else:
            noise_sigma = _float("data.noise_sigma", t.get("noise_sigma", 1.0), "positive")
    return DataSection(path=path, key=key, noise_sigma=noise_sigma, noise_map=noise_map,
                       mask=mask)


def _distribution(value: Mapping) -> Distribution:
    return Distribution(**{k: (v if k == "dist" else float(v)) for k, v in value.items()})


# Placeholders used while checking one fixed P(k) hyperparameter at a time with the
# spectrum's own validation (spectrum_from_config); all are valid values.
_PLACEHOLDERS = {"amplitude": 1.0, "index": 0.0, "k_pivot": 1.0, "cutoff_scale": 0.0}


def _parse_field_prior(raw) -> PriorSection:
    t = _table("prior", raw)
    kind = _choice("prior.kind", t.get("kind", "power_law"), tuple(SPECTRA))
    integral_keys = {k: "applies only to the integral model" for k in INTEGRAL_PARAMETERS}
    if kind == "table":
        _check_keys("prior", t, ("kind", "table"), {
            **integral_keys,
            **{k: "does not apply to prior.kind = 'table' (a table has no hyperparameters)"
               for k in ("k_pivot", "amplitude", "index", "cutoff_scale")}})
        if "table" not in t:
            raise ConfigError("prior.table: missing; prior.kind = 'table' needs "
                              "table = \"pk.txt\" (a file of k, P rows)")
        return PriorSection(kind=kind, k_pivot=None, amplitude=None, index=None,
                            table=_str("prior.table", t["table"], nonempty=True))
    names = [f.name for f in fields(SPECTRA[kind])]     # amplitude, index, k_pivot[, cutoff]
    elsewhere = {**integral_keys,
                 "table": "applies only to prior.kind = 'table'",
                 "cutoff_scale": "applies only to prior.kind = 'power_law_cutoff'"}
    _check_keys("prior", t, ["kind"] + names, elsewhere)
    defaults = {"k_pivot": 0.1, "amplitude": 1.0,
                "index": {"dist": "normal", "loc": -2.0, "scale": 0.5}, "cutoff_scale": 0.0}
    values: dict[str, PriorValue] = {}
    for name in names:
        value = t.get(name, defaults[name])
        key = f"prior.{name}"
        if name not in SPECTRA[kind].parameters:
            if not _is_number(value):
                _fail(key, "must be a number (a fixed convention, never sampled)", value)
        try:
            prior = HyperPrior.from_config(value, name=name)
        except ValueError as exc:
            raise ConfigError(f"{key}: {exc}") from None
        except TypeError as exc:       # e.g. an unhashable dist reaching a dict lookup
            raise ConfigError(f"{key}: {exc}") from None
        if prior.is_fixed:
            params = dict(_PLACEHOLDERS)
            params = {n: params[n] for n in names}
            params[name] = prior.value
            try:
                spectrum_from_config(kind, params)
            except ValueError as exc:
                raise ConfigError(f"{key}: {exc}") from None
            values[name] = prior.value
        else:
            values[name] = _distribution(prior.to_config())
    return PriorSection(kind=kind, k_pivot=values["k_pivot"], amplitude=values["amplitude"],
                        index=values["index"], cutoff_scale=values.get("cutoff_scale"))


_INTEGRAL_DEFAULTS = {"A": {"dist": "normal", "loc": 0.0, "scale": 1.0},
                      "c": {"dist": "normal", "loc": 0.0, "scale": 10.0},
                      "sigma": {"dist": "halfnormal", "scale": 1.0}}
_PRIORS_PREFIX = re.compile(r"^priors\['(\w+)'\]: ")


def _parse_integral(raw, data_raw: Mapping) -> tuple[PriorSection, IntegralSection]:
    from core import integral_model     # imports scipy; only integral configs need it

    t = _table("integral", raw)
    _check_keys("integral", t, ("refine",), {})
    refine = _int("integral.refine", t.get("refine", 8), 1)

    p = _table("prior", raw)
    _check_keys("prior", p, INTEGRAL_PARAMETERS, {
        k: "applies only to the field model" for k in
        ("kind", "k_pivot", "amplitude", "index", "cutoff_scale", "table")})
    priors = {name: p.get(name, _INTEGRAL_DEFAULTS[name]) for name in INTEGRAL_PARAMETERS}
    keys = {name: f"prior.{name}" for name in INTEGRAL_PARAMETERS}
    if "noise_sigma" in data_raw:
        if "sigma" in p:
            raise ConfigError("data.noise_sigma: give either data.noise_sigma (fixed) or "
                              "prior.sigma, not both")
        priors["sigma"] = _float("data.noise_sigma", data_raw["noise_sigma"], "positive")
        keys["sigma"] = "data.noise_sigma"
    for name, value in priors.items():
        if isinstance(value, dict):
            dist = value.get("dist")
            if dist is not None and not isinstance(dist, str):
                _fail(f"{keys[name]}.dist", "must be a name "
                      f"({', '.join(integral_model.PRIOR_KINDS)})", dist)
        elif not _is_number(value):
            _fail(keys[name], "must be a number (fixed) or a prior table such as "
                  '{dist = "normal", loc = 0.0, scale = 1.0}', value)
    try:
        for name, value in priors.items():
            integral_model.parse_prior(name, value)
        # The spec's own rules for the set (sigma > 0 and its allowed priors), checked
        # on placeholder data (the data file is not read here).
        integral_model.IntegralModelSpec(t=[0.0, 1.0], y=[0.0, 0.0], refine=refine,
                                         priors=priors)
    except ValueError as exc:
        message = str(exc)
        match = _PRIORS_PREFIX.match(message)
        key = keys.get(match.group(1), "prior") if match else "prior"
        raise ConfigError(f"{key}: {message[match.end():] if match else message}") from None
    values = {name: (_distribution(v) if isinstance(v, dict) else float(v))
              for name, v in priors.items()}
    section = PriorSection(kind=None, k_pivot=None, amplitude=None, index=None,
                           cutoff_scale=None, table=None, **values)
    return section, IntegralSection(refine=refine)


def config_from_dict(raw: Mapping, base_dir=".") -> RunConfig:
    """Validate a parsed TOML document (nested dicts) into a ``RunConfig``."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"config: must be a table of tables, got {_show(raw)}")
    for name, value in raw.items():
        if name not in _TABLES:
            close = difflib.get_close_matches(name, _TABLES, n=1)
            hint = f" (did you mean [{close[0]}]?)" if close else \
                f" (known: {', '.join(f'[{t}]' for t in _TABLES)})"
            what = "table" if isinstance(value, dict) else "top-level key"
            raise ConfigError(f"unknown {what} [{name}]{hint}" if what == "table" else
                              f"unknown {what} {name!r}{hint}")
    model = _parse_model(raw)
    not_here = _INTEGRAL_ONLY if model.kind == "field" else _FIELD_ONLY
    for name in not_here:
        if name in raw:
            raise ConfigError(f"[{name}] applies only to model.kind = "
                              f"'{'integral' if model.kind == 'field' else 'field'}' "
                              f"(this config has model.kind = {model.kind!r})")
    sampler = _parse_sampler(raw)
    base = Path(os.path.abspath(os.path.expanduser(os.fspath(base_dir))))
    if model.kind == "integral":
        data_raw = _table("data", raw)
        data = _parse_data(raw, "integral", None)
        prior, integral = _parse_integral(raw, data_raw)
        return RunConfig(model=model, data=data, prior=prior, sampler=sampler,
                         integral=integral, base_dir=base)
    likelihood = _parse_likelihood(raw)
    data = _parse_data(raw, "field", likelihood.kind)
    return RunConfig(model=model, data=data, prior=_parse_field_prior(raw), sampler=sampler,
                     grid=_parse_grid(raw), likelihood=likelihood, field=_parse_field(raw),
                     base_dir=base)


def parse_config(text: str, base_dir=".", source: str | None = None) -> RunConfig:
    """Parse and validate TOML text. ``base_dir`` resolves relative paths; ``source``
    (e.g. the file name) prefixes error messages."""
    prefix = f"{source}: " if source else ""
    if not isinstance(text, str):
        raise ConfigError(f"{prefix}config text must be a string, got {type(text).__name__}")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:     # message carries "(at line L, column C)"
        message = str(exc)
        if "(at end of document)" in message:   # e.g. an unclosed string: say which line
            lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
            message = message.replace("(at end of document)",
                                      f"(at end of document, line {max(lines, 1)})")
        raise ConfigError(f"{prefix}TOML syntax error: {message}") from None
    except RecursionError:
        raise ConfigError(f"{prefix}TOML syntax error: arrays or tables nested too deeply") \
            from None
    except ValueError as exc:                  # e.g. an integer with > 4300 digits
        raise ConfigError(f"{prefix}TOML value error: {exc}") from None
    try:
        return config_from_dict(raw, base_dir)
    except ConfigError as exc:
        if not prefix:
            raise
        raise ConfigError(f"{prefix}{exc}") from None


def load_config(path) -> RunConfig:
    """Read and validate a config file; relative paths in it resolve against its folder."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    return parse_config(text, base_dir=os.path.dirname(os.path.abspath(path)), source=path)


def default_config(kind: str = "field", data_path: str | None = None,
                   base_dir=".") -> RunConfig:
    """Every default filled in; ``data_path`` defaults to "data.npz" / "series.csv"."""
    kind = _choice("model.kind", kind, MODEL_KINDS)
    if data_path is None:
        data_path = "data.npz" if kind == "field" else "series.csv"
    return config_from_dict({"model": {"kind": kind}, "data": {"path": data_path}}, base_dir)


# --------------------------------------------------------------------------- writing


def config_to_dict(cfg: RunConfig) -> dict[str, dict[str, Any]]:
    """The config as nested plain dicts (table -> key -> value), every applicable key
    present, in the order ``dump_config`` writes; ``config_from_dict`` inverts it.
    Optional keys that are unset (data.mask) are left out; ``base_dir`` is not included."""
    out: dict[str, dict[str, Any]] = {"model": {"kind": cfg.model.kind}}
    d = cfg.data
    data: dict[str, Any] = {"path": d.path}
    if cfg.model.kind == "field":
        data["key"] = d.key
        if d.noise_map is not None:
            data["noise_map"] = d.noise_map
        elif d.noise_sigma is not None:
            data["noise_sigma"] = d.noise_sigma
        if d.mask is not None:
            data["mask"] = d.mask
    out["data"] = data
    if cfg.model.kind == "field":
        box = cfg.grid.box_size
        out["grid"] = {"box_size": box[0] if box[0] == box[1] == box[2] else list(box),
                       "unit": cfg.grid.unit}
        p = cfg.prior
        if p.kind == "table":
            out["prior"] = {"kind": p.kind, "table": p.table}
        else:
            prior = {"kind": p.kind, "k_pivot": p.k_pivot,
                     "amplitude": _prior_to_config(p.amplitude),
                     "index": _prior_to_config(p.index)}
            if p.kind == "power_law_cutoff":
                prior["cutoff_scale"] = _prior_to_config(p.cutoff_scale)
            out["prior"] = prior
        lk = cfg.likelihood
        likelihood: dict[str, Any] = {"kind": lk.kind, "smoothing_scale": lk.smoothing_scale,
                                      "field_mean": lk.field_mean}
        if lk.kind == "poisson_lognormal":
            likelihood["mean_count"] = lk.mean_count
        out["likelihood"] = likelihood
        out["field"] = {"parameterisation": cfg.field.parameterisation,
                        "dtype": cfg.field.dtype}
    else:
        out["prior"] = {name: _prior_to_config(getattr(cfg.prior, name))
                        for name in INTEGRAL_PARAMETERS}
        out["integral"] = {"refine": cfg.integral.refine}
    out["sampler"] = {f.name: getattr(cfg.sampler, f.name) for f in fields(SamplerSection)}
    return out


_COMMENTS = {
    ("model", "kind"): "field | integral",
    ("data", "path"): "relative to this file",
    ("grid", "box_size"): "one number or [L0, L1, L2]",
    ("prior", "kind"): " | ".join(SPECTRA),
    ("prior", "k_pivot"): "fixed convention, never sampled",
    ("prior", "amplitude"): "number = fixed, table = sampled",
    ("prior", "A"): "number = fixed, table = sampled",
    ("likelihood", "kind"): " | ".join(LIKELIHOOD_KINDS),
    ("likelihood", "smoothing_scale"): "Gaussian beam R; 0 = none",
    ("field", "parameterisation"): " | ".join(PARAMETERISATIONS),
    ("field", "dtype"): " | ".join(DTYPES),
    ("sampler", "algorithm"): " | ".join(ALGORITHMS),
    ("sampler", "step_size"): "initial; adapted during warmup",
    ("sampler", "target_accept"): "in (0, 1)",
    ("integral", "refine"): "trapezoid steps per data interval",
}


def dump_config(cfg: RunConfig) -> str:
    """TOML text of the whole config (defaults included, stable order, short comments).
    ``parse_config(dump_config(cfg), cfg.base_dir) == cfg``."""
    header = "# Fieldscope run configuration\n"
    body = to_toml(config_to_dict(cfg), comments=_COMMENTS)
    if cfg.model.kind == "field" and cfg.data.mask is None:
        # Say where the optional mask would go (TOML has no null).
        body = body.replace("\n[grid]", '# mask = "mask"  # optional: key or path, true = observed\n'
                            "\n[grid]", 1)
    return header + body


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
            "\r": "\\r"}


def _toml_string(s: str) -> str:
    out = []
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            raise ValueError(f"string {s[:40]!r} holds a lone surrogate; TOML cannot store it")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_key(key) -> str:
    if not isinstance(key, str):
        raise TypeError(f"TOML keys are strings, got {key!r}")
    return key if _BARE_KEY.fullmatch(key) else _toml_string(key)


def _toml_value(value) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        value = int(value)
        if not -2**63 <= value <= _INT64_MAX:
            raise ValueError(f"integer {value} is outside TOML's 64-bit range")
        return str(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)      # shortest text that reads back as the same double
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}"
                                for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as TOML")


def to_toml(document: Mapping[str, Any],
            comments: Mapping[tuple[str, str], str] | None = None) -> str:
    """Serialize a document: top-level scalars first, then each top-level mapping as a
    ``[table]`` whose nested mappings are written as inline tables. ``comments`` maps
    (table, key) to a trailing comment. ``tomllib.loads(to_toml(d)) == d`` for str keys,
    str / int (64-bit) / float / bool values, lists and dicts (NaN aside, as NaN != NaN)."""
    comments = comments or {}
    lines: list[str] = []
    for key, value in document.items():
        if not isinstance(value, Mapping):
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    for name, table in document.items():
        if not isinstance(table, Mapping):
            continue
        if lines:
            lines.append("")
        lines.append(f"[{_toml_key(name)}]")
        for key, value in table.items():
            line = f"{_toml_key(key)} = {_toml_value(value)}"
            note = comments.get((name, key))
            lines.append(f"{line}  # {note}" if note else line)
    return "\n".join(lines) + "\n"
