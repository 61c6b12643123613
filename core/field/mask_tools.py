"""Building a mask (True = observed) from the data: NaNs, a threshold, boxes; saving it.

numpy only. Every mask here is a bool array of the grid's shape with True where a voxel
is observed and False where it is masked out, the convention of ``data.mask`` in the
config (``core.io.field_inputs``) and of ``core.field.observations``.

    mask_from_nans(data)                  observed where the data are finite (NaN and
                                          +-inf masked: the likelihood cannot use them)
    mask_from_threshold(v, low, high)     observed where low <= v <= high (a bound that
                                          is None is not applied; NaN is in no range)
    mask_from_boxes(shape, boxes)         every box masked out: a box is index ranges
                                          (i0, i1, j0, j1, k0, k1), ends exclusive as in
                                          slicing, None meaning the axis' start or end
                                          (so (None, None, None, None, 3, 5) masks the
                                          slab of planes k = 3, 4 through all i and j)
    combine_masks(*masks)                 observed where every mask observes (and);
                                          None stands for "everything observed"
    observed_fraction(mask)               the share of observed voxels
    mask_path_for(config_path)            <config folder>/<config stem>.mask.npy
    save_mask(path, mask)                 a .npy of bools, written atomically; an
                                          existing file is never replaced unless
                                          ``overwrite=True``

Problems raise ``MaskError`` (a ``ValueError``) naming the value and what would be accepted.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np

__all__ = ["MaskError", "mask_from_nans", "mask_from_threshold", "mask_from_boxes",
           "combine_masks", "observed_fraction", "mask_path_for", "save_mask"]


class MaskError(ValueError):
    """A mask tool was given something it cannot use; the message says what and why."""


def mask_from_nans(data) -> np.ndarray:
    """Observed where ``data`` is finite: NaN and infinite values are masked out."""
    arr = np.asarray(data)
    if arr.dtype.kind not in "biuf":
        raise MaskError(f"mask from NaNs: the values have dtype {arr.dtype}; a real (float or "
                        "integer) array is needed")
    if arr.dtype.kind != "f":
        return np.ones(arr.shape, dtype=bool)
    return np.isfinite(arr)


def _bound(name: str, value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise MaskError(f"threshold {name} = {value!r}: a number (or None for no bound) is needed")
    value = float(value)
    if math.isnan(value):
        raise MaskError(f"threshold {name} = nan: a number (or None for no bound) is needed")
    return value


def mask_from_threshold(values, low=None, high=None) -> np.ndarray:
    """Observed where ``low <= values <= high``; a bound that is None is not applied.

    NaN values lie in no range and are always masked; +-inf pass a bound on the other
    side only (an infinite noise sd is masked by any ``high``).
    """
    arr = np.asarray(values)
    if arr.dtype.kind not in "biuf":
        raise MaskError(f"threshold: the values have dtype {arr.dtype}; a real (float or "
                        "integer) array is needed")
    lo, hi = _bound("low", low), _bound("high", high)
    if lo is not None and hi is not None and lo > hi:
        raise MaskError(f"threshold: low = {lo!r} is above high = {hi!r}; nothing would be "
                        "observed (swap them)")
    observed = ~np.isnan(arr) if arr.dtype.kind == "f" else np.ones(arr.shape, dtype=bool)
    if lo is not None:
        observed &= arr >= lo
    if hi is not None:
        observed &= arr <= hi
    return observed


def _index(value, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise MaskError(f"{what} = {value!r}: a whole number (or None for the axis' end) is needed")
    return int(value)


def mask_from_boxes(shape, boxes: Sequence[Sequence]) -> np.ndarray:
    """A mask of ``shape`` observed everywhere except inside each box (module docstring).

    A box is six indices (i0, i1, j0, j1, k0, k1): axis 0 from i0 to i1 - 1 and so on,
    None meaning the axis' start (first of a pair) or end (second). Indices must lie in
    0..n (no negative indexing) with start < end.
    """
    try:
        shape = tuple(int(n) for n in shape)
    except (TypeError, ValueError):
        raise MaskError(f"boxes: shape {shape!r} is not a tuple of whole numbers") from None
    if len(shape) != 3 or any(n < 1 for n in shape):
        raise MaskError(f"boxes: shape {shape} must be three positive lengths (n0, n1, n2)")
    mask = np.ones(shape, dtype=bool)
    for number, box in enumerate(boxes, start=1):
        if isinstance(box, (str, bytes)) or not hasattr(box, "__len__") or len(box) != 6:
            raise MaskError(f"box {number} {box!r}: six indices (i0, i1, j0, j1, k0, k1) are needed")
        where = []
        for axis in range(3):
            name = "ijk"[axis]
            start = _index(box[2 * axis], f"box {number}: {name}0")
            stop = _index(box[2 * axis + 1], f"box {number}: {name}1")
            n = shape[axis]
            start = 0 if start is None else start
            stop = n if stop is None else stop
            if not (0 <= start < stop <= n):
                raise MaskError(f"box {number} {tuple(box)}: axis {axis} range {start}..{stop} "
                                f"(end exclusive) must satisfy 0 <= start < end <= {n}")
            where.append(slice(start, stop))
        mask[tuple(where)] = False
    return mask


def combine_masks(*masks) -> np.ndarray | None:
    """Observed where every mask observes (logical and). None entries stand for "every voxel
    observed" and are skipped; None when every entry is None."""
    result = None
    for number, m in enumerate(masks, start=1):
        if m is None:
            continue
        m = np.asarray(m)
        if m.dtype != bool:
            raise MaskError(f"combine masks: mask {number} has dtype {m.dtype}; masks are bool "
                            "(True = observed)")
        if result is None:
            result = m.copy()
        elif m.shape != result.shape:
            raise MaskError(f"combine masks: mask {number} has shape {m.shape}, the first "
                            f"{result.shape}; masks of one grid have one shape")
        else:
            result &= m
    return result


def observed_fraction(mask) -> float:
    """The share of observed (True) voxels; 1.0 for None (no mask)."""
    if mask is None:
        return 1.0
    m = np.asarray(mask, dtype=bool)
    return float(m.mean()) if m.size else 1.0


def mask_path_for(config_path) -> Path:
    """Where the mask of a config goes: next to it, ``<config stem>.mask.npy``."""
    path = Path(os.fspath(config_path))
    return path.with_name(f"{path.stem}.mask.npy")


def save_mask(path, mask, *, overwrite: bool = False) -> Path:
    """Write ``mask`` (bool, True = observed) to the .npy file ``path``; returns its path.

    The file is written under a temporary name and moved into place, so a reader never
    sees half a mask. An existing ``path`` is refused unless ``overwrite`` is True (it may
    be a file the user needs). Refused: a name not ending in .npy (numpy would add one),
    a mask that is not bool, a mask with no observed voxel (a run could not use it).
    """
    path = Path(os.path.abspath(os.fspath(path)))
    if path.suffix.lower() != ".npy":
        raise MaskError(f"{path}: a mask file must end in .npy")
    m = np.asarray(mask)
    if m.dtype != bool:
        raise MaskError(f"{path}: the mask has dtype {m.dtype}; a mask is bool (True = observed)")
    if m.size == 0 or not m.any():
        raise MaskError(f"{path}: no voxel is observed (the mask is False everywhere; "
                        "True = observed); not saved")
    if path.is_dir():
        raise MaskError(f"{path}: is a folder; not replaced by a mask file")
    if path.exists() and not overwrite:
        raise MaskError(f"{path}: a file of that name exists; not replaced (choose to replace "
                        "it, or another name)")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        with open(tmp, "wb") as fh:
            np.save(fh, np.ascontiguousarray(m), allow_pickle=False)
            fh.flush()
            os.fsync(fh.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            try:                     # no-clobber: a file created meanwhile is not replaced
                os.link(tmp, path)
            except FileExistsError:
                raise MaskError(f"{path}: a file of that name exists; not replaced (choose to "
                                "replace it, or another name)") from None
            except OSError:          # a file system without hard links
                if path.exists():
                    raise MaskError(f"{path}: a file of that name exists; not replaced") from None
                os.replace(tmp, path)
    except OSError as exc:
        raise MaskError(f"{path}: the mask could not be written: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return path
