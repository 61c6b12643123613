"""The 3D view's texture from a field-shaped array: block means down to the GL limit, and
masked voxels stored far outside the levels so that the projections never pick them (the
3D view's module docstring, ``app.views.volume``, says why). Pure numpy: it runs in a
worker thread for big volumes.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["texture_factors", "block_mean", "MASK_RANGES", "CUTOFF_RANGES", "masked_value",
           "projection_cutoffs", "prepare_volume"]


def texture_factors(shape, max_size: int) -> tuple[int, ...]:
    """Block size per axis that brings every axis to at most ``max_size`` voxels."""
    max_size = max(int(max_size), 1)
    return tuple(max(1, math.ceil(int(n) / max_size)) for n in shape)


def block_mean(volume: np.ndarray, factors) -> np.ndarray:
    """Means of the finite values over blocks of ``factors`` voxels (partial at the far ends).

    Block m of an axis with factor f covers voxels [m f, min((m + 1) f, n)); a block with no
    finite value is NaN. Returns float32 of shape ceil(n / f) per axis.
    """
    volume = np.asarray(volume)
    factors = tuple(int(f) for f in factors)
    if all(f == 1 for f in factors):
        return volume.astype(np.float32, copy=False)
    out_shape = tuple(math.ceil(n / f) for n, f in zip(volume.shape, factors))
    blocks = (out_shape[0], factors[0], out_shape[1], factors[1], out_shape[2], factors[2])
    finite = np.isfinite(volume)
    if all(m * f == n for m, f, n in zip(out_shape, factors, volume.shape)) and finite.all():
        return volume.reshape(blocks).mean(axis=(1, 3, 5), dtype=np.float64).astype(np.float32)
    padded = np.zeros(tuple(m * f for m, f in zip(out_shape, factors)), np.float64)
    count = np.zeros(padded.shape, np.float64)
    region = tuple(slice(0, n) for n in volume.shape)
    padded[region] = np.where(finite, volume, 0.0)
    count[region] = finite
    sums = padded.reshape(blocks).sum(axis=(1, 3, 5))
    counts = count.reshape(blocks).sum(axis=(1, 3, 5))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = sums / counts
    return mean.astype(np.float32)


#: masked voxels are stored MASK_RANGES colour ranges beyond the levels; rays whose extreme
#: is beyond CUTOFF_RANGES ranges (they crossed masked voxels only) are not drawn
MASK_RANGES = 1000.0
CUTOFF_RANGES = 100.0


def masked_value(levels, method: str = "mip") -> float:
    """What a masked (NaN) voxel is stored as: far outside the levels, on the side the
    projection never picks (below for the maxima, above for the minimum)."""
    lo, hi = float(levels[0]), float(levels[1])
    width = max(hi - lo, 1e-12)
    return hi + MASK_RANGES * width if method == "minip" else lo - MASK_RANGES * width


def projection_cutoffs(levels) -> tuple[float, float]:
    """(mip_cutoff, minip_cutoff): a ray whose maximum (minimum) is beyond it is discarded,
    so a ray through masked voxels only shows the background."""
    lo, hi = float(levels[0]), float(levels[1])
    width = max(hi - lo, 1e-12)
    return lo - CUTOFF_RANGES * width, hi + CUTOFF_RANGES * width


def prepare_volume(volume: np.ndarray, levels, max_size: int, method: str = "mip", mask=None):
    """The texture of a field-shaped array: (z, y, x) float32, block means, no NaN.

    ``mask`` (bool, True = observed): the other voxels count as masked (see-through), as
    NaN do (the data before a run are shown as read, masked voxels with their values).
    Returns (texture, scale) with scale (3,) the size of a texture voxel along x, y, z in
    grid voxels (n / m). Pure numpy: runs in a worker thread for big volumes.
    """
    if isinstance(volume, np.ndarray) or not hasattr(volume, "block_shape"):
        volume = np.asarray(volume)
        if mask is not None and mask.shape == volume.shape and not mask.all():
            nan = np.float32(np.nan) if volume.dtype == np.float32 else np.nan
            volume = np.where(mask, volume, nan)
        factors = texture_factors(volume.shape, max_size)
        reduced = block_mean(volume, factors)
    else:
        factors = texture_factors(volume.shape, max_size)
        reduced = _stored_block_mean(volume, factors, mask)
    texture = np.ascontiguousarray(reduced.transpose(2, 1, 0), dtype=np.float32)
    bad = ~np.isfinite(texture)
    if bad.any():
        # a new array: the texture may still share memory with the run's own
        texture = np.where(bad, np.float32(masked_value(levels, method)), texture).astype(np.float32)
    scale = np.array([n / m for n, m in zip(volume.shape, reduced.shape)], float)
    return texture, scale


def _stored_block_mean(volume, factors, mask=None) -> np.ndarray:
    """``block_mean`` of a stored volume read slab by slab along x (module docstring)."""
    step = math.lcm(int(volume.block_shape[0]), int(factors[0]))
    parts = []
    for x0 in range(0, volume.shape[0], step):
        slab = np.asarray(volume[x0:x0 + step])
        if mask is not None and mask.shape == volume.shape:
            part = mask[x0:x0 + step]
            if not part.all():
                slab = np.where(part, slab, np.float32(np.nan) if slab.dtype == np.float32 else np.nan)
        parts.append(block_mean(slab, factors))
    return np.concatenate(parts, axis=0)
