"""How a mask mixes the shells of a power spectrum (``core.field.prior_fit``'s mask model).

numpy only. A zero-filled masked field's shell power is the unmasked one convolved with the
mask's window |W(q)|^2 (W = DFT(m) / N): ``mask_mixing`` computes that exactly for a P constant
within each shell; ``mask_floor`` is the flat part of the window (scattered masked voxels), the
model that stands in on grids beyond ``MIXING_MAX_CELLS``.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from core.field.grid import Grid

__all__ = ["MIXING_MAX_CELLS", "mask_floor", "mask_mixing"]


def mask_floor(mask: np.ndarray, grid: Grid) -> float:
    """w / f: the flat share of the mask's window (module docstring), in [0, 1).

    |W(q)|^2 = |DFT(m)(q)|^2 / N^2 sums to f over the grid; its flat floor w is N / ln 2 times
    the median of |W(q)|^2 over the half-grid modes with |q| above half the smallest Nyquist
    wavenumber (a large masked region's window has fallen off there; scattered voxels'
    has not).
    """
    m = np.asarray(mask, dtype=np.float64)
    fraction = float(m.mean())
    if fraction >= 1.0 or fraction <= 0.0:
        return 0.0
    window = np.abs(np.fft.rfftn(m)) ** 2 / grid.n_cells ** 2
    high = grid.k_magnitude_half() > 0.5 * min(grid.k_nyquist)
    if not high.any():
        return 0.0
    # a flat floor's |W(q)|^2 are exponentially distributed (|a complex Gaussian|^2):
    # the median is ln 2 times the mean
    floor = float(np.median(window[high])) / math.log(2.0) * grid.n_cells
    return min(max(floor / fraction, 0.0), 0.99)


#: the mask's shell-mixing matrix is computed for grids up to this many cells (its cost is
#: one pair of FFTs per shell); larger grids use the flat-floor model
MIXING_MAX_CELLS = 128 ** 3


def mask_mixing(mask: np.ndarray, grid: Grid, edges: np.ndarray) -> np.ndarray:
    """M - 1 for the mask (module docstring): column j is the expected shell power / f of
    the zero-filled masked field whose P is 1 on shell j's modes and 0 elsewhere, minus the
    unmasked answer (1 on shell j). Exact for a P constant within each shell (periodic grid):
    E x_q = FFT(IFFT(P) * IFFT(|DFT(m)|^2))_q / (N f)."""
    m = np.asarray(mask, dtype=bool)
    index = grid.shell_index_half(edges)
    # the matrix depends on the mask and on which half-grid mode falls in which shell only
    # (not on the box's scale): New from data asks for it in voxel units and in the box's
    key = (hashlib.sha1(np.packbits(m).tobytes()).hexdigest(), m.shape,
           hashlib.sha1(np.ascontiguousarray(index).tobytes()).hexdigest())
    if key not in _MIXING_CACHE:
        if len(_MIXING_CACHE) >= 4:
            _MIXING_CACHE.pop(next(iter(_MIXING_CACHE)))
        _MIXING_CACHE[key] = _mixing(m, grid, index, edges.size - 1)
    return _MIXING_CACHE[key].copy()


_MIXING_CACHE: dict = {}


def _mixing(mask: np.ndarray, grid: Grid, index: np.ndarray, n_bins: int) -> np.ndarray:
    m = mask.astype(np.float64)
    shape = grid.shape
    n_cells = m.size
    fraction = float(m.mean())
    autocorrelation = np.fft.irfftn(np.abs(np.fft.rfftn(m)) ** 2, s=shape, axes=(0, 1, 2))
    weight = grid.multiplicity_half()
    flat_index = index.ravel()
    inside = flat_index >= 0
    counts = np.bincount(flat_index[inside], weights=weight.ravel()[inside], minlength=n_bins)
    out = np.zeros((n_bins, n_bins))
    for j in range(n_bins):
        if counts[j] == 0:
            continue
        xi = np.fft.irfftn((index == j).astype(np.float64), s=shape, axes=(0, 1, 2))
        power = np.fft.rfftn(xi * autocorrelation).real / (n_cells * fraction)
        sums = np.bincount(flat_index[inside], weights=(power * weight).ravel()[inside],
                           minlength=n_bins)
        out[:, j] = np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
        out[j, j] -= 1.0
    return out
