"""Why a sampled spectral index mixes slowly: its conditional sd given the field coordinates.

Issue 30 suspects the non-centred (whitened) parameterisation: modes with a high
signal-to-noise ratio are pinned by the data, so the index can move only if all of them move.
This script measures that exactly, without a sampler, on the no-mask Gaussian case.

The model (``core.engine.field_density`` with uniform noise sigma, no mask, no beam) in an
orthonormal real Fourier basis of the grid (one real degree of freedom per full-grid
wavevector k != 0, which is exactly how the whitened latent u is indexed):

    d_j = x_j + e_j,   e_j ~ N(0, sigma^2),   x_j ~ N(0, s_j(n)),   s_j = P(|k_j|; n) N / V

with P(k) = A (k / k_p)^n (``core.field.power_spectrum.PowerLaw``) and a normal prior on n.
For each coordinate system of the field part of the state, x_j = a_j(n) c_j:

  whitened   c = u,  x_j = sqrt(s_j) u_j,          u_j ~ N(0, 1)          (non-centred)
  fourier    c = v,  u_j = w_j(n) v_j, w_j = (1 + s_j / sigma^2)^-1/2, Jacobian sum log w_j
             (the engine's per-mode preconditioner, its scale following the sampled n)
  frozen     c = v,  u_j = w_j(n_true) v_j: the same scale held at one index, as the engine's
             dense low-k block does (its matrix T is built once, at the reference spectrum,
             and does not follow the sampled hyperparameters): a fixed linear map of u, so its
             conditional sd is the whitened one exactly (the column checks it)
  centred    c = x,  x_j ~ N(0, s_j(n))

the conditional posterior sd of n given c is (-d^2 log p(n, c | d) / dn^2)^-1/2 (a second
central difference of the exact joint log-density), evaluated at exact posterior draws: n from
the marginal posterior p(n | d) (1-D quadrature of the marginal likelihood
sum_j -1/2 [log(s_j + sigma^2) + d_j^2 / (s_j + sigma^2)]), then x | n, d exactly Gaussian.
A Gibbs-like or HMC move of n at fixed c has that conditional width, so the index needs about
(marginal sd / conditional sd)^2 such moves to cross its posterior (a random walk): printed as
"moves". Columns: grid, noise sigma, S/N (the median over modes of s_j / sigma^2 and the
fraction of modes with s_j > sigma^2), the marginal sd of n, then per coordinate system the
median conditional sd / marginal sd (over 200 posterior draws) and the moves.

Usage: python bench/hyper_coupling.py [--sizes 16 32 64] [--sigmas 0.01 0.1 1 10] [--draws 200]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from core.field.grid import Grid
from core.field.power_spectrum import PowerLaw
from core.priors import NormalPrior

BOX = 100.0
TRUE = PowerLaw(amplitude=300.0, index=-2.0, k_pivot=0.1)
INDEX_PRIOR = NormalPrior(loc=-2.0, scale=0.5)
SYSTEMS = ("whitened", "fourier", "frozen", "centred")


def mode_wavenumbers(n: int) -> np.ndarray:
    k = Grid((n, n, n), BOX).k_magnitude_full().ravel()
    return k[k > 0]


def mode_variance(k, index, n_cells) -> np.ndarray:
    """s_j = P(k_j; index) N / V: the variance of an orthonormal real mode (core.field.grid)."""
    return TRUE.evaluate(k, index=index) * n_cells / BOX**3


def marginal_posterior(k, d, sigma, n_cells, grid_n=801):
    """(nodes, normalised weights) of p(n | d) on a grid over +-8 prior sd (refined around the mode)."""
    def log_post(nodes):
        out = []
        for part in np.array_split(nodes, max(1, nodes.size * k.size // 2_000_000)):
            s = mode_variance(k[None, :], part[:, None], n_cells) + sigma**2
            out.append(INDEX_PRIOR.logpdf(part) - 0.5 * np.sum(np.log(s) + d[None, :]**2 / s, axis=1))
        return np.concatenate(out)
    mean, sd = INDEX_PRIOR.loc, INDEX_PRIOR.scale
    for _ in range(4):      # zoom in: each pass centres a grid of +-12 sd on the last estimate
        nodes = np.linspace(mean - 12 * sd, mean + 12 * sd, grid_n)
        lp = log_post(nodes)
        w = np.exp(lp - lp.max())
        mean = np.sum(w * nodes) / w.sum()
        sd = max(math.sqrt(np.sum(w * (nodes - mean)**2) / w.sum()), nodes[1] - nodes[0])
    return nodes, w / w.sum()


def joint_log_density(system: str, index, c, k, d, sigma, n_cells, frozen_scale=None) -> float:
    """log p(n, c, d) up to a constant, for the field coordinates c of ``system``."""
    s = mode_variance(k, index, n_cells)
    lp = float(INDEX_PRIOR.logpdf(index))
    if system == "whitened":
        x = np.sqrt(s) * c
        lp += -0.5 * np.sum(c**2)
    elif system == "fourier":
        w = 1.0 / np.sqrt(1.0 + s / sigma**2)
        u = w * c
        x = np.sqrt(s) * u
        lp += -0.5 * np.sum(u**2) + np.sum(np.log(w))
    elif system == "frozen":
        u = frozen_scale * c          # w at a fixed index (the dense block's constant T does this)
        x = np.sqrt(s) * u
        lp += -0.5 * np.sum(u**2)
    else:
        x = c
        lp += -0.5 * np.sum(c**2 / s + np.log(s))
    return lp - 0.5 * np.sum((d - x)**2) / sigma**2


def conditional_sd(system, index, c, k, d, sigma, n_cells, frozen_scale=None, h=1e-3) -> float:
    f = lambda t: joint_log_density(system, t, c, k, d, sigma, n_cells, frozen_scale)  # noqa: E731
    curvature = (f(index + h) - 2 * f(index) + f(index - h)) / h**2
    return 1.0 / math.sqrt(-curvature) if curvature < 0 else math.inf


def case(n: int, sigma: float, draws: int, rng) -> dict:
    k = mode_wavenumbers(n)
    n_cells = n**3
    s_true = mode_variance(k, TRUE.index, n_cells)
    d = rng.normal(0.0, np.sqrt(s_true + sigma**2))
    nodes, weights = marginal_posterior(k, d, sigma, n_cells)
    mean = np.sum(weights * nodes)
    marginal_sd = math.sqrt(np.sum(weights * (nodes - mean)**2))
    cdf = np.cumsum(weights)
    ratios = {"whitened": [], "fourier": [], "frozen": [], "centred": []}
    frozen_scale = 1.0 / np.sqrt(1.0 + s_true / sigma**2)
    for _ in range(draws):
        index = float(np.interp(rng.uniform(cdf[0], cdf[-1]), cdf, nodes))
        s = mode_variance(k, index, n_cells)
        x = s * d / (s + sigma**2) + rng.normal(size=k.size) * np.sqrt(s * sigma**2 / (s + sigma**2))
        u = x / np.sqrt(s)
        v = u * np.sqrt(1.0 + s / sigma**2)
        for system, c in (("whitened", u), ("fourier", v), ("frozen", u / frozen_scale), ("centred", x)):
            ratios[system].append(conditional_sd(system, index, c, k, d, sigma, n_cells, frozen_scale) / marginal_sd)
    snr = s_true / sigma**2
    return {"n": n, "sigma": sigma, "snr_median": float(np.median(snr)), "snr_frac": float(np.mean(snr > 1)),
            "marginal_sd": marginal_sd, **{name: float(np.median(r)) for name, r in ratios.items()}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--sigmas", type=float, nargs="+", default=[0.003, 0.03, 0.3, 3.0])
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"P(k) = {TRUE.amplitude} (k / {TRUE.k_pivot})^{TRUE.index}, box {BOX}, index prior "
          f"normal({INDEX_PRIOR.loc}, {INDEX_PRIOR.scale}); ratio = conditional sd / marginal sd "
          "(median over posterior draws); moves = ratio^-2")
    print(f"{'grid':>5} {'sigma':>7} {'S/N med':>9} {'S/N>1':>6} {'marg sd':>9} | "
          f"{'whitened':>9} {'moves':>8} | {'fourier':>9} {'moves':>8} | {'frozen':>9} {'moves':>8} | "
          f"{'centred':>9} {'moves':>8}")
    for n in args.sizes:
        for sigma in args.sigmas:
            r = case(n, sigma, args.draws, rng)
            cells = " | ".join(f"{r[s]:9.4f} {r[s]**-2:8.1f}" for s in SYSTEMS)
            print(f"{n:>4}^3 {sigma:7.3g} {r['snr_median']:9.3g} {r['snr_frac']:6.2f} {r['marginal_sd']:9.2e} | "
                  f"{cells}", flush=True)


if __name__ == "__main__":
    main()
