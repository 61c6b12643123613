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
fixed-spectrum scale for numpy references. numpy only.
"""

from __future__ import annotations

import numpy as np

from core.field.grid import Grid
from core.field.observations import Observations

__all__ = ["MODE_PRECISION_METHODS", "voxel_precision", "likelihood_mode_precision",
           "mode_variance_full", "fourier_scale"]

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
