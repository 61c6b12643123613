"""The run store: one directory per run, Zarr (format 2) laid out as ArviZ InferenceData.

numpy + zarr only (the GUI process reads stores; no TensorFlow). Layout::

    RUNDIR/
      run.zarr/                         xarray.open_datatree(RUNDIR/run.zarr, engine="zarr")
        .zattrs                         config (TOML text), config_dir (the folder its paths are
                                        relative to), fieldscope_version, status, error,
                                        model_kind, progress {warmup_draws, draws, field_draws,
                                        chunks}, timing {warmup_seconds, sampling_seconds},
                                        chains, num_warmup, num_samples, thin, ...
        posterior/<param>               (chain, draw)       every post-warmup draw
        warmup_posterior/<param>        (chain, draw)       every warmup draw
        sample_stats/<stat>             (chain, draw)       lp, acceptance_rate, step_size,
                                                            energy_error, diverging, n_steps,
                                                            grad_norm
        warmup_sample_stats/<stat>      (chain, draw)
        posterior_field/field           (chain, field_draw, x, y, z)   every thin-th draw, in
                                                            blocks (below)
        posterior_field/power           (chain, field_draw, k)         P(k) of each field draw
        posterior_field/field_draw      (field_draw,)       index of each field draw in `draw`
        posterior_field/k, k_count      (k,)                shell centres and mode counts
        field_moments/mean, std         (x, y, z)           over all post-warmup draws so far,
                                                            in blocks (below)
        observed_data/data, mask        (x, y, z)           (integral model: t, y (time,))
      checkpoint.npz                    exact state to resume the same chains

Field blocks. A field draw is one chunk file per block of FIELD_BLOCK^3 voxels (an axis
shorter than FIELD_BLOCK is one block) of one chain: ``field_chunks``. So one plane of a
draw (xy at one z, xz at one y, yz at one x) reads the blocks it crosses, FIELD_BLOCK / n
of the draw (1/8 at 256^3: 8 MiB of its 64 MiB), one voxel's trace one block per draw, and
a block of the draw only its own files (``RunReader.field_slice``, ``field_block``,
``field_volume``: a lazy array read on demand). The moments are chunked the same way. Each
block is compressed (``FIELD_FILTERS``: Blosc LZ4 of the bit-shuffled values, then a CRC32
of the compressed bytes; no compressor after it). Random draws compress little (a float32
draw to about 90 % of its size: the exponent bits); the compression is lossless, so a
resumed run's draws are still bit for bit those of one uninterrupted run. The moments are
rewritten in place after every chunk, block by block (each block file is replaced whole): a
read racing that write may mix blocks of two consecutive chunks' moments. Stores written
before (one chunk per draw of one chain, one chunk per moment, the CRC32 before the
compressor) read and resume as before: every reader takes the chunking from the array's
metadata.

Concurrency and crashes. After each chunk the writer appends every array, then updates
the root attribute ``progress``, re-consolidates the metadata, and finally replaces
``checkpoint.npz`` atomically. Readers (another process, the GUI) read ``progress`` first
and use only that many draws, so a store that is being written is always readable.
A process killed mid-chunk leaves arrays possibly longer than ``progress`` says; resume
truncates them back to the checkpoint's counts.

Write failures. Every file is written whole or not at all (zarr's local store writes a
temporary file and renames it; so does ``write_checkpoint``), so a write that fails (a
full disk: ENOSPC) leaves every chunk published before readable. The writer raises
``StoreWriteError`` naming the write and the OS's reason; the engine ends the run as
failed, and resume continues from the last checkpoint once the cause is gone.

Damaged stores. The reader (on open and on every refresh) and the writer's ``reopen``
check the store against this layout before they read anything (metadata and file
existence only, never data): the root attributes' types (``progress`` non-negative ints
within the arrays and the run's length, ``param_names`` identifiers that exist as
arrays), every group and array above with its dims, dtype and a shape consistent with
``chains`` and the grid and bounded (``MAX_CHAINS``, ``MAX_DRAWS``, ``MAX_ELEMENTS``: a
hostile shape is refused before anything is allocated), the consolidated ``.zmetadata``
(every array and group it lists must still exist; ``reopen`` rewrites it instead), and
the chunk files covering the draws ``progress`` publishes (zarr would read a missing
chunk as zeros). Each chunk carries a CRC32 (a zarr filter) so that a garbled chunk is
found when it is read, like a truncated one; a read that fails raises RunStoreError
naming the array and the chunk file. Anything wrong ends in one RunStoreError naming
the file, array or attribute. ``writer.lock`` (``core.store.run_lock``) is no part of
the layout and is not read here.
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zarr
from numcodecs import CRC32, Blosc

from core import __version__
from core.io.regular_file import NotRegularFile
from core.store.checkpoint import CHECKPOINT_NAME
from core.store.chunk_files import bad_chunk_error, check_appended_chunk, damaged_read_error
from core.store.errors import RunStoreError, StoreWriteError, write_error
from core.store.field_parts import FieldParts, append_draws, write_grid
from core.store.field_volume import FieldVolume
from core.store.run_record import PROGRESS_KEYS, STAT_DTYPES, STAT_NAMES, STORE_STATUSES, new_progress
from core.store.zarr_files import (
    WRITE_EVERY_CHUNK,
    consolidate,
    first_bad_chunk,
    open_array,
    open_group,
    read_store_json,
    remove_leftover,
    utc_now,
    what_is,
)

#: statistics added to STAT_NAMES after stores were first written: a store without one (written
#: before it existed) is not damaged; its reader gives NaN for it, and resume adds the array
#: (NaN for the draws before) so the run goes on
LATER_STATS = ("trajectory_length",)

__all__ = ["STORE_NAME", "MAX_CHAINS", "MAX_DRAWS", "MAX_ELEMENTS", "FIELD_BLOCK",
           "FIELD_FILTERS", "CHUNK_OVERHEAD_BYTES", "field_chunks", "field_draw_disk_bytes", "RunStoreError",
           "StoreWriteError", "ChunkRecord", "check_progress", "RunStoreWriter", "RunReader", "FieldVolume", "StoredConfig", "stored_run_config", "remove_run"]

STORE_NAME = "run.zarr"

#: bounds a store's metadata must keep: chains, draws of one phase (num_warmup,
#: num_samples), elements of one chunk, of the grid or of another fixed-size array
MAX_CHAINS = 2**16
MAX_DRAWS = 2**31
MAX_ELEMENTS = 2**31


#: voxels per axis of one stored block of a field draw or a moment (module docstring)
FIELD_BLOCK = 32
#: the codecs of a field draw's blocks and of the moments: Blosc (LZ4, bit-shuffled, which
#: sees the values' own type) and then a CRC32 of the compressed bytes (a zarr v2 filter
#: may be any codec; the compressor after them is None)
FIELD_FILTERS = (Blosc(cname="lz4", clevel=5, shuffle=Blosc.BITSHUFFLE), CRC32())
#: bytes one stored block adds to its values at most: Blosc's header (16) and, where it
#: cannot compress, nothing else (it then stores the bytes as they are), and the CRC32 (4)
CHUNK_OVERHEAD_BYTES = 16 + 4
#: the allocation unit of a file on common Linux file systems (ext4, xfs): a file of b
#: bytes takes ceil(b / 4096) of them
_DISK_BLOCK = 4096


def field_chunks(grid_shape) -> tuple[int, ...]:
    """(1, 1, bx, by, bz): the chunk of ``posterior_field/field`` on a grid, blocks of
    FIELD_BLOCK voxels per axis (the whole axis when shorter)."""
    return (1, 1, *(min(int(n), FIELD_BLOCK) for n in grid_shape))


def field_draw_disk_bytes(grid_shape, itemsize: int = 4) -> int:
    """Disk bytes of one stored field draw of one chain (``field_chunks``) at most: every
    block stored uncompressed (random draws barely compress: about 90 % is typical, see the
    module docstring) with its ``CHUNK_OVERHEAD_BYTES``, each block file rounded up to the
    file system's 4 KiB allocation unit. The estimate the Sampler panel shows and the
    disk check (``core.run.resources``) uses."""
    block = field_chunks(grid_shape)[2:]
    total = 0
    # blocks differ only at the far end of an axis: count each distinct block size once
    per_axis = []
    for n, b in zip(grid_shape, block):
        full, rest = divmod(int(n), b)
        per_axis.append([(b, full)] + ([(rest, 1)] if rest else []))
    for combo in itertools.product(*per_axis):
        values = math.prod(size for size, _ in combo)
        count = math.prod(k for _, k in combo)
        raw = values * int(itemsize) + CHUNK_OVERHEAD_BYTES
        total += count * _DISK_BLOCK * math.ceil(raw / _DISK_BLOCK)
    return total


def _open_root_checked(store_path: Path, mode: str):
    try:
        return open_group(store_path, mode)
    except Exception as err:  # zarr raises several kinds for a broken store
        raise RunStoreError(f"{store_path}: zarr cannot open the run store ({err})") from None


def _open_array(store_path: Path, group: str, name: str):
    """zarr's array ``group/name`` of a checked store; RunStoreError naming it when zarr
    rejects its metadata (an unknown codec)."""
    try:
        return open_array(store_path / group / name)
    except Exception as err:
        raise RunStoreError(f"{store_path / group / name / '.zarray'}: zarr cannot open array "
                            f"{group}/{name} ({err})") from None


@dataclass
class ChunkRecord:
    """What one chunk adds to the store (numpy arrays, chain-major).

    ``warmup_stats`` / ``stats``: name -> (chains, n) arrays for the warmup and post-warmup
    steps of the chunk (n may be 0); the same for ``warmup_params`` / ``params``.
    ``fields``: (chains, n_field, x, y, z) float32; ``powers``: (chains, n_field, k);
    ``field_draw_index``: (n_field,) index into ``draw``. ``moments``: (mean, std, count).
    A field cut over devices: ``fields``, mean, std in ``FieldParts``, written part by part."""

    warmup_stats: dict
    stats: dict
    warmup_params: dict
    params: dict
    fields: np.ndarray | FieldParts | None = None
    powers: np.ndarray | None = None
    field_draw_index: np.ndarray | None = None
    moments: tuple | None = None


class RunStoreWriter:
    """Creates a run store and appends chunks to it (one writer per run)."""

    def __init__(self, run_dir: Path, root):
        self.run_dir = Path(run_dir)
        self.store_path = self.run_dir / STORE_NAME
        self.root = root

    # -- creation ---------------------------------------------------------------

    @classmethod
    def create(cls, run_dir, *, config_text: str, config_dir=None, model_kind: str, chains: int,
               num_warmup: int,
               num_samples: int, thin: int, param_names: list[str], observed: dict[str, tuple],
               grid_shape: tuple | None = None, k_centres=None, k_counts=None,
               extra_attrs: dict | None = None) -> "RunStoreWriter":
        """A new, empty store. ``observed``: name -> (dims, array). ``config_text`` and
        ``config_dir`` (the folder its relative paths are resolved from; None: the run
        directory) are what ``RunReader.stored_config`` gives back."""
        run_dir = Path(run_dir)
        if (run_dir / STORE_NAME).exists():
            raise RunStoreError(f"{run_dir}: already holds a run; resume it, or choose a new directory")
        # Built complete under a temporary name, then renamed: a reader never sees half a store.
        building = run_dir / (STORE_NAME + ".creating")
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            remove_leftover(building)        # a killed build's folder, or a link planted there
            root = open_group(building, "w")
        except OSError as err:
            raise RunStoreError(f"{run_dir}: cannot create the run store: {err}") from None
        try:
            if config_dir is not None:
                extra_attrs = {"config_dir": str(config_dir), **(extra_attrs or {})}
            with zarr.config.set(WRITE_EVERY_CHUNK):
                return cls._build(run_dir, building, root, config_text=config_text,
                                  model_kind=model_kind, chains=chains, num_warmup=num_warmup,
                                  num_samples=num_samples, thin=thin, param_names=param_names,
                                  observed=observed, grid_shape=grid_shape, k_centres=k_centres,
                                  k_counts=k_counts, extra_attrs=extra_attrs)
        except OSError as err:
            shutil.rmtree(building, ignore_errors=True)
            raise write_error(run_dir, "creating the run store", err) from None

    @classmethod
    def _build(cls, run_dir: Path, building: Path, root, *, config_text, model_kind, chains,
               num_warmup, num_samples, thin, param_names, observed, grid_shape, k_centres,
               k_counts, extra_attrs) -> "RunStoreWriter":
        root.attrs.update({
            "config": config_text, "fieldscope_version": __version__, "status": "created",
            "error": "", "model_kind": model_kind, "created": utc_now(), "updated": utc_now(),
            "chains": int(chains), "num_warmup": int(num_warmup), "num_samples": int(num_samples),
            "thin": int(thin), "param_names": list(param_names),
            "progress": dict(new_progress()),
            **(extra_attrs or {}),
        })
        writer = cls(run_dir, root)
        writer.store_path = building
        for group in ("posterior", "warmup_posterior"):
            g = root.create_group(group)
            for name in param_names:
                writer._new_array(g, name, (chains, 0), (chains, 1024), "float64", ["chain", "draw"])
        for group in ("sample_stats", "warmup_sample_stats"):
            g = root.create_group(group)
            for name in STAT_NAMES:
                writer._new_array(g, name, (chains, 0), (chains, 1024),
                                  STAT_DTYPES[name].name if name in STAT_DTYPES else "float64",
                                  ["chain", "draw"])
        obs = root.create_group("observed_data")
        for name, (dims, values) in observed.items():
            values = np.asarray(values)
            arr = writer._new_array(obs, name, values.shape, values.shape or (1,), values.dtype.str, dims)
            arr[...] = values
        if grid_shape is not None:
            pf = root.create_group("posterior_field")
            writer._new_array(pf, "field", (chains, 0, *grid_shape), field_chunks(grid_shape), "float32",
                              ["chain", "field_draw", "x", "y", "z"], filters=FIELD_FILTERS)
            nk = len(k_centres)
            writer._new_array(pf, "power", (chains, 0, nk), (chains, 256, nk), "float64",
                              ["chain", "field_draw", "k"])
            writer._new_array(pf, "field_draw", (0,), (4096,), "int64", ["field_draw"])
            k_arr = writer._new_array(pf, "k", (nk,), (nk,), "float64", ["k"])
            k_arr[...] = np.asarray(k_centres, float)
            c_arr = writer._new_array(pf, "k_count", (nk,), (nk,), "int64", ["k"])
            c_arr[...] = np.asarray(k_counts, np.int64)
            fm = root.create_group("field_moments")
            for name in ("mean", "std"):
                writer._new_array(fm, name, tuple(grid_shape), field_chunks(grid_shape)[2:], "float64",
                                  ["x", "y", "z"], filters=FIELD_FILTERS)
            fm.attrs["count"] = 0
        consolidate(building)
        os.replace(building, run_dir / STORE_NAME)
        writer.store_path = run_dir / STORE_NAME
        writer.root = open_group(writer.store_path, "r+")
        return writer

    @staticmethod
    def _new_array(group, name, shape, chunks, dtype, dims, filters=None):
        # no fill value: xarray would read values equal to it as missing (NaN)
        # a CRC32 of every chunk: a garbled chunk fails when read instead of reading as data;
        # with ``filters`` (FIELD_FILTERS: compressed, then the CRC32) no compressor follows
        extra = {"filters": list(filters), "compressors": None} if filters else {"filters": [CRC32()]}
        arr = group.create_array(name, shape=tuple(shape), chunks=tuple(max(1, c) for c in chunks),
                                 dtype=dtype, fill_value=None, **extra)
        arr.attrs["_ARRAY_DIMENSIONS"] = list(dims)
        return arr

    # -- resume -----------------------------------------------------------------

    @classmethod
    def reopen(cls, run_dir, progress: dict) -> "RunStoreWriter":
        """Open an existing store for appending, truncated to ``progress`` (the checkpoint's)."""
        run_dir = Path(run_dir)
        store_path = run_dir / STORE_NAME
        # the same check as the reader's, over the checkpoint's draws; .zmetadata is rewritten here
        layout = _Layout(store_path, progress=progress, consolidated=False)
        for group, name in layout.arrays:     # and read back the chunks appending rewrites
            check_appended_chunk(store_path, group, name, _open_array(store_path, group, name),
                                 layout.resume_progress)
        root = _open_root_checked(store_path, "r+")
        writer = cls(run_dir, root)
        try:
            with zarr.config.set(WRITE_EVERY_CHUNK):
                writer._add_later_stats(layout.resume_progress)
                writer._truncate(layout.resume_progress)
        except OSError as err:
            raise write_error(run_dir, "truncating the run store to its checkpoint", err) \
                from None
        return writer

    def _add_later_stats(self, progress: dict) -> None:
        """The LATER_STATS a store from before them lacks, NaN for the draws it holds."""
        chains = int(self.root.attrs["chains"])
        for group, n in (("sample_stats", progress["draws"]), ("warmup_sample_stats", progress["warmup_draws"])):
            g = self.root[group]
            for name in LATER_STATS:
                if name not in g:
                    arr = self._new_array(g, name, (chains, n), (chains, 1024), "float64", ["chain", "draw"])
                    if n:
                        arr[...] = np.nan

    def _truncate(self, progress: dict) -> None:
        # progress first: a reader never sees it count draws the arrays no longer hold
        self.root.attrs["progress"] = dict(progress)
        consolidate(self.store_path)
        sizes = {"warmup": progress["warmup_draws"], "": progress["draws"]}
        for prefix, n in sizes.items():
            for group in (f"{prefix}_posterior" if prefix else "posterior",
                          f"{prefix}_sample_stats" if prefix else "sample_stats"):
                for _, arr in self.root[group].arrays():
                    if arr.shape[1] != n:
                        arr.resize((arr.shape[0], n))
        if "posterior_field" in self.root:
            pf = self.root["posterior_field"]
            n = progress["field_draws"]
            for name in ("field", "power"):
                arr = pf[name]
                if arr.shape[1] != n:
                    arr.resize((arr.shape[0], n, *arr.shape[2:]))
            if pf["field_draw"].shape[0] != n:
                pf["field_draw"].resize((n,))
        consolidate(self.store_path)

    # -- appending ---------------------------------------------------------------

    def append(self, record: ChunkRecord, progress: dict, timing: dict | None = None) -> None:
        """Append one chunk, then publish ``progress`` (readers trust only that) and, when
        given, ``timing`` (root attribute: warmup_seconds, sampling_seconds, the wall time
        of the chunks so far, for ESS per second).

        A failing write (OSError) raises StoreWriteError; the chunks of the ``progress``
        published before stay readable (readers and resume use only those)."""
        try:
            with zarr.config.set(WRITE_EVERY_CHUNK):
                self._append(record, progress, timing)
        except OSError as err:
            raise write_error(self.run_dir, f"writing chunk {progress.get('chunks', '?')} "
                               "to the run store", err) from None

    def _append(self, record: ChunkRecord, progress: dict, timing: dict | None) -> None:
        r = self.root
        for group, values in (("warmup_sample_stats", record.warmup_stats), ("sample_stats", record.stats),
                              ("warmup_posterior", record.warmup_params), ("posterior", record.params)):
            for name, arr in values.items():
                if arr.shape[1]:
                    r[group][name].append(np.asarray(arr), axis=1)
        if record.fields is not None and record.powers.shape[1]:
            pf = r["posterior_field"]
            append_draws(pf["field"], record.fields, record.powers.shape[1])
            pf["power"].append(record.powers, axis=1)
            pf["field_draw"].append(np.asarray(record.field_draw_index, np.int64))
        if record.moments is not None:
            fm = r["field_moments"]
            for name, value in zip(("mean", "std"), record.moments):
                write_grid(fm[name], value)
            fm.attrs["count"] = int(record.moments[2])
        attrs = {"progress": dict(progress), "updated": utc_now()}
        if timing is not None:
            attrs["timing"] = {key: float(value) for key, value in timing.items()}
        r.attrs.update(attrs)
        consolidate(self.store_path)

    def set_status(self, status: str, error: str = "") -> None:
        if status not in STORE_STATUSES:
            raise ValueError(f"unknown run status {status!r}")
        try:
            self.root.attrs.update({"status": status, "error": error, "updated": utc_now()})
            consolidate(self.store_path)
        except OSError as err:
            raise write_error(self.run_dir, f"recording the status {status!r}", err) \
                from None


# ---------------------------------------------------------------------------
# The layout, checked (the reader on open and refresh, the writer's reopen)
# ---------------------------------------------------------------------------


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _read_json(root: Path, rel: str, what: str) -> dict:
    """The JSON object of the store file ``root/rel``: a regular file inside the store
    (no symlink, FIFO or device, at most METADATA_MAX_BYTES), or RunStoreError naming it."""
    path = root / rel
    try:
        value = read_store_json(root, rel)
    except FileNotFoundError:
        raise RunStoreError(f"{path}: missing ({what}); the run store is damaged") from None
    except NotRegularFile as err:
        raise RunStoreError(f"{err.strerror} ({what}); the run store is damaged") from None
    except OSError as err:
        raise RunStoreError(f"{path}: unreadable ({what}): {err.strerror or err}") from None
    except (UnicodeDecodeError, ValueError) as err:
        raise RunStoreError(f"{path}: not valid JSON ({what}; truncated or garbled): {err}") from None
    if not isinstance(value, dict):
        raise RunStoreError(f"{path}: holds {type(value).__name__}, not a JSON object ({what})")
    return value


def check_progress(progress, where: str) -> dict:
    """``progress`` as a dict of the ``PROGRESS_KEYS`` (non-negative ints), or RunStoreError
    naming ``where`` it came from."""
    if not isinstance(progress, dict):
        raise RunStoreError(f"{where}: progress is {progress!r}, not a record of "
                            f"{', '.join(PROGRESS_KEYS)}")
    for key in PROGRESS_KEYS:
        if key not in progress:
            raise RunStoreError(f"{where}: progress has no {key}")
        if not _is_count(progress[key]):
            raise RunStoreError(f"{where}: progress.{key} is {progress[key]!r}, not a "
                                "non-negative integer")
    return {key: progress[key] for key in PROGRESS_KEYS}


@dataclass(frozen=True)
class _ArraySpec:
    """What the layout expects of one array: its dims (None: any, from its .zattrs), dtype
    (None: any number), shape (None for the axis that grows with the draws), and for a
    growing array that axis, how many entries ``progress`` publishes and how many it may
    hold at most. ``fixed``: every chunk must exist (written when the store was created)."""

    group: str
    name: str
    dims: tuple | None
    dtype: np.dtype | None
    shape: tuple | None
    axis: int | None = None
    count: int = 0
    bound: int = 0
    fixed: bool = False


class _Layout:
    """The store at ``store_path`` checked against the layout of the module docstring
    (metadata and file existence, no data): RunStoreError naming what is damaged.

    ``progress``: the checkpoint's (the writer's reopen): it must count no more than the
    store's own ``progress`` (the draws every check covers), as ``resume_progress``. ``consolidated``: a damaged ``.zmetadata``
    is an error (False: reopen rewrites it; the arrays it lists are still checked when it
    is readable). After it: ``attrs``, ``progress``, ``grid`` (None without a
    field), ``arrays`` {(group, name): its .zarray}, ``moment_count``."""

    def __init__(self, store_path: Path, progress: dict | None = None, consolidated: bool = True):
        self.path = Path(store_path)
        if self.path.is_symlink():
            raise RunStoreError(f"{self.path}: a symlink; a run store is a folder of its run, never a link")
        if not self.path.is_dir():
            raise RunStoreError(f"{self.path}: missing or not a directory (the run store)")
        self._json(".zgroup", "the store's root group")
        self.attrs = self._json(".zattrs", "the run's attributes")
        self._check_attrs()
        if progress is not None:
            self.resume_progress = check_progress(progress, f"{self.path.parent / CHECKPOINT_NAME}")
            for key in PROGRESS_KEYS:
                if self.resume_progress[key] > self.progress[key]:
                    raise RunStoreError(
                        f"{self.path.parent / CHECKPOINT_NAME}: the checkpoint counts {key} "
                        f"{self.resume_progress[key]} but the store publishes only {self.progress[key]}; "
                        "the store lost draws and cannot be resumed")
        try:
            listed = self._consolidated_listing()
        except RunStoreError:
            if consolidated:
                raise
            listed = {}
        for key in listed:
            # arrays and groups are never removed from a store: each one listed must be there
            if isinstance(key, str) and key.endswith((".zarray", ".zgroup")) and \
                    not (self.path / key).is_file():
                raise RunStoreError(f"{self.path / key}: {what_is(self.path / key)} (listed in {self.path / '.zmetadata'}); "
                                    "the run store is damaged")
        self.arrays: dict[tuple[str, str], dict] = {}
        self.grid = None
        self.moment_count = 0
        self._check_groups_and_arrays()

    # -- pieces ----------------------------------------------------------------------

    def _json(self, rel: str, what: str) -> dict:
        return _read_json(self.path, rel, what)

    def _attr_error(self, key: str, value, problem: str) -> RunStoreError:
        return RunStoreError(f"{self.path / '.zattrs'}: {key} is {value!r}, {problem}")

    def _check_attrs(self) -> None:
        a = self.attrs
        for key in ("config", "status", "model_kind"):
            if not isinstance(a.get(key), str):
                raise self._attr_error(key, a.get(key), "not a string")
        for key in ("error", "config_dir", "device", "algorithm"):
            if key in a and not isinstance(a[key], str):
                raise self._attr_error(key, a[key], "not a string")
        if a["status"] not in STORE_STATUSES:
            raise self._attr_error("status", a["status"], f"not one of {', '.join(STORE_STATUSES)}")
        for key, low, high in (("chains", 1, MAX_CHAINS), ("num_warmup", 0, MAX_DRAWS),
                               ("num_samples", 0, MAX_DRAWS), ("thin", 1, MAX_DRAWS)):
            value = a.get(key)
            if not _is_count(value) or not low <= value <= high:
                raise self._attr_error(key, value, f"not an integer from {low} to {high}")
        names = a.get("param_names")
        if not isinstance(names, list):
            raise self._attr_error("param_names", names, "not a list of names")
        for name in names:
            if not isinstance(name, str) or not name.isidentifier():
                raise self._attr_error("param_names", names, f"{name!r} is not a plain identifier")
        if len(set(names)) != len(names):
            raise self._attr_error("param_names", names, "a name repeats")
        timing = a.get("timing")
        if timing is not None and not (isinstance(timing, dict) and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in timing.values())):
            raise self._attr_error("timing", timing, "not a record of seconds")
        where = f"{self.path / '.zattrs'}"
        self.progress = check_progress(a.get("progress"), where)
        p = self.progress
        for key, limit, what in (("warmup_draws", a["num_warmup"], "num_warmup"),
                                 ("draws", a["num_samples"], "num_samples"),
                                 ("field_draws", p["draws"], "progress.draws")):
            if p[key] > limit:
                raise self._attr_error(f"progress.{key}", p[key], f"more than {what} ({limit})")

    def _consolidated_listing(self) -> dict:
        rel = ".zmetadata"
        meta = self._json(rel, "the consolidated metadata xarray and ArviZ read")
        listed = meta.get("metadata")
        if meta.get("zarr_consolidated_format") != 1 or not isinstance(listed, dict):
            raise RunStoreError(f"{self.path / rel}: not zarr's consolidated metadata (format 1)")
        return listed

    def _group(self, group: str) -> Path:
        path = self.path / group
        if not path.is_dir():
            raise RunStoreError(f"{path}: missing group {group!r}; the run store is damaged")
        self._json(f"{group}/.zgroup", f"group {group}")
        self._json(f"{group}/.zattrs", f"attributes of group {group}")
        return path

    def _specs(self) -> list[_ArraySpec]:
        a, p = self.attrs, self.progress
        chains = a["chains"]
        f64 = np.dtype(np.float64)
        specs = []
        for group, count, bound in (("posterior", p["draws"], a["num_samples"]),
                                    ("warmup_posterior", p["warmup_draws"], a["num_warmup"])):
            for name in a["param_names"]:
                specs.append(_ArraySpec(group, name, ("chain", "draw"), f64, (chains, None), 1, count, bound))
        for group, count, bound in (("sample_stats", p["draws"], a["num_samples"]),
                                    ("warmup_sample_stats", p["warmup_draws"], a["num_warmup"])):
            for name in STAT_NAMES:
                if name in LATER_STATS and not (self.path / group / name).is_dir():
                    continue           # a store from before it existed (NaN when read)
                specs.append(_ArraySpec(group, name, ("chain", "draw"), STAT_DTYPES.get(name, f64),
                                        (chains, None), 1, count, bound))
        return specs

    def _check_groups_and_arrays(self) -> None:
        a, p = self.attrs, self.progress
        for group in ("posterior", "warmup_posterior", "sample_stats", "warmup_sample_stats", "observed_data"):
            self._group(group)
        for spec in self._specs():
            self._array(spec)
        field = a["model_kind"] == "field" or (self.path / "posterior_field").exists()
        if field:
            self._group("posterior_field")
            self._group("field_moments")
            count = self._json("field_moments/.zattrs", "attributes of group field_moments").get("count")
            if not _is_count(count):
                raise RunStoreError(f"{self.path / 'field_moments/.zattrs'}: count is {count!r}, "
                                    "not a non-negative integer")
            self.moment_count = count
            chains, n_draws, f = a["chains"], a["num_samples"], p["field_draws"]
            where = self.path / "posterior_field/field/.zarray"
            shape = self._json("posterior_field/field/.zarray", "metadata of array posterior_field/field") \
                .get("shape")
            if not (isinstance(shape, list) and len(shape) == 5 and all(_is_count(n) for n in shape)):
                raise RunStoreError(f"{where}: shape {shape!r} is not (chain, field_draw, x, y, z)")
            if shape[0] != chains or min(shape[2:]) < 1 or math.prod(shape[2:]) > MAX_ELEMENTS:
                raise RunStoreError(f"{where}: shape {shape} does not fit {chains} chains and a grid "
                                    f"of 1 to {MAX_ELEMENTS} voxels")
            self.grid = grid = tuple(shape[2:])
            # k first: the shells' count is that of every P(k)
            k = self._array(_ArraySpec("posterior_field", "k", ("k",), np.dtype(np.float64), None, fixed=True))
            nk = k["shape"][0]
            for spec in (_ArraySpec("posterior_field", "field", ("chain", "field_draw", "x", "y", "z"),
                                    np.dtype(np.float32), (chains, None, *grid), 1, f, n_draws),
                         _ArraySpec("posterior_field", "k_count", ("k",), np.dtype(np.int64), (nk,), fixed=True),
                         _ArraySpec("posterior_field", "power", ("chain", "field_draw", "k"), np.dtype(np.float64),
                                    (chains, None, nk), 1, f, n_draws),
                         _ArraySpec("posterior_field", "field_draw", ("field_draw",), np.dtype(np.int64),
                                    (None,), 0, f, n_draws)):
                self._array(spec)
            for name in ("mean", "std"):
                self._array(_ArraySpec("field_moments", name, ("x", "y", "z"), np.dtype(np.float64), grid,
                                       fixed=count > 0))
        observed = self.path / "observed_data"
        try:
            entries = sorted(e.name for e in os.scandir(observed) if e.is_dir())
        except OSError as err:
            raise RunStoreError(f"{observed}: unreadable: {err.strerror or err}") from None
        for name in entries:
            if not name.isidentifier():
                raise RunStoreError(f"{observed / name}: {name!r} is not a plain identifier (an observed "
                                    "array's name)")
            self._array(_ArraySpec("observed_data", name, None, None, None, fixed=True))

    def _array(self, spec: _ArraySpec) -> dict:
        rel = f"{spec.group}/{spec.name}"
        where = self.path / rel / ".zarray"
        if not (self.path / rel).is_dir():
            raise RunStoreError(f"{self.path / rel}: missing array {rel}; the run store is damaged")
        meta = self._json(f"{rel}/.zarray", f"metadata of array {rel}")
        attrs = self._json(f"{rel}/.zattrs", f"attributes of array {rel}")
        shape, chunks, dtype = meta.get("shape"), meta.get("chunks"), meta.get("dtype")
        if meta.get("zarr_format") != 2:
            raise RunStoreError(f"{where}: zarr_format is {meta.get('zarr_format')!r}, not 2")
        if not (isinstance(shape, list) and all(_is_count(n) for n in shape)):
            raise RunStoreError(f"{where}: shape {shape!r} is not a list of non-negative integers")
        if not (isinstance(chunks, list) and len(chunks) == len(shape)
                and all(_is_count(n) and n >= 1 for n in chunks)):
            raise RunStoreError(f"{where}: chunks {chunks!r} do not match the shape {shape}")
        if math.prod(chunks) > MAX_ELEMENTS:
            raise RunStoreError(f"{where}: chunks {chunks} hold more than {MAX_ELEMENTS} elements")
        if meta.get("dimension_separator", ".") != "." or meta.get("order") not in ("C", "F"):
            raise RunStoreError(f"{where}: not this layout's chunk keys (dimension_separator "
                                f"{meta.get('dimension_separator')!r}, order {meta.get('order')!r})")
        for key in ("compressor", "filters"):
            value = meta.get(key)
            codecs = [value] if key == "compressor" else value
            if value is not None and not (isinstance(codecs, list) and all(
                    isinstance(c, dict) and isinstance(c.get("id"), str) for c in codecs)):
                raise RunStoreError(f"{where}: {key} {value!r} is not a zarr codec")
        try:
            dt = np.dtype(dtype) if isinstance(dtype, str) else None
        except TypeError:
            dt = None
        if dt is None or dt.kind not in "biuf":
            raise RunStoreError(f"{where}: dtype {dtype!r} is not a number type")
        if spec.dtype is not None and (dt.kind, dt.itemsize) != (spec.dtype.kind, spec.dtype.itemsize):
            raise RunStoreError(f"{where}: dtype {dtype!r}, not {spec.dtype.str!r} as {rel} is stored")
        dims = attrs.get("_ARRAY_DIMENSIONS")
        if not (isinstance(dims, list) and len(dims) == len(shape) and all(isinstance(d, str) for d in dims)):
            raise RunStoreError(f"{self.path / rel / '.zattrs'}: _ARRAY_DIMENSIONS {dims!r} do not name "
                                f"the {len(shape)} axes of {rel}")
        if spec.dims is not None and tuple(dims) != spec.dims:
            raise RunStoreError(f"{self.path / rel / '.zattrs'}: _ARRAY_DIMENSIONS {dims}, not "
                                f"{list(spec.dims)}")
        if spec.shape is not None:
            expected = list(spec.shape)
            if spec.axis is not None:
                expected[spec.axis] = shape[spec.axis] if spec.axis < len(shape) else None
            if list(shape) != expected:
                raise RunStoreError(f"{where}: shape {shape}, not {[('n' if e is None else e) for e in expected]} "
                                    f"as {rel} is stored in this run")
        if spec.axis is not None:
            n = shape[spec.axis]
            if n < spec.count:
                raise RunStoreError(f"{where}: {rel} holds {n} draws, but the run's progress publishes "
                                    f"{spec.count}")
            if n > max(spec.bound, spec.count):
                raise RunStoreError(f"{where}: shape {shape}: {n} draws is more than the run can hold "
                                    f"({spec.bound})")
        else:
            if math.prod(shape) > MAX_ELEMENTS:
                raise RunStoreError(f"{where}: shape {shape} holds more than {MAX_ELEMENTS} elements")
            if tuple(dims) == ("x", "y", "z") and self.grid is not None and tuple(shape) != self.grid:
                raise RunStoreError(f"{where}: shape {shape}, not the grid {list(self.grid)}")
        # a store written before every chunk was written (WRITE_EVERY_CHUNK, with the CRC32) may
        # lack chunks whose values all equal the fill value, 0: zarr skipped them. Only float
        # arrays whose values are never all 0 over a chunk can be checked in such a store
        if (spec.fixed or spec.axis is not None) and (_checksummed(meta) or _never_all_zero(spec.name, dt)):
            self._check_chunks(rel, shape, chunks, spec)
        self.arrays[(spec.group, spec.name)] = meta
        return meta

    def _check_chunks(self, rel: str, shape, chunks, spec: _ArraySpec) -> None:
        """The chunk files covering the published draws (all of a fixed array) exist, as regular files."""
        extent = list(shape)
        if spec.axis is not None:
            extent[spec.axis] = spec.count
        try:
            found = first_bad_chunk(self.path / rel, extent, chunks)
        except OSError as err:
            raise RunStoreError(f"{self.path / rel}: unreadable: {err.strerror or err}") from None
        if found is not None:
            raise bad_chunk_error(self.path / rel, rel, *found)


#: float arrays of a store that may hold a chunk of zeros (a frozen chain's acceptance and
#: energy error; the observed data and noise, which may be 0 where nothing is observed)
_MAY_BE_ALL_ZERO = frozenset({"acceptance_rate", "energy_error", "data", "noise", "noise_map", "truth",
                              "mean", "std", "y", "t"})


def _never_all_zero(name: str, dtype: np.dtype) -> bool:
    """Whether a chunk of array ``name`` all 0 cannot be real (sampled floats: parameters,
    lp, step sizes, field draws, P(k)), so that its absence is damage even in a store
    written before every chunk was written."""
    return dtype.kind == "f" and name not in _MAY_BE_ALL_ZERO


def _checksummed(meta: dict) -> bool:
    """Whether an array's metadata is this writer's: a CRC32 filter on every chunk, and every
    chunk written (also those equal to the fill value, see ``WRITE_EVERY_CHUNK``)."""
    filters = meta.get("filters") or []
    return any(isinstance(f, dict) and f.get("id") == "crc32" for f in filters)


# ---------------------------------------------------------------------------
# Reading (also while another process writes)
# ---------------------------------------------------------------------------


class RunReader:
    """Read a run store, live or finished. Call :meth:`refresh` to see new chunks."""

    def __init__(self, run_dir):
        self.run_dir = Path(run_dir)
        self.store_path = self.run_dir / STORE_NAME
        if not self.store_path.exists():
            raise RunStoreError(f"{self.run_dir}: not a Fieldscope run directory (no {STORE_NAME})")
        self.refresh()

    def refresh(self) -> dict:
        """Read the store's progress and check the store against its layout (metadata and
        chunk files, not data; see the module docstring): RunStoreError naming what is
        damaged. Returns the progress."""
        layout = _Layout(self.store_path)
        self.root = _open_root_checked(self.store_path, "r")
        # opened by zarr when first read (each costs a few file reads)
        self._arrays = dict.fromkeys(layout.arrays)
        self.attrs = layout.attrs
        self.progress = dict(layout.progress)
        self._grid = layout.grid
        self._meta = layout.arrays
        return self.progress

    def _read(self, group: str, name: str, selection: tuple, orthogonal: bool = False) -> np.ndarray:
        """``selection`` of one array; a chunk that cannot be decoded (truncated, garbled:
        its CRC32 differs) raises RunStoreError naming the array and the chunk file."""
        if (group, name) not in self._arrays and name in LATER_STATS:
            # a store written before this statistic existed: (chain, draw) of NaN
            n = self.progress["warmup_draws" if group.startswith("warmup") else "draws"]
            full = np.full((self.attrs["chains"], n), np.nan)
            return full[selection[0]][..., selection[1]] if orthogonal else full[selection]
        arr = self._arrays[group, name]
        if arr is None:
            arr = self._arrays[group, name] = _open_array(self.store_path, group, name)
        try:
            return np.asarray(arr.get_orthogonal_selection(selection) if orthogonal else arr[selection])
        except Exception as err:
            raise self._damaged(group, name, arr, selection, err) from None

    def _damaged(self, group: str, name: str, arr, selection: tuple, err: Exception) -> RunStoreError:
        return damaged_read_error(self.store_path, group, name, arr, selection, err)

    @property
    def status(self) -> str:
        return self.attrs.get("status", "")

    @property
    def config_text(self) -> str:
        return self.attrs.get("config", "")

    @property
    def stored_config(self) -> "StoredConfig":
        """The config the run was started with (text and folder; ``StoredConfig``)."""
        return StoredConfig(self.config_text, self.attrs.get("config_dir") or str(self.run_dir),
                            f"{self.run_dir} (stored config)")

    @property
    def param_names(self) -> list[str]:
        return list(self.attrs.get("param_names", []))

    def _series(self, group: str, name: str, n: int, start: int = 0,
                stop: int | None = None) -> np.ndarray:
        stop = n if stop is None else min(int(stop), n)
        return self._read(group, name, (slice(None), slice(int(start), stop)))

    def stat(self, name: str, warmup: bool = False, start: int = 0,
             stop: int | None = None) -> np.ndarray:
        """(chain, draw) array of a sample statistic, committed draws only (draws
        ``start`` to ``stop``, at most what ``progress`` publishes)."""
        if warmup:
            return self._series("warmup_sample_stats", name, self.progress["warmup_draws"],
                                start, stop)
        return self._series("sample_stats", name, self.progress["draws"], start, stop)

    def param(self, name: str, warmup: bool = False, start: int = 0,
              stop: int | None = None) -> np.ndarray:
        """(chain, draw) array of a sampled parameter; draws as in :meth:`stat`."""
        if warmup:
            return self._series("warmup_posterior", name, self.progress["warmup_draws"],
                                start, stop)
        return self._series("posterior", name, self.progress["draws"], start, stop)

    @property
    def has_field(self) -> bool:
        return self._grid is not None

    @property
    def grid_shape(self) -> tuple[int, ...] | None:
        """(x, y, z) of the field draws, or None for a run without a field."""
        return self._grid

    def shells(self) -> tuple[np.ndarray, np.ndarray]:
        """(k centres, mode counts) of the P(k) shells of a field run."""
        return (self._read("posterior_field", "k", (slice(None),)),
                self._read("posterior_field", "k_count", (slice(None),)))

    def field_draw_steps(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """(m,) index in ``draw`` (post-warmup) of the kept field draws ``start`` to ``stop``
        (at most the published ones)."""
        n = self.progress["field_draws"]
        stop = n if stop is None else min(int(stop), n)
        return np.asarray(self._read("posterior_field", "field_draw", (slice(int(start), stop),)), np.int64)

    def _field_index(self, index: int) -> int:
        index = int(index)
        n = self.progress["field_draws"]
        if not -n <= index < n:
            raise RunStoreError(f"{self.store_path}: field draw {index} is not published ({n} are)")
        return index % n

    def field_draw(self, index: int) -> np.ndarray:
        """(chain, x, y, z) kept field draw number ``index`` (of the published ones)."""
        return self._read("posterior_field", "field", (slice(None), self._field_index(index)))

    @property
    def field_chunk_shape(self) -> tuple[int, ...] | None:
        """(bx, by, bz): the block of a field draw one chunk file holds (the whole grid in a
        store written before field draws were stored in blocks), or None without a field."""
        meta = self._meta.get(("posterior_field", "field"))
        return None if meta is None else tuple(meta["chunks"][2:])

    def field_volume(self, index: int) -> "FieldVolume":
        """(chain, x, y, z) kept field draw number ``index`` as a ``FieldVolume``: nothing is
        read until it is indexed (``volume[c, :, :, 7]`` reads only the blocks of that plane)."""
        index = self._field_index(index)
        return FieldVolume(self, "posterior_field", "field", (slice(None), index),
                           (self.attrs["chains"], *self._grid), np.dtype(np.float32))

    def field_slice(self, index: int, axis: int, position: int, chain=slice(None)) -> np.ndarray:
        """One plane of kept field draw ``index``: the voxels at ``position`` along grid axis
        ``axis`` (0: x, 1: y, 2: z), (chain, a, b) or (a, b) for one ``chain``. Reads only
        the blocks the plane crosses (module docstring: field blocks)."""
        axis, position = self._plane(axis, position)
        key = [slice(None)] * 3
        key[axis] = position
        return self._read("posterior_field", "field", (chain, self._field_index(index), *key))

    def field_block(self, index: int, region, chain=slice(None)) -> np.ndarray:
        """The voxels ``region`` (three slices, or ints) of kept field draw ``index``:
        (chain, ...) or, for one ``chain``, the region alone. Reads only the blocks it covers."""
        region = tuple(region)
        if len(region) != 3:
            raise ValueError(f"a region of a field draw takes 3 axes, not {len(region)}")
        return self._read("posterior_field", "field", (chain, self._field_index(index), *region))

    def moment_volume(self, name: str) -> "FieldVolume":
        """The field moment ``name`` (mean or std, (x, y, z) float64) as a ``FieldVolume``."""
        if name not in ("mean", "std") or self._grid is None:
            raise KeyError(name)
        return FieldVolume(self, "field_moments", name, (), self._grid, np.dtype(np.float64))

    def _plane(self, axis: int, position: int) -> tuple[int, int]:
        axis, position = int(axis), int(position)
        if self._grid is None or not 0 <= axis < 3 or not 0 <= position < self._grid[axis]:
            raise ValueError(f"{self.store_path}: no plane {position} along axis {axis} of the grid "
                             f"{self._grid}")
        return axis, position

    def power_draw(self, index: int) -> np.ndarray:
        """(chain, k) P(k) of kept field draw number ``index``."""
        return self._read("posterior_field", "power", (slice(None), self._field_index(index)))

    def voxel_trace(self, voxel, start: int = 0, stop: int | None = None) -> np.ndarray:
        """(chain, m) one voxel's value in the kept field draws ``start`` to ``stop``
        (reads only that voxel)."""
        n = self.progress["field_draws"]
        stop = n if stop is None else min(int(stop), n)
        return self._read("posterior_field", "field",
                          (slice(None), slice(int(start), stop), *(int(v) for v in voxel)), orthogonal=True)

    def _moment_count(self) -> int:
        where = self.store_path / "field_moments" / ".zattrs"
        count = _read_json(self.store_path, "field_moments/.zattrs", "attributes of group field_moments").get("count")
        if not _is_count(count):
            raise RunStoreError(f"{where}: count is {count!r}, not a non-negative integer")
        return count

    @property
    def moment_count(self) -> int:
        """How many draws the stored field moments are over (0 before the first)."""
        return self._moment_count()

    def field_draws(self, chain=slice(None), draws=slice(None)) -> np.ndarray:
        n = self.progress["field_draws"]
        idx = np.arange(n)[draws]
        return self._read("posterior_field", "field", (chain, idx, slice(None), slice(None), slice(None)),
                          orthogonal=True)

    def powers(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(k centres, mode counts, power (chain, field_draw, k))."""
        k, counts = self.shells()
        n = self.progress["field_draws"]
        return k, counts, self._read("posterior_field", "power", (slice(None), slice(0, n)))

    def field_moments(self) -> tuple[np.ndarray, np.ndarray, int]:
        count = self._moment_count()
        return (self._read("field_moments", "mean", (slice(None),) * 3),
                self._read("field_moments", "std", (slice(None),) * 3), count)

    def observed(self, name: str) -> np.ndarray:
        if ("observed_data", name) not in self._arrays:
            raise KeyError(name)
        return self._read("observed_data", name, (Ellipsis,))

    def observed_data(self) -> dict[str, np.ndarray]:
        """Every array of ``observed_data`` (data, mask, noise, truth; t, y), by name."""
        return {name: self.observed(name) for group, name in self._arrays if group == "observed_data"}


@dataclass(frozen=True)
class StoredConfig:
    """The config a run was started with, as its store keeps it: the exact ``text``, the
    folder ``base_dir`` its relative paths are resolved from (the config's folder when
    the run started) and ``source``, how messages name it."""

    text: str
    base_dir: str
    source: str

    def parse(self):
        """The ``core.config.RunConfig``; ConfigError when the text does not parse."""
        from core.config import parse_config

        return parse_config(self.text, base_dir=self.base_dir, source=self.source)


def stored_run_config(run_dir) -> tuple:
    """(``core.config.RunConfig``, text) of the config a run was started with, parsed
    relative to its original folder (what ``fieldscope resume`` runs)."""
    stored = RunReader(run_dir).stored_config
    return stored.parse(), stored.text


def remove_run(run_dir) -> None:
    """Delete a run directory (used by tests and by 'start again')."""
    shutil.rmtree(run_dir, ignore_errors=True)
