"""How large a run config may be, and which numbers a run's dtype can hold.

A config is a few KiB of TOML; the run store keeps its text in the root attributes and
rewrites them after every chunk, and the engine process receives it whole. So the text
and every value in it are bounded, each limit far above what a real run needs, each
refusal a ``ConfigError`` naming the key, the limit and why:

    MAX_CONFIG_BYTES     1 MiB of TOML (a commented demo config is about 3 KiB); the
                         file's size is checked before it is read (``read_config_text``)
    MAX_PATH_CHARS       4096 characters for a file name (Linux's PATH_MAX): data.path,
                         data.mask, data.noise_map, prior.table
    MAX_STRING_CHARS     1024 characters for any other string (an array name, a unit)
    MAX_ARRAY_ITEMS      16 items in any array (grid.box_size takes three numbers), except
                         prior.edges: MAX_BANDS + 1 band-power edges
    MAX_BANDS            512 band-power bins (prior.n_bins, prior.edges): each bin is a
                         sampled hyperparameter, recorded every draw
    MAX_DRAWS            10^7 for sampler.num_warmup, sampler.num_samples and
                         sampler.chunk_size. Field-level runs need 10^3 to 10^5 draws; 10^7
                         draws store about 50 bytes per chain per draw of statistics alone
                         (0.5 GB per chain) and take at least 10^7 gradient evaluations, days
                         even on a small grid; the store's size on the run's disk is checked
                         again before a run starts (``core.run.resources``)
    MAX_LEAPFROG_STEPS   2048 for sampler.num_leapfrog_steps: twice the longest trajectory
                         NUTS builds (tree depth 10: 1023 steps). A draw costs that many
                         gradient evaluations, and a chunk of draws runs as one XLA call
                         that can be stopped only at its end, so 10^7 steps would make one
                         chunk run for days
    MAX_DENSE_MODES      4096 for sampler.dense_modes: the block is an m x m matrix, built
                         and factorised once (4096: 128 MiB in float64, seconds) and applied
                         twice a gradient (2 x 16.8 M multiply-adds a chain, several FFTs of
                         64^3); the low-k modes where it helps number hundreds to a few
                         thousand
    MAX_DEVICES          64 for sampler.devices: the devices a run's chains spread over (each
                         device runs whole chains; on a CPU, that many logical devices share
                         its cores: beyond the cores they gain nothing)

Float settings and the run's dtype (``field.dtype``; the integral model always runs in
float64, which ``_float`` already bounds). A float32 run casts every number to float32:
1e300 becomes inf (a step size of 1e300 shows up as a step size that "fell to 0"), 1e-50
becomes 0. ``check_dtype_range`` refuses, at parse time and naming the key, a setting whose
magnitude exceeds the dtype's largest value, a positive setting below its smallest normal value (which
loses precision or rounds to 0), and a noise level whose inverse square 1/noise_sigma^2 (the likelihood's
weight) overflows the dtype.
"""

from __future__ import annotations

import math
import os
from typing import Mapping

import numpy as np

from core.config.schema import ConfigError

__all__ = ["MAX_CONFIG_BYTES", "MAX_PATH_CHARS", "MAX_STRING_CHARS", "MAX_ARRAY_ITEMS", "MAX_BANDS", "LONG_ARRAYS",
           "MAX_DRAWS", "MAX_LEAPFROG_STEPS", "MAX_DENSE_MODES", "MAX_DEVICES", "PATH_KEYS", "read_config_text",
           "check_text_size", "check_document_sizes", "check_dtype_range"]

MAX_CONFIG_BYTES = 2**20
MAX_PATH_CHARS = 4096
MAX_STRING_CHARS = 1024
MAX_ARRAY_ITEMS = 16
MAX_BANDS = 512
#: Arrays allowed to be longer than MAX_ARRAY_ITEMS, and their own limit.
LONG_ARRAYS = {"prior.edges": MAX_BANDS + 1}
MAX_DRAWS = 10**7
MAX_LEAPFROG_STEPS = 2048
MAX_DENSE_MODES = 4096
MAX_DEVICES = 64

#: Keys whose value is a file name (or "file.npz:key").
PATH_KEYS = ("data.path", "data.mask", "data.noise_map", "prior.table")


def _size_problem(n_bytes: int) -> str:
    return (f"the config is {n_bytes:,} bytes; a config may be at most {MAX_CONFIG_BYTES:,} "
            f"bytes (1 MiB; a run's config is a few KiB: is this the right file?)")


def read_config_text(path) -> str:
    """The text of the config file ``path``: its size checked before it is read, then read
    (at most ``MAX_CONFIG_BYTES`` + 1 bytes) and decoded as UTF-8. ``ConfigError`` naming
    the file when it cannot be read, is too large or is not UTF-8."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_CONFIG_BYTES:
                raise ConfigError(None, _size_problem(size), label="config", source=path)
            data = handle.read(MAX_CONFIG_BYTES + 1)     # a file that grew meanwhile, a pipe
    except OSError as exc:
        raise ConfigError(None, f"cannot read config ({exc.strerror or exc})",
                          source=path) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(None, _size_problem(len(data)), label="config", source=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(None, f"not UTF-8 text (byte {exc.start}: {exc.reason})",
                          source=path) from None


def check_text_size(text: str, source: str | None = None) -> None:
    """``ConfigError`` when the TOML text is larger than ``MAX_CONFIG_BYTES`` (UTF-8)."""
    if len(text) > MAX_CONFIG_BYTES // 4:              # cheap test first: <= 4 bytes a char
        n_bytes = len(text.encode("utf-8", errors="surrogatepass"))
        if n_bytes > MAX_CONFIG_BYTES:
            raise ConfigError(None, _size_problem(n_bytes), label="config", source=source)


def check_document_sizes(raw: Mapping) -> None:
    """Every string and array of a config document (nested dicts) within its limit; the
    error names the dotted key (an array element keys its array)."""
    def walk(value, key: str, label: str):
        if isinstance(value, str):
            limit = MAX_PATH_CHARS if key in PATH_KEYS else MAX_STRING_CHARS
            if len(value) > limit:
                what = "a file name" if key in PATH_KEYS else "a string here"
                raise ConfigError(key, f"is {len(value):,} characters long; {what} may have at "
                                       f"most {limit:,}", label=label)
        elif isinstance(value, list):
            limit = LONG_ARRAYS.get(key, MAX_ARRAY_ITEMS)
            if len(value) > limit:
                where = "this array" if key in LONG_ARRAYS else "an array in a config"
                raise ConfigError(key, f"is an array of {len(value):,} items; {where} "
                                       f"may have at most {limit}", label=label)
            for i, item in enumerate(value):
                walk(item, key, f"{label}[{i}]")
        elif isinstance(value, Mapping):
            for name, item in value.items():
                sub = f"{key}.{name}" if key else str(name)
                walk(str(name), sub, sub)                  # a key is a string too
                walk(item, sub, sub)

    walk(raw, "", "")


def _g(x: float) -> str:
    return f"{x:.3g}"


def _float64_hint(dtype: str) -> str:
    """The remedy a float32 message adds (float64 has none further)."""
    return "" if dtype == "float64" else " or field.dtype = 'float64'"


def _check_representable(key: str, value, dtype: str, positive: bool = False) -> None:
    """ConfigError naming ``key`` where |value| overflows ``dtype``, or (``positive``: a
    setting that must not round to 0) is below its smallest normal value; None passes."""
    if value is None:
        return
    info = np.finfo(dtype)
    big, tiny, hint = float(info.max), float(info.tiny), _float64_hint(dtype)
    x = abs(float(value))
    if x > big:
        raise ConfigError(key, f"{_g(value)} overflows field.dtype = '{dtype}' (its largest "
                               f"value is {_g(big)}); use a smaller value{hint}")
    if positive and x < tiny:      # a nonzero setting that may be 0 (a mean) may round to 0
        raise ConfigError(key, f"{_g(value)} is too small for field.dtype = '{dtype}' (its "
                               f"smallest normal value is {_g(tiny)}; below it a value loses "
                               f"its precision or becomes 0); use a larger value{hint}")


def check_dtype_range(config) -> None:
    """Refuse a field config's float settings that its ``field.dtype`` cannot hold (module
    docstring); ``ConfigError`` naming the key, the value and the dtype's limit."""
    if config.model.kind != "field":
        return
    dtype = config.field.dtype
    big = float(np.finfo(dtype).max)
    hint = _float64_hint(dtype)

    def check(key: str, value, positive: bool = False):
        _check_representable(key, value, dtype, positive)

    s = config.sampler
    check("sampler.step_size", s.step_size, positive=True)
    for length in config.grid.box_size:
        check("grid.box_size", length, positive=True)
    lik = config.likelihood
    check("likelihood.smoothing_scale", lik.smoothing_scale)
    check("likelihood.field_mean", lik.field_mean)
    check("likelihood.mean_count", lik.mean_count, positive=True)
    sigma = config.data.noise_sigma
    check("data.noise_sigma", sigma, positive=True)
    if sigma is not None:
        smallest = 1.0 / np.sqrt(big)
        if sigma < smallest:
            weight = sigma**-2 if sigma > 1e-154 else None        # finite in Python's float
            weight = _g(weight) if weight is not None else f"10^{round(-2 * math.log10(sigma))}"
            raise ConfigError("data.noise_sigma", (
                f"{_g(sigma)} is too small for field.dtype = '{dtype}': the likelihood weighs "
                f"each residual by 1/noise_sigma^2 = {weight}, above the dtype's "
                f"largest value {_g(big)}; need noise_sigma >= {_g(smallest)}{hint}, or rescale "
                "the data"))
    prior = config.prior
    check("prior.k_pivot", prior.k_pivot, positive=True)
    for name in ("amplitude", "index", "cutoff_scale"):
        value = getattr(prior, name)
        if value is None:
            continue
        if isinstance(value, (int, float)):
            check(f"prior.{name}", value, positive=name == "amplitude")
        else:
            for part, v in value.to_config().items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    check(f"prior.{name}.{part}", v, positive=part == "scale")
