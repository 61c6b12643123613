"""Data-file loaders: a registry keyed by file extension, shared by the CLI and the GUI.

numpy, h5py and astropy only (h5py and astropy imported when an HDF5 or FITS file is
first read): the GUI's Data panel imports this module, so it never imports TensorFlow,
Qt or scipy at import time.

Gridded arrays (``LOADERS``, one loader object per extension)::

    .npy          one array; ``key`` is ignored. Arrays whose data exceed
                  ``MMAP_THRESHOLD_BYTES`` (64 MiB) come back memory-mapped read-only.
    .npz          a zip of named .npy members; ``key`` picks one (listing reads only
                  the members' headers). Other 0-d members become ``attrs``, and
                  members named ``box_size`` / ``unit`` give the box (the format of
                  ``core.synthetic.save_dataset``).
    .h5 / .hdf5   datasets at paths such as "group/field"; ``box_size`` (one number or
                  three) and ``unit`` are read from the dataset's attributes, else the
                  file root's.
    .fits / .fit / .fts   image HDUs (astropy.io.fits): "PRIMARY", an EXTNAME or an
                  index; box size |CDELTn| * NAXISn in CUNITn. numpy axis i is FITS
                  axis 3 - i (NAXIS1 varies fastest). See ``FitsLoader``.

Each loader has ``list_arrays(path) -> [ArrayInfo]`` and ``load(path, key=None, *,
attributes=True) -> LoadedArray``; ``key=None`` picks the only array and is an error
when there are several; ``attributes=False`` skips the box size, unit and metadata
(HDF5 string attributes cost a child process, see ``Hdf5Loader``). Nothing is ever
unpickled: an array of Python objects (dtype object) is refused from its header,
before any of its bytes are read.

1-D series (``load_series``: .csv .txt .dat, columns t, y[, f]) and P(k) tables
(``load_power_table``) wrap ``core.integral_model.load_series_csv`` and
``core.power_spectrum.TabulatedPower.from_file``.

Run inputs. ``load_field_inputs(config)`` returns the validated arrays of a field
run (it does not build ``Observations``; the engine does). References in
``data.mask`` and ``data.noise_map`` follow one rule:

    ends in .npy/.npz/.h5/.hdf5/  a file (relative to the config file), holding one
      .fits/.fit/.fts             array, e.g. "mask.npy"
    FILE:KEY, FILE as above        the array KEY in that file, e.g. "other.npz:mask",
                                  "maps.h5:survey/mask", "cube.fits:MASK"
    anything else                  an array of that name in the data file, e.g. "mask"

Errors. Every problem with a file raises ``LoadError`` (a ``ValueError``) whose message
starts with the file's path and names the array and the offending value or what would
be accepted; no other exception escapes a loader for a bad file (the GUI shows the
message, never a traceback).
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import re
import stat
import struct
import tokenize
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

try:  # lzma-compressed zip members raise its error on corrupt data
    from lzma import LZMAError
except ImportError:  # pragma: no cover - Python built without lzma
    class LZMAError(Exception):
        pass

__all__ = [
    "LoadError",
    "ArrayInfo",
    "LoadedArray",
    "ArrayStats",
    "FieldInputs",
    "NpyLoader",
    "NpzLoader",
    "Hdf5Loader",
    "FitsLoader",
    "LOADERS",
    "is_file_reference",
    "MMAP_THRESHOLD_BYTES",
    "SERIES_EXTENSIONS",
    "loader_for",
    "array_info",
    "inspect_array",
    "load_field_inputs",
    "load_series",
    "load_series_inputs",
    "load_power_table",
]

MMAP_THRESHOLD_BYTES = 64 * 2**20
SERIES_EXTENSIONS = (".csv", ".txt", ".dat")   # core.config.INTEGRAL_DATA_EXTENSIONS
_CHUNK_BYTES = 16 * 2**20          # inspect_array's working block
_ATTR_MAX_BYTES = 2**20            # 0-d .npz members larger than this are not read as attrs

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_FITS_MAGIC = b"SIMPLE  ="


class LoadError(ValueError):
    """A data file that cannot be used; the message names the file, the array and why."""


class ArrayInfo(NamedTuple):
    """One array in a file, from its header: nothing is loaded.

    ``shape`` is None for an HDF5 dataset with a null dataspace (it holds nothing);
    ``size_bytes`` is what the array would take in memory.
    """

    name: str
    shape: tuple[int, ...] | None
    dtype: np.dtype
    size_bytes: int


@dataclass(frozen=True, eq=False)
class LoadedArray:
    """An array read from a file, with what the file says about its box.

    ``name`` is the key (for a .npy, the file's stem); ``box_size`` is (L0, L1, L2) or
    None; ``attrs`` holds the file's small metadata (.npz: its 0-d members other than
    the one loaded; HDF5: the root's attributes overridden by the dataset's).
    """

    array: np.ndarray
    name: str
    path: str
    box_size: tuple[float, float, float] | None = None
    unit: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)


class ArrayStats(NamedTuple):
    """Summary of an array for the GUI (see ``inspect_array``).

    ``min``, ``max`` and ``mean`` are over the finite values (None when there are
    none, and for complex, string or record dtypes); ``n_nan`` and ``n_inf`` count the
    NaN and infinite entries (a complex entry counts when either part is).
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    min: float | int | None
    max: float | int | None
    mean: float | None
    n_nan: int
    n_inf: int


@dataclass(frozen=True, eq=False)
class FieldInputs:
    """The validated arrays of a field run (see ``load_field_inputs``).

    data         3-D real array: the file's float dtype kept (memory-mapped read-only
                 for a large .npy); integers kept as counts for poisson_lognormal,
                 converted to float64 for gaussian.
    mask         bool array of the data shape (True = observed), or None.
    noise_map    float64 array of the data shape, or None.
    noise_sigma  the scalar noise sd (config's data.noise_sigma, or a 0-d noise_map
                 array), or None.
    truth        the data file's "truth" array (same shape, real) when it has one.
    box_size_from_file, unit   what the data file says about its box, or None.
    notes        things the user may want to know (conversions, disagreements with the
                 config, a "truth" array that was not usable).
    """

    data: np.ndarray
    mask: np.ndarray | None
    noise_map: np.ndarray | None
    noise_sigma: float | None
    truth: np.ndarray | None
    box_size_from_file: tuple[float, float, float] | None
    unit: str | None
    data_path: str = ""
    notes: tuple[str, ...] = ()


# --------------------------------------------------------------------------- helpers

# What a damaged file can make numpy, zipfile, zlib or h5py raise. RuntimeError covers
# encrypted zip members and h5py's library errors; NotImplementedError unknown zip
# compression methods; tokenize.TokenError numpy's fallback parser for .npy headers
# written by Python 2 (found by fuzzing).
_FILE_ERRORS = (OSError, EOFError, ValueError, KeyError, IndexError, TypeError,
                OverflowError, ZeroDivisionError, SyntaxError, UnicodeError, RuntimeError,
                NotImplementedError, zipfile.BadZipFile, zlib.error, struct.error,
                tokenize.TokenError, LZMAError)


def _short(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _nbytes(shape, dtype: np.dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def _sniff(path: str) -> str | None:
    """The format the file's first bytes look like, or None."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(9)
    except OSError:
        return None
    if head.startswith(_NPY_MAGIC):
        return ".npy"
    if head.startswith(_ZIP_MAGIC):
        return ".npz"
    if head.startswith(_HDF5_MAGIC):
        return ".h5"
    if head.startswith(_FITS_MAGIC):
        return ".fits"
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "pickle"
    return None


def _hint(path: str, expected: tuple[str, ...]) -> str:
    kind = _sniff(path)
    if kind is None or kind in expected:
        return ""
    if kind == "pickle":
        return "; it looks like a Python pickle, which Fieldscope never loads"
    return f"; its first bytes look like a {kind} file, so check its extension"


def _check_file(path) -> tuple[str, int]:
    """The path as a string and the file's size; LoadError unless a readable regular file."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise LoadError(f"{path!r}: not a file path") from None
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise LoadError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise LoadError(f"{path}: cannot access the file ({_short(exc)})") from None
    if stat.S_ISDIR(info.st_mode):
        raise LoadError(f"{path}: is a directory, not a data file")
    if not stat.S_ISREG(info.st_mode):    # a FIFO or device would block or never end
        raise LoadError(f"{path}: not a regular file")
    if info.st_size == 0:
        raise LoadError(f"{path}: the file is empty (0 bytes)")
    return path, info.st_size


@contextlib.contextmanager
def _reading(path: str, what: str, expected: tuple[str, ...], extra: tuple = ()):
    """Turn whatever reading a damaged file raises into a LoadError naming the file
    (``extra``: the reader library's own error types)."""
    try:
        yield
    except LoadError:
        raise
    except MemoryError:
        raise LoadError(f"{path}: not enough memory to load it as {what}") from None
    except PermissionError:
        raise LoadError(f"{path}: permission denied") from None
    except (*_FILE_ERRORS, *extra) as exc:
        raise LoadError(f"{path}: not a readable {what} file ({_short(exc)})"
                        f"{_hint(path, expected)}") from None


def _listing(infos: list[ArrayInfo], limit: int = 12) -> str:
    if not infos:
        return "none"
    parts = [f"{i.name!r} {i.shape} {i.dtype}" for i in infos[:limit]]
    if len(infos) > limit:
        parts.append(f"... ({len(infos) - limit} more)")
    return ", ".join(parts)


def _pick_key(path: str, key, infos: list[ArrayInfo], what: str = "array") -> str:
    if key is None:
        if len(infos) == 1:
            return infos[0].name
        if not infos:
            raise LoadError(f"{path}: holds no {what}s")
        raise LoadError(f"{path}: holds {len(infos)} {what}s; choose one with a key "
                        f"({_listing(infos)})")
    if not isinstance(key, str) or not key:
        raise LoadError(f"{path}: key {key!r} must be a non-empty string")
    return key


def _missing(path: str, key: str, infos: list[ArrayInfo], what: str = "array") -> LoadError:
    return LoadError(f"{path}: no {what} {key!r}; available: {_listing(infos)}")


def _check_header(where: str, shape, dtype: np.dtype, available: int | None) -> int:
    """Refuse pickles, zero-size dtypes and truncated data; return the data's bytes."""
    if dtype.hasobject:
        raise LoadError(f"{where}: dtype {dtype} holds Python objects, which loading would "
                        "unpickle; refused (Fieldscope never unpickles data files). Save a "
                        "numeric array instead")
    if dtype.itemsize == 0:
        raise LoadError(f"{where}: dtype {dtype} has zero-size items; a numeric dtype is "
                        "needed")
    if any(n < 0 for n in shape):
        raise LoadError(f"{where}: negative dimension in shape {shape}")
    nbytes = _nbytes(shape, dtype)
    if available is not None and available < nbytes:
        raise LoadError(f"{where}: truncated: the header promises shape {shape} {dtype} "
                        f"({nbytes} bytes of data) but only {max(available, 0)} bytes follow")
    return nbytes


def _read_npy_header(fp, where: str, hint: str = ""):
    """(shape, fortran_order, dtype) from an open .npy stream, left at the data."""
    head = fp.read(len(_NPY_MAGIC))
    if head != _NPY_MAGIC:
        raise LoadError(f"{where}: not a .npy array (it does not start with the NumPy "
                        f"magic bytes, got {head[:8]!r}){hint}")
    version = tuple(fp.read(2))
    fmt = np.lib.format
    if version == (1, 0):
        return fmt.read_array_header_1_0(fp)
    if version == (2, 0):
        return fmt.read_array_header_2_0(fp)
    if version == (3, 0):
        try:   # utf-8 headers (non-latin-1 field names); numpy keeps the reader private
            from numpy.lib._format_impl import _read_array_header
        except ImportError:
            raise LoadError(f"{where}: .npy format version 3.0 is not readable with this "
                            "numpy") from None
        return _read_array_header(fp, (3, 0))
    raise LoadError(f"{where}: unknown .npy format version {version}; accepted: 1.0, 2.0, "
                    "3.0")


def _box_size(value, where: str) -> tuple[float, float, float]:
    arr = np.asarray(value)
    if arr.dtype.kind not in "iuf" or arr.ndim > 1 or arr.size not in (1, 3):
        raise LoadError(f"{where}: box_size must be one number or three, got "
                        f"{_show_value(arr)}")
    sizes = [float(x) for x in arr.reshape(-1)]
    if not all(math.isfinite(x) and x > 0 for x in sizes):
        raise LoadError(f"{where}: box_size must be positive and finite, got {sizes}")
    return tuple(sizes * 3) if len(sizes) == 1 else tuple(sizes)


def _unit(value, where: str) -> str:
    arr = np.asarray(value)
    if arr.size == 1 and arr.dtype.kind in "USO":
        item = arr.reshape(-1)[0]
        if isinstance(item, bytes):
            try:
                return item.decode("utf-8")
            except UnicodeDecodeError:
                raise LoadError(f"{where}: unit {item!r} is not UTF-8 text") from None
        if isinstance(item, str):
            return str(item)
    raise LoadError(f"{where}: unit must be a string, got {_show_value(arr)}")


def _show_value(arr: np.ndarray) -> str:
    text = np.array2string(arr, threshold=6, max_line_width=60) if arr.dtype.kind != "O" \
        else repr(arr)[:60]
    return f"{text} ({arr.dtype}, shape {arr.shape})"


def _plain(value):
    """An attribute value as plain Python where it is a scalar or a short string."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, np.generic):
        value = value.item()
        return _plain(value) if isinstance(value, bytes) else value
    return value


# --------------------------------------------------------------------------- .npy


class NpyLoader:
    """One array per file. ``key`` is ignored; the array's name is the file's stem."""

    extensions = (".npy",)
    description = "NumPy array"

    def __init__(self, mmap_threshold: int = MMAP_THRESHOLD_BYTES):
        self.mmap_threshold = mmap_threshold

    def _header(self, path: str, size: int):
        with open(path, "rb") as fp:
            shape, fortran, dtype = _read_npy_header(fp, path, _hint(path, self.extensions))
            offset = fp.tell()
        nbytes = _check_header(path, shape, dtype, size - offset)
        return shape, fortran, dtype, nbytes

    def list_arrays(self, path) -> list[ArrayInfo]:
        path, size = _check_file(path)
        with _reading(path, ".npy", self.extensions):
            shape, _, dtype, nbytes = self._header(path, size)
        return [ArrayInfo(Path(path).stem, tuple(shape), dtype, nbytes)]

    def load(self, path, key=None, *, attributes: bool = True) -> LoadedArray:
        path, size = _check_file(path)
        with _reading(path, ".npy", self.extensions):
            shape, _, dtype, nbytes = self._header(path, size)
            mmap = "r" if nbytes > self.mmap_threshold else None
            array = np.load(path, mmap_mode=mmap, allow_pickle=False)
        if not isinstance(array, np.ndarray):     # cannot happen after the header check
            raise LoadError(f"{path}: not a single .npy array")
        return LoadedArray(array, Path(path).stem, path)


# --------------------------------------------------------------------------- .npz


class NpzLoader:
    """A zip of .npy members; keys are member names without ".npy" (other members are
    ignored). Listing reads only the headers; loading reads one member."""

    extensions = (".npz",)
    description = "NumPy archive"

    def _members(self, archive: zipfile.ZipFile, path: str):
        """{key: (ZipInfo, shape, dtype, nbytes)} from the members' headers."""
        members = {}
        for info in archive.infolist():
            if not info.filename.endswith(".npy") or info.is_dir():
                continue
            key = info.filename[:-4]
            where = f"{path}: array {key!r}"
            with archive.open(info) as fp:
                shape, _, dtype = _read_npy_header(fp, where)
                offset = fp.tell()
            nbytes = _check_header(where, shape, dtype, info.file_size - offset)
            members[key] = (info, tuple(shape), dtype, nbytes)
        return members

    @staticmethod
    def _read(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
        with archive.open(info) as fp:
            return np.lib.format.read_array(fp, allow_pickle=False)

    def list_arrays(self, path) -> list[ArrayInfo]:
        path, _ = _check_file(path)
        with _reading(path, ".npz", self.extensions), zipfile.ZipFile(path) as archive:
            members = self._members(archive, path)
        return [ArrayInfo(k, shape, dtype, n) for k, (_, shape, dtype, n) in members.items()]

    def load(self, path, key=None, *, attributes: bool = True) -> LoadedArray:
        path, _ = _check_file(path)
        with _reading(path, ".npz", self.extensions), zipfile.ZipFile(path) as archive:
            members = self._members(archive, path)
            infos = [ArrayInfo(k, s, d, n) for k, (_, s, d, n) in members.items()]
            key = _pick_key(path, key, infos)
            if key not in members:
                raise _missing(path, key, infos)
            array = self._read(archive, members[key][0])
            if not attributes:
                return LoadedArray(array, key, path)
            box_size = unit = None
            if key != "box_size" and "box_size" in members:
                box_size = _box_size(self._read(archive, members["box_size"][0]),
                                     f"{path}: array 'box_size'")
            if key != "unit" and "unit" in members:
                unit = _unit(self._read(archive, members["unit"][0]), f"{path}: array 'unit'")
            attrs = {}
            for name, (info, shape, dtype, nbytes) in members.items():
                if name in (key, "box_size", "unit") or shape != () or \
                        nbytes > _ATTR_MAX_BYTES:
                    continue
                try:    # metadata is a courtesy: a damaged member is skipped
                    attrs[name] = _plain(self._read(archive, info))
                except (MemoryError, *_FILE_ERRORS):
                    continue
        return LoadedArray(array, key, path, box_size, unit, attrs)


# --------------------------------------------------------------------------- HDF5


def _h5py(path: str):
    try:
        import h5py
    except ImportError as exc:
        raise LoadError(f"{path}: reading HDF5 files needs the h5py package ({exc})") \
            from None
    return h5py


class _Unreadable(NamedTuple):
    """An attribute that could not be read, and why."""

    reason: str


# Runs in a child process: reads variable-length attributes, prints them as JSON.
_ATTRIBUTE_READER = r"""
import json, sys
import h5py, numpy as np

def plain(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, np.generic):
        return plain(v.item())
    if isinstance(v, np.ndarray):
        return [plain(x) for x in v.tolist()] if v.dtype.hasobject else v.tolist()
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return repr(v)

request = json.load(sys.stdin)
out = {}
with h5py.File(request["path"], "r") as f:
    attrs = f[request["object"]].attrs
    for name in request["names"]:
        try:
            out[name] = [True, plain(attrs[name])]
        except Exception as exc:
            out[name] = [False, f"{type(exc).__name__}: {exc}"]
json.dump(out, sys.stdout)
"""


def _read_attributes_isolated(path: str, name: str, attrs: list[str],
                              timeout_s: float) -> dict[str, Any]:
    """Variable-length attributes of object ``name``, read by a child process."""
    import json
    import subprocess
    import sys

    what = f"{path}: reading the attribute(s) {', '.join(map(repr, attrs))} of {name!r}"
    if not sys.executable:
        raise LoadError(f"{what}: no Python interpreter to run the reader process in")
    request = json.dumps({"path": os.path.abspath(path), "object": name, "names": attrs})
    try:   # -P: the working directory is not put on sys.path
        done = subprocess.run([sys.executable, "-P", "-c", _ATTRIBUTE_READER], input=request,
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise LoadError(f"{what} did not finish within {timeout_s:g} s; the HDF5 library "
                        "hangs on this file, which looks damaged") from None
    except OSError as exc:
        raise LoadError(f"{what}: cannot start a reader process ({_short(exc)})") from None
    if done.returncode < 0:
        raise LoadError(f"{what} crashed the HDF5 library (signal {-done.returncode}); the "
                        "file looks damaged")
    try:
        if done.returncode != 0:
            raise ValueError(done.stderr.strip().splitlines()[-1] if done.stderr.strip()
                             else f"exit status {done.returncode}")
        result = json.loads(done.stdout)
    except ValueError as exc:
        raise LoadError(f"{what} failed ({_short(exc)})") from None
    return {attr: (value if ok else _Unreadable(_short(value)))
            for attr, (ok, value) in result.items()}


class Hdf5Loader:
    """HDF5 datasets, named by their path in the file without the leading "/"
    ("field", "group/field"). Variable-length strings and other object dtypes are
    refused; the whole dataset is read into memory."""

    extensions = (".h5", ".hdf5")
    description = "HDF5 file"

    def __init__(self, attr_timeout_s: float = 10.0):
        self.attr_timeout_s = attr_timeout_s

    def _attributes(self, path: str, handle, name: str) -> dict[str, Any]:
        """{attribute: value or _Unreadable} of the object ``name``.

        Fixed-size attributes are read here. Variable-length ones (h5py writes Python
        strings so) live in the file's global heap, and a damaged heap entry makes the
        HDF5 library loop forever or crash (found by fuzzing); they are read in a child
        process that is stopped after ``attr_timeout_s``.
        """
        source = handle[name]
        values: dict[str, Any] = {}
        isolated = []
        for attr in source.attrs:
            try:
                if source.attrs.get_id(attr).dtype.hasobject:
                    isolated.append(attr)
                    continue
                values[attr] = source.attrs[attr]
            except (MemoryError, *_FILE_ERRORS) as exc:
                values[attr] = _Unreadable(_short(exc))
        if isolated:
            values.update(_read_attributes_isolated(path, name, isolated,
                                                    self.attr_timeout_s))
        return values

    @staticmethod
    def _datasets(h5py, group) -> list[ArrayInfo]:
        found = []

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                shape = obj.shape
                dtype = obj.dtype
                found.append(ArrayInfo(name, shape, dtype,
                                       0 if shape is None else _nbytes(shape, dtype)))

        group.visititems(visit)
        prefix = group.name.strip("/")
        if prefix:   # visititems names are relative to the group
            found = [i._replace(name=f"{prefix}/{i.name}") for i in found]
        return sorted(found, key=lambda i: i.name)

    def list_arrays(self, path) -> list[ArrayInfo]:
        path, _ = _check_file(path)
        h5py = _h5py(path)
        with _reading(path, "HDF5", self.extensions), h5py.File(path, "r") as handle:
            return self._datasets(h5py, handle)

    def load(self, path, key=None, *, attributes: bool = True) -> LoadedArray:
        path, _ = _check_file(path)
        h5py = _h5py(path)
        with _reading(path, "HDF5", self.extensions), h5py.File(path, "r") as handle:
            if key is None:
                key = _pick_key(path, None, self._datasets(h5py, handle), "dataset")
            elif not isinstance(key, str) or not key.strip("/"):
                raise LoadError(f"{path}: dataset key {key!r} must name a dataset "
                                f"(available: {_listing(self._datasets(h5py, handle))})")
            name = key.strip("/")
            obj = handle.get(name)
            if obj is None:
                raise _missing(path, name, self._datasets(h5py, handle), "dataset")
            if isinstance(obj, h5py.Group):
                inside = self._datasets(h5py, obj)
                raise LoadError(f"{path}: {name!r} is a group, not a dataset; datasets in "
                                f"it: {_listing(inside)}")
            if not isinstance(obj, h5py.Dataset):
                raise LoadError(f"{path}: {name!r} is a {type(obj).__name__}, not a dataset")
            where = f"{path}: dataset {name!r}"
            if obj.shape is None:
                raise LoadError(f"{where}: holds no data (a null dataspace)")
            if obj.dtype.hasobject:
                raise LoadError(f"{where}: dtype {obj.dtype} (variable-length strings, "
                                "references or other objects) is not an array of numbers")
            array = np.asarray(obj[()])
            if not attributes:
                return LoadedArray(array, name, path)
            root = self._attributes(path, handle, "/")
            own = self._attributes(path, handle, obj.name)
        attrs = {k: _plain(v) for k, v in {**root, **own}.items()
                 if not isinstance(v, _Unreadable)}   # metadata is a courtesy
        box_size = unit = None
        for source, label in ((own, where), (root, f"{path}: root")):
            for attr in ("box_size", "unit"):
                if attr in source and isinstance(source[attr], _Unreadable):
                    raise LoadError(f"{label} attribute {attr!r}: unreadable "
                                    f"({source[attr].reason})")
            if box_size is None and "box_size" in source:
                box_size = _box_size(source["box_size"], f"{label} attribute 'box_size'")
            if unit is None and "unit" in source:
                unit = _unit(source["unit"], f"{label} attribute 'unit'")
        return LoadedArray(array, name, path, box_size, unit, attrs)


# --------------------------------------------------------------------------- FITS


def _fits(path: str):
    try:
        from astropy.io import fits
    except ImportError as exc:
        raise LoadError(f"{path}: reading FITS files needs the astropy package ({exc})") \
            from None
    return fits


def _fits_errors(fits) -> tuple:
    """astropy's own errors for damaged files (found by fuzzing): header cards it cannot
    parse, the tile decompressor's errors, and AttributeError from a header too broken
    for astropy to build an HDU object of."""
    errors = [fits.VerifyError, AttributeError]
    try:
        from astropy.io.fits.hdu.compressed._compression import CfitsioException
        errors.append(CfitsioException)
    except ImportError:    # pragma: no cover - astropy reorganised
        pass
    return tuple(errors)


# BITPIX -> the dtype of the stored values (big-endian on disk), and the dtype astropy
# gives after BSCALE / BZERO (unsigned integers stored with the conventional offsets
# come back unsigned; other scaling gives floats).
_BITPIX = {8: np.dtype(np.uint8), 16: np.dtype(np.int16), 32: np.dtype(np.int32),
           64: np.dtype(np.int64), -32: np.dtype(np.float32), -64: np.dtype(np.float64)}
_UNSIGNED_ZERO = {8: (-128, np.dtype(np.int8)), 16: (2**15, np.dtype(np.uint16)),
                  32: (2**31, np.dtype(np.uint32)), 64: (2**63, np.dtype(np.uint64))}
# Header cards that describe the file's structure, not the data (not copied to attrs).
_FITS_STRUCTURAL = re.compile(r"^(SIMPLE|XTENSION|BITPIX|NAXIS\d*|EXTEND|PCOUNT|GCOUNT|"
                              r"GROUPS|END|COMMENT|HISTORY|CHECKSUM|DATASUM|Z.*|TFIELDS|"
                              r"T(TYPE|FORM|UNIT|DIM|NULL|SCAL|ZERO|DISP)\d+|)$")
_FITS_ATTRS_MAX = 64


_FITS_BLOCK = 2880
_FITS_AXES_KEYWORDS = ("NAXIS", "ZNAXIS")


def _fits_int(card: bytes) -> int | None:
    """The integer value of a fixed-format header card, or None."""
    if card[8:10] != b"= ":
        return None
    text = card[10:].split(b"/", 1)[0].strip()
    try:
        return int(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None


def _fits_prescan(path: str, size: int) -> None:
    """Check the axis counts of every header before astropy reads the file.

    astropy loops forever on a header with NAXIS (or ZNAXIS) = 10**12 (it builds a list
    of that many axes; found by fuzzing), so each header is read here first: its
    80-byte cards up to END, then the data are skipped as the standard says
    (|BITPIX| / 8 * GCOUNT * (PCOUNT + NAXIS1 * ... * NAXISn)). A header this scan
    cannot follow ends it; astropy then reports what is wrong.
    """
    offset = 0
    with open(path, "rb") as fh:
        while offset + _FITS_BLOCK <= size:
            fh.seek(offset)
            values: dict[str, int | None] = {}
            ended = False
            while not ended:
                block = fh.read(_FITS_BLOCK)
                if len(block) < _FITS_BLOCK:
                    return
                offset += _FITS_BLOCK
                for start in range(0, _FITS_BLOCK, 80):
                    card = block[start:start + 80]
                    keyword = card[:8].rstrip().decode("ascii", "replace")
                    if keyword == "END":
                        ended = True
                        break
                    if keyword in _FITS_AXES_KEYWORDS:
                        n = _fits_int(card)
                        if n is not None and not 0 <= n <= 999:
                            raise LoadError(f"{path}: header card {keyword} = {n}: FITS "
                                            "allows 0 to 999 axes")
                    if keyword not in values and (keyword.startswith("NAXIS") or keyword in
                                                  ("BITPIX", "PCOUNT", "GCOUNT")):
                        values[keyword] = _fits_int(card)
            naxis, bitpix = values.get("NAXIS"), values.get("BITPIX")
            if naxis is None or bitpix is None:
                return
            dims = [values.get(f"NAXIS{i}") for i in range(1, naxis + 1)]
            if any(d is None or d < 0 for d in dims):
                return
            if dims and dims[0] == 0 and naxis > 1:      # random groups: NAXIS1 = 0
                dims = dims[1:]
            n = math.prod(dims) if dims else 0
            pcount, gcount = values.get("PCOUNT") or 0, values.get("GCOUNT") or 1
            nbytes = abs(bitpix) // 8 * gcount * (pcount + n)
            if nbytes < 0:
                return
            offset += -(-nbytes // _FITS_BLOCK) * _FITS_BLOCK


class _FitsImage(NamedTuple):
    """What the header of one image HDU says (nothing read from the data)."""

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype          # as loaded (after BSCALE / BZERO), native byte order
    scaled: bool             # BSCALE / BZERO / BLANK present: astropy must scale in memory
    compressed: bool


class FitsLoader:
    """FITS image HDUs (astropy.io.fits): the primary HDU or an image extension.

    Arrays are named "PRIMARY" (HDU 0) and by EXTNAME for extensions ("SCI"; "SCI,2"
    for the second of two with that name; the HDU's index "3" where it has no name);
    a key may also be the index as text ("0", "1"). Only image HDUs that hold data
    are listed; a key naming a table is refused with the reason. ``key=None``, and the
    config's default key "data" when no HDU is named DATA, pick the primary image, or
    the only image extension when the primary HDU holds no data.

    Axis order. FITS axis 1 (NAXIS1) varies fastest, so numpy's shape is (NAXIS3,
    NAXIS2, NAXIS1): numpy axis i is FITS axis 3 - i. The box size is
    (|CDELT3| * NAXIS3, |CDELT2| * NAXIS2, |CDELT1| * NAXIS1), in CUNITn when all three
    axes state the same unit; with CDELTn missing on an axis, or CUNITn differing
    between axes (e.g. deg, deg, Hz), the file states no box (``attrs["box_note"]``
    says why).

    BSCALE / BZERO / BLANK are applied by astropy (such arrays are read into memory);
    unscaled images above ``mmap_threshold`` bytes come back memory-mapped read-only,
    in the file's big-endian byte order. Nothing in a FITS file is ever executed.
    """

    extensions = (".fits", ".fit", ".fts")
    description = "FITS file"

    def __init__(self, mmap_threshold: int = MMAP_THRESHOLD_BYTES):
        self.mmap_threshold = mmap_threshold

    @staticmethod
    @contextlib.contextmanager
    def _open(fits, path: str, memmap: bool):
        import warnings

        with warnings.catch_warnings():
            # damaged headers make astropy warn (and go on); the errors say what matters
            warnings.simplefilter("ignore")
            hdul = fits.open(path, mode="readonly", memmap=memmap, lazy_load_hdus=True,
                             cache=False, use_fsspec=False)
            try:
                yield hdul
            finally:
                hdul.close()

    @staticmethod
    def _image(fits, hdu, index: int, file_size: int, where: str) -> _FitsImage | None:
        """The image HDU's description, None for an image HDU without data."""
        header = hdu.header
        naxis = header.get("NAXIS", 0)
        if not isinstance(naxis, int) or isinstance(naxis, bool) or not 0 <= naxis <= 999:
            raise LoadError(f"{where}: NAXIS = {naxis!r} is not an axis count (0 to 999)")
        if naxis == 0:
            return None
        dims = []
        for i in range(naxis, 0, -1):       # numpy order: the last FITS axis first
            n = header.get(f"NAXIS{i}")
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise LoadError(f"{where}: NAXIS{i} = {n!r} is not a length")
            dims.append(n)
        if 0 in dims:
            return None
        bitpix = header.get("BITPIX")
        if bitpix not in _BITPIX:
            raise LoadError(f"{where}: BITPIX = {bitpix!r}; FITS allows 8, 16, 32, 64, -32, "
                            "-64")
        dtype = _BITPIX[bitpix]
        compressed = isinstance(hdu, fits.CompImageHDU)
        bscale, bzero = header.get("BSCALE", 1), header.get("BZERO", 0)
        for card, value in (("BSCALE", bscale), ("BZERO", bzero)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or \
                    not math.isfinite(value):
                raise LoadError(f"{where}: {card} = {value!r} is not a finite number")
        scaled = any(card in header for card in ("BSCALE", "BZERO", "BLANK"))
        if bscale != 1 or bzero != 0:
            offset, unsigned = _UNSIGNED_ZERO.get(bitpix, (None, None))
            if bscale == 1 and bzero == offset:
                dtype = unsigned
            else:
                dtype = np.dtype(np.float32) if abs(bitpix) <= 16 or bitpix == -32 \
                    else np.dtype(np.float64)
        if not compressed:          # (a compressed image's size is its table's)
            start = hdu.fileinfo()["datLoc"]
            nbytes = math.prod(dims) * abs(bitpix) // 8
            if start + nbytes > file_size:
                raise LoadError(f"{where}: truncated: the header promises shape "
                                f"{tuple(dims)} with BITPIX {bitpix} ({nbytes} bytes of "
                                f"data) but only {max(file_size - start, 0)} bytes follow")
        return _FitsImage(index, "", tuple(dims), dtype, scaled, compressed)

    def _scan(self, fits, hdul, path: str, size: int):
        """([_FitsImage] of the image HDUs with data, {name: reason} of other HDUs)."""
        images, others, names = [], {}, []
        for index, hdu in enumerate(hdul):
            where = f"{path}: HDU {index}"
            name = "PRIMARY" if index == 0 else (str(hdu.name or "").strip() or str(index))
            if index and name != str(index):
                where += f" ({name})"
            names.append((index, name, getattr(hdu, "ver", 1)))
            if not isinstance(hdu, (fits.PrimaryHDU, fits.ImageHDU, fits.CompImageHDU)) \
                    or isinstance(hdu, fits.GroupsHDU):
                others[index] = (f"is a {type(hdu).__name__} (a table, random groups or "
                                 "an unrecognised extension), not an image")
                continue
            info = self._image(fits, hdu, index, size, where)
            if info is None:
                others[index] = "holds no data (NAXIS = 0 or an axis of length 0)"
                continue
            images.append(info)
        counts = collections.Counter(n.upper() for _, n, _ in names)
        labels = {index: (f"{name},{ver}" if counts[name.upper()] > 1 else name)
                  for index, name, ver in names}
        counts = collections.Counter(n.upper() for n in labels.values())
        labels = {index: (label if counts[label.upper()] == 1 else str(index))
                  for index, label in labels.items()}     # still ambiguous: the index
        images = [i._replace(name=labels[i.index]) for i in images]
        others = {labels[i]: reason for i, reason in others.items()}
        return images, others, labels

    def list_arrays(self, path) -> list[ArrayInfo]:
        path, size = _check_file(path)
        fits = _fits(path)
        with _reading(path, "FITS", self.extensions, _fits_errors(fits)):
            _fits_prescan(path, size)
            with self._open(fits, path, True) as hdul:
                images, _, _ = self._scan(fits, hdul, path, size)
        return [ArrayInfo(i.name, i.shape, i.dtype, _nbytes(i.shape, i.dtype))
                for i in images]

    @staticmethod
    def _find(key, images, others, labels, path) -> _FitsImage:
        infos = [ArrayInfo(i.name, i.shape, i.dtype, _nbytes(i.shape, i.dtype))
                 for i in images]
        if key is None or (key == "data" and "DATA" not in
                           {n.upper() for n in labels.values()}):
            if images and images[0].index == 0:
                return images[0]          # the primary image, as FITS readers do
            key = _pick_key(path, None, infos, "image HDU")
        elif not isinstance(key, str) or not key.strip():
            raise LoadError(f"{path}: key {key!r} must name an HDU (available images: "
                            f"{_listing(infos)})")
        wanted = key.strip().upper()
        for index, label in labels.items():
            if wanted in (label.upper(), str(index)):
                for image in images:
                    if image.index == index:
                        return image
                raise LoadError(f"{path}: HDU {label!r} {others[label]}; images: "
                                f"{_listing(infos)}")
        raise _missing(path, key, infos, "image HDU")

    def info(self, path, key=None) -> ArrayInfo:
        """The ArrayInfo of the image ``load(path, key)`` would read (headers only)."""
        path, size = _check_file(path)
        fits = _fits(path)
        with _reading(path, "FITS", self.extensions, _fits_errors(fits)):
            _fits_prescan(path, size)
            with self._open(fits, path, True) as hdul:
                images, others, labels = self._scan(fits, hdul, path, size)
                i = self._find(key, images, others, labels, path)
        return ArrayInfo(i.name, i.shape, i.dtype, _nbytes(i.shape, i.dtype))

    def load(self, path, key=None, *, attributes: bool = True) -> LoadedArray:
        path, size = _check_file(path)
        fits = _fits(path)
        with _reading(path, "FITS", self.extensions, _fits_errors(fits)):
            _fits_prescan(path, size)
            with self._open(fits, path, True) as hdul:
                images, others, labels = self._scan(fits, hdul, path, size)
                image = self._find(key, images, others, labels, path)
                header = hdul[image.index].header.copy()
                mapped = not (image.scaled or image.compressed) and \
                    _nbytes(image.shape, image.dtype) > self.mmap_threshold
                if mapped:
                    array = hdul[image.index].data     # a view of the memory map
                    array.flags.writeable = False
            if not mapped:
                with self._open(fits, path, False) as hdul:
                    data = hdul[image.index].data
                    if data is None:
                        raise LoadError(f"{path}: HDU {image.name!r} holds no data")
                    # native byte order; no second copy when astropy scaled it already
                    array = data.astype(data.dtype.newbyteorder("="), copy=False)
            if array.dtype.hasobject or array.shape != image.shape:
                raise LoadError(f"{path}: HDU {image.name!r}: read shape {array.shape} "
                                f"{array.dtype}, the header says {image.shape}")
            if not attributes:
                return LoadedArray(array, image.name, path)
            box_size, unit, attrs = self._box(header, image, f"{path}: HDU {image.name!r}")
        return LoadedArray(array, image.name, path, box_size, unit, attrs)

    @staticmethod
    def _box(header, image: _FitsImage, where: str):
        """(box_size, unit, attrs) from the header: see the class docstring."""
        attrs: dict[str, Any] = {}
        for card in header.cards:
            try:
                name, value = card.keyword, card.value
            except Exception:     # noqa: BLE001 - a card astropy cannot parse is skipped
                continue          # (metadata is a courtesy)
            if len(attrs) >= _FITS_ATTRS_MAX or _FITS_STRUCTURAL.match(name or ""):
                continue
            if isinstance(value, (bool, int, float, str)):
                attrs[name] = value
        if len(image.shape) != 3:
            return None, None, attrs
        lengths, units = [], []
        for axis in range(3):                 # numpy axis -> FITS axis 3 - axis
            fits_axis = 3 - axis
            cdelt = header.get(f"CDELT{fits_axis}")
            if cdelt is None:
                attrs["box_note"] = f"no CDELT{fits_axis}: the file states no box size"
                return None, None, attrs
            if not isinstance(cdelt, (int, float)) or isinstance(cdelt, bool) or \
                    not math.isfinite(cdelt) or cdelt == 0:
                raise LoadError(f"{where}: CDELT{fits_axis} = {cdelt!r}; a cell size must "
                                "be a finite, non-zero number")
            lengths.append(abs(float(cdelt)) * image.shape[axis])
            u = header.get(f"CUNIT{fits_axis}")
            units.append(u.strip() if isinstance(u, str) else None)
        if len(set(units)) > 1:
            attrs["box_note"] = (f"CUNIT3, CUNIT2, CUNIT1 = {units} differ: the axes are not "
                                 "all lengths in one unit, so no box size is taken")
            return None, None, attrs
        box = _box_size(np.array(lengths), f"{where}: CDELTn * NAXISn")
        return box, units[0] or None, attrs


# --------------------------------------------------------------------------- registry


LOADERS: dict[str, NpyLoader | NpzLoader | Hdf5Loader | FitsLoader] = {
    ".npy": NpyLoader(),
    ".npz": NpzLoader(),
    ".h5": Hdf5Loader(),
    ".hdf5": Hdf5Loader(),
    ".fits": FitsLoader(),
    ".fit": FitsLoader(),
    ".fts": FitsLoader(),
}


def loader_for(path):
    """The loader for ``path``'s extension (case-insensitive); LoadError if none."""
    name = os.fspath(path)
    suffix = os.path.splitext(name)[1].lower()
    if suffix in LOADERS:
        return LOADERS[suffix]
    raise LoadError(f"{name}: extension {suffix or '(none)'!r} is not a gridded data file; "
                    f"accepted: {', '.join(LOADERS)}")


def array_info(path, key=None) -> ArrayInfo:
    """The header of the array ``loader_for(path).load(path, key)`` would read, without
    reading its data (for estimates before a run); LoadError as ``load``."""
    loader = loader_for(path)
    if isinstance(loader, FitsLoader):
        return loader.info(path, key)
    infos = loader.list_arrays(path)
    if isinstance(loader, NpyLoader):
        return infos[0]
    name = _pick_key(os.fspath(path), key, infos)
    name = name.strip("/") if isinstance(loader, Hdf5Loader) else name
    for info in infos:
        if info.name == name:
            return info
    raise _missing(os.fspath(path), name, infos)


# --------------------------------------------------------------------------- statistics


def _blocks(a: np.ndarray, chunk_bytes: int):
    """Views (or small copies) of ``a`` of about ``chunk_bytes`` covering every element
    once; a memory-mapped array is never read whole."""
    if a.size == 0:
        return
    if a.ndim == 0:
        yield a.reshape(1)
        return
    if a.flags.c_contiguous or a.flags.f_contiguous:
        flat = a.ravel(order="K")        # a view for contiguous arrays (memmaps too)
        step = max(1, chunk_bytes // a.itemsize)
        for start in range(0, flat.size, step):
            yield flat[start:start + step]
        return
    row = a[0].nbytes
    if row > chunk_bytes:
        for i in range(a.shape[0]):
            yield from _blocks(a[i], chunk_bytes)
        return
    step = max(1, chunk_bytes // max(row, 1))
    for start in range(0, a.shape[0], step):
        yield np.ascontiguousarray(a[start:start + step]).reshape(-1)


def inspect_array(arr, chunk_bytes: int = _CHUNK_BYTES) -> ArrayStats:
    """Shape, dtype, finite min / max / mean and NaN / inf counts of ``arr``.

    Reads the array in blocks of about ``chunk_bytes`` (a memory-mapped .npy is not
    loaded whole). The mean is accumulated in float64. Booleans count as 0 / 1; min and
    max are Python ints for integer and boolean arrays, floats for float arrays.
    """
    a = arr if isinstance(arr, np.ndarray) else np.asarray(arr)
    kind = a.dtype.kind
    n_nan = n_inf = count = 0
    total = 0.0
    lo = hi = None
    if kind in "biufc":
        for block in _blocks(a, chunk_bytes):
            if kind == "c":
                n_nan += int(np.count_nonzero(np.isnan(block)))
                n_inf += int(np.count_nonzero(np.isinf(block)))
                continue
            if kind == "f":
                nan = int(np.count_nonzero(np.isnan(block)))
                inf = int(np.count_nonzero(np.isinf(block)))
                n_nan += nan
                n_inf += inf
                if nan or inf:
                    block = block[np.isfinite(block)]
            if block.size == 0:
                continue
            b_lo, b_hi = block.min(), block.max()
            lo = b_lo if lo is None else min(lo, b_lo)
            hi = b_hi if hi is None else max(hi, b_hi)
            total += float(np.sum(block, dtype=np.float64))
            count += block.size
    cast = float if kind == "f" else int
    return ArrayStats(tuple(a.shape), a.dtype,
                      None if lo is None else cast(lo), None if hi is None else cast(hi),
                      total / count if count else None, n_nan, n_inf)


# --------------------------------------------------------------------------- field runs


_REF_FILE = re.compile(r"^(?P<file>.+?\.(?:npy|npz|h5|hdf5|fits|fit|fts))(?::(?P<key>.*))?$",
                       re.IGNORECASE)


def is_file_reference(ref: str) -> bool:
    """Whether ``data.mask`` / ``data.noise_map`` text names a file ("mask.npy",
    "maps.fits:MASK") rather than an array in the data file (module docstring)."""
    return isinstance(ref, str) and _REF_FILE.match(ref) is not None


def _load_reference(config, data_path: str, ref: str, setting: str) -> LoadedArray:
    """Load ``data.mask`` / ``data.noise_map`` by the rule in the module docstring."""
    match = _REF_FILE.match(ref)
    if match is None:     # an array in the data file
        loader = loader_for(data_path)
        if isinstance(loader, NpyLoader):
            raise LoadError(f"{setting} = {ref!r}: the data file {data_path} is a single "
                            ".npy array, so it has no array of that name; give a file "
                            "(e.g. 'mask.npy', or 'other.npz:key')")
        try:
            return loader.load(data_path, ref, attributes=False)
        except LoadError as exc:
            raise LoadError(f"{setting} = {ref!r}: {exc} (a name is an array in the data "
                            "file; a file path must end in .npy, .npz, .h5, .hdf5 or "
                            ".fits, with ':key' to pick an array)") from None
    path = str(config.resolve_path(match.group("file")))
    key = match.group("key")
    loader = loader_for(path)
    if key is not None and not key:
        raise LoadError(f"{setting} = {ref!r}: nothing after ':'; give the array's name "
                        "or drop the ':'")
    if key is not None and isinstance(loader, NpyLoader):
        raise LoadError(f"{setting} = {ref!r}: a .npy file holds one array; drop ':{key}'")
    try:
        return loader.load(path, key, attributes=False)
    except LoadError as exc:
        raise LoadError(f"{setting} = {ref!r}: {exc}") from None


def _real_array(loaded: LoadedArray, setting: str, role: str) -> str:
    """Refuse dtypes that cannot be a real field; return where-text for messages."""
    where = f"{loaded.path}: array {loaded.name!r} ({setting})"
    dtype = loaded.array.dtype
    reasons = {
        "c": "is complex; Fieldscope's fields are real (save the real part, or the real-"
             "space field, as a float array)",
        "O": "holds Python objects",
        "U": "holds strings, not numbers", "S": "holds strings, not numbers",
        "V": "is a record / raw-bytes dtype, not numbers",
        "M": "holds dates, not numbers", "m": "holds time intervals, not numbers",
    }
    if dtype.kind in reasons:
        raise LoadError(f"{where}: dtype {dtype} {reasons[dtype.kind]}; {role} must be a "
                        "real (float or integer) array")
    return where


def _same_shape(where: str, arr: np.ndarray, shape, what: str):
    if arr.shape != shape:
        raise LoadError(f"{where}: shape {arr.shape} does not match the data shape {shape}"
                        f"; the {what} must have the data's shape")


def _field_data(loaded: LoadedArray, likelihood: str, notes: list[str]) -> np.ndarray:
    where = _real_array(loaded, "data.key", "the data")
    arr = loaded.array
    if arr.dtype.kind == "b":
        raise LoadError(f"{where}: dtype bool: true/false values look like a mask, not "
                        "measurements; set data.key to the measured values and data.mask to "
                        "this array")
    if arr.ndim != 3:
        hint = ""
        if arr.ndim > 3 and sum(n != 1 for n in arr.shape) <= 3:
            hint = ("; save it without its length-1 axes (such as a FITS cube's "
                    "degenerate Stokes or frequency axis)")
        raise LoadError(f"{where}: the field model needs a 3-D array (n0, n1, n2), got "
                        f"shape {arr.shape} ({arr.ndim}-D){hint}")
    if arr.size == 0:
        raise LoadError(f"{where}: shape {arr.shape} is empty (an axis of length 0)")
    if arr.dtype.kind in "iu":
        if likelihood == "poisson_lognormal":
            notes.append(f"data {loaded.name!r}: integer counts ({arr.dtype}) for the "
                         "poisson_lognormal likelihood")
        else:
            notes.append(f"data {loaded.name!r}: integers ({arr.dtype}) converted to float64")
            arr = arr.astype(np.float64)
    return arr


def _field_mask(loaded: LoadedArray, shape) -> np.ndarray:
    where = _real_array(loaded, "data.mask", "the mask")
    m = loaded.array
    _same_shape(where, m, shape, "mask")
    if m.dtype != bool:
        bad = ~((m == 0) | (m == 1))
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            raise LoadError(f"{where}: not boolean-like: {int(bad.sum())} value(s) are "
                            f"neither 0 nor 1 (first at {index}: {m[index].item()!r}); a mask is "
                            "bool (True = observed) or 0/1")
        m = m != 0
    else:
        m = np.asarray(m)
    if not m.any():
        raise LoadError(f"{where}: no voxel is observed (the mask is False everywhere; "
                        "True = observed)")
    return m


def _field_noise(loaded: LoadedArray, shape) -> tuple[np.ndarray | None, float | None]:
    where = _real_array(loaded, "data.noise_map", "the noise map")
    arr = loaded.array
    if arr.dtype.kind == "b":
        raise LoadError(f"{where}: dtype bool: a noise map holds noise sd values (numbers), "
                        "not true/false")
    if arr.ndim == 0:      # one sd for every voxel (the demo data sets store it so)
        sigma = float(arr)
        if not (math.isfinite(sigma) and sigma > 0):
            raise LoadError(f"{where}: the noise sd {sigma!r} must be positive and finite")
        return None, sigma
    _same_shape(where, arr, shape, "noise map (or a 0-d noise sd)")
    return np.asarray(arr, dtype=np.float64), None


def _find_truth(loader, path: str, key: str) -> str | None:
    if isinstance(loader, NpyLoader):
        return None
    names = {i.name.lower(): i.name for i in loader.list_arrays(path)}   # FITS: "TRUTH"
    parent = key.strip("/").rpartition("/")[0]
    for name in ([f"{parent}/truth"] if parent else []) + ["truth"]:
        if name in names and name != key.strip("/").lower():
            return names[name]
    return None


def load_field_inputs(config) -> FieldInputs:
    """Load and validate the arrays of a field run described by ``config``
    (a ``core.config.RunConfig`` with ``model.kind = "field"``).

    ``data.path`` resolves against the config file's folder and ``data.key`` picks the
    array; ``data.mask`` / ``data.noise_map`` follow the rule in the module docstring.
    Checks: data real and 3-D with no empty axis (bool, complex, object, string
    dtypes refused with the reason); mask and noise map of the data's shape, the mask
    0/1 or bool with at least one observed voxel. Value checks that depend on the
    likelihood (noise sd > 0 at observed voxels, counts >= 0, NaN handling) are left
    to ``core.observations.Observations.create``.
    """
    if getattr(getattr(config, "model", None), "kind", None) != "field":
        raise LoadError(f"config: load_field_inputs needs model.kind = 'field', got "
                        f"{getattr(getattr(config, 'model', None), 'kind', None)!r} "
                        "(use load_series_inputs for the integral model)")
    data_cfg = config.data
    path = str(config.data_path)
    loader = loader_for(path)
    likelihood = config.likelihood.kind if config.likelihood is not None else "gaussian"
    notes: list[str] = []
    loaded = loader.load(path, data_cfg.key)
    data = _field_data(loaded, likelihood, notes)

    mask = None
    if data_cfg.mask is not None:
        mask = _field_mask(_load_reference(config, path, data_cfg.mask, "data.mask"),
                           data.shape)
    noise_map, noise_sigma = None, data_cfg.noise_sigma
    if data_cfg.noise_map is not None:
        noise_map, noise_sigma = _field_noise(
            _load_reference(config, path, data_cfg.noise_map, "data.noise_map"), data.shape)

    truth = None
    truth_key = _find_truth(loader, path, loaded.name)
    if truth_key is not None:
        t = loader.load(path, truth_key, attributes=False).array
        if t.dtype.kind not in "iuf" or t.shape != data.shape:
            notes.append(f"array {truth_key!r} ({t.dtype} {t.shape}) is not a real array of "
                         f"the data shape {data.shape}; not shown as the truth")
        else:
            truth = t

    if loaded.box_size is not None and config.grid is not None and \
            tuple(loaded.box_size) != tuple(config.grid.box_size):
        notes.append(f"the data file's box_size {loaded.box_size} differs from grid.box_size "
                     f"{tuple(config.grid.box_size)} in the config")
    if loaded.unit is not None and config.grid is not None and config.grid.unit and \
            loaded.unit != config.grid.unit:
        notes.append(f"the data file's unit {loaded.unit!r} differs from grid.unit "
                     f"{config.grid.unit!r} in the config")
    return FieldInputs(data=data, mask=mask, noise_map=noise_map, noise_sigma=noise_sigma,
                       truth=truth, box_size_from_file=loaded.box_size, unit=loaded.unit,
                       data_path=path, notes=tuple(notes))


# --------------------------------------------------------------------------- series, tables


def _first_content_line(text: str) -> str | None:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return stripped
    return None


def _series_whitespace(path: str, text: str):
    """Whitespace-separated t y [f] columns: '#' comments, an optional header line
    't y' or 't y f', the rules of ``load_series_csv`` otherwise."""
    from core.integral_model import Series

    header = None
    columns: list[list[float]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        cells = line.split("#", 1)[0].split()
        if not cells:
            continue
        if header is None:
            try:
                [float(c) for c in cells]
            except ValueError:
                if cells not in (["t", "y"], ["t", "y", "f"]):
                    raise LoadError(f"{path}, line {number}: header must be 't y' or "
                                    f"'t y f' (or no header), got {' '.join(cells)!r}") \
                        from None
                header = cells
                columns = [[] for _ in header]
                continue
            if len(cells) not in (2, 3):
                raise LoadError(f"{path}, line {number}: expected 2 or 3 columns (t y [f]), "
                                f"got {len(cells)}")
            header = ["t", "y", "f"][:len(cells)]
            columns = [[] for _ in header]
        if len(cells) != len(header):
            raise LoadError(f"{path}, line {number}: expected {len(header)} columns "
                            f"({' '.join(header)}), got {len(cells)}")
        for name, cell, column in zip(header, cells, columns):
            try:
                value = float(cell)
            except ValueError:
                raise LoadError(f"{path}, line {number}: column {name!r}: {cell!r} is not a "
                                "number") from None
            if not math.isfinite(value):
                raise LoadError(f"{path}, line {number}: column {name!r}: {cell!r} is not "
                                "finite")
            column.append(value)
        t = columns[0]
        if len(t) >= 2 and not t[-1] > t[-2]:
            raise LoadError(f"{path}, line {number}: t = {t[-1]!r} does not increase "
                            f"(previous t = {t[-2]!r})")
    if not columns or len(columns[0]) < 2:
        raise LoadError(f"{path}: need at least 2 data rows (t y [f]), got "
                        f"{len(columns[0]) if columns else 0}")
    arrays = [np.array(c) for c in columns]
    return Series(arrays[0], arrays[1], arrays[2] if len(arrays) == 3 else None)


def load_series(path):
    """A 1-D series (``core.integral_model.Series``) from .csv / .txt / .dat.

    A file whose first non-comment line has a comma is CSV and read by
    ``core.integral_model.load_series_csv`` (header 't,y' or 't,y,f' required);
    otherwise columns are whitespace-separated (see ``_series_whitespace``).
    """
    name = os.fspath(path)
    if not name.lower().endswith(SERIES_EXTENSIONS):
        suffix = os.path.splitext(name)[1].lower()
        raise LoadError(f"{name}: extension {suffix or '(none)'!r} is not a series file; "
                        f"accepted: {', '.join(SERIES_EXTENSIONS)}")
    path, _ = _check_file(name)
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except MemoryError:
        raise LoadError(f"{path}: too large to read") from None
    except OSError as exc:
        raise LoadError(f"{path}: cannot read the file ({_short(exc)})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LoadError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})"
                        f"{_hint(path, ())}") from None
    if "\x00" in text:
        raise LoadError(f"{path}: contains NUL bytes; not a text file{_hint(path, ())}")
    first = _first_content_line(text)
    if first is None:
        raise LoadError(f"{path}: no data (only blank or '#' comment lines); expected a "
                        "header 't,y' or 't,y,f' and rows")
    if "," not in first:
        return _series_whitespace(path, text)
    import csv

    from core.integral_model import load_series_csv   # imports scipy: only when needed
    try:
        return load_series_csv(path)
    except MemoryError:
        raise LoadError(f"{path}: too large to read") from None
    except (ValueError, OSError, csv.Error) as exc:
        message = str(exc) if str(exc).startswith(path) else f"{path}: {_short(exc)}"
        if text.startswith("\ufeff"):
            message += " (the file starts with a byte-order mark; save it without one)"
        raise LoadError(message) from None


def load_series_inputs(config):
    """The integral model's series: ``data.path`` of ``config`` (model.kind
    "integral"), resolved against the config file's folder; see ``load_series``."""
    if getattr(getattr(config, "model", None), "kind", None) != "integral":
        raise LoadError(f"config: load_series_inputs needs model.kind = 'integral', got "
                        f"{getattr(getattr(config, 'model', None), 'kind', None)!r} "
                        "(use load_field_inputs for the field model)")
    return load_series(config.data_path)


def load_power_table(path):
    """``core.power_spectrum.TabulatedPower.from_file(path)`` with its errors as
    LoadError (they name the file and line)."""
    from core.power_spectrum import TabulatedPower

    path, _ = _check_file(path)
    try:
        return TabulatedPower.from_file(path)
    except MemoryError:
        raise LoadError(f"{path}: too large to read") from None
    except OSError as exc:
        raise LoadError(f"{path}: cannot read the file ({_short(exc)})") from None
    except ValueError as exc:
        message = _short(exc, 400)
        raise LoadError(message if path in message else f"{path}: {message}") from None
