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
2. Sample with the sampling driver (``core.engine.driver``: the kernel, adaptation and
   compiled chunks ``fieldscope run`` runs): the S simulations times the config's C chains
   are the chains of one driver (chain s C + c is chain c of simulation s;
   ``chains_per_posterior`` = C, so the diagonal's variances and MCLMC / MAMS's tuning pool
   over each simulation's own chains), each chain's likelihood against its own simulation's
   data (a data tensor with a leading chain axis, an argument of the compiled program:
   ``FieldModel.with_data``). Batch b's chains are seeded as a run with sampler.seed =
   ``batch_sampler_seed(seed, b)``: a batch of one simulation draws exactly what ``fieldscope
   run`` draws on its data (tests/core/calibration/test_calibrate.py checks it). The
   driver's observer here (``_TestQuantities``) keeps, at every ``thin``-th post-warmup
   state, ``draws / C`` per chain, the test quantities (the sampled parameters, the
   log-likelihood of the simulation's data, the P(k) of every k-shell by
   ``FieldModel.field_power``, the field at ``fixed_voxels``) and a count, at every voxel,
   of the draws below the true field.
3. Rank (numpy): the truth's rank among the simulation's M draws of each quantity, the
   voxel ranks, the posterior mean and sd, post-warmup divergences and acceptance; the
   batch's rows are appended to the store.

Stopping. ``control.stop`` is honoured between batches (a batch in flight finishes, or is
abandoned by the caller). A calibration started again with the same settings resumes at
its first unfinished batch and gives the ranks of an uninterrupted one: the truth and data
of simulation i are seeded by (seed, i), the sampler of batch b by (seed, b)
(``batch_sampler_seed``).

The compiled program of a (config text, plan) pair is kept for the process
(``_PROGRAMS``), so calibrations of the same model with data simulated in different ways
compile once.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import tensorflow as tf

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
from core.calibration.cluster import Scheduler
from core.calibration.store import STORE_NAME, plan_differences
from core.config import RunConfig, dump_config
from core.engine.devices import DeviceError, chain_devices
from core.engine.driver import Driver, DriverError, hyper_metric, schedule_for
from core.engine.engine import Control, EngineError
from core.engine.model_file import ARGUMENTS, ModelFileError, failure_of
from core.engine.models import build_model
from core.engine.prior_density import tf_prior
from core.log_density import LOG_2PI
from core.run.input_files import model_file_sha256
from core.store import run_lock

__all__ = ["Calibrator", "BatchResult", "simulate_batch"]

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


# ---------------------------------------------------------------------------- simulation


def _simulation_seed(seed: int, index: int) -> tf.Tensor:
    return tf.random.experimental.stateless_fold_in(tf.constant([seed, _SIMULATION_STREAM], tf.int32), index)


def _check_same_model(model, sim_model, simulate_config: RunConfig):
    where = f"the --simulate-with config (its data {simulate_config.data_path})"
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
    if model.kind == "integral" and not np.array_equal(sim_model.spec.t, model.spec.t):
        raise PlanError(f"{where}: its series has other times t than the config's")


def simulate_batch(sim_model, indices, seed: int):
    """Truth and data of simulations ``indices`` from ``sim_model``'s prior and likelihood:
    (data (S, ...), truth parts) with truth parts: field model (latent (S, ...), eta (S, P)
    or None) and the true field; integral model {name: (S,)} of the parameters."""
    dtype = sim_model.dtype
    if getattr(sim_model, "model_file", None) is not None:    # the model file's simulate
        return sim_model.simulate_batch([_simulation_seed(seed, int(i)) for i in indices])
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


def batch_sampler_seed(seed: int, b: int) -> int:
    """The sampler seed of batch ``b``: its chains are those of ``fieldscope run`` with
    ``sampler.seed`` = this on the batch's data (a batch of one simulation draws exactly what that
    run draws)."""
    pair = tf.random.experimental.stateless_fold_in(tf.constant([seed, _SAMPLER_STREAM], tf.int32), b)
    return int(tf.random.experimental.stateless_fold_in(pair, -1)[0]) & 0x7FFFFFFF


class _TestQuantities:
    """The calibration's observer in the driver's chunks (``core.engine.driver``): every
    ``thin``-th post-warmup state's test quantities, ``draws_per_chain`` a chain, and at every
    voxel the count of kept draws below the true field. Its carry (kept quantities (n_keep,
    chains, Q), counts below (chains, ...), number kept, the true field per chain) goes from
    chunk to chunk."""

    def __init__(self, program):
        self.program = program

    def fresh(self, truth_c):
        p = self.program
        plan, model, dtype = p.plan, p.model, p.dtype
        keep_buf = tf.zeros([plan.draws_per_chain, p.chains, len(p.names)], dtype)
        below = tf.zeros([p.chains, *model.grid.shape], tf.int32) if model.has_field else tf.zeros([1], tf.int32)
        return keep_buf, below, tf.constant(0), truth_c

    def start(self, carry, view, draws: bool):
        return carry, True

    # chains spread over devices (core.engine.driver.DeviceSplit): the carry split by rows and joined

    def for_chains(self, chains: int):
        return self           # its shapes come with the carry

    @staticmethod
    def split(carry, rows):
        keep_buf, below, kept, truth_c = carry
        field = len(below.shape) > 1
        return (tf.gather(keep_buf, rows, axis=1), tf.gather(below, rows, axis=0) if field else below, kept,
                tf.gather(truth_c, rows, axis=0) if field else truth_c)

    @staticmethod
    def merge(carries, sizes):
        keep_bufs, belows, kept, truths = zip(*carries)
        field = len(belows[0].shape) > 1

        def join(parts, axis):
            return tf.concat([p[(slice(None),) * axis + (slice(0, k),)] for p, k in zip(parts, sizes)], axis)
        return (join(keep_bufs, 1), join(belows, 0) if field else belows[0], kept[0],
                join(truths, 0) if field else truths[0])

    def observe(self, carry, view, g, x_parts, field_now):
        keep_buf, below, kept, truth_c = carry
        p = self.program
        num_warmup, thin, n_keep = p.schedule.num_warmup, p.plan.thin, p.plan.draws_per_chain
        keep = tf.logical_and(g >= num_warmup, tf.logical_and(
            tf.equal(tf.math.floormod(g - num_warmup + 1, thin), 0), kept < n_keep))

        def store():
            q, field = p.quantities(view, x_parts)
            buf = tf.tensor_scatter_nd_update(keep_buf, [[kept]], q[None])
            new_below = below + tf.cast(field < truth_c, tf.int32) if p.model.has_field else below
            return buf, new_below, kept + 1

        keep_buf, below, kept = tf.cond(keep, store, lambda: (keep_buf, below, kept))
        return keep_buf, below, kept, truth_c


class _Program:
    """The quantities of a model and the driver of one batch size: the batch's S simulations times
    the config's C chains are the driver's chains (chain s C + c is chain c of simulation s, each
    simulation's chains a posterior of their own), each against its own simulation's data."""

    def __init__(self, config: RunConfig, model, plan: CalibrationPlan):
        self.config, self.model, self.plan = config, model, plan
        self.dtype = model.dtype
        self.chains = plan.batch_size * plan.chains
        s = config.sampler
        # chunks end only where the adaptation needs them to (the draws do not depend on where)
        self.sampler = dataclasses.replace(s, chains=self.chains, chunk_size=s.num_warmup + s.num_samples)
        self.schedule = schedule_for(config, self.sampler)
        if model.has_field:
            self.voxels = fixed_voxels(model.grid.shape, model.observations.mask)
            self.names = quantity_names(model.param_names, len(model.k_centres), self.voxels)
        else:
            self.voxels = []
            self.names = quantity_names(model.param_names)
        self.observer = _TestQuantities(self)
        try:
            self.driver = Driver(model, self.sampler, self.schedule, hyper_metric=hyper_metric(config),
                                 chains_per_posterior=plan.chains, observer=self.observer,
                                 devices=_devices(config))
        except DriverError as err:
            raise EngineError(str(err)) from None

    # -- quantities ----------------------------------------------------------------

    def _loglik_integral(self, values, y):
        spec, dtype = self.model.spec, self.dtype
        full = {k: (values[k] if k in values else tf.constant(spec.priors[k].value, dtype)
                    + tf.zeros_like(y[..., 0])) for k in ("A", "c", "sigma")}
        r = y - full["c"][..., None] - self.model.density.integral(full["A"])
        n = spec.y.size
        return (-0.5 * n * LOG_2PI - n * tf.math.log(full["sigma"])
                - 0.5 * tf.reduce_sum(r * r, axis=-1) / full["sigma"]**2)

    def quantities(self, view, parts):
        """(chains, Q) test quantities at the state ``parts`` (x coordinates) of the model ``view``
        (its likelihood against each chain's data), and the field."""
        model = self.model
        if getattr(model, "model_file", None) is not None:
            return self._file_quantities(view.log_likelihood_at(parts), parts)
        if model.has_field:
            density = view.posterior
            latent, eta = parts[0], (parts[1] if len(parts) > 1 else None)
            x = density.field(latent, eta) + density.observations.field_mean
            loglik = density.log_likelihood_of_signal(density.signal(latent, eta))
            columns = [model.params(parts), loglik[:, None], model.field_power(x)]
            if self.voxels:
                columns.append(tf.stack([x[:, i, j, k] for i, j, k in self.voxels], axis=-1))
            return tf.concat(columns, axis=-1), x
        values = model.density.constrain(parts[0])
        params = tf.stack([values[n] for n in model.param_names], axis=-1)
        return tf.concat([params, self._loglik_integral(values, view.density._y)[:, None]], axis=-1), None

    def truth_quantities(self, sim_model, data, truth):
        """(S, Q) true quantities, the log-likelihood under the model (not the simulator),
        and the true field (S, ...) or None."""
        model = self.model
        if getattr(model, "model_file", None) is not None:
            q, x = self._file_quantities(model.with_data(data).log_likelihood_at(truth), truth)
            return np.asarray(q, np.float64), x
        if model.has_field:
            sim_post = sim_model.posterior
            latent, eta = truth[0], (truth[1] if len(truth) > 1 else None)
            x = sim_post.field(latent, eta) + sim_post.observations.field_mean
            signal = sim_post.signal(latent, eta)
            loglik = model.with_data(data).posterior.log_likelihood_of_signal(signal)
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

    def _file_quantities(self, loglik, parts):
        """A model file's model: the sampled parameters, the log-likelihood ``loglik`` and, for a
        field, its P(k) and the fixed voxels -> ((chains, Q), the field or None)."""
        model = self.model
        columns = [model.params(parts), loglik[:, None]]
        if not model.has_field:
            return tf.concat(columns, axis=-1), None
        x = model.field(parts)
        columns.append(model.field_power(x))
        if self.voxels:
            columns.append(tf.stack([x[:, i, j, k] for i, j, k in self.voxels], axis=-1))
        return tf.concat(columns, axis=-1), x

    # -- the sampler ------------------------------------------------------------------

    def sample(self, data, truth_field, seed: int):
        """Warmup and sampling of every chain of the batch by the driver, from ``seed`` (the
        chains' initial state, every step, the step-size searches), on the simulations' ``data``
        and true fields (one row each, or None) -> the kept quantities (n_keep, chains, Q), the
        voxel counts below the truth (chains, ...), post-warmup divergences and acceptance sums
        (chains,)."""
        driver, sched, C = self.driver, self.schedule, self.plan.chains
        prepare = getattr(self.model, "calibration_data", None)      # "conditional": each one's centre
        data = prepare(data) if prepare is not None else data
        data_c = tf.nest.map_structure(lambda a: tf.repeat(_as_data(a, self.dtype), C, axis=0), data)
        truth_c = (tf.repeat(truth_field, C, axis=0) if truth_field is not None
                   else tf.zeros([self.chains, 1], self.dtype))
        try:
            st = driver.fresh_state(data_c, seed=seed)
        except DriverError as err:
            raise EngineError(str(err)) from None
        observed = self.observer.fresh(truth_c)
        div = np.zeros(self.chains, np.int64)
        acc = np.zeros(self.chains, np.float64)
        for first, n in sched.boundaries(0):
            out = driver.run_chunk(st, first, n, data_c, observed)
            driver.advance(st, out, first, n)
            observed = out["observed"]
            post = np.arange(first, first + n) >= sched.num_warmup
            div += np.asarray(out["traces"]["diverging"])[:n][post].sum(axis=0)
            acc += np.asarray(out["traces"]["acceptance_rate"], np.float64)[:n][post].sum(axis=0)
            driver.at_boundary(st, data_c)
        keep_buf, below, _, _ = observed
        return keep_buf, below, div, acc

    def run_batch(self, sim_model, b: int, sampler, plan: CalibrationPlan) -> BatchResult:
        """Batch ``b`` of ``plan`` (the program's own plan was that of the calibration it was
        built for; they share its batch size, draws and chains)."""
        model = self.model
        indices = list(plan.batch(b))
        data, truth = simulate_batch(sim_model, indices, plan.seed)
        truth_q, truth_field = self.truth_quantities(sim_model, data, truth)
        C = plan.chains
        keep_buf, below, div, acc = self.sample(data, truth_field, batch_sampler_seed(plan.seed, b))
        S, n_keep = plan.batch_size, plan.draws_per_chain
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
            divergences=div.reshape(S, C).sum(axis=1)[:kept].astype(np.int32),
            acceptance=(acc.reshape(S, C).sum(axis=1) / n_post)[:kept],
            voxel_rank=None if voxel_rank is None else voxel_rank[:kept].astype(np.int32))


def _program_key(config: RunConfig, plan: CalibrationPlan):
    """What a compiled program depends on: the config but for the sampler's seed (each batch has
    its own, a program argument), and the plan but for its seed and number of simulations."""
    neutral = dataclasses.replace(config, sampler=dataclasses.replace(config.sampler, seed=0))
    return dump_config(neutral), str(config.base_dir), dataclasses.replace(plan, seed=0, simulations=plan.batch_size)


def _devices(config: RunConfig) -> list[str]:
    """The devices a batch's chains spread over (``sampler.devices``; on a CPU split before
    TensorFlow starts, so called before any model is built). A sharded field is refused: its
    batches are many whole fields, which their chains spread over the devices."""
    if config.field is not None and config.field.shard != "none":
        raise PlanError(f"field.shard = {config.field.shard!r}: calibration runs batches of whole fields, "
                        "their chains spread over sampler.devices; set field.shard = \"none\" to calibrate")
    try:
        return chain_devices(config.sampler.devices)
    except DeviceError as err:
        raise PlanError(str(err)) from None


def _program(config: RunConfig, plan: CalibrationPlan, model=None) -> _Program:
    _devices(config)
    key = _program_key(config, plan)
    if key not in _PROGRAMS:
        _PROGRAMS.clear()            # one at a time: a program holds its model's constants
        _PROGRAMS[key] = _Program(config, model if model is not None else build_model(config), plan)
    return _PROGRAMS[key]


def calibration_models(config: RunConfig, simulate_config: RunConfig | None, plan: CalibrationPlan):
    """(the config's model, the model that simulates: ``simulate_config``'s or the same, the
    compiled program of ``plan``'s batches); PlanError when the pair cannot be calibrated."""
    _devices(config)
    try:
        model = build_model(config)
    except ModelFileError as err:
        raise PlanError(str(err)) from None
    model_file = getattr(model, "model_file", None)
    if model_file is not None and model_file.simulate_fn is None and simulate_config is None:
        arguments = ", ".join(ARGUMENTS[model_file.kind]["simulate"])
        raise PlanError(f"{model_file.path}: defines no simulate; calibration draws data from the model: "
                        f"add def simulate({arguments}) returning a dict of the data arrays the "
                        f"likelihood reads ({', '.join(model.data)})")
    sim_model = model
    if simulate_config is not None:
        sim_model = build_model(simulate_config)
        _check_same_model(model, sim_model, simulate_config)
    program = _program(config, plan, model)
    if program.model is not model:
        model = program.model
        if simulate_config is None:
            sim_model = model
    return model, sim_model, program


# ---------------------------------------------------------------------------- the calibrator


class _Pace:
    """Seconds per stored batch, by the wall clock: the first batch's time (its compilation
    included) until a second is stored, then the mean time between stored batches after the
    first (batches that run at once on a cluster arrive in bursts, in order)."""

    def __init__(self):
        self.start = time.perf_counter()
        self.first = None
        self.count = 0

    def stored(self) -> float:
        now = time.perf_counter()
        self.count += 1
        if self.first is None:
            self.first = now
            return now - self.start
        return (now - self.first) / (self.count - 1)


class Calibrator:
    """Runs (or resumes) one calibration into ``out_dir/calibration.zarr``.

    ``simulate_config`` / ``simulate_text``: simulate the data with another config (None:
    the config itself). ``on_batch(info)`` is called after each stored batch with
    {batch, batches, simulations_done, simulations, seconds, eta, verdict}; ``emit(text)``
    gets the phase lines (loading, compiling). ``scheduler``: run the batches on that Dask
    cluster (``core.calibration.cluster``, ``core.engine.calibrate_cluster``) instead of in
    this process; the ranks are the same, and this process alone writes the store."""

    def __init__(self, config: RunConfig, config_text: str, out_dir, *, simulations: int,
                 draws: int | None = None, batch_size: int | None = None,
                 simulate_config: RunConfig | None = None, simulate_text: str = "",
                 control: Control | None = None, on_batch: Callable[[dict], None] | None = None,
                 emit: Callable[[str], None] | None = None, scheduler: Scheduler | None = None):
        self.config, self.config_text = config, config_text
        self.scheduler = scheduler
        self._cluster = None                # the Dask cluster's connection while batches run there
        self.out_dir = Path(out_dir)
        self.simulate_config, self.simulate_text = simulate_config, simulate_text or ""
        self.control = control or Control()
        self.on_batch = on_batch or (lambda info: None)
        self.emit = emit or (lambda text: None)
        self.store = None
        self.batches_this_session = 0       # stored by this process (a first Ctrl-C before one stops at once)
        self.plan = plan_for_config(config, simulations=simulations, draws=draws, batch_size=batch_size)

    def existing(self) -> CalibrationReader | None:
        """The store already in ``out_dir`` if it is this calibration (resumable); None if
        there is none; PlanError naming what differs otherwise."""
        if not (self.out_dir / STORE_NAME).exists():
            return None
        reader = CalibrationReader(self.out_dir)
        differences = plan_differences(reader.attrs, self.config_text, self.simulate_text, self.plan,
                                       model_file_sha256(self.config))
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

    def _models(self):
        """(the config's model, the model that simulates, the compiled program)."""
        if self.scheduler is not None:       # the workers compute; this process only writes the store
            from core.engine.devices import hide_gpus

            hide_gpus()
        self.emit("loading")
        return calibration_models(self.config, self.simulate_config, self.plan)

    def _run(self, existing) -> str:
        model, sim_model, program = self._models()
        if existing is None:
            self.store = CalibrationWriter.create(
                self.out_dir, config_text=self.config_text, config_dir=self.config.base_dir,
                simulate_text=self.simulate_text, plan=self.plan, quantities=program.names, model_kind=model.kind,
                grid_shape=model.grid.shape if model.has_field else None,
                k=model.k_centres if model.has_field else None, voxels=program.voxels,
                model_file_sha256=model_file_sha256(self.config))
        else:
            self.store = CalibrationWriter.reopen(self.out_dir)
        first = self.store.progress["batches"]
        seconds = float(self.store.root.attrs.get("timing", {}).get("seconds", 0.0))
        if first >= self.plan.batches:
            self.store.set_status("finished")
            return "finished"
        self.store.set_status("running")
        try:
            pace = _Pace()
            for b, result, elapsed in self._batches(first, program, sim_model):
                seconds += elapsed
                with self.control.writing:
                    run_lock.verify(self.out_dir)
                    self.store.append(result.rows(list(self.plan.batch(b))[:self.plan.kept(b)]), b + 1, seconds)
                    self.batches_this_session += 1
                per_batch = pace.stored()
                self.on_batch({"batch": b + 1, "batches": self.plan.batches,
                               "simulations_done": self.store.progress["simulations"],
                               "simulations": self.plan.simulations, "seconds": per_batch,
                               "eta": per_batch * (self.plan.batches - b - 1),
                               "verdict": judge(CalibrationReader(self.out_dir).ranks(), program.names,
                                                self.plan.draws).line()})
            if self.store.progress["batches"] < self.plan.batches:
                self.store.set_status("stopped")
                return "stopped"
            self.store.set_status("finished")
            return "finished"
        except (EngineError, CalibrationStoreError, run_lock.LockHeld) as err:
            self._fail(str(err))
            raise
        except Exception as err:
            failure = failure_of(err, getattr(model, "model_file", None))
            if failure is not None:         # the user's code: its file and line, one line
                self._fail(str(failure))
                raise EngineError(str(failure)) from None
            self._fail(f"{type(err).__name__}: {err}")
            raise

    def _batches(self, first: int, program, sim_model):
        """(b, BatchResult, seconds) of the unfinished batches from ``first`` in order, run here
        or on the Dask cluster of ``scheduler`` (``core.engine.calibrate_cluster``); ends early
        when ``control.stop`` is set."""
        todo = range(first, self.plan.batches)
        if self.scheduler is not None:
            from core.engine.calibrate_cluster import BatchJob, ClusterBatches, input_sha256

            sim = self.simulate_config
            job = BatchJob(dump_config(self.config), str(self.config.base_dir),
                           dump_config(sim) if sim is not None else "", str(sim.base_dir) if sim is not None else "",
                           self.plan, input_sha256(self.config, sim))
            with ClusterBatches(self.scheduler, self.emit) as self._cluster:
                yield from self._cluster.results(job, todo, self.control)
            return
        for b in todo:
            if self.control.stop:
                return
            if b == first:
                self.emit("compiling")
            t0 = time.perf_counter()
            result = program.run_batch(sim_model, b, self.config.sampler, self.plan)
            yield b, result, time.perf_counter() - t0

    def abandon(self) -> None:
        """The process ends at once (a stop signal before the first batch was stored): end a
        LocalCluster's workers and disconnect first."""
        if self._cluster is not None:
            self._cluster.close()

    def _fail(self, message: str) -> None:
        try:
            self.store.set_status("failed", message)
        except CalibrationStoreError:
            pass


def _as_data(a, dtype) -> tf.Tensor:
    """A simulation batch's array for the chains' programs: real ones in the run's dtype, complex
    ones as they are (the slab's exact conditional reads its data's transform in complex128)."""
    a = tf.convert_to_tensor(a)
    return a if a.dtype.is_complex else tf.cast(a, dtype)
