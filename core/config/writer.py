"""Writing a run config: ``RunConfig`` to nested dicts and to TOML text (the inverse of
``core.config.parse``); a small TOML writer of its own (tomllib only reads).
"""

from __future__ import annotations

import math
import re
from dataclasses import fields
from typing import Any, Mapping

import numpy as np

from core.config.schema import (
    _INT64_MAX,
    ALGORITHMS,
    DTYPES,
    INTEGRAL_PARAMETERS,
    PARAMETERISATIONS,
    PRECONDITIONERS,
    SHARDS,
    RunConfig,
    SamplerSection,
)
from core.field.observations import LIKELIHOOD_KINDS
from core.field.power_spectrum import SPECTRA
from core.priors import prior_to_config

__all__ = ["config_to_dict", "dump_config", "to_toml"]



def config_to_dict(cfg: RunConfig) -> dict[str, dict[str, Any]]:
    """The config as nested plain dicts (table -> key -> value), every applicable key
    present, in the order ``dump_config`` writes; ``config_from_dict`` inverts it.
    Optional keys that are unset (data.mask) are left out; ``base_dir`` is not included."""
    out: dict[str, dict[str, Any]] = {"model": {"kind": cfg.model.kind}}
    if cfg.model.kind == "python":
        out["model"].update(file=cfg.model.file, dtype=cfg.model.dtype)
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
        out["prior"] = _field_prior_to_dict(cfg.prior)
        lk = cfg.likelihood
        if lk.kind == "python":
            likelihood: dict[str, Any] = {"kind": lk.kind, "file": lk.file}
        else:
            likelihood = {"kind": lk.kind, "smoothing_scale": lk.smoothing_scale, "field_mean": lk.field_mean}
        if lk.kind == "poisson_lognormal":
            likelihood["mean_count"] = lk.mean_count
        out["likelihood"] = likelihood
        out["field"] = {"parameterisation": cfg.field.parameterisation,
                        "dtype": cfg.field.dtype, "shard": cfg.field.shard}
    elif cfg.model.kind == "python":
        pass
    else:
        out["prior"] = {name: prior_to_config(getattr(cfg.prior, name))
                        for name in INTEGRAL_PARAMETERS}
        out["integral"] = {"refine": cfg.integral.refine}
    if cfg.parameters:
        out["parameters"] = {name: prior_to_config(value) for name, value in cfg.parameters.items()}
    out["sampler"] = {f.name: getattr(cfg.sampler, f.name) for f in fields(SamplerSection)}
    return out


def _field_prior_to_dict(p) -> dict[str, Any]:
    """A field config's [prior] table as plain values (``config_to_dict``)."""
    if p.kind == "table":
        return {"kind": p.kind, "table": p.table}
    if p.kind == "band_powers":
        prior = {"kind": p.kind}
        if p.edges is not None:
            prior["edges"] = list(p.edges)
        else:
            prior["n_bins"] = p.n_bins
        prior["band_power"] = prior_to_config(p.band_power)
        if p.random_walk_scale is not None:
            prior["random_walk_scale"] = p.random_walk_scale
        return prior
    prior = {"kind": p.kind, "k_pivot": p.k_pivot,
             "amplitude": prior_to_config(p.amplitude),
             "index": prior_to_config(p.index)}
    if p.kind == "power_law_cutoff":
        prior["cutoff_scale"] = prior_to_config(p.cutoff_scale)
    return prior


_COMMENTS = {
    ("model", "kind"): "field | integral | python",
    ("model", "file"): "the model file (log_likelihood, PARAMETERS), relative to this file",
    ("likelihood", "file"): "the model file (log_likelihood, PARAMETERS), relative to this file",
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
    ("field", "shard"): " | ".join(SHARDS) + ": the field cut over sampler.devices",
    ("sampler", "algorithm"): " | ".join(ALGORITHMS),
    ("sampler", "step_size"): "first guess of the initial step-size search; adapted during warmup",
    ("sampler", "target_accept"): "in (0, 1)",
    ("sampler", "preconditioner"): " | ".join(PRECONDITIONERS),
    ("sampler", "dense_modes"): "fourier: low-k modes in its dense block; 0 = none",
    ("sampler", "devices"): "the chains spread over N devices, or \"all\" GPUs",
    ("sampler", "interweave"): "sampled P(k): a centred move of the spectrum after each transition",
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
