"""Benchmark: effective samples per gradient evaluation and per second, against the exact answer.

What a user pays for is independent draws of the field per unit of compute. This benchmark runs
Fieldscope's samplers and two peers (BlackJAX NUTS and MCLMC, when the ``bench`` extra is
installed) on the identical posterior, side by side in one run, and counts each sampler's
effective sample size n_eff from its error against the exact posterior, per 1000 gradient
evaluations and per second of post-warmup wall time.

The posteriors (issue #12; all from one data set, ``write_cases``):

    nomask  n^3 Gaussian field (n = 32), box 200, P(k) = A (k / 0.1)^-2 with A set so that the
            field's variance is 1, uniform noise sigma 0.5, every voxel observed, P(k) fixed
    slab    the same data with a slab of 25 % of the planes (axis 0) masked
    sphere  the same data with a central sphere of 25 % of the volume masked
    index   as nomask, with the P(k) index sampled (prior normal(-2, 0.5))
    slab_index  as slab, with the index sampled

Float32, 2 chains, the same starting points for every sampler (the engine's
``initial_state(chains, seed)``), and a budget of ``--budget`` post-warmup gradient evaluations per
chain (24 000; each sampler stops at the first chunk that reaches it).

Exact answers (numpy, ``core.reference``):

    nomask  the Wiener filter in closed form: mean, std and the posterior variance of every
            Fourier mode
    slab, sphere  the Wiener mean by conjugate gradients; std per voxel and variance per mode from
            ``--reference-draws`` exact posterior draws (perturbation sampling), whose Monte-Carlo
            error is taken out of n_eff on average (E[1/var_hat] = var^-1 n / (n - 2) for a variance
            from n draws; n / (n - 1) for a complex mode's) and is printed
    index   no mask, so the likelihood of the index is diagonal in Fourier space:
            log p(d | n) = -1/2 sum_k [|d_k|^2 / (S_k(n) + N sigma^2) + log(S_k(n) + N sigma^2)]
            (full grid, k != 0), and the posterior of the index is a 1-D quadrature
            (``index_reference``); the field's posterior is the mixture of the Wiener posteriors
            over it, so its mean, per-voxel std and per-mode variance are exact too (to the
            quadrature, whose fixed-index mean is checked against core.reference.wiener)
    slab_index  the index by quadrature of the slab's exact marginal likelihood
            (``core.reference.hyper_posterior``: dense per (k1, k2)); the field: exact Wiener means
            and ``--reference-draws`` draws at 5 Gauss-Hermite nodes of the index's posterior

Measures (``field_efficiency``): with e = (sample mean of the field over every post-warmup draw of
both chains) - (exact mean),

    per voxel   z = e / exact std, n_eff = 1 / mean(z^2)
    per k-shell z_k^2 = |F(e)_k|^2 / V_k, V_k = E|F(x - m)_k|^2 the exact posterior variance of the
                mode (numpy's unnormalised DFT), n_eff(shell) = 1 / mean over its modes of z_k^2
    std         median over voxels of sample std / exact std (for unadjusted samplers: their bias)
    z rms       sqrt(mean(z^2)) = 1 / sqrt(n_eff): a biased sampler's error does not shrink with
                more draws, so its n_eff here is what its bias allows, not its autocorrelation's

For the index case also the index's ESS (bulk, ``core.store.diagnostics.ess_bulk``, equal to
ArviZ's) from the autocorrelation of its chains, and its mean and std against the quadrature.
Per 1000 gradients = n_eff / (post-warmup gradient evaluations of all chains / 1000); warmup
counted: over the warmup's and the sampling's gradients (the peers' tuning included); per second =
n_eff / post-warmup wall time (all chains vectorised in one program).

Fieldscope side: the real engine (``core.engine.engine.Engine``, in this process) for every
registered sampler (``core.samplers``) x preconditioner (``core.config.schema.PRECONDITIONERS``),
with the config's defaults for everything else, one config per combination written by
``core.config``'s writer; a combination the config refuses is skipped with the reason. Gradient evaluations are the store's
``sample_stats.n_steps`` (post-warmup) and ``warmup_sample_stats.n_steps``, times its ``timing``
attribute (warmup_seconds includes the XLA compilation). Warmup: the config's ``num_warmup``
(``--num-warmup``) for HMC and NUTS; the MCLMC / MAMS combinations tune for as many steps as
BlackJAX MCLMC does with the same budget (``peer_mclmc_tuning_steps`` of its budget / 2 steps:
4000 at 24 000 gradients), so that both are compared after the same tuning
(``--microcanonical-warmup config`` or a number instead); the table's warmup column shows each.

Peers (``--peers``, in a subprocess of their own: JAX and TensorFlow never share a process):
BlackJAX NUTS with ``window_adaptation`` (diagonal mass, as many warmup steps as the engine's
default ``num_warmup``) and BlackJAX MCLMC (``isokinetic_mclachlan``, 2 gradients per step) tuned
by ``mclmc_find_L_and_step_size`` with diagonal preconditioning, each chain adapted on its own, on
the whitened-latent log-density written in JAX (bench/blackjax_peers.py) in the engine's coordinates.
Before any peer runs, its log-density and gradient are compared with Fieldscope's at six points
(the starting points, prior draws and a third of a prior draw); a case whose densities differ
beyond float32 tolerance gets no peer figures, only the refusal. The peers' warmup time includes
their compilation (the sampling loop is compiled before its clock starts, as the engine's is).

Usage:
python bench/sampler_efficiency.py [--quick] [--cases nomask slab sphere index slab_index] [--algorithms hmc]
       [--peers | --no-peers] [--grid 32] [--budget 24000] [--reference-draws 256] [--json out.json]
       [--num-warmup N] [--microcanonical-warmup peer|config|N] [--peer-algorithms nuts mclmc]
       [--chunk-size peer|config|N]

Chunks: the peers run compiled chunks of 250 MCLMC or 25 NUTS steps with nothing stored; the engine
writes every chunk to its store (statistics, moments, a checkpoint). By default each combination's
``sampler.chunk_size`` is the peer chunk of its kind (``--chunk-size``), so both pay their per-chunk
costs as often; the draws do not depend on it (every step's seed is the run's seed and its index).

``--quick``: a 16^3 grid, 4000 gradients per chain, 64 reference draws (a few minutes). A new
config's run length: ``--budget 4000 --microcanonical-warmup 1000`` (2000 MCLMC draws of 2 gradients
after 1000 warmup steps). Timings are noisy when the cores are shared; gradient counts are not.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

__all__ = ["CASES", "Case", "Reference", "unit_variance_amplitude", "write_cases", "case_document",
           "fieldscope_combinations", "exact_reference", "index_reference", "index_log_likelihood",
           "field_efficiency", "peer_mclmc_tuning_steps", "warmup_steps", "did_not_sample",
           "comparison_lines", "main"]

BOX = 200.0
K_PIVOT = 0.1
INDEX = -2.0
NOISE = 0.5
SLAB_FRACTION = 0.25
INDEX_PRIOR = {"dist": "normal", "loc": -2.0, "scale": 0.5}
CHAINS = 2
DATA_SEED = 12
MCLMC_GRADIENTS_PER_STEP = 2        # isokinetic McLachlan: two new forces per step
#: steps per compiled chunk of the peers (bench/blackjax_peers.py); by default each
#: Fieldscope combination's ``sampler.chunk_size`` is the peer's of its kind (``--chunk-size``)
PEER_CHUNK_STEPS = {"nuts": 25, "mclmc": 250}
PEER_MCLMC_FRACTIONS = (0.1, 0.1, 0.1)   # mclmc_find_L_and_step_size's frac_tune1, 2, 3 (its defaults)


def peer_mclmc_tuning_steps(num_steps: int) -> int:
    """The steps BlackJAX's ``mclmc_find_L_and_step_size`` tunes for in a run of ``num_steps``
    (diagonal preconditioning: a third of stage 2 more; stage 3 only with >= 2 steps)."""
    f1, f2, f3 = PEER_MCLMC_FRACTIONS
    s1, s2, s3 = round(num_steps * f1), round(num_steps * f2), round(num_steps * f3)
    s2 += s2 // 3
    return s1 + s2 + (s3 if s3 >= 2 else 0)
#: the peers' density check (``blackjax_peers.check_density``): float32 log-density relative to
#: |log p|, gradient as ||g_jax - g_tf|| / ||g_tf||
DENSITY_RTOL, GRADIENT_RTOL = 2e-5, 1e-4


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    title: str
    data: str               # the data set: nomask, slab or sphere (its mask kind), folder/<data>.npz
    sampled_index: bool

    @property
    def masked(self) -> bool:
        return self.data != "nomask"


CASES = {
    "nomask": Case("nomask", "no mask", "nomask", sampled_index=False),
    "slab": Case("slab", "25 % slab masked", "slab", sampled_index=False),
    "sphere": Case("sphere", "a central sphere of 25 % of the volume masked", "sphere", sampled_index=False),
    "index": Case("index", "P(k) index sampled (no mask)", "nomask", sampled_index=True),
    "slab_index": Case("slab_index", "P(k) index sampled, 25 % slab masked", "slab", sampled_index=True),
}


# --------------------------------------------------------------------------- the cases


def unit_variance_amplitude(grid) -> float:
    """A of P(k) = A (k / K_PIVOT)^INDEX with a real-space variance (1/V) sum_{k != 0} P(k) = 1."""
    k = grid.k_magnitude_full()
    k = k[k > 0]
    return float(grid.volume / np.sum((k / K_PIVOT) ** INDEX))


def write_cases(folder: Path, n: int) -> dict:
    """folder/nomask.npz, slab.npz and sphere.npz (one truth and one noise draw; the slab masks
    25 % of the planes along axis 0, the sphere 25 % of the volume). Returns {"amplitude": A}."""
    from core.field.grid import Grid
    from core.field.power_spectrum import PowerLaw
    from core.field.synthetic import make_dataset, save_dataset

    grid = Grid((n, n, n), BOX)
    amplitude = unit_variance_amplitude(grid)
    spectrum = PowerLaw(amplitude=amplitude, index=INDEX, k_pivot=K_PIVOT)
    folder.mkdir(parents=True, exist_ok=True)
    for kind in ("none", "slab", "sphere"):     # one truth and noise draw (the seed), three masks
        dataset = make_dataset(grid, spectrum, NOISE, mask=kind, mask_fraction=SLAB_FRACTION, seed=DATA_SEED)
        save_dataset(folder / f"{'nomask' if kind == 'none' else kind}.npz", dataset)
    return {"amplitude": amplitude}


def case_document(case: Case, amplitude: float, sampler: dict) -> dict:
    """The config document of ``case`` with ``sampler`` settings (core.config validates it)."""
    data = {"path": f"{case.data}.npz", "noise_sigma": NOISE}
    if case.masked:
        data["mask"] = "mask"
    prior = {"kind": "power_law", "k_pivot": K_PIVOT, "amplitude": amplitude,
             "index": dict(INDEX_PRIOR) if case.sampled_index else INDEX}
    return {"model": {"kind": "field"}, "data": data, "grid": {"box_size": BOX}, "prior": prior,
            "field": {"parameterisation": "whitened", "dtype": "float32"}, "sampler": sampler}


def fieldscope_combinations() -> list[tuple[str, dict]]:
    """(label "algorithm/preconditioner", sampler settings) for every algorithm x preconditioner
    of ``core.config.schema`` (``ALGORITHMS`` x ``PRECONDITIONERS``)."""
    from core.config import schema

    return [(f"{algorithm}/{p}", {"algorithm": algorithm, "preconditioner": p})
            for algorithm in schema.ALGORITHMS for p in schema.PRECONDITIONERS]


def with_dense_modes(combos, values) -> list[tuple[str, dict]]:
    """Each fourier combination once per ``sampler.dense_modes`` value, labelled alg/fourier-N."""
    out = []
    for label, settings in combos:
        if settings.get("preconditioner") != "fourier":
            out.append((label, settings))
            continue
        out.extend((f"{label}-{v}", {**settings, "dense_modes": v}) for v in values)
    return out


# --------------------------------------------------------------------------- exact answers


@dataclasses.dataclass
class Reference:
    """The exact posterior of the stored field x.

    mean, std: per voxel; mode_var: V_k = E|F(x - m)_k|^2 on the rfftn half grid (0 at k = 0);
    voxel_bias, mode_bias: E[1 / var_hat] * var of a Monte-Carlo std / mode variance (1 when exact),
    divided out of mean(z^2); index: (mean, std) of the sampled index, or None; text: how."""

    mean: np.ndarray
    std: np.ndarray
    mode_var: np.ndarray
    voxel_bias: float
    mode_bias: float
    text: str
    index: tuple[float, float] | None = None


def _mode_variance(grid, amplitude, index) -> np.ndarray:
    """S_k = P(|k|) N^2 / V on the half grid, 0 at k = 0."""
    k = grid.k_magnitude_half()
    safe = np.where(k > 0, k, 1.0)
    return np.where(k > 0, amplitude * (safe / K_PIVOT) ** index * grid.n_cells**2 / grid.volume, 0.0)


def exact_reference(case: Case, folder: Path, amplitude: float, draws: int) -> Reference:
    """The exact posterior of ``case`` (see the module docstring)."""
    from core.field.grid import Grid
    from core.field.synthetic import load_dataset
    from core.reference.wiener import posterior_samples, wiener_posterior

    dataset = load_dataset(folder / f"{case.data}.npz")
    grid = Grid(dataset.data.shape, BOX)
    if case.sampled_index:
        return (masked_index_reference(dataset, grid, amplitude, draws) if case.masked
                else index_reference(dataset.data, grid, amplitude))
    variance = _mode_variance(grid, amplitude, INDEX)
    if not case.masked:
        result = wiener_posterior(dataset.data, variance, NOISE)
        noise_var = grid.n_cells * NOISE**2
        mode_var = variance * noise_var / (variance + noise_var)
        return Reference(result.mean, result.std, mode_var, 1.0, 1.0, "Wiener filter, closed form")
    t0 = time.perf_counter()
    exact = posterior_samples(dataset.data, variance, NOISE, mask=dataset.mask, n_samples=draws, rng=1,
                              tol=1e-10)
    deviations = exact.samples - exact.mean
    std = np.sqrt(np.mean(deviations**2, axis=0))
    spectra = np.fft.rfftn(deviations, axes=(1, 2, 3))
    mode_var = np.mean(np.abs(spectra) ** 2, axis=0)
    mode_var[0, 0, 0] = 0.0
    text = (f"Wiener mean by CG (residual {exact.max_residual:.0e}); std and mode variances from {draws} "
            f"exact draws (+-{100 / math.sqrt(2 * draws):.1f} % per voxel), {time.perf_counter() - t0:.0f} s")
    return Reference(exact.mean, std, mode_var, draws / (draws - 2.0), draws / (draws - 1.0), text)


def index_log_likelihood(data_spectrum, grid, amplitude, index) -> np.ndarray:
    """log p(d | index) up to a constant, for uniform noise NOISE and no mask, for each index in
    ``index`` (1-D): -1/2 sum over the full grid (k != 0) of |d_k|^2 / v_k + log v_k, with
    v_k = S_k(index) + N sigma^2 (the data's mode variance); the half grid counts each mode with
    its multiplicity."""
    k = grid.k_magnitude_half()
    nonzero = k > 0
    weight = grid.multiplicity_half()[nonzero]
    power = np.abs(data_spectrum[nonzero]) ** 2
    log_ratio = np.log(k[nonzero] / K_PIVOT)
    norm = amplitude * grid.n_cells**2 / grid.volume
    noise_var = grid.n_cells * NOISE**2
    out = []
    for n in np.atleast_1d(index):
        v = norm * np.exp(n * log_ratio) + noise_var
        out.append(-0.5 * np.sum(weight * (power / v + np.log(v))))
    return np.asarray(out)


def _index_posterior(data_spectrum, grid, amplitude, points: int = 801):
    """(grid of index values, normalised weights) of the index's posterior: prior x likelihood on
    a coarse grid over the prior's +-8 sd, then a fine one over the posterior's +-12 sd."""
    loc, scale = INDEX_PRIOR["loc"], INDEX_PRIOR["scale"]

    def log_post(n):
        return index_log_likelihood(data_spectrum, grid, amplitude, n) - 0.5 * ((n - loc) / scale) ** 2

    coarse = np.linspace(loc - 8 * scale, loc + 8 * scale, 4001)
    lp = log_post(coarse)
    w = np.exp(lp - lp.max())
    w /= w.sum()
    centre = float(np.sum(w * coarse))
    spread = max(float(np.sqrt(np.sum(w * (coarse - centre) ** 2))), coarse[1] - coarse[0])
    fine = np.linspace(centre - 12 * spread, centre + 12 * spread, points)
    lp = log_post(fine)
    w = np.exp(lp - lp.max())
    return fine, w / w.sum()


def index_reference(data, grid, amplitude) -> Reference:
    """The exact posterior of the index case: the index by quadrature, the field as the mixture
    of the Wiener posteriors at each index (no mask, uniform noise: closed forms per mode)."""
    from core.reference.wiener import wiener_mean_closed_form

    d_k = np.fft.rfftn(data)
    nodes, weights = _index_posterior(d_k, grid, amplitude)
    keep = weights > 1e-12 * weights.max()
    nodes, weights = nodes[keep], weights[keep] / weights[keep].sum()
    noise_var = grid.n_cells * NOISE**2
    mean_k = np.zeros_like(d_k)
    second_k = np.zeros(d_k.shape)
    post_var_k = np.zeros(d_k.shape)
    mean_x = np.zeros(grid.shape)
    second_x = np.zeros(grid.shape)
    for n, w in zip(nodes, weights):
        s = _mode_variance(grid, amplitude, n)
        m_k = s / (s + noise_var) * d_k
        c_k = s * noise_var / (s + noise_var)
        m_x = np.fft.irfftn(m_k, s=grid.shape, axes=(0, 1, 2))
        var_x = np.sum(grid.multiplicity_half() * c_k) / grid.n_cells**2
        mean_k += w * m_k
        second_k += w * np.abs(m_k) ** 2
        post_var_k += w * c_k
        mean_x += w * m_x
        second_x += w * (m_x**2 + var_x)
    mode_var = post_var_k + second_k - np.abs(mean_k) ** 2
    mode_var[0, 0, 0] = 0.0
    index_mean = float(np.sum(weights * nodes))
    index_std = float(np.sqrt(np.sum(weights * (nodes - index_mean) ** 2)))
    # the quadrature's fixed-index field posterior is core.reference.wiener's
    s = _mode_variance(grid, amplitude, index_mean)
    check = wiener_mean_closed_form(data, s, NOISE).mean
    mine = np.fft.irfftn(s / (s + noise_var) * d_k, s=grid.shape, axes=(0, 1, 2))
    if not np.allclose(mine, check, rtol=0, atol=1e-10 * np.abs(check).max()):
        raise RuntimeError("index reference: the fixed-index mean differs from core.reference.wiener's")
    return Reference(mean_x, np.sqrt(np.maximum(second_x - mean_x**2, 0.0)), mode_var, 1.0, 1.0,
                     f"index by quadrature ({len(nodes)} nodes): {index_mean:.4f} +- {index_std:.4f}; "
                     "field: the mixture of Wiener posteriors over it",
                     index=(index_mean, index_std))


def masked_index_reference(dataset, grid, amplitude, draws: int) -> Reference:
    """slab_index's posterior: the index's by quadrature of the exact marginal likelihood under
    the slab (``hyper_posterior``); the field's as the mixture over 5 Gauss-Hermite nodes of a
    normal with the index's exact mean and sd: each node's Wiener mean by CG and its share of
    the ``draws`` exact draws (perturbation sampling), the moments weighted by the nodes."""
    from core.field.observations import Observations
    from core.field.power_spectrum import PowerLaw
    from core.priors import NormalPrior
    from core.reference.hyper_posterior import hyper_posterior
    from core.reference.wiener import posterior_samples

    obs = Observations.create(dataset.data, mask=dataset.mask, noise_sigma=NOISE)
    prior = NormalPrior(loc=INDEX_PRIOR["loc"], scale=INDEX_PRIOR["scale"])
    exact = hyper_posterior(grid, obs, PowerLaw(amplitude=amplitude, index=INDEX, k_pivot=K_PIVOT), {"index": prior})
    centre, spread = exact.mean["index"], exact.sd["index"]
    nodes, weights = np.polynomial.hermite_e.hermegauss(5)
    weights = weights / weights.sum()
    parts = [posterior_samples(dataset.data, _mode_variance(grid, amplitude, centre + spread * t), NOISE,
                               mask=dataset.mask, n_samples=max(2, round(w * draws)), rng=i, tol=1e-10)
             for i, (t, w) in enumerate(zip(nodes, weights))]
    mean = sum(w * p.mean for w, p in zip(weights, parts))
    second = sum(w * np.mean((p.samples - mean) ** 2, axis=0) for w, p in zip(weights, parts))
    mode_var = sum(w * np.mean(np.abs(np.fft.rfftn(p.samples - mean, axes=(1, 2, 3))) ** 2, axis=0)
                   for w, p in zip(weights, parts))
    mode_var[0, 0, 0] = 0.0
    n = sum(p.samples.shape[0] for p in parts)
    return Reference(mean, np.sqrt(second), mode_var, n / (n - 2.0), n / (n - 1.0),
                     f"index by quadrature ({exact.method}, slab exact): {centre:.4f} +- {spread:.4f}; field: "
                     f"Wiener means and {n} exact draws at 5 Gauss-Hermite nodes over it", index=(centre, spread))


def field_efficiency(mean, std, reference: Reference, grid) -> dict:
    """n_eff per voxel and per k-shell of a sample mean (module docstring), std ratio, z rms.

    Returns {"n_eff", "z_rms", "std_ratio", "shell_k", "shell_n_eff"} (shells: core.field.grid's
    default edges, width k_f)."""
    z2 = ((np.asarray(mean, np.float64) - reference.mean) / reference.std) ** 2
    mean_z2 = float(np.mean(z2)) / reference.voxel_bias
    error_k = np.fft.rfftn(np.asarray(mean, np.float64) - reference.mean)
    edges = grid.shell_edges()
    shell = grid.shell_index_half(edges)
    weight = grid.multiplicity_half()
    valid = (shell >= 0) & (reference.mode_var > 0)
    zk2 = np.zeros(error_k.shape)
    zk2[valid] = np.abs(error_k[valid]) ** 2 / reference.mode_var[valid] / reference.mode_bias
    n_shells = len(edges) - 1
    sums = np.bincount(shell[valid], weights=(weight * zk2)[valid], minlength=n_shells)
    counts = np.bincount(shell[valid], weights=weight[valid], minlength=n_shells)
    present = counts > 0
    return {"n_eff": 1.0 / mean_z2, "z_rms": math.sqrt(mean_z2),
            "std_ratio": float(np.median(np.asarray(std, np.float64) / reference.std)),
            "shell_k": (0.5 * (edges[:-1] + edges[1:]))[present].tolist(),
            "shell_n_eff": (counts[present] / sums[present]).tolist()}


# --------------------------------------------------------------------------- Fieldscope


def _dump(document: dict, folder: Path):
    from core.config import config_from_dict, dump_config, parse_config

    text = dump_config(config_from_dict(document, folder))
    return parse_config(text, base_dir=folder), text


def density_checkpoints(config) -> dict:
    """Fieldscope's log-density and gradient at six points (two chains each): the engine's
    starting points, prior draws and a third of a prior draw; also the starting points."""
    import tensorflow as tf

    from core.engine.models import build_model

    model = build_model(config)
    start = [tf.convert_to_tensor(p) for p in model.initial_state(CHAINS, config.sampler.seed)]
    prior = model.posterior.draw_prior(CHAINS, config.sampler.seed + 1)
    out = {"start": [p.numpy() for p in start]}
    points = [start, prior, [p / 3.0 for p in prior]]
    values, grads = [], []
    for parts in points:
        parts = [tf.convert_to_tensor(p, model.dtype) for p in parts]
        with tf.GradientTape() as tape:
            tape.watch(parts)
            lp = model.target_log_prob_fn(*parts)
        values.append(lp.numpy())
        grads.append([g.numpy() for g in tape.gradient(lp, parts)])
    out["points"] = [[p.numpy() if hasattr(p, "numpy") else np.asarray(p) for p in parts] for parts in points]
    out["values"], out["grads"] = values, grads
    return out


def sampler_text(sampler) -> str:
    """The [sampler] settings a run used, less chains, seed and the run's length."""
    skip = {"chains", "seed", "num_samples", "thin"}
    return ", ".join(f"{f.name} = {getattr(sampler, f.name)}" for f in dataclasses.fields(sampler)
                     if f.name not in skip)


def run_fieldscope(case: Case, folder: Path, amplitude: float, label: str, settings: dict,
                   budget: int, seed: int) -> dict:
    """One engine run of ``case`` with sampler ``settings``, stopped at the first chunk whose
    post-warmup gradient evaluations reach ``budget`` per chain (mean over chains)."""
    from core.config import ConfigError
    from core.engine.engine import Control, Engine, EngineError
    from core.store.run_store import RunReader

    sampler = {**settings, "chains": CHAINS, "seed": seed, "num_samples": budget, "thin": budget}
    try:
        config, text = _dump(case_document(case, amplitude, sampler), folder)
    except ConfigError as err:
        return {"label": label, "skipped": f"the config refuses it: {err}"}
    control = Control()
    used = np.zeros(CHAINS)

    def emit(event):
        if event.get("type") == "chunk" and event["phase"] == "sampling":
            used[:] += np.asarray(event["stats"]["n_steps"]).sum(axis=1)
            if used.mean() >= budget:
                control.stop = True

    run_dir = Path(tempfile.mkdtemp(prefix=label.replace("/", "-") + "-", dir=folder))
    try:
        Engine(config, text, run_dir, emit=emit, control=control).start()
    except (EngineError, ConfigError, ValueError) as err:
        return {"label": label, "skipped": f"the engine refuses it: {err}"}
    reader = RunReader(run_dir)
    mean, std, count = reader.field_moments()
    timing = reader.attrs.get("timing") or {}
    out = {"label": label, "mean": mean, "std": std, "count": count,
           "grads": int(reader.stat("n_steps").sum()),
           "warmup_grads": int(reader.stat("n_steps", warmup=True).sum()),
           "seconds": float(timing.get("sampling_seconds", math.nan)),
           "warmup_seconds": float(timing.get("warmup_seconds", math.nan)),
           "divergences": int(reader.stat("diverging").sum()),
           "settings": (f"{sampler_text(config.sampler)}; step size {np.round(reader.stat('step_size')[:, -1], 4).tolist()}, "
                        f"L {np.round(reader.stat('trajectory_length')[:, -1], 2).tolist()}, "
                        f"acceptance {float(reader.stat('acceptance_rate').mean()):.2f}, "
                        f"warmup divergences {int(reader.stat('diverging', warmup=True).sum())}, "
                        f"gradients per step {reader.stat('n_steps').mean():.1f}")}
    if "index" in reader.param_names:
        out["index_chain"] = reader.param("index")
    return out


# --------------------------------------------------------------------------- the peers (JAX)


def peer_inputs(case: Case, folder: Path, amplitude: float, checks: dict) -> Path:
    """What the peer process needs for ``case``, in folder/<case>.peer.npz: the data, the noise,
    the whitened map's constants (computed here from the case, not read from Fieldscope), the
    starting points and Fieldscope's log-density and gradient at the check points."""
    from blackjax_peers import checkpoint_arrays

    from core.field.grid import Grid
    from core.field.synthetic import load_dataset

    dataset = load_dataset(folder / f"{case.data}.npz")
    grid = Grid(dataset.data.shape, BOX)
    mask = np.asarray(dataset.mask, bool)
    k = grid.k_magnitude_half()
    arrays = {"data": np.where(mask, dataset.data, 0.0), "inv_sigma": np.where(mask, 1.0 / NOISE, 0.0),
              "lik_const": np.array(-mask.sum() * (math.log(NOISE) + 0.5 * math.log(2 * math.pi))),
              "log_k_ratio": np.log(np.where(k > 0, k, 1.0) / K_PIVOT), "nonzero": (k > 0).astype(float),
              "log_shape": np.zeros(k.shape), "log_norm": np.array(math.log(amplitude * grid.n_cells**2 / grid.volume)),
              "index": np.array(INDEX), "hyper_names": np.array(["index"][:case.sampled_index], str),
              **{f"hyper_{key}": np.array([INDEX_PRIOR[key]][:case.sampled_index], float) for key in ("loc", "scale")}}
    arrays.update(checkpoint_arrays(checks))
    path = folder / f"{case.name}.peer.npz"
    np.savez(path, **arrays)
    return path


def run_peers(specs: list[dict], folder: Path, timeout: float) -> dict:
    """Run bench/blackjax_peers.py in a fresh Python process; returns {case: {peer: result}}."""
    spec_path = folder / "peers.json"
    out_path = folder / "peers.npz"
    spec_path.write_text(json.dumps({"cases": specs, "out": str(out_path), "chunk_steps": PEER_CHUNK_STEPS,
                                     "mclmc_gradients_per_step": MCLMC_GRADIENTS_PER_STEP,
                                     "rtol": [DENSITY_RTOL, GRADIENT_RTOL]}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "blackjax_peers.py"), str(spec_path)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-6:]
        return {"error": f"the peer process failed (status {proc.returncode}): " + " | ".join(tail)}
    with np.load(out_path, allow_pickle=False) as archive:
        meta = json.loads(str(archive["meta"]))
        arrays = {key: archive[key] for key in archive.files if key != "meta"}
    results: dict = {}
    for case_name, peers in meta.items():
        results[case_name] = {}
        for peer, info in peers.items():
            for key in ("mean", "std", "index_chain", "hyper_chain"):
                if f"{case_name}:{peer}:{key}" in arrays:
                    info[key] = arrays[f"{case_name}:{peer}:{key}"]
            results[case_name][peer] = info
    return results


# --------------------------------------------------------------------------- report


def _summarise(result: dict, reference: Reference, grid, case: Case) -> dict:
    eff = field_efficiency(result["mean"], result["std"], reference, grid)
    per_k = 1000.0 / result["grads"]
    row = {**{k: v for k, v in result.items() if k not in ("mean", "std", "index_chain")}, **eff}
    row["per_1000"] = eff["n_eff"] * per_k
    row["per_1000_warm"] = 1000.0 * eff["n_eff"] / (result["grads"] + result["warmup_grads"])
    row["per_s"] = eff["n_eff"] / result["seconds"]
    row["shell_per_1000"] = [v * per_k for v in eff["shell_n_eff"]]
    if case.sampled_index and "index_chain" in result:
        from core.store.diagnostics import ess_bulk

        chain = np.asarray(result["index_chain"], np.float64)
        ess = float(ess_bulk(chain))
        exact_mean, exact_std = reference.index
        row.update(index_ess=ess, index_per_1000=ess * per_k, index_per_s=ess / result["seconds"],
                   index_mean_error=(float(chain.mean()) - exact_mean) / exact_std,
                   index_std_ratio=float(chain.std(ddof=1)) / exact_std)
    return row


def _print_case(case: Case, n: int, rows: list[dict], skipped: list[str], reference: Reference):
    print(f"\n== {case.name}: {case.title}; {n}^3, box {BOX:g}, P(k) ~ k^{INDEX:g} (unit variance), "
          f"sigma {NOISE}, float32, {CHAINS} chains")
    print(f"   exact: {reference.text}")
    head = (f"{'sampler':<16} | {'grads':>6} | {'n_eff':>7} | {'/1000 grad':>10} | {'w/ warmup':>9} | {'/s':>7} | "
            f"{'min shell /1000 (k)':>19} | {'k1 /1000':>8} | {'std/exact':>9} | {'z rms':>6} | "
            f"{'warmup grads':>12} | {'warmup s':>8} | {'sampling s':>10} | {'div':>4}")
    if case.sampled_index:
        head += f" | {'index ESS /1000':>15} | {'/s':>6} | {'mean err/sd':>11} | {'sd/exact':>8}"
    print(head)
    print("-" * len(head))
    for r in rows:
        shells = r["shell_per_1000"]
        worst = int(np.argmin(shells))
        line = (f"{r['label']:<16} | {r['grads'] / CHAINS:6.0f} | {r['n_eff']:7.0f} | {r['per_1000']:10.1f} | "
                f"{r['per_1000_warm']:9.1f} | "
                f"{r['per_s']:7.1f} | {shells[worst]:10.1f} ({r['shell_k'][worst]:.3f}) | {shells[0]:8.1f} | "
                f"{r['std_ratio']:9.3f} | {r['z_rms']:6.3f} | {r['warmup_grads'] / CHAINS:12.0f} | "
                f"{r['warmup_seconds']:8.1f} | {r['seconds']:10.1f} | {r['divergences']:4d}")
        if case.sampled_index and "index_ess" in r:
            line += (f" | {r['index_per_1000']:15.2f} | {r['index_per_s']:6.2f} | "
                     f"{r['index_mean_error']:11.2f} | {r['index_std_ratio']:8.3f}")
        print(line)
    for r in rows:
        if r.get("settings"):
            print(f"   {r['label']}: {r['settings']}")
    for line in skipped:
        print(f"   skipped {line}")
    if rows:
        ks = rows[0]["shell_k"]
        picks = [i for i in (0, 1, 2, 3, 5, 7, 11, 15, 23) if i < len(ks)]
        print("   n_eff per 1000 gradients by k-shell (shell centre k):")
        print("   " + f"{'sampler':<16} | " + " | ".join(f"{ks[i]:6.3f}" for i in picks))
        for r in rows:
            print("   " + f"{r['label']:<16} | " + " | ".join(f"{r['shell_per_1000'][i]:6.1f}" for i in picks))
    for line in comparison_lines(rows):
        print("   " + line)


#: a run whose median std / exact std is outside this range did not sample the posterior
SAMPLED_STD_RANGE = (0.5, 2.0)


def did_not_sample(row: dict) -> str:
    """Why ``row``'s run did not sample the posterior ("" when it did): a median std / exact
    outside ``SAMPLED_STD_RANGE`` (a collapsed or exploded chain), or no effective sample."""
    lo, hi = SAMPLED_STD_RANGE
    ratio = row["std_ratio"]
    if not np.isfinite(ratio) or not lo <= ratio <= hi:
        return f"median std / exact {ratio:.3g}"
    if not row["n_eff"] >= 1:
        return f"n_eff {row['n_eff']:.3g}"
    return ""


def comparison_lines(rows: list[dict]) -> list[str]:
    """Best Fieldscope / best peer, per 1000 gradients and per second, over the runs that
    sampled the posterior (``did_not_sample``); those that did not are named instead."""
    lines = [f"{r['label']} did not sample this posterior ({why}): left out of the comparison"
             for r in rows if (why := did_not_sample(r))]
    good = [r for r in rows if not did_not_sample(r)]
    fs = [r for r in good if not r["label"].startswith("blackjax")]
    peers = [r for r in good if r["label"].startswith("blackjax")]
    if fs and peers:
        for key, what in (("per_1000", "per 1000 gradients"), ("per_1000_warm", "per 1000 gradients, warmup counted"),
                          ("per_s", "per second")):
            best_f = max(fs, key=lambda r: r[key])
            best_p = max(peers, key=lambda r: r[key])
            lines.append(f"best Fieldscope / best peer, n_eff {what}: {best_f['label']} {best_f[key]:.1f} / "
                         f"{best_p['label']} {best_p[key]:.1f} = {best_f[key] / best_p[key]:.2f}")
    elif fs and len(good) < len(rows):
        lines.append("no peer sampled this posterior: no ratio")
    return lines


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def warmup_steps(algorithm: str, args, budget: int) -> int:
    """The warmup steps of a combination: ``--microcanonical-warmup`` for MCLMC / MAMS (by
    default the tuning steps BlackJAX MCLMC takes for the same post-warmup budget, so that both
    are measured after the same tuning), else ``--num-warmup`` or the config schema's."""
    from core.config import schema
    from core.samplers import SAMPLERS

    config_warmup = args.num_warmup or schema.SamplerSection().num_warmup
    choice = str(args.microcanonical_warmup)
    if not SAMPLERS[algorithm].microcanonical or choice == "config":
        return int(config_warmup)
    if choice == "peer":
        return peer_mclmc_tuning_steps(budget // MCLMC_GRADIENTS_PER_STEP)
    return _steps_option("--microcanonical-warmup", choice, 0)


def _steps_option(option: str, choice: str, least: int) -> int:
    """A number of steps given to ``option`` (besides 'peer' and 'config'), at least ``least``."""
    try:
        steps = int(choice)
    except ValueError:
        raise SystemExit(f"{option} {choice!r}: 'peer', 'config' or a number of steps") from None
    if steps < least:
        raise SystemExit(f"{option} {steps}: a number of steps is >= {least}")
    return steps


def chunk_steps(algorithm: str, args) -> int:
    """``sampler.chunk_size`` of a combination: ``--chunk-size`` 'peer' (the default: the steps of
    the peer chunk of its kind, MCLMC's for MCLMC and MAMS, NUTS's for HMC and NUTS, so that the
    per-chunk costs, a store write on our side, are paid as often), 'config' (the schema's) or a number."""
    from core.config import schema
    from core.samplers import SAMPLERS
    choice = str(args.chunk_size)
    if choice == "config":
        return int(schema.SamplerSection().chunk_size)
    if choice == "peer":
        return PEER_CHUNK_STEPS["mclmc" if SAMPLERS[algorithm].microcanonical else "nuts"]
    return _steps_option("--chunk-size", choice, 1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16^3, 4000 gradients per chain, 64 reference draws")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--algorithms", nargs="+", default=None,
                        help="labels (hmc/identity) or algorithms (hmc: every preconditioner) to run")
    parser.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--peer-algorithms", nargs="+", choices=("nuts", "mclmc"), default=["nuts", "mclmc"],
                        help="BlackJAX samplers to run beside ours (NUTS's window adaptation is the slow one)")
    parser.add_argument("--grid", type=int, default=None)
    parser.add_argument("--budget", type=int, default=None, help="post-warmup gradient evaluations per chain")
    parser.add_argument("--reference-draws", type=int, default=None)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--num-warmup", type=int, default=None,
                        help="warmup steps of every Fieldscope combination and of BlackJAX NUTS "
                             "(default: the config schema's num_warmup, 200)")
    parser.add_argument("--microcanonical-warmup", default="peer",
                        help="warmup steps of the MCLMC / MAMS combinations: 'peer' (the default: as "
                             "many as BlackJAX MCLMC tunes for with this budget, a third of its steps), "
                             "'config' (as --num-warmup) or a number")
    parser.add_argument("--chunk-size", default="peer",
                        help="sampler.chunk_size of every combination: 'peer' (the default: the steps of "
                             "the peer chunk of its kind, 250 for MCLMC / MAMS, 25 for HMC / NUTS), "
                             "'config' (the schema's, 25) or a number")
    parser.add_argument("--dense-modes", type=int, nargs="+", default=None,
                        help="run each fourier combination once per value of sampler.dense_modes "
                             "(labelled alg/fourier-N; default: the schema's value, one run)")
    parser.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = parser.parse_args(argv)
    n = args.grid or (16 if args.quick else 32)
    budget = args.budget or (4000 if args.quick else 24000)
    draws = args.reference_draws or (64 if args.quick else 256)

    from core.config import schema
    from core.field.grid import Grid
    from core.run.tensorflow_env import quiet_tensorflow, start_up_notices_filtered

    combos = fieldscope_combinations()
    if args.algorithms:
        wanted = set(args.algorithms)
        combos = [(label, s) for label, s in combos if label in wanted or s["algorithm"] in wanted]
    if args.dense_modes is not None:
        combos = with_dense_modes(combos, args.dense_modes)
    peers = []
    if args.peers:
        try:
            import importlib.util
            if importlib.util.find_spec("blackjax") is None or importlib.util.find_spec("jax") is None:
                raise ImportError
            peers = [f"blackjax/{name}" for name in ("nuts", "mclmc") if name in args.peer_algorithms]
        except ImportError:
            print("peers: BlackJAX or JAX is not installed (pip install '.[bench]'); Fieldscope only")
    quiet_tensorflow()
    with start_up_notices_filtered():
        import tensorflow as tf
        import tensorflow_probability as tfp
    tf.get_logger().setLevel("ERROR")     # one Engine per combination: its retracing notice is expected
    print(f"TensorFlow {tf.__version__}, TFP {tfp.__version__}; CPU cores: {os.cpu_count()}; "
          f"{n}^3, {budget} post-warmup gradients per chain, {CHAINS} chains; algorithms {schema.ALGORITHMS}; "
          f"combinations: {', '.join(label for label, _ in combos)}")
    grid = Grid((n, n, n), BOX)
    report = {"grid": n, "budget": budget, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        amplitude = write_cases(folder, n)["amplitude"]
        default_warmup = warmup_steps("nuts", args, budget)       # BlackJAX NUTS's, as ours
        combos = [(label, {**settings, "num_warmup": warmup_steps(settings["algorithm"], args, budget),
                           "chunk_size": chunk_steps(settings["algorithm"], args)})
                  for label, settings in combos]
        for name in args.cases:
            case = CASES[name]
            reference = exact_reference(case, folder, amplitude, draws)
            rows, skipped = [], []
            for label, settings in combos:
                t0 = time.perf_counter()
                result = run_fieldscope(case, folder, amplitude, label, settings, budget, args.seed)
                if "skipped" in result:
                    skipped.append(f"{label}: {result['skipped']}")
                    print(f"[{name}] {label}: skipped ({result['skipped']})", flush=True)
                    continue
                rows.append(_summarise(result, reference, grid, case))
                print(f"[{name}] {label}: {time.perf_counter() - t0:.0f} s", flush=True)
            check_text = None
            if peers:
                config, _ = _dump(case_document(case, amplitude, {"chains": CHAINS, "seed": args.seed}), folder)
                inputs = peer_inputs(case, folder, amplitude, density_checkpoints(config))
                spec = [{"name": name, "inputs": str(inputs), "peers": peers, "budget": budget,
                         "num_warmup": default_warmup, "seed": args.seed}]
                results = run_peers(spec, folder, timeout=3600)
                if "error" in results:
                    skipped.append(f"peers: {results['error']}")
                else:
                    check = results[name].pop("check")
                    check_text = f"{check['versions']}; density check: {check['text']}"
                    if check.get("refused"):
                        skipped.append(f"peers: refused to report, {check['text']}")
                    for peer, res in results[name].items():
                        res["label"] = peer
                        rows.append(_summarise(res, reference, grid, case))
            if check_text:
                reference.text += f"\n   peers: {check_text}"
            _print_case(case, n, rows, skipped, reference)
            report["cases"][name] = {"reference": reference.text, "index": reference.index,
                                     "rows": rows, "skipped": skipped}
    if args.json:
        args.json.write_text(json.dumps(_jsonable(report), indent=1))


if __name__ == "__main__":
    main()
