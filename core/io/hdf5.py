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
    refused; the whole dataset is read into memory.

    Only this file's bytes are read: a dataset with external storage or a virtual
    dataset, and a key reached through an external link, are refused from the headers
    (the message names the other file), before the HDF5 library opens anything else."""

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
        """The datasets under ``group`` reached by hard links, from their headers (HDF5
        does not follow external links while visiting, so no other file is opened)."""
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

    @staticmethod
    def _external_links(h5py, group) -> list[str]:
        """"'name' -> file:path" for each external link under ``group`` (none followed)."""
        found = []

        def visit(name, link):
            if isinstance(link, h5py.ExternalLink):
                found.append(f"{name!r} -> {link.filename}:{link.path}")

        group.visititems_links(visit)
        return sorted(found)

    @staticmethod
    def _refuse_external_link(h5py, handle, path: str, name: str, depth: int = 0) -> None:
        """LoadError if reaching ``name`` would follow an external link (checked link by
        link, soft links resolved, before anything is opened through them).

        An external link makes the HDF5 library open another file, named by whoever wrote
        this one: a file the user never chose (its contents would land in the run store,
        a file people share), or a FIFO or device that blocks forever."""
        if depth > 16:      # the HDF5 library's own limit on soft-link chains
            raise LoadError(f"{path}: {name!r}: more than 16 soft links in a chain (a loop?)")
        current = ""
        parts = [p for p in name.split("/") if p]
        for i, part in enumerate(parts):
            current = f"{current}/{part}"
            try:
                link = handle.get(current, getlink=True)
            except (KeyError, ValueError, RuntimeError, OSError):
                return             # missing: the caller reports it with the listing
            if link is None:
                return
            if isinstance(link, h5py.ExternalLink):
                raise LoadError(
                    f"{path}: {current.strip('/')!r} is an external link to "
                    f"{link.filename}:{link.path}; refused (Fieldscope reads only the file it "
                    f"is given, never one another file points to). Load {link.filename} "
                    f"itself with key {link.path.strip('/')!r}, or copy the dataset into "
                    f"{os.path.basename(path)}")
            if isinstance(link, h5py.SoftLink):
                target = link.path if link.path.startswith("/") else \
                    f"{current.rpartition('/')[0]}/{link.path}"
                rest = "/".join([target, *parts[i + 1:]])     # go on from the target
                Hdf5Loader._refuse_external_link(h5py, handle, path, rest, depth + 1)
                return
            if not isinstance(link, h5py.HardLink):
                raise LoadError(f"{path}: {current.strip('/')!r} is a user-defined link "
                                f"({type(link).__name__}); refused")

    @staticmethod
    def _refuse_foreign_storage(obj, where: str) -> None:
        """LoadError for a dataset whose bytes live outside this file.

        External storage (raw bytes in other files, at offsets the writer chose) would
        read any file the user can read, such as /etc/passwd, into the run, or block on
        a FIFO; a virtual dataset reads other HDF5 files and gives its fill value (zeros)
        where a source file is missing. Neither opens anything while its header is read."""
        external = obj.external
        if external:
            files = ", ".join(str(entry[0]) for entry in external[:3])
            more = f" and {len(external) - 3} more" if len(external) > 3 else ""
            raise LoadError(f"{where}: its data are stored outside the HDF5 file (external "
                            f"storage in {files}{more}); refused (Fieldscope reads only the "
                            "file it is given). Save the array inside the file")
        if obj.is_virtual:
            try:
                sources = sorted({m.file_name for m in obj.virtual_sources()})
            except (*_FILE_ERRORS, MemoryError):
                sources = []
            named = f" (sources: {', '.join(sources[:3])}" \
                f"{' ...' if len(sources) > 3 else ''})" if sources else ""
            raise LoadError(f"{where}: is a virtual dataset that maps other files{named}; "
                            "refused (Fieldscope reads only the file it is given, and a "
                            "missing source would read as fill values). Save the array "
                            "itself in the file")

    def _dataset(self, h5py, handle, path: str, key):
        """(name, the h5py Dataset for ``key``): every refusal made from headers alone."""
        if key is None:
            infos = self._datasets(h5py, handle)
            if not infos:
                links = self._external_links(h5py, handle)
                if links:
                    raise LoadError(f"{path}: holds no datasets, only external links to "
                                    f"other files, which are refused: {', '.join(links[:6])}")
            key = _pick_key(path, None, infos, "dataset")
        elif not isinstance(key, str) or not key.strip("/"):
            raise LoadError(f"{path}: dataset key {key!r} must name a dataset "
                            f"(available: {_listing(self._datasets(h5py, handle))})")
        name = key.strip("/")
        self._refuse_external_link(h5py, handle, path, name)
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
        self._refuse_foreign_storage(obj, where)
        return name, obj

    def list_arrays(self, path) -> list[ArrayInfo]:
        path, _ = _check_file(path)
        h5py = _h5py(path)
        with _reading(path, "HDF5", self.extensions), h5py.File(path, "r") as handle:
            return self._datasets(h5py, handle)

    def info(self, path, key=None) -> ArrayInfo:
        """The ArrayInfo of the dataset ``load(path, key)`` would read, refused as ``load``
        refuses it, from the headers alone."""
        path, _ = _check_file(path)
        h5py = _h5py(path)
        with _reading(path, "HDF5", self.extensions), h5py.File(path, "r") as handle:
            name, obj = self._dataset(h5py, handle, path, key)
            return ArrayInfo(name, obj.shape, obj.dtype, _nbytes(obj.shape, obj.dtype))

    def load(self, path, key=None, *, attributes: bool = True) -> LoadedArray:
        path, _ = _check_file(path)
        h5py = _h5py(path)
        with _reading(path, "HDF5", self.extensions), h5py.File(path, "r") as handle:
            name, obj = self._dataset(h5py, handle, path, key)
            where = f"{path}: dataset {name!r}"
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


