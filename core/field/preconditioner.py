"""The Fourier preconditioner's numpy side: how much the data constrain each latent mode.

The whitened latent u (``core.engine.field_density``) is indexed by the full-grid wavevector
k; its prior is N(0, I) and the field's DFT mode k has prior variance S_k = P(|k|) N^2 / V
(``core.field.grid``). The likelihood adds to the precision of u[k]

    S_k * q_k,        q_k = B_k^2 * c_k / N,

with B_k the beam exp(-(|k| R)^2 / 2) (1 without one) and c_k the data's inverse noise
variance per voxel, averaged over the grid (method "mean", the default):

    c = (1/N) sum_j y_j,     y_j = mask_j / sigma_j^2    (Gaussian noise)
                             y_j = mask_j * lambda       (Poisson counts, lambda = nbar exp(mu))

that is, the observed fraction times the observed voxels' mean of 1/sigma^2 (the inverse of
their harmonic mean of sigma^2). For uniform noise and no mask y = 1/sigma^2, and the
noise variance of one DFT mode is N_k = N sigma^2 (``core.reference.wiener``'s closed form),
so 1 + S_k q_k = 1 + S_k B_k^2 / N_k is the exact posterior precision of u[k] there, and the
exact posterior of u is diagonal. With a mask or a noise map the posterior couples modes;
1 + S_k q_k is then the exact diagonal of the posterior precision in the u basis up to one
term: method "jacobi" adds it,

    c_k = (1/N) sum_j y_j (1 - sin(2 theta_j)),   theta_j = 2 pi sum_a k_a j_a / n_a,

the diagonal exactly (the latent's 45 degree rotation of Re and Im makes u[k] load the field
as cos - sin; the term is Im DFT(y) at the wavevector 2k, one FFT). It differs from "mean"
only where the mask has structure at twice the mode's wavevector, the low k along a slab.

Poisson counts: the log-likelihood sum_j mask_j (d_j s_j - nbar exp(s_j)) has the curvature
nbar exp(s_j) in the signal s = x + field_mean, which depends on the field. It is taken at
the prior mean of the field, x = 0: lambda = nbar exp(field_mean). (The prior average of the
curvature, nbar exp(field_mean + var(x)/2), would be larger by the field's log-normal
factor; the prior-mean value is the curvature at the chains' start and the one the
hyperparameters do not change.)

The preconditioner itself (u = w v with w = (1 + S_k q_k)^-1/2, recomputed from sampled
hyperparameters) lives in ``core.engine.field_density``; this module gives it q, and the
fixed-spectrum scale for numpy references.

The dense low-k block. A mask or a noise map couples the modes, and a per-mode scale cannot
follow that where it matters most: the low-k modes, whose S_k q_k is largest, mix into
combinations that live inside the masked region and that the data do not constrain at all
(posterior precision about 1, not 1 + S_k q_k). Measured on the 32^3 benchmark posterior of
issue #12 (25 % slab, sigma 0.5, P ~ k^-2 with unit variance), the preconditioned
precision's condition number is 132 with the per-mode scale (the worst direction's std 9.9x
the scale's), 32 with a dense block of the 514 modes |k| <= 5 k_f, 17 with the 1418 modes
|k| <= 7 k_f. So the m modes with the largest S_k q_k (where it exceeds 1) get the exact block
of the posterior precision among themselves, factorised once:

    P_LL = I + B G B   (whitened; raw_modes: diag(1/S) + b G b, b the beam alone),
    G_ab = (1/N^2) sum_j y_j phi_a(j) phi_b(j) = (1/N^2) (Re Y(k_a - k_b) + Im Y(k_a + k_b)),

with B = sqrt(S_k) times the beam, phi_k(j) = cos theta_kj - sin theta_kj the field of a unit
u[k] (times N / sqrt(S_k)), and Y = DFT(y) (one FFT of the voxel precision). With P_LL = L L^T
the block's latent is u_L = L^-T v_L, so that the state's precision there is exactly the
identity; the coupling between the block and the other modes is what is left. The block is
taken at the model's reference spectrum (a sampled hyperparameter's prior median) and held
fixed: it is a constant linear map whose Jacobian is a constant. numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.field.grid import Grid
from core.field.observations import Observations

__all__ = ["MODE_PRECISION_METHODS", "DENSE_BLOCK_MIN_PRECISION", "voxel_precision",
           "likelihood_mode_precision", "mode_variance_full", "fourier_scale", "couples_modes",
           "DenseBlock", "dense_block"]

#: A mode joins the dense block only where the data's precision S_k q_k exceeds this (the prior's,
#: 1, in the whitened latent): below it the per-mode scale is close to 1 and the coupling small.
DENSE_BLOCK_MIN_PRECISION = 1.0
_BLOCK_ROWS = 256

#: How the mask and the noise map enter q_k (see the module docstring).
MODE_PRECISION_METHODS = ("mean", "jacobi")


def voxel_precision(observations: Observations) -> np.ndarray:
    """y_j: the likelihood's curvature in the signal at voxel j (0 where masked).

    Gaussian: 1/sigma_j^2. Poisson: nbar exp(field_mean), the rate at the prior mean of the
    field (module docstring)."""
    obs = observations
    mask = obs.mask.astype(np.float64)
    if obs.kind == "gaussian":
        return mask / np.asarray(obs.noise, np.float64) ** 2
    return mask * obs.mean_count * np.exp(obs.field_mean)


def likelihood_mode_precision(grid: Grid, observations: Observations,
                              method: str = "mean") -> np.ndarray:
    """q_k on the full grid (shape ``grid.shape``, fftn layout): the likelihood's precision
    of the whitened latent u[k] per unit of prior mode variance S_k (module docstring)."""
    if method not in MODE_PRECISION_METHODS:
        raise ValueError(f"method {method!r} is not known (known: {', '.join(MODE_PRECISION_METHODS)})")
    if tuple(observations.mask.shape) != grid.shape:
        raise ValueError(f"observations of shape {observations.mask.shape} do not match grid shape {grid.shape}")
    y = voxel_precision(observations)
    n = grid.n_cells
    c = np.full(grid.shape, y.mean())
    if method == "jacobi":
        # sum_j y_j sin(2 theta_j) = -Im DFT(y)[2k]
        spectrum = np.fft.fftn(y)
        idx = np.ix_(*[(2 * np.arange(length)) % length for length in grid.shape])
        c = c + np.imag(spectrum[idx]) / n
    q = c / n
    if observations.smoothing_scale is not None:
        q = q * np.exp(-(grid.k_magnitude_full() * observations.smoothing_scale) ** 2)
    return np.maximum(q, 0.0)


def mode_variance_full(grid: Grid, spectrum) -> np.ndarray:
    """S_k = P(|k|) N^2 / V on the full grid, 0 at k = 0."""
    k = grid.k_magnitude_full()
    p = spectrum.evaluate(np.where(k > 0, k, 1.0))
    return np.where(k > 0, p * grid.n_cells**2 / grid.volume, 0.0)


def fourier_scale(grid: Grid, spectrum, observations: Observations, *,
                  parameterisation: str = "whitened", method: str = "mean") -> np.ndarray:
    """w on the full grid for a fixed spectrum: the latent is w * v.

    whitened: w = (1 + S_k q_k)^-1/2; raw_modes (latent N(0, S_k) a priori): w =
    (1/S_k + q_k)^-1/2. The inert k = 0 entry has w = 1."""
    s = mode_variance_full(grid, spectrum)
    q = likelihood_mode_precision(grid, observations, method)
    if parameterisation == "whitened":
        return 1.0 / np.sqrt(1.0 + s * q)
    if parameterisation == "raw_modes":
        return np.where(s > 0, np.sqrt(s / (1.0 + s * q)), 1.0)
    raise ValueError(f"the fourier preconditioner needs the whitened or raw_modes parameterisation, "
                     f"not {parameterisation!r}")


def couples_modes(observations: Observations) -> bool:
    """Whether the likelihood's curvature differs between voxels (a mask, a noise map): only
    then does it couple the latent's modes."""
    y = voxel_precision(observations)
    return bool(np.ptp(y) > 1e-12 * np.abs(y).max())


@dataclass(frozen=True)
class DenseBlock:
    """The dense low-k block of the fourier preconditioner (module docstring).

    index: (m,) flat (C-order) indices into the full grid of the block's modes; factor: (m, m)
    T with u_L = T v_L (T = L^-T); inverse: (m, m) L^T, v_L = L^T u_L; log_det: log |det T|."""

    index: np.ndarray
    factor: np.ndarray
    inverse: np.ndarray
    log_det: float

    @property
    def size(self) -> int:
        return int(self.index.size)


def dense_block(grid: Grid, spectrum, observations: Observations, n_modes: int, *,
                parameterisation: str = "whitened") -> DenseBlock | None:
    """The block of the ``n_modes`` modes with the largest S_k q_k above
    ``DENSE_BLOCK_MIN_PRECISION`` (None when there are none, or when the likelihood does not
    couple modes: the per-mode scale is then exact). S at ``spectrum``'s values."""
    if n_modes <= 0 or not couples_modes(observations):
        return None
    s = mode_variance_full(grid, spectrum)
    q_mean = likelihood_mode_precision(grid, observations, "mean")
    order_key = (s * q_mean).reshape(-1)
    candidates = np.flatnonzero(order_key > DENSE_BLOCK_MIN_PRECISION)
    if candidates.size == 0:
        return None
    # stable sort: ties (k, -k and the other modes of a shell) keep the grid order
    chosen = candidates[np.argsort(-order_key[candidates], kind="stable")][:n_modes]
    index = np.sort(chosen)
    kv = np.stack(np.unravel_index(index, grid.shape), axis=-1)          # (m, 3) integer wavevectors
    shape = np.array(grid.shape)
    y_hat = np.fft.fftn(voxel_precision(observations))
    g = np.empty((index.size, index.size))
    for start in range(0, index.size, _BLOCK_ROWS):       # bounded index arrays for large m
        rows = kv[start:start + _BLOCK_ROWS, None, :]
        diff = (rows - kv[None, :, :]) % shape
        total = (rows + kv[None, :, :]) % shape
        g[start:start + _BLOCK_ROWS] = (y_hat[diff[..., 0], diff[..., 1], diff[..., 2]].real
                                        + y_hat[total[..., 0], total[..., 1], total[..., 2]].imag)
    g /= grid.n_cells**2
    beam = np.ones(index.size)
    if observations.smoothing_scale is not None:
        k_block = grid.k_magnitude_full().reshape(-1)[index]
        beam = np.exp(-0.5 * (k_block * observations.smoothing_scale) ** 2)
    s_block = s.reshape(-1)[index]
    if parameterisation == "whitened":
        b = np.sqrt(s_block) * beam
        precision = np.eye(index.size) + b[:, None] * g * b[None, :]
    elif parameterisation == "raw_modes":
        precision = np.diag(1.0 / s_block) + beam[:, None] * g * beam[None, :]
    else:
        raise ValueError(f"the fourier preconditioner needs the whitened or raw_modes parameterisation, "
                         f"not {parameterisation!r}")
    lower = np.linalg.cholesky(0.5 * (precision + precision.T))
    factor = np.linalg.inv(lower).T
    return DenseBlock(index=index, factor=factor, inverse=lower.T.copy(),
                      log_det=float(-np.sum(np.log(np.diag(lower)))))
