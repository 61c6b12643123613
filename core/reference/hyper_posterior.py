"""The exact posterior of sampled P(k) hyperparameters, for a Gaussian likelihood (numpy/scipy).

The field can be integrated out exactly when the likelihood is Gaussian with one noise level
sigma: the data on the observed voxels are Gaussian, d ~ N(mean, C_S(theta) + sigma^2 I), so

    p(theta | d)  propto  p(theta) p(d | theta),

and with a few sampled hyperparameters that is a low-dimensional integral done here by
quadrature, to the accuracy of the quadrature (far below any sampler's error). This is the
answer the engine's samplers of (field, theta) must reproduce for theta's posterior.

Conventions are those of ``core.field.grid`` and ``core.reference.wiener``: a DFT mode of the
field has variance S_k = B_k^2 P(|k|) N^2 / V (B_k = exp(-(k R)^2 / 2) the optional smoothing,
S_0 = 0: the field mean is the fixed ``field_mean``). In the orthonormal real Fourier basis
(numpy's ``norm="ortho"``; the rfftn half grid with multiplicity w_k, 1 on the self-conjugate
planes and 2 elsewhere) the data coefficients are independent:

no mask      log p(d | theta) = sum_k (w_k / 2) [-log(2 pi T_k) - |D_k|^2 / T_k],
             T_k = B_k^2 P(|k|) N / V + sigma^2, D = rfftn(d - mean, norm="ortho")
             (k = 0 included: T_0 = sigma^2, a constant); grouped by distinct |k|.
slab mask    whole planes missing along one axis a (the mask depends on that axis only): the
             orthonormal 2-D transform over the other two axes leaves, per column q, the
             vector z_q of the m observed planes, independent between columns, with the real
             covariance C_q[i, j] = c_q(o_i - o_j) + sigma^2 delta_ij,
             c_q(delta) = (N / V) ifft_{k_a}(B^2 P(|(k_a, q)|))[delta]:
             log p = sum_q (w_q / 2) [-m log(2 pi) - log det C_q - z_q^T C_q^-1 z_q]
             (z_q complex: z^H C^-1 z; w_q the 2-D half-grid multiplicity), grouped by |q|.

Both are ``GaussianMarginal``: ``k`` the wavenumbers where P is needed, ``log_likelihood(P)``
for P at those k (any leading batch axes). The tests check both against a dense
multivariate normal over the observed voxels.

The engine samples eta, the unconstrained coordinate of each sampled hyperparameter
(``core.priors``: theta = b(eta), the prior of eta is ``unconstrained_logpdf``, its Jacobian
included), so the quadrature is in eta:

``hyper_posterior``  up to 3 sampled hyperparameters of any family (band powers included, with
                     their random walk): a tensor grid of nodes per axis in the coordinates of
                     the Laplace approximation (mode by BFGS, Hessian by finite differences),
                     +-``width`` sd, the trapezoid rule (spectrally accurate for these smooth,
                     Gaussian-tailed integrands); widened if the edge carries weight.
``band_posterior``   band powers without a mask, any number of bins: the likelihood is a
                     product over bins, the prior a chain (each bin's lognormal and the
                     Gaussian random walk between neighbours), so every bin's marginal is exact
                     by a forward-backward pass over per-bin grids of log P (independent bins:
                     one 1-D quadrature each).

Results (``HyperPosterior``): mean and sd of each theta (the value the run store records) and
of its eta, per hyperparameter name. ``hyper_posterior_for_config`` does it for a run config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy.special import logsumexp

from core.field.grid import Grid
from core.field.observations import Observations, slab_axis
from core.field.power_spectrum import BandPowers, PowerSpectrum

__all__ = ["GaussianMarginal", "HyperPosterior", "hyper_posterior", "band_posterior", "slab_axis",
           "hyper_posterior_for_config"]

_LOG_2PI = math.log(2.0 * math.pi)


def _unique_groups(values: np.ndarray):
    """(distinct values, inverse index) of float |k| values, equal to 1e-9 relative."""
    key = np.round(values / max(float(values.max()), 1e-300), 12)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return values.ravel()[first], inverse.ravel()


class GaussianMarginal:
    """log p(d | P) with the field integrated out, for a Gaussian likelihood with one noise
    level, no mask or a slab mask (module docstring). ``k``: the wavenumbers at which P is
    needed; ``log_likelihood(power)`` takes P at ``k`` with any leading batch axes."""

    def __init__(self, grid: Grid, observations: Observations):
        if observations.kind != "gaussian":
            raise ValueError(f"the exact marginal likelihood needs a Gaussian likelihood, not "
                             f"{observations.kind!r}")
        sigma = observations.uniform_noise
        if sigma is None:
            raise ValueError("the exact marginal likelihood needs one noise level (not a noise map)")
        self.grid, self.sigma = grid, float(sigma)
        self.axis = slab_axis(observations.mask)
        self._smoothing = observations.smoothing_scale
        residual = np.where(observations.mask, observations.data - observations.field_mean, 0.0)
        self._norm = grid.n_cells / grid.volume
        if self.axis is None:
            self._build_diagonal(residual)
        else:
            self._build_slab(residual, observations.mask)

    def _beam2(self, k):
        return 1.0 if self._smoothing is None else np.exp(-(k * self._smoothing)**2)

    def _build_diagonal(self, residual):
        coeff = np.fft.rfftn(residual, norm="ortho")
        k = self.grid.k_magnitude_half()
        w = self.grid.multiplicity_half()
        self.k, inverse = _unique_groups(k.ravel())
        self._count = np.bincount(inverse, weights=w.ravel())
        self._power = np.bincount(inverse, weights=(w * np.abs(coeff)**2).ravel())
        self._beam = self._beam2(self.k)

    def _build_slab(self, residual, mask):
        a = self.axis
        moved = np.moveaxis(residual, a, 0)
        k_full = np.moveaxis(self.grid.k_magnitude_full(), a, 0)
        n0, _, n2 = moved.shape
        observed = np.flatnonzero(np.moveaxis(mask, a, 0).all(axis=(1, 2)))
        m2 = n2 // 2 + 1
        coeff = np.fft.rfftn(moved, axes=(1, 2), norm="ortho")[observed]    # (m, n1, m2)
        w = np.full(m2, 2.0)
        w[0] = 1.0
        if n2 % 2 == 0:
            w[-1] = 1.0
        k_perp = k_full[0, :, :m2]
        distinct, inverse = _unique_groups(k_perp.ravel())
        columns = coeff.reshape(observed.size, -1)                        # (m, n_columns)
        weights = np.broadcast_to(w, k_perp.shape).ravel()
        scatter = np.zeros((distinct.size, observed.size, observed.size))
        for g in range(distinct.size):
            z = columns[:, inverse == g] * np.sqrt(weights[inverse == g])
            scatter[g] = (z @ z.conj().T).real
        self._scatter = scatter
        self._count = np.bincount(inverse, weights=weights)
        k_axis = 2.0 * np.pi * np.fft.fftfreq(n0, d=self.grid.box_size[a] / n0)
        self.k = np.sqrt(k_axis[None, :]**2 + distinct[:, None]**2)            # (groups, n0)
        self._beam = self._beam2(self.k)
        self._lag = (observed[:, None] - observed[None, :]) % n0               # (m, m)
        self._m = observed.size

    def log_likelihood(self, power) -> np.ndarray:
        """log p(d | P) for P at ``k`` (shape (..., *k.shape)): normalised, as the engine's."""
        power = np.asarray(power, dtype=np.float64)
        signal = self._beam * power * self._norm
        if self.axis is None:
            total = signal + self.sigma**2
            return 0.5 * np.sum(-self._count * np.log(2.0 * np.pi * total) - self._power / total, axis=-1)
        lag_cov = np.fft.ifft(signal, axis=-1).real                           # (..., groups, n0)
        cov = lag_cov[..., self._lag] + self.sigma**2 * np.eye(self._m)        # (..., groups, m, m)
        chol = np.linalg.cholesky(cov)
        log_det = 2.0 * np.sum(np.log(np.diagonal(chol, axis1=-2, axis2=-1)), axis=-1)
        quad = np.einsum("...ij,...ji->...", np.linalg.inv(cov), self._scatter)
        per_group = -self._count * (self._m * _LOG_2PI + log_det) - quad
        return 0.5 * np.sum(per_group, axis=-1)

    def for_spectrum(self, spectrum: PowerSpectrum, **overrides) -> np.ndarray:
        """log p(d | P) for a spectrum; overrides with a leading batch axis give a batch."""
        shaped = {name: np.reshape(value, np.shape(value) + (1,) * self.k.ndim)
                  for name, value in overrides.items()}
        return self.log_likelihood(spectrum.evaluate(self.k, **shaped))


@dataclass(frozen=True)
class HyperPosterior:
    """Posterior moments per sampled hyperparameter (dicts keyed by name): ``mean`` / ``sd`` of
    theta (the recorded value), ``eta_mean`` / ``eta_sd`` of its unconstrained coordinate;
    ``eta_corr``: the correlation matrix of eta in ``names``' order (quadrature only)."""

    names: tuple[str, ...]
    mean: dict
    sd: dict
    eta_mean: dict
    eta_sd: dict
    method: str
    eta_corr: np.ndarray | None = None


def _sampled(hyper_priors) -> list[tuple[str, object]]:
    return [(name, prior) for name, prior in hyper_priors.items() if not prior.is_fixed]


def _log_posterior_fn(marginal: GaussianMarginal, spectrum, sampled):
    """eta (n, d) -> log p(eta | d) + const: likelihood, priors of eta, band powers' walk."""
    def log_post(eta):
        eta = np.atleast_2d(eta)
        overrides = {name: prior.forward(eta[:, i]) for i, (name, prior) in enumerate(sampled)}
        lp = marginal.for_spectrum(spectrum, **overrides)
        for i, (_, prior) in enumerate(sampled):
            lp = lp + prior.unconstrained_logpdf(eta[:, i])
        if isinstance(spectrum, BandPowers) and spectrum.random_walk_scale is not None:
            columns = {name: i for i, (name, _) in enumerate(sampled)}
            log_bins = np.stack([eta[:, columns[n]] if n in columns else np.full(len(eta), math.log(p))
                                 for n, p in zip(spectrum.parameters, spectrum.powers)], axis=-1)
            lp = lp + spectrum.log_random_walk_prior(log_bins)
        return lp
    return log_post


def _hessian(f, x, steps) -> np.ndarray:
    """Central finite-difference Hessian of a scalar function."""
    d = x.size
    h = np.zeros((d, d))
    basis = np.eye(d) * steps
    for i in range(d):
        for j in range(i, d):
            ei, ej = basis[i], basis[j]
            value = (f(x + ei + ej) - f(x + ei - ej) - f(x - ei + ej) + f(x - ei - ej)) / (4 * steps[i] * steps[j])
            h[i, j] = h[j, i] = value
    return h


def _laplace(log_post, start) -> tuple[np.ndarray, np.ndarray]:
    """(mode, covariance) of exp(log_post) in eta."""
    f = lambda x: -float(log_post(x[None, :])[0])  # noqa: E731
    x = np.asarray(start, dtype=np.float64)
    for method in ("Nelder-Mead", "BFGS"):
        x = optimize.minimize(f, x, method=method, options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000}
                              if method == "Nelder-Mead" else {"gtol": 1e-9}).x
    steps = np.full(x.size, 1e-2)
    for _ in range(3):          # steps a tenth of the sd, from the last estimate
        cov = np.linalg.inv(-_hessian(lambda y: -f(y), x, steps))
        if not np.all(np.linalg.eigvalsh(cov) > 0):
            raise ValueError("the hyperparameter posterior has no proper mode (check their priors)")
        steps = 0.1 * np.sqrt(np.diag(cov))
    return x, cov


def hyper_posterior(grid: Grid, observations: Observations, spectrum: PowerSpectrum, hyper_priors,
                    nodes: int | None = None, width: float = 8.0) -> HyperPosterior:
    """Exact (quadrature) posterior of up to 3 sampled hyperparameters (module docstring).

    ``hyper_priors``: name -> ``core.priors`` object, as the engine's ``FieldPosterior`` takes
    them (fixed ones are held at their value; ``spectrum`` holds the other values). ``nodes``
    per axis: 161 / 61 / 31 for 1 / 2 / 3 dimensions by default."""
    sampled = _sampled(hyper_priors)
    if not 1 <= len(sampled) <= 3:
        raise ValueError(f"quadrature over {len(sampled)} sampled hyperparameters: 1 to 3 are done here "
                         "(band powers: band_posterior)")
    marginal = GaussianMarginal(grid, observations)
    log_post = _log_posterior_fn(marginal, spectrum, sampled)
    d = len(sampled)
    nodes = nodes or {1: 161, 2: 61, 3: 31}[d]
    mode, cov = _laplace(log_post, [prior.unconstrained_median() for _, prior in sampled])
    factor = np.linalg.cholesky(cov)
    for _ in range(4):
        axis = np.linspace(-width, width, nodes)
        t = np.stack(np.meshgrid(*([axis] * d), indexing="ij"), axis=-1).reshape(-1, d)
        eta = mode + t @ factor.T
        lp = np.concatenate([log_post(part) for part in np.array_split(eta, max(1, len(eta) // 512))])
        weight = np.exp(lp - lp.max())
        edge = np.any(np.abs(t) == width, axis=1)
        if weight[edge].max(initial=0.0) < 1e-12 * weight.sum():
            break
        width, nodes = 1.5 * width, int(1.5 * nodes) | 1
    else:
        raise ValueError("the hyperparameter posterior reaches the edge of the quadrature grid "
                         f"(+-{width / 1.5:g} Laplace sd): it is far from Gaussian")
    weight /= weight.sum()
    result = {key: {} for key in ("mean", "sd", "eta_mean", "eta_sd")}
    for i, (name, prior) in enumerate(sampled):
        theta = prior.forward(eta[:, i])
        for key, values in (("", theta), ("eta_", eta[:, i])):
            mean = float(np.sum(weight * values))
            result[key + "mean"][name] = mean
            result[key + "sd"][name] = float(np.sqrt(np.sum(weight * (values - mean)**2)))
    centred = eta - np.sum(weight[:, None] * eta, axis=0)
    cov = centred.T @ (weight[:, None] * centred)
    sd = np.sqrt(np.diag(cov))
    return HyperPosterior(tuple(name for name, _ in sampled), method=f"quadrature {nodes}^{d}",
                          eta_corr=cov / np.outer(sd, sd), **result)


def _chain_marginals(grids, phi, tau) -> list[np.ndarray]:
    """Normalised marginal weights on each bin's nodes of prod_b exp(phi_b(eta_b)) times the
    random walk prod_b N(eta_{b+1} - eta_b; 0, tau) (tau None: independent bins), by a
    forward-backward pass in log space."""
    nb = len(grids)

    def link(b):
        diff = (grids[b + 1][None, :] - grids[b][:, None]) / tau
        return -0.5 * diff * diff

    forward = [phi[0]]
    for b in range(nb - 1):
        message = logsumexp(forward[-1][:, None] + link(b), axis=0) if tau is not None else logsumexp(forward[-1])
        forward.append(phi[b + 1] + message)
    backward = [np.zeros_like(phi[-1])]
    for b in range(nb - 2, -1, -1):
        after = phi[b + 1] + backward[0]
        backward.insert(0, logsumexp(link(b) + after[None, :], axis=1) if tau is not None
                        else np.full(grids[b].size, logsumexp(after)))
    weights = []
    for b in range(nb):
        lp = forward[b] + backward[b]
        w = np.exp(lp - lp.max())
        weights.append(w / w.sum())
    return weights


def _band_inputs(grid: Grid, observations: Observations, spectrum, hyper_priors):
    """``band_posterior``'s sampled bins and Gaussian marginal, or a ValueError saying why it
    cannot answer."""
    if not isinstance(spectrum, BandPowers):
        raise ValueError("band_posterior: the spectrum must be band powers")
    sampled = _sampled(hyper_priors)
    if [name for name, _ in sampled] != list(spectrum.parameters):
        raise ValueError("band_posterior: every bin must be sampled")
    if any(prior.dist != "lognormal" for _, prior in sampled):
        raise ValueError("band_posterior: band powers take lognormal priors")
    marginal = GaussianMarginal(grid, observations)
    if marginal.axis is not None:
        raise ValueError("band_posterior: the bins are independent only without a mask (a slab couples "
                         "them); use hyper_posterior for up to 3 bins")
    return sampled, marginal


def band_posterior(grid: Grid, observations: Observations, spectrum: BandPowers, hyper_priors,
                   resolution: int = 400) -> HyperPosterior:
    """Exact per-bin posterior of band powers without a mask (module docstring); every bin
    sampled with a lognormal prior (eta_b = log P_b). ``resolution``: grid nodes per 20
    Laplace sd of a bin (at least 5 per random-walk scale)."""
    sampled, marginal = _band_inputs(grid, observations, spectrum, hyper_priors)
    bins = spectrum.bin_index(marginal.k)
    nb, tau = spectrum.n_bins, spectrum.random_walk_scale
    members = [bins == b for b in range(nb)]
    gain = [marginal._beam[mask] * marginal._norm if np.ndim(marginal._beam) else
            np.full(int(mask.sum()), marginal._norm) for mask in members]
    count = [marginal._count[mask] for mask in members]
    power = [marginal._power[mask] for mask in members]
    sigma2 = marginal.sigma**2

    def unary(b, eta):
        """log p(d_b | P_b = e^eta) + log prior(eta) for nodes eta (any shape)."""
        total = gain[b] * np.exp(np.asarray(eta)[..., None]) + sigma2
        lik = 0.5 * np.sum(-count[b] * np.log(total) - power[b] / total, axis=-1)
        return lik + sampled[b][1].unconstrained_logpdf(eta)

    def joint(x):
        lp = sum(float(unary(b, x[b])) for b in range(nb))
        return lp + (float(spectrum.log_random_walk_prior(x)) if tau is not None else 0.0)

    start = np.array([prior.unconstrained_median() for _, prior in sampled])
    x = optimize.minimize(lambda y: -joint(y), start, method="L-BFGS-B").x
    h = 1e-4
    curvature = np.array([(float(unary(b, x[b] + h)) - 2 * float(unary(b, x[b])) + float(unary(b, x[b] - h))) / h**2
                          for b in range(nb)])
    precision = np.diag(-curvature)
    if tau is not None:
        for b in range(nb - 1):
            precision[b, b] += 1 / tau**2
            precision[b + 1, b + 1] += 1 / tau**2
            precision[b, b + 1] = precision[b + 1, b] = -1 / tau**2
    sd = np.sqrt(np.diag(np.linalg.inv(precision)))
    span = np.full(nb, 10.0)            # +- this many Laplace sd; doubled for a bin whose tail reaches it
    for _ in range(5):
        grids = []
        for b in range(nb):
            step = 20 * sd[b] / resolution if tau is None else min(20 * sd[b] / resolution, tau / 5)
            half = min(int(math.ceil(span[b] * sd[b] / step)), 20000)
            grids.append(x[b] + step * np.arange(-half, half + 1))
        weights = _chain_marginals(grids, [unary(b, grids[b]) for b in range(nb)], tau)
        reaching = [b for b, w in enumerate(weights) if max(w[0], w[-1]) > 1e-12]
        if not reaching:
            break
        span[reaching] *= 2
    else:
        raise ValueError(f"band_posterior: the posterior of bin {reaching[0]} reaches the edge of its grid "
                         f"(+-{span[reaching[0]] / 2:g} Laplace sd)")
    result = {key: {} for key in ("mean", "sd", "eta_mean", "eta_sd")}
    for b, (name, prior) in enumerate(sampled):
        for key, values in (("", prior.forward(grids[b])), ("eta_", grids[b])):
            mean = float(np.sum(weights[b] * values))
            result[key + "mean"][name] = mean
            result[key + "sd"][name] = float(np.sqrt(np.sum(weights[b] * (values - mean)**2)))
    return HyperPosterior(tuple(spectrum.parameters), method="forward-backward per bin", **result)


def hyper_posterior_for_config(config) -> HyperPosterior:
    """The exact posterior of a field config's sampled hyperparameters (reads its data file)."""
    from core.field.power_spectrum import hyperparameter_priors, prior_spectrum
    from core.io import load_observations, load_prior_table

    _, observations, grid = load_observations(config)
    priors = hyperparameter_priors(config.prior)
    values = {name: prior.median() for name, prior in priors.items()}
    spectrum = prior_spectrum(config.prior, load_prior_table(config), values, grid=grid)
    if isinstance(spectrum, BandPowers) and len(_sampled(priors)) > 3:
        return band_posterior(grid, observations, spectrum, priors)
    return hyper_posterior(grid, observations, spectrum, priors)
