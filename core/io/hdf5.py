"""HDF5 files (h5py, imported when a file is first read): datasets at paths such as
"group/field"; string attributes are read in a child process (see ``Hdf5Loader``).
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import numpy as np

from core.io.arrays import (
    _FILE_ERRORS,
    ArrayInfo,
    LoadedArray,
    LoadError,
    _box_size,
    _check_file,
    _listing,
    _missing,
    _nbytes,
    _optional_import,
    _pick_key,
    _plain,
    _reading,
    _short,
    _unit,
)

__all__ = ['Hdf5Loader']

# --------------------------------------------------------------------------- HDF5


def _h5py(path: str):
    return _optional_import(path, "h5py", "h5py", "HDF5")


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


