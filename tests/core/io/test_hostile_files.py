"""Hostile and damaged data files (issue #16): HDF5 datasets whose bytes live in other
files, FIFOs and devices, arrays that unpack to far more than their file, and the
messages for an external link, a bad noise map and an impossible FITS header.

Whatever could hang (a FIFO) or exhaust memory runs in a child process with a timeout,
so a regression fails the test instead of freezing the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from core import config as C
from core import io as L
from core.io import LoadError
from support.files import fits_bytes

ROOT = Path(__file__).resolve().parents[3]
H5 = L.LOADERS[".h5"]


def field_config(tmp_path, data: dict, likelihood: dict | None = None):
    doc = {"model": {"kind": "field"}, "data": data}
    if likelihood is not None:
        doc["likelihood"] = likelihood
    return C.parse_config(C.to_toml(doc), base_dir=tmp_path)


def expect_error(fn, *fragments) -> str:
    with pytest.raises(LoadError) as info:
        fn()
    message = str(info.value)
    for fragment in fragments:
        assert str(fragment) in message, f"{fragment!r} not in {message!r}"
    return message


def run_child(code: str, timeout_s: float = 60) -> str:
    """Run ``code`` in a fresh interpreter (cwd and sys.path: the repository and tests/);
    its stdout. A child still running after ``timeout_s`` is killed and fails the test,
    naming what it printed last."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=timeout_s, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        pytest.fail(f"hung for {timeout_s} s; the child printed last: "
                    f"{out.strip().splitlines()[-1:] or '(nothing)'}")
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


# --------------------------------------------------------------------------- item 1


def test_hdf5_external_storage_is_refused_and_its_file_never_read(tmp_path):
    """A dataset whose raw bytes the writer placed in another file (here a stand-in for
    /etc/passwd): the loader used to read that file into the run."""
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n" * 200)
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", shape=(16, 16, 16), dtype="u1",
                         external=[(str(secret), 0, 4096)])
    for fn in (lambda: H5.load(path), lambda: H5.load(path, "data", attributes=False),
               lambda: L.array_info(path, "data"),
               lambda: L.load_field_inputs(field_config(tmp_path, {"path": "d.h5"}))):
        expect_error(fn, path, "'data'", "external storage", secret, "refused")
    assert [i.name for i in H5.list_arrays(path)] == ["data"]     # listing reads headers


def test_hdf5_virtual_dataset_is_refused_not_read_as_zeros(tmp_path):
    source = tmp_path / "source.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset("x", data=np.ones((4, 4, 4)))
    layout = h5py.VirtualLayout(shape=(4, 4, 4), dtype="f8")
    layout[:] = h5py.VirtualSource(str(source), "x", shape=(4, 4, 4))
    path = tmp_path / "vds.h5"
    with h5py.File(path, "w") as f:
        f.create_virtual_dataset("data", layout, fillvalue=0)
    source.unlink()                      # what used to load as all zeros
    for fn in (lambda: H5.load(path), lambda: L.array_info(path, "data")):
        expect_error(fn, path, "'data'", "virtual dataset", "source.h5", "refused")


def test_hdf5_external_links_are_refused_naming_the_target(tmp_path):
    """An external link to an existing dataset used to be missing from the listing
    ("no dataset 'data'; available: none") or followed into the other file."""
    target = tmp_path / "target.h5"
    with h5py.File(target, "w") as f:
        f.create_dataset("data", data=np.ones((4, 4, 4)))
        f.create_group("grp").create_dataset("mask", data=np.ones((4, 4, 4), bool))
    path = tmp_path / "link.h5"
    with h5py.File(path, "w") as f:
        f["data"] = h5py.ExternalLink(str(target), "/data")
    for fn in (lambda: H5.load(path, "data"), lambda: L.array_info(path, "data"),
               lambda: L.load_field_inputs(field_config(tmp_path, {"path": "link.h5"}))):
        expect_error(fn, path, "'data' is an external link", target, "refused")
    expect_error(lambda: H5.load(path), path, "only external links", "'data' ->", target)

    # Reached through a group that is an external link, or through soft links.
    with h5py.File(tmp_path / "own.h5", "w") as f:
        f.create_dataset("data", data=np.zeros((4, 4, 4)))
        f["grp"] = h5py.ExternalLink(str(target), "/grp")
        f["soft"] = h5py.SoftLink("/grp/mask")
        f.create_group("g")["rel"] = h5py.SoftLink("../grp")   # not resolvable: missing
        f["fine"] = h5py.SoftLink("/data")
    own = tmp_path / "own.h5"
    for key in ("grp/mask", "soft"):
        expect_error(lambda: H5.load(own, key), own, "'grp' is an external link", "refused")
    cfg = field_config(tmp_path, {"path": "own.h5", "mask": "grp/mask"})
    expect_error(lambda: L.load_field_inputs(cfg), "data.mask = 'grp/mask'",
                 "'grp' is an external link", target)
    assert np.array_equal(H5.load(own, "fine").array, np.zeros((4, 4, 4)))
    expect_error(lambda: H5.load(own, "g/rel/mask"), own, "no dataset")


# Runs in a child: every way a FIFO or a device can be handed to a loader. Each case
# prints "start NAME" first, so a hang names the case.
_FIFO_CASES = r"""
import json, os, sys
import h5py, numpy as np
from core import config as C
from core import io as L

tmp = sys.argv[1]
fifo = os.path.join(tmp, "fifo")
os.mkfifo(fifo)
with h5py.File(os.path.join(tmp, "ext.h5"), "w") as f:
    f.create_dataset("data", shape=(4, 4, 4), dtype="u1", external=[(fifo, 0, 64)])
with h5py.File(os.path.join(tmp, "link.h5"), "w") as f:
    f.create_dataset("data", data=np.zeros((4, 4, 4)))
    f["mask"] = h5py.ExternalLink(fifo, "/mask")
for ext in (".npy", ".npz", ".h5", ".fits"):
    os.mkfifo(os.path.join(tmp, "pipe" + ext))
    os.symlink("/dev/zero", os.path.join(tmp, "zero" + ext))
for name in ("pipe.csv", "pk.txt"):
    os.mkfifo(os.path.join(tmp, name))

def field(name, **data):
    doc = {"model": {"kind": "field"}, "data": {"path": name, **data}}
    return L.load_field_inputs(C.parse_config(C.to_toml(doc), base_dir=tmp))

h5 = L.LOADERS[".h5"]
cases = {
    "external storage: load": lambda: h5.load(os.path.join(tmp, "ext.h5")),
    "external storage: list": lambda: h5.list_arrays(os.path.join(tmp, "ext.h5")),
    "external storage: config": lambda: field("ext.h5"),
    "external link: load": lambda: h5.load(os.path.join(tmp, "link.h5"), "mask"),
    "external link: config": lambda: field("link.h5", mask="mask"),
    "external link: list": lambda: h5.list_arrays(os.path.join(tmp, "link.h5")),
    "series": lambda: L.load_series(os.path.join(tmp, "pipe.csv")),
    "power table": lambda: L.load_power_table(os.path.join(tmp, "pk.txt")),
}
for ext, loader in sorted((e, L.LOADERS[e]) for e in (".npy", ".npz", ".h5", ".fits")):
    for kind in ("pipe", "zero"):
        p = os.path.join(tmp, kind + ext)
        cases[f"{kind}{ext}: load"] = lambda loader=loader, p=p: loader.load(p)
        cases[f"{kind}{ext}: list"] = lambda loader=loader, p=p: loader.list_arrays(p)
        cases[f"{kind}{ext}: config"] = lambda p=p: field(os.path.basename(p))
out = {}
for name, fn in cases.items():
    print("start", name, flush=True)
    try:
        result = fn()
        out[name] = ["ok", repr(result)[:200]]
    except L.LoadError as exc:
        out[name] = ["LoadError", str(exc)]
    except Exception as exc:
        out[name] = [type(exc).__name__, str(exc)]
print("RESULT " + json.dumps(out), flush=True)
"""


def test_fifos_and_devices_are_never_read(tmp_path):
    """A FIFO as the storage of an HDF5 dataset hung the loader forever; a FIFO or a
    device as the data path itself, or behind an external link, must not hang either."""
    stdout = run_child(f"import sys; sys.argv[1:] = [{str(tmp_path)!r}]\n{_FIFO_CASES}")
    results = json.loads(stdout.split("RESULT ", 1)[1])
    listed = {"external storage: list": "[ArrayInfo(name='data', shape=(4, 4, 4)",
              "external link: list": "[ArrayInfo(name='data', shape=(4, 4, 4)"}
    for name, (kind, text) in results.items():
        if name in listed:
            assert kind == "ok" and text.startswith(listed[name]), (name, kind, text)
            continue
        assert kind == "LoadError", (name, kind, text)
        assert str(tmp_path) in text, (name, text)
    assert "external storage" in results["external storage: load"][1]
    assert "external link" in results["external link: config"][1]
    for ext in (".npy", ".npz", ".h5", ".fits"):
        for kind in ("pipe", "zero"):
            assert "not a regular file" in results[f"{kind}{ext}: load"][1]
    assert "not a regular file" in results["series"][1]
    assert "not a regular file" in results["power table"][1]


# --------------------------------------------------------------------------- item 4


_PEAK_RSS = r"""
import resource, sys
from core import config as C
from core import io as L

tmp, ref = sys.argv[1], sys.argv[2]
doc = {"model": {"kind": "field"}, "data": {"path": sys.argv[3], "mask": ref}}
cfg = C.parse_config(C.to_toml(doc), base_dir=tmp)
L.LOADERS[".h5"].list_arrays(tmp + "/small.h5")        # h5py imported, library set up
L.LOADERS[".npz"].list_arrays(tmp + "/small.npz")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    L.load_field_inputs(cfg)
    message = "(no error)"
except L.LoadError as exc:
    message = str(exc)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(f"GROWTH_KB {after - before}")
print("MESSAGE " + message)
"""


def _big_compressed_npz(path: Path, shape) -> None:
    """An .npz with a small 'data' array and a deflated all-False 'mask' of ``shape``,
    streamed so the test never holds the mask in memory."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        with zf.open("data.npy", "w") as fp:
            np.lib.format.write_array(fp, np.ones((16, 16, 16)))
        with zf.open("mask.npy", "w", force_zip64=True) as fp:
            np.lib.format.write_array_header_1_0(
                fp, {"descr": "|b1", "fortran_order": False, "shape": shape})
            block = bytes(2**24)
            for _ in range(int(np.prod(shape)) // len(block)):
                fp.write(block)


@pytest.mark.parametrize("kind", ["sparse hdf5", "compressed npz"])
def test_companion_array_of_the_wrong_shape_is_refused_before_it_is_read(tmp_path, kind):
    """A mask whose file is tiny but whose array is huge (a sparse HDF5 dataset; a
    deflated .npz member) is refused from its header: the process's peak memory grows by
    far less than the array (it used to be read whole first, an OOM kill at 3000^3)."""
    with h5py.File(tmp_path / "small.h5", "w") as f:
        f.create_dataset("x", data=np.zeros(3))
    np.savez(tmp_path / "small.npz", x=np.zeros(3))
    if kind == "sparse hdf5":
        shape = (800, 800, 800)
        with h5py.File(tmp_path / "d.h5", "w") as f:
            f.create_dataset("data", data=np.ones((16, 16, 16)))
            f.create_dataset("mask", shape=shape, dtype=bool, chunks=(64, 64, 64))
        data_file, ref = "d.h5", "mask"
        assert (tmp_path / "d.h5").stat().st_size < 100_000
    else:
        shape = (512, 512, 512)
        _big_compressed_npz(tmp_path / "d.npz", shape)
        data_file, ref = "d.npz", "mask"
        assert (tmp_path / "d.npz").stat().st_size < 2_000_000
    nbytes = int(np.prod(shape))
    stdout = run_child(f"import sys; sys.argv[1:] = {[str(tmp_path), ref, data_file]!r}\n"
                       f"{_PEAK_RSS}", timeout_s=120)
    growth = int(stdout.split("GROWTH_KB ")[1].split()[0]) * 1024
    message = stdout.split("MESSAGE ", 1)[1].strip()
    for fragment in (tmp_path / data_file, "data.mask", "'mask'", str(shape),
                     "(16, 16, 16)", "does not match the data shape"):
        assert str(fragment) in message, (fragment, message)
    assert growth < nbytes / 8, f"peak RSS grew by {growth / 2**20:.0f} MiB for a " \
                                f"{nbytes / 2**20:.0f} MiB array: it was read"


def test_every_companion_header_is_checked_before_any_array_is_read(tmp_path):
    """Noise maps and truth arrays too, from their headers: a wrong noise map is refused
    naming both shapes, a truth of another shape becomes a note; neither is read
    (tracemalloc sees numpy's allocations: their peak stays far below the array)."""
    import tracemalloc

    shape = (200, 250, 300)
    nbytes = int(np.prod(shape)) * 4
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=np.ones((4, 5, 6)))
        f.create_dataset("noise", shape=shape, dtype="f4", chunks=(50, 50, 50))
        f.create_dataset("truth", shape=shape, dtype="f4", chunks=(50, 50, 50))
        f.create_dataset("mask", data=np.ones((4, 5, 6), bool))
    noisy = field_config(tmp_path, {"path": "d.h5", "noise_map": "noise"})
    masked = field_config(tmp_path, {"path": "d.h5", "mask": "mask"})
    tracemalloc.start()
    try:
        expect_error(lambda: L.load_field_inputs(noisy), "(data.noise_map)", path,
                     "'noise'", str(shape), "(4, 5, 6)", "does not match the data shape")
        inputs = L.load_field_inputs(masked)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert inputs.truth is None
    assert any("'truth'" in n and str(shape) in n for n in inputs.notes), inputs.notes
    assert peak < nbytes / 8, f"peak {peak / 2**20:.0f} MiB for {nbytes / 2**20:.0f} MiB arrays"


# --------------------------------------------------------------------------- item 8


def test_noise_map_error_names_the_file_and_prints_plain_numbers(tmp_path):
    noise = np.full((4, 4, 4), 0.5)
    noise[1, 2, 3] = 0.0
    noise[0, 0, 0] = -1.0          # masked: may hold anything
    mask = np.ones((4, 4, 4), bool)
    mask[0, 0, 0] = False
    np.savez(tmp_path / "d.npz", data=np.ones((4, 4, 4)), mask=mask)
    np.save(tmp_path / "sd.npy", noise)
    cfg = field_config(tmp_path, {"path": "d.npz", "mask": "mask", "noise_map": "sd.npy"})
    message = expect_error(lambda: L.load_field_inputs(cfg), tmp_path / "sd.npy",
                           "data.noise_map", "1 observed voxel(s)", "(1, 2, 3): 0.0)")
    assert "np." not in message, message
    # A masked voxel's noise sd is never used: any value is accepted there.
    noise[1, 2, 3] = 0.5
    np.save(tmp_path / "sd.npy", noise)
    assert L.load_field_inputs(cfg).noise_map[0, 0, 0] == -1.0


def test_fits_header_promising_more_than_the_file_says_what_it_promises(tmp_path):
    path = tmp_path / "big.fits"
    n = 10**9
    path.write_bytes(fits_bytes([("SIMPLE", True), ("BITPIX", 8), ("NAXIS", 3),
                                 ("NAXIS1", n), ("NAXIS2", n), ("NAXIS3", n)], b"\0" * 100))
    size = path.stat().st_size
    for fn in (lambda: L.LOADERS[".fits"].load(path),
               lambda: L.LOADERS[".fits"].list_arrays(path), lambda: L.array_info(path)):
        expect_error(fn, path, "NAXIS1 = 1000000000", "NAXIS3 = 1000000000", "BITPIX 8",
                     f"{10**27} bytes of data", f"the file has {size} bytes", "truncated")
