"""Reading a run config: TOML text or nested dicts to a validated ``RunConfig``.

Every rejection is a ``ConfigError`` that carries the key it is about (``err.key``:
"grid.box_size", "prior.index", "sampler"; None for the whole document) and whose message
starts with it ("grid.box_size: ...", "[sampler] unknown key ..."); see ``ConfigError``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Mapping

from core.config.limits import (
    MAX_BANDS,
    MAX_DENSE_MODES,
    MAX_DEVICES,
    MAX_DRAWS,
    MAX_LEAPFROG_STEPS,
    check_document_sizes,
    check_dtype_range,
    check_text_size,
    read_config_text,
)
from core.config.schema import (
    _INT64_MAX,
    ALGORITHMS,
    DTYPES,
    FIELD_DATA_EXTENSIONS,
    FOURIER_PARAMETERISATIONS,
    INTEGRAL_DATA_EXTENSIONS,
    INTEGRAL_PARAMETERS,
    MODEL_FILE_EXTENSIONS,
    MODEL_KINDS,
    NEW_CONFIG_SAMPLERS,
    PARAMETERISATIONS,
    PER_MODE_PRECONDITIONERS,
    PRECONDITIONERS,
    PYTHON_DATA_EXTENSIONS,
    SHARDS,
    ConfigError,
    DataSection,
    FieldSection,
    GridSection,
    IntegralSection,
    LikelihoodSection,
    ModelSection,
    PriorSection,
    PriorValue,
    RunConfig,
    SamplerSection,
)
from core.config.writer import _toml_value
from core.field.observations import LIKELIHOOD_KINDS
from core.field.power_spectrum import FIELD_HYPERPRIOR_KINDS, SPECTRA, spectrum_from_config
from core.integral.spec import IntegralModelSpec
from core.priors import SAMPLED_KINDS, PriorError, parse_prior
from core.samplers import SAMPLERS

__all__ = ["load_config", "parse_config", "config_from_dict", "default_config", "new_config"]

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


def _fail(key: str, problem: str, value=None, *, show=True, label: str | None = None):
    raise ConfigError(key, problem + (f", got {_show(value)}" if show else ""), label=label)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int(key: str, value, minimum: int, maximum: int | None = None, why: str = "") -> int:
    """An integer >= ``minimum``; with ``maximum``, at most that, ``why`` saying why."""
    what = ("a non-negative integer" if minimum == 0 else
            "a positive integer" if minimum == 1 else f"an integer >= {minimum}")
    if not _is_int(value) or not minimum <= value <= _INT64_MAX:
        _fail(key, f"must be {what}", value)
    if maximum is not None and value > maximum:
        _fail(key, f"may be at most {maximum:,} ({why})", value)
    return int(value)


_DRAWS_WHY = ("10^7 draws take at least 10^7 gradient evaluations and store about 0.5 GB per "
              "chain of statistics alone; field-level runs need 10^3 to 10^5")
_LEAPFROG_WHY = ("twice NUTS's longest trajectory, 1023 steps; each draw costs that many "
                 "gradient evaluations and a chunk stops only at its end")


def _float(key: str, value, rule: str = "finite", *, label: str | None = None) -> float:
    """rule: 'finite', 'positive' (> 0), 'nonnegative' (>= 0), 'open_unit' (0 < x < 1).
    ``label``: how the message names the key, when not as ``key`` (see ``ConfigError``)."""
    need = {"finite": "a finite number", "positive": "a positive finite number",
            "nonnegative": "a finite number >= 0",
            "open_unit": "a number strictly between 0 and 1"}[rule]
    if not _is_number(value):
        _fail(key, f"must be {need}", value, label=label)
    x = float(value) if abs(value) < 1e308 or isinstance(value, float) else math.inf
    ok = math.isfinite(x) and {"finite": True, "positive": x > 0, "nonnegative": x >= 0,
                               "open_unit": 0 < x < 1}[rule]
    if not ok:
        _fail(key, f"must be {need}", value, label=label)
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
        raise ConfigError(key, f"must be one of {', '.join(map(repr, choices))}, "
                               f"got {_show(value)}{hint}")
    return value


def _table(name: str, raw: Mapping, *, required: bool = False) -> dict:
    if name not in raw:
        if required:
            raise ConfigError(name, f"missing table [{name}]", label="")
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
            raise ConfigError(f"{table}.{key}", f"[{table}] key {key!r} {known_elsewhere[key]}",
                              label="")
        close = difflib.get_close_matches(key, list(allowed), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else \
            f" (allowed: {', '.join(allowed) or 'none'})"
        raise ConfigError(f"{table}.{key}", f"[{table}] unknown key {key!r}{hint}", label="")


def _data_path(key: str, value, extensions) -> str:
    path = _str(key, value, nonempty=True)
    suffix = os.path.splitext(path)[1].lower()
    if not path.lower().endswith(tuple(extensions)):   # endswith: a file named ".csv" too
        raise ConfigError(key, f"{path!r} has extension {suffix or '(none)'!r}; accepted: "
                               f"{', '.join(extensions)}")
    return path


# --------------------------------------------------------------------------- sections


_TABLES = ("model", "data", "grid", "prior", "likelihood", "field", "sampler", "integral", "parameters")
_FIELD_ONLY = ("grid", "likelihood", "field")
_INTEGRAL_ONLY = ("integral",)
#: the tables each model kind does not read
_NOT_READ = {"field": _INTEGRAL_ONLY, "integral": _FIELD_ONLY + ("parameters",),
             "python": _FIELD_ONLY + _INTEGRAL_ONLY + ("prior",)}
_MODEL_FILE_KEYS = {"file": "applies only to model.kind = 'python' (a field model's file is likelihood.file)",
                    "dtype": "applies only to model.kind = 'python' (a field model's is field.dtype)"}


def _parse_model(raw) -> ModelSection:
    t = _table("model", raw)
    kind = _choice("model.kind", t.get("kind", "field"), MODEL_KINDS)
    if kind != "python":
        _check_keys("model", t, ("kind",), _MODEL_FILE_KEYS)
        return ModelSection(kind=kind)
    _check_keys("model", t, ("kind", "file", "dtype"), {})
    return ModelSection(kind=kind, file=_model_file("model.file", t.get("file")),
                        dtype=_choice("model.dtype", t.get("dtype", "float32"), DTYPES))


def _model_file(key: str, value) -> str:
    """A model file's path: a non-empty string ending in .py (the file is not read here)."""
    if value is None:
        raise ConfigError(key, 'missing: the Python file that defines log_likelihood, e.g. file = "my_model.py" '
                          "(relative to this config)")
    return _data_path(key, value, MODEL_FILE_EXTENSIONS)


_PARAMETER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _parse_parameters(raw) -> dict:
    """``[parameters]``: name -> a number (fixed) or a prior table (sampled), overriding the
    model file's PARAMETERS of that name (checked against the file when it is loaded)."""
    t = _table("parameters", raw)
    out = {}
    for name, value in t.items():
        if not _PARAMETER_NAME.fullmatch(name):
            raise ConfigError(f"parameters.{name}", f"{name!r} is not a Python identifier (a "
                              "model file's PARAMETERS name)", label="")
        prior = _prior(f"parameters.{name}", value, SAMPLED_KINDS)
        out[name] = prior.value if prior.is_fixed else prior
    return out


def _parse_sampler(raw) -> SamplerSection:
    t = _table("sampler", raw)
    field = raw.get("field") if isinstance(raw, Mapping) else None
    sharded = isinstance(field, Mapping) and field.get("shard", "none") != "none"
    names = [f.name for f in fields(SamplerSection)]
    _check_keys("sampler", t, names + ["adapt_mass_matrix"], {})
    d = SamplerSection()
    get = lambda name: t.get(name, getattr(d, name))   # noqa: E731
    return SamplerSection(
        algorithm=_choice("sampler.algorithm", get("algorithm"), ALGORITHMS),
        num_warmup=_int("sampler.num_warmup", get("num_warmup"), 0, MAX_DRAWS, _DRAWS_WHY),
        num_samples=_int("sampler.num_samples", get("num_samples"), 1, MAX_DRAWS, _DRAWS_WHY),
        num_leapfrog_steps=_int("sampler.num_leapfrog_steps", get("num_leapfrog_steps"), 1,
                                MAX_LEAPFROG_STEPS, _LEAPFROG_WHY),
        step_size=_float("sampler.step_size", get("step_size"), "positive"),
        target_accept=_float("sampler.target_accept", get("target_accept"), "open_unit"),
        preconditioner=_preconditioner(t),
        dense_modes=_int("sampler.dense_modes", get("dense_modes"), 0, MAX_DENSE_MODES,
                         "the dense block is an m x m matrix applied twice a gradient"),
        chains=_int("sampler.chains", get("chains"), 1),
        seed=_int("sampler.seed", get("seed"), 0),
        thin=_int("sampler.thin", get("thin"), 1),
        chunk_size=_int("sampler.chunk_size", get("chunk_size"), 1, MAX_DRAWS,
                        "a chunk is at most a whole run's draws"),
        devices=devices_setting(get("devices"), get("chains"), sharded),
        interweave=_interweave(get("interweave"), get("algorithm")),
    )


def _interweave(value, algorithm) -> bool:
    """``sampler.interweave``: a boolean, and only with a sampler that has an accept step (the
    move jumps the state; after it MCLMC's unadjusted steps ran away under a mask: R-hat 1.83 on
    bench/hyper_efficiency.py's slab2, docs/benchmarks.md)."""
    on = _bool("sampler.interweave", value)
    if on and algorithm in SAMPLERS and not SAMPLERS[algorithm].adjusted:
        _fail("sampler.interweave", f"needs a sampler with an accept step ({', '.join(n for n, i in SAMPLERS.items() if i.adjusted)}), "
              f"not {algorithm!r}: after the move its unadjusted steps can run away; use \"mams\"", show=False)
    return on


def devices_setting(value, chains, sharded: bool = False):
    """``sampler.devices`` (or ``--devices``): "all" (every GPU; one device on a CPU) or a number
    of devices the chains spread over, at most ``MAX_DEVICES`` and at most the chains; with
    ``sharded`` (``field.shard``) the devices the field is cut over, every chain on all of them."""
    if value == "all":
        return value
    if isinstance(value, str):
        _fail("sampler.devices", 'must be "all" or a positive integer', value)
    n = _int("sampler.devices", value, 1, MAX_DEVICES, "logical devices beyond the cores gain nothing")
    if _is_int(chains) and n > chains and not sharded:
        _fail("sampler.devices", f"may be at most sampler.chains = {chains} (each device runs whole "
              "chains)", value)
    return n


def _preconditioner(t) -> str:
    """``sampler.preconditioner``, or its older spelling ``adapt_mass_matrix`` (true is
    "diagonal", false is "identity"); both given must agree on whether the mass matrix is
    adapted (false goes with "identity" and with the per-mode ones)."""
    value = _choice("sampler.preconditioner", t.get("preconditioner", "identity"), PRECONDITIONERS)
    if "adapt_mass_matrix" not in t:
        return value
    adapt = _bool("sampler.adapt_mass_matrix", t["adapt_mass_matrix"])
    if "preconditioner" not in t:
        return "diagonal" if adapt else "identity"
    if adapt != (value == "diagonal"):
        raise ConfigError("sampler.preconditioner",
                          f"{value!r} contradicts sampler.adapt_mass_matrix = {_toml_value(adapt)} "
                          "(adapt_mass_matrix = true is the older spelling of preconditioner = "
                          "\"diagonal\"); give only sampler.preconditioner")
    return value


def _check_preconditioner(sampler: SamplerSection, model_kind: str, field: FieldSection | None,
                          likelihood: LikelihoodSection | None = None):
    """The per-mode preconditioners ("fourier", "conditional") scale the field latent per
    wavevector: they need the field model and a latent indexed by wavevector."""
    name = sampler.preconditioner
    if name not in PER_MODE_PRECONDITIONERS:
        return
    if model_kind != "field":
        raise ConfigError("sampler.preconditioner", f"{name!r} applies only to model.kind = 'field' "
                          "(it scales the field's Fourier modes; this config has model.kind = "
                          f"{model_kind!r}): use 'identity' or 'diagonal'")
    if likelihood is not None and likelihood.kind == "python":
        raise ConfigError("sampler.preconditioner", f"{name!r} scales each Fourier mode by its posterior "
                          "width under a built-in likelihood; a model file's likelihood has no such "
                          "width known before the run: use 'diagonal' (adapted in warmup) or 'identity'")
    if field.parameterisation not in FOURIER_PARAMETERISATIONS:
        raise ConfigError("sampler.preconditioner", f"{name!r} needs field.parameterisation = "
                          f"{' or '.join(repr(p) for p in FOURIER_PARAMETERISATIONS)}, not "
                          f"{field.parameterisation!r}: that latent is white noise in real space, "
                          "where a per-mode scale is not a per-element one")


def _parse_grid(raw) -> GridSection:
    t = _table("grid", raw)
    _check_keys("grid", t, ("box_size", "unit"), {})
    box = t.get("box_size", 100.0)
    if isinstance(box, list):
        if len(box) != 3:
            _fail("grid.box_size", "must be one number or a list of three", box)
        sizes = tuple(_float("grid.box_size", b, "positive", label=f"grid.box_size[{i}]")
                      for i, b in enumerate(box))
    else:
        if not _is_number(box):
            _fail("grid.box_size", "must be one number or a list of three", box)
        sizes = (_float("grid.box_size", box, "positive"),) * 3
    return GridSection(box_size=sizes, unit=_str("grid.unit", t.get("unit", "")))


def _parse_field(raw) -> FieldSection:
    t = _table("field", raw)
    _check_keys("field", t, ("parameterisation", "dtype", "shard"), {})
    return FieldSection(
        parameterisation=_choice("field.parameterisation",
                                 t.get("parameterisation", "whitened"), PARAMETERISATIONS),
        dtype=_choice("field.dtype", t.get("dtype", "float32"), DTYPES),
        shard=_choice("field.shard", t.get("shard", "none"), SHARDS))


def _check_shard(config: RunConfig) -> None:
    """A sharded field (``field.shard``): the density that runs in parts
    (``core.engine.sharded_density``) is the white-noise one with a Gaussian likelihood and no
    per-mode preconditioner, over two or more devices."""
    shard, sampler = config.field.shard, config.sampler
    if shard == "none":
        return
    why = f"field.shard = {shard!r} cuts the field over sampler.devices"
    if sampler.devices != "all" and sampler.devices < 2:
        raise ConfigError("sampler.devices", f"{why}: give 2 or more (or \"all\" GPUs), not {sampler.devices}")
    if config.field.parameterisation != "white_noise":
        raise ConfigError("field.parameterisation", f"{why}: it needs \"white_noise\" (a latent in real "
                          "space, cut as the field is), not " + repr(config.field.parameterisation))
    if config.likelihood.kind != "gaussian":
        raise ConfigError("likelihood.kind", f"{why}: a Gaussian likelihood only, not {config.likelihood.kind!r}")
    if sampler.preconditioner in PER_MODE_PRECONDITIONERS:
        raise ConfigError("sampler.preconditioner", f"{why}: {sampler.preconditioner!r} scales each "
                          "Fourier mode of a whole field; use \"identity\" or \"diagonal\"")


def _parse_likelihood(raw) -> LikelihoodSection:
    t = _table("likelihood", raw)
    kind = _choice("likelihood.kind", t.get("kind", "gaussian"), LIKELIHOOD_KINDS)
    if kind == "python":        # the model file writes the whole likelihood (its beam, its mean)
        _check_keys("likelihood", t, ("kind", "file"), {
            k: "does not apply to likelihood.kind = 'python' (the model file writes its likelihood)"
            for k in ("smoothing_scale", "field_mean", "mean_count")})
        return LikelihoodSection(kind=kind, file=_model_file("likelihood.file", t.get("file")))
    allowed = ["kind", "smoothing_scale", "field_mean"]
    elsewhere = {"file": "applies only to likelihood.kind = 'python' (a model file's likelihood)"}
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


def _check_data_keys(t, model_kind: str, likelihood_kind: str | None) -> None:
    if model_kind == "integral":
        _check_keys("data", t, ("path", "noise_sigma"),
                    {k: "applies only to the field model" for k in ("key", "noise_map", "mask")})
        return
    if model_kind == "python":
        _check_keys("data", t, ("path",), {k: "does not apply to model.kind = 'python' (the model file "
                                                 "reads every column or array of data.path)"
                                           for k in ("key", "noise_sigma", "noise_map", "mask")})
        return
    allowed = ["path", "key", "mask"]
    elsewhere = {}
    if likelihood_kind == "poisson_lognormal":
        for k in ("noise_sigma", "noise_map"):
            elsewhere[k] = ("does not apply to likelihood.kind = 'poisson_lognormal' "
                            "(counts carry their own noise)")
    elif likelihood_kind == "python":
        allowed.append("noise_map")
        elsewhere["noise_sigma"] = ("does not apply to likelihood.kind = 'python' (the model file "
                                    "writes its noise; a noise_map is passed to it as data['noise'])")
    else:
        allowed += ["noise_sigma", "noise_map"]
    _check_keys("data", t, allowed, elsewhere)


def _parse_data(raw, model_kind: str, likelihood_kind: str | None) -> DataSection:
    t = _table("data", raw)
    _check_data_keys(t, model_kind, likelihood_kind)
    if "path" not in t:
        raise ConfigError("data.path", "missing (the data file, relative to the config file)")
    extensions = {"integral": INTEGRAL_DATA_EXTENSIONS, "python": PYTHON_DATA_EXTENSIONS}.get(
        model_kind, FIELD_DATA_EXTENSIONS)
    path = _data_path("data.path", t["path"], extensions)
    if model_kind in ("integral", "python"):
        # the integral model's noise_sigma is moved to prior.sigma by _parse_integral_prior.
        return DataSection(path=path, noise_sigma=None)
    key = _str("data.key", t.get("key", "data"), nonempty=True)
    mask = _str("data.mask", t["mask"], nonempty=True) if "mask" in t else None
    noise_sigma = noise_map = None
    if likelihood_kind == "python":
        noise_map = _str("data.noise_map", t["noise_map"], nonempty=True) if "noise_map" in t else None
    elif likelihood_kind != "poisson_lognormal":
        if "noise_sigma" in t and "noise_map" in t:
            raise ConfigError("data.noise_map", "give either noise_sigma or noise_map, not both")
        if "noise_map" in t:
            noise_map = _str("data.noise_map", t["noise_map"], nonempty=True)
        else:
            noise_sigma = _float("data.noise_sigma", t.get("noise_sigma", 1.0), "positive")
    return DataSection(path=path, key=key, noise_sigma=noise_sigma, noise_map=noise_map,
                       mask=mask)


def _prior(key: str, value, kinds=FIELD_HYPERPRIOR_KINDS):
    """``core.priors.parse_prior`` with its error as a ``ConfigError`` (same message)."""
    try:
        return parse_prior(key, value, kinds)
    except PriorError as exc:
        raise ConfigError(exc.key, exc.problem) from None


# Placeholders used while checking one fixed P(k) hyperparameter at a time with the
# spectrum's own validation (spectrum_from_config); all are valid values.
_PLACEHOLDERS = {"amplitude": 1.0, "index": 0.0, "k_pivot": 1.0, "cutoff_scale": 0.0}


def _parse_field_prior(raw) -> PriorSection:
    t = _table("prior", raw)
    kind = _choice("prior.kind", t.get("kind", "power_law"), tuple(SPECTRA))
    integral_keys = {k: "applies only to the integral model" for k in INTEGRAL_PARAMETERS}
    band_keys = {k: "applies only to prior.kind = 'band_powers'"
                 for k in ("n_bins", "edges", "band_power", "random_walk_scale")}
    if kind == "table":
        _check_keys("prior", t, ("kind", "table"), {
            **integral_keys, **band_keys,
            **{k: "does not apply to prior.kind = 'table' (a table has no hyperparameters)"
               for k in ("k_pivot", "amplitude", "index", "cutoff_scale")}})
        if "table" not in t:
            raise ConfigError("prior.table", "missing; prior.kind = 'table' needs "
                              "table = \"pk.txt\" (a file of k, P rows)")
        return PriorSection(kind=kind, k_pivot=None, amplitude=None, index=None,
                            table=_str("prior.table", t["table"], nonempty=True))
    if kind == "band_powers":
        return _parse_band_powers(t, integral_keys)
    names = [f.name for f in fields(SPECTRA[kind])]     # amplitude, index, k_pivot[, cutoff]
    elsewhere = {**integral_keys, **band_keys,
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
        prior = _prior(key, value)
        if prior.is_fixed:
            params = dict(_PLACEHOLDERS)
            params = {n: params[n] for n in names}
            params[name] = prior.value
            try:
                spectrum_from_config(kind, params)
            except ValueError as exc:
                raise ConfigError(key, str(exc)) from None
            values[name] = prior.value
        else:
            values[name] = prior
    return PriorSection(kind=kind, k_pivot=values["k_pivot"], amplitude=values["amplitude"],
                        index=values["index"], cutoff_scale=values.get("cutoff_scale"))


#: Band powers without ``n_bins`` or ``edges``: this many bins from the grid's shells.
DEFAULT_BAND_COUNT = 16
_BAND_POWER_EXAMPLE = 'band_power = {dist = "lognormal", loc = 0.0, scale = 5.0}'


def _parse_band_powers(t, integral_keys) -> PriorSection:
    band_keys = ("kind", "n_bins", "edges", "band_power", "random_walk_scale")
    _check_keys("prior", t, band_keys, {
        **integral_keys, "table": "applies only to prior.kind = 'table'",
        **{k: "does not apply to prior.kind = 'band_powers' (each bin's power is a hyperparameter "
              "of its own: set prior.band_power)" for k in ("k_pivot", "amplitude", "index", "cutoff_scale")}})
    if "n_bins" in t and "edges" in t:
        raise ConfigError("prior.edges", "give either prior.n_bins (edges from the grid) or prior.edges, "
                          "not both")
    n_bins, edges = None, None
    if "edges" in t:
        raw = t["edges"]
        if not isinstance(raw, list) or len(raw) < 2 or not all(_is_number(e) for e in raw):
            _fail("prior.edges", "must be a list of at least 2 wavenumbers (1 / length unit)", raw)
        edges = tuple(float(e) for e in raw)
        if not all(math.isfinite(e) and e > 0 for e in edges) or any(b <= a for a, b in zip(edges, edges[1:])):
            _fail("prior.edges", "must be positive, finite and strictly increasing", raw)
        if len(edges) - 1 > MAX_BANDS:
            _fail("prior.edges", f"may give at most {MAX_BANDS} bins", raw)
    else:
        n_bins = _int("prior.n_bins", t.get("n_bins", DEFAULT_BAND_COUNT), 1, MAX_BANDS,
                      "each bin is a sampled hyperparameter")
    if "band_power" not in t:
        raise ConfigError("prior.band_power", f"missing; band powers need each bin's prior, e.g. "
                          f"{_BAND_POWER_EXAMPLE} (loc: log P in length unit^3)")
    band_power = _prior("prior.band_power", t["band_power"], ("lognormal",))
    if band_power.is_fixed:
        raise ConfigError("prior.band_power", f"band powers are sampled: give a prior such as "
                          f"{_BAND_POWER_EXAMPLE}, not a fixed number ({band_power.value!r})")
    walk = t.get("random_walk_scale")
    if walk is not None:
        walk = _float("prior.random_walk_scale", walk, "positive")
    return PriorSection(kind="band_powers", k_pivot=None, amplitude=None, index=None, n_bins=n_bins,
                        edges=edges, band_power=band_power, random_walk_scale=walk)


_INTEGRAL_DEFAULTS = {"A": {"dist": "normal", "loc": 0.0, "scale": 1.0},
                      "c": {"dist": "normal", "loc": 0.0, "scale": 10.0},
                      "sigma": {"dist": "halfnormal", "scale": 1.0}}


def _integral_prior_error(key: str, name: str, exc: ValueError) -> ConfigError:
    """core.integral's rejection of parameter ``name`` as the config's error at ``key``
    (core.integral names the parameter "priors['A']: ..."; the config names its key)."""
    return ConfigError(key, str(exc).removeprefix(f"priors[{name!r}]: "))


def _parse_integral(raw, data_raw: Mapping) -> tuple[PriorSection, IntegralSection]:
    t = _table("integral", raw)
    _check_keys("integral", t, ("refine",), {})
    refine = _int("integral.refine", t.get("refine", 8), 1)

    p = _table("prior", raw)
    _check_keys("prior", p, INTEGRAL_PARAMETERS, {
        k: "applies only to the field model" for k in
        ("kind", "k_pivot", "amplitude", "index", "cutoff_scale", "table", "n_bins", "edges",
         "band_power", "random_walk_scale")})
    priors = {name: p.get(name, _INTEGRAL_DEFAULTS[name]) for name in INTEGRAL_PARAMETERS}
    keys = {name: f"prior.{name}" for name in INTEGRAL_PARAMETERS}
    if "noise_sigma" in data_raw:
        if "sigma" in p:
            raise ConfigError("data.noise_sigma", "give either data.noise_sigma (fixed) or "
                              "prior.sigma, not both")
        priors["sigma"] = _float("data.noise_sigma", data_raw["noise_sigma"], "positive")
        keys["sigma"] = "data.noise_sigma"
    parsed = {name: _prior(keys[name], value, SAMPLED_KINDS) for name, value in priors.items()}
    try:
        # The spec's own rules for the set (sigma > 0 and its allowed priors), checked
        # on placeholder data (the data file is not read here). Each prior parsed above,
        # so only sigma's rules can fail here.
        IntegralModelSpec(t=[0.0, 1.0], y=[0.0, 0.0], refine=refine, priors=parsed)
    except ValueError as exc:
        raise _integral_prior_error(keys["sigma"], "sigma", exc) from None
    values = {name: (p.value if p.is_fixed else p) for name, p in parsed.items()}
    section = PriorSection(kind=None, k_pivot=None, amplitude=None, index=None,
                           cutoff_scale=None, table=None, **values)
    return section, IntegralSection(refine=refine)


def config_from_dict(raw: Mapping, base_dir=".") -> RunConfig:
    """Validate a parsed TOML document (nested dicts) into a ``RunConfig``."""
    if not isinstance(raw, Mapping):
        raise ConfigError(None, f"must be a table of tables, got {_show(raw)}", label="config")
    check_document_sizes(raw)
    for name, value in raw.items():
        if name not in _TABLES:
            close = difflib.get_close_matches(name, _TABLES, n=1)
            hint = f" (did you mean [{close[0]}]?)" if close else \
                f" (known: {', '.join(f'[{t}]' for t in _TABLES)})"
            what = "table" if isinstance(value, dict) else "top-level key"
            raise ConfigError(name, f"unknown {what} [{name}]{hint}" if what == "table" else
                              f"unknown {what} {name!r}{hint}", label="")
    model = _parse_model(raw)
    for name in _NOT_READ[model.kind]:
        if name in raw:
            readers = [kind for kind in MODEL_KINDS if name not in _NOT_READ[kind]]
            raise ConfigError(name, f"[{name}] applies only to model.kind = "
                              f"{' or '.join(repr(k) for k in readers)} "
                              f"(this config has model.kind = {model.kind!r})", label="")
    sampler = _parse_sampler(raw)
    base = Path(os.path.abspath(os.path.expanduser(os.fspath(base_dir))))
    if model.kind == "python":
        data = _parse_data(raw, "python", None)
        _check_preconditioner(sampler, model.kind, None)
        return RunConfig(model=model, data=data, prior=PriorSection(kind=None, k_pivot=None, amplitude=None,
                                                                    index=None),
                         sampler=sampler, parameters=_parse_parameters(raw), base_dir=base)
    if model.kind == "integral":
        data_raw = _table("data", raw)
        data = _parse_data(raw, "integral", None)
        prior, integral = _parse_integral(raw, data_raw)
        _check_preconditioner(sampler, model.kind, None)
        return RunConfig(model=model, data=data, prior=prior, sampler=sampler,
                         integral=integral, base_dir=base)
    likelihood = _parse_likelihood(raw)
    data = _parse_data(raw, "field", likelihood.kind)
    if "parameters" in raw and likelihood.kind != "python":
        raise ConfigError("parameters", "[parameters] applies only to a model file's parameters "
                          "(model.kind = 'python' or likelihood.kind = 'python')", label="")
    config = RunConfig(model=model, data=data, prior=_parse_field_prior(raw), sampler=sampler,
                       grid=_parse_grid(raw), likelihood=likelihood, field=_parse_field(raw),
                       parameters=_parse_parameters(raw), base_dir=base)
    _check_shard(config)        # first: its message names the shard's needs, not the preconditioner's
    _check_preconditioner(sampler, model.kind, config.field, likelihood)
    check_dtype_range(config)
    return config


def parse_config(text: str, base_dir=".", source: str | None = None) -> RunConfig:
    """Parse and validate TOML text. ``base_dir`` resolves relative paths; ``source``
    (e.g. the file name) prefixes error messages."""
    if not isinstance(text, str):
        raise ConfigError(None, f"config text must be a string, got {type(text).__name__}",
                          source=source)
    check_text_size(text, source)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:     # message carries "(at line L, column C)"
        message = str(exc)
        if "(at end of document)" in message:   # e.g. an unclosed string: say which line
            lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
            message = message.replace("(at end of document)",
                                      f"(at end of document, line {max(lines, 1)})")
        raise ConfigError(None, f"TOML syntax error: {message}", source=source) from None
    except RecursionError:
        raise ConfigError(None, "TOML syntax error: arrays or tables nested too deeply",
                          source=source) from None
    except ValueError as exc:                  # e.g. an integer with > 4300 digits
        raise ConfigError(None, f"TOML value error: {exc}", source=source) from None
    try:
        return config_from_dict(raw, base_dir)
    except ConfigError as exc:
        if not source:
            raise
        raise exc.in_file(source) from None


def load_config(path) -> RunConfig:
    """Read and validate a config file; relative paths in it resolve against its folder."""
    path = os.fspath(path)
    text = read_config_text(path)
    return parse_config(text, base_dir=os.path.dirname(os.path.abspath(path)), source=path)


def default_config(kind: str = "field", data_path: str | None = None,
                   base_dir=".") -> RunConfig:
    """Every default filled in; ``data_path`` defaults to "data.npz" / "series.csv" / "data.csv"
    (a python model's file to "model.py")."""
    kind = _choice("model.kind", kind, MODEL_KINDS)
    if data_path is None:
        data_path = {"field": "data.npz", "integral": "series.csv", "python": "data.csv"}[kind]
    model = {"kind": kind, "file": "model.py"} if kind == "python" else {"kind": kind}
    return config_from_dict({"model": model, "data": {"path": data_path}}, base_dir)


def new_config(kind: str = "field", data_path: str | None = None, base_dir=".") -> RunConfig:
    """A config as Fieldscope creates one: ``default_config`` with ``NEW_CONFIG_SAMPLERS``'s
    sampler for the model kind (field: MCLMC with the fourier preconditioner; integral: HMC
    with the adapted diagonal mass) instead of the HMC with the identity mass that a file
    which omits ``sampler`` means."""
    cfg = default_config(kind, data_path, base_dir)
    settings = NEW_CONFIG_SAMPLERS[cfg.model.kind]
    return dataclasses.replace(cfg, sampler=dataclasses.replace(cfg.sampler, **settings))


# --------------------------------------------------------------------------- writing
