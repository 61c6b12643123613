"""The run store's chunk files named when they are damaged: by a read that fails, by the
layout check (a chunk file missing or not a regular file), and by the writer's reopen, which
reads back the chunks that appending rewrites before anything is written.

numpy/zarr only, like the rest of ``core.store``.
"""

from __future__ import annotations

from pathlib import Path

from core.io.regular_file import NotRegularFile
from core.store.errors import RunStoreError
from core.store.zarr_files import damaged_chunk

__all__ = ["damaged_read_error", "bad_chunk_error", "appended_axis", "check_appended_chunk"]


def damaged_read_error(store_path: Path, group: str, name: str, arr, selection: tuple,
                       err: Exception) -> RunStoreError:
    """The RunStoreError for a read of ``selection`` of array ``group/name`` that failed with
    ``err``: naming the chunk file that cannot be read (a FIFO, a symlink, truncated, its
    CRC32 differs), else the array."""
    where = Path(store_path) / group / name
    found = damaged_chunk(arr, selection)
    if found is None:
        return RunStoreError(f"{where}: cannot read {group}/{name} ({err})")
    key, chunk_err = found
    if isinstance(chunk_err, NotRegularFile):
        return RunStoreError(f"{chunk_err.strerror} (a chunk file of {group}/{name}); the run store is damaged")
    return RunStoreError(f"{where / key}: damaged chunk of {group}/{name} (truncated or corrupt: {chunk_err})")


def bad_chunk_error(folder: Path, rel: str, key: str, what: str) -> RunStoreError:
    """The layout check's error for chunk ``key`` of array ``rel`` (in ``folder``), which
    ``core.store.zarr_files.first_bad_chunk`` found ``what`` ("missing", "a FIFO", ...)."""
    if what != "missing":
        return RunStoreError(f"{Path(folder) / key}: {what}, not a regular file (a chunk file of {rel}); "
                             "the run store is damaged")
    return RunStoreError(f"{Path(folder) / key}: missing chunk file of {rel} (its draws are published: "
                         "the run store is damaged; zarr would read it as zeros)")


def appended_axis(group: str, name: str, progress: dict) -> tuple[int, int] | None:
    """(axis, entries kept) of an array that ``RunStoreWriter.append`` grows, at ``progress``;
    None for an array it writes whole (the moments) or never (observed data, shells)."""
    if group in ("posterior", "sample_stats"):
        return 1, progress["draws"]
    if group in ("warmup_posterior", "warmup_sample_stats"):
        return 1, progress["warmup_draws"]
    if group == "posterior_field" and name in ("field", "power"):
        return 1, progress["field_draws"]
    if group == "posterior_field" and name == "field_draw":
        return 0, progress["field_draws"]
    return None


def check_appended_chunk(store_path: Path, group: str, name: str, arr, progress: dict) -> None:
    """Read back the chunk of ``arr`` that appending after ``progress`` rewrites: the one
    holding its last kept entries when they do not fill it (zarr reads it, then writes it
    whole). A damaged one (truncated, garbled, a FIFO, a symlink) would fail only after the
    sampler ran, halfway through writing a chunk (a traceback, or the run marked failed with
    "free disk space" as the advice): RunStoreError naming it now, before anything is written."""
    found = appended_axis(group, name, progress)
    if found is None:
        return
    axis, n = found
    step = arr.chunks[axis]
    if n % step == 0:
        return
    selection = [slice(None)] * arr.ndim
    selection[axis] = slice(n - n % step, n)
    selection = tuple(selection)
    try:
        arr[selection]
    except Exception as err:  # noqa: BLE001 - zarr and the codecs raise many kinds
        raise damaged_read_error(store_path, group, name, arr, selection, err) from None
