"""Tests for core.field.synthetic: field statistics, smoothing, masks, data set files."""

import json
import math

import numpy as np
import pytest

from core.field.grid import Grid
from core.field.power_spectrum import PowerLaw, PowerLawCutoff, TabulatedPower
from core.field.synthetic import (
    MASK_KINDS,
    Dataset,
    gaussian_random_field,
    gaussian_smooth,
    load_dataset,
    make_dataset,
    make_mask,
    save_dataset,
)


def full_grid_k(grid):
    axes = [2 * np.pi * np.fft.fftfreq(n, d=length / n)
            for n, length in zip(grid.shape, grid.box_size)]
    kx, ky, kz = np.meshgrid(*axes, indexing="ij")
    return np.sqrt(kx**2 + ky**2 + kz**2)


@pytest.mark.parametrize("shape, box", [((24, 24, 24), 50.0), ((20, 16, 11), (40.0, 30.0, 25.0))])
def test_real_space_variance_is_sum_of_power_over_volume(shape, box):
    """E[mean_x delta^2] = (1 / V) sum_{k != 0} P; its sd is sqrt(2 sum P^2) / V
    (Parseval, with conjugate pairs sharing one exponential variable)."""
    grid = Grid(shape, box)
    spectrum = PowerLawCutoff(amplitude=100.0, index=-1.0, k_pivot=0.2, cutoff_scale=2.0)
    k = full_grid_k(grid)
    p = np.where(k > 0, spectrum(k), 0.0)
    expected = p.sum() / grid.volume
    sd = np.sqrt(2 * np.sum(p**2)) / grid.volume
    rng = np.random.default_rng(2024)
    n_fields = 8
    variances = [np.mean(gaussian_random_field(grid, spectrum, rng) ** 2)
                 for _ in range(n_fields)]
    assert abs(np.mean(variances) - expected) < 5 * sd / np.sqrt(n_fields)


def test_mode_variance_and_zero_mean():
    """Each DFT mode has <|X_k|^2> = P N^2 / V (averaged over realisations and modes)."""
    grid = Grid((8, 8, 8), 10.0)
    spectrum = PowerLaw(amplitude=3.0, index=-1.0, k_pivot=1.0)
    rng = np.random.default_rng(9)
    fields = np.stack([gaussian_random_field(grid, spectrum, rng) for _ in range(300)])
    assert np.all(np.abs(fields.mean(axis=(1, 2, 3))) < 1e-12)
    x = np.fft.fftn(fields, axes=(1, 2, 3))
    k = full_grid_k(grid)
    nonzero = k > 0
    ratio = np.abs(x[:, nonzero]) ** 2 / (spectrum(k[nonzero]) * grid.n_cells**2 / grid.volume)
    # averaged over 300 draws and all modes, the ratio is 1 to well under a percent
    assert abs(ratio.mean() - 1) < 0.01
    # per-mode means scatter by ~ 1 / sqrt(300) (more for the real modes)
    assert np.all(np.abs(ratio.mean(axis=0) - 1) < 6 * np.sqrt(2 / 300))


def test_reproducible_by_seed_and_accepts_generators():
    grid = Grid((6, 6, 6), 1.0)
    spectrum = PowerLaw(1.0, -1.0, 1.0)
    a = gaussian_random_field(grid, spectrum, 5)
    np.testing.assert_array_equal(a, gaussian_random_field(grid, spectrum,
                                                           np.random.default_rng(5)))
    assert not np.array_equal(a, gaussian_random_field(grid, spectrum, 6))
    with pytest.raises(ValueError, match="rng"):
        gaussian_random_field(grid, spectrum, "five")
    with pytest.raises(ValueError, match="negative"):
        gaussian_random_field(grid, lambda k: -np.ones_like(k), 0)


def test_smoothing_multiplies_a_mode_by_the_gaussian_kernel():
    grid = Grid((16, 12, 10), (8.0, 6.0, 5.0))
    idx = np.meshgrid(*[np.arange(n) for n in grid.shape], indexing="ij")
    m = (2, 1, 3)
    field = np.cos(sum(2 * np.pi * mi * j / n for mi, j, n in zip(m, idx, grid.shape)))
    k = 2 * np.pi * np.sqrt(sum((mi / length) ** 2 for mi, length in zip(m, grid.box_size)))
    scale = 0.7
    smoothed = gaussian_smooth(field, grid, scale)
    np.testing.assert_allclose(smoothed, field * math.exp(-0.5 * (k * scale) ** 2), atol=1e-12)
    np.testing.assert_array_equal(gaussian_smooth(field, grid, 0.0), field)
    with pytest.raises(ValueError, match="-1"):
        gaussian_smooth(field, grid, -1.0)


def test_masks():
    grid = Grid((20, 10, 10), (40.0, 20.0, 20.0))
    assert set(MASK_KINDS) == {"none", "slab", "sphere"}
    assert make_mask(grid, "none").all()
    slab = make_mask(grid, "slab", fraction=0.25)
    assert (~slab).sum() == 5 * 100                      # round(0.25 * 20) planes
    unobserved_planes = np.flatnonzero(~slab.all(axis=(1, 2)))
    np.testing.assert_array_equal(unobserved_planes, np.arange(7, 12))
    grid_cube = Grid((32, 32, 32), 10.0)
    sphere = make_mask(grid_cube, "sphere", fraction=0.2)
    assert abs((~sphere).mean() - 0.2) < 0.01
    centre = np.array(sphere.shape) // 2
    assert not sphere[tuple(centre)] and sphere[0, 0, 0]
    dropped = make_mask(grid_cube, "none", dropout_fraction=0.3, rng=1)
    assert abs((~dropped).mean() - 0.3) < 5 * math.sqrt(0.21 / grid_cube.n_cells)
    with pytest.raises(ValueError, match="'disc'"):
        make_mask(grid, "disc")
    with pytest.raises(ValueError, match="1.5"):
        make_mask(grid, "slab", fraction=1.5)
    with pytest.raises(ValueError, match="would not fit"):
        make_mask(grid, "sphere", fraction=0.4)     # radius > half the short sides


def test_make_dataset_model():
    grid = Grid((24, 24, 24), 48.0, unit="Mpc/h")
    spectrum = PowerLawCutoff(50.0, -1.5, 0.2, 1.0)
    sigma, scale = 0.05, 1.5
    ds = make_dataset(grid, spectrum, sigma, mask="slab", mask_fraction=0.25,
                      dropout_fraction=0.1, seed=42, smoothing_scale=scale)
    assert ds.grid == grid and ds.spectrum == spectrum and ds.smoothing_scale == scale
    residual = (ds.data - gaussian_smooth(ds.truth, grid, scale))[ds.mask]
    n = residual.size
    assert abs(residual.std() / sigma - 1) < 5 / math.sqrt(2 * n)
    assert abs(residual.mean()) < 5 * sigma / math.sqrt(n)
    assert np.all(ds.data[~ds.mask] == 0.0)
    expected_unobserved = 0.25 + 0.75 * 0.1
    assert abs((~ds.mask).mean() - expected_unobserved) < 0.01
    # the same seed gives the same truth whatever the noise and mask
    other = make_dataset(grid, spectrum, 0.5, mask="none", seed=42, smoothing_scale=None)
    np.testing.assert_array_equal(other.truth, ds.truth)
    assert other.smoothing_scale == 0.0 and other.mask.all()
    np.testing.assert_allclose(other.data.std(), math.sqrt(ds.truth.var() + 0.25), rtol=0.05)


def test_make_dataset_with_noise_map_and_array_mask():
    grid = Grid((8, 8, 8), 4.0)
    noise = np.full(grid.shape, 0.1)
    noise[:4] = 1.0
    mask = np.ones(grid.shape, bool)
    mask[0] = False
    ds = make_dataset(grid, PowerLaw(1.0, -1.0, 1.0), noise, mask=mask, seed=0)
    np.testing.assert_array_equal(ds.mask, mask)
    np.testing.assert_array_equal(ds.noise_map(), noise)
    with pytest.raises(ValueError, match="noise_sigma"):
        make_dataset(grid, PowerLaw(1.0, -1.0, 1.0), -1.0, seed=0)
    with pytest.raises(ValueError, match="noise_sigma"):
        make_dataset(grid, PowerLaw(1.0, -1.0, 1.0), np.ones((2, 2, 2)), seed=0)
    with pytest.raises(ValueError, match="seed"):
        make_dataset(grid, PowerLaw(1.0, -1.0, 1.0), 1.0, seed=-3)


@pytest.mark.parametrize("spectrum", [PowerLawCutoff(50.0, -1.5, 0.2, 1.0),
                                      TabulatedPower([0.1, 1.0, 10.0], [5.0, 1.0, 0.01])])
def test_save_load_roundtrip_without_pickle(tmp_path, spectrum):
    grid = Grid((10, 8, 6), (20.0, 16.0, 12.0), unit="km")
    ds = make_dataset(grid, spectrum, 0.2, mask="sphere", mask_fraction=0.1,
                      dropout_fraction=0.05, seed=7, smoothing_scale=0.5)
    path = tmp_path / "mock.npz"
    save_dataset(path, ds)
    with np.load(path, allow_pickle=False) as archive:
        keys = set(archive.files)
        for key in keys:
            assert archive[key].dtype != object
        assert {"data", "truth", "mask", "noise", "box_size", "unit", "prior_kind",
                "prior_params"} <= keys
        assert archive["noise"].shape == ()
        assert str(archive["unit"]) == "km"
        assert str(archive["prior_kind"]) == spectrum.kind
        assert json.loads(str(archive["prior_params"])) == spectrum.to_config()
        np.testing.assert_array_equal(archive["box_size"], [20.0, 16.0, 12.0])
    back = load_dataset(path)
    np.testing.assert_array_equal(back.data, ds.data)
    np.testing.assert_array_equal(back.truth, ds.truth)
    np.testing.assert_array_equal(back.mask, ds.mask)
    assert back.mask.dtype == bool
    assert float(back.noise) == 0.2
    assert back.grid == grid
    assert back.spectrum == spectrum
    assert back.smoothing_scale == 0.5
    assert back.metadata == ds.metadata and back.metadata["seed"] == "7"
    assert list(tmp_path.iterdir()) == [path]        # no temporary left behind


def test_dataset_without_truth_or_spectrum_roundtrip(tmp_path):
    grid = Grid((4, 4, 4), 1.0)
    noise = np.full(grid.shape, 0.3)
    ds = Dataset(data=np.zeros(grid.shape), mask=np.ones(grid.shape, bool), noise=noise,
                 grid=grid)
    path = tmp_path / "plain.data"        # any name: nothing is appended
    save_dataset(path, ds)
    back = load_dataset(path)
    assert back.truth is None and back.spectrum is None
    np.testing.assert_array_equal(back.noise, noise)


def _write(path, **arrays):
    with open(path, "wb") as stream:
        np.savez(stream, **arrays)


def test_load_rejects_bad_files_naming_them(tmp_path):
    good = dict(data=np.zeros((4, 4, 4)), mask=np.ones((4, 4, 4), bool), noise=np.array(1.0),
                box_size=np.array([1.0, 1.0, 1.0]))
    cases = {
        "missing.npz": ({k: v for k, v in good.items() if k != "mask"}, "'mask'"),
        "shape.npz": ({**good, "mask": np.ones((4, 4, 3), bool)}, "mask"),
        "noise.npz": ({**good, "noise": np.array(-1.0)}, "noise"),
        "box.npz": ({**good, "box_size": np.array([1.0, 0.0, 1.0])}, "box size"),
        "json.npz": ({**good, "prior_kind": np.array("power_law"),
                      "prior_params": np.array("{not json")}, "prior_params"),
        "kind.npz": ({**good, "prior_kind": np.array("mystery"),
                      "prior_params": np.array("{}")}, "'mystery'"),
        "nan.npz": ({**good, "data": np.full((4, 4, 4), np.nan)}, "NaN"),
        "object.npz": ({**good, "data": np.array([None, 1], dtype=object)}, "object.npz"),
    }
    for name, (arrays, fragment) in cases.items():
        path = tmp_path / name
        _write(path, **arrays)
        with pytest.raises(ValueError) as info:
            load_dataset(path)
        assert name in str(info.value) and fragment in str(info.value), str(info.value)
    garbage = tmp_path / "garbage.npz"
    garbage.write_text("this is not a zip file")
    with pytest.raises(ValueError, match="garbage.npz"):
        load_dataset(garbage)
    with pytest.raises(FileNotFoundError):
        load_dataset(tmp_path / "nowhere.npz")
