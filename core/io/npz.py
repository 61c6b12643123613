"""``.npz`` files: a zip of named .npy members; other 0-d members become attributes."""

from __future__ import annotations

import zipfile

import numpy as np

from core.io.arrays import (
    _ATTR_MAX_BYTES,
    _FILE_ERRORS,
    ArrayInfo,
    LoadedArray,
    _box_size,
    _check_file,
    _check_header,
    _missing,
    _pick_key,
    _plain,
    _read_npy_header,
    _reading,
    _unit,
)

__all__ = ['NpzLoader']

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


