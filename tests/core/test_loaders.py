"""Tests of core.loaders: round trips per format, the run inputs, every bad-input case
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
from core import loaders as L
from core.grid import Grid
from core.integral_model import Series, save_series_csv
from core.loaders import LoadError
from core.power_spectrum import PowerLaw, TabulatedPower
from core.synthetic import make_dataset, save_dataset

ROOT = Path(__file__).resolve().parents[2]

# Fuzz cases run, by test; printed by test_zz_fuzz_report (run pytest with -s or -rA).
FUZZ_COUNTS: collections.Counter = collections.Counter()


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
    code = ("import sys, core.loaders; "
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'PySide6', 'PyQt5', 'PyQt6', 'pyqtgraph', 'vispy', 'scipy', "
            "'h5py')]; print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_registry_keys_and_loader_for(tmp_path):
    assert set(L.LOADERS) == {".npy", ".npz", ".h5", ".hdf5"}
    assert set(C.FIELD_DATA_EXTENSIONS) == set(L.LOADERS)
    assert L.SERIES_EXTENSIONS == C.INTEGRAL_DATA_EXTENSIONS
    assert isinstance(L.loader_for("a/B.NPZ"), L.NpzLoader)
    assert isinstance(L.loader_for(tmp_path / "x.hdf5"), L.Hdf5Loader)
    for name in ("data.txt", "data", "data.npy.gz"):
        expect_error(name, lambda: L.loader_for(name), "accepted: .npy, .npz, .h5, .hdf5")


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

    def cfg(data, likelihood=None):
        return lambda: L.load_field_inputs(field_config(t, data, likelihood))

    return [
        ("missing file", t / "nope.npy", lambda: npy.load(t / "nope.npy"), ["no such file"]),
        ("missing via config", t / "nope.npz", cfg({"path": "nope.npz"}), ["no such file"]),
        ("directory", t / "adir.npz", lambda: npz.list_arrays(t / "adir.npz"),
         ["is a directory"]),
        ("wrong extension", "d.fits", lambda: L.loader_for("d.fits"), ["accepted"]),
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
        ("integral config", "model.kind", lambda: L.load_field_inputs(
            C.default_config("integral", base_dir=t)), ["load_series_inputs"]),
    ]


def test_every_bad_input_is_a_load_error_naming_the_file(tmp_path):
    for name, path, fn, fragments in _bad_files(tmp_path):
        try:
            expect_error(path, fn, *fragments)
        except BaseException as exc:
            raise AssertionError(f"case {name!r}: {exc}") from exc


def test_unreadable_file_and_fifo(tmp_path):
    fifo = tmp_path / "pipe.npy"
    os.mkfifo(fifo)
    expect_error(fifo, lambda: L.LOADERS[".npy"].load(fifo), "not a regular file")
    if os.geteuid() != 0:       # root reads anything
        locked = tmp_path / "locked.npz"
        np.savez(locked, data=np.ones(3))
        locked.chmod(0)
        expect_error(locked, lambda: L.LOADERS[".npz"].load(locked), "permission denied")


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
        monkeypatch.setattr(L, "_ATTRIBUTE_READER", code)
        expect_error(tmp_path / "ok.h5", lambda: loader.load(tmp_path / "ok.h5", "data"),
                     fragment)


# --------------------------------------------------------------------------- fuzzing


def attempt(fn):
    """Run a loader call: success or LoadError, anything else fails the test."""
    try:
        fn()
    except LoadError as exc:
        assert str(exc)
    # Any other exception propagates and fails the example.


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


def _exercise(path, ext, base_dir):
    loader = L.LOADERS[ext]
    attempt(lambda: loader.list_arrays(path))
    attempt(lambda: loader.load(path))
    attempt(lambda: loader.load(path, "data"))
    data = {"path": path.name}
    if ext != ".npy":
        data.update(mask="mask", noise_map="noise" if ext == ".npz" else "maps/noise")
    attempt(lambda: L.load_field_inputs(field_config(base_dir, data)))


@FUZZ
@given(ext=st.sampled_from(sorted(L.LOADERS)),
       prefix=st.sampled_from([b"", b"\x93NUMPY", b"\x93NUMPY\x01\x00", b"PK\x03\x04",
                               b"\x89HDF\r\n\x1a\n"]),
       payload=st.binary(max_size=2048))
def test_fuzz_random_bytes(fuzz_dir, ext, prefix, payload):
    path = fuzz_dir / f"random{ext}"
    path.write_bytes(prefix + payload)
    _exercise(path, ext, fuzz_dir)
    FUZZ_COUNTS["random bytes"] += 1


@settings(FUZZ, max_examples=1500)
@given(kind=st.sampled_from(["npy", "npy_fortran", "npz", "npz_compressed", "h5",
                             "h5_latest"]),
       mutate=mutations())
def test_fuzz_damaged_valid_files(fuzz_dir, valid_files, kind, mutate):
    ext, raw = valid_files[kind]
    path = fuzz_dir / f"damaged{ext}"
    path.write_bytes(mutate(raw))
    _exercise(path, ext, fuzz_dir)
    FUZZ_COUNTS[f"damaged {kind}"] += 1


@settings(FUZZ, max_examples=30)
@given(mutate=mutations())
def test_fuzz_damaged_hdf5_with_string_attributes(fuzz_dir, mutate):
    """Variable-length attributes go through the child process; it must contain hangs."""
    write_h5(fuzz_dir / "vlen_source.h5", vlen_unit=True)
    path = fuzz_dir / "vlen_damaged.h5"
    path.write_bytes(mutate((fuzz_dir / "vlen_source.h5").read_bytes()))
    loader = L.Hdf5Loader(attr_timeout_s=2.0)
    attempt(lambda: loader.list_arrays(path))
    attempt(lambda: loader.load(path, "data"))
    FUZZ_COUNTS["damaged h5 (string attributes)"] += 1


TEXT_TOKENS = ["t", "y", "f", ",", " ", "\t", "\n", "#", "0", "1", "2.5", "-3", "1e308",
               "1e999", "nan", "inf", "x", "\ufeff", "\x00", '"', "\r"]


@settings(FUZZ, max_examples=600)
@given(ext=st.sampled_from([".csv", ".txt", ".dat"]),
       content=st.one_of(st.binary(max_size=512),
                         st.lists(st.sampled_from(TEXT_TOKENS), max_size=80).map(
                             lambda parts: "".join(parts).encode("utf-8"))))
def test_fuzz_series_and_power_tables(fuzz_dir, ext, content):
    path = fuzz_dir / f"series{ext}"
    path.write_bytes(content)
    attempt(lambda: L.load_series(path))
    attempt(lambda: L.load_power_table(path))
    FUZZ_COUNTS["series / power table text"] += 1


def test_zz_fuzz_report():
    """Runs last in this file: how many fuzz cases ran (see -s / -rA output)."""
    total = sum(FUZZ_COUNTS.values())
    print(f"\nfuzz cases run: {total}")
    for name, count in sorted(FUZZ_COUNTS.items()):
        print(f"  {name:34s} {count}")
    if FUZZ_COUNTS:       # the fuzz tests ran in this process (not deselected)
        assert total >= 300
