"""Tests of core.config: parsing, defaults, validation messages, TOML round trips, fuzz."""

import collections
import dataclasses
import math
import pickle
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import config as C
from core.config import ConfigError
from core.priors import HalfNormalPrior, NormalPrior, UniformPrior

ROOT = Path(__file__).resolve().parents[3]

FIELD = """
[model]
kind = "field"
[data]
path = "data.npz"
"""
INTEGRAL = """
[model]
kind = "integral"
[data]
path = "series.csv"
"""


# --------------------------------------------------------------------------- basics


def test_import_pulls_in_neither_tensorflow_nor_qt():
    code = ("import sys, core.config as c; c.default_config('field'); "
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'PySide6', 'PyQt5', 'PyQt6', 'pyqtgraph', 'vispy', 'scipy')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    # An integral config needs the integral model's prior registry (scipy), still no TF.
    code = ("import sys, core.config as c; c.default_config('integral'); "
            "assert 'tensorflow' not in sys.modules; assert 'PySide6' not in sys.modules")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The built-in demos, as the app writes them (core.demo is their one source)."""
    from core.demo import write_demo

    return write_demo(tmp_path_factory.mktemp("demo"))


@pytest.mark.parametrize("name", ["field_config", "exact_config", "integral_config"])
def test_example_configs_parse_and_round_trip(demo, name):
    cfg = C.load_config(demo[name])
    assert cfg.base_dir == demo[name].parent
    assert cfg.data_path == demo[name].parent / cfg.data.path
    assert cfg.data_path.exists()
    assert C.parse_config(C.dump_config(cfg), base_dir=cfg.base_dir) == cfg


def test_demo_field_values(demo):
    from core.demo import DEMO_BOX, DEMO_NOISE, DEMO_SPECTRUM

    cfg = C.load_config(demo["field_config"])
    assert cfg.prior.index == NormalPrior(loc=-1.5, scale=0.3)
    assert cfg.prior.amplitude == DEMO_SPECTRUM["amplitude"] == 2000.0
    assert cfg.data.mask == "mask" and cfg.data.noise_sigma == DEMO_NOISE
    assert cfg.grid.box_size == (DEMO_BOX,) * 3 == (200.0, 200.0, 200.0)
    assert cfg.grid.unit == "Mpc/h"
    assert cfg.integral is None
    exact = C.load_config(demo["exact_config"])
    assert exact.prior.index == DEMO_SPECTRUM["index"]
    assert exact.data == cfg.data
    assert exact.sampler == dataclasses.replace(cfg.sampler, algorithm=exact.sampler.algorithm)


def test_the_demos_sample_with_what_new_from_data_writes_for_their_data(demo):
    """The demo's data have a mask: with the index sampled, File > New from data writes MAMS
    (MCLMC's bias adds up in P(k) there: core.store.advice); with P(k) fixed, MCLMC."""
    from core.config.from_data import _sampler_for

    for name, algorithm in (("field_config", "mams"), ("exact_config", "mclmc")):
        document = tomllib.loads(demo[name].read_text())
        assert document["sampler"]["algorithm"] == algorithm, name
        document["sampler"].update(C.NEW_CONFIG_SAMPLERS["field"])
        _sampler_for(document, ["mask"], [])
        assert document["sampler"]["algorithm"] == algorithm, name


def test_defaults_are_filled():
    cfg = C.parse_config(FIELD, base_dir="/tmp/run")
    assert cfg.sampler == C.SamplerSection()
    assert cfg.sampler.num_warmup == 200 and cfg.sampler.chunk_size == 25
    assert cfg.field == C.FieldSection("whitened", "float32")
    assert cfg.likelihood == C.LikelihoodSection("gaussian", 0.0, 0.0, None)
    assert cfg.data == C.DataSection("data.npz", "data", 1.0, None, None)
    assert cfg.prior.kind == "power_law" and cfg.prior.k_pivot == 0.1
    assert cfg.prior.cutoff_scale is None
    assert cfg.resolve_path("x.npy") == Path("/tmp/run/x.npy")
    assert cfg.resolve_path("/abs/x.npy") == Path("/abs/x.npy")
    assert C.default_config("field", "data.npz", base_dir="/tmp/run") == cfg

    icfg = C.parse_config(INTEGRAL)
    assert icfg.integral == C.IntegralSection(refine=8)
    assert icfg.grid is icfg.likelihood is icfg.field is None
    assert icfg.prior.sigma == HalfNormalPrior(scale=1.0)
    assert icfg.prior.kind is None
    assert C.default_config("integral") == icfg


def test_a_file_without_a_sampler_means_identity_mass_and_a_new_config_says_what_measured_best():
    old = C.parse_config(FIELD, base_dir="/tmp/run")
    assert old.sampler.algorithm == "hmc" and old.sampler.preconditioner == "identity"
    expected = {"field": C.SamplerSection(algorithm="mclmc", preconditioner="conditional", num_warmup=1000,
                                          num_samples=2000, thin=20),
                "integral": C.SamplerSection(algorithm="hmc", preconditioner="diagonal"),
                "python": C.SamplerSection(algorithm="nuts", preconditioner="diagonal")}
    for kind in C.MODEL_KINDS:
        new = C.new_config(kind, base_dir="/tmp/run")
        assert new.sampler == expected[kind]
        assert dataclasses.replace(new, sampler=C.SamplerSection()) == C.default_config(
            kind, base_dir="/tmp/run")
        # written out, the new sampler is explicit: it reads back as it was
        assert C.parse_config(C.dump_config(new), base_dir="/tmp/run") == new


def test_model_kind_defaults_to_field():
    assert C.parse_config('[data]\npath = "d.npy"\n').model.kind == "field"


def test_kind_specific_keys():
    cfg = C.parse_config(FIELD + '[prior]\nkind = "power_law_cutoff"\n'
                         'cutoff_scale = { dist = "uniform", low = 0.0, high = 5.0 }\n')
    assert cfg.prior.cutoff_scale == UniformPrior(low=0.0, high=5.0)
    cfg = C.parse_config(FIELD + '[prior]\nkind = "table"\ntable = "pk.txt"\n')
    assert cfg.prior.table == "pk.txt" and cfg.prior.index is None
    cfg = C.parse_config(FIELD.replace('path = "data.npz"', 'path = "d.h5"\nnoise_map = "n"')
                         + "[grid]\nbox_size = [1, 2.5, 3]\n")
    assert cfg.data.noise_map == "n" and cfg.data.noise_sigma is None
    assert cfg.grid.box_size == (1.0, 2.5, 3.0)
    cfg = C.parse_config(FIELD + '[likelihood]\nkind = "poisson_lognormal"\n')
    assert cfg.likelihood.mean_count == 1.0 and cfg.data.noise_sigma is None
    # a fixed value written as {value = x} is normalised to the number
    cfg = C.parse_config(FIELD + "[prior]\nindex = { value = -1.5 }\n")
    assert cfg.prior.index == -1.5
    for text in (FIELD, INTEGRAL, C.dump_config(cfg)):
        c = C.parse_config(text)
        assert C.parse_config(C.dump_config(c)) == c


def test_integral_noise_sigma_is_a_fixed_sigma():
    cfg = C.parse_config(INTEGRAL + "noise_sigma = 0.5\n[prior]\nc = 0\n")
    assert cfg.prior.sigma == 0.5 and cfg.prior.c == 0.0 and isinstance(cfg.prior.c, float)
    assert "sigma = 0.5" in C.dump_config(cfg)
    assert C.parse_config(C.dump_config(cfg)) == cfg


def test_load_config_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config") as info:
        C.load_config(tmp_path / "missing.toml")
    assert info.value.key is None and info.value.source == str(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"[model]\nkind = \xff\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: not UTF-8"):
        C.load_config(bad)
    bad.write_text(FIELD + "[sampler]\nnum_warmup = -5\n")
    with pytest.raises(ConfigError) as info:
        C.load_config(bad)
    assert str(info.value) == (f"{bad}: sampler.num_warmup: must be a non-negative integer, "
                               "got -5 (an integer)")
    assert info.value.key == "sampler.num_warmup" and info.value.source == str(bad)
    assert info.value.problem == "must be a non-negative integer, got -5 (an integer)"
    # it survives pickling (the engine process reports errors to its clients) intact
    again = pickle.loads(pickle.dumps(info.value))
    assert (str(again), again.key, again.problem, again.label, again.source) == (
        str(info.value), "sampler.num_warmup", info.value.problem, "sampler.num_warmup", str(bad))
    bad.write_text("[model]\nkind = \"field\"\n[data]\npath = 'x.npz\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: TOML syntax error: .*end of document, "
                       r"line 4"):
        C.load_config(bad)
    bad.write_text("[model]\nkind = \"field\"\n[data]\npath = x.npz\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: TOML syntax error: Invalid value "
                       r"\(at line 4, column 8\)"):
        C.load_config(bad)


def test_registries_are_the_model_modules_own():
    from core import integral as integral_model
    # one definition, imported: the config's names are the model module's objects
    assert C.INTEGRAL_PARAMETERS is integral_model.PARAMETERS
    assert C.INTEGRAL_PARAMETERS == ("A", "c", "sigma")
    # PARAMETERISATIONS: the engine's field model accepts exactly these (checked there,
    # in tests/core/engine/test_field_model.py, which may import TensorFlow)


# --------------------------------------------------------------------------- bad input

F = FIELD
I = INTEGRAL
BAD = [
    # (document, expected substring of the message, the key the error carries)
    (F + "[sampler]\nnum_warmpu = 3\n",
     "[sampler] unknown key 'num_warmpu' (did you mean 'num_warmup'?)", 'sampler.num_warmpu'),
    (F + "[sampler]\nzzz = 3\n", "[sampler] unknown key 'zzz' (allowed:", 'sampler.zzz'),
    (F + "[samplr]\nseed = 1\n", "unknown table [samplr] (did you mean [sampler]?)", 'samplr'),
    (F + "[extra]\n", "unknown table [extra]", 'extra'),
    ("verbose = true\n" + F, "unknown top-level key 'verbose'", 'verbose'),
    ("sampler = 3\n" + F, "sampler: must be a table [sampler], got 3", 'sampler'),
    (F + "[sampler]\nnum_warmup = -5\n",
     "sampler.num_warmup: must be a non-negative integer, got -5", 'sampler.num_warmup'),
    (F + "[sampler]\nnum_samples = 0\n", "sampler.num_samples: must be a positive integer", 'sampler.num_samples'),
    (F + "[sampler]\nnum_samples = \"10\"\n", "sampler.num_samples: must be a positive integer, "
     'got "10" (a string)', 'sampler.num_samples'),
    (F + "[sampler]\nnum_samples = 10.0\n", "sampler.num_samples: must be a positive integer", 'sampler.num_samples'),
    (F + "[sampler]\nchains = true\n", "sampler.chains: must be a positive integer, got true", 'sampler.chains'),
    (F + "[sampler]\nchains = 0\n", "sampler.chains", 'sampler.chains'),
    (F + "[sampler]\nthin = 0\n", "sampler.thin", 'sampler.thin'),
    (F + "[sampler]\nchunk_size = -1\n", "sampler.chunk_size", 'sampler.chunk_size'),
    (F + "[sampler]\nnum_leapfrog_steps = 0\n", "sampler.num_leapfrog_steps", 'sampler.num_leapfrog_steps'),
    (F + "[sampler]\nseed = -1\n", "sampler.seed: must be a non-negative integer", 'sampler.seed'),
    (F + "[sampler]\ndense_modes = -1\n", "sampler.dense_modes: must be a non-negative integer",
     'sampler.dense_modes'),
    (F + "[sampler]\ndense_modes = 2.5\n", "sampler.dense_modes", 'sampler.dense_modes'),
    (F + "[sampler]\ndevices = 0\n", "sampler.devices: must be a positive integer", 'sampler.devices'),
    (F + "[sampler]\ndevices = \"gpu\"\n", 'sampler.devices: must be "all" or a positive integer',
     'sampler.devices'),
    (F + "[sampler]\nchains = 2\ndevices = 4\n", "sampler.devices: may be at most sampler.chains = 2",
     'sampler.devices'),
    (F + "[sampler]\nchains = 100\ndevices = 65\n", "sampler.devices: may be at most 64", 'sampler.devices'),
    (F + "[field]\nshard = \"slabs\"\n", "field.shard: must be one of 'none', 'slab', 'pencil'", 'field.shard'),
    (F + "[field]\nshard = \"slab\"\nparameterisation = \"white_noise\"\n",
     "sampler.devices: field.shard = 'slab' cuts the field over sampler.devices: give 2 or more",
     'sampler.devices'),
    (F + "[field]\nshard = \"pencil\"\n[sampler]\ndevices = 4\n",
     "field.parameterisation: field.shard = 'pencil' cuts the field over sampler.devices: it needs "
     "\"white_noise\"", 'field.parameterisation'),
    (F + "[field]\nshard = \"slab\"\nparameterisation = \"white_noise\"\n[sampler]\ndevices = 2\n"
     "[likelihood]\nkind = \"poisson_lognormal\"\n", "likelihood.kind: field.shard = 'slab'", 'likelihood.kind'),
    (F + "[field]\nshard = \"slab\"\nparameterisation = \"white_noise\"\n[sampler]\ndevices = 2\n"
     "preconditioner = \"conditional\"\n", "sampler.preconditioner: field.shard = 'slab' cuts the field over "
     "sampler.devices: 'conditional' scales each Fourier mode of a whole field; use \"identity\" or \"diagonal\"",
     'sampler.preconditioner'),
    (F + "[sampler]\nseed = 1.5\n", "sampler.seed", 'sampler.seed'),
    (F + "[sampler]\nstep_size = 0\n", "sampler.step_size: must be a positive finite number", 'sampler.step_size'),
    (F + "[sampler]\nstep_size = inf\n", "sampler.step_size", 'sampler.step_size'),
    (F + "[sampler]\nstep_size = nan\n", "sampler.step_size", 'sampler.step_size'),
    (F + "[sampler]\nstep_size = false\n", "sampler.step_size: must be a positive finite number, "
     "got false (a boolean)", 'sampler.step_size'),
    (F + "[sampler]\ntarget_accept = 1\n", "sampler.target_accept: must be a number strictly "
     "between 0 and 1", 'sampler.target_accept'),
    (F + "[sampler]\ntarget_accept = 0.0\n", "sampler.target_accept", 'sampler.target_accept'),
    (F + "[sampler]\nadapt_mass_matrix = 1\n", "sampler.adapt_mass_matrix: must be true or false", 'sampler.adapt_mass_matrix'),
    (F + "[sampler]\ninterweave = \"yes\"\n", "sampler.interweave: must be true or false", 'sampler.interweave'),
    (F + "[sampler]\nalgorithm = \"mclmc\"\ninterweave = true\n", "sampler.interweave: needs a sampler with an accept step", 'sampler.interweave'),
    (F + "[sampler]\nalgorithm = \"nutz\"\n", "sampler.algorithm: must be one of 'hmc', 'hmc_jittered', "
     "'nuts', 'mclmc', 'mams', got \"nutz\" (a string) (did you mean 'nuts'?)", 'sampler.algorithm'),
    (F + "[model]\n", "Cannot declare", None),     # TOML syntax: table declared twice
    ("[model]\nkind = \"fields\"\n[data]\npath = \"d.npz\"\n",
     "model.kind: must be one of 'field', 'integral'", 'model.kind'),
    ("[model]\nkind = \"field\"\n", "data.path: missing", 'data.path'),
    ("[model]\nkind = \"field\"\n[data]\nkey = \"x\"\n", "data.path: missing", 'data.path'),
    (F.replace('"data.npz"', '""'), "data.path: must not be empty", 'data.path'),
    (F.replace('"data.npz"', "3"), "data.path: must be a string, got 3", 'data.path'),
    (F.replace('"data.npz"', '"data.csv"'), "data.path: 'data.csv' has extension '.csv'; "
     "accepted: .npy, .npz, .h5, .hdf5", 'data.path'),
    (I.replace('"series.csv"', '"s.npz"'), "accepted: .csv, .txt, .dat", 'data.path'),
    (F.replace('"data.npz"', '"data"'), "extension '(none)'", 'data.path'),
    (F + "noise_sigma = 0\n", "data.noise_sigma: must be a positive finite number", 'data.noise_sigma'),
    (F + "noise_sigma = 1.0\nnoise_map = \"n\"\n", "data.noise_map: give either", 'data.noise_map'),
    (F + "mask = true\n", "data.mask: must be a string, got true", 'data.mask'),
    (F + "[likelihood]\nkind = \"poisson_lognormal\"\n[data]\n", "Cannot declare", None),
    (F + "noise_sigma = 2.0\n[likelihood]\nkind = \"poisson_lognormal\"\n",
     "[data] key 'noise_sigma' does not apply to likelihood.kind = 'poisson_lognormal'", 'data.noise_sigma'),
    (F + "[likelihood]\nmean_count = 3.0\n",
     "[likelihood] key 'mean_count' applies only to likelihood.kind = 'poisson_lognormal'", 'likelihood.mean_count'),
    (F + "[likelihood]\nkind = \"poisson_lognormal\"\nmean_count = 0\n",
     "likelihood.mean_count: must be a positive finite number", 'likelihood.mean_count'),
    (F + "[likelihood]\nsmoothing_scale = -1.0\n", "likelihood.smoothing_scale: must be a "
     "finite number >= 0", 'likelihood.smoothing_scale'),
    (F + "[likelihood]\nkind = \"gauss\"\n", "likelihood.kind: must be one of", 'likelihood.kind'),
    (F + "[likelihood]\nfield_mean = \"0\"\n", "likelihood.field_mean: must be a finite number", 'likelihood.field_mean'),
    (F + "[grid]\nbox_size = 0\n", "grid.box_size: must be a positive finite number", 'grid.box_size'),
    (F + "[grid]\nbox_size = [1.0, 2.0]\n", "grid.box_size: must be one number or a list of "
     "three", 'grid.box_size'),
    (F + "[grid]\nbox_size = [1.0, -2.0, 3.0]\n", "grid.box_size[1]: must be a positive", 'grid.box_size'),
    (F + "[grid]\nbox_size = \"100\"\n", "grid.box_size: must be one number or a list of three", 'grid.box_size'),
    (F + "[grid]\nbox_size = inf\n", "grid.box_size", 'grid.box_size'),
    (F + "[grid]\nunit = 3\n", "grid.unit: must be a string", 'grid.unit'),
    (F + "[field]\ndtype = \"float16\"\n", "field.dtype: must be one of 'float32', 'float64'", 'field.dtype'),
    (F + "[field]\nparameterisation = \"whitend\"\n", "(did you mean 'whitened'?)", 'field.parameterisation'),
    (F + "[field]\nparameterization = \"whitened\"\n",
     "[field] unknown key 'parameterization' (did you mean 'parameterisation'?)", 'field.parameterization'),
    (F + "[prior]\nindex = { dist = \"gamma\", loc = 0.0, scale = 1.0 }\n",
     "prior.index: unknown dist 'gamma'; known: ['lognormal', 'normal', 'uniform']", 'prior.index'),
    (F + "[prior]\nindex = { dist = \"normal\", loc = 0.0, sigma = 1.0 }\n",
     "prior.index: normal prior takes ['loc', 'scale']; unknown ['sigma']", 'prior.index'),
    (F + "[prior]\nindex = { dist = \"normal\", loc = 0.0 }\n", "prior.index: normal prior "
     "needs ['loc', 'scale']; missing ['scale']", 'prior.index'),
    (F + "[prior]\nindex = { dist = \"normal\", loc = 0.0, scale = -1.0 }\n",
     "prior.index.scale: must be > 0, got -1.0", 'prior.index.scale'),
    (F + "[prior]\nindex = { dist = 3 }\n", "prior.index", 'prior.index.dist'),
    (F + "[prior]\nindex = { dist = [1] }\n", "prior.index", 'prior.index.dist'),
    (F + "[prior]\nindex = \"flat\"\n", "prior.index", 'prior.index'),
    (F + "[prior]\namplitude = { dist = \"halfnormal\", scale = 1.0 }\n", "prior.amplitude", 'prior.amplitude'),
    (F + "[prior]\namplitude = -1.0\n", "prior.amplitude: power_law amplitude = -1.0: must be "
     "positive", 'prior.amplitude'),
    (F + "[prior]\nk_pivot = { dist = \"normal\", loc = 0.1, scale = 0.01 }\n",
     "prior.k_pivot: must be a number (a fixed convention, never sampled)", 'prior.k_pivot'),
    (F + "[prior]\nk_pivot = 0\n", "prior.k_pivot", 'prior.k_pivot'),
    (F + "[prior]\ncutoff_scale = 1.0\n",
     "[prior] key 'cutoff_scale' applies only to prior.kind = 'power_law_cutoff'", 'prior.cutoff_scale'),
    (F + "[prior]\nkind = \"power_law_cutoff\"\ncutoff_scale = -1.0\n", "prior.cutoff_scale", 'prior.cutoff_scale'),
    (F + "[prior]\nkind = \"table\"\n", "prior.table: missing", 'prior.table'),
    (F + "[prior]\nkind = \"table\"\ntable = \"pk.txt\"\nindex = 1.0\n",
     "[prior] key 'index' does not apply to prior.kind = 'table'", 'prior.index'),
    (F + "[prior]\ntable = \"pk.txt\"\n", "[prior] key 'table' applies only to prior.kind = "
     "'table'", 'prior.table'),
    (F + "[prior]\nkind = \"powerlaw\"\n", "(did you mean 'power_law'?)", 'prior.kind'),
    (F + "[prior]\nkind = \"band_powers\"\n", "prior.band_power: missing; band powers need each bin's prior, "
     "e.g. band_power = {dist = \"lognormal\"", 'prior.band_power'),
    (F + "[prior]\nkind = \"band_powers\"\nband_power = 3.0\n", "prior.band_power: band powers are sampled",
     'prior.band_power'),
    (F + "[prior]\nkind = \"band_powers\"\nband_power = { dist = \"normal\", loc = 0.0, scale = 1.0 }\n",
     "prior.band_power: unknown dist 'normal'; known: ['lognormal']", 'prior.band_power'),
    (F + "[prior]\nkind = \"band_powers\"\nn_bins = 0\n", "prior.n_bins: must be a positive integer", 'prior.n_bins'),
    (F + "[prior]\nkind = \"band_powers\"\nn_bins = 600\n", "prior.n_bins: may be at most 512", 'prior.n_bins'),
    (F + "[prior]\nkind = \"band_powers\"\nedges = [0.2, 0.1]\n", "prior.edges: must be positive, finite and "
     "strictly increasing", 'prior.edges'),
    (F + "[prior]\nkind = \"band_powers\"\nedges = [0.1]\n", "prior.edges: must be a list of at least 2",
     'prior.edges'),
    (F + "[prior]\nkind = \"band_powers\"\nedges = [0.1, 0.2]\nn_bins = 3\n", "give either prior.n_bins",
     'prior.edges'),
    (F + "[prior]\nkind = \"band_powers\"\nindex = -2.0\n", "[prior] key 'index' does not apply to "
     "prior.kind = 'band_powers'", 'prior.index'),
    (F + "[prior]\nkind = \"band_powers\"\nrandom_walk_scale = 0\nband_power = { dist = \"lognormal\", "
     "loc = 0.0, scale = 1.0 }\n", "prior.random_walk_scale: must be a positive", 'prior.random_walk_scale'),
    (F + "[prior]\nn_bins = 16\n", "[prior] key 'n_bins' applies only to prior.kind = 'band_powers'", 'prior.n_bins'),
    (F + "[prior]\nA = 1.0\n", "[prior] key 'A' applies only to the integral model", 'prior.A'),
    (F + "[integral]\nrefine = 4\n", "[integral] applies only to model.kind = 'integral'", 'integral'),
    (I + "[grid]\nbox_size = 1.0\n", "[grid] applies only to model.kind = 'field'", 'grid'),
    (I + "[field]\n", "[field] applies only", 'field'),
    (I + "[likelihood]\n", "[likelihood] applies only", 'likelihood'),
    (I + "key = \"data\"\n", "[data] key 'key' applies only to the field model", 'data.key'),
    (I + "[integral]\nrefine = 0\n", "integral.refine: must be a positive integer, got 0", 'integral.refine'),
    (I + "[integral]\nrefine = true\n", "integral.refine: must be a positive integer, got true", 'integral.refine'),
    (I + "[integral]\nrefin = 2\n", "(did you mean 'refine'?)", 'integral.refin'),
    (I + "[prior]\nA = { dist = \"gamma\", loc = 0.0, scale = 1.0 }\n",
     "prior.A: unknown dist 'gamma'", 'prior.A'),
    (I + "[prior]\nA = { loc = 0.0, scale = 1.0 }\n", "prior.A: a prior mapping needs a 'dist'", 'prior.A'),
    (I + "[prior]\nA = { dist = \"normal\", loc = 0.0, scale = 1.0, low = 0.0 }\n",
     "prior.A: normal prior takes ['loc', 'scale']; unknown ['low']", 'prior.A'),
    (I + "[prior]\nA = { dist = [1] }\n", "prior.A.dist: must be a name", 'prior.A.dist'),
    (I + "[prior]\nc = \"zero\"\n", "prior.c: must be a number (fixed) or a prior table", 'prior.c'),
    (I + "[prior]\nc = true\n", "prior.c: must be a number", 'prior.c'),
    (I + "[prior]\nsigma = -1.0\n", "prior.sigma: the noise sd must be > 0", 'prior.sigma'),
    (I + "[prior]\nsigma = { dist = \"normal\", loc = 1.0, scale = 1.0 }\n",
     "prior.sigma: a normal prior allows sigma <= 0", 'prior.sigma'),
    (I + "[prior]\nsigma = { dist = \"uniform\", low = -1.0, high = 1.0 }\n", "prior.sigma: "
     "uniform low = -1.0 < 0", 'prior.sigma'),
    (I + "[prior]\nB = 1.0\n", "[prior] unknown key 'B'", 'prior.B'),
    (I + "[prior]\nkind = \"power_law\"\n", "[prior] key 'kind' applies only to the field model", 'prior.kind'),
    (I + "noise_sigma = -2\n", "data.noise_sigma: must be a positive finite number, got -2", 'data.noise_sigma'),
    (I + "noise_sigma = 1.0\n[prior]\nsigma = 1.0\n", "data.noise_sigma: give either", 'data.noise_sigma'),
    (F + "[sampler]\nseed = 99999999999999999999\n", "sampler.seed: must be a non-negative integer", 'sampler.seed'),
    ("x = \n", "TOML syntax error: Invalid value (at line 1, column 5)", None),
    ("[model\nkind = 1\n", "TOML syntax error", None),
    ("a = 1\na = 2\n", "line 2", None),
    ("v = " + "9" * 5000 + "\n", "TOML value error", None),
    ("v = " + "[" * 50000 + "\n", "TOML", None),
]


def test_a_sharded_field_takes_more_devices_than_chains_and_is_written_back():
    text = (FIELD + "[field]\nshard = \"pencil\"\nparameterisation = \"white_noise\"\n"
            "[sampler]\nchains = 2\ndevices = 8\npreconditioner = \"diagonal\"\n")
    cfg = C.parse_config(text, base_dir="/tmp/run")
    assert (cfg.field.shard, cfg.sampler.devices, cfg.sampler.chains) == ("pencil", 8, 2)
    assert 'shard = "pencil"' in C.dump_config(cfg)
    assert C.parse_config(C.dump_config(cfg), base_dir=cfg.base_dir) == cfg
    assert C.parse_config(FIELD).field.shard == "none"


@pytest.mark.parametrize("text,expected,key", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_names_the_key(text, expected, key):
    with pytest.raises(ConfigError) as info:
        C.parse_config(text)
    assert expected in str(info.value), str(info.value)
    assert isinstance(info.value, ValueError)
    assert info.value.key == key, str(info.value)
    # the message is the key's label and the problem (no file: parse_config had no source)
    assert str(info.value) == ": ".join(p for p in (info.value.label, info.value.problem) if p)


# --------------------------------------------------------------------------- round trips

finite = st.floats(allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-300, max_value=1e300)
# a float32 field run: every float setting within float32's normal range (core.config.limits)
finite32 = st.floats(-1e38, 1e38)
positive32 = st.floats(min_value=1e-18, max_value=1e38)


def distributions(finite, positive):
    return st.one_of(
        st.builds(lambda a, b: {"dist": "normal", "loc": a, "scale": b}, finite, positive),
        st.builds(lambda a, b: {"dist": "lognormal", "loc": a, "scale": b}, finite, positive),
        st.builds(lambda a, w: {"dist": "uniform", "low": a, "high": a + w},
                  st.floats(-1e6, 1e6), st.floats(1e-3, 1e6)),
    )


distribution = distributions(finite, positive)


def samplers(positive, preconditioners=("identity", "diagonal")):
    return st.fixed_dictionaries({}, optional={
        "algorithm": st.sampled_from(C.ALGORITHMS),
        "num_warmup": st.integers(0, 10**7),
        "num_samples": st.integers(1, 10**7),
        "num_leapfrog_steps": st.integers(1, 2048),
        "step_size": positive,
        "target_accept": st.floats(1e-9, 1 - 1e-9),
        "preconditioner": st.sampled_from(preconditioners),
        "dense_modes": st.integers(0, 4096),
        "chains": st.integers(1, 64),
        "seed": st.integers(0, 2**63 - 1),
        "thin": st.integers(1, 100),
        "chunk_size": st.integers(1, 10**6),
        "devices": st.just("all"),
    })


sampler = samplers(positive)
text = st.text(max_size=30).filter(lambda s: s.strip())


@st.composite
def field_documents(draw):
    dtype = draw(st.sampled_from(C.DTYPES))
    finite_, positive_ = (finite32, positive32) if dtype == "float32" else (finite, positive)
    # 1 / noise_sigma^2 must fit the dtype too
    noise = positive32 if dtype == "float32" else st.floats(1e-150, 1e300)
    distribution = distributions(finite_, positive_)
    kind = draw(st.sampled_from(["power_law", "power_law_cutoff", "table", "band_powers"]))
    if kind == "table":
        prior = {"kind": kind, "table": draw(text)}
    elif kind == "band_powers":
        prior = {"kind": kind}
        if draw(st.booleans()):
            prior["n_bins"] = draw(st.integers(1, 512))
        else:
            steps = draw(st.lists(st.floats(1e-3, 1e3), min_size=1, max_size=20))
            prior["edges"] = [float(v) for v in np.cumsum([draw(st.floats(1e-6, 1e6))] + steps)]
        prior["band_power"] = {"dist": "lognormal", "loc": draw(finite_), "scale": draw(positive_)}
        if draw(st.booleans()):
            prior["random_walk_scale"] = draw(positive_)
    else:
        prior = {"kind": kind, "k_pivot": draw(positive_),
                 "amplitude": draw(st.one_of(positive_, distribution)),
                 "index": draw(st.one_of(finite_, distribution))}
        if kind == "power_law_cutoff":
            prior["cutoff_scale"] = draw(st.one_of(st.floats(0, 1e6), distribution))
    likelihood_kind = draw(st.sampled_from(["gaussian", "poisson_lognormal"]))
    data = {"path": draw(text) + draw(st.sampled_from(C.FIELD_DATA_EXTENSIONS + (".NPZ",))),
            "key": draw(text)}
    likelihood = {"kind": likelihood_kind, "smoothing_scale": draw(st.floats(0, 1e6)),
                  "field_mean": draw(finite_)}
    if likelihood_kind == "gaussian":
        data.update(draw(st.one_of(st.fixed_dictionaries({"noise_sigma": noise}),
                                   st.fixed_dictionaries({"noise_map": text}))))
    else:
        likelihood["mean_count"] = draw(positive_)
    if draw(st.booleans()):
        data["mask"] = draw(text)
    box = draw(st.one_of(positive_, st.lists(positive_, min_size=3, max_size=3)))
    parameterisation = draw(st.sampled_from(C.PARAMETERISATIONS))
    preconditioners = ("identity", "diagonal") + (
        C.PER_MODE_PRECONDITIONERS if parameterisation in C.FOURIER_PARAMETERISATIONS else ())
    return {"model": {"kind": "field"}, "data": data,
            "grid": {"box_size": box, "unit": draw(st.text(max_size=10))},
            "prior": prior, "likelihood": likelihood,
            "field": {"parameterisation": parameterisation, "dtype": dtype},
            "sampler": draw(samplers(positive_, preconditioners))}


integral_prior = st.one_of(
    finite, distribution,
    st.builds(lambda s: {"dist": "halfnormal", "scale": s}, positive))
sigma_prior = st.one_of(
    positive,
    st.builds(lambda s: {"dist": "halfnormal", "scale": s}, positive),
    st.builds(lambda a, b: {"dist": "lognormal", "loc": a, "scale": b}, finite, positive),
    st.builds(lambda a, w: {"dist": "uniform", "low": a, "high": a + w},
              st.floats(0, 1e6), st.floats(1e-3, 1e6)))


@st.composite
def integral_documents(draw):
    return {"model": {"kind": "integral"},
            "data": {"path": draw(text) + draw(st.sampled_from(C.INTEGRAL_DATA_EXTENSIONS))},
            "integral": {"refine": draw(st.integers(1, 10**6))},
            "prior": {"A": draw(integral_prior), "c": draw(integral_prior),
                      "sigma": draw(sigma_prior)},
            "sampler": draw(sampler)}


documents = st.one_of(field_documents(), integral_documents())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_dump_parse_round_trip(document):
    cfg = C.config_from_dict(document, base_dir="/runs/a")
    text = C.dump_config(cfg)
    again = C.parse_config(text, base_dir="/runs/a")
    assert again == cfg
    assert C.dump_config(again) == text
    assert C.config_from_dict(C.config_to_dict(cfg), "/runs/a") == cfg
    # every value the user gave survives exactly (floats bit for bit)
    out = C.config_to_dict(cfg)
    for table, entries in document.items():
        for key, value in entries.items():
            if table == "grid" and key == "box_size" or table == "data" and key == "noise_sigma" \
                    and document["model"]["kind"] == "integral":
                continue
            assert out[table][key] == value, (table, key)


# arbitrary TOML-able documents, for the serializer alone
scalars = st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1),
                    st.floats(allow_nan=False), st.text())
keys = st.text(max_size=8)
values = st.recursive(scalars | st.lists(scalars, max_size=4),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                          keys, inner, max_size=3), max_leaves=12)
toml_documents = st.dictionaries(keys, values | st.dictionaries(keys, values, max_size=4),
                                 max_size=5)


@settings(max_examples=300, deadline=None)
@given(toml_documents)
def test_to_toml_round_trips_through_tomllib(document):
    assert tomllib.loads(C.to_toml(document)) == document


def test_to_toml_details():
    doc = {"s": 'a"b\\c\n\t\x00\x7f\u00e9\U0001f600', "f": [0.1, -0.0, 1e300, 5e-324, 1e16],
           "i": [0, -2**63, 2**63 - 1], "t": {"x y": {"nested": {"deep": True}}, "e": {}}}
    text = C.to_toml(doc)
    back = tomllib.loads(text)
    assert back == doc
    assert math.copysign(1.0, back["f"][1]) == -1.0
    special = tomllib.loads(C.to_toml({"v": [math.inf, -math.inf, math.nan]}))["v"]
    assert special[:2] == [math.inf, -math.inf] and math.isnan(special[2])
    with pytest.raises(ValueError):
        C.to_toml({"big": 2**63})
    with pytest.raises(ValueError):
        C.to_toml({"s": "\ud800"})
    with pytest.raises(TypeError):
        C.to_toml({"o": object()})
    # a key that ends in a newline is not bare ("$" would have matched before the newline)
    assert tomllib.loads(C.to_toml({"0\n": {"a\n": 1}})) == {"0\n": {"a\n": 1}}


# --------------------------------------------------------------------------- fuzz

def _parse_or_config_error(text, counts) -> None:
    """Parse ``text``: it is a config or a ConfigError with a message (anything else fails
    the example); ``counts`` tallies "parsed" / "rejected"."""
    try:
        C.parse_config(text)
    except ConfigError as exc:
        assert str(exc)
        counts["rejected"] += 1
    else:
        counts["parsed"] += 1


def _run_fuzz(fuzz, name, capsys, *, at_least):
    """Run the Hypothesis test ``fuzz`` (all its examples), then check that it made at
    least ``at_least[outcome]`` cases of each outcome and print the counts."""
    counts = collections.Counter()
    fuzz(counts)
    with capsys.disabled():
        print(f"\nconfig fuzz, {name}: {dict(counts)}")
    for outcome, minimum in at_least.items():
        assert counts[outcome] >= minimum, (outcome, dict(counts))


fuzz_scalars = st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(),
                         st.text(max_size=12), st.sampled_from(
                             ["field", "integral", "normal", "halfnormal", "uniform", "table",
                              "power_law_cutoff", "poisson_lognormal", "nuts", "d.npz",
                              "s.csv", "dist", ""]))
fuzz_keys = st.one_of(st.sampled_from(
    ["model", "data", "grid", "prior", "likelihood", "field", "sampler", "integral", "kind",
     "path", "key", "noise_sigma", "noise_map", "mask", "box_size", "unit", "k_pivot",
     "amplitude", "index", "cutoff_scale", "table", "smoothing_scale", "field_mean",
     "mean_count", "parameterisation", "dtype", "algorithm", "num_warmup", "seed",
     "step_size", "target_accept", "refine", "A", "c", "sigma", "dist", "loc", "scale",
     "low", "high", "value"]), st.text(max_size=6))
fuzz_values = st.recursive(fuzz_scalars | st.lists(fuzz_scalars, max_size=4),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                               fuzz_keys, inner, max_size=4), max_leaves=10)
fuzz_documents = st.dictionaries(
    fuzz_keys, st.dictionaries(fuzz_keys, fuzz_values, max_size=6) | fuzz_values, max_size=8)


@settings(max_examples=200, deadline=None)
@given(document=fuzz_documents)
def _fuzz_random_documents(counts, document):
    _parse_or_config_error(C.to_toml(document), counts)


def test_fuzz_random_documents(capsys):
    # random documents are almost never valid configs
    _run_fuzz(_fuzz_random_documents, "random documents", capsys, at_least={"rejected": 100})


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=documents, data=st.data())
def _fuzz_mutated_valid_documents(counts, document, data):
    table = data.draw(st.sampled_from(sorted(document)))
    action = data.draw(st.sampled_from(["replace", "remove", "add", "replace_table"]))
    entries = dict(document[table])
    if action == "replace_table":
        document[table] = data.draw(fuzz_values)
    elif action == "add" or not entries:
        entries[data.draw(fuzz_keys)] = data.draw(fuzz_values)
        document[table] = entries
    else:
        key = data.draw(st.sampled_from(sorted(entries)))
        if action == "remove":
            del entries[key]
        else:
            entries[key] = data.draw(fuzz_values)
        document[table] = entries
    _parse_or_config_error(C.to_toml(document), counts)


def test_fuzz_mutated_valid_documents(capsys):
    """A valid document with one entry replaced, removed or added: deep validation paths,
    so both outcomes must occur often (a removed key with a default still parses)."""
    _run_fuzz(_fuzz_mutated_valid_documents, "mutated valid documents", capsys,
              at_least={"parsed": 30, "rejected": 150})


@settings(max_examples=400, deadline=None)
@given(text=st.one_of(
    st.text(max_size=200),
    st.binary(max_size=200).map(lambda b: b.decode("utf-8", errors="replace")),
    st.lists(st.sampled_from(["[model]", "[data]", "[prior]", "kind = ", "path = ",
                              '"field"', '"d.npz"', "1", "{", "}", "[", "]", "=",
                              "\n", "'", '"', ",", "dist", "inf", "true"]),
             max_size=30).map("".join)))
def _fuzz_random_text(counts, text):
    _parse_or_config_error(text, counts)


def test_fuzz_random_text(capsys):
    _run_fuzz(_fuzz_random_text, "random text", capsys, at_least={"rejected": 200})
