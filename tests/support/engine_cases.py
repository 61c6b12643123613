"""Small engine runs the engine, fault and process tests share: a field case written to disk
(a Gaussian random field through the synthetic pipeline, and its config), a run, and an
exact comparison of two run stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.config import parse_config
from core.engine.engine import Engine
from core.field.grid import Grid
from core.field.power_spectrum import PowerLaw
from core.field.synthetic import make_dataset, save_dataset
from core.store.run_store import RunReader

FIELD_CONFIG = """\
[model]
kind = "field"
[data]
path = "data.npz"
noise_sigma = {sigma}
{mask_line}
[grid]
box_size = {box}
[prior]
kind = "power_law"
k_pivot = 0.1
amplitude = {amplitude}
index = {index}
[field]
dtype = "{dtype}"
[sampler]
algorithm = "{algorithm}"
num_warmup = {warmup}
num_samples = {samples}
num_leapfrog_steps = {leapfrog}
step_size = 0.1
adapt_mass_matrix = {mass}
chains = {chains}
seed = {seed}
thin = {thin}
chunk_size = {chunk}
"""

DEFAULTS = dict(sigma=0.5, mask_line="", box=64.0, amplitude=300.0, index=-1.5, dtype="float32",
                algorithm="hmc", warmup=150, samples=300, leapfrog=10, mass="true", chains=2, seed=3,
                thin=5, chunk=25)


def write_field_case(tmp_path: Path, shape=(16, 16, 16), mask=False, **overrides):
    values = {**DEFAULTS, **overrides}
    grid = Grid(shape, values["box"])
    spectrum = PowerLaw(amplitude=values["amplitude"], index=-1.5, k_pivot=0.1)
    dataset = make_dataset(grid, spectrum, values["sigma"], mask="slab" if mask else "none",
                           mask_fraction=0.25, seed=11)
    save_dataset(tmp_path / "data.npz", dataset)
    if mask:
        values["mask_line"] = 'mask = "mask"'
    text = FIELD_CONFIG.format(**values)
    (tmp_path / "run.toml").write_text(text)
    return parse_config(text, base_dir=tmp_path), text, dataset, grid, spectrum


def run(config, text, run_dir, **kwargs):
    events = []
    engine = Engine(config, text, run_dir, emit=events.append, **kwargs)
    status = engine.start()
    return status, events


def prior_mode_variance(grid, spectrum):
    k = grid.k_magnitude_half()
    return np.where(k > 0, spectrum.evaluate(np.where(k > 0, k, 1.0)) * grid.n_cells**2 / grid.volume, 0.0)




def assert_same_run(a, b):
    ra, rb = RunReader(a), RunReader(b)
    assert ra.progress == {**rb.progress, "chunks": ra.progress["chunks"]}
    for warmup in (True, False):
        for name in ("lp", "step_size", "grad_norm", "acceptance_rate", "diverging"):
            np.testing.assert_array_equal(ra.stat(name, warmup), rb.stat(name, warmup))
        for name in ra.param_names:
            np.testing.assert_array_equal(ra.param(name, warmup), rb.param(name, warmup))
    if ra.has_field:
        np.testing.assert_array_equal(ra.field_draws(), rb.field_draws())
        np.testing.assert_array_equal(ra.field_moments()[0], rb.field_moments()[0])


