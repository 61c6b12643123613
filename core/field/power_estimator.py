"""Measure the power spectrum of gridded fields in spherical shells (numpy only).

Conventions: those of ``core.field.grid`` (angular k, rfftn half layout, multiplicity w)
and ``core.field.power_spectrum`` (<|DFT(delta)_k|^2> = P(k) N^2 / V).

Estimator
---------
For a field delta on a grid with N cells and volume V, X = DFT(delta) (numpy's
unnormalised ``rfftn``), the per-mode power is

    P_hat(k) = (V / N^2) |X_k|^2

and the shell estimate is its average over the c full-grid modes in the shell:

    P_hat_shell = (1 / c) sum_{half-grid modes in shell} w_k (V / N^2) |X_k|^2,
    c = sum_{half-grid modes in shell} w_k

(w = 1 on the self-conjugate planes, 2 elsewhere; k = 0 is never in a shell, so the
field mean does not matter). The shell's k is the mode average of |k| with the same
weights, k_shell = (1 / c) sum w_k |k|, which is where P_hat_shell is best compared
with a smooth P(k).

Expected value and error (Gaussian field)
-----------------------------------------
E[P_hat_shell] = (1 / c) sum_{full modes in shell} P(|k|) (the mode average, not
P(k_shell); they differ where P curves within the shell). Full-grid modes come in
conjugate pairs (k, -k) carrying one complex Gaussian, |X_k|^2 ~ P' Exp(1) with
variance P'^2 where P' = P N^2 / V, plus self-conjugate modes (each index 0 or n_i / 2)
carrying one real Gaussian, |X_k|^2 ~ P' chi^2_1 with variance 2 P'^2. With p pairs
and r real modes (c = 2 p + r):

    Var[P_hat_shell] = (1 / c^2) (p (2 P)^2 + r 2 P^2) = (2 / c^2) (2 p + r) P^2
                     = 2 P^2 / c          (P constant in the shell)

so the relative standard error is exactly sqrt(2 / c), self-conjugate modes included.
For P varying in the shell, Var = (2 / c^2) sum_{full modes} P(|k|)^2 (returned by
``expected_shell_power``). P_hat_shell / P is a scaled chi-square with about c
degrees of freedom, skewed for small c: treat the error as Gaussian only for c >~ 50.

Cross power: P_ab = (1 / c) sum w (V / N^2) Re(X_a conj X_b), with the correlation
coefficient r = P_ab / sqrt(P_aa P_bb).

Empty shells (c = 0) give NaN for k and power and inf for the relative error.

Under a mask
------------
The data's shell power is that of the zero-filled field m (d - dbar) divided by f = mean(m)
(``masked_data_field``). Its mean for a Gaussian field of per-mode power P (``power`` on the
half grid) is exact on the periodic grid (``masked_mean_power``):

    E |DFT(m s)(q)|^2 = (1 / N^2) sum_k E |DFT(s)(k)|^2 |DFT(m)(q - k)|^2,

one FFT pair (the mask's autocorrelation times the correlation function of P). Its spread is
not 2 P^2 / (f c) per shell alone: the window couples modes, so shells share fluctuations (a
slab's or a hole's hard edges move the high-power low-k modes' fluctuations into every shell
above), and no formula short of sums over pairs of modes gives it. ``mock_shell_powers`` draws
it: Gaussian fields of the given P plus white noise of the given per-voxel sd, masked and
mean-subtracted as the data are, measured with this estimator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from core.field.grid import Grid

__all__ = [
    "masked_data_field",
    "PowerMeasurement",
    "CrossPowerMeasurement",
    "measure_power",
    "cross_power",
    "relative_error",
    "ExpectedShellPower",
    "expected_shell_power",
    "masked_mean_power",
    "mock_shell_powers",
]


@dataclass(frozen=True)
class PowerMeasurement:
    """Shell-averaged power. Arrays have one entry per shell (batch axes first for
    ``power``).

    edges           shell edges, length n_bins + 1 (1 / unit)
    k               mode-averaged |k| of each shell (1 / unit)
    power           P estimate, shape (..., n_bins) (unit^3)
    counts          full-grid modes in each shell (int64)
    relative_error  sqrt(2 / counts): expected sd of power / P for a Gaussian field
    """

    edges: np.ndarray
    k: np.ndarray
    power: np.ndarray
    counts: np.ndarray
    relative_error: np.ndarray

    @property
    def error(self) -> np.ndarray:
        """power * relative_error: the sd estimated from the measurement itself."""
        return self.power * self.relative_error


@dataclass(frozen=True)
class CrossPowerMeasurement:
    """Shell-averaged cross power of two fields, with their auto powers.

    ``power`` is P_ab, ``power_a`` and ``power_b`` the auto powers (all (..., n_bins));
    ``correlation`` is r = P_ab / sqrt(P_aa P_bb), in [-1, 1].
    """

    edges: np.ndarray
    k: np.ndarray
    power: np.ndarray
    power_a: np.ndarray
    power_b: np.ndarray
    counts: np.ndarray

    @property
    def correlation(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.power / np.sqrt(self.power_a * self.power_b)


@dataclass(frozen=True)
class ExpectedShellPower:
    """The exact mean and sd of ``measure_power`` for a Gaussian field with P(k).

    power = (1 / c) sum_{full modes} P(|k|);  sd = sqrt(2 sum_{full modes} P^2) / c.
    """

    edges: np.ndarray
    k: np.ndarray
    power: np.ndarray
    sd: np.ndarray
    counts: np.ndarray


class _Shells:
    """Shell bookkeeping shared by the estimators: flat index, weights, counts, k."""

    def __init__(self, grid: Grid, edges):
        self.edges = np.asarray(grid.shell_edges() if edges is None else edges,
                                dtype=np.float64)
        index = grid.shell_index_half(self.edges).ravel()
        self.n_bins = self.edges.size - 1
        self.in_shell = index >= 0
        self.index = index[self.in_shell]
        self.weight = grid.multiplicity_half().ravel()[self.in_shell]
        weighted_counts = np.bincount(self.index, weights=self.weight, minlength=self.n_bins)
        self.counts = np.rint(weighted_counts).astype(np.int64)
        k_sum = np.bincount(self.index, weights=self.weight
                            * grid.k_magnitude_half().ravel()[self.in_shell],
                            minlength=self.n_bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            self.k = np.where(self.counts > 0, k_sum / np.maximum(self.counts, 1), np.nan)

    def average(self, per_mode: np.ndarray) -> np.ndarray:
        """Weighted shell average of a (B, H) per-mode array -> (B, n_bins)."""
        batch = per_mode.shape[0]
        values = per_mode[:, self.in_shell] * self.weight
        flat_index = (np.arange(batch)[:, None] * self.n_bins + self.index).ravel()
        sums = np.bincount(flat_index, weights=values.ravel(), minlength=batch * self.n_bins)
        sums = sums.reshape(batch, self.n_bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.counts > 0, sums / np.maximum(self.counts, 1), np.nan)


def _check_field(field, grid: Grid, name: str = "field") -> np.ndarray:
    field = np.asarray(field)
    if field.dtype.kind not in "iuf":
        raise ValueError(f"{name}: dtype {field.dtype} is not a real number type")
    if field.ndim < 3 or field.shape[-3:] != grid.shape:
        raise ValueError(f"{name}: shape {field.shape} does not end with the grid shape "
                         f"{grid.shape}")
    if not np.all(np.isfinite(field)):
        raise ValueError(f"{name}: contains NaN or inf (fill or mask them first)")
    return field


def _half_spectra(field: np.ndarray, grid: Grid) -> np.ndarray:
    """rfftn over the last three axes, flattened to (B, H)."""
    spectrum = np.fft.rfftn(field.astype(np.float64, copy=False), axes=(-3, -2, -1))
    return spectrum.reshape(-1, grid.n_half_modes)


def relative_error(counts) -> np.ndarray:
    """sqrt(2 / c): the relative 1-sigma spread of a shell estimate of a Gaussian field.

    ``counts`` are the shells' full-grid mode counts c (``PowerMeasurement.counts``,
    ``RunState.k_counts``): every mode of the full DFT grid, k and -k separately. A shell
    averages c mode powers carrying c / 2 independent complex amplitudes (a self-conjugate
    mode counts one half), so Var[P_hat_shell] / P^2 = 2 / c (module docstring). Empty
    shells (c = 0) give inf.
    """
    c = np.asarray(counts, np.float64)
    with np.errstate(divide="ignore"):
        return np.sqrt(2.0 / c)


def measure_power(field, grid: Grid, edges=None) -> PowerMeasurement:
    """Shell-averaged power spectrum of ``field`` (shape (..., n0, n1, n2)).

    ``edges`` defaults to ``grid.shell_edges()``. See the module docstring for the
    estimator, its expectation and its error.
    """
    field = _check_field(field, grid)
    shells = _Shells(grid, edges)
    spectra = _half_spectra(field, grid)
    per_mode = (grid.volume / grid.n_cells**2) * (spectra.real**2 + spectra.imag**2)
    power = shells.average(per_mode).reshape(field.shape[:-3] + (shells.n_bins,))
    return PowerMeasurement(edges=shells.edges, k=shells.k, power=power,
                            counts=shells.counts, relative_error=relative_error(shells.counts))


def cross_power(field_a, field_b, grid: Grid, edges=None) -> CrossPowerMeasurement:
    """Shell-averaged cross power P_ab and the auto powers of two fields.

    Both fields have shape (..., n0, n1, n2) (broadcastable batch axes).
    """
    field_a = _check_field(field_a, grid, "field_a")
    field_b = _check_field(field_b, grid, "field_b")
    batch = np.broadcast_shapes(field_a.shape[:-3], field_b.shape[:-3])
    field_a = np.broadcast_to(field_a, batch + grid.shape)
    field_b = np.broadcast_to(field_b, batch + grid.shape)
    shells = _Shells(grid, edges)
    xa, xb = _half_spectra(field_a, grid), _half_spectra(field_b, grid)
    norm = grid.volume / grid.n_cells**2
    out_shape = batch + (shells.n_bins,)
    cross = shells.average(norm * (xa.real * xb.real + xa.imag * xb.imag)).reshape(out_shape)
    auto_a = shells.average(norm * (xa.real**2 + xa.imag**2)).reshape(out_shape)
    auto_b = shells.average(norm * (xb.real**2 + xb.imag**2)).reshape(out_shape)
    return CrossPowerMeasurement(edges=shells.edges, k=shells.k, power=cross,
                                 power_a=auto_a, power_b=auto_b, counts=shells.counts)


def expected_shell_power(spectrum: Callable[[np.ndarray], np.ndarray], grid: Grid,
                         edges=None) -> ExpectedShellPower:
    """Exact mean and sd of ``measure_power`` for a Gaussian field with P = spectrum(k).

    mean = (1 / c) sum_{full modes in shell} P(|k|),
    sd   = sqrt(2 sum_{full modes in shell} P(|k|)^2) / c
    (the sums over the half grid weighted by w). Empty shells give NaN.
    """
    shells = _Shells(grid, edges)
    p = np.asarray(spectrum(grid.k_magnitude_half()), dtype=np.float64).ravel()[None, :]
    mean = shells.average(p)[0]
    mean_sq = shells.average(p * p)[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        sd = np.where(shells.counts > 0,
                      np.sqrt(2.0 * mean_sq / np.maximum(shells.counts, 1)), np.nan)
    return ExpectedShellPower(edges=shells.edges, k=shells.k, power=mean, sd=sd,
                              counts=shells.counts)


def masked_data_field(data, mask=None) -> tuple[np.ndarray, float]:
    """The field whose P(k) the panel shows as the data's, and the observed fraction f.

    Observed voxels (mask true and the value finite) keep data - mean(observed data); the
    others are 0. The data's P(k) is ``measure_power(field).power / f``.
    """
    data = np.asarray(data, np.float64)
    observed = np.isfinite(data)
    if mask is not None:
        observed &= np.asarray(mask, bool)
    fraction = float(observed.mean()) if observed.size else 0.0
    if not observed.any():
        return np.zeros(data.shape), 0.0
    filled = np.where(observed, data - data[observed].mean(), 0.0)
    return filled, fraction


def masked_mean_power(power, mask, grid: Grid, edges=None) -> np.ndarray:
    """The exact mean of ``measure_power(m delta).power / f`` (m the 0/1 ``mask``, f its
    mean) for a Gaussian field delta of per-mode power ``power`` (half grid, ``grid.half_shape``;
    k = 0 ignored) on the periodic grid (module docstring): per shell,
    (1 / c) sum_q w_q FFT(IFFT(P) A)_q / (N f), A = IFFT(|DFT(m)|^2) the mask's
    autocorrelation. The field's mean is not subtracted (that changes the lowest shells by
    terms of order |W(q)|^2, ignored). NaN for an empty shell."""
    m = np.asarray(mask, dtype=np.float64)
    fraction = float(m.mean())
    if fraction <= 0.0:
        raise ValueError("mask: no observed voxel")
    shells = _Shells(grid, edges)
    p = np.array(power, dtype=np.float64).reshape(grid.half_shape)
    p[0, 0, 0] = 0.0
    axes = (0, 1, 2)
    autocorrelation = np.fft.irfftn(np.abs(np.fft.rfftn(m)) ** 2, s=grid.shape, axes=axes)
    xi = np.fft.irfftn(p, s=grid.shape, axes=axes)
    per_mode = np.fft.rfftn(xi * autocorrelation, axes=axes).real / (grid.n_cells * fraction)
    return shells.average(per_mode.reshape(1, -1))[0]


def mock_shell_powers(power, noise_sd, mask, grid: Grid, n: int, rng, edges=None,
                      batch: int = 16) -> np.ndarray:
    """``n`` draws of the shell power the data's P(k) shows, ``measure_power(
    masked_data_field(d, mask)).power / f``, for d = s + e: s a Gaussian field of per-mode
    power ``power`` (half grid; the beam included, if any), e white noise of per-voxel sd
    ``noise_sd`` (a number or a grid-shaped map). ``rng`` a numpy Generator. Returns
    (n, n_bins), NaN for an empty shell. In single precision (a spread, not a mean, is wanted
    from them) unless the power is too large for it; a noise sd that is the same on every
    observed voxel is drawn with the signal (one white field per draw)."""
    import scipy.fft as sfft
    from scipy.sparse import csr_matrix

    m = np.asarray(mask, dtype=bool)
    observed = int(m.sum())
    if observed == 0:
        raise ValueError("mask: no observed voxel")
    shells = _Shells(grid, edges)
    sd = np.broadcast_to(np.asarray(noise_sd, np.float64), grid.shape)
    uniform = bool(np.all(sd[m] == sd[m].flat[0]))
    p = np.maximum(np.asarray(power, np.float64).reshape(grid.half_shape), 0.0)
    if uniform:
        p = p + float(sd[m].flat[0]) ** 2 * grid.cell_volume      # white noise's power
    amplitude = np.sqrt(p * (grid.n_cells / grid.volume))
    amplitude[0, 0, 0] = 0.0
    dtype = np.float32 if amplitude.max(initial=0.0) < 1e15 else np.float64
    amplitude, weight = amplitude.astype(dtype), m.astype(dtype)
    sd = None if uniform else sd.astype(dtype)
    # shell sums as one sparse product: (H, n_bins), w / c of each half-grid mode's shell
    norm = grid.volume / grid.n_cells ** 2 / (observed / m.size)
    rows = np.flatnonzero(shells.in_shell)
    values = norm * shells.weight / np.maximum(shells.counts, 1)[shells.index]
    summing = csr_matrix((values, (rows, shells.index)), shape=(grid.n_half_modes, shells.n_bins))
    axes = (1, 2, 3)
    out = []
    for start in range(0, int(n), batch):
        b = min(batch, int(n) - start)
        d = sfft.irfftn(sfft.rfftn(rng.standard_normal((b,) + grid.shape, dtype=dtype),
                                   axes=axes) * amplitude, s=grid.shape, axes=axes)
        if sd is not None:
            d += sd * rng.standard_normal((b,) + grid.shape, dtype=dtype)
        mean = d.reshape(b, -1) @ weight.ravel() / observed
        d = (d - mean.astype(dtype)[:, None, None, None]) * weight
        spectra = sfft.rfftn(d, axes=axes).reshape(b, -1)
        out.append(np.asarray(summing.T @ (spectra.real ** 2 + spectra.imag ** 2).T).T)
    powers = np.concatenate(out) if out else np.zeros((0, shells.n_bins))
    return np.where(shells.counts > 0, powers, np.nan)
