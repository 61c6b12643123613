"""Tests of core.io: round trips per format, the run inputs, every bad-input case
as a LoadError naming the file, and fuzzing with random and damaged files."""

import collections
import io
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import config as C
from core import io as L
from core.field.grid import Grid
from core.field.power_spectrum import PowerLaw, TabulatedPower
from core.field.synthetic import make_dataset, save_dataset
from core.integral import make_demo_series
from core.io import LoadError, Series, save_series_csv
from core.io import hdf5 as hdf5_module
from support.files import fits_bytes, fits_card

ROOT = Path(__file__).resolve().parents[3]

def field_config(tmp_path, data: dict, likelihood: dict | None = None):
    """A field RunConfig parsed from TOML text, its paths relative to tmp_path."""
    doc = {"model": {"kind": "field"}, "data": data}
    if likelihood is not None:
        doc["likelihood"] = likelihood
    return C.parse_config(C.to_toml(doc), base_dir=tmp_path)


def expect_error(path, fn, *fragments):
    """fn() raises LoadError whose message names ``path`` and holds every fragment."""
    with pytest.raises(LoadError) as info:
        fn()
    message = str(info.value)
    assert str(path) in message, message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def write_h5(path, *, vlen_unit=True):
    with h5py.File(path, "w") as f:
        f.attrs["box_size"] = 50.0
        f.attrs["unit"] = "Mpc/h" if vlen_unit else np.bytes_(b"Mpc/h")
        f.create_dataset("data", data=np.arange(24.0).reshape(2, 3, 4))
        f.create_dataset("truth", data=np.ones((2, 3, 4)))
        g = f.create_group("maps")
        m = g.create_dataset("mask", data=np.ones((2, 3, 4), bool))
        m.attrs["box_size"] = [1.0, 2.0, 3.0]
        m.attrs["unit"] = np.bytes_(b"km")
        m.attrs["note"] = np.bytes_(b"fixed")
        g.create_dataset("noise", data=np.full((2, 3, 4), 0.5), chunks=(1, 3, 4),
                         compression="gzip")


# --------------------------------------------------------------------------- basics


def test_import_pulls_in_neither_tensorflow_nor_qt():
    code = ("import sys, core.io; "
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'PySide6', 'PyQt5', 'PyQt6', 'pyqtgraph', 'vispy', 'scipy', "
            "'h5py', 'astropy')]; print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_registry_keys_and_loader_for(tmp_path):
    assert set(L.LOADERS) == {".npy", ".npz", ".h5", ".hdf5", ".fits", ".fit", ".fts"}
    assert set(C.FIELD_DATA_EXTENSIONS) == set(L.LOADERS)
    assert L.SERIES_EXTENSIONS == C.INTEGRAL_DATA_EXTENSIONS
    assert isinstance(L.loader_for("a/B.NPZ"), L.NpzLoader)
    assert isinstance(L.loader_for(tmp_path / "x.hdf5"), L.Hdf5Loader)
    assert isinstance(L.loader_for("cube.FTS"), L.FitsLoader)
    for name in ("data.txt", "data", "data.npy.gz"):
        expect_error(name, lambda: L.loader_for(name),
                     "accepted: .npy, .npz, .h5, .hdf5, .fits, .fit, .fts")


# --------------------------------------------------------------------------- round trips


def test_npy_round_trip(tmp_path):
    arrays = {"f32.npy": np.random.default_rng(0).standard_normal((3, 4, 5), np.float32),
              "fortran.npy": np.asfortranarray(np.arange(60, dtype=">i4").reshape(3, 4, 5)),
              "scalar.npy": np.array(2.5)}
    for name, arr in arrays.items():
        np.save(tmp_path / name, arr)
        [info] = L.LOADERS[".npy"].list_arrays(tmp_path / name)
        assert info == (Path(name).stem, arr.shape, arr.dtype, arr.nbytes)
        loaded = L.LOADERS[".npy"].load(tmp_path / name, key="ignored")
        assert loaded.array.dtype == arr.dtype and np.array_equal(loaded.array, arr)
        assert not isinstance(loaded.array, np.memmap)
        assert (loaded.name, loaded.path, loaded.box_size, loaded.unit) == \
            (Path(name).stem, str(tmp_path / name), None, None)


def test_large_npy_is_memory_mapped_read_only(tmp_path):
    arr = np.arange(4096, dtype=np.float64).reshape(16, 16, 16)
    np.save(tmp_path / "big.npy", arr)
    loaded = L.NpyLoader(mmap_threshold=1024).load(tmp_path / "big.npy")
    assert isinstance(loaded.array, np.memmap) and not loaded.array.flags.writeable
    assert np.array_equal(loaded.array, arr)
    assert L.MMAP_THRESHOLD_BYTES == 64 * 2**20


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_npz_round_trip_lists_headers_only(tmp_path, save, monkeypatch):
    arrays = {"data": np.random.default_rng(1).standard_normal((4, 5, 6)),
              "mask": np.ones((4, 5, 6), bool), "count": np.array(7, np.int16),
              "box_size": np.array([1.0, 2.0, 3.0]), "unit": np.array("Mpc")}
    path = tmp_path / "a.npz"
    save(path, **arrays)

    def no_reading(*args, **kwargs):
        raise AssertionError("list_arrays read array data")

    with monkeypatch.context() as m:
        m.setattr(np.lib.format, "read_array", no_reading)
        infos = L.LOADERS[".npz"].list_arrays(path)
    assert [(i.name, i.shape, i.dtype, i.size_bytes) for i in infos] == \
        [(k, a.shape, a.dtype, a.nbytes) for k, a in arrays.items()]
    loaded = L.LOADERS[".npz"].load(path, "data")
    assert np.array_equal(loaded.array, arrays["data"])
    assert loaded.box_size == (1.0, 2.0, 3.0) and loaded.unit == "Mpc"
    assert loaded.attrs == {"count": 7}
    assert np.array_equal(L.LOADERS[".npz"].load(path, "mask").array, arrays["mask"])
    np.savez(tmp_path / "one.npz", only=arrays["data"])
    assert L.LOADERS[".npz"].load(tmp_path / "one.npz").name == "only"


def test_hdf5_round_trip_with_attributes(tmp_path):
    path = tmp_path / "f.h5"
    write_h5(path)
    loader = L.loader_for(path)
    assert [(i.name, i.shape) for i in loader.list_arrays(path)] == [
        ("data", (2, 3, 4)), ("maps/mask", (2, 3, 4)), ("maps/noise", (2, 3, 4)),
        ("truth", (2, 3, 4))]
    data = loader.load(path, "/data")
    assert np.array_equal(data.array, np.arange(24.0).reshape(2, 3, 4))
    assert data.name == "data"
    assert (data.box_size, data.unit) == ((50.0, 50.0, 50.0), "Mpc/h")   # root attributes
    mask = loader.load(path, "maps/mask")                               # its own win
    assert mask.array.dtype == bool and mask.array.all()
    assert (mask.box_size, mask.unit) == ((1.0, 2.0, 3.0), "km")
    assert mask.attrs["note"] == "fixed" and mask.attrs["unit"] == "km"
    assert np.all(loader.load(path, "maps/noise").array == 0.5)
    copy = tmp_path / "f.hdf5"
    copy.write_bytes(path.read_bytes())
    assert L.loader_for(copy).load(copy, "truth").array.sum() == 24


# --------------------------------------------------------------------------- FITS


def test_fits_axis_order_and_box_from_a_hand_written_file(tmp_path):
    """FITS axis 1 varies fastest: numpy axis i is FITS axis 3 - i, and CDELT1 scales
    numpy's last axis. The file is written by hand, pixel by pixel in FITS order."""
    n1, n2, n3 = 5, 4, 3                           # NAXIS1, NAXIS2, NAXIS3
    values = [i1 + 10 * i2 + 100 * i3 for i3 in range(n3) for i2 in range(n2)
              for i1 in range(n1)]                 # axis 1 innermost
    payload = b"".join(int(v).to_bytes(2, "big", signed=True) for v in values)
    cards = [("SIMPLE", True), ("BITPIX", 16), ("NAXIS", 3), ("NAXIS1", n1), ("NAXIS2", n2),
             ("NAXIS3", n3), ("CDELT1", 2.0), ("CDELT2", -3.0), ("CDELT3", 0.5),
             ("CUNIT1", "Mpc"), ("CUNIT2", "Mpc"), ("CUNIT3", "Mpc"), ("OBJECT", "cube")]
    path = tmp_path / "hand.fits"
    path.write_bytes(fits_bytes(cards, payload))
    loader = L.loader_for(path)
    assert isinstance(loader, L.FitsLoader)
    assert loader.list_arrays(path) == [("PRIMARY", (n3, n2, n1), np.dtype(np.int16),
                                         n1 * n2 * n3 * 2)]
    loaded = loader.load(path)
    a = loaded.array
    assert a.shape == (3, 4, 5) and a.dtype == np.int16 and a.dtype.isnative
    for i3, i2, i1 in ((0, 0, 0), (0, 0, 4), (0, 3, 0), (2, 0, 0), (2, 3, 4), (1, 2, 3)):
        assert a[i3, i2, i1] == i1 + 10 * i2 + 100 * i3
    # box = (|CDELT3| NAXIS3, |CDELT2| NAXIS2, |CDELT1| NAXIS1), numpy axis order
    assert loaded.box_size == (0.5 * 3, 3.0 * 4, 2.0 * 5) and loaded.unit == "Mpc"
    assert loaded.attrs["OBJECT"] == "cube" and "NAXIS1" not in loaded.attrs
    # the same file through a config: the grid the engine would build
    inputs = L.load_field_inputs(field_config(tmp_path, {"path": "hand.fits"}))
    assert inputs.box_size_from_file == (1.5, 12.0, 10.0)
    assert Grid(inputs.data.shape, inputs.box_size_from_file).cell_size == (0.5, 3.0, 2.0)


def _box_metadata_files(tmp_path, arr, mask, box, unit):
    """The same array, mask and box in every format that can state a box size."""
    from astropy.io import fits

    np.savez(tmp_path / "d.npz", data=arr, mask=mask, box_size=np.array(box),
             unit=np.array(unit))
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f.create_dataset("data", data=arr)
        f.create_dataset("mask", data=mask)
        f["data"].attrs["box_size"] = list(box)
        f["data"].attrs["unit"] = unit
    header = fits.Header()
    for fits_axis, (length, n) in zip((3, 2, 1), zip(box, arr.shape)):
        header[f"CDELT{fits_axis}"] = length / n
        header[f"CUNIT{fits_axis}"] = unit
    fits.HDUList([fits.PrimaryHDU(arr, header=header),
                  fits.ImageHDU(mask.astype(np.uint8), name="mask")]).writeto(tmp_path / "d.fits")
    return {"d.npz": "mask", "d.h5": "mask", "d.fits": "MASK"}


def test_every_format_with_box_metadata_loads_to_the_same_array_and_grid(tmp_path):
    rng = np.random.default_rng(4)
    arr = rng.standard_normal((6, 8, 10)).astype(np.float32)
    mask = rng.random((6, 8, 10)) < 0.7
    box, unit = (30.0, 40.0, 50.0), "Mpc"
    files = _box_metadata_files(tmp_path, arr, mask, box, unit)
    reference = Grid(arr.shape, box, unit)
    for name, mask_key in files.items():
        loaded = L.loader_for(tmp_path / name).load(tmp_path / name, None if name ==
                                                    "d.fits" else "data")
        assert loaded.array.dtype == np.float32 and np.array_equal(loaded.array, arr), name
        assert loaded.box_size == pytest.approx(box, rel=1e-12) and loaded.unit == unit, name
        inputs = L.load_field_inputs(field_config(tmp_path, {"path": name, "mask": mask_key}))
        assert np.array_equal(inputs.data, arr) and np.array_equal(inputs.mask, mask), name
        grid = Grid(inputs.data.shape, inputs.box_size_from_file, inputs.unit)
        assert grid.shape == reference.shape and grid.unit == unit, name
        assert grid.box_size == pytest.approx(reference.box_size, rel=1e-12), name
        np.testing.assert_allclose(grid.k_magnitude_half(), reference.k_magnitude_half(),
                                   rtol=1e-12)
    # a FITS mask referenced from another format's data file
    cfg = field_config(tmp_path, {"path": "d.npz", "mask": "d.fits:MASK"})
    assert np.array_equal(L.load_field_inputs(cfg).mask, mask)


def test_fits_scaling_extensions_tables_and_memory_map(tmp_path):
    from astropy.io import fits

    ints = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    scaled = fits.PrimaryHDU(ints)
    scaled.header["BSCALE"] = 0.5            # physical = BZERO + BSCALE * stored
    scaled.header["BZERO"] = 10.0
    scaled.writeto(tmp_path / "scaled.fits")
    # astropy's writer would rescale the data; write the stored values untouched
    raw = (tmp_path / "scaled.fits").read_bytes()
    header_end = raw.index(b"END" + b" " * 77) + 80
    header_end += -header_end % 2880
    stored = ints.astype(">i2").tobytes()
    (tmp_path / "scaled.fits").write_bytes(raw[:header_end] + stored +
                                           b"\0" * (-len(stored) % 2880))
    loaded = L.LOADERS[".fits"].load(tmp_path / "scaled.fits")
    assert loaded.array.dtype == np.float32
    np.testing.assert_array_equal(loaded.array, 10.0 + 0.5 * ints)
    unsigned = np.arange(8, dtype=np.uint16).reshape(2, 2, 2) * 5000
    fits.PrimaryHDU(unsigned).writeto(tmp_path / "u16.fits")      # BZERO = 32768
    [info] = L.LOADERS[".fits"].list_arrays(tmp_path / "u16.fits")
    got = L.LOADERS[".fits"].load(tmp_path / "u16.fits").array
    assert info.dtype == got.dtype == np.uint16 and np.array_equal(got, unsigned)

    # empty primary HDU, a table and two images: the images are listed, a table refused
    table = fits.BinTableHDU.from_columns([fits.Column(name="x", format="E",
                                                       array=np.ones(3))], name="CAT")
    cube = np.arange(60.0).reshape(3, 4, 5)
    hdul = fits.HDUList([fits.PrimaryHDU(), table, fits.ImageHDU(cube, name="SCI"),
                         fits.ImageHDU(cube[0], name="PLANE")])
    hdul.writeto(tmp_path / "multi.fits")
    path = tmp_path / "multi.fits"
    loader = L.LOADERS[".fits"]
    assert [(i.name, i.shape) for i in loader.list_arrays(path)] == [
        ("SCI", (3, 4, 5)), ("PLANE", (4, 5))]
    for key in ("SCI", "sci", "2"):
        assert np.array_equal(loader.load(path, key).array, cube)
    expect_error(path, lambda: loader.load(path, "CAT"), "BinTableHDU", "not an image",
                 "'SCI'")
    expect_error(path, lambda: loader.load(path, "0"), "holds no data")
    expect_error(path, lambda: loader.load(path), "holds 2 image HDUs", "'PLANE'")
    expect_error(path, lambda: L.load_field_inputs(
        field_config(tmp_path, {"path": "multi.fits", "key": "PLANE"})), "3-D", "(4, 5)")
    fits.PrimaryHDU(cube[None]).writeto(tmp_path / "stokes.fits")     # NAXIS4 = 1
    expect_error(tmp_path / "stokes.fits", lambda: L.load_field_inputs(
        field_config(tmp_path, {"path": "stokes.fits"})), "(1, 3, 4, 5)", "length-1 axes")
    twins = tmp_path / "twins.fits"      # EXTNAME repeated: told apart by EXTVER
    fits.HDUList([fits.PrimaryHDU(), fits.ImageHDU(cube, name="SCI", ver=1),
                  fits.ImageHDU(2 * cube, name="SCI", ver=2)]).writeto(twins)
    assert [i.name for i in loader.list_arrays(twins)] == ["SCI,1", "SCI,2"]
    assert np.array_equal(loader.load(twins, "sci,2").array, 2 * cube)
    expect_error(twins, lambda: loader.load(twins, "SCI"), "no image HDU 'SCI'", "'SCI,1'")
    single = tmp_path / "single.fits"
    fits.HDUList([fits.PrimaryHDU(), fits.ImageHDU(cube, name="SCI")]).writeto(single)
    inputs = L.load_field_inputs(field_config(tmp_path, {"path": "single.fits"}))
    assert np.array_equal(inputs.data, cube)       # the default key picks the only image

    big = np.random.default_rng(3).standard_normal((16, 16, 16))
    fits.PrimaryHDU(big).writeto(tmp_path / "big.fits")
    mapped = L.FitsLoader(mmap_threshold=1024).load(tmp_path / "big.fits").array
    assert not mapped.flags.owndata and not mapped.flags.writeable
    assert np.array_equal(mapped, big)
    assert np.array_equal(L.load_field_inputs(field_config(tmp_path, {"path": "big.fits"}))
                          .data, big)


def test_demo_dataset_loads_through_the_config(tmp_path):
    grid = Grid((6, 7, 8), (30.0, 35.0, 40.0), unit="Mpc/h")
    dataset = make_dataset(grid, PowerLaw(amplitude=1.0, index=-2.0, k_pivot=0.1), 0.7,
                           mask="slab", seed=3)
    save_dataset(tmp_path / "demo.npz", dataset)
    text = """
[model]
kind = "field"
[data]
path = "demo.npz"
key = "data"
noise_sigma = 0.7
mask = "mask"
[grid]
box_size = [30.0, 35.0, 40.0]
unit = "Mpc/h"
"""
    inputs = L.load_field_inputs(C.parse_config(text, base_dir=tmp_path))
    assert np.array_equal(inputs.data, dataset.data)
    assert np.array_equal(inputs.mask, dataset.mask) and inputs.mask.dtype == bool
    assert inputs.noise_map is None and inputs.noise_sigma == 0.7
    assert np.array_equal(inputs.truth, dataset.truth)
    assert inputs.box_size_from_file == (30.0, 35.0, 40.0) and inputs.unit == "Mpc/h"
    assert inputs.data_path == str(tmp_path / "demo.npz") and inputs.notes == ()
    # The demo stores its noise as a 0-d array: as a noise_map it is the scalar sd.
    cfg = field_config(tmp_path, {"path": "demo.npz", "noise_map": "noise"})
    inputs = L.load_field_inputs(cfg)
    assert inputs.noise_map is None and inputs.noise_sigma == 0.7 and inputs.mask is None
    assert any("box_size" in note for note in inputs.notes)   # differs from the default 100


def test_field_inputs_from_hdf5_with_references(tmp_path):
    write_h5(tmp_path / "f.h5")
    mask = np.zeros((2, 3, 4), np.uint8)
    mask[0] = 1
    np.save(tmp_path / "mask.npy", mask)
    np.savez(tmp_path / "other.npz", m=mask.astype(np.float32), n=np.full((2, 3, 4), 2.0))
    cases = {"mask.npy": mask, "other.npz:m": mask, "f.h5:maps/mask": np.ones_like(mask),
             "maps/mask": np.ones_like(mask)}
    for ref, expected in cases.items():
        cfg = field_config(tmp_path, {"path": "f.h5", "mask": ref, "noise_map": "maps/noise"})
        inputs = L.load_field_inputs(cfg)
        assert inputs.mask.dtype == bool and np.array_equal(inputs.mask, expected != 0), ref
        assert inputs.noise_map.dtype == np.float64 and np.all(inputs.noise_map == 0.5)
        assert inputs.noise_sigma is None
        assert np.array_equal(inputs.truth, np.ones((2, 3, 4)))
        assert inputs.box_size_from_file == (50.0,) * 3 and inputs.unit == "Mpc/h"
    cfg = field_config(tmp_path, {"path": "f.h5", "noise_map": "other.npz:n"})
    assert np.all(L.load_field_inputs(cfg).noise_map == 2.0)


def test_integer_data_counts_or_floats(tmp_path):
    counts = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    np.save(tmp_path / "n.npy", counts)
    gaussian = L.load_field_inputs(field_config(tmp_path, {"path": "n.npy"}))
    assert gaussian.data.dtype == np.float64 and np.array_equal(gaussian.data, counts)
    assert "converted to float64" in gaussian.notes[0]
    poisson = L.load_field_inputs(field_config(tmp_path, {"path": "n.npy"},
                                               {"kind": "poisson_lognormal"}))
    assert poisson.data.dtype == np.int32 and poisson.noise_sigma is None


# --------------------------------------------------------------------------- inspect_array


def test_inspect_array_is_nan_aware():
    a = np.array([[1.0, np.nan, -3.0], [np.inf, 2.0, -np.inf]], np.float32)
    stats = L.inspect_array(a)
    assert stats == ((2, 3), np.dtype(np.float32), -3.0, 2.0, 0.0, 1, 2)
    assert L.inspect_array(np.array([np.nan, np.inf])).min is None
    assert L.inspect_array(np.arange(10, dtype=np.int64)) == ((10,), np.dtype(np.int64),
                                                               0, 9, 4.5, 0, 0)
    assert L.inspect_array(np.array([True, False, True, True])).mean == 0.75
    assert L.inspect_array(np.zeros((0, 3))).mean is None
    assert L.inspect_array(np.array(5.0)).max == 5.0
    c = L.inspect_array(np.array([1 + 1j, complex(np.nan, 0), complex(0, np.inf)]))
    assert (c.min, c.n_nan, c.n_inf) == (None, 1, 1)
    assert L.inspect_array(np.array(["a", "b"])).min is None


def test_inspect_array_in_chunks_matches_whole(tmp_path):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((20, 30, 40))
    a[rng.random(a.shape) < 0.01] = np.nan
    a[3, 4, 5] = np.inf
    np.save(tmp_path / "a.npy", a)
    mapped = L.NpyLoader(mmap_threshold=0).load(tmp_path / "a.npy").array
    assert isinstance(mapped, np.memmap)
    whole = L.inspect_array(a)
    finite = a[np.isfinite(a)]
    assert whole.n_nan == np.isnan(a).sum() and whole.n_inf == 1
    assert whole.min == finite.min() and whole.max == finite.max()
    assert whole.mean == pytest.approx(finite.mean(), rel=1e-12)
    for arr in (mapped, a[:, ::2, 1:], np.asfortranarray(a), a.T):
        stats = L.inspect_array(arr, chunk_bytes=4000)
        sub = np.asarray(arr)[np.isfinite(arr)]
        assert (stats.min, stats.max) == (sub.min(), sub.max())
        assert stats.mean == pytest.approx(sub.mean(), rel=1e-12)
        assert stats.n_nan == np.isnan(arr).sum()


# --------------------------------------------------------------------------- series, tables


def test_series_csv_and_whitespace(tmp_path):
    t, y, f = np.linspace(0, 1, 5), np.arange(5.0) ** 2, np.full(5, 2.0)
    save_series_csv(tmp_path / "s.csv", t, y, f)
    series = L.load_series(tmp_path / "s.csv")
    assert isinstance(series, Series)
    assert np.array_equal(series.t, t) and np.array_equal(series.y, y)
    assert np.array_equal(series.f, f)
    (tmp_path / "s.txt").write_text("# a comment\n t  y\n0 1  # trailing\n\n1\t2\n2 5\n")
    series = L.load_series(tmp_path / "s.txt")
    assert series.t.tolist() == [0, 1, 2] and series.y.tolist() == [1, 2, 5]
    assert series.f is None
    (tmp_path / "s.dat").write_text("0 1 1\n1 2 1\n")
    assert L.load_series(tmp_path / "s.dat").f.tolist() == [1, 1]
    cfg = C.parse_config('[model]\nkind = "integral"\n[data]\npath = "s.csv"\n',
                         base_dir=tmp_path)
    assert np.array_equal(L.load_series_inputs(cfg).y, y)


@pytest.mark.parametrize("with_f", [False, True])
def test_csv_round_trip_is_exact(tmp_path, with_f):
    s = make_demo_series(1, n=17)
    f = np.cos(s.t) if with_f else None
    path = tmp_path / "series.csv"
    save_series_csv(path, s.t, s.y, f)
    got = L.load_series(path)
    np.testing.assert_array_equal(got.t, s.t)
    np.testing.assert_array_equal(got.y, s.y)
    if with_f:
        np.testing.assert_array_equal(got.f, f)
    else:
        assert got.f is None
    assert path.read_text().splitlines()[0] == ("t,y,f" if with_f else "t,y")


@pytest.mark.parametrize("text,message", [
    (",\n,,\n", "empty file"),     # rows of empty fields only: no header
    ("time,y\n0,1\n1,2\n", r"line 1: header must be 't,y' or 't,y,f', got 'time,y'"),
    ("t,y\n0,1\n1,abc\n", r"line 3: column 'y': 'abc' is not a number"),
    ("t,y\n0,1\n1,nan\n", r"line 3: column 'y': 'nan' is not finite"),
    ("t,y,f\n0,1,1\n1,2\n", "line 3: expected 3 fields"),
    ("t,y\n0,1\n\n2,2\n2,3\n", r"line 5: t = 2.0 does not increase \(previous t = 2.0\)"),
    ("t,y\n0,1\n", "need at least 2 data rows"),
])
def test_csv_errors_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(LoadError, match="bad.csv" + (".*" if message else "") + message):
        L.load_series(path)


def test_save_csv_validates(tmp_path):
    with pytest.raises(ValueError, match="y: length 2 does not match t"):
        save_series_csv(tmp_path / "x.csv", [0, 1, 2], [1, 2])


@pytest.mark.parametrize("name, content, fragment", [
    ("a.csv", "t,x\n0,1\n1,2\n", "header must be"),
    ("a.csv", "t,y\n0,1\n0,2\n", "does not increase"),
    ("a.csv", "t,y\n0,1\n1,oops\n", "'oops' is not a number"),
    ("a.csv", "\ufefft,y\n0,1\n1,2\n", "byte-order mark"),
    ("a.txt", "t y\n0 1\n1 inf\n", "not finite"),
    ("a.txt", "0 1\n1 2 3\n", "expected 2 columns"),
    ("a.txt", "0 1\n", "at least 2 data rows"),
    ("a.dat", "# only comments\n\n", "no data"),
    ("a.dat", b"\xff\xfe\x00t", "not UTF-8"),
    ("a.csv", "t,y\n0,1\x00\n1,2\n", "NUL"),
    ("a.npz", "t,y\n", "accepted: .csv, .txt, .dat"),
])
def test_series_errors_name_the_file(tmp_path, name, content, fragment):
    path = tmp_path / name
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    expect_error(path, lambda: L.load_series(path), fragment)


def test_table_from_file_with_comments_and_commas(tmp_path):
    path = tmp_path / "pk.txt"
    path.write_text("# k [h/Mpc]   P [(Mpc/h)^3]\n"
                    "\n"
                    "0.01  1.0e3\n"
                    "0.1, 2.0e3   # peak\n"
                    "1.0 \t 20.0\n")
    table = L.load_power_table(path)
    np.testing.assert_allclose(table.k, [0.01, 0.1, 1.0])
    np.testing.assert_allclose(table.p, [1e3, 2e3, 20.0])
    assert table.source == str(path)


@pytest.mark.parametrize("text, fragment", [
    ("0.1 1.0\n0.1 2.0\n", "line 2"),             # k not increasing
    ("0.1 1.0\n0.05 2.0\n", "line 2"),
    ("0.1 1.0\n0.2 -2.0\n", "line 2"),            # negative P
    ("0.1 1.0\n0.2 0.0\n", "line 2"),             # zero P
    ("0.1 1.0\n# gap\n0.2 nan\n", "line 3"),      # NaN
    ("0.0 1.0\n0.2 1.0\n", "line 1"),             # k = 0
    ("0.1 1.0\n", "at least 2 rows"),             # one row
    ("# no rows\n", "at least 2 rows"),          # only a comment
    ("", "the file is empty (0 bytes)"),          # refused before it is parsed
    ("hello world\n", "'hello'"),                  # garbage text
    ("0.1 1.0 7.0\n0.2 1.0 7.0\n", "2 columns"),
])
def test_bad_table_files_name_the_file(tmp_path, text, fragment):
    path = tmp_path / "bad_table.dat"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        L.load_power_table(path)
    message = str(info.value)
    assert "bad_table.dat" in message and fragment in message


def test_binary_garbage_file_is_a_value_error(tmp_path):
    path = tmp_path / "binary.bin"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ValueError, match="binary.bin"):
        L.load_power_table(path)


def test_realistic_table_roundtrip(tmp_path):
    """A CAMB-like matter power spectrum shape (camb is not a dependency): an
    Eisenstein-Hu-like turnover, k from 1e-4 to 10 h/Mpc, written and read back."""
    k = np.logspace(-4, 1, 200)
    keq = 0.015
    p = 2.0e4 * (k / keq) / (1 + (k / keq) ** 2) ** 1.4
    path = tmp_path / "matterpower.dat"
    np.savetxt(path, np.c_[k, p], header="k/h  P(k)")
    table = L.load_power_table(path)
    np.testing.assert_allclose(table(k), p, rtol=1e-10)
    # between nodes of a dense smooth table the interpolant is very close
    k_mid = np.sqrt(k[:-1] * k[1:])
    p_mid = 2.0e4 * (k_mid / keq) / (1 + (k_mid / keq) ** 2) ** 1.4
    np.testing.assert_allclose(table(k_mid), p_mid, rtol=1e-3)


def test_power_table(tmp_path):
    path = tmp_path / "pk.txt"
    path.write_text("# k P\n0.1 10\n1.0, 1\n")
    table = L.load_power_table(path)
    assert isinstance(table, TabulatedPower) and table.k.tolist() == [0.1, 1.0]
    path.write_text("0.1 10\n0.05 1\n")
    expect_error(path, lambda: L.load_power_table(path), "k must increase")
    expect_error(tmp_path / "none.txt", lambda: L.load_power_table(tmp_path / "none.txt"),
                 "no such file")
    (tmp_path / "bin.txt").write_bytes(b"\x80\x81")
    expect_error(tmp_path / "bin.txt", lambda: L.load_power_table(tmp_path / "bin.txt"))


def test_prior_table_of_a_config(tmp_path):
    """The table a config's prior names is read by core.io and handed to prior_spectrum
    (core.field reads no files)."""
    from core.field.power_spectrum import prior_spectrum

    (tmp_path / "pk.txt").write_text("0.1 10\n1.0 1\n")
    text = ('[model]\nkind = "field"\n[data]\npath = "d.npz"\n'
            '[prior]\nkind = "table"\ntable = "pk.txt"\n')
    cfg = C.parse_config(text, base_dir=tmp_path)
    table = L.load_prior_table(cfg)
    assert table == L.load_power_table(tmp_path / "pk.txt")
    assert prior_spectrum(cfg.prior, table) is table
    with pytest.raises(ValueError, match="the table read from prior.table must be given"):
        prior_spectrum(cfg.prior)
    assert L.load_prior_table(C.default_config("field", base_dir=tmp_path)) is None
    missing = C.parse_config(text.replace("pk.txt", "none.txt"), base_dir=tmp_path)
    expect_error(tmp_path / "none.txt", lambda: L.load_prior_table(missing), "no such file")


# --------------------------------------------------------------------------- bad input


class _Payload:
    """Unpickling this creates the file ``marker`` (a stand-in for arbitrary code)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickled_object_arrays_are_refused_without_unpickling(tmp_path):
    marker = tmp_path / "pwned"
    evil = np.array([_Payload(marker)], dtype=object)
    np.save(tmp_path / "evil.npy", evil, allow_pickle=True)
    np.savez(tmp_path / "evil.npz", data=evil)
    (tmp_path / "raw.npy").write_bytes(pickle.dumps(evil))
    # Control: the payload is live, so the assertions below mean something.
    np.load(tmp_path / "evil.npy", allow_pickle=True)
    assert marker.exists()
    marker.unlink()
    for name in ("evil.npy", "evil.npz"):
        path = tmp_path / name
        loader = L.loader_for(path)
        expect_error(path, lambda: loader.load(path, "data"), "Python objects", "unpickl")
        expect_error(path, lambda: loader.list_arrays(path), "Python objects")
        cfg = field_config(tmp_path, {"path": name})
        expect_error(path, lambda: L.load_field_inputs(cfg), "Python objects")
    raw = tmp_path / "raw.npy"
    expect_error(raw, lambda: L.LOADERS[".npy"].load(raw), "Python pickle")
    assert not marker.exists()


def _bad_files(tmp_path):
    """(name, path, callable) for every bad-input case; each must raise LoadError naming
    the path and the fragments."""
    npy, npz, h5 = L.LOADERS[".npy"], L.LOADERS[".npz"], L.LOADERS[".h5"]
    t = tmp_path
    good = np.arange(60.0).reshape(3, 4, 5)
    np.save(t / "good.npy", good)
    np.savez(t / "good.npz", data=good, mask=np.ones((3, 4, 5), bool))
    write_h5(t / "good.h5")
    whole = {n: (t / n).read_bytes() for n in ("good.npy", "good.npz", "good.h5")}
    (t / "trunc.npy").write_bytes(whole["good.npy"][:-10])
    (t / "trunc.npz").write_bytes(whole["good.npz"][: len(whole["good.npz"]) // 2])
    (t / "trunc.h5").write_bytes(whole["good.h5"][: len(whole["good.h5"]) // 2])
    (t / "header.npy").write_bytes(whole["good.npy"][:40])
    noise = np.random.default_rng(5).bytes(3000)
    for ext in ("npy", "npz", "h5", "hdf5"):
        (t / f"random.{ext}").write_bytes(noise)
    (t / "empty.npy").write_bytes(b"")
    (t / "renamed.npz").write_bytes(whole["good.npy"])
    (t / "adir.npz").mkdir()
    np.save(t / "flat.npy", np.arange(5.0))
    np.save(t / "complex.npy", np.ones((2, 2, 2), complex))
    np.save(t / "bool.npy", np.ones((2, 2, 2), bool))
    np.save(t / "text.npy", np.full((2, 2, 2), "x"))
    np.save(t / "zero.npy", np.zeros((3, 0, 5)))
    np.savez(t / "masks.npz", data=good, small=np.ones((3, 4), bool),
             half=np.full((3, 4, 5), 0.5), none=np.zeros((3, 4, 5), bool),
             noise=np.ones((4, 4, 5)), cnoise=np.ones((3, 4, 5), complex))
    with h5py.File(t / "vlen.h5", "w") as f:
        f.create_dataset("names", data=["a", "b"], dtype=h5py.string_dtype())
        f.create_dataset("null", data=h5py.Empty("f8"))
        f.attrs["box_size"] = [1.0, -2.0, 3.0]
        f.create_dataset("data", data=good)

    fits = L.LOADERS[".fits"]
    cube_cards = [("SIMPLE", True), ("BITPIX", -64), ("NAXIS", 3), ("NAXIS1", 5),
                  ("NAXIS2", 4), ("NAXIS3", 3)]
    cube = good.astype(">f8").tobytes()
    (t / "good.fits").write_bytes(fits_bytes(cube_cards, cube))
    (t / "trunc.fits").write_bytes(fits_bytes(cube_cards, cube)[:2880 + 100])
    (t / "random.fits").write_bytes(noise)
    (t / "fits.npy").write_bytes(fits_bytes(cube_cards, cube))
    (t / "bitpix.fits").write_bytes(fits_bytes(
        [("SIMPLE", True), ("BITPIX", 12), ("NAXIS", 1), ("NAXIS1", 4)], b"\0" * 8))
    (t / "cdelt.fits").write_bytes(fits_bytes(
        cube_cards + [("CDELT1", 1.0), ("CDELT2", 0.0), ("CDELT3", 1.0)], cube))
    (t / "naxis.fits").write_bytes(fits_bytes(        # astropy loops forever on this
        [("SIMPLE", True), ("BITPIX", 8), ("NAXIS", 10**12)], b""))
    (t / "nodata.fits").write_bytes(fits_bytes([("SIMPLE", True), ("BITPIX", 8),
                                                ("NAXIS", 0)], b""))

    def cfg(data, likelihood=None):
        return lambda: L.load_field_inputs(field_config(t, data, likelihood))

    return [
        ("missing file", t / "nope.npy", lambda: npy.load(t / "nope.npy"), ["no such file"]),
        ("missing via config", t / "nope.npz", cfg({"path": "nope.npz"}), ["no such file"]),
        ("directory", t / "adir.npz", lambda: npz.list_arrays(t / "adir.npz"),
         ["is a directory"]),
        ("wrong extension", "d.xyz", lambda: L.loader_for("d.xyz"), ["accepted"]),
        ("empty file", t / "empty.npy", lambda: npy.load(t / "empty.npy"), ["empty (0 bytes)"]),
        ("truncated npy", t / "trunc.npy", lambda: npy.load(t / "trunc.npy"), ["truncated"]),
        ("npy header only", t / "header.npy", lambda: npy.list_arrays(t / "header.npy"), []),
        ("truncated npz", t / "trunc.npz", lambda: npz.load(t / "trunc.npz", "data"),
         ["not a readable .npz"]),
        ("truncated h5", t / "trunc.h5", lambda: h5.load(t / "trunc.h5", "data"),
         ["not a readable HDF5"]),
        ("random npy", t / "random.npy", lambda: npy.load(t / "random.npy"), ["magic"]),
        ("random npz", t / "random.npz", lambda: npz.list_arrays(t / "random.npz"), []),
        ("random h5", t / "random.h5", lambda: h5.list_arrays(t / "random.h5"), []),
        ("random hdf5", t / "random.hdf5", lambda: h5.load(t / "random.hdf5"), []),
        ("npy named npz", t / "renamed.npz", lambda: npz.load(t / "renamed.npz"),
         ["look like a .npy file"]),
        ("missing npz key", t / "good.npz", lambda: npz.load(t / "good.npz", "dta"),
         ["no array 'dta'", "'data' (3, 4, 5) float64", "'mask'"]),
        ("missing h5 key", t / "good.h5", lambda: h5.load(t / "good.h5", "maps/nois"),
         ["no dataset 'maps/nois'", "'maps/noise'"]),
        ("npz key None, several", t / "good.npz", lambda: npz.load(t / "good.npz"),
         ["holds 2 arrays", "'mask'"]),
        ("h5 group", t / "good.h5", lambda: h5.load(t / "good.h5", "maps"),
         ["'maps' is a group", "maps/mask"]),
        ("h5 vlen strings", t / "vlen.h5", lambda: h5.load(t / "vlen.h5", "names"),
         ["not an array of numbers"]),
        ("h5 null dataspace", t / "vlen.h5", lambda: h5.load(t / "vlen.h5", "null"),
         ["null dataspace"]),
        ("h5 bad box_size", t / "vlen.h5", lambda: h5.load(t / "vlen.h5", "data"),
         ["attribute 'box_size'", "positive"]),
        ("missing config key", t / "good.npz", cfg({"path": "good.npz", "key": "x"}),
         ["no array 'x'", "'data'"]),
        ("wrong ndim", t / "flat.npy", cfg({"path": "flat.npy"}), ["3-D", "(5,)"]),
        ("complex", t / "complex.npy", cfg({"path": "complex.npy"}), ["complex128"]),
        ("bool data", t / "bool.npy", cfg({"path": "bool.npy"}), ["look like a mask"]),
        ("string data", t / "text.npy", cfg({"path": "text.npy"}), ["strings"]),
        ("empty array", t / "zero.npy", cfg({"path": "zero.npy"}), ["(3, 0, 5) is empty"]),
        ("mask shape", t / "masks.npz", cfg({"path": "masks.npz", "mask": "small"}),
         ["(3, 4)", "(3, 4, 5)", "data.mask"]),
        ("mask not boolean", t / "masks.npz", cfg({"path": "masks.npz", "mask": "half"}),
         ["not boolean-like", "0.5"]),
        ("mask all false", t / "masks.npz", cfg({"path": "masks.npz", "mask": "none"}),
         ["no voxel is observed"]),
        ("mask key missing", t / "masks.npz", cfg({"path": "masks.npz", "mask": "msk"}),
         ["data.mask = 'msk'", "no array 'msk'", ".npy, .npz"]),
        ("mask key in npy", t / "good.npy", cfg({"path": "good.npy", "mask": "mask"}),
         ["single .npy array"]),
        ("mask file missing", t / "m.npy", cfg({"path": "good.npy", "mask": "m.npy"}),
         ["no such file"]),
        ("mask empty key", "m.npz:", cfg({"path": "good.npy", "mask": "m.npz:"}),
         ["nothing after ':'"]),
        ("mask npy key", "good.npy:x", cfg({"path": "good.npy", "mask": "good.npy:x"}),
         ["drop ':x'"]),
        ("noise shape", t / "masks.npz", cfg({"path": "masks.npz", "noise_map": "noise"}),
         ["(4, 4, 5)", "(3, 4, 5)"]),
        ("noise complex", t / "masks.npz", cfg({"path": "masks.npz", "noise_map": "cnoise"}),
         ["complex"]),
        ("truncated fits", t / "trunc.fits", lambda: fits.load(t / "trunc.fits"),
         ["truncated", "(3, 4, 5)", "only 100 bytes follow"]),
        ("random fits", t / "random.fits", lambda: fits.list_arrays(t / "random.fits"),
         ["not a readable FITS"]),
        ("fits named npy", t / "fits.npy", lambda: npy.load(t / "fits.npy"),
         ["look like a .fits file"]),
        ("fits bitpix", t / "bitpix.fits", lambda: fits.list_arrays(t / "bitpix.fits"),
         ["BITPIX = 12"]),
        ("fits zero cdelt", t / "cdelt.fits", lambda: fits.load(t / "cdelt.fits"),
         ["CDELT2 = 0.0", "non-zero"]),
        ("fits NAXIS absurd", t / "naxis.fits", lambda: fits.list_arrays(t / "naxis.fits"),
         ["NAXIS = 1000000000000", "0 to 999"]),
        ("fits no image", t / "nodata.fits", lambda: fits.load(t / "nodata.fits"),
         ["holds no image HDUs"]),
        ("fits missing key", t / "good.fits", cfg({"path": "good.fits", "key": "SCI"}),
         ["no image HDU 'SCI'", "'PRIMARY' (3, 4, 5) float64"]),
        ("fits mask missing", t / "good.fits", cfg({"path": "good.fits", "mask": "MASK"}),
         ["data.mask = 'MASK'", "no image HDU 'MASK'"]),
        ("integral config", "model.kind", lambda: L.load_field_inputs(
            C.default_config("integral", base_dir=t)), ["load_series_inputs"]),
    ]


def test_every_bad_input_is_a_load_error_naming_the_file(tmp_path):
    for name, path, fn, fragments in _bad_files(tmp_path):
        try:
            expect_error(path, fn, *fragments)
        except BaseException as exc:
            raise AssertionError(f"case {name!r}: {exc}") from exc


def test_fifo_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "pipe.npy"
    os.mkfifo(fifo)
    expect_error(fifo, lambda: L.LOADERS[".npy"].load(fifo), "not a regular file")


def test_unreadable_file_chmod_0(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads a chmod-0 file; test_unreadable_file_open_refused covers it")
    locked = tmp_path / "locked.npz"
    np.savez(locked, data=np.ones(3))
    locked.chmod(0)
    expect_error(locked, lambda: L.LOADERS[".npz"].load(locked), "permission denied")


@pytest.mark.parametrize("ext", [".npy", ".npz", ".fits"])
def test_unreadable_file_open_refused(tmp_path, monkeypatch, ext):
    """Opening the file fails with PermissionError (what chmod 0 gives any user but root),
    whoever runs the tests: the loader says "permission denied". (HDF5 files are opened by
    the HDF5 library, below Python's open: only test_unreadable_file_chmod_0 reaches them.)"""
    import builtins

    path = tmp_path / f"locked{ext}"
    if ext == ".fits":
        from astropy.io import fits
        fits.PrimaryHDU(np.ones((2, 2, 2), np.float32)).writeto(path)
    else:
        (np.save if ext == ".npy" else np.savez)(path, np.ones((2, 2, 2)))
    real_open = builtins.open
    refused = []

    def open_refusing(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and os.fspath(file) == str(path):
            refused.append(file)
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", open_refusing)
    monkeypatch.setattr(io, "open", open_refusing)
    expect_error(path, lambda: L.LOADERS[ext].load(path), "permission denied")
    assert refused          # the refusal came from opening the file, not from elsewhere


def _damaged_heap_h5(path):
    """An HDF5 file whose global heap (where h5py keeps string attributes) has its first
    object's size zeroed: the HDF5 library loops forever reading the 'unit' attribute."""
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        f.attrs["unit"] = "Mpc"
        f.create_dataset("data", data=np.zeros((2, 2, 2)))
    raw = bytearray(buffer.getvalue())
    heap = raw.find(b"GCOL")
    assert heap > 0
    raw[heap + 24] = 0     # 16-byte collection header, then index, refcount, reserved, size
    path.write_bytes(bytes(raw))


def test_damaged_string_attribute_cannot_hang_or_crash_the_process(tmp_path, monkeypatch):
    path = tmp_path / "heap.h5"
    _damaged_heap_h5(path)
    loader = L.Hdf5Loader(attr_timeout_s=1.0)
    assert [i.name for i in loader.list_arrays(path)] == ["data"]
    try:     # hangs with HDF5 1.14; a library that detects the damage reports it
        loaded = loader.load(path)
    except LoadError as exc:
        assert str(path) in str(exc)
    else:
        assert loaded.array.shape == (2, 2, 2)
    # The child process's failure modes, simulated.
    write_h5(tmp_path / "ok.h5")
    for code, fragment in (("import time; time.sleep(30)", "did not finish within 1 s"),
                           ("import os; os.abort()", "crashed the HDF5 library"),
                           ("raise SystemExit('bad')", "failed (bad)")):
        monkeypatch.setattr(hdf5_module, "_ATTRIBUTE_READER", code)
        expect_error(tmp_path / "ok.h5", lambda: loader.load(tmp_path / "ok.h5", "data"),
                     fragment)


# --------------------------------------------------------------------------- fuzzing


def attempt(fn, counts, what: str) -> None:
    """Run a loader call: success or LoadError, anything else fails the test; ``counts``
    tallies "{what}: loaded" / "{what}: rejected"."""
    try:
        fn()
    except LoadError as exc:
        assert str(exc)
        counts[f"{what}: rejected"] += 1
    else:
        counts[f"{what}: loaded"] += 1
    # Any other exception propagates and fails the example.


def run_fuzz(fuzz, name: str, capsys, *args, at_least: dict[str, int]) -> None:
    """Run the Hypothesis test ``fuzz`` (all its examples; ``args`` then a Counter are
    passed before the drawn arguments), print its counts, and check each entry of
    ``at_least``: a count name, or a suffix (": loaded", ": rejected", ": cases") that
    sums every count ending in it."""
    counts = collections.Counter()
    fuzz(*args, counts)
    with capsys.disabled():
        print(f"\nloader fuzz, {name}: {sum(v for k, v in counts.items() if k.endswith(': cases'))}"
              " cases")
        for key, count in sorted(counts.items()):
            print(f"  {key:44s} {count}")
    for key, minimum in at_least.items():
        got = (sum(v for k, v in counts.items() if k.endswith(key)) if key.startswith(":")
               else counts[key])
        assert got >= minimum, (key, dict(counts))


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def valid_files(fuzz_dir):
    """Bytes of valid files in every format (HDF5 with fixed-length string attributes,
    so the fuzz runs in-process; the variable-length case is fuzzed separately)."""
    grid = np.random.default_rng(7).standard_normal((3, 4, 5))
    mask = np.ones((3, 4, 5), bool)
    out = _Files()
    buffer = io.BytesIO()
    np.save(buffer, grid.astype(np.float32))
    out["npy"] = (".npy", buffer.getvalue())
    buffer = io.BytesIO()
    np.save(buffer, np.asfortranarray(np.arange(60, dtype=np.int16).reshape(3, 4, 5)))
    out["npy_fortran"] = (".npy", buffer.getvalue())
    for name, save in (("npz", np.savez), ("npz_compressed", np.savez_compressed)):
        buffer = io.BytesIO()
        save(buffer, data=grid, mask=mask, truth=grid, box_size=np.array([1.0, 2, 3]),
             unit=np.array("Mpc"), noise=np.array(0.5))
        out[name] = (".npz", buffer.getvalue())
    for name, libver in (("h5", "earliest"), ("h5_latest", "latest")):
        write_h5(fuzz_dir / "source.h5", vlen_unit=False)
        with h5py.File(fuzz_dir / "source.h5", "a", libver=libver) as f:
            f["mask"] = f["maps/mask"][()]
        out[name] = (".h5", (fuzz_dir / "source.h5").read_bytes())
    out.update(_valid_fits(grid))
    return out


def _valid_fits(grid):
    """FITS files: an image with CDELT / CUNIT, mask and noise extensions and a table; a
    BSCALE / BZERO / BLANK image; tile-compressed images."""
    from astropy.io import fits

    header = fits.Header()
    for axis in (1, 2, 3):
        header[f"CDELT{axis}"] = 2.0
        header[f"CUNIT{axis}"] = "Mpc"
    mask = np.ones(grid.shape, np.uint8)
    table = fits.BinTableHDU.from_columns([fits.Column(name="k", format="E",
                                                       array=np.ones(3))], name="PK")
    scaled = fits.PrimaryHDU((grid * 100).astype(np.int16), header=header)
    scaled.header.update(BSCALE=0.01, BZERO=1.0, BLANK=-32768)
    files = {
        "fits": [fits.PrimaryHDU(grid.astype(np.float32), header=header),
                 fits.ImageHDU(mask, name="MASK"), fits.ImageHDU(np.full(grid.shape, 0.5),
                                                                 name="NOISE"), table],
        "fits_scaled": [scaled, fits.ImageHDU(mask, name="MASK")],
        "fits_compressed": [fits.PrimaryHDU(),
                            fits.CompImageHDU(grid.astype(np.float32), name="DATA",
                                              compression_type="RICE_1"),
                            fits.CompImageHDU(mask.astype(np.int16), name="MASK",
                                              compression_type="GZIP_1")],
    }
    out = {}
    for name, hdus in files.items():
        buffer = io.BytesIO()
        fits.HDUList(hdus).writeto(buffer)
        out[name] = (".fits", buffer.getvalue())
    return out


@dataclass(frozen=True)
class Truncate:
    cut: int

    def __call__(self, b: bytes) -> bytes:
        return b[:self.cut % max(len(b), 1)]


@dataclass(frozen=True)
class Overwrite:
    edits: tuple[tuple[int, int], ...]

    def __call__(self, b: bytes) -> bytes:
        out = bytearray(b)
        for position, value in self.edits:
            if out:
                out[position % len(out)] = value
        return bytes(out)


@dataclass(frozen=True)
class Splice:
    at: int
    drop: int
    insert: bytes

    def __call__(self, b: bytes) -> bytes:
        at = self.at % max(len(b), 1)
        return b[:at] + self.insert + b[at + self.drop:]


class _Files(dict):
    def __repr__(self):     # keeps Hypothesis's failure reports readable
        return f"<valid files: {', '.join(self)}>"


def mutations():
    """Damage for a valid file: truncate it, overwrite a few bytes, or splice in noise."""
    position = st.integers(0, 2**20)
    return st.one_of(
        st.builds(Truncate, position),
        st.builds(Overwrite, st.lists(st.tuples(position, st.integers(0, 255)), min_size=1,
                                      max_size=8).map(tuple)),
        st.builds(Splice, position, st.integers(0, 64), st.binary(max_size=64)))


FUZZ = settings(max_examples=600, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


def _exercise(path, ext, base_dir, counts, what):
    loader = L.LOADERS[ext]
    counts[f"{what}: cases"] += 1
    attempt(lambda: loader.list_arrays(path), counts, what)
    attempt(lambda: loader.load(path), counts, what)
    attempt(lambda: loader.load(path, "data"), counts, what)
    data = {"path": path.name}
    if isinstance(loader, L.FitsLoader):
        attempt(lambda: L.FitsLoader(mmap_threshold=0).load(path),    # the memory-map path
                counts, what)
        data.update(mask="MASK", noise_map="NOISE")
    elif ext != ".npy":
        data.update(mask="mask", noise_map="noise" if ext == ".npz" else "maps/noise")
    attempt(lambda: L.load_field_inputs(field_config(base_dir, data)), counts, what)


@FUZZ
@given(ext=st.sampled_from(sorted(L.LOADERS)),
       prefix=st.sampled_from([b"", b"\x93NUMPY", b"\x93NUMPY\x01\x00", b"PK\x03\x04",
                               b"\x89HDF\r\n\x1a\n", fits_card("SIMPLE", True),
                               fits_card("SIMPLE", True) + fits_card("BITPIX", -32)]),
       payload=st.binary(max_size=2048))
def _fuzz_random_bytes(fuzz_dir, counts, ext, prefix, payload):
    path = fuzz_dir / f"random{ext}"
    path.write_bytes(prefix + payload)
    _exercise(path, ext, fuzz_dir, counts, f"random bytes {ext}")


def test_fuzz_random_bytes(fuzz_dir, capsys):
    # every format is tried, and random bytes are (almost) always refused
    run_fuzz(_fuzz_random_bytes, "random bytes", capsys, fuzz_dir, at_least={
        ": cases": 300, ": rejected": 600,
        **{f"random bytes {ext}: cases": 10 for ext in L.LOADERS}})


FITS_KEYWORDS = ["SIMPLE", "BITPIX", "NAXIS", "NAXIS1", "NAXIS2", "NAXIS3", "NAXIS4",
                 "EXTEND", "XTENSION", "EXTNAME", "EXTVER", "PCOUNT", "GCOUNT", "BSCALE",
                 "BZERO", "BLANK", "CDELT1", "CDELT2", "CDELT3", "CUNIT1", "CUNIT3",
                 "ZIMAGE", "ZBITPIX", "ZNAXIS", "ZCMPTYPE", "TFIELDS", "END"]
FITS_VALUES = st.one_of(st.booleans(), st.integers(-2**63, 2**63), st.sampled_from(
    [-64, -32, 0, 1, 3, 8, 16, 32, 64, 2880, 2**31]), st.floats(allow_nan=True),
    st.sampled_from(["IMAGE", "BINTABLE", "Mpc", "", "DATA", "MASK", "RICE_1"]),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=12))


@FUZZ
@given(head=st.lists(st.tuples(st.sampled_from(["SIMPLE", "BITPIX", "NAXIS", "NAXIS1",
                                                 "NAXIS2", "NAXIS3"]), FITS_VALUES),
                     max_size=6),
       cards=st.lists(st.tuples(st.sampled_from(FITS_KEYWORDS), FITS_VALUES), max_size=12),
       payload=st.binary(max_size=600),
       extension=st.booleans())
def _fuzz_fits_headers(fuzz_dir, counts, head, cards, payload, extension):
    """Headers built from FITS's own keywords with wrong, missing, repeated or absurd
    values (and optionally a second HDU after a valid primary one)."""
    body = fits_bytes(head + cards, payload)
    if extension:
        body = fits_bytes([("SIMPLE", True), ("BITPIX", 8), ("NAXIS", 0), ("EXTEND", True)],
                          b"") + b"XTENSION= 'IMAGE   '" + body[20:]
    path = fuzz_dir / "header.fits"
    path.write_bytes(body)
    _exercise(path, ".fits", fuzz_dir, counts, "fits headers")


def test_fuzz_fits_headers(fuzz_dir, capsys):
    run_fuzz(_fuzz_fits_headers, "FITS headers", capsys, fuzz_dir,
             at_least={"fits headers: cases": 300, "fits headers: rejected": 300})


DAMAGED_KINDS = ["npy", "npy_fortran", "npz", "npz_compressed", "h5", "h5_latest", "fits",
                 "fits_scaled", "fits_compressed"]


@settings(FUZZ, max_examples=2000)
@given(kind=st.sampled_from(DAMAGED_KINDS), mutate=mutations())
def _fuzz_damaged_valid_files(fuzz_dir, valid_files, counts, kind, mutate):
    ext, raw = valid_files[kind]
    path = fuzz_dir / f"damaged{ext}"
    path.write_bytes(mutate(raw))
    _exercise(path, ext, fuzz_dir, counts, f"damaged {kind}")


def test_fuzz_damaged_valid_files(fuzz_dir, valid_files, capsys):
    # every kind is damaged often; some damage leaves a loadable file, most does not
    run_fuzz(_fuzz_damaged_valid_files, "damaged valid files", capsys, fuzz_dir, valid_files,
             at_least={": cases": 1000, ": loaded": 50, ": rejected": 1000,
                       **{f"damaged {kind}: cases": 30 for kind in DAMAGED_KINDS}})


@settings(FUZZ, max_examples=30)
@given(mutate=mutations())
def _fuzz_damaged_hdf5_with_string_attributes(fuzz_dir, counts, mutate):
    write_h5(fuzz_dir / "vlen_source.h5", vlen_unit=True)
    path = fuzz_dir / "vlen_damaged.h5"
    path.write_bytes(mutate((fuzz_dir / "vlen_source.h5").read_bytes()))
    loader = L.Hdf5Loader(attr_timeout_s=2.0)
    what = "damaged h5 (string attributes)"
    counts[f"{what}: cases"] += 1
    attempt(lambda: loader.list_arrays(path), counts, what)
    attempt(lambda: loader.load(path, "data"), counts, what)


def test_fuzz_damaged_hdf5_with_string_attributes(fuzz_dir, capsys):
    """Variable-length attributes go through the child process; it must contain hangs."""
    run_fuzz(_fuzz_damaged_hdf5_with_string_attributes, "damaged HDF5, string attributes",
             capsys, fuzz_dir, at_least={"damaged h5 (string attributes): cases": 20})


TEXT_TOKENS = ["t", "y", "f", ",", " ", "\t", "\n", "#", "0", "1", "2.5", "-3", "1e308",
               "1e999", "nan", "inf", "x", "\ufeff", "\x00", '"', "\r"]


@settings(FUZZ, max_examples=600)
@given(ext=st.sampled_from([".csv", ".txt", ".dat"]),
       content=st.one_of(st.binary(max_size=512),
                         st.lists(st.sampled_from(TEXT_TOKENS), max_size=80).map(
                             lambda parts: "".join(parts).encode("utf-8"))))
def _fuzz_series_and_power_tables(fuzz_dir, counts, ext, content):
    path = fuzz_dir / f"series{ext}"
    path.write_bytes(content)
    counts["series / power table text: cases"] += 1
    attempt(lambda: L.load_series(path), counts, "series")
    attempt(lambda: L.load_power_table(path), counts, "power table")


def test_fuzz_series_and_power_tables(fuzz_dir, capsys):
    run_fuzz(_fuzz_series_and_power_tables, "series and power tables", capsys, fuzz_dir,
             at_least={"series / power table text: cases": 300, "series: rejected": 200,
                       "power table: rejected": 200})
