"""What every gridded-file loader returns and the checks they share.

``LoadError`` (a ``ValueError`` whose message starts with the file's path), the array
records (``ArrayInfo``, ``LoadedArray``, ``ArrayStats``), file sniffing and the header
checks that refuse an array before any of its bytes are read.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import stat
import struct
import tokenize
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from core.io.regular_file import NotRegularFile, describe_mode, regular_file_size

try:  # lzma-compressed zip members raise its error on corrupt data
    from lzma import LZMAError
except ImportError:  # pragma: no cover - Python built without lzma
    class LZMAError(Exception):
        pass


__all__ = ['LoadError', 'ArrayInfo', 'LoadedArray', 'ArrayStats', 'MMAP_THRESHOLD_BYTES']

MMAP_THRESHOLD_BYTES = 64 * 2**20

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



# --------------------------------------------------------------------------- helpers

# What a damaged file can make numpy, zipfile, zlib or h5py raise. RuntimeError covers
# encrypted zip members and h5py's library errors; NotImplementedError unknown zip
# compression methods; tokenize.TokenError numpy's fallback parser for .npy headers
# written by Python 2 (found by fuzzing).
_FILE_ERRORS = (OSError, EOFError, ValueError, KeyError, IndexError, TypeError,
                OverflowError, ZeroDivisionError, SyntaxError, UnicodeError, RuntimeError,
                NotImplementedError, zipfile.BadZipFile, zlib.error, struct.error,
                tokenize.TokenError, LZMAError)


def _optional_import(path: str, module: str, package: str, what: str):
    """``module``, imported on first use (the GUI imports core.io at start and most files
    need neither h5py nor astropy), or a LoadError naming the package to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise LoadError(f"{path}: reading {what} files needs the {package} package ({exc})") \
            from None


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
        size = regular_file_size(path)    # a FIFO or device would block or never end
    except NotRegularFile as exc:
        if stat.S_ISDIR(exc.mode):
            raise LoadError(f"{path}: is a directory, not a data file") from None
        raise LoadError(f"{path}: not a regular file ({describe_mode(exc.mode)})") from None
    except FileNotFoundError:
        raise LoadError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise LoadError(f"{path}: cannot access the file ({_short(exc)})") from None
    if size == 0:
        raise LoadError(f"{path}: the file is empty (0 bytes)")
    return path, size


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


