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
                  dtype = "float32" | "float64", shard = "none" | "slab" | "pencil" (the
                  field cut over sampler.devices: white_noise, Gaussian likelihood)
    [sampler]     algorithm, num_warmup, num_samples, num_leapfrog_steps, step_size,
                  target_accept, preconditioner = "identity" | "diagonal" | "fourier" | "conditional"
                  (``adapt_mass_matrix = true`` is read as "diagonal"), dense_modes
                  (the fourier preconditioner's dense low-k block), chains, seed,
                  thin, chunk_size

Integral model: ``[model] kind = "integral"``, ``[data] path`` (.csv .txt .dat),
``[integral] refine``, and ``[prior]`` with A, c, sigma (number = fixed, or a prior
table with dist normal | lognormal | halfnormal | uniform). ``data.noise_sigma = s``
is accepted as a shorthand for ``prior.sigma = s`` and is stored (and written back)
as the latter, so sigma lives in one place.

Every problem raises ``ConfigError`` (a ``ValueError``) that carries the key it is
about (``err.key``: "sampler.num_warmup", "prior.index.scale", a table such as
"sampler", or None for the whole document) and ``err.problem``; its message names the
key path (``sampler.num_warmup: ...``) or the table (``[sampler] unknown key ...``),
and, for ``load_config``, the file. Data files are not opened here.

Sizes are bounded (``limits``): the text at most 1 MiB (a file's size is checked before it
is read: ``read_config_text``), strings 1024 characters (file names 4096), arrays 16
items, draws 10^7, leapfrog steps 2048; a field run's float settings must fit its
``field.dtype``.

Modules: ``schema`` (the sections and ``ConfigError``), ``limits`` (the size limits and
the dtype range), ``parse`` (TOML or dicts to a ``RunConfig``), ``writer`` (``RunConfig``
to dicts and TOML); ``from_data`` (a fresh config for a data file, ``config_for_data``: not
imported here, it reads files through ``core.io``).
"""

from __future__ import annotations

from core.config.limits import MAX_CONFIG_BYTES, check_text_size, read_config_text
from core.config.parse import config_from_dict, default_config, devices_setting, load_config, new_config, parse_config
from core.config.schema import (
    ALGORITHMS,
    DTYPES,
    FIELD_DATA_EXTENSIONS,
    FOURIER_PARAMETERISATIONS,
    INTEGRAL_DATA_EXTENSIONS,
    INTEGRAL_PARAMETERS,
    MODEL_KINDS,
    NEW_CONFIG_SAMPLERS,
    PARAMETERISATIONS,
    PER_MODE_PRECONDITIONERS,
    PRECONDITIONERS,
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
    model_file_setting,
    uses_model_file,
)
from core.config.writer import config_to_dict, dump_config, to_toml

__all__ = [
    "load_config",
    "read_config_text",
    "MAX_CONFIG_BYTES",
    "check_text_size",
    "parse_config",
    "devices_setting",
    "config_from_dict",
    "default_config",
    "new_config",
    "NEW_CONFIG_SAMPLERS",
    "uses_model_file",
    "model_file_setting",
    "ConfigError",
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
    "SHARDS",
    "ALGORITHMS",
    "PRECONDITIONERS",
    "FOURIER_PARAMETERISATIONS",
    "PER_MODE_PRECONDITIONERS",
    "FIELD_DATA_EXTENSIONS",
    "INTEGRAL_DATA_EXTENSIONS",
    "INTEGRAL_PARAMETERS",
    "PriorValue",
    "config_to_dict",
    "dump_config",
    "to_toml",
]
