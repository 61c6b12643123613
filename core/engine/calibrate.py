"""Simulation-based calibration in TensorFlow: simulate from the prior, sample, rank the truth.

``Calibrator`` runs the plan of ``core.calibration.plan`` batch by batch into
``DIR/calibration.zarr`` (``core.calibration.store``). For each batch of S simulations:

1. Simulate (eagerly, one simulation at a time, seeded by its index alone): the field
   model draws its sampled hyperparameters and latent field from the prior
   (``FieldPosterior.draw_prior``), takes the signal (the field, smoothed, plus its mean)
   and draws data with the likelihood's noise: Gaussian with the config's per-voxel sd, or
   Poisson counts with rate nbar exp(signal); masked voxels are 0 (unused). The integral
   model draws A, c, sigma from their priors (a fixed one is its value) and
   y_i = c + T(t_i; A) + sigma e_i with the discretised integral T the model samples with.
   The data may be simulated with another config (``simulate_config``: same model, grid and
   sampled parameters): that is how a deliberate mis-specification is tested.
2. Sample, in one ``tf.function(jit_compile=True)`` per batch: the S simulations times the
   config's C chains are the chains of one program (chain s C + c is chain c of
   simulation s), each chain's likelihood against its own simulation's data (a data tensor
   with a leading chain axis broadcasts in ``FieldPosterior``'s likelihood and in the
   integral density; ``_with_data`` makes such a copy of the model's density, the
   densities themselves are unchanged). The kernel is the engine's (``Engine._make_kernel``:
   dual averaging around HMC or NUTS, one step size per chain); with
   ``adapt_mass_matrix`` the variances are estimated over the engine's window [15 %, 75 %)
   of warmup, pooled over each simulation's own chains, and dual averaging restarts from
   there, as in the engine. Every ``thin``-th post-warmup state, ``draws / C`` per chain,
   gives the test quantities (the sampled parameters, the log-likelihood of the
   simulation's data, the P(k) of every k-shell by ``FieldModel.field_power``, the field at
   ``fixed_voxels``) and a count, at every voxel, of the draws below the true field.
   MCLMC / MAMS (``core.engine.microcanonical``) run as the engine runs them, each of the
   S C chains with its own tuning state: the engine's step (``Engine._microcanonical_step``)
   in one compiled program per segment between the engine's stops (``Schedule``: the
   diagonal's window end, the tuning's stage ends, the end of warmup), and at each stop,
   eagerly as the engine between chunks, the diagonal set (pooled over each simulation's
   chains) and the tuning's stage transition (``at_boundary``). Their stage points are
   Python numbers of ``num_warmup``: their program is compiled per warmup length. (MCLMC's
   autocorrelation proxy weights its projections by the variances pooled over all the
   batch's chains, as the engine pools over a run's chains; it only sets L.)
3. Rank (numpy): the truth's rank among the simulation's M draws of each quantity, the
   voxel ranks, the posterior mean and sd, post-warmup divergences and acceptance; the
   batch's rows are appended to the store.

Stopping. ``control.stop`` is honoured between batches (a batch in flight finishes, or is
abandoned by the caller). A calibration started again with the same settings resumes at
its first unfinished batch and gives the ranks of an uninterrupted one: the truth and data
of simulation i are seeded by (seed, i), the sampler of batch b by (seed, b).

The compiled program of a (config text, plan) pair is kept for the process
(``_PROGRAMS``), so calibrations of the same model with data simulated in different ways
compile once.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from core.calibration import (
    CalibrationPlan,
    CalibrationReader,
    CalibrationStoreError,
    CalibrationWriter,
    PlanError,
    fixed_voxels,
    judge,
    plan_for_config,
    quantity_names,
    ranks_of,
)
from core.calibration.store import STORE_NAME, plan_differences
from core.config import RunConfig, dump_config
from core.engine import microcanonical
from core.engine.engine import DIVERGENCE_THRESHOLD, Control, Engine, EngineError, samples_hyperparameters
from core.engine.integral_density import IntegralLogDensity
from core.engine.models import build_model
from core.engine.prior_density import tf_prior
from core.store import run_lock

__all__ = ["Calibrator", "BatchResult", "simulate_batch"]

_LOG_2PI = math.log(2.0 * math.pi)
_SIMULATION_STREAM = 104729        # the seed pair of simulation i: fold_in((seed, this), i)
_SAMPLER_STREAM = 7927             # ... of batch b's sampler: fold_in((seed, this), b)

# (config text, plan) -> _Program: compiled once per process
_PROGRAMS: dict = {}


@dataclass
class BatchResult:
    """One batch's rows for the store (the plan's simulations only)."""

    rank: np.ndarray                 # (S, Q)
    truth: np.ndarray                # (S, Q)
    posterior_mean: np.ndarray
    posterior_sd: np.ndarray
    divergences: np.ndarray          # (S,)
    acceptance: np.ndarray           # (S,)
    voxel_rank: np.ndarray | None    # (S, n0, n1, n2)

    def rows(self, simulations) -> dict:
        out = {"rank": self.rank, "truth": self.truth, "posterior_mean": self.posterior_mean,
               "posterior_sd": self.posterior_sd, "divergences": self.divergences,
               "acceptance": self.acceptance, "simulation": np.asarray(simulations, np.int64)}
        if self.voxel_rank is not None:
            out["voxel_rank"] = self.voxel_rank
        return out


def _with_data(density, data):
    """A shallow copy of the model's density whose data tensor is ``data``, with a leading
    chain axis: a FieldPosterior (``_data``; the Poisson normalisation, which depends on the
    counts, per chain) or an IntegralLogDensity (``_y``). Every other constant is shared."""
    other = copy.copy(density)
    if isinstance(density, IntegralLogDensity):
        other._y = data
        return other
    other._data = data
    if density.observations.kind != "gaussian":
        other._lik_const = -tf.reduce_sum(tf.math.lgamma(data + 1.0) * density._mask, axis=[-3, -2, -1])
    return other


class _Target:
    """What ``Engine._make_kernel`` and ``Engine._microcanonical`` read of a model: the
    batch's log-density (None where only the tuning's shapes are needed) and its state's
    shape."""

    def __init__(self, fn, model):
        self.target_log_prob_fn = fn
        self.has_field = model.has_field
        self.grid = getattr(model, "grid", None)
        self.initial_state = model.initial_state


class _KernelFactory(Engine):
    """The engine's kernel for the batch (``Engine._make_kernel``; for MCLMC / MAMS
    ``Engine._microcanonical`` and ``Engine._microcanonical_step`` with the engine's
    ``Schedule``), reused, not copied. ``chains``: the batch's S C chains, which the
    microcanonical samplers' tuning state is sized by (HMC / NUTS keep the config's sampler)."""

    def __init__(self, config: RunConfig, sampler, target, dtype, chains: int):
        if sampler.algorithm in microcanonical.SAMPLERS:
            # the batch's chains are each simulation's sampler.chains in turn: those share
            # MCLMC's sampling step size, not the whole batch (different posteriors)
            self.chains_per_posterior = sampler.chains
            sampler = dataclasses.replace(sampler, chains=chains)
        # no run directory: only the kernel and the schedule are used
        super().__init__(dataclasses.replace(config, sampler=sampler), "", ".")
        self.model, self.dtype = target, dtype


# ---------------------------------------------------------------------------- simulation


def _simulation_seed(seed: int, index: int) -> tf.Tensor:
    return tf.random.experimental.stateless_fold_in(tf.constant([seed, _SIMULATION_STREAM], tf.int32), index)


def _check_same_model(model, sim_model, simulate_config: RunConfig):
    where = f"{simulate_config.data_path} (--simulate-with)"
    if model.kind != sim_model.kind:
        raise PlanError(f"{where}: simulates the {sim_model.kind} model, the config samples the {model.kind} model")
    if list(sim_model.param_names) != list(model.param_names):
        def sampled(names):
            return ", ".join(names) if names else "no parameter (every one is fixed)"
        raise PlanError(f"{where}: its model samples {sampled(sim_model.param_names)}, but the calibrated "
                        f"config's samples {sampled(model.param_names)}; both must sample the same parameters "
                        "(each simulation's true values are compared with their posterior)")
    if model.has_field and sim_model.grid.shape != model.grid.shape:
        raise PlanError(f"{where}: grid {sim_model.grid.shape}, the config's is {model.grid.shape}")
    if not model.has_field and not np.array_equal(sim_model.spec.t, model.spec.t):
        raise PlanError(f"{where}: its series has other times t than the config's")


def simulate_batch(sim_model, indices, seed: int):
    """Truth and data of simulations ``indices`` from ``sim_model``'s prior and likelihood:
    (data (S, ...), truth parts) with truth parts: field model (latent (S, ...), eta (S, P)
    or None) and the true field; integral model {name: (S,)} of the parameters."""
    dtype = sim_model.dtype
    if sim_model.has_field:
        post = sim_model.posterior
        obs = post.observations
        latents, etas, datas = [], [], []
        noise = tf.constant(obs.noise, dtype) if obs.noise is not None else None
        mask = tf.constant(obs.mask, tf.bool)
        for i in indices:
            s = _simulation_seed(seed, int(i))
            parts = post.draw_prior(1, tf.random.experimental.stateless_fold_in(s, 0))
            signal = post.signal(*parts)[0]
            noise_seed = tf.random.experimental.stateless_fold_in(s, 1)
            if obs.kind == "gaussian":
                y = signal + noise * tf.random.stateless_normal(signal.shape, seed=noise_seed, dtype=dtype)
            else:
                rate = obs.mean_count * tf.exp(signal)
                y = tf.random.stateless_poisson(signal.shape, seed=noise_seed, lam=rate, dtype=dtype)
            datas.append(tf.where(mask, y, tf.zeros_like(y)))
            latents.append(parts[0][0])
            if len(parts) > 1:
                etas.append(parts[1][0])
        latent = tf.stack(latents)
        eta = tf.stack(etas) if etas else None
        truth_parts = [latent] if eta is None else [latent, eta]
        return tf.stack(datas), truth_parts
    density, spec = sim_model.density, sim_model.spec
    values = {name: [] for name in ("A", "c", "sigma")}
    ys = []
    for i in indices:
        s = _simulation_seed(seed, int(i))
        v = {}
        for j, name in enumerate(("A", "c", "sigma")):
            prior = spec.priors[name]
            if prior.is_fixed:
                v[name] = tf.constant(prior.value, dtype)
            else:
                draw_seed = tf.random.experimental.stateless_fold_in(s, j)
                v[name] = tf_prior(prior, dtype).distribution().sample(seed=draw_seed)
            values[name].append(v[name])
        e = tf.random.stateless_normal([spec.y.size], seed=tf.random.experimental.stateless_fold_in(s, 9),
                                       dtype=dtype)
        ys.append(v["c"] + density.integral(v["A"]) + v["sigma"] * e)
    return tf.stack(ys), {name: tf.stack(vals) for name, vals in values.items()}


# ---------------------------------------------------------------------------- the program


def _per_simulation_scale(welford, chains_per_simulation: int):
    """The diagonal's scale s = sqrt(var) per chain from the Welford sums (count, mean, m2)
    of each simulation's pooled chains, regularised towards 1e-3 as Stan (and the engine)."""
    count, _, m2 = welford
    scale = []
    for q in m2:
        var = q / tf.maximum(count - 1.0, 1.0)
        var = (count / (count + 5.0)) * var + 1e-3 * (5.0 / (count + 5.0))
        scale.append(tf.repeat(tf.sqrt(var), chains_per_simulation, axis=0))
    return scale


class _Program:
    """The quantities of a model and the compiled sampler of one batch size."""

    def __init__(self, config: RunConfig, model, plan: CalibrationPlan):
        self.config, self.model, self.plan = config, model, plan
        self.sampler = config.sampler
        self.dtype = model.dtype
        self.chains = plan.batch_size * plan.chains
        self.microcanonical = self.sampler.algorithm in microcanonical.SAMPLERS
        if self.microcanonical:
            # the engine's schedule: the diagonal's window is the tuning's variance stage, and
            # the stage transitions run between the compiled segments (tune_stops)
            self.schedule = self._factory(self.sampler).schedule
            self.adapt_mass = self.schedule.mass_end is not None
            self._factory(self.sampler)._microcanonical(None)     # refuses a model of < 2 coordinates now
        else:
            self.adapt_mass = self.sampler.adapt_mass_matrix and self.sampler.num_warmup >= 20   # the engine's rule
        if model.has_field:
            self.voxels = fixed_voxels(model.grid.shape, model.observations.mask)
            self.names = quantity_names(model.param_names, len(model.k_centres), self.voxels)
        else:
            self.voxels = []
            self.names = quantity_names(model.param_names)
        # autograph off: the loops are explicit, and converting TFP and the densities costs most
        # of the tracing time (56 of 68 s at 4^3 on a loaded machine)
        self._sample = tf.function(self._sample_fn, jit_compile=True, autograph=False)
        self._segment = tf.function(self._segment_fn, jit_compile=True, autograph=False)

    def _factory(self, sampler, fn=None) -> _KernelFactory:
        return _KernelFactory(self.config, sampler, _Target(fn, self.model), self.dtype, self.chains)

    # -- quantities ----------------------------------------------------------------

    def _loglik_integral(self, values, y):
        spec, dtype = self.model.spec, self.dtype
        full = {k: (values[k] if k in values else tf.constant(spec.priors[k].value, dtype)
                    + tf.zeros_like(y[..., 0])) for k in ("A", "c", "sigma")}
        r = y - full["c"][..., None] - self.model.density.integral(full["A"])
        n = spec.y.size
        return (-0.5 * n * _LOG_2PI - n * tf.math.log(full["sigma"])
                - 0.5 * tf.reduce_sum(r * r, axis=-1) / full["sigma"]**2)

    def quantities(self, density, parts, data):
        """(chains, Q) test quantities at the state ``parts`` (x coordinates), and the field."""
        model = self.model
        if model.has_field:
            latent, eta = parts[0], (parts[1] if len(parts) > 1 else None)
            x = density.field(latent, eta) + density.observations.field_mean
            loglik = density.log_likelihood_of_signal(density.signal(latent, eta))
            columns = [model.params(parts), loglik[:, None], model.field_power(x)]
            if self.voxels:
                columns.append(tf.stack([x[:, i, j, k] for i, j, k in self.voxels], axis=-1))
            return tf.concat(columns, axis=-1), x
        values = model.density.constrain(parts[0])
        params = tf.stack([values[n] for n in model.param_names], axis=-1)
        return tf.concat([params, self._loglik_integral(values, data)[:, None]], axis=-1), None

    def truth_quantities(self, sim_model, data, truth):
        """(S, Q) true quantities, the log-likelihood under the model (not the simulator),
        and the true field (S, ...) or None."""
        model = self.model
        if model.has_field:
            sim_post = sim_model.posterior
            latent, eta = truth[0], (truth[1] if len(truth) > 1 else None)
            x = sim_post.field(latent, eta) + sim_post.observations.field_mean
            signal = sim_post.signal(latent, eta)
            density = _with_data(model.posterior, data)
            loglik = density.log_likelihood_of_signal(signal)
            theta = sim_post.hyperparameters(eta) if eta is not None else {}
            params = (tf.stack([theta[n] for n in model.param_names], axis=-1) if model.param_names
                      else tf.zeros([tf.shape(x)[0], 0], self.dtype))
            columns = [params, loglik[:, None], model.field_power(x)]
            if self.voxels:
                columns.append(tf.stack([x[:, i, j, k] for i, j, k in self.voxels], axis=-1))
            return np.asarray(tf.concat(columns, axis=-1), np.float64), x
        values = {k: truth[k] for k in model.param_names}
        params = tf.stack([values[n] for n in model.param_names], axis=-1)
        full = {k: truth[k] for k in ("A", "c", "sigma")}
        loglik = self._loglik_integral(full, data)
        return np.asarray(tf.concat([params, loglik[:, None]], axis=-1), np.float64), None

    # -- the sampler ------------------------------------------------------------------

    def _batch_density(self, data):
        """The model's density on the batch's data (a leading chain axis, chain s C + c against
        simulation s), its log-density function, and the data per chain."""
        data_c = tf.repeat(data, self.plan.chains, axis=0)
        density = _with_data(self.model.posterior if self.model.has_field else self.model.density, data_c)
        fn = (density.target_log_prob_fn() if self.model.has_field else (lambda u: density(u)))
        return density, fn, data_c

    def _fresh_carry(self, state):
        """What the phases carry besides the kernel's state: kept quantities, voxel counts
        below the truth, divergences, acceptance sums, the per-simulation Welford sums, the
        number kept."""
        plan, model, dtype = self.plan, self.model, self.dtype
        keep_buf = tf.zeros([plan.draws_per_chain, self.chains, len(self.names)], dtype)
        below = (tf.zeros([self.chains, *model.grid.shape], tf.int32) if model.has_field else tf.zeros([1], tf.int32))
        welford = (tf.constant(0.0, dtype), [tf.zeros([plan.batch_size, *p.shape[1:]], dtype) for p in state],
                   [tf.zeros([plan.batch_size, *p.shape[1:]], dtype) for p in state])
        return (keep_buf, below, tf.zeros([self.chains], tf.int32), tf.zeros([self.chains], dtype), welford,
                tf.constant(0))

    def _phase(self, step, scale, z, results, g0, g1, carry, *, seed, num_warmup, mass_window, density, data_c,
               truth_c):
        """Steps g0 .. g1 - 1 of every chain: ``step(z, results, seed, g)`` -> (z, results,
        acceptance probability, diverging) moves z (x = scale z); post-warmup divergences and
        acceptance are summed, the Welford sums of x (pooled over each simulation's chains)
        gathered in ``mass_window`` [start, end) when the mass matrix adapts, and every
        ``thin``-th post-warmup state's quantities kept. Returns z, results, carry."""
        plan, model = self.plan, self.model
        C, n_keep, thin = plan.chains, plan.draws_per_chain, plan.thin
        adapt_mass = self.adapt_mass
        mass_start, mass_end = mass_window

        def per_sim_mean(part):
            return tf.reduce_mean(tf.reshape(part, [plan.batch_size, C, *part.shape[1:]]), axis=1)

        def body(g, z, results, keep_buf, below, div, acc, welford, kept):
            step_seed = tf.random.experimental.stateless_fold_in(seed, g)
            z, results, accept, diverging = step(z, results, step_seed, g)
            x = [si * zi for si, zi in zip(scale, z)]
            post = g >= num_warmup
            div = div + tf.cast(tf.logical_and(post, diverging), tf.int32)
            acc = acc + tf.where(post, accept, tf.zeros_like(accept))
            if adapt_mass:
                count, mean, m2 = welford
                in_window = tf.logical_and(g >= mass_start, g < mass_end)

                def update():
                    n = count + 1.0
                    new_mean, new_m2 = [], []
                    for part, mu, q in zip(x, mean, m2):
                        delta = per_sim_mean(part) - mu
                        mu_new = mu + delta / n
                        rep_mu, rep_new = tf.repeat(mu, C, axis=0), tf.repeat(mu_new, C, axis=0)
                        new_mean.append(mu_new)
                        new_m2.append(q + per_sim_mean((part - rep_mu) * (part - rep_new)))
                    return n, new_mean, new_m2

                welford = tf.cond(in_window, update, lambda: (count, list(mean), list(m2)))
            keep = tf.logical_and(post, tf.logical_and(
                tf.equal(tf.math.floormod(g - num_warmup + 1, thin), 0), kept < n_keep))

            def store():
                q, field = self.quantities(density, x, data_c)
                buf = tf.tensor_scatter_nd_update(keep_buf, [[kept]], q[None])
                new_below = below + tf.cast(field < truth_c, tf.int32) if model.has_field else below
                return buf, new_below, kept + 1

            keep_buf, below, kept = tf.cond(keep, store, lambda: (keep_buf, below, kept))
            return g + 1, z, results, keep_buf, below, div, acc, welford, kept

        out = tf.while_loop(lambda g, *rest: g < g1, body, (g0, z, results, *carry))
        return out[1], out[2], tuple(out[3:])

    def _sample_fn(self, state, data, truth_field, seed, num_warmup, step_size):
        """HMC / NUTS: warmup and sampling of every chain of the batch; returns the kept
        quantities (n_keep, chains, Q), the voxel counts below the truth (chains, ...),
        post-warmup divergences and acceptance sums (chains,). ``num_warmup`` and ``step_size``
        (the initial one) are tensors: configs that differ only in them share the program."""
        s, plan, model, dtype = self.sampler, self.plan, self.model, self.dtype
        chains, C = self.chains, plan.chains
        density, fn, data_c = self._batch_density(data)
        truth_c = tf.repeat(truth_field, C, axis=0) if model.has_field else None
        factory = _KernelFactory(self.config, s, _Target(fn, model), dtype, chains)
        total = num_warmup + s.num_samples
        adapt_mass = self.adapt_mass
        # the engine's window, int(0.15 n) and int(0.75 n)
        mass_start = (15 * num_warmup) // 100
        mass_end = (75 * num_warmup) // 100
        is_nuts = s.algorithm == "nuts"
        where = dict(seed=seed, num_warmup=num_warmup, mass_window=(mass_start, mass_end), density=density,
                     data_c=data_c, truth_c=truth_c)

        def kernel_step(kernel):
            def step(z, results, step_seed, g):
                z, results = kernel.one_step(z, results, seed=step_seed)
                inner = results.inner_results
                if is_nuts:
                    lar, diverging = inner.log_accept_ratio, inner.has_divergence
                else:
                    lar = inner.log_accept_ratio
                    diverging = tf.logical_or(~tf.math.is_finite(lar), -lar > DIVERGENCE_THRESHOLD)
                accept = tf.where(tf.math.is_finite(lar), tf.exp(tf.minimum(lar, 0.0)), tf.zeros_like(lar))
                return z, results, accept, diverging
            return step

        def step_sizes(value):
            return [tf.fill([chains] + [1] * (len(p.shape) - 1), tf.cast(value, dtype)) for p in state]

        ones = [tf.ones_like(p) for p in state]
        first_end = mass_end if adapt_mass else total
        kernel = factory._make_kernel(step_sizes(step_size), ones, mass_end if adapt_mass else num_warmup)
        results = kernel.bootstrap_results(list(state))
        z, results, carry = self._phase(kernel_step(kernel), ones, list(state), results, tf.constant(0), first_end,
                                        self._fresh_carry(state), **where)
        if adapt_mass:
            scale = _per_simulation_scale(carry[4], C)
            z = [zi / si for zi, si in zip(z, scale)]                             # same x, new z
            step_now = list(results.new_step_size)
            kernel = factory._make_kernel(step_now, scale, num_warmup - mass_end)
            results = kernel.bootstrap_results(z)
            z, results, carry = self._phase(kernel_step(kernel), scale, z, results, mass_end, total, carry, **where)
        keep_buf, below, div, acc, _, _ = carry
        return keep_buf, below, div, acc

    def _segment_fn(self, z, tune, scale, data, truth_field, seed, g0, g1, num_warmup, carry):
        """MCLMC / MAMS: steps g0 .. g1 - 1 of every chain (the engine's chunk step,
        ``Engine._microcanonical_step``, on z with x = scale z), from the state z and its
        tuning state; the log-density and gradient at z are evaluated at the start (one
        gradient a segment). Returns z, tune, carry. One compiled program serves every
        segment: g0, g1 and scale are tensors."""
        model = self.model
        density, fn, data_c = self._batch_density(data)
        truth_c = tf.repeat(truth_field, self.plan.chains, axis=0) if model.has_field else None
        lp, grads = tfp.math.value_and_gradient(lambda *q: fn(*[si * qi for si, qi in zip(scale, q)]), list(z))
        engine_step = self._factory(self.sampler, fn)._microcanonical_step(scale)

        def step(z, results, step_seed, g):
            z, results, stats, _ = engine_step(z, results, step_seed, g)
            return list(z), results, stats["acceptance_rate"], stats["diverging"]

        sched = self.schedule
        z, (_, _, tune), carry = self._phase(
            step, scale, list(z), (lp, list(grads), tune), g0, g1, carry, seed=seed, num_warmup=num_warmup,
            mass_window=(sched.mass_start, sched.mass_end), density=density, data_c=data_c, truth_c=truth_c)
        return z, tune, carry

    def _run_microcanonical(self, state, data, truth_field, seed, start_seed: int, sampler):
        """MCLMC / MAMS over the engine's stops: compiled segments between them, and at each
        stop (eagerly, as the engine between chunks) the diagonal set at the end of its window
        (pooled over each simulation's chains, z rescaled to the same x), then the tuning's
        stage transition (``at_boundary``). The tuning starts from ``sampler``'s step size,
        its velocity seeded by ``start_seed``. Returns what ``_sample_fn`` does."""
        sched = self.schedule
        tuner = self._factory(sampler)._microcanonical(None)       # fresh and at_boundary: no density
        z = list(state)
        tune = tuner.fresh(z, start_seed)
        scale = [tf.ones_like(p) for p in z]
        carry = self._fresh_carry(z)
        stops = sorted({sched.num_warmup, sched.total, *sched.tune_stops}
                       | ({sched.mass_end} if self.adapt_mass else set()))
        g0, num_warmup = 0, tf.constant(sched.num_warmup, tf.int32)
        for g1 in (g for g in stops if g > 0):
            z, tune, carry = self._segment(z, tune, scale, data, truth_field, seed, tf.constant(g0, tf.int32),
                                           tf.constant(g1, tf.int32), num_warmup, carry)
            z = list(z)
            if self.adapt_mass and g1 == sched.mass_end:
                new_scale = _per_simulation_scale(carry[4], self.plan.chains)
                z = [zi * so / sn for zi, so, sn in zip(z, scale, new_scale)]
                scale = new_scale
            if g1 in sched.tune_stops:
                tune = tuner.at_boundary(g1, tune)
            g0 = g1
        keep_buf, below, div, acc, _, _ = carry
        return keep_buf, below, div, acc

    def run_batch(self, sim_model, b: int, sampler, plan: CalibrationPlan) -> BatchResult:
        """Batch ``b`` of ``plan`` with ``sampler``'s num_warmup and step_size (the program's
        own plan and sampler were those of the calibration it was built for; they share its
        batch size, draws and chains)."""
        model = self.model
        indices = list(plan.batch(b))
        data, truth = simulate_batch(sim_model, indices, plan.seed)
        truth_q, truth_field = self.truth_quantities(sim_model, data, truth)
        batch_seed = tf.random.experimental.stateless_fold_in(tf.constant([plan.seed, _SAMPLER_STREAM], tf.int32), b)
        start_seed = int(tf.random.experimental.stateless_fold_in(batch_seed, -1)[0])
        state = [tf.convert_to_tensor(p, self.dtype) for p in model.initial_state(self.chains, start_seed)]
        field_arg = truth_field if truth_field is not None else tf.zeros([plan.batch_size, 1], self.dtype)
        data = tf.convert_to_tensor(data, self.dtype)
        if self.microcanonical:
            keep_buf, below, div, acc = self._run_microcanonical(state, data, field_arg, batch_seed, start_seed,
                                                                 sampler)
        else:
            keep_buf, below, div, acc = self._sample(state, data, field_arg, batch_seed,
                                                     tf.constant(sampler.num_warmup, tf.int32),
                                                     tf.constant(sampler.step_size, self.dtype))
        S, C, n_keep = plan.batch_size, plan.chains, plan.draws_per_chain
        q = np.asarray(keep_buf, np.float64)                                  # (n_keep, S*C, Q)
        draws = q.reshape(n_keep, S, C, -1).transpose(1, 2, 0, 3).reshape(S, C * n_keep, -1)
        finite = np.isfinite(draws).all()
        if not finite:
            raise EngineError(f"batch {b}: a posterior draw's test quantity is not finite (simulations "
                              f"{indices[0]}..{indices[-1]}); check the priors and the data scale")
        rng = np.random.default_rng([plan.seed, b])
        rank = ranks_of(truth_q, draws, axis=1, rng=rng)
        voxel_rank = None
        if model.has_field:
            voxel_rank = np.asarray(below).reshape(S, C, *model.grid.shape).sum(axis=1)
        kept = plan.kept(b)
        n_post = C * sampler.num_samples
        return BatchResult(
            rank=rank[:kept], truth=truth_q[:kept], posterior_mean=draws.mean(axis=1)[:kept],
            posterior_sd=draws.std(axis=1, ddof=1)[:kept] if draws.shape[1] > 1 else np.zeros_like(truth_q[:kept]),
            divergences=np.asarray(div).reshape(S, C).sum(axis=1)[:kept].astype(np.int32),
            acceptance=(np.asarray(acc, np.float64).reshape(S, C).sum(axis=1) / n_post)[:kept],
            voxel_rank=None if voxel_rank is None else voxel_rank[:kept].astype(np.int32))


def _program_key(config: RunConfig, plan: CalibrationPlan):
    """What a compiled program depends on: the config but for the sampler's seed, initial
    step size and (HMC / NUTS) number of warmup steps (only whether it adapts a mass matrix),
    and the plan but for its seed and number of simulations."""
    s = config.sampler
    adapt = s.preconditioner == "diagonal" and s.num_warmup >= 20
    precondition = "diagonal" if adapt else ("identity" if s.preconditioner == "diagonal" else s.preconditioner)
    # MCLMC / MAMS: their stage points (Python ints in the program) depend on num_warmup; with
    # "fourier" and sampled hyperparameters whether the hyperparameters' diagonal is adapted does
    warmup = s.num_warmup if s.algorithm in microcanonical.SAMPLERS else 0
    if warmup == 0 and s.preconditioner == "fourier" and s.num_warmup >= 20 and samples_hyperparameters(config):
        warmup = 20
    neutral = dataclasses.replace(config, sampler=dataclasses.replace(s, seed=0, step_size=0.1, num_warmup=warmup,
                                                                      preconditioner=precondition))
    return dump_config(neutral), str(config.base_dir), dataclasses.replace(plan, seed=0, simulations=plan.batch_size)


def _program(config: RunConfig, plan: CalibrationPlan, model=None) -> _Program:
    key = _program_key(config, plan)
    if key not in _PROGRAMS:
        _PROGRAMS.clear()            # one at a time: a program holds its model's constants
        _PROGRAMS[key] = _Program(config, model if model is not None else build_model(config), plan)
    return _PROGRAMS[key]


# ---------------------------------------------------------------------------- the calibrator


class Calibrator:
    """Runs (or resumes) one calibration into ``out_dir/calibration.zarr``.

    ``simulate_config`` / ``simulate_text``: simulate the data with another config (None:
    the config itself). ``on_batch(info)`` is called after each stored batch with
    {batch, batches, simulations_done, simulations, seconds, eta, verdict}; ``emit(text)``
    gets the phase lines (loading, compiling)."""

    def __init__(self, config: RunConfig, config_text: str, out_dir, *, simulations: int,
                 draws: int | None = None, batch_size: int | None = None,
                 simulate_config: RunConfig | None = None, simulate_text: str = "",
                 control: Control | None = None, on_batch: Callable[[dict], None] | None = None,
                 emit: Callable[[str], None] | None = None):
        self.config, self.config_text = config, config_text
        self.out_dir = Path(out_dir)
        self.simulate_config, self.simulate_text = simulate_config, simulate_text or ""
        self.control = control or Control()
        self.on_batch = on_batch or (lambda info: None)
        self.emit = emit or (lambda text: None)
        self.store = None
        self.plan = plan_for_config(config, simulations=simulations, draws=draws, batch_size=batch_size)

    def existing(self) -> CalibrationReader | None:
        """The store already in ``out_dir`` if it is this calibration (resumable); None if
        there is none; PlanError naming what differs otherwise."""
        if not (self.out_dir / STORE_NAME).exists():
            return None
        reader = CalibrationReader(self.out_dir)
        differences = plan_differences(reader.attrs, self.config_text, self.simulate_text, self.plan)
        if differences:
            raise PlanError(f"{self.out_dir / STORE_NAME}: holds another calibration (it differs in "
                            f"{'; '.join(differences)}); choose another --out, or give the same settings "
                            "to resume it")
        return reader

    def run(self) -> str:
        """Run every unfinished batch: "finished", or "stopped" when ``control.stop`` is set."""
        existing = self.existing()
        run_lock.acquire(self.out_dir)
        try:
            return self._run(existing)
        finally:
            run_lock.release(self.out_dir)

    def _run(self, existing) -> str:
        self.emit("loading")
        model = build_model(self.config)
        sim_model = model
        if self.simulate_config is not None:
            sim_model = build_model(self.simulate_config)
            _check_same_model(model, sim_model, self.simulate_config)
        program = _program(self.config, self.plan, model)
        if program.model is not model:
            model = program.model
            if self.simulate_config is None:
                sim_model = model
        if existing is None:
            self.store = CalibrationWriter.create(
                self.out_dir, config_text=self.config_text, config_dir=self.config.base_dir,
                simulate_text=self.simulate_text, plan=self.plan, quantities=program.names, model_kind=model.kind,
                grid_shape=model.grid.shape if model.has_field else None,
                k=model.k_centres if model.has_field else None, voxels=program.voxels)
        else:
            self.store = CalibrationWriter.reopen(self.out_dir)
        first = self.store.progress["batches"]
        seconds = float(self.store.root.attrs.get("timing", {}).get("seconds", 0.0))
        if first >= self.plan.batches:
            self.store.set_status("finished")
            return "finished"
        self.store.set_status("running")
        try:
            for b in range(first, self.plan.batches):
                if self.control.stop:
                    self.store.set_status("stopped")
                    return "stopped"
                if b == first:
                    self.emit("compiling")
                t0 = time.perf_counter()
                result = program.run_batch(sim_model, b, self.config.sampler, self.plan)
                elapsed = time.perf_counter() - t0
                seconds += elapsed
                with self.control.writing:
                    run_lock.verify(self.out_dir)
                    self.store.append(result.rows(list(self.plan.batch(b))[:self.plan.kept(b)]), b + 1, seconds)
                done = self.store.progress["simulations"]
                per_batch = elapsed        # the first batch's includes the compilation
                self.on_batch({"batch": b + 1, "batches": self.plan.batches, "simulations_done": done,
                               "simulations": self.plan.simulations, "seconds": elapsed,
                               "eta": per_batch * (self.plan.batches - b - 1),
                               "verdict": judge(CalibrationReader(self.out_dir).ranks(), program.names,
                                                self.plan.draws).line()})
            self.store.set_status("finished")
            return "finished"
        except (EngineError, CalibrationStoreError, run_lock.LockHeld) as err:
            self._fail(str(err))
            raise
        except Exception as err:
            self._fail(f"{type(err).__name__}: {err}")
            raise

    def _fail(self, message: str) -> None:
        try:
            self.store.set_status("failed", message)
        except CalibrationStoreError:
            pass
