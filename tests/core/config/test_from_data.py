"""New from data: a fresh config for a data file, with defaults that fit it and nothing of the demo."""

from __future__ import annotations

import dataclasses
import tomllib

import numpy as np
import pytest

from core import demo
from core.config import NEW_CONFIG_SAMPLERS, config_to_dict, default_config, new_config, parse_config
from core.config.from_data import _sampler_for, config_for_data, estimate_noise_sigma, is_data_file
from core.config.schema import COUPLED_HYPER_SAMPLER
from core.field.grid import Grid
from core.field.power_spectrum import PowerLaw
from core.field.synthetic import gaussian_smooth, make_dataset, save_dataset
from core.io import LoadError


def leaves(document, prefix=""):
    out = {}
    for key, value in document.items():
        if isinstance(value, dict) and prefix.count(".") < 1 and not prefix.startswith("prior."):
            out.update(leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


DEMO = leaves(tomllib.loads(demo.field_toml()))
DEFAULT = leaves(config_to_dict(new_config()))


def no_demo_leftovers(text: str) -> None:
    """Every setting the text shares with the demo's config is the default anyway, or what
    the data chose (the sampler for a mask that couples the modes, as the demo's has)."""
    mine = leaves(tomllib.loads(text))
    chosen = {f"sampler.{key}" for key in COUPLED_HYPER_SAMPLER} | {"model.kind"}
    leaked = {k: v for k, v in mine.items()
              if k in DEMO and DEMO[k] == v and DEFAULT.get(k) != v and k not in chosen}
    assert not leaked, leaked


def _dataset(mask):
    grid = Grid((24, 24, 24), 60.0, "Mpc")
    return make_dataset(grid, PowerLaw(amplitude=20.0, index=-2.0, k_pivot=0.5), 0.7,
                        mask=mask, mask_fraction=0.2, seed=5)


@pytest.fixture(scope="module")
def dataset():
    """A 24^3 field seen through noise of sd 0.7 and a slab mask."""
    return _dataset("slab")


@pytest.fixture(scope="module")
def plain():
    """The same field seen everywhere: a user's own cube."""
    return _dataset("none")


def test_a_plain_npy_has_no_mask_no_box_no_cutoff_and_an_estimated_noise(tmp_path, plain):
    path = tmp_path / "mydata.npy"
    np.save(path, plain.data)
    result = config_for_data(path)
    doc, notes = result
    assert result.box_size is None and "box_size" not in doc["grid"]
    assert "mask" not in doc["data"] and "noise_map" not in doc["data"]
    assert doc["prior"]["kind"] == "power_law" and "cutoff_scale" not in doc["prior"]
    assert doc["data"]["path"] == "mydata.npy"
    assert "ESTIMATE" in " ".join(notes) and "white floor of the data's P(k)" in " ".join(notes)
    assert "box_size" in " ".join(notes)
    # the white floor of the data's P(k) gives the noise within 15 %
    assert doc["data"]["noise_sigma"] == pytest.approx(0.7, rel=0.1)
    text = result.text()
    cfg = parse_config(text, base_dir=tmp_path)
    assert cfg.data.mask is None and cfg.prior.kind == "power_law"
    # a new config writes the sampler that measured best, not the HMC an omitted key means
    assert cfg.sampler == new_config().sampler != default_config().sampler
    assert {k: getattr(cfg.sampler, k) for k in NEW_CONFIG_SAMPLERS["field"]} == NEW_CONFIG_SAMPLERS["field"]
    assert cfg.sampler.algorithm == "mclmc" and cfg.sampler.preconditioner == "conditional"
    assert 'preconditioner = "conditional"' in text
    no_demo_leftovers(text)

    # with the box size the user gives, the prior is fitted to the data's P(k)
    result = config_for_data(path, box_size=60.0, unit="Mpc")
    cfg = parse_config(result.text(), base_dir=tmp_path)
    assert cfg.grid.box_size == (60.0,) * 3 and cfg.grid.unit == "Mpc"
    assert cfg.prior.index.loc == pytest.approx(-2.0, abs=0.3)
    assert cfg.prior.amplitude == pytest.approx(20.0 * (cfg.prior.k_pivot / 0.5) ** -2.0, rel=0.3)
    assert "fitted to the data's P(k)" in " ".join(result.notes)
    no_demo_leftovers(result.text())


def test_an_npz_with_mask_noise_and_box_uses_them(tmp_path, dataset):
    path = tmp_path / "survey.npz"
    save_dataset(path, dataset)                      # data, mask, noise (0-d), box_size, unit, truth
    result = config_for_data(path)
    cfg = parse_config(result.text(), base_dir=tmp_path)
    assert cfg.data.key == "data" and cfg.data.mask == "mask"
    assert cfg.data.noise_sigma == 0.7 and cfg.data.noise_map is None
    assert cfg.grid.box_size == (60.0,) * 3 and cfg.grid.unit == "Mpc"
    assert "ESTIMATE" not in " ".join(result.notes)
    # the fitted index sampled under a slab mask (whole planes missing): the conditional
    # preconditioner is exact there, nothing couples the modes, a new config's sampler (MCLMC)
    # stays, and a note says why
    assert cfg.prior.index.scale == 0.5
    assert cfg.sampler == new_config().sampler
    assert any(n.startswith("sampler: MCLMC with the conditional preconditioner") and "(a slab)" in n
               for n in result.notes)

    # a mask of another shape couples the modes: MAMS (COUPLED_HYPER_SAMPLER), not the
    # unadjusted MCLMC, with the rest of a new config's sampler, and a note that says why
    holes = dataset.mask.copy()
    holes[3:9, 3:9, 3:9] = False
    np.savez(tmp_path / "holes.npz", data=dataset.data, mask=holes, noise=np.array(0.7), box_size=60.0)
    result = config_for_data(tmp_path / "holes.npz")
    cfg = parse_config(result.text(), base_dir=tmp_path)
    assert cfg.data.mask == "mask"
    assert cfg.sampler == dataclasses.replace(new_config().sampler, algorithm="mams")
    assert any(n.startswith("sampler: MAMS") and "sampled (index) and the data's mask couples the" in n for n in result.notes)

    # a noise map of the data's shape, another data name, no 'data' key
    noise = np.full(dataset.data.shape, 0.7)
    np.savez(tmp_path / "cube.npz", rho=dataset.data, noise_map=noise, valid=dataset.mask,
             box_size=np.array([60.0, 60.0, 30.0]))
    result = config_for_data(tmp_path / "cube.npz")
    cfg = parse_config(result.text(), base_dir=tmp_path)
    assert (cfg.data.key, cfg.data.mask, cfg.data.noise_map) == ("rho", "valid", "noise_map")
    assert cfg.sampler.algorithm == "mams" and any("the data's mask and noise map couple" in n for n in result.notes)
    assert cfg.grid.box_size == (60.0, 60.0, 30.0)

    # two unnamed cubes: one clear message listing them
    np.savez(tmp_path / "two.npz", a=dataset.data, b=dataset.data)
    with pytest.raises(LoadError, match=r"two\.npz: holds 2 3-D arrays.*'a' \(24, 24, 24\)"):
        config_for_data(tmp_path / "two.npz")
    assert config_for_data(tmp_path / "two.npz", key="b").document["data"]["key"] == "b"


def test_nan_data_are_masked_without_a_mask_setting(tmp_path, plain):
    data = plain.data.copy()
    data[:4] = np.nan                     # whole planes: a slab, where "conditional" is exact
    np.save(tmp_path / "planes.npy", data)
    result = config_for_data(tmp_path / "planes.npy", box_size=60.0)
    assert parse_config(result.text(), base_dir=tmp_path).sampler.algorithm == "mclmc"
    assert any("(a slab)" in n for n in result.notes)
    data = plain.data.copy()
    data[:4, :12] = np.nan                # half planes: they couple the modes
    np.save(tmp_path / "holes.npy", data)
    result = config_for_data(tmp_path / "holes.npy", box_size=60.0)
    assert "mask" not in result.document["data"]
    assert any("1152 voxel(s) of the data are NaN" in n and "masked automatically" in n
               for n in result.notes)
    assert parse_config(result.text(), base_dir=tmp_path).sampler.algorithm == "mams"
    assert any(n.startswith("sampler: MAMS") and "the data's NaN voxels couple" in n for n in result.notes)
    # the same data with P(k) fixed: nothing sampled, the new config's MCLMC
    fixed = {"prior": {**result.document["prior"], "index": -2.0}, "sampler": dict(NEW_CONFIG_SAMPLERS["field"])}
    notes = []
    _sampler_for(fixed, ["NaN voxels"], notes)
    assert fixed["sampler"] == NEW_CONFIG_SAMPLERS["field"] and notes == []
    np.save(tmp_path / "empty.npy", np.full((4, 4, 4), np.nan))
    with pytest.raises(LoadError, match="empty.npy: array 'empty': no observed voxel"):
        config_for_data(tmp_path / "empty.npy")


def test_the_noise_estimates():
    rng = np.random.default_rng(1)
    white = rng.normal(0.0, 2.0, (16, 16, 16))
    sigma, how = estimate_noise_sigma(white)     # P(k) flat: A k^n + N is degenerate
    assert sigma == pytest.approx(2.0, rel=0.1) and "second differences" in how
    smooth = np.add.outer(np.add.outer(np.arange(16.0), np.arange(16.0)), np.arange(16.0))
    sigma, how = estimate_noise_sigma(smooth + rng.normal(0, 0.1, smooth.shape))
    assert sigma == pytest.approx(0.1, rel=0.2)
    assert estimate_noise_sigma(np.ones((8, 8, 8))) is None
    assert is_data_file("x.NPZ") and is_data_file("a/b.fits") and not is_data_file("x.toml")


def test_issue_32_smoothed_noise_gets_an_unrounded_noise_and_the_cutoff_family(tmp_path):
    # white noise smoothed over 2 cells (P = A exp(-(k R)^2), index 0, R = 2 cells = 4) plus
    # noise of sd 0.3, a cube of NaN. The old New from data wrote the estimate rounded to two
    # digits (0.2949 -> 0.29) and fitted the leftover noise as a power law of index ~ -7
    rng = np.random.default_rng(0)
    grid = Grid((32,) * 3, 32.0)
    signal = gaussian_smooth(rng.standard_normal(grid.shape), grid, 2.0)
    data = (signal / signal.std() + 0.3 * rng.standard_normal(grid.shape)).astype(np.float32)
    data[12:20, 12:20, 12:20] = np.nan
    np.save(tmp_path / "smooth.npy", data)
    result = config_for_data(tmp_path / "smooth.npy", box_size=64.0)
    doc, notes = result
    sigma = doc["data"]["noise_sigma"]
    assert sigma == pytest.approx(0.3, abs=0.003) and sigma != round(sigma, 4)   # unrounded
    note = next(n for n in notes if n.startswith("noise:"))
    assert "ESTIMATE" in note and "fitted jointly" in note and "sd of the estimate" in note
    cfg = parse_config(result.text(), base_dir=tmp_path)
    assert cfg.data.noise_sigma == sigma                     # the TOML keeps every digit
    assert cfg.prior.kind == "power_law_cutoff"
    assert cfg.prior.index.loc == pytest.approx(0.0, abs=0.5)
    assert cfg.prior.cutoff_scale == pytest.approx(4.0, rel=0.05)
    assert any("chosen by BIC" in n for n in notes)

    # a stated noise level that is wrong: the best fit is flagged and not used as the prior
    np.savez(tmp_path / "stated.npz", data=data, noise_sigma=np.float64(0.2),
             box_size=np.array([64.0, 64.0, 64.0]))
    result = config_for_data(tmp_path / "stated.npz")
    assert result.document["data"]["noise_sigma"] == 0.2
    prior_note = next(n for n in result.notes if n.startswith("prior:"))
    assert "flagged, not used" in prior_note and "broad default" in prior_note
    assert parse_config(result.text(), base_dir=tmp_path).prior.index.loc == -2.0
