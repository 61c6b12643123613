"""New from data on hostile inputs (issue 33, item 10): a data file whose name holds a newline
gives a config that parses (the name was written raw into a TOML comment: a syntax error), and
constant data are refused naming the file instead of given a prior amplitude of 0."""

from __future__ import annotations

import numpy as np
import pytest

from core.config import parse_config
from core.config.from_data import config_for_data
from core.field.grid import Grid
from core.field.power_spectrum import PowerLawCutoff
from core.field.synthetic import make_dataset, save_dataset
from core.io import LoadError


def dataset(shape=(8, 8, 8)):
    grid = Grid(shape, 100.0, "Mpc/h")
    spectrum = PowerLawCutoff(amplitude=2000.0, index=-1.5, k_pivot=0.1, cutoff_scale=4.0)
    return make_dataset(grid, spectrum, 0.5, mask="slab", mask_fraction=0.2, seed=1)


@pytest.mark.parametrize("name", ["my\nfield.npz", "tab\there.npz", "cr\rline.npz"])
def test_a_data_file_name_with_a_control_character_gives_a_config_that_parses(tmp_path, name):
    path = tmp_path / name
    save_dataset(path, dataset())
    made = config_for_data(path, "data")
    config = parse_config(made.text(), base_dir=tmp_path)
    assert config.data_path == path
    assert "\\n" in made.text().splitlines()[0] or "\\t" in made.text().splitlines()[0] or \
        "\\r" in made.text().splitlines()[0]


def test_constant_data_are_refused_naming_the_file(tmp_path):
    ds = dataset()
    path = tmp_path / "flat.npz"
    save_dataset(path, ds)
    arrays = dict(np.load(path))
    arrays["data"] = np.full_like(arrays["data"], 3.0)
    np.savez(path, **arrays)
    with pytest.raises(LoadError, match=r"flat.npz: the observed data are constant \(3 at every observed voxel\)"):
        config_for_data(path, "data")
