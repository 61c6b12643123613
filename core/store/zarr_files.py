"""The small zarr helpers every Fieldscope store uses (the run store, the calibration store).

numpy/zarr only. One place for: the UTC time stamp written into a store's attributes, opening a
group or an array without its consolidated metadata, rewriting that metadata for xarray / ArviZ,
the zarr setting that makes the writer write every chunk, reading a store's JSON file,
finding a chunk file that is missing or not a regular file, and clearing a store's temporary
build name.

Hostile folders. Every file zarr reads through ``open_group`` / ``open_array`` goes through
``RegularFileStore``: it opens only regular files inside the store, reached without following
a symlink (``core.io.regular_file.open_inside``), so a chunk that is a FIFO, a device or a
symlink to ``/dev/zero`` or out of the store is an error naming the file, never a hang or an
endless read; and a chunk file larger than its array's metadata allows (the chunk's bytes and
the codecs' overhead) is refused before it is read.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import itertools
import json
import math
import os
import re
import shutil
import stat
import warnings
from pathlib import Path

import numpy as np
import zarr
from zarr.storage import LocalStore

from core.io.regular_file import describe_mode, read_inside

__all__ = ["WRITE_EVERY_CHUNK", "METADATA_MAX_BYTES", "utc_now", "open_group", "open_array", "consolidate",
           "RegularFileStore", "chunk_max_bytes", "read_store_json", "first_bad_chunk",
           "what_is", "remove_leftover", "damaged_chunk"]

#: the largest metadata file (.zattrs, .zarray, .zgroup, .zmetadata) a store may hold: its
#: attributes are a config's text and a few numbers, a few KiB
METADATA_MAX_BYTES = 64 * 2**20
_METADATA = (".zattrs", ".zarray", ".zgroup", ".zmetadata")


def chunk_max_bytes(meta: dict) -> int | None:
    """The most bytes one chunk file of an array with metadata ``meta`` (.zarray) can hold:
    its values, plus what a codec may add to incompressible bytes (Blosc 16 bytes, zstd and
    zlib well under 1/16, a CRC32 4); None when the metadata do not say (zarr refuses them)."""
    try:
        values = math.prod(int(c) for c in meta["chunks"]) * np.dtype(meta["dtype"]).itemsize
    except Exception:  # noqa: BLE001 - metadata zarr itself will refuse
        return None
    return values + values // 16 + 4096

#: zarr skips a chunk whose values all equal the fill value (an all-False `diverging`, a
#: zero moment); the readers treat a missing chunk as damage, so the writers write every one
WRITE_EVERY_CHUNK = {"array.write_empty_chunks": True}


def utc_now() -> str:
    """The time now, UTC, ISO 8601 to the second (the stores' time stamps)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


#: zarr's temporary name of a file being written (``zarr.storage._local._atomic_write``)
_PARTIAL = re.compile(r"\.[0-9a-f]{32}\.partial$")


class RegularFileStore(LocalStore):
    """zarr's LocalStore whose reads open only regular files inside its root, reached without
    a symlink, each chunk file bounded by its array's metadata (module docstring). A file that
    breaks the rule raises ``core.io.regular_file.NotRegularFile`` naming it (zarr passes it
    on); a missing file is None, as zarr expects."""

    def __init__(self, root, *, read_only: bool = False) -> None:
        super().__init__(root, read_only=read_only)
        self._bounds: dict[str, int | None] = {}

    def with_read_only(self, read_only: bool = False):
        return type(self)(root=self.root, read_only=read_only)

    def _max_bytes(self, key: str) -> int | None:
        folder, _, name = key.rpartition("/")
        if name in _METADATA:
            return METADATA_MAX_BYTES
        if folder not in self._bounds:
            try:
                meta = json.loads(read_inside(self.root, f"{folder}/.zarray" if folder else ".zarray",
                                              max_bytes=METADATA_MAX_BYTES))
            except (OSError, ValueError):
                meta = None
            self._bounds[folder] = chunk_max_bytes(meta) if isinstance(meta, dict) else None
        return self._bounds[folder] if self._bounds[folder] is not None else METADATA_MAX_BYTES

    def _read(self, key: str, prototype, byte_range):
        if prototype is None:
            from zarr.core.buffer.core import default_buffer_prototype

            prototype = default_buffer_prototype()
        try:
            data = read_inside(self.root, key, max_bytes=self._max_bytes(key))
        except (FileNotFoundError, NotADirectoryError):
            return None
        if byte_range is not None:
            from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

            if isinstance(byte_range, RangeByteRequest):
                data = data[byte_range.start:byte_range.end]
            elif isinstance(byte_range, OffsetByteRequest):
                data = data[byte_range.offset:]
            elif isinstance(byte_range, SuffixByteRequest):
                data = data[max(0, len(data) - byte_range.suffix):]
            else:
                raise TypeError(f"Unexpected byte_range, got {byte_range}.")
        return prototype.buffer.from_bytes(data)

    # zarr writes a file as NAME.<32 hex digits>.partial, then renames it: a writer killed in
    # between (kill -9, a power cut) leaves it behind, and a reader may list one mid-write. Not a
    # member of the store: listed, zarr would take it for a child array or group and read below it.
    async def list(self):
        async for key in super().list():
            if not _PARTIAL.search(key):
                yield key

    async def list_prefix(self, prefix: str):
        async for key in super().list_prefix(prefix):
            if not _PARTIAL.search(key):
                yield key

    async def list_dir(self, prefix: str):
        async for key in super().list_dir(prefix):
            if not _PARTIAL.search(key):
                yield key

    def get_sync(self, key: str, *, prototype=None, byte_range=None):
        self._ensure_open_sync()
        return self._read(key, prototype, byte_range)

    async def get(self, key: str, prototype=None, byte_range=None):
        if not self._is_open:
            await self._open()
        return await asyncio.to_thread(self._read, key, prototype, byte_range)

    async def get_partial_values(self, prototype, key_ranges):
        return [await self.get(key, prototype, byte_range) for key, byte_range in key_ranges]


def open_group(path: Path, mode: str):
    """zarr's v2 group at ``path``, never through the consolidated metadata: that is a
    snapshot, and the group would keep handing out arrays with the shapes they had when it was
    opened (it is rewritten after every write for xarray / ArviZ, which read a store once).
    Its files are read through ``RegularFileStore``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = RegularFileStore(Path(path), read_only=mode == "r")
        return zarr.open_group(store, mode=mode, zarr_format=2, use_consolidated=False)


def open_array(path: Path):
    """zarr's v2 array at ``path``, read-only, its files read through ``RegularFileStore``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.open_array(RegularFileStore(Path(path), read_only=True), mode="r", zarr_format=2)


def read_store_json(root: Path, rel: str) -> object:
    """The JSON value of the store file ``root/rel`` (a regular file inside the store, at most
    METADATA_MAX_BYTES). Raises FileNotFoundError, ``NotRegularFile`` (an OSError naming it),
    another OSError, or ValueError (not UTF-8 JSON); the callers name the store's error."""
    return json.loads(read_inside(root, rel, max_bytes=METADATA_MAX_BYTES).decode("utf-8"))


def first_bad_chunk(folder: Path, extent, chunks) -> tuple[str, str] | None:
    """(key, what) of the first chunk file among those covering ``extent`` (one length per
    axis) with ``chunks`` that is absent from ``folder`` (what: "missing") or is not a regular
    file (what: "a FIFO", "a symlink", "a directory", ...: ``describe_mode``), or None when
    every one is a regular file. Metadata only (the folder's listing, whose entries carry
    their type): a symlink, FIFO or device among the chunks is found when a store is opened,
    also where no reader reads that chunk. Looks at no more keys than the folder holds
    regular files (plus one): a hostile extent costs nothing. OSError when the folder cannot
    be listed."""
    ranges = [range(math.ceil(n / c)) for n, c in zip(extent, chunks)] if len(extent) else [range(1)]
    if math.prod(len(r) for r in ranges) == 0:
        return None
    regular, other = set(), {}
    with os.scandir(folder) as entries:
        for entry in entries:
            try:
                is_regular = entry.is_file(follow_symlinks=False)
            except OSError:
                is_regular = False
            if is_regular:
                regular.add(entry.name)
            else:
                other[entry.name] = entry
    for index in itertools.islice(itertools.product(*ranges), len(regular) + 1):
        key = ".".join(str(i) for i in index)
        if key in regular:
            continue
        entry = other.get(key)
        if entry is None:
            return key, "missing"
        try:
            return key, describe_mode(entry.stat(follow_symlinks=False).st_mode)
        except OSError:
            return key, "unreadable"
    return None


def what_is(path: Path) -> str:
    """"missing", or what ``path`` is when it is not a regular file ("a FIFO, not a regular
    file"; a symlink is not followed), for a message naming a store's file."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as err:
        return f"unreadable ({err.strerror or err})"
    return f"{describe_mode(mode)}, not a regular file"


def remove_leftover(path: Path) -> None:
    """Remove what lies at a store's temporary build name (``run.zarr.creating``): a folder
    left by a build that was killed, or anything planted there (a symlink is removed itself,
    never followed: what it points to is not touched). Errors are left to the build."""
    try:
        if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
            os.unlink(path)
        else:
            shutil.rmtree(path, ignore_errors=True)
    except OSError:
        pass


def consolidate(path: Path) -> None:
    """Rewrite the store's consolidated metadata (``.zmetadata``), reading the store through
    ``RegularFileStore``. zarr reads the old ``.zmetadata`` first: one that is not a regular
    file (a FIFO would hang it, a link to /dev/zero never end) is removed (a link itself, never
    what it points to), as it is replaced anyway."""
    old = Path(path) / ".zmetadata"
    try:
        mode = os.lstat(old).st_mode
        if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
            os.unlink(old)
    except FileNotFoundError:
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(RegularFileStore(Path(path)))


def damaged_chunk(arr, selection: tuple) -> tuple[str, Exception] | None:
    """(key, error) of the first chunk of zarr array ``arr`` that ``selection`` (ints, slices,
    Ellipsis, one per axis or fewer) covers and that cannot be read, or None: after a read of
    the selection failed, which chunk file to name."""
    chunks = arr.chunks
    per_axis = []
    for axis, n in enumerate(arr.shape):
        sel = selection[axis] if axis < len(selection) else slice(None)
        index = np.arange(n)[sel] if not isinstance(sel, (int, np.integer)) else np.asarray([sel])
        per_axis.append(sorted({int(i) // chunks[axis] for i in np.atleast_1d(index)}))
    for index in itertools.product(*per_axis):
        region = tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, chunks))
        try:
            arr[region]
        except Exception as err:  # noqa: BLE001 - zarr and the codecs raise many kinds
            return ".".join(str(i) for i in index) or "0", err
    return None
