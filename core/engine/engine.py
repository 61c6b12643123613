"""The sampling engine: adaptive HMC or NUTS in XLA-compiled chunks, streamed to a run store.

One run = one config + one run directory. The engine

* builds the model (``core.engine.models``) and a TFP kernel: HamiltonianMonteCarlo (its leapfrog
  a while loop whose buffers XLA reuses; unrolled where that costs little memory,
  ``core.run.engine_limits.unrolls``) or NUTS (``core.engine.nuts``: its memory bounded by
  the tree depth, not TFP's NoUTurnSampler's 312 grid-sized buffers a chain), wrapped in
  DualAveragingStepSizeAdaptation with one step size per chain; or MCLMC / MAMS
  (``core.engine.microcanonical``: the microcanonical samplers and their own warmup tuning,
  each chain its own step size and L, their tuning state carried through the chunks and the
  checkpoint like dual averaging's);
* runs ``chunk_size`` steps per call of one ``tf.function(jit_compile=True)``, all chains
  vectorised; the number of steps is a tensor, so one compiled function serves every chunk;
* records every step's log-density, gradient norm, acceptance probability, step size,
  energy error, divergence flag, leapfrog count and parameters; every ``thin``-th
  post-warmup field draw and its P(k); running field moments over every post-warmup draw;
* after each chunk appends to the run store, writes an exact checkpoint and publishes a
  progress event; between chunks it honours pause and stop.

Reproducibility. The random seed of step g is fold_in(seed, g), and each chunk starts
from the state, log-density and gradient that the previous chunk ended with (the kernel's
bootstrap values are replaced by those), so the draws do not depend on where chunks
begin: a run stopped and resumed gives the very same draws as one run straight through.

Faults. A field run that cannot fit in the machine's free memory is refused before the
model loads (``core.run.resources``). A write that fails during the run (a full disk) raises
``core.store.run_store.StoreWriteError``: the run ends as failed with the reason (recorded in the
store when it can still be written), the chunks already published stay readable, and
``resume`` continues from the last checkpoint. ``core.engine.warmup.WarmupWatch`` ends a warmup whose
log-density is NaN everywhere, whose step size collapses or which accepts nothing, with a
diagnosis naming what to check, after storing the chunk that shows it.

Warmup. Dual averaging adapts each chain's step size for ``num_warmup`` steps towards
``target_accept``, from the step size ``core.engine.step_search`` finds for that chain at its
fresh state (``sampler.step_size`` is the search's first guess; its momenta come from
fold_in((seed, 104729), step), so the search is reproducible; a resumed run restores the step
sizes from its checkpoint and never searches again), with the shrinkage target
mu = log(10 eps0) as Stan. With ``preconditioner = "diagonal"`` the variance of each state coordinate is
estimated over the window [15 %, 75 %) of warmup (pooled over chains, regularised as in
Stan); at 75 % a diagonal mass matrix M = 1/var is set, the step size is searched again in the
new coordinates (as Stan does after each metric update) and dual averaging restarts from it
for the rest of warmup. The mass matrix is applied as the equivalent change of variables: the
kernel moves z with x = s * z, s = sqrt(var), on the target p(s * z) (identity mass in z is
mass 1/s^2 in x), so the same HMC kernel serves both cases. Everything recorded is in x.
``preconditioner = "fourier"`` is the model's own change of variables
(``core.engine.field_density``): the engine sees an already preconditioned state. It scales
the field only; sampled P(k) hyperparameters get the adapted diagonal above (the same window,
the field's scale held at 1): their posterior sd (0.03 for the index of issue #12's 32^3
case) is far from the field's unit scale, and an unscaled hyperparameter sets the step size.
For MCLMC / MAMS the window is their tuning's variance stage and their step size goes on
from its value (``core.engine.microcanonical``); their stage ends also end chunks
(``Schedule.tune_stops``), where their stage transitions run between chunks.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from core import config as cfgmod
from core.engine import microcanonical
from core.engine.devices import compute_device, gpu_free_memory, memory_kind
from core.engine.kernels import LoopedHamiltonianMonteCarlo, UnrolledHamiltonianMonteCarlo
from core.engine.models import build_model, nonfinite_report
from core.engine.nuts import IterativeNoUTurnSampler
from core.engine.step_search import NUTS_SEARCH_ACCEPT, find_initial_step_size
from core.engine.warmup import WarmupWatch
from core.field.power_spectrum import hyperparameter_priors
from core.run import input_files, run_folder
from core.run.engine_limits import LEAPFROG_STEPS_PER_ITERATION, field_buffer_draws, stage2_apart, unrolls
from core.run.messages import STAT_DTYPES, STAT_NAMES, Estimate, chunk_event, new_progress, status_event
from core.store import run_lock
from core.store.run_store import (
    ChunkRecord,
    RunStoreError,
    RunStoreWriter,
    StoreWriteError,
    read_checkpoint,
    write_checkpoint,
)

__all__ = ["Engine", "EngineError", "Control", "Schedule", "DIVERGENCE_THRESHOLD",
           "CHECKPOINT_FORMAT", "samples_hyperparameters"]

tfd = tfp.distributions

DIVERGENCE_THRESHOLD = 1000.0   # energy error beyond which a transition counts as divergent
CHECKPOINT_FORMAT = 1



def samples_hyperparameters(config) -> bool:
    """Whether a field config samples a P(k) hyperparameter (a prior table, not a number)."""
    if config.model.kind != "field":
        return False
    return any(not prior.is_fixed for prior in hyperparameter_priors(config.prior).values())

class EngineError(RuntimeError):
    """A run that cannot go on, with a diagnosis a user can act on."""


@dataclass
class Control:
    """Commands from outside, checked between chunks (thread-safe enough: plain flags).

    ``writing`` is held by the engine while it writes the run store or its checkpoint: a
    client that must end the process at once (a second Ctrl-C) takes it first, so that it
    never cuts a write short, and keeps it, so that nothing is written after it."""

    stop: bool = False
    pause: bool = False
    writing: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    def wait_while_paused(self, on_pause: Callable[[], None], on_resume: Callable[[], None]):
        if not self.pause:
            return
        on_pause()
        while self.pause and not self.stop:
            time.sleep(0.05)
        on_resume()


@dataclass
class Schedule:
    num_warmup: int
    num_samples: int
    chunk_size: int
    mass_start: int | None = None
    mass_end: int | None = None
    tune_stops: tuple[int, ...] = ()      # further steps where a chunk ends (MCLMC / MAMS stages)

    @property
    def total(self) -> int:
        return self.num_warmup + self.num_samples

    def boundaries(self, start: int) -> list[tuple[int, int]]:
        """Chunks (first step, n steps) from ``start`` to the end; adaptation points end chunks."""
        stops = {self.num_warmup, self.total, *self.tune_stops}
        if self.mass_end is not None:
            stops.add(self.mass_end)
        out, g = [], start
        while g < self.total:
            nxt = min([s for s in stops if s > g] + [g + self.chunk_size])
            out.append((g, nxt - g))
            g = nxt
        return out


def _config_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Engine:
    """Runs one config into one run directory. Use :meth:`start` or :meth:`resume`."""

    #: consecutive chains that sample one posterior (None: every chain; a calibration batch
    #: sets each simulation's chains): MCLMC's chains share their sampling step size in these
    chains_per_posterior: int | None = None

    def __init__(self, config: cfgmod.RunConfig, config_text: str, run_dir, *,
                 emit: Callable[[dict], None] | None = None, control: Control | None = None):
        self.config = config
        self.config_text = config_text
        self.run_dir = Path(run_dir)
        self.emit = emit or (lambda event: None)
        self.control = control or Control()
        s = config.sampler
        self.sampler = s
        self._part_shapes = None     # the state parts' shapes less the chain axis (MCLMC / MAMS)
        # "fourier" scales the field; sampled hyperparameters get the adapted diagonal
        self._hyper_diagonal = s.preconditioner == "fourier" and samples_hyperparameters(config)
        diagonal = (s.preconditioner == "diagonal" or self._hyper_diagonal) and s.num_warmup >= 20
        stops = ()
        if self._is_microcanonical():
            # the diagonal's window is the tuning's variance stage (core.engine.microcanonical)
            window, stops = microcanonical.schedule_points(s.algorithm, s.num_warmup, diagonal)
            mass = window or (None, None)
        else:
            mass = (int(0.15 * s.num_warmup), int(0.75 * s.num_warmup)) if diagonal else (None, None)
        self.schedule = Schedule(s.num_warmup, s.num_samples, s.chunk_size, *mass, tune_stops=stops)

    # -- set-up -------------------------------------------------------------------

    def _status(self, status: str, **extra):
        self.emit(status_event(status, **extra))

    def _build(self, estimate: Estimate | None = None):
        self._status("loading", estimate=estimate or None)
        self.model = build_model(self.config)
        self.dtype = self.model.dtype
        if self._is_microcanonical():
            self._tuner = self._microcanonical(self.model.target_log_prob_fn)
        self.device = compute_device()
        self._status("compiling", device=self.device)
        self._chunk_fn = self._make_chunk_fn()
        self._search_fn = None

    def _make_kernel(self, step_size, scale, num_adapt):
        """DA(HMC or NUTS) on z, with x = scale * z (scale = 1 before mass adaptation)."""
        s, model = self.sampler, self.model
        target = model.target_log_prob_fn

        def target_z(*z):
            return target(*[si * zi for si, zi in zip(scale, z)])

        n_values = model.grid.n_cells if model.has_field else 1
        if s.algorithm == "nuts":
            inner = IterativeNoUTurnSampler(target_z, step_size)
        elif unrolls(s.num_leapfrog_steps, s.chains, n_values, self.dtype.size):
            # small runs: the unrolled loop is faster on CPU, and its memory is small
            inner = UnrolledHamiltonianMonteCarlo(target_z, step_size, s.num_leapfrog_steps)
        else:
            # a while loop over the leapfrog steps: XLA reuses one iteration's buffers, so
            # the memory does not grow with the trajectory (issue #13; docs/benchmarks.md)
            inner = LoopedHamiltonianMonteCarlo(target_z, step_size, s.num_leapfrog_steps,
                                                steps_per_iteration=LEAPFROG_STEPS_PER_ITERATION)
        return tfp.mcmc.DualAveragingStepSizeAdaptation(
            inner, num_adaptation_steps=num_adapt, target_accept_prob=tf.constant(s.target_accept, self.dtype))

    def _is_nuts(self) -> bool:
        return self.sampler.algorithm == "nuts"

    def _is_microcanonical(self) -> bool:
        return self.sampler.algorithm in microcanonical.SAMPLERS

    def _microcanonical(self, target, has_aux: bool = False):
        """The MCLMC / MAMS sampler of this run on ``target`` (``core.engine.microcanonical``;
        ``has_aux``: ``target`` returns (log p, aux parts))."""
        s = self.sampler
        if self._part_shapes is None:
            # the state's shapes, from one draw (eager, at build): not a prior draw in every trace
            self._part_shapes = [tuple(p.shape[1:]) for p in self.model.initial_state(s.chains, s.seed)]
        parts = [tf.zeros([s.chains, *shape], self.dtype) for shape in self._part_shapes]
        extra = {"target_accept": s.target_accept} if s.algorithm == "mams" else {}
        try:
            return microcanonical.SAMPLERS[s.algorithm](
                target, parts, s.chains, self.dtype, s.num_warmup, self.schedule.mass_end is not None,
                s.step_size, divergence_threshold=DIVERGENCE_THRESHOLD,
                chains_per_posterior=self.chains_per_posterior, has_aux=has_aux, **extra)
        except ValueError as err:
            raise EngineError(f"sampler.algorithm = {s.algorithm!r}: {err}; this model has "
                              f"{microcanonical.n_dims(parts)}: use \"hmc\" or \"nuts\"") from None

    def _make_chunk_fn(self):
        model, s, sched = self.model, self.sampler, self.schedule
        dtype = self.dtype
        chains = s.chains
        base_seed = tf.constant([s.seed, 7919], tf.int32)
        n_params = len(model.param_names)
        max_fields = field_buffer_draws(s.chunk_size, s.thin) if model.has_field else 0
        has_field = model.has_field
        adapt_mass = sched.mass_end is not None

        shift = float(model.observations.field_mean) if has_field else 0.0

        def chunk(state, tlp, grads, da, read_only, scale, mass_acc, step0, n_steps, with_mass, draws):
            # da, HMC / NUTS: step_size, error_sum, log_avg (lists per part), da_step, num_adapt,
            # shrink (list); MCLMC / MAMS: the part of their tuning state this chunk carries,
            # and read_only the part it reads but does not return (core.engine.microcanonical's
            # chunk_keys). mass_acc: the mass-matrix sums if with_mass, else () (not taken, not
            # returned: a value returned unchanged is still a copy). draws: whether the chunk
            # may reach the sampling phase (False: its field draws and sums are not made)
            def x_of(z):
                return [si * zi for si, zi in zip(scale, z)]

            if self._is_microcanonical():
                # the field at the state rides along (the density computes it for the
                # likelihood; the moments and draws take it instead of a transform of their own)
                results = (tlp, list(grads), {**da, **read_only},
                           *([[model.field(x_of(state))]] if has_field else []))
                kernel_step = self._microcanonical_step(scale, with_field=has_field)
            else:
                results, kernel_step = self._tfp_step(state, tlp, grads, da, scale)
            has_draws = has_field and draws

            def ta(dt, size=s.chunk_size):
                return tf.TensorArray(dt, size=size, element_shape=None)

            traces = {name: ta(tf.as_dtype(STAT_DTYPES[name]) if name in STAT_DTYPES else dtype)
                      for name in STAT_NAMES}
            params_ta = ta(dtype)
            field_buf = (tf.zeros([max(max_fields, 1), chains, *model.grid.shape], dtype)
                         if has_draws else tf.zeros([1], dtype))
            power_buf = (tf.zeros([max(max_fields, 1), chains, len(model.k_centres)], dtype)
                         if has_draws else tf.zeros([1], dtype))
            # this chunk's sums of x - field_mean and its square, in the model's dtype (the run's
            # float64 totals are the host's: Engine._fold_moments)
            moment_shape = model.grid.shape if has_draws else [1]
            moments = (tf.constant(0.0, tf.float64), tf.zeros(moment_shape, dtype), tf.zeros(moment_shape, dtype))

            def body(t, state, results, traces, params_ta, field_buf, power_buf, n_fields, moments, mass_acc):
                g = step0 + t
                seed = tf.random.experimental.stateless_fold_in(base_seed, g)
                state, results, stats, grads_now = kernel_step(state, results, seed, g)
                # the gradient with respect to x: d/dx = (d/dz) / scale
                grad_sq = tf.add_n([tf.reduce_sum(tf.reshape(gp / si, [chains, -1])**2, axis=1)
                                    for gp, si in zip(grads_now, scale)])
                stats = {**stats, "grad_norm": tf.sqrt(grad_sq)}
                traces = {name: traces[name].write(t, stats[name]) for name in STAT_NAMES}
                x_parts = x_of(state)
                field_now = results[3][0] if self._is_microcanonical() and has_field else None
                params_ta = params_ta.write(t, tf.reshape(model.params(x_parts), [chains, n_params]))
                if with_mass:
                    in_window = tf.logical_and(g >= sched.mass_start, g < sched.mass_end)
                    count, mean, m2 = mass_acc

                    def update():
                        new_count = count + 1.0
                        new_mean, new_m2 = [], []
                        for part, mu, q in zip(x_parts, mean, m2):
                            batch_mean = tf.reduce_mean(part, axis=0)
                            delta = batch_mean - mu
                            mu_new = mu + delta / new_count
                            new_mean.append(mu_new)
                            new_m2.append(q + tf.reduce_mean((part - mu) * (part - mu_new), axis=0))
                        return new_count, new_mean, new_m2

                    mass_acc = tf.cond(in_window, update, lambda: (count, list(mean), list(m2)))
                if has_draws:
                    post = g >= sched.num_warmup

                    def accumulate():
                        x = model.field(x_parts) if field_now is None else field_now
                        dev = x - tf.constant(shift, dtype)
                        count, total, total_sq = moments
                        keep = tf.equal(tf.math.floormod(g - sched.num_warmup, s.thin), 0)

                        def store():
                            return (tf.tensor_scatter_nd_update(field_buf, [[n_fields]], x[None]),
                                    tf.tensor_scatter_nd_update(power_buf, [[n_fields]], model.field_power(x)[None]),
                                    n_fields + 1)

                        fb, pb, nf = tf.cond(keep, store, lambda: (field_buf, power_buf, n_fields))
                        return (count + chains, total + tf.reduce_sum(dev, axis=0),
                                total_sq + tf.reduce_sum(dev * dev, axis=0)), fb, pb, nf

                    moments, field_buf, power_buf, n_fields = tf.cond(
                        post, accumulate, lambda: (moments, field_buf, power_buf, n_fields))
                return t + 1, state, results, traces, params_ta, field_buf, power_buf, n_fields, moments, mass_acc

            loop_vars = (tf.constant(0), state, results, traces, params_ta, field_buf, power_buf,
                         tf.constant(0), moments, mass_acc)
            (_, state, results, traces, params_ta, field_buf, power_buf, n_fields, moments,
             mass_acc) = tf.while_loop(lambda t, *rest: t < n_steps, body, loop_vars,
                                       maximum_iterations=s.chunk_size)
            if self._is_microcanonical():
                tlp_out, grads_out, tune_out = results[:3]
                da_out = {key: value for key, value in tune_out.items() if key not in read_only}
            else:
                inner = results.inner_results
                if self._is_nuts():
                    tlp_out, grads_out = inner.target_log_prob, inner.grads_target_log_prob
                else:
                    tlp_out = inner.accepted_results.target_log_prob
                    grads_out = inner.accepted_results.grads_target_log_prob
                da_out = {"step_size": list(results.new_step_size), "error_sum": list(results.error_sum),
                          "log_avg": list(results.log_averaging_step), "da_step": results.step,
                          "num_adapt": da["num_adapt"], "shrink": list(results.log_shrinkage_target)}
            stacked = {name: arr.stack() for name, arr in traces.items()}
            return (list(state), tlp_out, list(grads_out), da_out, mass_acc, moments, stacked,
                    params_ta.stack(), field_buf, power_buf, n_fields)

        def call(program, st, first, n, with_mass, held=frozenset(), read_only=frozenset()):
            da = {k: v for k, v in st["da"].items() if k not in held and k not in read_only}
            fixed = {k: v for k, v in st["da"].items() if k in read_only}
            out = list(program(st["state"], st["tlp"], st["grads"], da,
                               fixed, st["scale"], st["mass_acc"] if with_mass else (),
                               tf.constant(first, tf.int32), tf.constant(n, tf.int32)))
            if held or fixed:     # the tuning arrays this chunk did not carry, as they were
                out[3] = {**{k: st["da"][k] for k in held | read_only}, **out[3]}
            if not with_mass:
                out[4] = st["mass_acc"]
            return tuple(out)

        if not self._is_microcanonical():
            # one program (HMC / NUTS: a step is many gradients, the accumulation's per-step
            # tf.cond is noise beside them and a second compilation would cost start-up time)
            program = tf.function(lambda *a: chunk(*a, with_mass=adapt_mass, draws=True), jit_compile=True)
            return lambda st, first, n: call(program, st, first, n, adapt_mass)
        # MCLMC / MAMS (two gradients a step). With the diagonal adapted, two programs: one with
        # the mass-matrix accumulation for the chunks that overlap its window (stage 2) and one
        # without (its per-step tf.cond cost 6-15 % of a 32^3 step where it did nothing,
        # docs/benchmarks.md). Without it, one program, unless the moments of z are large
        # (core.run.engine_limits.stage2_apart): then the chunks of stage 2 have a program with
        # them, the others one without (issue #13). Stage 2 ends in warmup: its program makes
        # no field draws.
        tuner = self._tuner
        n_values = model.grid.n_cells if has_field else 1
        apart = adapt_mass or (tuner.uses_moments() and stage2_apart(chains, n_values))
        if adapt_mass and (sched.mass_start, sched.mass_end) != (tuner.stages.b1, tuner.stages.b2):
            raise EngineError(f"the mass-matrix window {sched.mass_start, sched.mass_end} is not stage 2 "
                              f"{tuner.stages.b1, tuner.stages.b2} of {s.algorithm}'s warmup")
        programs = {flag: tf.function(lambda *a, flag=flag: chunk(*a, with_mass=flag and adapt_mass,
                                                                     draws=not flag), jit_compile=True)
                    for flag in ((False, True) if apart else (False,))}

        def run_chunk(st, first, n):
            stage2 = apart and tuner.in_stage2(first, n)
            held, read_only = tuner.chunk_keys(stage2 if apart else None)
            return call(programs[stage2], st, first, n, stage2 and adapt_mass, held, read_only)
        return run_chunk

    def _tfp_step(self, state, tlp, grads, da, scale):
        """DA(HMC or NUTS) in the chunk: its kernel results, bootstrapped from the chunk's
        start values, and one step -> (state, results, statistics, gradient)."""
        s, chains = self.sampler, self.sampler.chains
        kernel = self._make_kernel(da["step_size"], scale, da["num_adapt"])
        results = kernel.bootstrap_results(state)
        inner = results.inner_results
        if self._is_nuts():
            inner = inner._replace(target_log_prob=tlp, grads_target_log_prob=grads)
        else:
            inner = inner._replace(accepted_results=inner.accepted_results._replace(
                target_log_prob=tlp, grads_target_log_prob=grads))
        results = results._replace(
            inner_results=inner, new_step_size=da["step_size"], error_sum=da["error_sum"],
            log_averaging_step=da["log_avg"], step=da["da_step"], log_shrinkage_target=da["shrink"])

        def step(state, results, seed, g):
            used_step = tf.reshape(results.new_step_size[0], [chains])
            state, results = kernel.one_step(state, results, seed=seed)
            inner = results.inner_results
            if self._is_nuts():
                lp, grads_now, lar = inner.target_log_prob, inner.grads_target_log_prob, inner.log_accept_ratio
                n_leap = tf.cast(inner.leapfrogs_taken, tf.int32)
                diverging = inner.has_divergence
            else:
                lp = inner.accepted_results.target_log_prob
                grads_now = inner.accepted_results.grads_target_log_prob
                lar = inner.log_accept_ratio
                n_leap = tf.fill([chains], tf.constant(s.num_leapfrog_steps, tf.int32))
                diverging = tf.logical_or(~tf.math.is_finite(lar), -lar > DIVERGENCE_THRESHOLD)
            accept = tf.where(tf.math.is_finite(lar), tf.exp(tf.minimum(lar, 0.)), tf.zeros_like(lar))
            stats = {"lp": lp, "acceptance_rate": accept, "step_size": used_step, "energy_error": -lar,
                     "diverging": diverging, "n_steps": n_leap,
                     "trajectory_length": used_step * tf.cast(n_leap, used_step.dtype)}
            return state, results, stats, grads_now
        return results, step

    def _microcanonical_step(self, scale, with_field: bool = False):
        """MCLMC or MAMS in the chunk, on z with x = scale * z: one step ->
        (state, (lp, gradient, tuning), statistics, gradient); ``with_field``: results and
        its return end with [the field at the state] (``FieldModel.target_log_prob_and_field``)."""
        target = self.model.target_log_prob_and_field if with_field else self.model.target_log_prob_fn
        sampler = self._microcanonical(lambda *z: target(*[si * zi for si, zi in zip(scale, z)]),
                                       has_aux=with_field)

        def step(state, results, seed, g):
            lp, grads, tune, *aux = results
            state, lp, grads, tune, stats, aux = sampler.one_step(list(state), lp, grads, tune, seed, g,
                                                                  aux[0] if aux else ())
            return state, (lp, grads, tune, *([aux] if with_field else [])), {**stats, "lp": lp}, grads
        return step

    # -- state: fresh, checkpointed, restored -----------------------------------------

    def _fresh_state(self):
        s, model = self.sampler, self.model
        parts = [tf.convert_to_tensor(p, self.dtype) for p in model.initial_state(s.chains, s.seed)]
        lp_and_grad = tf.function(
            lambda *p: tfp.math.value_and_gradient(lambda *q: model.target_log_prob_fn(*q), list(p)),
            jit_compile=True)
        tlp, grads = lp_and_grad(*parts)
        if not np.all(np.isfinite(tlp.numpy())):
            raise EngineError(nonfinite_report(model, parts))   # names the term, its value
        scale = [tf.ones_like(p) for p in parts]
        if self._is_microcanonical():
            # their own tuning sets the step (core.engine.microcanonical); no search
            da = self._tuner.fresh(parts, s.seed)
            watch_step = np.full(s.chains, self._tuner.initial_step)
        else:
            # dual averaging starts from a step size searched at this state (sampler.step_size
            # is the search's first guess); a resumed run restores it from the checkpoint instead
            step = self._searched_step(parts, tlp, grads, scale, tf.constant(s.step_size, self.dtype), 0)
            da = self._da_state(step, da_step=0, num_adapt=self._first_adapt_steps())
            watch_step = self._watch_reference(step)
        mass_acc = (tf.constant(0.0, self.dtype), [tf.zeros_like(p[0]) for p in parts],
                    [tf.zeros_like(p[0]) for p in parts])
        shape = model.grid.shape if model.has_field else [1]
        moments = (np.float64(0.0), np.zeros(shape, np.float64), np.zeros(shape, np.float64))
        return dict(state=parts, tlp=tlp, grads=list(grads), da=da, scale=scale, mass_acc=mass_acc,
                    moments=moments, step=0, progress=dict(new_progress()),
                    watch_step=watch_step)

    def _searched_step(self, state, tlp, grads, scale, first_guess, g):
        """Per-part step sizes (chains, 1, ...) from ``core.engine.step_search`` at ``state`` (in
        z, with x = scale * z), its momenta seeded by fold_in((seed, 104729), g): HMC searches
        with its own trajectory and ``target_accept``, NUTS with one leapfrog step (Stan's way)."""
        s = self.sampler
        if self._search_fn is None:
            target = self.model.target_log_prob_fn
            nuts = self._is_nuts()

            def search(state, tlp, grads, scale, first_guess, seed):
                def target_z(*z):
                    return target(*[si * zi for si, zi in zip(scale, z)])
                return find_initial_step_size(
                    target_z, state, tlp, grads, first_guess, seed,
                    num_leapfrog_steps=1 if nuts else s.num_leapfrog_steps,
                    threshold=NUTS_SEARCH_ACCEPT if nuts else s.target_accept)[0]

            self._search_fn = tf.function(search, jit_compile=True)
        seed = tf.random.experimental.stateless_fold_in(tf.constant([s.seed, 104729], tf.int32), g)
        eps = self._search_fn(list(state), tlp, list(grads), list(scale), first_guess, seed)
        return [tf.reshape(eps, [s.chains] + [1] * (len(p.shape) - 1)) for p in state]

    def _watch_reference(self, step) -> np.ndarray:
        """The step size per chain that ``WarmupWatch`` measures a collapse against: the larger
        of ``sampler.step_size`` and the searched one (a search that went down by more than
        STEP_COLLAPSE is a collapse too: the posterior is far narrower than the sampler moves)."""
        searched = np.asarray(step[0]).reshape(self.sampler.chains)
        return np.maximum(searched, self.sampler.step_size)

    def _first_adapt_steps(self) -> int:
        sched = self.schedule
        return sched.mass_end if sched.mass_end is not None else sched.num_warmup

    def _da_state(self, step_size, da_step, num_adapt):
        return {"step_size": list(step_size),
                # as TFP's bootstrap: one accumulated error per chain (the reduced acceptance)
                "error_sum": [tf.zeros([self.sampler.chains], self.dtype) for _ in step_size],
                "log_avg": [tf.zeros_like(v) for v in step_size],
                "da_step": tf.constant(da_step, tf.int32),
                "num_adapt": tf.constant(num_adapt, tf.int32),
                "shrink": [tf.math.log(10.0 * v) for v in step_size]}

    def _checkpoint(self, st):
        arrays = {}

        def put(prefix, tensors):
            for i, v in enumerate(tensors):
                arrays[f"{prefix}_{i}"] = v      # converted as written (write_checkpoint)

        put("state", st["state"])
        put("grads", st["grads"])
        arrays["tlp"] = np.asarray(st["tlp"])
        tune_parts = {}
        if self._is_microcanonical():
            # the tuning state as it is: a tensor, or a list of tensors (one per state part)
            for key, value in st["da"].items():
                if isinstance(value, (list, tuple)):
                    tune_parts[key] = len(value)
                    put(f"tune_{key}", value)
                else:
                    arrays[f"tune_{key}"] = np.asarray(value)
        else:
            for key in ("step_size", "error_sum", "log_avg", "shrink"):
                put(f"da_{key}", st["da"][key])
            arrays["da_step"] = np.asarray(st["da"]["da_step"])
            arrays["da_num_adapt"] = np.asarray(st["da"]["num_adapt"])
        put("scale", st["scale"])
        arrays["mass_count"] = np.asarray(st["mass_acc"][0])
        put("mass_mean", st["mass_acc"][1])
        put("mass_m2", st["mass_acc"][2])
        arrays["mom_count"], arrays["mom_sum"], arrays["mom_sumsq"] = st["moments"]
        arrays["watch_step"] = np.asarray(st["watch_step"])
        meta = {"format": CHECKPOINT_FORMAT, "step": st["step"], "progress": st["progress"],
                "n_parts": len(st["state"]), "config_digest": _config_digest(self.config_text)}
        if self._is_microcanonical():
            meta["tuning"] = {"algorithm": self.sampler.algorithm,
                              "keys": sorted(st["da"]), "parts": tune_parts}
        write_checkpoint(self.run_dir, arrays, meta)

    def _restore(self):
        arrays, meta = read_checkpoint(self.run_dir)
        if meta.get("format") != CHECKPOINT_FORMAT:
            raise EngineError(f"{self.run_dir}: the checkpoint was written by another version of "
                              "Fieldscope and cannot be resumed by this one")
        try:
            return self._restore_arrays(arrays, meta)
        except (KeyError, TypeError, ValueError) as err:
            raise EngineError(f"{self.run_dir}: the checkpoint is incomplete or damaged ({err}); "
                              "the run cannot be resumed") from None

    def _restore_arrays(self, arrays, meta):
        n = meta["n_parts"]

        def get(prefix, dtype=None):
            return [tf.constant(arrays[f"{prefix}_{i}"], dtype) for i in range(n)]

        st = dict(state=get("state"), grads=get("grads"), tlp=tf.constant(arrays["tlp"]),
                  scale=get("scale"),
                  mass_acc=(tf.constant(arrays["mass_count"]), get("mass_mean"), get("mass_m2")),
                  moments=(np.float64(arrays["mom_count"]), np.array(arrays["mom_sum"], np.float64),
                           np.array(arrays["mom_sumsq"], np.float64)),
                  step=int(meta["step"]), progress=dict(meta["progress"]),
                  # checkpoints from before the step-size search: the config's step size
                  watch_step=np.asarray(arrays["watch_step"]) if "watch_step" in arrays
                  else np.full(self.sampler.chains, self.sampler.step_size))
        if self._is_microcanonical():
            tuning = meta["tuning"]
            if tuning["algorithm"] != self.sampler.algorithm:
                raise ValueError(f"a {tuning['algorithm']} checkpoint")
            st["da"] = {key: ([tf.constant(arrays[f"tune_{key}_{i}"]) for i in range(tuning["parts"][key])]
                              if key in tuning["parts"] else tf.constant(arrays[f"tune_{key}"]))
                        for key in tuning["keys"]}
            st["da"] = self._tuner.complete(st["da"])
            return st, meta
        st["da"] = {key: get(f"da_{key}") for key in ("step_size", "error_sum", "log_avg", "shrink")}
        st["da"]["da_step"] = tf.constant(arrays["da_step"])
        st["da"]["num_adapt"] = tf.constant(arrays["da_num_adapt"])
        return st, meta

    # -- running ------------------------------------------------------------------------

    def _preflight(self, new_run: bool = False) -> Estimate | None:
        """Refuse a field run this machine cannot hold or whose grid is too small
        (``core.run.resources``; a new run: also a store its disk cannot hold), before the
        model loads. Returns the estimate for the "loading" status event: bytes,
        available, gradient_seconds, run_seconds, text."""
        if self.config.model.kind != "field":
            return None
        from core import io as loaders
        from core.run import resources

        try:
            info = loaders.array_info(self.config.data_path, self.config.data.key)
        except loaders.LoadError:
            return None       # loading the model reports it, with every check
        if info.shape is None or len(info.shape) != 3 or 0 in info.shape:
            return None
        estimate = resources.estimate_for_config(self.config, info.shape)
        available = resources.available_memory()
        kind = memory_kind()       # a GPU: its own memory for the model, the host's for the rest
        device_free = gpu_free_memory() if kind == "gpu" else None
        # this process has imported TensorFlow already: its memory is not free any more
        problem = resources.run_problem(estimate, available, include_import=False,
                                        run_dir=self.run_dir if new_run else None, device=kind,
                                        device_available=device_free)
        if problem is not None:
            raise resources.ResourceError(f"{self.config.data_path}: {problem}")
        return Estimate(bytes=estimate.device_bytes(kind),
                        available=device_free if kind == "gpu" else available,
                        memory="GPU memory" if kind == "gpu" else "memory",
                        gradient_seconds=estimate.gradient_seconds,
                        run_seconds=estimate.run_seconds, text=estimate.describe())

    def start(self) -> str:
        """A new run in a run directory with no run, or one whose run never completed a
        chunk (``core.run.run_folder.claim_new``: replaced). Returns the final status."""
        estimate = self._preflight(new_run=True)
        claim = run_folder.claim_new(self.run_dir)   # the writer lock, taken before the model loads
        try:
            self._build(estimate)
            return self._start()
        finally:
            claim.release()

    def _start(self) -> str:
        model, s = self.model, self.sampler
        extra = {}
        if model.has_field:
            extra = dict(grid_shape=model.grid.shape, k_centres=model.k_centres, k_counts=model.k_counts)
        with self.control.writing:
            self.store = RunStoreWriter.create(
                self.run_dir, config_text=self.config_text, config_dir=self.config.base_dir,
                model_kind=model.kind, chains=s.chains,
                num_warmup=s.num_warmup, num_samples=self.schedule.num_samples, thin=s.thin,
                param_names=model.param_names, observed=model.observed,
                extra_attrs={"algorithm": s.algorithm, "device": self.device,
                             "inputs": input_files.input_digests(self.config)}, **extra)
        self._release_observed()
        return self._run(self._fresh_state())

    def _release_observed(self):
        """The store holds the observed maps: the model's loaded float64 copies go
        (``FieldModel.release_observed``), before the state is drawn and XLA runs."""
        if self.model.has_field:
            self.model.release_observed()

    def resume(self, num_samples: int | None = None) -> str:
        """Continue the chains of a stopped (or finished, with more ``num_samples``) run.

        A run with no checkpoint (it ended before its first chunk was checkpointed) has
        nothing to continue from: it starts again from the beginning, in place, with its
        config (``core.run.run_folder.claim_resume``)."""
        claim = run_folder.claim_resume(self.run_dir)
        try:
            input_files.verify_inputs(self.run_dir, self.config)     # a changed data file: refused
            if claim.restart:
                return self._restart(num_samples)
            return self._resume(num_samples)
        finally:
            claim.release()

    def _restart(self, num_samples: int | None) -> str:
        if num_samples is not None:
            self.schedule.num_samples = num_samples
        self._build(self._preflight())
        # only now that the model is built (its data files load): the old store keeps the
        # config until a new one holds it
        with self.control.writing:
            run_folder.remove_store(self.run_dir)
        return self._start()

    def _resume(self, num_samples: int | None) -> str:
        self._build(self._preflight())
        self._release_observed()          # the store has them from its start
        st, meta = self._restore()
        if meta.get("config_digest") != _config_digest(self.config_text):
            raise EngineError("the run's configuration changed since the checkpoint; resume needs the same config")
        if num_samples is not None:
            if num_samples < st["progress"]["draws"]:
                raise EngineError(f"the run already has {st['progress']['draws']} draws; "
                                  f"--num-samples {num_samples} would not add any")
            self.schedule.num_samples = num_samples
        if st["step"] >= self.schedule.total:
            raise EngineError(f"the run is already finished ({st['progress']['draws']} draws); "
                              "give a larger number of samples to extend it")
        with self.control.writing:
            self.store = RunStoreWriter.reopen(self.run_dir, st["progress"])
            self.store.root.attrs["device"] = self.device     # this session's device
            if num_samples is not None:
                self.store.root.attrs["num_samples"] = int(num_samples)
        return self._run(st)

    def _run(self, st) -> str:
        sched = self.schedule
        with self.control.writing:
            self.store.set_status("running")
        started = time.perf_counter()
        # wall time of the warmup and post-warmup chunks, over every session of the run (a
        # resumed run goes on from what the store holds); chunks never straddle num_warmup
        stored = self.store.root.attrs.get("timing") or {}
        timing = {key: float(stored.get(key, 0.0)) for key in ("warmup_seconds", "sampling_seconds")}
        steps_done_here = 0
        watch = WarmupWatch(st["watch_step"])
        published = st["progress"]["chunks"]     # chunks readers can see in the store
        try:
            for first, n in sched.boundaries(st["step"]):
                if self.control.stop:
                    return self._finish("stopped", st)
                self.control.wait_while_paused(lambda: self._paused(True), lambda: self._paused(False))
                if self.control.stop:
                    return self._finish("stopped", st)
                phase = "warmup" if first < sched.num_warmup else "sampling"
                self._status(phase)
                t0 = time.perf_counter()
                out = self._chunk_fn(st, first, n)
                (state, tlp, grads, da, mass_acc, sums, traces, params, field_buf, power_buf, n_fields) = out
                elapsed = time.perf_counter() - t0
                st.update(state=state, tlp=tlp, grads=grads, da=da, mass_acc=mass_acc,
                          moments=self._fold_moments(st["moments"], sums))
                st["step"] = first + n
                diagnosis = None
                if first < sched.num_warmup:
                    diagnosis = watch.update({name: np.asarray(traces[name])[:n].T for name in
                                              ("lp", "acceptance_rate", "step_size",
                                               "energy_error")}, first)
                self._adapt_at_boundary(st)
                record, contents = self._record(first, n, traces, params, field_buf, power_buf,
                                                int(n_fields), st)
                timing["warmup_seconds" if first < sched.num_warmup else "sampling_seconds"] += elapsed
                with self.control.writing:
                    run_lock.verify(self.run_dir)      # still this run's writer: else stop, write nothing
                    self.store.append(record, st["progress"], timing)
                    published = st["progress"]["chunks"]
                    run_lock.verify(self.run_dir)
                    self._checkpoint(st)
                steps_done_here += n
                self.emit(chunk_event(**contents, elapsed=elapsed,
                                      steps_per_second=n / max(elapsed, 1e-9),
                                      total_elapsed=time.perf_counter() - started))
                # not held while the next chunk runs (on a GPU its draws are device memory)
                del out, sums, traces, params, field_buf, power_buf, record, contents
                if diagnosis is not None:     # the chunk that shows it is stored first
                    raise EngineError(diagnosis)
            return self._finish("finished", st)
        except StoreWriteError as err:
            if published:
                kept = (f"the {published} chunk{'s' if published != 1 else ''} written before "
                        f"{'stay' if published != 1 else 'stays'} readable. Once the cause is "
                        f"fixed (e.g. free disk space), continue with: fieldscope resume "
                        f"{self.run_dir}")
            else:
                kept = ("no chunk had been written yet. Once the cause is fixed (e.g. free disk "
                        f"space), start it again with: fieldscope resume {self.run_dir}")
            message = f"{err}. The run stopped as failed; {kept}"
            self._fail(message)
            raise StoreWriteError(message, err.errno) from None
        except (EngineError, RunStoreError) as err:
            self._fail(str(err))
            raise
        except Exception as err:
            self._fail(f"{type(err).__name__}: {err}")
            raise

    def _fail(self, message: str) -> None:
        """Record "failed" and the reason in the store if it can still be written (a full
        disk may refuse even that), and tell the listeners in any case."""
        try:
            with self.control.writing:
                run_lock.verify(self.run_dir)      # a writer that lost its lock writes nothing
                self.store.set_status("failed", message)
        except RunStoreError:
            pass
        self._status("failed", error=message)

    def _paused(self, paused: bool):
        with self.control.writing:
            self.store.set_status("paused" if paused else "running")
        self._status("paused" if paused else "running")

    def _finish(self, status: str, st) -> str:
        with self.control.writing:
            self.store.set_status(status)
        self._status(status, progress=dict(st["progress"]))
        return status

    def _adapt_at_boundary(self, st):
        """At the end of the mass-matrix window: rescale z to the new x = s z, restart dual
        averaging; MCLMC / MAMS: then their own stage transitions (``at_boundary``)."""
        self._rescale_at_mass_end(st)
        if self._is_microcanonical() and st["step"] in self.schedule.tune_stops:
            st["da"] = self._tuner.at_boundary(st["step"], st["da"])

    def _rescale_at_mass_end(self, st):
        sched = self.schedule
        if sched.mass_end is None or st["step"] != sched.mass_end:
            return
        count, mean, m2 = st["mass_acc"]
        c = float(count.numpy())
        if c < 2:
            return
        chains = self.sampler.chains
        new_scale = []
        for i, q in enumerate(m2):
            var = q / (c - 1.0)
            # regularised towards 1e-3 as Stan does: (n / (n + 5)) var + 1e-3 (5 / (n + 5))
            var = (c / (c + 5.0)) * var + 1e-3 * (5.0 / (c + 5.0))
            if self._hyper_diagonal and i == 0:       # the field: the model's fourier scale stays
                var = tf.ones_like(var)
            new_scale.append(tf.broadcast_to(tf.sqrt(var)[None], [chains, *var.shape]))
        old_scale = st["scale"]
        # same x, new coordinates: z' = z s / s', and d/dz' = (d/dz) s' / s
        st["state"] = [z * so / sn for z, so, sn in zip(st["state"], old_scale, new_scale)]
        st["grads"] = [g * sn / so for g, so, sn in zip(st["grads"], old_scale, new_scale)]
        st["scale"] = new_scale
        if self._is_microcanonical():
            return       # their step size goes on from its value (core.engine.microcanonical)
        # the metric changed: search again from the adapted step, as Stan does after each window
        chains_step = tf.reshape(st["da"]["step_size"][0], [chains])
        step = self._searched_step(st["state"], st["tlp"], st["grads"], new_scale, chains_step, sched.mass_end)
        st["da"] = self._da_state(step, da_step=0, num_adapt=sched.num_warmup - sched.mass_end)

    def _fold_moments(self, moments, sums):
        """The run's float64 totals (count, sum of x, sum of x^2: host numpy arrays, updated in
        place) with a chunk's sums added (count, sum of x - m, sum of (x - m)^2 with m =
        field_mean, in the model's dtype). Only the chunk's sums are on the device: a chunk of
        at most chunk_size x chains draws rounds in float32 at ~1e-7 of its sum, the totals
        keep float64, and the device does not hold the totals' 2 N 8 bytes (#13)."""
        count, total, total_sq = moments
        k = float(np.asarray(sums[0]))
        if not self.model.has_field or k == 0:
            return moments
        m = float(self.model.observations.field_mean)
        s1 = np.asarray(sums[1]).astype(np.float64)
        total += s1                      # sum x = sum (x - m) + k m
        if m:
            total += k * m
            s1 *= 2.0 * m                # sum x^2 = sum (x - m)^2 + 2 m sum (x - m) + k m^2
            total_sq += s1
            total_sq += k * m * m
        del s1
        total_sq += np.asarray(sums[2]).astype(np.float64)
        return count + k, total, total_sq

    def _record(self, first, n, traces, params, field_buf, power_buf, n_fields, st):
        """The chunk's ``ChunkRecord`` for the store and the fields of its chunk event
        (``core.run.messages.chunk_event``, less the timing); updates ``st["progress"]``."""
        sched = self.schedule
        steps = np.arange(first, first + n)
        warm = steps < sched.num_warmup
        stats = {name: np.asarray(v)[:n].T for name, v in traces.items()}   # (chains, n)
        par = np.asarray(params)[:n]                                          # (n, chains, p)
        names = self.model.param_names
        record = ChunkRecord(
            warmup_stats={k: v[:, warm] for k, v in stats.items()},
            stats={k: v[:, ~warm] for k, v in stats.items()},
            warmup_params={nm: par[warm, :, i].T for i, nm in enumerate(names)},
            params={nm: par[~warm, :, i].T for i, nm in enumerate(names)})
        prog = st["progress"]
        n_post = int((~warm).sum())
        event = {"first_step": first, "n_steps": n, "phase": "warmup" if warm.all() else "sampling",
                 "stats": {k: v for k, v in stats.items()},
                 "params": {nm: par[:, :, i].T for i, nm in enumerate(names)},
                 "steps_total": sched.total,
                 # warmup divergences are expected while the step size adapts; the sampling ones count
                 "divergences": {"warmup": int(stats["diverging"][:, warm].sum()),
                                 "sampling": int(stats["diverging"][:, ~warm].sum())}}
        if self.model.has_field and n_fields:
            fields = np.asarray(field_buf)[:n_fields].transpose(1, 0, 2, 3, 4)
            powers = np.asarray(power_buf)[:n_fields].transpose(1, 0, 2).astype(np.float64)
            post_steps = steps[~warm] - sched.num_warmup
            index = post_steps[post_steps % self.sampler.thin == 0]
            record.fields, record.powers, record.field_draw_index = fields, powers, index
            event["latest_field"] = fields[:, -1]
            event["latest_power"] = powers[:, -1]
        if self.model.has_field:
            count, total, total_sq = (np.asarray(m) for m in st["moments"])
            if count > 0:
                mean = total / count
                std = np.sqrt(np.maximum(total_sq / count - mean**2, 0.0) * count / max(count - 1, 1))
                record.moments = (mean, std, int(count))
                event["moments"] = (mean.astype(np.float32), std.astype(np.float32), int(count))
        prog.update(warmup_draws=prog["warmup_draws"] + int(warm.sum()), draws=prog["draws"] + n_post,
                    field_draws=prog["field_draws"] + (n_fields if self.model.has_field else 0),
                    chunks=prog["chunks"] + 1)
        event["progress"] = dict(prog)
        return record, event

