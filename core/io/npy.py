"""``.npy`` files: one array per file, memory-mapped read-only when large."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.io.arrays import (
    MMAP_THRESHOLD_BYTES,
    ArrayInfo,
    LoadedArray,
    LoadError,
    _check_file,
    _check_header,
    _hint,
    _read_npy_header,
    _reading,
)

__all__ = ['NpyLoader']

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


