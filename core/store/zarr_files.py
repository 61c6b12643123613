"""The small zarr helpers every Fieldscope store uses (the run store, the calibration store).

numpy/zarr only. One place for: the UTC time stamp written into a store's attributes, opening a
group without its consolidated metadata, rewriting that metadata for xarray / ArviZ, and the
zarr setting that makes the writer write every chunk.
"""

from __future__ import annotations

import datetime as _dt
import warnings
from pathlib import Path

import zarr

__all__ = ["WRITE_EVERY_CHUNK", "utc_now", "open_group", "consolidate"]

#: zarr skips a chunk whose values all equal the fill value (an all-False `diverging`, a
#: zero moment); the readers treat a missing chunk as damage, so the writers write every one
WRITE_EVERY_CHUNK = {"array.write_empty_chunks": True}


def utc_now() -> str:
    """The time now, UTC, ISO 8601 to the second (the stores' time stamps)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def open_group(path: Path, mode: str):
    """zarr's v2 group at ``path``, never through the consolidated metadata: that is a
    snapshot, and the group would keep handing out arrays with the shapes they had when it was
    opened (it is rewritten after every write for xarray / ArviZ, which read a store once)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.open_group(str(path), mode=mode, zarr_format=2, use_consolidated=False)


def consolidate(path: Path) -> None:
    """Rewrite the store's consolidated metadata (``.zmetadata``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(path))
