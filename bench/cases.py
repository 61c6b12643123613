"""The benchmark case: the demo's field model (core.demo's P(k), box and noise) on an n^3 grid.

One data set and one config document shared by bench/hmc.py and bench/gui.py; the config is
written by core.config's writer (never hand-written TOML).
"""

from __future__ import annotations

from pathlib import Path

from core.config import config_from_dict, dump_config
from core.demo import DEMO_BOX, DEMO_NOISE, DEMO_SPECTRUM
from core.field.grid import Grid
from core.field.power_spectrum import PowerLawCutoff
from core.field.synthetic import make_dataset, save_dataset

__all__ = ["write_data", "config_text"]


def write_data(folder: Path, n: int) -> None:
    """folder/data.npz: an n^3 Gaussian random field of the demo's P(k), noise and a slab mask."""
    folder.mkdir(parents=True, exist_ok=True)
    grid = Grid((n, n, n), DEMO_BOX)
    spectrum = PowerLawCutoff(**DEMO_SPECTRUM)
    save_dataset(folder / "data.npz", make_dataset(grid, spectrum, DEMO_NOISE, mask="slab", seed=3))


def config_text(index, sampler: dict, field: dict | None = None, base_dir=".") -> str:
    """The config of the case; ``index`` a number (fixed) or a prior table (sampled)."""
    prior = {"kind": "power_law_cutoff", "k_pivot": DEMO_SPECTRUM["k_pivot"],
             "amplitude": DEMO_SPECTRUM["amplitude"], "index": index,
             "cutoff_scale": DEMO_SPECTRUM["cutoff_scale"]}
    document = {"model": {"kind": "field"},
                "data": {"path": "data.npz", "noise_sigma": DEMO_NOISE, "mask": "mask"},
                "grid": {"box_size": DEMO_BOX}, "prior": prior, "sampler": sampler}
    if field:
        document["field"] = field
    return dump_config(config_from_dict(document, base_dir))
