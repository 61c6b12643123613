"""What a run config holds: the sections of ``RunConfig``, the choices they allow, and
``ConfigError``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path

from core.integral.spec import PARAMETERS as INTEGRAL_PARAMETERS
from core.io.formats import LOADERS
from core.io.series import SERIES_EXTENSIONS
from core.priors import NormalPrior, SampledPrior
from core.samplers import ALGORITHMS as _REGISTERED_ALGORITHMS

__all__ = [
    "ConfigError", "ModelSection", "DataSection", "GridSection", "PriorSection",
    "LikelihoodSection", "FieldSection", "SamplerSection", "IntegralSection", "RunConfig",
    "MODEL_KINDS", "PARAMETERISATIONS", "DTYPES", "SHARDS", "ALGORITHMS", "PRECONDITIONERS",
    "FOURIER_PARAMETERISATIONS", "PER_MODE_PRECONDITIONERS", "FIELD_DATA_EXTENSIONS",
    "INTEGRAL_DATA_EXTENSIONS", "INTEGRAL_PARAMETERS", "PriorValue", "NEW_CONFIG_SAMPLERS", "COUPLED_HYPER_SAMPLER",
    "PYTHON_DATA_EXTENSIONS", "MODEL_FILE_EXTENSIONS", "uses_model_file", "model_file_setting"
]

#: "field": the Gaussian random field (its likelihood built in, or a model file's:
#: ``likelihood.kind = "python"``); "integral": the built-in 1D integral model; "python": a
#: scalar model whose log-likelihood is a model file's (``core.engine.model_file``)
MODEL_KINDS = ("field", "integral", "python")
#: The field latent's parameterisations (described in ``core.engine.field_density``, which
#: imports this tuple and accepts exactly these).
PARAMETERISATIONS = ("whitened", "white_noise", "raw_modes")
DTYPES = ("float32", "float64")
#: ``field.shard``: the field whole on one device ("none"), or cut over ``sampler.devices`` as
#: slabs of x or pencils of x and y (``core.engine.sharded_fft``; its density:
#: ``core.engine.sharded_density``, which needs white noise, a Gaussian likelihood and no
#: per-mode preconditioner)
SHARDS = ("none", "slab", "pencil")
#: ``sampler.algorithm``: the sampler registry's names (``core.samplers``: hmc, nuts, mclmc, mams)
ALGORITHMS = _REGISTERED_ALGORITHMS
#: ``sampler.preconditioner``: "identity" (none), "diagonal" (a diagonal mass matrix adapted
#: from warmup draws, ``core.engine.engine``; the older key ``adapt_mass_matrix = true``),
#: "fourier" (the field model's own per-mode posterior scale, ``core.field.preconditioner``;
#: field model, parameterisation whitened or raw_modes), "conditional" (the same scale, and each
#: mode centred on its posterior mean given the current hyperparameters: with sampled P(k)
#: hyperparameters the field no longer pins them, ``core.engine.field_density``).
PRECONDITIONERS = ("identity", "diagonal", "fourier", "conditional")
#: the preconditioners the field model applies per Fourier mode (a change of variables in the model)
PER_MODE_PRECONDITIONERS = ("fourier", "conditional")
#: ``sampler.dense_modes``: with a per-mode preconditioner and data that couple the modes (a
#: mask, a noise map), this many low-k modes get the exact block of the posterior precision among
#: themselves (``core.field.preconditioner.dense_block``); 0 = the per-mode scale alone.
DEFAULT_DENSE_MODES = 1024
#: The parameterisations whose latent is indexed by wavevector, so that a per-mode scale is a
#: per-element one: the per-mode preconditioners apply to these.
FOURIER_PARAMETERISATIONS = ("whitened", "raw_modes")
#: the data files each model reads: core.io's formats (its loaders' registry, its series files)
FIELD_DATA_EXTENSIONS = tuple(LOADERS)
INTEGRAL_DATA_EXTENSIONS = SERIES_EXTENSIONS
#: a scalar model file's data: a CSV whose header names its columns, or an .npz of named arrays
PYTHON_DATA_EXTENSIONS = (".csv", ".npz")
MODEL_FILE_EXTENSIONS = (".py",)

_INT64_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A config that cannot be read or is invalid: which key, what is wrong, and which file.

    ``ConfigError(key, problem)`` is the usual form, for example
    ``ConfigError("sampler.num_warmup", "must be a non-negative integer, got -5 (an integer)")``.

    key
        The dotted config key the problem is about, down to sub-keys ("grid.box_size",
        "sampler.num_warmup", "prior.index.scale", "prior.A.dist"); an array element keys
        the array ("grid.box_size" for ``grid.box_size[1]``). A problem with a whole table
        keys the table ("sampler", "grid"; an unknown table or top-level key keys its name).
        None for a problem with the whole document (not readable, not UTF-8, not TOML, not a
        table of tables). Code that needs the key (the GUI puts each message next to its
        setting) reads ``key``, never the message.
    problem
        What is wrong, without the file and without the leading ``label``.
    label
        How the message names the key before ": " (default: ``key``; "grid.box_size[1]" for an
        array element; "config" for the document). ``""`` when ``problem`` names the key
        itself ("[sampler] unknown key 'zzz' ...", "unknown table [samplr] ...").
    source
        The config file, when the text came from one (``load_config``, ``parse_config``'s
        ``source``); None otherwise.

    ``str(err)`` is the message users see: ``"{source}: {label}: {problem}"`` with the empty
    parts left out, e.g. "run.toml: sampler.num_warmup: must be a non-negative integer, got -5
    (an integer)" or "[sampler] unknown key 'zzz' (allowed: ...)".
    """

    def __init__(self, key: str | None, problem: str, *, label: str | None = None,
                 source: str | None = None):
        self.key = key
        self.problem = problem
        self.label = (key or "") if label is None else label
        self.source = source
        super().__init__(": ".join(part for part in (source, self.label, problem) if part))

    def in_file(self, source: str) -> "ConfigError":
        """The same error, its message prefixed by the file it came from."""
        return ConfigError(self.key, self.problem, label=self.label, source=source)

    def __reduce__(self):
        # Exceptions pickle as cls(*args); keep key, label and source across processes.
        return (_config_error, (self.key, self.problem, self.label, self.source))


def _config_error(key, problem, label, source) -> ConfigError:
    return ConfigError(key, problem, label=label, source=source)


# --------------------------------------------------------------------------- sections


#: A number = fixed; a ``core.priors`` object = sampled (the config's own spelling of a
#: fixed value stays a plain number).
PriorValue = float | SampledPrior


@dataclass(frozen=True)
class ModelSection:
    """``[model]``: the kind; for ``kind = "python"`` the model file (relative to the config
    file) and the dtype it runs in."""

    kind: str = "field"
    file: str | None = None
    dtype: str | None = None


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
    power_law_cutoff; amplitude, index, k_pivot for "table" and "band_powers"; the band
    entries outside "band_powers"; A, c, sigma for the field).

    Band powers (``kind = "band_powers"``, ``core.field.power_spectrum.BandPowers``): ``n_bins``
    bins with edges from the grid (``band_edges``) or the given ``edges`` (then ``n_bins`` is
    None), each bin's power sampled with the prior ``band_power`` (lognormal), and
    ``random_walk_scale``: None (independent bins) or the prior sd of log P_{b+1} - log P_b.
    """

    kind: str | None = "power_law"
    k_pivot: float | None = 0.1
    amplitude: PriorValue | None = 1.0
    index: PriorValue | None = NormalPrior(loc=-2.0, scale=0.5)
    cutoff_scale: PriorValue | None = None
    table: str | None = None
    n_bins: int | None = None
    edges: tuple[float, ...] | None = None
    band_power: PriorValue | None = None
    random_walk_scale: float | None = None
    A: PriorValue | None = None
    c: PriorValue | None = None
    sigma: PriorValue | None = None


@dataclass(frozen=True)
class LikelihoodSection:
    kind: str = "gaussian"
    smoothing_scale: float = 0.0    # R of the beam exp(-(k R)^2 / 2); 0 = no beam
    field_mean: float = 0.0
    mean_count: float | None = None  # poisson_lognormal only
    file: str | None = None          # python only: the model file defining log_likelihood


@dataclass(frozen=True)
class FieldSection:
    parameterisation: str = "whitened"
    dtype: str = "float32"
    shard: str = "none"               # SHARDS: the field cut over sampler.devices


@dataclass(frozen=True)
class SamplerSection:
    """``[sampler]``. These defaults are what a config FILE means when it omits a key: a file
    without ``sampler.algorithm`` runs HMC (10 leapfrog steps, identity mass), as it always
    has, so old config files keep their results. A config Fieldscope creates (the desktop
    app's new config, File > New from data, ``core.config.new_config``; the demos choose per
    model) writes ``NEW_CONFIG_SAMPLERS[kind]`` explicitly instead: the sampler that measured best."""

    algorithm: str = "hmc"
    num_warmup: int = 200
    num_samples: int = 500
    num_leapfrog_steps: int = 10
    step_size: float = 0.1            # first guess of the initial step-size search; then adapted in warmup
    target_accept: float = 0.75
    preconditioner: str = "identity"  # PRECONDITIONERS
    dense_modes: int = DEFAULT_DENSE_MODES  # the fourier preconditioner's dense low-k block
    chains: int = 2
    seed: int = 42
    thin: int = 5
    chunk_size: int = 25
    devices: int | str = 1            # the chains spread over N devices, or "all" the GPUs (MAX_DEVICES)
    interweave: bool = False          # sampled P(k): the centred move after each transition (ASIS)

    @property
    def adapt_mass_matrix(self) -> bool:
        """The older spelling: a diagonal mass matrix adapted in warmup."""
        return self.preconditioner == "diagonal"


#: The sampler settings every newly created config writes over ``SamplerSection``'s defaults, by
#: model kind (docs/benchmarks.md, issues #12 and #30).
#:
#: field: MCLMC with the conditional preconditioner (the fourier per-mode scale, each mode centred
#: on its posterior mean given P(k); the dense low-k block with a mask or noise map; sampled
#: hyperparameters start at the scale of their curvature and get the adapted metric, dense for
#: two or more), 1000
#: warmup steps and 2000 draws (6000 gradient evaluations a chain), keeping every 20th field draw.
#: With P(k) fixed, "conditional" is "fourier" shifted by a constant: on the 32^3 benchmark
#: posterior MCLMC + fourier gave n_eff per 1000 gradients 327 (no mask) and 241 (25 % slab),
#: against 10.2 / 8.0 for the first default (HMC, identity) and 27.1 / 12.7 for HMC + diagonal.
#: With P(k) sampled (``bench/hyper_efficiency.py``) "fourier" let the well-measured modes pin
#: the spectrum: index R-hat 1.88 and bulk ESS 4 on issue #30's 48^3 case (conditional: 1.003,
#: 1262), R-hat 1.40 with index and amplitude sampled through a 25 % slab (1.03), an index sd 0.31
#: of the exact one at noise 0.1 (0.975). MCLMC is unadjusted: the field's posterior std comes
#: out 0.99 of the exact one; MAMS or HMC are exact where that matters.
#: integral: HMC with the adapted diagonal mass: on the integral demo's 3-parameter posterior it
#: measured best (0.024 ESS per gradient, MCLMC 0.017, NUTS 0.012).
NEW_CONFIG_SAMPLERS = {
    "field": {"algorithm": "mclmc", "preconditioner": "conditional", "num_warmup": 1000,
              "num_samples": 2000, "thin": 20},
    "integral": {"algorithm": "hmc", "preconditioner": "diagonal"},
    # a model file's scalar model has a geometry nobody measured: NUTS chooses its trajectory
    # length per draw, the diagonal adapts to the parameters' scales
    "python": {"algorithm": "nuts", "preconditioner": "diagonal"},
}

#: What File > New from data (``core.config.from_data``) writes over ``NEW_CONFIG_SAMPLERS["field"]``
#: where the prior samples P(k) hyperparameters and the data couple the Fourier modes (a mask,
#: NaN voxels, a noise map): MAMS, the Metropolis-adjusted form, which MCLMC's conditional centre
#: and metric serve as well. MCLMC is unadjusted, and there each mode's share of its bias adds up
#: in the hyperparameters: bench/hyper_efficiency.py (32^3, 25 % slab, index and amplitude
#: sampled, seeds 1 / 42 / 43) had MCLMC 0.24-0.37 of their exact sd off the exact posterior mean,
#: MAMS (with P(k) sampled 8 integration steps a trajectory, ``core.engine.adaptation.mams_tuning``)
#: 0.00-0.03 sd, with R-hat <= 1.004 and bulk ESS >= 1049 in the same 1000 + 2000 steps, at about
#: 1/6 MCLMC's ESS per gradient (docs/benchmarks.md). Not where the mask misses whole planes along
#: one axis (a slab) with one noise level: "conditional" is exact there
#: (``core.field.observations.slab_decouples``), nothing couples the modes, and MCLMC stays.
COUPLED_HYPER_SAMPLER = {"algorithm": "mams"}


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
    #: ``[parameters]``: a model file's PARAMETERS overridden by the config (name -> a number,
    #: fixed, or a ``core.priors`` object); names the file does not define are refused when
    #: the file is loaded (parsing a config never executes it)
    parameters: dict = dataclass_field(default_factory=dict)
    base_dir: Path = dataclass_field(default_factory=lambda: Path(os.path.abspath(".")))

    def resolve_path(self, p) -> Path:
        """``p`` (str or path) relative to the config file's directory; absolute and
        ``~`` paths are kept as they are."""
        path = Path(os.path.expanduser(os.fspath(p)))
        return path if path.is_absolute() else self.base_dir / path

    @property
    def data_path(self) -> Path:
        return self.resolve_path(self.data.path)

    @property
    def model_file(self) -> Path | None:
        """The model file this config runs (absolute), or None for the built-in models."""
        setting = model_file_setting(self)
        if setting is None:
            return None
        return self.resolve_path(self.model.file if setting == "model.file" else self.likelihood.file)


def uses_model_file(config: RunConfig) -> bool:
    """Whether a run of ``config`` executes a model file's code."""
    return model_file_setting(config) is not None


def model_file_setting(config: RunConfig) -> str | None:
    """"model.file", "likelihood.file", or None: the key naming the config's model file."""
    if config.model.kind == "python":
        return "model.file"
    if config.likelihood is not None and config.likelihood.kind == "python":
        return "likelihood.file"
    return None


