"""The calibration tests' shared cases (``tests/core/calibration``): a config document of the
4^3 slab-masked field with its index sampled, a config written from one, a calibration run to its
reader, and the folder with that field's mask."""

from __future__ import annotations

from core.calibration import CalibrationReader
from core.config import config_from_dict, dump_config
from core.engine.calibrate import Calibrator
from core.field.grid import Grid
from core.field.power_spectrum import PowerLaw
from core.field.synthetic import make_dataset, save_dataset

SIMULATIONS, DRAWS, BATCH = 40, 20, 20


def field_document(**changes):
    doc = {"model": {"kind": "field"}, "data": {"path": "data.npz", "noise_sigma": 0.5, "mask": "mask"},
           "grid": {"box_size": 32.0},
           "prior": {"kind": "power_law", "k_pivot": 0.1, "amplitude": 300.0,
                     "index": {"dist": "normal", "loc": -1.5, "scale": 0.3}},
           "sampler": {"algorithm": "hmc", "num_warmup": 100, "num_samples": 100, "num_leapfrog_steps": 10,
                       "step_size": 0.1, "chains": 2, "seed": 3, "thin": 1}}
    for section, values in changes.items():
        doc[section] = {**doc.get(section, {}), **values}
    return doc


def write_config(folder, name, doc):
    config = config_from_dict(doc, base_dir=folder)
    text = dump_config(config)
    (folder / name).write_text(text)
    return config, text


def calibrate(folder, doc, out, simulate_doc=None, simulations=SIMULATIONS, **kwargs):
    config, text = write_config(folder, f"{out}.toml", doc)
    simulate = simulate_text = None
    if simulate_doc is not None:
        simulate, simulate_text = write_config(folder, f"{out}-simulate.toml", simulate_doc)
    calibrator = Calibrator(config, text, folder / out, simulations=simulations, draws=DRAWS, batch_size=BATCH,
                            simulate_config=simulate, simulate_text=simulate_text or "", **kwargs)
    status = calibrator.run()
    return status, CalibrationReader(folder / out)



def write_slab_field(folder):
    """The field cases' data file in ``folder``: its mask and shape (the values are simulated)."""
    grid = Grid((4, 4, 4), 32.0)
    dataset = make_dataset(grid, PowerLaw(amplitude=300.0, index=-1.5, k_pivot=0.1), 0.5, mask="slab",
                           mask_fraction=0.25, seed=11)
    save_dataset(folder / "data.npz", dataset)
    return folder
