"""The Wiener filter: the exact Gaussian posterior of a field, as a numpy/scipy reference.

This module is the oracle that the HMC machinery is checked against, and a tool the GUI
uses directly, so it imports numpy and scipy only (never TensorFlow) and works on plain
arrays (no grid or spectrum objects).

Conventions
-----------
Grid shape (n0, n1, n2), N = n0 * n1 * n2 cells, volume V. Fields are real float arrays
of the grid shape. The DFT is numpy's unnormalised ``fftn``,

    F(s)_k = sum_j s_j exp(-2 pi i k.j / n),        F^-1 = F^H / N,

and half-spectra use numpy's ``rfftn`` layout, shape (n0, n1, n2//2 + 1). "Full grid"
sums over k run over all N modes; a half-grid array is extended by the symmetry
a_{-k} = a_k.

Prior. s is Gaussian, zero mean, stationary, with mode variance

    <|F(s)_k|^2> = S_k = P(|k|) N^2 / V          (``prior_mode_variance``, half grid)

and S_0 = 0: the k = 0 mode is not part of the field (the field mean is fixed at 0).
In real space the prior covariance is the circulant matrix

    C = (1/N) F^-1 diag(S) F,    C_ij = (1/N^2) sum_{k full} S_k exp(2 pi i k.(x_i - x_j) / n),

so var(s_j) = (1/N^2) sum_k S_k (Parseval). C has eigenvalues S_k / N; it is singular
(S_0 = 0), and everything below lives in the space orthogonal to the constant mode.

Forward model and noise. d = B s + n on the observed voxels, where the optional beam B
is diagonal in Fourier space, B s = F^-1 diag(B_k) F s (``beam``, real, half grid;
default B_k = 1), n_i ~ Normal(0, sigma_i^2) independently, sigma a scalar or a
per-voxel map, and a boolean mask (True = observed). A masked voxel carries no
information (infinite noise), so the likelihood precision is the diagonal

    W = diag(w),   w_i = mask_i / sigma_i^2.

Posterior. Cpost = (C^-1 + B W B)^-1 and m = Cpost B W d, taken on the space
orthogonal to the constant mode. C^-1 is never formed: with the symmetric square root
G = C^{1/2} = F^-1 diag(sqrt(S_k / N)) F and the substitution s = G xi (xi white under
the prior) the posterior of xi has precision and mean

    A = I + G B W B G,         A xi_m = b,   b = G B W d,

and then

    m = G xi_m,                Cpost = G A^-1 G.

A is symmetric positive definite with every eigenvalue >= 1 (well conditioned at
moderate signal-to-noise), and G annihilates the constant mode, so the posterior has
zero variance in the k = 0 mode and m has zero mean, whatever S_k = 0 modes there are.

Closed form (uniform sigma, no mask). Everything is diagonal in Fourier space. Noise
has mode variance <|F(n)_k|^2> = N sigma^2, so per mode

    m_k     = S_k B_k / (B_k^2 S_k + N sigma^2) * d_k,
    Cpost_k = 1 / (1/S_k + B_k^2 / (N sigma^2)) = S_k N sigma^2 / (B_k^2 S_k + N sigma^2)

(mode variances; Cpost_0 = 0) and the per-voxel posterior variance is the constant

    var(s_j) = (1/N^2) sum_{k full} Cpost_k.

Mask and/or noise map: A xi = b is solved by preconditioned conjugate gradients,
matrix-free (two real FFT pairs per product). The preconditioner is the closed-form
operator with the mean likelihood precision wbar = mean_i(w_i) (masked voxels count 0),
diagonal in Fourier space: 1 / (1 + S_k B_k^2 wbar / N). The stopping rule is on the
true relative residual of the whitened system, ||b - A xi||_2 <= tol ||b||_2; since
A >= I this bounds the whitened error, ||xi - xi_m||_2 <= tol ||b||_2. The
preconditioner is exact for uniform noise, and for a noise map with w_min > 0 it bounds
the condition number by w_max / w_min whatever the signal-to-noise. With masks it helps
most when the holes are small compared with the prior correlation length (scattered
bad voxels: ~10x fewer iterations than no preconditioner on a 32^3 grid); large
contiguous holes at high signal-to-noise converge slowly (several hundred to ~1000
iterations on 32^3, up to ~5x more than without it).

Posterior standard deviation with a mask/noise map: either the exact diagonal of
G A^-1 G by dense linear algebra (N <= ``EXACT_STD_MAX_CELLS``), or a Monte-Carlo
estimate from exact posterior draws by perturbation sampling ("constrained
realisations"): draw s' = G xi' from the prior and n' from the noise, and

    s_post = m + (s' - W_F(B s' + n'))

with W_F the Wiener mean operator. Expanding, s_post = G A^-1 (b + xi' - G B W n'), one
CG solve per draw, with covariance G A^-1 (I + G B W B G) A^-1 G = Cpost exactly. The
deviations s_post - m have mean exactly zero, so the variance is estimated as
mean(dev^2) over n_samples draws: unbiased, and the std estimate has relative
Monte-Carlo error ~ 1 / sqrt(2 n_samples) (Gaussian draws).
"""

from __future__ import annotations

import math
import warnings
from typing import Iterator, NamedTuple

import numpy as np
import scipy.fft
import scipy.linalg

__all__ = [
    "EXACT_STD_MAX_CELLS",
    "AUTO_EXACT_STD_MAX_CELLS",
    "WienerResult",
    "PosteriorSamples",
    "DensePosterior",
    "wiener_posterior",
    "wiener_mean_closed_form",
    "posterior_samples",
    "dense_posterior",
]

#: ``std="auto"`` uses the exact dense diagonal up to this many cells, sampling above.
AUTO_EXACT_STD_MAX_CELLS = 4096
#: Hard limit for ``std="exact"`` and ``dense_posterior``: several N x N float64
#: matrices (8192 cells: 512 MiB each) would not fit a desktop's memory above it.
EXACT_STD_MAX_CELLS = 8192

_STD_CHOICES = ("auto", "exact", "sample", "none")
_AXES = (-3, -2, -1)
# Perturbation draws are solved in batches of at most this many float64 cells in total
# (32 MiB per CG vector).
_BATCH_CELLS = 1 << 22


class WienerResult(NamedTuple):
    """Posterior summary returned by ``wiener_posterior`` and ``wiener_mean_closed_form``.

    mean: posterior mean field m (grid shape, float64, zero k = 0 mode).
    std: per-voxel posterior standard deviation (grid shape), or None for std="none".
    std_rel_error: relative Monte-Carlo error of ``std`` (1/sqrt(2 n_samples)) for
        std_method "sample"; 0.0 for the exact methods; None when std is None.
    iterations: conjugate-gradient iterations of the mean solve (0 for the closed form).
    residual: achieved relative residual ||b - A xi||_2 / ||b||_2 of the whitened system
        (computed, not the CG recursion's estimate; ~1e-16 for the closed form).
    mean_method: "closed_form" or "cg".
    std_method: "closed_form", "exact", "sample" or "none".
    converged: False if CG stopped at maxiter before reaching tol (a RuntimeWarning is
        also issued).
    tol: the requested relative-residual tolerance.
    """

    mean: np.ndarray
    std: np.ndarray | None
    std_rel_error: float | None
    iterations: int
    residual: float
    mean_method: str
    std_method: str
    converged: bool
    tol: float


class PosteriorSamples(NamedTuple):
    """Exact posterior draws (up to the CG tolerance) from ``posterior_samples``.

    samples: array (n_samples, n0, n1, n2).
    mean: the posterior mean m the draws are centred on.
    max_iterations: the largest CG iteration count over the draws' solves.
    max_residual: the largest achieved relative whitened residual over those solves.
    """

    samples: np.ndarray
    mean: np.ndarray
    max_iterations: int
    max_residual: float


class DensePosterior(NamedTuple):
    """Dense posterior from ``dense_posterior``; voxels flattened in C order.

    mean: posterior mean (grid shape).
    covariance: posterior covariance Cpost, (N, N).
    std: sqrt(diag(Cpost)) (grid shape).
    prior_covariance: the prior covariance C, (N, N).
    """

    mean: np.ndarray
    covariance: np.ndarray
    std: np.ndarray
    prior_covariance: np.ndarray


# --------------------------------------------------------------------------- validation


class _Problem(NamedTuple):
    """Validated inputs, float64, with derived Fourier multipliers."""

    shape: tuple[int, int, int]
    data: np.ndarray  # zero where unobserved
    mode_var: np.ndarray  # S_k, half grid
    beam: np.ndarray  # B_k, half grid (ones when no beam)
    weight: np.ndarray  # w_i = mask_i / sigma_i^2
    sigma_uniform: float | None  # sigma when the closed form applies, else None
    g: np.ndarray  # sqrt(S_k / N): eigenvalues of G = C^{1/2}
    h: np.ndarray  # sqrt(S_k / N) B_k: eigenvalues of G B


def _half_shape(shape: tuple[int, ...]) -> tuple[int, int, int]:
    return (shape[0], shape[1], shape[2] // 2 + 1)


def _self_conjugate_planes(n2: int) -> list[int]:
    """Indices along the last half-grid axis whose modes are their own conjugate twins' plane."""
    return [0, n2 // 2] if n2 % 2 == 0 and n2 > 1 else [0]


def _symmetrised(name: str, arr: np.ndarray, n2: int) -> np.ndarray:
    """Check a_{-k} = a_k on the self-conjugate planes and make it exact.

    A half-grid multiplier defines a symmetric real operator only if it is symmetric
    under k -> -k on the planes kz = 0 (and kz = n2/2 for even n2), where both k and -k
    are stored. Values from a function of |k| satisfy this up to rounding.
    """
    out = arr.copy()
    scale = float(np.max(np.abs(arr))) if arr.size else 0.0
    for p in _self_conjugate_planes(n2):
        plane = arr[:, :, p]
        twin = np.roll(plane[::-1, ::-1], shift=(1, 1), axis=(0, 1))  # plane[-i, -j]
        mismatch = float(np.max(np.abs(plane - twin)))
        if mismatch > 1e-8 * scale:
            raise ValueError(
                f"{name} is not symmetric under k -> -k on the self-conjugate plane "
                f"kz = {p} (max |a_k - a_-k| = {mismatch:.3g}); it must depend on k "
                "only through |k| or at least be even in k"
            )
        out[:, :, p] = 0.5 * (plane + twin)
    return out


def _validate(data, prior_mode_variance, noise_sigma, mask, beam) -> _Problem:
    data = np.asarray(data)
    if data.ndim != 3:
        raise ValueError(f"data must be a 3-d field (n0, n1, n2), got shape {data.shape}")
    if np.iscomplexobj(data) or not np.issubdtype(data.dtype, np.number):
        raise ValueError(f"data must be a real numeric array, got dtype {data.dtype}")
    shape = tuple(int(n) for n in data.shape)
    if min(shape) < 1:
        raise ValueError(f"data has an empty axis: shape {shape}")
    n_cells = math.prod(shape)
    half = _half_shape(shape)

    mode_var = np.asarray(prior_mode_variance)
    if mode_var.shape != half:
        raise ValueError(
            f"prior_mode_variance has shape {mode_var.shape} but data has shape {shape}: "
            f"expected the rfftn half-grid shape {half}"
        )
    if np.iscomplexobj(mode_var):
        raise ValueError("prior_mode_variance must be real (mode variances S_k)")
    mode_var = mode_var.astype(np.float64)
    if not np.all(np.isfinite(mode_var)):
        raise ValueError(
            f"prior_mode_variance has {int(np.sum(~np.isfinite(mode_var)))} non-finite value(s)"
        )
    if np.any(mode_var < 0):
        raise ValueError(
            f"prior_mode_variance must be >= 0, its minimum is {float(mode_var.min()):.6g}"
        )
    if mode_var[0, 0, 0] != 0:
        raise ValueError(
            f"prior_mode_variance[0, 0, 0] = {float(mode_var[0, 0, 0]):.6g} must be 0: the "
            "k = 0 mode is not part of the field (its mean is fixed at 0)"
        )
    mode_var = _symmetrised("prior_mode_variance", mode_var, shape[2])

    if beam is None:
        beam_arr = np.ones(half)
    else:
        beam_arr = np.asarray(beam)
        if beam_arr.shape != half:
            raise ValueError(
                f"beam has shape {beam_arr.shape} but data has shape {shape}: "
                f"expected the rfftn half-grid shape {half}"
            )
        if np.iscomplexobj(beam_arr):
            raise ValueError("beam must be real (a transfer function B_k on the half grid)")
        beam_arr = beam_arr.astype(np.float64)
        if not np.all(np.isfinite(beam_arr)):
            raise ValueError(f"beam has {int(np.sum(~np.isfinite(beam_arr)))} non-finite value(s)")
        beam_arr = _symmetrised("beam", beam_arr, shape[2])

    if mask is None:
        mask_arr = np.ones(shape, dtype=bool)
    else:
        mask_arr = np.asarray(mask)
        if mask_arr.shape != shape:
            raise ValueError(f"mask has shape {mask_arr.shape} but data has shape {shape}")
        if mask_arr.dtype != np.bool_:
            raise ValueError(
                f"mask must be a boolean array (True = observed), got dtype {mask_arr.dtype}"
            )
        if not mask_arr.any():
            raise ValueError("all voxels masked: the data carry no information")

    sigma = np.asarray(noise_sigma)
    if np.iscomplexobj(sigma) or not np.issubdtype(sigma.dtype, np.number):
        raise ValueError(f"noise_sigma must be real, got dtype {sigma.dtype}")
    sigma = sigma.astype(np.float64)
    if sigma.ndim == 0:
        value = float(sigma)
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"noise_sigma must be > 0 and finite, got {value!r}")
        sigma_map = np.full(shape, value)
    else:
        if sigma.shape != shape:
            raise ValueError(
                f"noise_sigma has shape {sigma.shape} but data has shape {shape} "
                "(pass a scalar or a per-voxel map)"
            )
        observed_sigma = sigma[mask_arr]
        bad = ~(np.isfinite(observed_sigma) & (observed_sigma > 0))
        if bad.any():
            first = observed_sigma[bad][0]
            raise ValueError(
                f"noise_sigma must be > 0 and finite on observed voxels: {int(bad.sum())} "
                f"value(s) are not (e.g. {float(first)!r})"
            )
        sigma_map = np.where(mask_arr, sigma, 1.0)

    values = data.astype(np.float64)
    nonfinite_observed = int(np.sum(~np.isfinite(values) & mask_arr))
    if nonfinite_observed:
        raise ValueError(
            f"data has {nonfinite_observed} NaN/inf value(s) in observed voxels "
            "(mask them or fill them)"
        )
    values = np.where(mask_arr, values, 0.0)
    weight = np.where(mask_arr, 1.0 / sigma_map**2, 0.0)

    sigma_uniform = None
    observed_all = bool(mask_arr.all())
    if observed_all and np.all(sigma_map == sigma_map.flat[0]):
        sigma_uniform = float(sigma_map.flat[0])

    g = np.sqrt(mode_var / n_cells)
    return _Problem(shape, values, mode_var, beam_arr, weight, sigma_uniform, g, g * beam_arr)


# --------------------------------------------------------------------------- operators


def _circulant(x: np.ndarray, multiplier: np.ndarray) -> np.ndarray:
    """F^-1 diag(a) F x over the last three axes, a real and even on the half grid."""
    shape = x.shape[-3:]
    return scipy.fft.irfftn(multiplier * scipy.fft.rfftn(x, axes=_AXES), s=shape, axes=_AXES)


def _full_grid_weights(shape: tuple[int, int, int]) -> np.ndarray:
    """Multiplicity of each half-grid mode in a full-grid sum (1 on self-conjugate planes)."""
    weights = np.full(_half_shape(shape)[2], 2.0)
    weights[_self_conjugate_planes(shape[2])] = 1.0
    return weights


def _apply_precision(problem: _Problem, x: np.ndarray) -> np.ndarray:
    """A x = x + G B W B G x (batched over leading axes)."""
    return x + _circulant(problem.weight * _circulant(x, problem.h), problem.h)


def _preconditioner(problem: _Problem) -> np.ndarray:
    """Fourier multiplier of the preconditioner 1 / (1 + S_k B_k^2 wbar / N)."""
    wbar = float(problem.weight.mean())
    return 1.0 / (1.0 + problem.h**2 * wbar)


def _norms(x: np.ndarray) -> np.ndarray:
    flat = x.reshape(x.shape[0], -1)
    return np.sqrt(np.einsum("ij,ij->i", flat, flat))


def _dots(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", x.reshape(x.shape[0], -1), y.reshape(y.shape[0], -1))


def _pcg(problem: _Problem, rhs: np.ndarray, tol: float, maxiter: int):
    """Batched preconditioned CG for A x = rhs, rhs of shape (batch, n0, n1, n2).

    Each system stops when its residual satisfies ||r|| <= tol ||rhs||. When the
    recursive residuals say all have converged, the true residuals are recomputed; any
    system whose true residual fails (rounding drift) restarts from its current
    iterate. Returns (x, iterations per system, true relative residual per system,
    converged per system).
    """
    precond = _preconditioner(problem)
    rhs_norm = _norms(rhs)
    target = tol * rhs_norm
    x = np.zeros_like(rhs)
    r = rhs.copy()
    iterations = np.zeros(rhs.shape[0], dtype=int)
    total = 0
    broadcast = (slice(None),) + (None,) * 3
    while True:
        z = _circulant(r, precond)
        p = z
        rz = _dots(r, z)
        active = _norms(r) > target
        while active.any() and total < maxiter:
            ap = _apply_precision(problem, p)
            pap = _dots(p, ap)
            alpha = np.divide(rz, pap, out=np.zeros_like(rz), where=active & (pap > 0))
            x += alpha[broadcast] * p
            r -= alpha[broadcast] * ap
            iterations += active
            total += 1
            active &= _norms(r) > target
            z = _circulant(r, precond)
            rz_new = _dots(r, z)
            beta = np.divide(rz_new, rz, out=np.zeros_like(rz), where=active & (rz > 0))
            p = z + beta[broadcast] * p
            rz = rz_new
        r = rhs - _apply_precision(problem, x)
        true_norm = _norms(r)
        converged = true_norm <= target
        if converged.all() or total >= maxiter:
            break
    relative = np.divide(true_norm, rhs_norm, out=true_norm.copy(), where=rhs_norm > 0)
    return x, iterations, relative, converged


def _warn_unconverged(what: str, maxiter: int, residual: float, tol: float) -> None:
    warnings.warn(
        f"Wiener filter: CG for the {what} stopped at maxiter={maxiter} with relative "
        f"residual {residual:.3g} > tol={tol:.3g}",
        RuntimeWarning,
        stacklevel=3,
    )


def _check_tol(tol, maxiter) -> tuple[float, int]:
    tol = float(tol)
    if not (0 < tol < 1):
        raise ValueError(f"tol must be in (0, 1), got {tol!r}")
    if int(maxiter) != maxiter or maxiter < 1:
        raise ValueError(f"maxiter must be a positive integer, got {maxiter!r}")
    return tol, int(maxiter)


# --------------------------------------------------------------------------- closed form


def _closed_form(problem: _Problem) -> tuple[np.ndarray, np.ndarray, float]:
    """Mean, whitened solution and constant posterior variance for uniform noise, no mask."""
    n_cells = math.prod(problem.shape)
    w = 1.0 / problem.sigma_uniform**2
    # whitened: A = diag(1 + w h_k^2), b_k = w h_k d_k  =>  xi_k = w h_k d_k / (1 + w h_k^2)
    xi = _circulant(problem.data, w * problem.h / (1.0 + w * problem.h**2))
    mean = _circulant(xi, problem.g)
    # Cpost_k = S_k N sigma^2 / (B_k^2 S_k + N sigma^2), written as S_k / (1 + w h_k^2)
    post_mode_var = problem.mode_var / (1.0 + w * problem.h**2)
    variance = float(np.sum(_full_grid_weights(problem.shape) * post_mode_var)) / n_cells**2
    return mean, xi, variance


def _whitened_residual(problem: _Problem, xi: np.ndarray) -> float:
    rhs = _circulant(problem.weight * problem.data, problem.h)
    r = rhs - _apply_precision(problem, xi)
    rhs_norm = float(np.linalg.norm(rhs))
    r_norm = float(np.linalg.norm(r))
    return r_norm / rhs_norm if rhs_norm > 0 else r_norm


def wiener_mean_closed_form(data, prior_mode_variance, noise_sigma, beam=None) -> WienerResult:
    """Exact posterior mean and std for uniform noise and no mask, per Fourier mode.

    With d_k = F(d)_k, S_k the prior mode variance, B_k the beam (default 1) and noise
    mode variance N sigma^2:

        m_k = S_k B_k / (B_k^2 S_k + N sigma^2) d_k,      m = F^-1 (m_k)
        std = sqrt( (1/N^2) sum_{k full} S_k N sigma^2 / (B_k^2 S_k + N sigma^2) )

    ``noise_sigma`` must be a scalar (or a constant map). The std field is constant.
    Returns a WienerResult with mean_method = std_method = "closed_form".
    """
    problem = _validate(data, prior_mode_variance, noise_sigma, None, beam)
    if problem.sigma_uniform is None:
        raise ValueError(
            "wiener_mean_closed_form needs uniform noise: noise_sigma varies across voxels "
            "(use wiener_posterior, which solves that case by conjugate gradients)"
        )
    mean, xi, variance = _closed_form(problem)
    return WienerResult(
        mean=mean,
        std=np.full(problem.shape, math.sqrt(variance)),
        std_rel_error=0.0,
        iterations=0,
        residual=_whitened_residual(problem, xi),
        mean_method="closed_form",
        std_method="closed_form",
        converged=True,
        tol=0.0,
    )


# --------------------------------------------------------------------------- dense


def _operator_matrix(shape: tuple[int, int, int], multiplier: np.ndarray) -> np.ndarray:
    """The N x N matrix of x -> F^-1 diag(a) F x, C-order voxels.

    The operator is circulant: M_ij = kappa((x_i - x_j) mod n) with the kernel
    kappa = F^-1 a (its response to a unit impulse at the origin), so the matrix is
    gathered from the kernel instead of transforming N basis vectors.
    """
    kernel = scipy.fft.irfftn(multiplier, s=shape, axes=_AXES).ravel()
    coords = np.indices(shape, dtype=np.int32).reshape(3, -1)  # dense grids only: N << 2^31
    flat = None
    for axis, n in enumerate(shape):
        diff = coords[axis][:, None] - coords[axis][None, :]
        diff %= n
        if flat is None:
            flat = diff
        else:
            flat *= n
            flat += diff
    return kernel[flat]


def _check_dense_size(shape: tuple[int, int, int], what: str) -> None:
    n_cells = math.prod(shape)
    if n_cells > EXACT_STD_MAX_CELLS:
        raise ValueError(
            f"{what} needs dense N x N matrices and is limited to N <= {EXACT_STD_MAX_CELLS} "
            f"cells; this grid {shape} has N = {n_cells} (use std='sample')"
        )


def _dense_whitened(problem: _Problem):
    """Lower Cholesky factor L of A = I + G B W B G (A = L L^T) and the dense G.

    A = I + K^T K with K = W^{1/2} B G restricted to the observed rows (masked rows of
    W^{1/2} are zero). Cost ~ (n_obs + N/3 + N) N^2 flops and a few N x N float64
    matrices: about 3 s and 0.5 GB at N = 4096 on two cores.
    """
    n_cells = math.prod(problem.shape)
    weight = problem.weight.reshape(-1)
    observed = weight > 0
    k = _operator_matrix(problem.shape, problem.h)[observed]  # rows of G B (symmetric)
    k *= np.sqrt(weight[observed])[:, None]  # W^{1/2} B G
    # lower triangle of K^T K (the Cholesky below reads only that triangle)
    # (k.T is a Fortran-ordered view, so BLAS gets it without a copy)
    precision = scipy.linalg.blas.dsyrk(1.0, k.T, trans=0, lower=1)
    del k
    precision[np.diag_indices(n_cells)] += 1.0
    factor = scipy.linalg.cholesky(precision, lower=True, overwrite_a=True, check_finite=False)
    g = _operator_matrix(problem.shape, problem.g)
    return factor, g


def _dense_std(problem: _Problem) -> np.ndarray:
    """sqrt(diag(G A^-1 G)) = column norms of L^-1 G, with A = L L^T."""
    factor, g = _dense_whitened(problem)
    half = scipy.linalg.solve_triangular(factor, g, lower=True, check_finite=False)
    variance = np.einsum("ij,ij->j", half, half)
    return np.sqrt(variance).reshape(problem.shape)


def dense_posterior(data, prior_mode_variance, noise_sigma, mask=None, beam=None) -> DensePosterior:
    """The posterior by dense linear algebra, a reference for tiny grids (N <= 8192).

    Builds the matrices explicitly (voxels flattened in C order):

        C   = (1/N) F^-1 diag(S) F            prior covariance (returned)
        G   = F^-1 diag(sqrt(S / N)) F        its symmetric square root, G G = C
        B   = F^-1 diag(B_k) F                beam (identity by default)
        W   = diag(mask / sigma^2)            likelihood precision
        A   = I + G B W B G,  A = L L^T        (Cholesky)
        m   = G A^-1 G B W d,  Cpost = G A^-1 G

    which is (C^-1 + B W B)^-1 on the space orthogonal to the constant mode, without
    inverting the singular C. Same arguments and validation as ``wiener_posterior``.
    """
    problem = _validate(data, prior_mode_variance, noise_sigma, mask, beam)
    _check_dense_size(problem.shape, "dense_posterior")
    factor, g = _dense_whitened(problem)
    beam_matrix = _operator_matrix(problem.shape, problem.beam)
    rhs = g @ (beam_matrix @ (problem.weight.reshape(-1) * problem.data.reshape(-1)))
    xi = scipy.linalg.cho_solve((factor, True), rhs, check_finite=False)
    half = scipy.linalg.solve_triangular(factor, g, lower=True, check_finite=False)
    covariance = half.T @ half
    return DensePosterior(
        mean=(g @ xi).reshape(problem.shape),
        covariance=covariance,
        std=np.sqrt(np.diag(covariance)).reshape(problem.shape),
        prior_covariance=g @ g,
    )


# --------------------------------------------------------------------------- sampling


def _perturbation_deviations(
    problem: _Problem, n_samples: int, rng: np.random.Generator, tol: float, maxiter: int
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Yield batches of exact posterior deviations s_post - m = G A^-1 (xi' - G B W n').

    xi' ~ N(0, I) (so s' = G xi' is a prior draw) and n' = sigma z' on observed voxels.
    Each draw takes two standard-normal fields from ``rng`` in a fixed order (xi', z'),
    so the first k draws do not depend on n_samples. Yields (deviations, iterations,
    relative residuals, converged) per batch.
    """
    n_cells = math.prod(problem.shape)
    batch = max(1, min(n_samples, _BATCH_CELLS // n_cells))
    noise_scale = np.sqrt(problem.weight)  # W n' = mask z' / sigma = sqrt(w) z'
    done = 0
    while done < n_samples:
        size = min(batch, n_samples - done)
        rhs = np.empty((size,) + problem.shape)
        white_noise = np.empty((size,) + problem.shape)
        for i in range(size):
            rhs[i] = rng.standard_normal(problem.shape)
            white_noise[i] = rng.standard_normal(problem.shape)
        rhs -= _circulant(noise_scale * white_noise, problem.h)
        del white_noise
        xi, iterations, residual, converged = _pcg(problem, rhs, tol, maxiter)
        yield _circulant(xi, problem.g), iterations, residual, converged
        done += size


def _check_samples(n_samples) -> int:
    if isinstance(n_samples, bool) or int(n_samples) != n_samples or n_samples < 2:
        raise ValueError(f"n_samples must be an integer >= 2, got {n_samples!r}")
    return int(n_samples)


def _solve_mean(problem: _Problem, tol: float, maxiter: int):
    rhs = _circulant(problem.weight * problem.data, problem.h)[None]
    xi, iterations, residual, converged = _pcg(problem, rhs, tol, maxiter)
    return _circulant(xi[0], problem.g), int(iterations[0]), float(residual[0]), bool(converged[0])


def posterior_samples(
    data,
    prior_mode_variance,
    noise_sigma,
    mask=None,
    beam=None,
    *,
    n_samples: int = 64,
    rng=None,
    tol: float = 1e-8,
    maxiter: int = 10_000,
) -> PosteriorSamples:
    """Exact draws from the Gaussian posterior by perturbation sampling.

    Each draw is s_post = m + (s' - W_F(B s' + n')) with s' a prior draw, n' a noise
    draw and W_F the Wiener mean operator; equivalently s_post = m + G A^-1 (xi' -
    G B W n'), one CG solve per draw (see the module docstring). The draws are exact up
    to the CG tolerance. ``rng``: a numpy Generator, a seed, or None (fresh entropy);
    a fixed seed reproduces the draws. Memory: n_samples full fields.
    """
    problem = _validate(data, prior_mode_variance, noise_sigma, mask, beam)
    tol, maxiter = _check_tol(tol, maxiter)
    n_samples = _check_samples(n_samples)
    rng = np.random.default_rng(rng)
    if problem.sigma_uniform is not None:
        mean, _, _ = _closed_form(problem)
    else:
        mean, _, residual, converged = _solve_mean(problem, tol, maxiter)
        if not converged:
            _warn_unconverged("posterior mean", maxiter, residual, tol)
    samples = np.empty((n_samples,) + problem.shape)
    max_iterations, max_residual, done, all_converged = 0, 0.0, 0, True
    for deviations, iterations, residual, converged in _perturbation_deviations(
        problem, n_samples, rng, tol, maxiter
    ):
        samples[done : done + len(deviations)] = mean + deviations
        done += len(deviations)
        max_iterations = max(max_iterations, int(iterations.max()))
        max_residual = max(max_residual, float(residual.max()))
        all_converged &= bool(converged.all())
    if not all_converged:
        _warn_unconverged("posterior draws", maxiter, max_residual, tol)
    return PosteriorSamples(samples, mean, max_iterations, max_residual)


# --------------------------------------------------------------------------- public API


def wiener_posterior(
    data,
    prior_mode_variance,
    noise_sigma,
    mask=None,
    beam=None,
    *,
    std: str = "auto",
    n_samples: int = 64,
    rng=None,
    tol: float = 1e-8,
    maxiter: int = 10_000,
) -> WienerResult:
    """Posterior mean and per-voxel standard deviation of the field (the Wiener filter).

    data: observed field d (n0, n1, n2); values at masked voxels are ignored (NaN ok).
    prior_mode_variance: S_k = P(|k|) N^2 / V on the rfftn half grid (n0, n1, n2//2+1),
        S_0 must be 0 (see the module docstring for the normalisation).
    noise_sigma: scalar or per-voxel map of the noise standard deviation (> 0 and finite
        on observed voxels; ignored on masked ones).
    mask: boolean, True = observed; None = all observed.
    beam: real transfer function B_k on the half grid; None = no beam.
    std: "auto" (closed form when the noise is uniform and nothing is masked, else
        "exact" for N <= 4096 cells, else "sample"), "exact" (dense, N <= 8192),
        "sample" (Monte Carlo from n_samples exact posterior draws, relative error
        1/sqrt(2 n_samples)), or "none".
    rng: numpy Generator, seed, or None; used by std="sample" only.
    tol: relative residual tolerance of the whitened CG solves (||b - A xi|| <= tol ||b||).
    maxiter: CG iteration cap per solve (then a RuntimeWarning and converged=False).

    Costs: each CG iteration is three real FFT pairs over the grid; std="exact" is dense
    (about 3 s and 0.5 GB at N = 4096 on two cores, growing as N^3); std="sample" is
    n_samples further CG solves, batched.

    Uniform noise without a mask uses the closed form for the mean (and the std, unless
    std="none"/"sample"/"exact" is asked for explicitly); otherwise the mean comes from
    matrix-free preconditioned CG.
    """
    problem = _validate(data, prior_mode_variance, noise_sigma, mask, beam)
    tol, maxiter = _check_tol(tol, maxiter)
    if std not in _STD_CHOICES:
        raise ValueError(f"std must be one of {_STD_CHOICES}, got {std!r}")
    n_cells = math.prod(problem.shape)
    closed = problem.sigma_uniform is not None

    if std == "auto":
        if closed:
            std = "closed_form"
        elif n_cells <= AUTO_EXACT_STD_MAX_CELLS:
            std = "exact"
        else:
            std = "sample"
    if std == "exact":
        _check_dense_size(problem.shape, "std='exact'")
    if std == "sample":
        n_samples = _check_samples(n_samples)

    if closed:
        mean, xi, variance = _closed_form(problem)
        iterations, residual, converged = 0, _whitened_residual(problem, xi), True
        mean_method = "closed_form"
    else:
        mean, iterations, residual, converged = _solve_mean(problem, tol, maxiter)
        mean_method = "cg"
        if not converged:
            _warn_unconverged("posterior mean", maxiter, residual, tol)

    std_field: np.ndarray | None
    std_rel_error: float | None
    if std == "closed_form":
        std_field, std_rel_error = np.full(problem.shape, math.sqrt(variance)), 0.0
    elif std == "exact":
        std_field, std_rel_error = _dense_std(problem), 0.0
    elif std == "sample":
        rng = np.random.default_rng(rng)
        sum_squares = np.zeros(problem.shape)
        max_residual, all_converged = 0.0, True
        for deviations, _, res, conv in _perturbation_deviations(
            problem, n_samples, rng, tol, maxiter
        ):
            sum_squares += np.einsum("i...,i...->...", deviations, deviations)
            max_residual = max(max_residual, float(res.max()))
            all_converged &= bool(conv.all())
        if not all_converged:
            _warn_unconverged("posterior draws", maxiter, max_residual, tol)
        # the deviations have exactly zero mean, so no degree of freedom is lost
        std_field = np.sqrt(sum_squares / n_samples)
        std_rel_error = 1.0 / math.sqrt(2.0 * n_samples)
    else:
        std_field, std_rel_error = None, None

    return WienerResult(
        mean=mean,
        std=std_field,
        std_rel_error=std_rel_error,
        iterations=iterations,
        residual=residual,
        mean_method=mean_method,
        std_method=std,
        converged=converged,
        tol=tol,
    )
