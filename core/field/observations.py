"""Observed data on the grid, validated: data, mask, noise, and the likelihood family.

numpy only (the GUI process imports it). Conventions: arrays have the grid shape
(n0, n1, n2); ``mask`` is True where a voxel is observed; masked voxels carry no
information whatever their value. NaN or infinite data values become masked, with
a warning that says how many.

Likelihood families (``kind``):

    gaussian           d_i ~ Normal(B s + mean, sigma_i^2)    sigma a scalar or a per-voxel map
    poisson_lognormal  n_i ~ Poisson(nbar exp(B s + mean))     n_i non-negative integer counts

    python             a model file's log_likelihood(field, params, data)
                       (``core.engine.model_file``); the noise map, when given, is its data["noise"]

with B an optional Gaussian smoothing exp(-(k R)^2 / 2) applied in Fourier space.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

__all__ = ["Observations", "LIKELIHOOD_KINDS", "with_nonfinite_masked", "slab_axis", "slab_decouples",
           "exact_slab", "slab_rows", "settings_take_exact_slab", "MAX_SLAB_MISSING_PLANES", "SLAB_SLOTS"]

LIKELIHOOD_KINDS = ("gaussian", "poisson_lognormal", "python")


def with_nonfinite_masked(data, mask):
    """``mask`` (bool, True = observed; None: all observed) less the voxels whose ``data`` are
    NaN or infinite, which a run masks whatever the mask says (``Observations``); None when
    ``mask`` is None and every voxel is finite. For what a window or a check shows before a run."""
    arr = np.asarray(data)
    finite = np.isfinite(arr) if arr.dtype.kind in "fc" else None
    if finite is None or finite.all():
        return mask
    return finite if mask is None else np.asarray(mask, bool) & finite


def slab_axis(mask: np.ndarray) -> int | None:
    """The axis a mask of whole missing planes varies along (a slab mask: it depends on that axis
    only); None if nothing is masked. ValueError for any other mask (then neither the exact
    marginal likelihood, ``core.reference.hyper_posterior``, nor the exact conditional,
    ``core.engine.slab_conditional``, has a cheap form)."""
    mask = np.asarray(mask, bool)
    if mask.all():
        return None
    for axis in range(3):
        others = tuple(a for a in range(3) if a != axis)
        planes = mask.all(axis=others, keepdims=True)
        if np.array_equal(np.broadcast_to(planes, mask.shape), mask):
            return axis
    raise ValueError("the exact hyperparameter posterior needs no mask or whole planes missing along "
                     "one axis (a slab); this mask is neither")


#: The slab's exact conditional factors an r x r matrix per row of columns, r the missing planes
#: (by halves: the density with its gradient and field compiled in 5.9 s at r = 16 and 10-11 s
#: at 26-32; its cost per gradient grows as r^3 per row: at 64^3, 1.8x the diagonal centre's at
#: r = 16 and 5.1x at 32, bench/slab_cost.py). With more, "conditional" keeps its diagonal centre.
MAX_SLAB_MISSING_PLANES = 64

#: Columns per row of the slab's (row, slot) layout: the columns of one transverse |q| (up to ~50
#: at 128^3, most 4 or 8) fill rows of at most this many, each row with its own factors
#: (padding every |q| to the largest had 2.7x the columns at 64^3, 5x at 128^3).
SLAB_SLOTS = 8


def slab_rows(q: np.ndarray, slots: int = SLAB_SLOTS) -> list[np.ndarray]:
    """The slab layout's rows: the indices of the columns whose transverse |q| (``q``, one a
    column) are equal (to 1e-12 relative), in order of |q|, cut into rows of at most ``slots``."""
    q = np.asarray(q, float).reshape(-1)
    key = np.round(q / max(float(q.max()), 1e-300), 12)
    _, shell = np.unique(key, return_inverse=True)
    shell = shell.reshape(-1)
    sizes = np.bincount(shell)
    order = np.argsort(shell, kind="stable")
    return [chunk for cols in np.split(order, np.cumsum(sizes)[:-1])
            for chunk in np.array_split(cols, -(-len(cols) // slots))]


def exact_slab(mask, likelihood_kind: str, one_noise_level: bool) -> tuple[int, int] | None:
    """(axis, missing planes) where the "conditional" preconditioner is exact for data with this
    ``mask`` (True = observed; NaN voxels already masked): a Gaussian likelihood with one noise
    level and whole planes missing along one axis, at most ``MAX_SLAB_MISSING_PLANES`` of them
    (``core.engine.slab_conditional``); None elsewhere. With P(k) sampled the field's state is
    then independent of the spectrum, as without a mask: nothing couples the modes for the sampler."""
    if likelihood_kind != "gaussian" or not one_noise_level or mask is None:
        return None
    mask = np.asarray(mask, bool)
    if mask.all():
        return None
    try:
        axis = slab_axis(mask)
    except ValueError:
        return None
    missing = int((~np.moveaxis(mask, axis, 0).all(axis=(1, 2))).sum())
    return (axis, missing) if missing <= MAX_SLAB_MISSING_PLANES else None


def settings_take_exact_slab(preconditioner: str, parameterisation: str, hyper_sampled: bool) -> bool:
    """Whether a run with these settings takes the slab's exact conditional where its data are
    such a slab (``exact_slab``): "conditional" on the whitened latent with P(k) sampled."""
    return preconditioner == "conditional" and parameterisation == "whitened" and bool(hyper_sampled)


def slab_decouples(mask, likelihood_kind: str, one_noise_level: bool) -> bool:
    """Whether ``exact_slab`` finds such a slab."""
    return exact_slab(mask, likelihood_kind, one_noise_level) is not None


@dataclass(frozen=True)
class Observations:
    """Validated observations. Build with :meth:`create`, which checks everything.

    Attributes:
      kind: one of LIKELIHOOD_KINDS.
      data: float64 array of the grid shape; masked voxels are set to 0.
      mask: bool array, True = observed.
      noise: per-voxel noise sd (gaussian; 1 where masked; python: the noise map when given),
        or None (poisson).
      mean_count: nbar for poisson_lognormal, else None.
      smoothing_scale: R of the Gaussian beam exp(-(k R)^2/2), or None.
      field_mean: the fixed mean of the field added before the likelihood.
    """

    kind: str
    data: np.ndarray
    mask: np.ndarray
    noise: np.ndarray | None
    mean_count: float | None
    smoothing_scale: float | None
    field_mean: float

    @property
    def n_observed(self) -> int:
        return int(self.mask.sum())

    @property
    def uniform_noise(self) -> float | None:
        """The scalar sigma when the noise is the same in every observed voxel."""
        if self.noise is None:
            return None
        observed = self.noise[self.mask]
        return float(observed[0]) if np.all(observed == observed[0]) else None

    @classmethod
    def create(cls, data, *, kind="gaussian", mask=None, noise_sigma=None, noise_map=None,
               mean_count=None, smoothing_scale=None, field_mean=0.0, name="data"):
        if kind not in LIKELIHOOD_KINDS:
            raise ValueError(f"likelihood kind {kind!r} is not known (known: {', '.join(LIKELIHOOD_KINDS)})")
        arr = np.asarray(data)
        if arr.dtype.kind in "cOSUV" or arr.dtype.kind == "b":
            raise ValueError(f"{name}: dtype {arr.dtype} cannot be used as data; give a real-valued array")
        if arr.ndim != 3:
            raise ValueError(f"{name}: needs a 3-D array, got shape {arr.shape}")
        if 0 in arr.shape:
            raise ValueError(f"{name}: shape {arr.shape} has an empty axis")
        arr = arr.astype(np.float64)
        observed = np.ones(arr.shape, bool)
        if mask is not None:
            m = np.asarray(mask)
            if m.shape != arr.shape:
                raise ValueError(f"mask: shape {m.shape} does not match {name} shape {arr.shape}")
            if m.dtype != bool:
                if not np.all(np.isin(m, (0, 1))):
                    raise ValueError("mask: values must be boolean (True = observed) or 0/1")
                m = m.astype(bool)
            observed &= m
        bad = ~np.isfinite(arr) & observed
        n_bad = int(bad.sum())
        if n_bad:
            warnings.warn(f"{name}: {n_bad} voxel(s) are NaN or infinite; they are masked "
                          "(treated as unobserved)", stacklevel=2)
            observed &= ~bad
        if not observed.any():
            raise ValueError(f"{name}: all voxels are masked; the data carry no information")
        arr = np.where(observed, arr, 0.0)

        noise = None
        if kind == "gaussian":
            if (noise_sigma is None) == (noise_map is None):
                raise ValueError("gaussian likelihood: give exactly one of noise_sigma or noise_map")
            if noise_map is not None:
                nm = np.asarray(noise_map, dtype=np.float64)
                if nm.shape != arr.shape:
                    raise ValueError(f"noise map: shape {nm.shape} does not match {name} shape {arr.shape}")
                bad_noise = observed & ~(np.isfinite(nm) & (nm > 0))
                if bad_noise.any():
                    idx = tuple(int(i) for i in np.argwhere(bad_noise)[0])
                    raise ValueError(f"noise map: {int(bad_noise.sum())} observed voxel(s) have a noise sd "
                                     f"that is not positive and finite (first at {idx}: {float(nm[idx])!r})")
                noise = np.where(observed, nm, 1.0)
            else:
                if not _positive_finite(noise_sigma):
                    raise ValueError(f"noise_sigma = {noise_sigma!r}: must be a positive finite number")
                noise = np.full(arr.shape, float(noise_sigma))
            if mean_count is not None:
                raise ValueError("mean_count applies to the poisson_lognormal likelihood only")
        elif kind == "python":
            if noise_sigma is not None or mean_count is not None:
                raise ValueError("python likelihood: noise_sigma / mean_count do not apply (the model "
                                 "file writes its own noise; a noise map is its data['noise'])")
            if noise_map is not None:
                nm = np.asarray(noise_map, dtype=np.float64)
                if nm.shape != arr.shape:
                    raise ValueError(f"noise map: shape {nm.shape} does not match {name} shape {arr.shape}")
                noise = np.where(observed, nm, 1.0)
        else:
            if noise_sigma is not None or noise_map is not None:
                raise ValueError("poisson_lognormal likelihood: noise_sigma / noise_map do not apply")
            if not _positive_finite(mean_count):
                raise ValueError(f"mean_count = {mean_count!r}: must be a positive finite number")
            counts = arr[observed]
            if np.any(counts < 0) or np.any(counts != np.round(counts)):
                raise ValueError(f"{name}: poisson_lognormal needs non-negative integer counts")
            mean_count = float(mean_count)
        if smoothing_scale is not None and not (_positive_finite(smoothing_scale)):
            raise ValueError(f"smoothing_scale = {smoothing_scale!r}: must be a positive finite number or None")
        if not (isinstance(field_mean, (int, float)) and math.isfinite(field_mean)):
            raise ValueError(f"field_mean = {field_mean!r}: must be a finite number")
        return cls(kind, arr, observed, noise, mean_count,
                   None if smoothing_scale is None else float(smoothing_scale), float(field_mean))


def _positive_finite(value) -> bool:
    return (isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
            and math.isfinite(float(value)) and float(value) > 0)
