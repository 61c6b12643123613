"""The registry of gridded-file loaders keyed by extension, array headers and statistics."""

from __future__ import annotations

import os

import numpy as np

from core.io.arrays import ArrayInfo, ArrayStats, LoadError, _missing, _pick_key
from core.io.fits import FitsLoader
from core.io.hdf5 import Hdf5Loader
from core.io.npy import NpyLoader
from core.io.npz import NpzLoader

__all__ = ['LOADERS', 'loader_for', 'array_info', 'inspect_array']

_CHUNK_BYTES = 16 * 2**20          # inspect_array's working block

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
    reading its data (for estimates before a run, and to check an array's shape before
    reading it); LoadError as ``load``."""
    loader = loader_for(path)
    if isinstance(loader, (FitsLoader, Hdf5Loader)):
        return loader.info(path, key)
    infos = loader.list_arrays(path)
    if isinstance(loader, NpyLoader):
        return infos[0]
    name = _pick_key(os.fspath(path), key, infos)
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


