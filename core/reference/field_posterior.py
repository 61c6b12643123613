"""The exact posterior of a Gaussian field run, in the space the engine stores its draws.

numpy/scipy only (the GUI process imports this module; the work is done by
``core.reference.wiener``). For a run config with ``model.kind = "field"``, a Gaussian
likelihood and every P(k) hyperparameter fixed, the posterior of the field is
Gaussian and known in closed form (the Wiener filter); this module computes its
per-voxel mean and standard deviation so that the sampler's running moments can be
checked against them.

Which field. The engine stores (``core.engine.models.FieldModel.field``) the noiseless model
of the data,

    x = B s + field_mean,

with s the Gaussian random field (prior mode variance S_k = P(|k|) N^2 / V, S_0 = 0,
``core.field.grid``), B the optional Gaussian beam exp(-(k R)^2 / 2), R =
``likelihood.smoothing_scale`` (B = 1 when R = 0), and ``field_mean`` the fixed mean
the likelihood adds. Its draws and its ``field_moments`` are of x, not of s. Since B
is diagonal in Fourier space, t = B s is itself a stationary Gaussian field with mode
variance

    S'_k = B_k^2 S_k,

and the data are d = t + field_mean + n on the observed voxels. So the posterior of
the stored field is the Wiener posterior of t with prior S' and no beam, computed on
d - field_mean, shifted back by field_mean:

    mean(x) = m_t + field_mean,      std(x) = std(t)

(``core.reference.wiener.wiener_posterior(d - field_mean, S', sigma, mask)``). Its mean has the
spatial average field_mean exactly (the k = 0 mode of t is fixed at 0).

What is not covered (``ExactNotApplicable``, a ValueError, says which): the integral
model, the Poisson-log-normal likelihood (not Gaussian), and sampled hyperparameters
(the posterior is then a mixture over P(k), not one Gaussian).

Standard deviation. ``std="auto"`` (the default) takes core.reference.wiener's choice: the
closed form when nothing is masked and the noise is uniform, the exact dense diagonal
up to 4096 cells, otherwise a Monte-Carlo estimate from ``n_samples`` exact posterior
draws (relative error 1/sqrt(2 n_samples) per voxel; ``ExactPosterior.std_rel_error``),
drawn in batches so that a caller can show the estimate as it improves (``on_progress``).
Cost on the 2-core test machine with the demo's mask (slab and dropouts): about 0.1 s
for the mean and 0.13 s per draw at 32^3, 1.5 s and 1.9 s per draw at 64^3 (each draw
is one preconditioned CG solve).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

from core.config import RunConfig
from core.field.grid import Grid
from core.field.power_spectrum import prior_spectrum
from core.io import load_prior_table
from core.priors import SampledPrior
from core.reference.wiener import AUTO_EXACT_STD_MAX_CELLS, posterior_samples, wiener_posterior

__all__ = ["ExactNotApplicable", "ExactPosterior", "exact_not_applicable",
           "stored_field_mode_variance", "exact_posterior_for_config"]


class ExactNotApplicable(ValueError):
    """The run's posterior is not one Gaussian (or not a field): the message says why."""


class ExactPosterior(NamedTuple):
    """Per-voxel posterior moments of the stored field x = B s + field_mean.

    mean, std: float64 arrays of the grid shape (std None only in the first progress
        report of a sampled std, before any draw).
    mean_method: "closed_form" or "cg" (core.reference.wiener).
    std_method: "closed_form", "exact" or "sample".
    std_rel_error: relative Monte-Carlo error of std, 1/sqrt(2 n_samples) (0 for the exact
        methods).
    n_samples: the number of exact draws behind a sampled std (0 otherwise).
    iterations, residual, converged: of the conjugate-gradient mean solve.
    field_mean: the fixed mean added to the field.
    """

    mean: np.ndarray
    std: np.ndarray
    mean_method: str
    std_method: str
    std_rel_error: float
    n_samples: int
    iterations: int
    residual: float
    converged: bool
    field_mean: float

    def describe(self) -> str:
        """One line: how mean and std were computed."""
        mean = ("closed form (uniform noise, no mask)" if self.mean_method == "closed_form" else
                f"conjugate gradients ({self.iterations} iterations, residual {self.residual:.1e})")
        if self.std is None:
            std = "computing (exact posterior draws)"
        elif self.std_method == "sample":
            std = (f"Monte Carlo from {self.n_samples} exact posterior draws "
                   f"(+-{100 * self.std_rel_error:.0f}% per voxel)")
        elif self.std_method == "exact":
            std = "exact (dense)"
        else:
            std = "closed form"
        return f"Wiener mean: {mean}; std: {std}"


def exact_not_applicable(cfg: RunConfig) -> str | None:
    """Why the exact posterior does not apply to this config, or None when it does.

    Cheap (reads the config only): the integral model, a Poisson likelihood and sampled
    P(k) hyperparameters each give a reason.
    """
    if cfg is None:
        return "the run's config is unknown"
    if cfg.model.kind != "field":
        return (f"not a field run (model.kind = {cfg.model.kind!r}): the exact Gaussian "
                "posterior applies to the field model only")
    if cfg.likelihood is not None and cfg.likelihood.kind == "python":
        return (f"the likelihood is the model file {cfg.likelihood.file}'s: Fieldscope cannot know that it "
                "is Gaussian, so it has no closed form to compare with")
    if cfg.likelihood is None or cfg.likelihood.kind != "gaussian":
        kind = None if cfg.likelihood is None else cfg.likelihood.kind
        return (f"the likelihood is {kind!r} (Poisson counts), not Gaussian: the posterior "
                "has no closed form")
    if cfg.prior.kind == "band_powers":
        return ("the band powers are sampled: the posterior is a mixture over P(k), not one "
                "Gaussian (their posterior is drawn in the P(k) view)")
    sampled = [name for name in ("amplitude", "index", "cutoff_scale")
               if isinstance(getattr(cfg.prior, name, None), SampledPrior)]
    if sampled:
        return (f"P(k) hyperparameter{'s' if len(sampled) > 1 else ''} "
                f"{', '.join(sampled)} {'are' if len(sampled) > 1 else 'is'} sampled: the "
                "posterior is a mixture over P(k), not one Gaussian (fix them in [prior] "
                "for an exact reference)")
    return None


def stored_field_mode_variance(cfg: RunConfig, shape) -> np.ndarray:
    """S'_k = B_k^2 P(|k|) N^2 / V on the rfftn half grid (S'_0 = 0): the prior mode
    variance of the stored field B s (see the module docstring)."""
    reason = exact_not_applicable(cfg)
    if reason:
        raise ExactNotApplicable(reason)
    grid = Grid(tuple(int(n) for n in shape), cfg.grid.box_size, cfg.grid.unit)
    k = grid.k_magnitude_half()
    nonzero = k > 0
    power = prior_spectrum(cfg.prior, load_prior_table(cfg)).evaluate(np.where(nonzero, k, 1.0))
    variance = np.where(nonzero, power * grid.n_cells**2 / grid.volume, 0.0)
    smoothing = cfg.likelihood.smoothing_scale
    if smoothing:
        variance = variance * np.exp(-(k * smoothing) ** 2)     # B_k^2
    return variance


def _inputs(cfg: RunConfig, observed: dict | None):
    """(data with masked voxels 0, mask, noise sd: scalar or map) from the store's
    observed_data (``observed``) or, when that has no "data", from the config's files."""
    observed = observed or {}
    if observed.get("data") is not None:
        data = np.asarray(observed["data"], np.float64)
        if data.ndim != 3:
            raise ValueError(f"observed data: needs a 3-D array, got shape {data.shape}")
        mask = observed.get("mask")
        mask = np.isfinite(data) if mask is None else np.asarray(mask, bool) & np.isfinite(data)
        noise = observed.get("noise")
        if noise is None:
            if cfg.data.noise_sigma is None:
                raise ValueError("observed data: no noise map stored and no data.noise_sigma "
                                 "in the config")
            noise = float(cfg.data.noise_sigma)
        else:
            noise = np.asarray(noise, np.float64)
    else:
        from core.field.observations import Observations
        from core.io import load_field_inputs

        inputs = load_field_inputs(cfg)
        kwargs = {"noise_map": inputs.noise_map} if inputs.noise_map is not None else \
            {"noise_sigma": inputs.noise_sigma if inputs.noise_sigma is not None
             else cfg.data.noise_sigma}
        obs = Observations.create(inputs.data, mask=inputs.mask, name=str(cfg.data_path),
                                  **kwargs)
        data, mask, noise = obs.data, obs.mask, obs.noise
    if not mask.any():
        raise ValueError("observed data: every voxel is masked; the data carry no information")
    if np.ndim(noise) == 3:
        observed_noise = noise[mask]
        if np.all(observed_noise == observed_noise[0]):
            noise = float(observed_noise[0])        # uniform: the closed form applies
    return np.where(mask, data, 0.0), mask, noise


def _resolve_std(std: str, mask: np.ndarray, noise) -> str:
    """core.reference.wiener's choice for std="auto" (closed form, dense exact, or sampled)."""
    if std != "auto":
        return std
    if mask.all() and np.ndim(noise) == 0:
        return "closed_form"
    return "exact" if mask.size <= AUTO_EXACT_STD_MAX_CELLS else "sample"


def exact_posterior_for_config(cfg: RunConfig, observed: dict | None = None, *,
                               std: str = "auto", n_samples: int = 64, batch: int = 8,
                               seed: int = 0, tol: float = 1e-8, maxiter: int = 10_000,
                               on_progress: Callable[["ExactPosterior"], None] | None = None,
                               ) -> ExactPosterior:
    """The Wiener posterior (per-voxel mean and std) of the field a run stores.

    cfg: the run's config (``core.config.RunConfig``), model.kind "field".
    observed: the run store's observed_data (``data`` with NaN where masked, ``mask``,
        ``noise``; as ``app.state.run_state.RunState.observed``); None or without ``data``:
        the data, mask and noise are read from the config's files.
    std: "auto", "exact" (dense, N <= 8192) or "sample" (see the module docstring).
    n_samples, batch, seed: a sampled std uses n_samples exact posterior draws
        (``core.reference.wiener.posterior_samples``), drawn ``batch`` at a time, batch i from the
        i-th child of ``numpy.random.SeedSequence(seed)``, so the numbers are the same
        every time and the first batches do not depend on n_samples.
    tol, maxiter: of the conjugate-gradient solves.
    on_progress: called with a partial ``ExactPosterior`` after the mean (std None,
        n_samples 0) and after each batch of draws (std from the draws so far) when the
        std is sampled; it may raise to abandon the computation (the exception propagates).

    Returns an ``ExactPosterior`` of x = B s + field_mean (see the module docstring).
    Raises ``ExactNotApplicable`` for the integral model, a Poisson likelihood or
    sampled hyperparameters, and ValueError (loaders' LoadError included) for bad data.
    """
    reason = exact_not_applicable(cfg)
    if reason:
        raise ExactNotApplicable(reason)
    if std not in ("auto", "exact", "sample"):
        raise ValueError(f"std must be 'auto', 'exact' or 'sample', got {std!r}")
    if isinstance(n_samples, bool) or int(n_samples) != n_samples or n_samples < 2:
        raise ValueError(f"n_samples must be an integer >= 2, got {n_samples!r}")
    if isinstance(batch, bool) or int(batch) != batch or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    data, mask, noise = _inputs(cfg, observed)
    field_mean = float(cfg.likelihood.field_mean)
    variance = stored_field_mode_variance(cfg, data.shape)
    signal = np.where(mask, data - field_mean, 0.0)
    mask_arg = None if mask.all() else mask
    method = _resolve_std(std, mask, noise)
    if method != "sample":
        result = wiener_posterior(signal, variance, noise, mask=mask_arg,
                                  std="auto" if method == "closed_form" else method,
                                  tol=tol, maxiter=maxiter)
        return ExactPosterior(
            mean=result.mean + field_mean, std=result.std, mean_method=result.mean_method,
            std_method=result.std_method, std_rel_error=0.0, n_samples=0,
            iterations=int(result.iterations), residual=float(result.residual),
            converged=bool(result.converged), field_mean=field_mean)

    result = wiener_posterior(signal, variance, noise, mask=mask_arg, std="none", tol=tol,
                              maxiter=maxiter)
    partial = ExactPosterior(
        mean=result.mean + field_mean, std=None, mean_method=result.mean_method,
        std_method="sample", std_rel_error=math.inf, n_samples=0,
        iterations=int(result.iterations), residual=float(result.residual),
        converged=bool(result.converged), field_mean=field_mean)
    if on_progress is not None:
        on_progress(partial)
    n_samples, batch = int(n_samples), int(batch)
    seeds = np.random.SeedSequence(seed)
    sum_squares = np.zeros(signal.shape)
    done = 0
    while done < n_samples:
        size = min(batch, n_samples - done)
        draws = posterior_samples(signal, variance, noise, mask=mask_arg,
                                  n_samples=max(size, 2), rng=np.random.default_rng(seeds.spawn(1)[0]),
                                  tol=tol, maxiter=maxiter)
        # deviations from the mean these draws were centred on: mean exactly zero, so
        # mean(dev^2) is an unbiased variance (no degree of freedom lost)
        deviations = draws.samples[:size] - draws.mean
        sum_squares += np.einsum("i...,i...->...", deviations, deviations)
        done += size
        partial = partial._replace(std=np.sqrt(sum_squares / done), n_samples=done,
                                   std_rel_error=1.0 / math.sqrt(2.0 * done))
        if on_progress is not None and done < n_samples:
            on_progress(partial)
    return partial
