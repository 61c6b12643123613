"""Synthetic Gaussian random fields and mock data sets (numpy only).

Conventions: those of ``core.field.grid`` and ``core.field.power_spectrum``. A field drawn here
has DFT modes with <|DFT(delta)_k|^2> = P(|k|) N^2 / V for k != 0, and DFT(delta)_0 = 0
(zero mean), so its expected real-space variance is (1 / V) sum_{k != 0} P(|k|) over
the full grid.

Mock data model
---------------
    data = S truth + noise,     noise ~ N(0, sigma^2) independently per voxel,

S the optional Gaussian smoothing (beam) exp(-(k R)^2 / 2) applied in Fourier space
(R = ``smoothing_scale`` in the length unit; none when R is 0 or None). Voxels with
``mask`` False are unobserved: their ``data`` value is set to 0.0 (so a program that
ignores the mask sees no signal there) and carries no information. Mask kinds
(``MASK_KINDS``):

    "none"    every voxel observed
    "slab"    round(f n0) consecutive planes perpendicular to axis 0, centred in the
              box, unobserved (f = ``mask_fraction``)
    "sphere"  voxels whose centres lie within radius r of the box centre unobserved,
              r = (3 f V / (4 pi))^(1/3) (a volume fraction f; r must not exceed half
              the smallest box side)

plus, for any kind, random dropouts: each remaining voxel independently unobserved
with probability ``dropout_fraction``. An explicit boolean array (True = observed)
may be given instead of a kind.

Random streams. ``seed`` feeds a ``numpy.random.SeedSequence`` spawned into three
independent streams (truth, noise, mask dropouts), so changing the noise level or
the mask leaves the truth unchanged for the same seed.

File format (``save_dataset`` / ``load_dataset``): an ``.npz`` that loads with
``allow_pickle=False`` (no object arrays anywhere):

    data             float (n0, n1, n2)   observed values; 0.0 where mask is False
    mask             bool (n0, n1, n2)    True = observed
    noise            float, 0-d or (n0, n1, n2): noise sd sigma (a scalar or a map)
    truth            float (n0, n1, n2)   optional: the noiseless, unsmoothed field
    box_size         float (3,)           L0, L1, L2 in ``unit``
    unit             0-d str              length unit name
    smoothing_scale  0-d float            R of the beam; 0.0 = no smoothing
    prior_kind       0-d str              key of ``core.field.power_spectrum.SPECTRA``, or ""
    prior_params     0-d str              JSON of the spectrum's parameters, "{}" if none
    metadata         0-d str              JSON: generator, seed, mask settings, ...
    format_version   0-d int              1
"""

from __future__ import annotations

import json
import math
import numbers
import os
import uuid
import zipfile
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from core.field.grid import Grid
from core.field.power_spectrum import PowerSpectrum, spectrum_from_config

__all__ = [
    "MASK_KINDS",
    "Dataset",
    "gaussian_random_field",
    "gaussian_smooth",
    "make_mask",
    "make_dataset",
    "save_dataset",
    "load_dataset",
]

MASK_KINDS = ("none", "slab", "sphere")
FORMAT_VERSION = 1


def _as_generator(rng) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or (isinstance(rng, numbers.Integral) and not isinstance(rng, bool)):
        return np.random.default_rng(rng)
    if isinstance(rng, np.random.SeedSequence):
        return np.random.default_rng(rng)
    raise ValueError(f"rng {rng!r}: must be a numpy Generator, an integer seed or None")


def _amplitude_half(grid: Grid, spectrum: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """sqrt(P(|k|) N / V) on the half grid, 0 at k = 0."""
    p = np.asarray(spectrum(grid.k_magnitude_half()), dtype=np.float64)
    if p.shape != grid.half_shape:
        p = np.broadcast_to(p, grid.half_shape)
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ValueError("power spectrum returned negative, NaN or infinite values on the "
                         f"grid's k (|k| from 0 to {grid.k_max:g})")
    amplitude = np.sqrt(p * (grid.n_cells / grid.volume))
    amplitude[0, 0, 0] = 0.0
    return amplitude


def gaussian_random_field(grid: Grid, spectrum: Callable[[np.ndarray], np.ndarray],
                          rng=None) -> np.ndarray:
    """A zero-mean Gaussian random field with power spectrum P = spectrum(|k|).

    White noise e (unit variance per cell) -> E = rfftn(e), for which
    <|E_k|^2> = N -> X = E sqrt(P N / V), X_0 = 0 -> delta = irfftn(X). Hence
    <|X_k|^2> = P N^2 / V, the convention of ``core.field.grid``. Starting from real-space
    noise makes the half spectrum Hermitian on its self-conjugate planes for free.
    ``rng``: a numpy Generator, an integer seed or None. Returns float64, ``grid.shape``.
    """
    rng = _as_generator(rng)
    amplitude = _amplitude_half(grid, spectrum)
    white = rng.standard_normal(grid.shape)
    spectrum_half = np.fft.rfftn(white) * amplitude
    return np.fft.irfftn(spectrum_half, s=grid.shape, axes=(0, 1, 2))


def gaussian_smooth(field, grid: Grid, scale: float) -> np.ndarray:
    """Multiply the field's Fourier modes by exp(-(k R)^2 / 2), R = ``scale``.

    Works on (..., n0, n1, n2); R = 0 returns a copy. Periodic (the box wraps).
    """
    if not isinstance(scale, numbers.Real) or isinstance(scale, bool) or not (
            math.isfinite(scale) and scale >= 0):
        raise ValueError(f"smoothing scale {scale!r}: must be a finite number >= 0")
    field = np.asarray(field, dtype=np.float64)
    if field.shape[-3:] != grid.shape:
        raise ValueError(f"field shape {field.shape} does not end with the grid shape "
                         f"{grid.shape}")
    if scale == 0:
        return field.copy()
    k = grid.k_magnitude_half()
    kernel = np.exp(-0.5 * (k * scale) ** 2)
    spectrum = np.fft.rfftn(field, axes=(-3, -2, -1)) * kernel
    return np.fft.irfftn(spectrum, s=grid.shape, axes=(-3, -2, -1))


def _check_fraction(name: str, value) -> float:
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not (
            0.0 <= value < 1.0):
        raise ValueError(f"{name} {value!r}: must be a number in [0, 1)")
    return float(value)


def make_mask(grid: Grid, kind: str = "none", fraction: float = 0.2,
              dropout_fraction: float = 0.0, rng=None) -> np.ndarray:
    """Boolean observation mask (True = observed) of ``grid.shape``.

    ``kind`` in ``MASK_KINDS`` with region ``fraction`` (see the module docstring),
    then random dropouts with probability ``dropout_fraction`` per voxel (drawn from
    ``rng``). Raises ``ValueError`` if no voxel is left observed.
    """
    if kind not in MASK_KINDS:
        raise ValueError(f"mask kind {kind!r}: unknown (known: {', '.join(MASK_KINDS)})")
    dropout = _check_fraction("mask dropout_fraction", dropout_fraction)
    mask = np.ones(grid.shape, dtype=bool)
    if kind != "none":
        fraction = _check_fraction(f"{kind} mask fraction", fraction)
    if kind == "slab":
        n0 = grid.shape[0]
        width = int(round(fraction * n0))
        start = (n0 - width) // 2
        mask[start:start + width] = False
    elif kind == "sphere" and fraction > 0:
        radius = (3.0 * fraction * grid.volume / (4.0 * math.pi)) ** (1.0 / 3.0)
        if radius > 0.5 * min(grid.box_size):
            largest = (4.0 * math.pi / 3.0) * (0.5 * min(grid.box_size)) ** 3 / grid.volume
            raise ValueError(f"sphere mask fraction {fraction!r}: the sphere (radius "
                             f"{radius:g}) would not fit in the box; use at most {largest:.3f}")
        r2 = 0.0
        for axis in range(3):
            n, d, length = grid.shape[axis], grid.cell_size[axis], grid.box_size[axis]
            x = (np.arange(n) + 0.5) * d - 0.5 * length
            shape = [1, 1, 1]
            shape[axis] = n
            r2 = r2 + (x * x).reshape(shape)
        mask &= ~(r2 <= radius * radius)
    if dropout > 0:
        mask &= _as_generator(rng).random(grid.shape) >= dropout
    if not mask.any():
        raise ValueError(f"mask {kind!r} (fraction {fraction!r}, dropout {dropout!r}) leaves "
                         "no voxel observed")
    return mask


@dataclass
class Dataset:
    """A (mock or real) data set on a grid; see the module docstring for the model.

    data, mask (True = observed), noise (sd: 0-d or grid-shaped), grid; optionally the
    truth, the prior spectrum it was drawn from, the beam ``smoothing_scale`` (0 = none)
    and free-form ``metadata`` (JSON-able). Arrays are validated on construction.
    """

    data: np.ndarray
    mask: np.ndarray
    noise: np.ndarray
    grid: Grid
    truth: np.ndarray | None = None
    spectrum: PowerSpectrum | None = None
    smoothing_scale: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        shape = self.grid.shape
        self.data = np.asarray(self.data)
        if self.data.dtype.kind != "f" or self.data.shape != shape:
            raise ValueError(f"data: need a float array of the grid shape {shape}, got "
                             f"{self.data.dtype} {self.data.shape}")
        mask = np.asarray(self.mask)
        if mask.shape != shape:
            raise ValueError(f"mask: shape {mask.shape} differs from the grid shape {shape}")
        if mask.dtype != bool:
            if mask.dtype.kind in "iu" and np.all((mask == 0) | (mask == 1)):
                mask = mask.astype(bool)
            else:
                raise ValueError(f"mask: dtype {mask.dtype} is not boolean (True = observed)")
        if not mask.any():
            raise ValueError("mask: no voxel is observed")
        self.mask = mask
        noise = np.asarray(self.noise, dtype=np.float64)
        if noise.shape not in ((), shape):
            raise ValueError(f"noise: need one sd or a map of the grid shape {shape}, got "
                             f"shape {noise.shape}")
        observed_noise = noise if noise.ndim == 0 else noise[mask]
        if not np.all(np.isfinite(observed_noise)) or np.any(observed_noise <= 0):
            raise ValueError("noise: the sd must be positive and finite at every observed "
                             "voxel")
        self.noise = noise
        if not np.all(np.isfinite(self.data[mask])):
            raise ValueError("data: NaN or inf at an observed voxel")
        if self.truth is not None:
            self.truth = np.asarray(self.truth)
            if self.truth.dtype.kind != "f" or self.truth.shape != shape:
                raise ValueError(f"truth: need a float array of the grid shape {shape}, got "
                                 f"{self.truth.dtype} {self.truth.shape}")
        if self.spectrum is not None and not isinstance(self.spectrum, PowerSpectrum):
            raise ValueError(f"spectrum: {self.spectrum!r} is not a PowerSpectrum")
        scale = self.smoothing_scale
        if not isinstance(scale, numbers.Real) or isinstance(scale, bool) or not (
                math.isfinite(scale) and scale >= 0):
            raise ValueError(f"smoothing_scale {scale!r}: must be a finite number >= 0")
        self.smoothing_scale = float(scale)

    def noise_map(self) -> np.ndarray:
        """The noise sd broadcast to the grid shape (a new array)."""
        return np.broadcast_to(self.noise, self.grid.shape).copy()


def make_dataset(grid: Grid, spectrum: PowerSpectrum, noise_sigma, *, mask="none",
                 mask_fraction: float = 0.2, dropout_fraction: float = 0.0, seed=None,
                 smoothing_scale: float | None = None) -> Dataset:
    """Draw a truth from ``spectrum``, smooth it, add noise and mask it.

    ``noise_sigma``: one sd or a positive map of ``grid.shape``. ``mask``: a kind in
    ``MASK_KINDS`` (with ``mask_fraction`` and ``dropout_fraction``) or a boolean array
    (True = observed; dropouts still applied if ``dropout_fraction`` > 0). ``seed``: an
    integer or None (fresh entropy, recorded in ``metadata["seed"]``).
    """
    if not isinstance(spectrum, PowerSpectrum):
        raise ValueError(f"spectrum {spectrum!r}: must be a core.field.power_spectrum spectrum "
                         "(it is stored with the data set)")
    noise = np.asarray(noise_sigma, dtype=np.float64)
    if noise.shape not in ((), grid.shape):
        raise ValueError(f"noise_sigma: need one sd or a map of shape {grid.shape}, got "
                         f"shape {noise.shape}")
    if not np.all(np.isfinite(noise)) or np.any(noise <= 0):
        raise ValueError(f"noise_sigma: must be positive and finite (got min "
                         f"{float(np.min(noise))!r})")
    scale = 0.0 if smoothing_scale is None else smoothing_scale
    if seed is not None and (not isinstance(seed, numbers.Integral) or isinstance(seed, bool)
                             or seed < 0):
        raise ValueError(f"seed {seed!r}: must be a non-negative integer or None")
    sequence = np.random.SeedSequence(seed)
    truth_seq, noise_seq, mask_seq = sequence.spawn(3)

    truth = gaussian_random_field(grid, spectrum, np.random.default_rng(truth_seq))
    signal = gaussian_smooth(truth, grid, scale)
    data = signal + noise * np.random.default_rng(noise_seq).standard_normal(grid.shape)

    if isinstance(mask, str):
        observed = make_mask(grid, mask, mask_fraction, dropout_fraction,
                             np.random.default_rng(mask_seq))
        mask_info: dict[str, Any] = {"mask_kind": mask, "mask_fraction": float(mask_fraction)}
    else:
        observed = np.asarray(mask)
        if observed.dtype != bool or observed.shape != grid.shape:
            raise ValueError(f"mask: need a mask kind ({', '.join(MASK_KINDS)}) or a boolean "
                             f"array of shape {grid.shape}")
        dropout = _check_fraction("mask dropout_fraction", dropout_fraction)
        if dropout > 0:
            observed = observed & (np.random.default_rng(mask_seq).random(grid.shape)
                                   >= dropout)
        mask_info = {"mask_kind": "array"}
    data[~observed] = 0.0

    metadata = {"generator": "fieldscope.core.field.synthetic.make_dataset",
                "seed": str(sequence.entropy), "dropout_fraction": float(dropout_fraction),
                **mask_info}
    return Dataset(data=data, mask=observed, noise=noise, grid=grid, truth=truth,
                   spectrum=spectrum, smoothing_scale=scale, metadata=metadata)


def save_dataset(path, dataset: Dataset) -> None:
    """Write ``dataset`` to ``path`` (.npz, format in the module docstring).

    The file is written next to its destination and moved into place, so a failed
    write never leaves a half-written file under ``path``. The name is used as given
    (no ".npz" is appended).
    """
    path = os.fspath(path)
    grid = dataset.grid
    arrays: dict[str, np.ndarray] = {
        "data": dataset.data,
        "mask": dataset.mask,
        "noise": np.asarray(dataset.noise, dtype=np.float64),
        "box_size": np.asarray(grid.box_size, dtype=np.float64),
        "unit": np.array(grid.unit, dtype=str),
        "smoothing_scale": np.array(dataset.smoothing_scale, dtype=np.float64),
        "prior_kind": np.array("" if dataset.spectrum is None else dataset.spectrum.kind,
                               dtype=str),
        "prior_params": np.array(json.dumps({} if dataset.spectrum is None
                                            else dataset.spectrum.to_config()), dtype=str),
        "metadata": np.array(json.dumps(dataset.metadata), dtype=str),
        "format_version": np.array(FORMAT_VERSION, dtype=np.int64),
    }
    if dataset.truth is not None:
        arrays["truth"] = dataset.truth
    directory, name = os.path.split(os.path.abspath(path))
    # A plain open (not mkstemp) so the file gets the usual umask permissions.
    tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.part")
    try:
        with open(tmp, "xb") as stream:
            np.savez(stream, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def dataset_bytes(dataset: Dataset) -> bytes:
    """The bytes ``save_dataset`` writes for ``dataset`` (the same for the same dataset)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "dataset.npz")
        save_dataset(path, dataset)
        with open(path, "rb") as fh:
            return fh.read()


_REQUIRED = ("data", "mask", "noise", "box_size")


def _string(archive, key: str, path: str, default: str = "") -> str:
    if key not in archive.files:
        return default
    value = archive[key]
    if value.dtype.kind != "U" or value.ndim != 0:
        raise ValueError(f"data set {path!r}: {key!r} must be a 0-d string array, got "
                         f"{value.dtype} {value.shape}")
    return str(value)


def load_dataset(path) -> Dataset:
    """Read a file written by ``save_dataset`` (with ``allow_pickle=False``) and validate it.

    Errors are ``ValueError`` naming the file and the offending array (a missing file
    raises ``FileNotFoundError``).
    """
    path = os.fspath(path)
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"data set {path!r}: not a readable .npz file ({exc})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"data set {path!r}: a single .npy array, not an .npz archive")
    with archive:
        missing = [key for key in _REQUIRED if key not in archive.files]
        if missing:
            raise ValueError(f"data set {path!r}: missing array {missing[0]!r} "
                             f"(has {', '.join(archive.files) or 'none'})")
        try:
            arrays = {key: archive[key] for key in archive.files
                      if key in _REQUIRED + ("truth", "smoothing_scale", "format_version")}
        except ValueError as exc:     # object arrays refused by allow_pickle=False
            raise ValueError(f"data set {path!r}: {exc}") from None
        unit = _string(archive, "unit", path)
        prior_kind = _string(archive, "prior_kind", path)
        prior_params = _string(archive, "prior_params", path, "{}")
        metadata_text = _string(archive, "metadata", path, "{}")

    version = arrays.get("format_version")
    if version is not None and (version.ndim != 0 or int(version) > FORMAT_VERSION):
        raise ValueError(f"data set {path!r}: format_version {version!r} is newer than this "
                         f"reader ({FORMAT_VERSION})")
    data = arrays["data"]
    if data.ndim != 3:
        raise ValueError(f"data set {path!r}: 'data' must be 3-D, got shape {data.shape}")
    box_size = arrays["box_size"]
    if box_size.dtype.kind not in "iuf" or box_size.ndim > 1:
        raise ValueError(f"data set {path!r}: 'box_size' must be one number or three, got "
                         f"{box_size!r}")
    try:
        grid = Grid(data.shape, box_size.tolist(), unit=unit)
        smoothing = arrays.get("smoothing_scale", np.array(0.0))
        if smoothing.ndim != 0 or smoothing.dtype.kind not in "iuf":
            raise ValueError(f"smoothing_scale: must be a 0-d number, got {smoothing!r}")
        spectrum = None
        if prior_kind:
            try:
                params = json.loads(prior_params)
            except json.JSONDecodeError as exc:
                raise ValueError(f"prior_params: not valid JSON ({exc})") from None
            spectrum = spectrum_from_config(prior_kind, params)
        try:
            metadata = json.loads(metadata_text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"metadata: not valid JSON ({exc})") from None
        return Dataset(data=data, mask=arrays["mask"], noise=arrays["noise"], grid=grid,
                       truth=arrays.get("truth"), spectrum=spectrum,
                       smoothing_scale=float(smoothing), metadata=metadata)
    except ValueError as exc:
        raise ValueError(f"data set {path!r}: {exc}") from None
