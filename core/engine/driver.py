"""The sampling driver: one kernel run in XLA-compiled chunks of steps, with its adaptation between
them. The engine (a run into a store), calibration (a batch of simulations, each its own posterior
with its own data) and the tests run this same code, so that calibration checks the sampler that
runs.

A driver is built from a model (``core.engine.models``), the config's sampler settings and the
run's ``Schedule``; ``chains_per_posterior`` groups consecutive chains that sample one posterior (a
run: all; a calibration batch: each simulation's). Its state is a dict of named parts:

    state, tlp, grads    the kernel's position z (x = scale * z), log-density and gradient there
    da                   the step-size adaptation's state (HMC / NUTS: dual averaging,
                         ``core.engine.adaptation.dual_averaging``; MCLMC / MAMS: their tuning)
    scale                the diagonal's per-chain scale (ones until it is set)
    mass_acc             the Welford sums of x over the diagonal's window (``adaptation.welford``)
    step, watch_step     the next step; the step size the warmup watch measures a collapse against

Use: ``st = driver.fresh_state(data)``, then for each (first, n) of ``schedule.boundaries(step)``:
``out = driver.run_chunk(st, first, n, data, observed)``, update ``st`` from ``out`` (``advance``),
and ``driver.at_boundary(st, data)``. ``data`` is None for the model's own data, or a tensor with
a leading chain axis (each chain's data: ``FieldModel.with_data``) passed to the compiled program
as an argument, so that one program serves every batch of a calibration.

What a chunk keeps of the draws is its ``observer``'s (inside the compiled loop, at each step):
the engine's keeps thinned field draws, their P(k) and the field's moments
(``FieldDraws``); calibration's keeps its test quantities. Every chunk also returns each step's
statistics (``core.run.messages.STAT_NAMES``) and parameters.

Reproducibility. The random seed of step g is fold_in((seed, 7919), g), and each chunk starts from
the state, log-density and gradient the previous one ended with, so the draws do not depend on
where chunks begin: a run stopped and resumed gives the draws of one run straight through.

Warmup. HMC / NUTS: dual averaging adapts each chain's step size for ``num_warmup`` steps towards
``target_accept``, from the step size ``core.engine.step_search`` finds at the fresh state; with the
diagonal the variances are gathered over [15 %, 75 %) of warmup (pooled over each posterior's
chains), the diagonal set at 75 % (``adaptation.mass_matrix``), the step size searched again in the
new coordinates and dual averaging restarted, as Stan does. MCLMC / MAMS: the window is their
tuning's variance stage, their step size goes on from its value, and their stage transitions run
between chunks (``Schedule.tune_stops``). ``preconditioner = "fourier"`` is the model's own change
of variables; sampled P(k) hyperparameters get the adapted diagonal beside it, the field's scale
held at 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from core.engine import microcanonical
from core.engine.adaptation import Welford, diagonal_scale, fresh_dual_averaging, welford_fresh, welford_update
from core.engine.kernels import LoopedHamiltonianMonteCarlo, UnrolledHamiltonianMonteCarlo
from core.engine.models import nonfinite_report
from core.engine.nuts import IterativeNoUTurnSampler
from core.engine.step_search import NUTS_SEARCH_ACCEPT, find_initial_step_size
from core.field.power_spectrum import hyperparameter_priors
from core.run.engine_limits import LEAPFROG_STEPS_PER_ITERATION, field_buffer_draws, stage2_apart, unrolls
from core.run.messages import STAT_DTYPES, STAT_NAMES

__all__ = ["Driver", "DriverError", "FieldDraws", "Schedule", "DIVERGENCE_THRESHOLD", "SEED_STREAM",
           "schedule_for", "samples_hyperparameters"]

DIVERGENCE_THRESHOLD = 1000.0   # energy error beyond which a transition counts as divergent
SEED_STREAM = 7919              # the seed of step g: fold_in((sampler.seed, SEED_STREAM), g)
_SEARCH_STREAM = 104729         # ... of the step-size search at step g: fold_in((seed, this), g)


class DriverError(RuntimeError):
    """A sampler that cannot run this model, with a diagnosis a user can act on."""


def samples_hyperparameters(config) -> bool:
    """Whether a field config samples a P(k) hyperparameter (a prior table, not a number)."""
    if config.model.kind != "field":
        return False
    return any(not prior.is_fixed for prior in hyperparameter_priors(config.prior).values())


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


def hyper_diagonal(config) -> bool:
    """"fourier" scales the field; sampled hyperparameters get the adapted diagonal beside it."""
    return config.sampler.preconditioner == "fourier" and samples_hyperparameters(config)


def schedule_for(config, sampler=None) -> Schedule:
    """The schedule of a run of ``config`` with ``sampler`` (default: the config's): the diagonal's
    window (HMC / NUTS: [15 %, 75 %) of warmup; MCLMC / MAMS: their variance stage) when the
    diagonal is adapted (``preconditioner = "diagonal"``, or "fourier" with sampled
    hyperparameters, and at least 20 warmup steps), and the microcanonical tuning's stops."""
    s = sampler or config.sampler
    diagonal = (s.preconditioner == "diagonal" or hyper_diagonal(config)) and s.num_warmup >= 20
    stops = ()
    if s.algorithm in microcanonical.SAMPLERS:
        window, stops = microcanonical.schedule_points(s.algorithm, s.num_warmup, diagonal)
        mass = window or (None, None)
    else:
        mass = (int(0.15 * s.num_warmup), int(0.75 * s.num_warmup)) if diagonal else (None, None)
    return Schedule(s.num_warmup, s.num_samples, s.chunk_size, *mass, tune_stops=stops)


class FieldDraws:
    """The engine's observer: every ``thin``-th post-warmup field of a chunk and its P(k), and the
    chunk's sums of x - field_mean and its square over every post-warmup draw, in the model's
    dtype (the run's float64 totals are the host's: ``Engine._fold_moments``). Made afresh in each
    chunk (``start`` ignores what it is given); without draws (``draws`` False, or no field) it
    keeps nothing."""

    def __init__(self, model, schedule: Schedule, chains: int, thin: int):
        self.model, self.schedule, self.chains, self.thin = model, schedule, chains, thin
        self.max_fields = field_buffer_draws(schedule.chunk_size, thin) if model.has_field else 0
        self.shift = float(model.observations.field_mean) if model.has_field else 0.0

    def start(self, carry, view, draws: bool):
        model, dtype, chains = self.model, view.dtype, self.chains
        keeps = model.has_field and draws
        field_buf = (tf.zeros([max(self.max_fields, 1), chains, *model.grid.shape], dtype)
                     if keeps else tf.zeros([1], dtype))
        power_buf = (tf.zeros([max(self.max_fields, 1), chains, len(model.k_centres)], dtype)
                     if keeps else tf.zeros([1], dtype))
        moment_shape = model.grid.shape if keeps else [1]
        moments = (tf.constant(0.0, tf.float64), tf.zeros(moment_shape, dtype), tf.zeros(moment_shape, dtype))
        return (field_buf, power_buf, tf.constant(0), moments), keeps

    def observe(self, carry, view, g, x_parts, field_now):
        field_buf, power_buf, n_fields, moments = carry
        sched, thin, chains, dtype = self.schedule, self.thin, self.chains, view.dtype
        post = g >= sched.num_warmup

        def accumulate():
            x = view.field(x_parts) if field_now is None else field_now
            dev = x - tf.constant(self.shift, dtype)
            count, total, total_sq = moments
            keep = tf.equal(tf.math.floormod(g - sched.num_warmup, thin), 0)

            def store():
                return (tf.tensor_scatter_nd_update(field_buf, [[n_fields]], x[None]),
                        tf.tensor_scatter_nd_update(power_buf, [[n_fields]], view.field_power(x)[None]),
                        n_fields + 1)

            fb, pb, nf = tf.cond(keep, store, lambda: (field_buf, power_buf, n_fields))
            return (count + chains, total + tf.reduce_sum(dev, axis=0),
                    total_sq + tf.reduce_sum(dev * dev, axis=0)), fb, pb, nf

        moments, field_buf, power_buf, n_fields = tf.cond(
            post, accumulate, lambda: (moments, field_buf, power_buf, n_fields))
        return field_buf, power_buf, n_fields, moments


class Driver:
    """Runs one kernel over a model's chains in compiled chunks (module docstring)."""

    def __init__(self, model, sampler, schedule: Schedule, *, hyper_diagonal: bool = False,
                 chains_per_posterior: int | None = None, observer=None, autograph: bool = True):
        self.model, self.sampler, self.schedule = model, sampler, schedule
        self.dtype = model.dtype
        self.chains = sampler.chains
        self.chains_per_posterior = int(chains_per_posterior or sampler.chains)
        self.groups = self.chains // self.chains_per_posterior
        self.hyper_diagonal = hyper_diagonal
        self.autograph = autograph       # the chunk's loops are explicit: autograph only costs tracing time
        self.observer = observer if observer is not None else FieldDraws(model, schedule, sampler.chains,
                                                                         sampler.thin)
        self.microcanonical = sampler.algorithm in microcanonical.SAMPLERS
        self.nuts = sampler.algorithm == "nuts"
        self._part_shapes = None     # the state parts' shapes less the chain axis (MCLMC / MAMS)
        self.tuner = self._microcanonical(None) if self.microcanonical else None
        self._search_fn = None
        self._lp_and_grad = None
        self.run_chunk = self._make_chunk_fn()

    # -- the kernels ----------------------------------------------------------------

    def view(self, data):
        """The model, or a copy of it whose likelihood is against ``data`` (a leading chain axis)."""
        return self.model if data is None else self.model.with_data(data)

    def _make_kernel(self, target, step_size, scale, num_adapt):
        """DA(HMC or NUTS) on z, with x = scale * z (scale = 1 before mass adaptation)."""
        s, model = self.sampler, self.model

        def target_z(*z):
            return target(*[si * zi for si, zi in zip(scale, z)])

        n_values = model.grid.n_cells if model.has_field else 1
        if self.nuts:
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

    def _microcanonical(self, target, has_aux: bool = False):
        """The MCLMC / MAMS sampler on ``target`` (``core.engine.microcanonical``; None where only
        its tuning's fresh state and stage transitions are used; ``has_aux``: ``target`` returns
        (log p, aux parts))."""
        s = self.sampler
        if self._part_shapes is None:
            # the state's shapes, from one draw (eager, at build): not a prior draw in every trace
            self._part_shapes = [tuple(p.shape[1:]) for p in self.model.initial_state(1, s.seed)]
        parts = [tf.zeros([s.chains, *shape], self.dtype) for shape in self._part_shapes]
        extra = {"target_accept": s.target_accept} if s.algorithm == "mams" else {}
        try:
            return microcanonical.SAMPLERS[s.algorithm](
                target, parts, s.chains, self.dtype, s.num_warmup, self.schedule.mass_end is not None,
                s.step_size, divergence_threshold=DIVERGENCE_THRESHOLD,
                chains_per_posterior=self.chains_per_posterior, has_aux=has_aux, **extra)
        except ValueError as err:
            raise DriverError(f"sampler.algorithm = {s.algorithm!r}: {err}; this model has "
                              f"{microcanonical.n_dims(parts)}: use \"hmc\" or \"nuts\"") from None

    def _tfp_step(self, view, state, tlp, grads, da, scale):
        """DA(HMC or NUTS) in the chunk: its kernel results, bootstrapped from the chunk's
        start values, and one step -> (state, results, statistics, gradient)."""
        s, chains, nuts = self.sampler, self.sampler.chains, self.nuts
        kernel = self._make_kernel(view.target_log_prob_fn, da["step_size"], scale, da["num_adapt"])
        results = kernel.bootstrap_results(state)
        inner = results.inner_results
        if nuts:
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
            if nuts:
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

    def _microcanonical_step(self, view, scale, with_field: bool = False):
        """MCLMC or MAMS in the chunk, on z with x = scale * z: one step ->
        (state, (lp, gradient, tuning), statistics, gradient); ``with_field``: results and
        its return end with [the field at the state] (``FieldModel.target_log_prob_and_field``)."""
        target = view.target_log_prob_and_field if with_field else view.target_log_prob_fn
        sampler = self._microcanonical(lambda *z: target(*[si * zi for si, zi in zip(scale, z)]),
                                       has_aux=with_field)

        def step(state, results, seed, g):
            lp, grads, tune, *aux = results
            state, lp, grads, tune, stats, aux = sampler.one_step(list(state), lp, grads, tune, seed, g,
                                                                  aux[0] if aux else ())
            return state, (lp, grads, tune, *([aux] if with_field else [])), {**stats, "lp": lp}, grads
        return step

    # -- the chunk --------------------------------------------------------------------

    def _make_chunk_fn(self):
        model, s, sched = self.model, self.sampler, self.schedule
        chains = s.chains
        n_params = len(model.param_names)
        has_field = model.has_field
        adapt_mass = sched.mass_end is not None
        observer = self.observer
        micro = self.microcanonical

        def chunk(state, tlp, grads, da, read_only, scale, mass_acc, observed, data, base_seed, step0, n_steps,
                  with_mass, draws):
            # da, HMC / NUTS: step_size, error_sum, log_avg (lists per part), da_step, num_adapt,
            # shrink (list); MCLMC / MAMS: the part of their tuning state this chunk carries,
            # and read_only the part it reads but does not return (core.engine.microcanonical's
            # chunk_keys). mass_acc: the Welford sums if with_mass, else () (not taken, not
            # returned: a value returned unchanged is still a copy). observed: the observer's
            # carry. draws: whether the chunk may reach the sampling phase (False: the observer
            # keeps nothing)
            view = self.view(data)
            dtype = view.dtype

            def x_of(z):
                return [si * zi for si, zi in zip(scale, z)]

            if micro:
                # the field at the state rides along (the density computes it for the
                # likelihood; the moments and draws take it instead of a transform of their own)
                results = (tlp, list(grads), {**da, **read_only},
                           *([[view.field(x_of(state))]] if has_field else []))
                kernel_step = self._microcanonical_step(view, scale, with_field=has_field)
            else:
                results, kernel_step = self._tfp_step(view, state, tlp, grads, da, scale)

            def ta(dt, size=s.chunk_size):
                return tf.TensorArray(dt, size=size, element_shape=None)

            traces = {name: ta(tf.as_dtype(STAT_DTYPES[name]) if name in STAT_DTYPES else dtype)
                      for name in STAT_NAMES}
            params_ta = ta(dtype)
            observed, observes = observer.start(observed, view, draws)

            def body(t, state, results, traces, params_ta, observed, mass_acc):
                g = step0 + t
                seed = tf.random.experimental.stateless_fold_in(base_seed, g)
                state, results, stats, grads_now = kernel_step(state, results, seed, g)
                # the gradient with respect to x: d/dx = (d/dz) / scale
                grad_sq = tf.add_n([tf.reduce_sum(tf.reshape(gp / si, [chains, -1])**2, axis=1)
                                    for gp, si in zip(grads_now, scale)])
                stats = {**stats, "grad_norm": tf.sqrt(grad_sq)}
                traces = {name: traces[name].write(t, stats[name]) for name in STAT_NAMES}
                x_parts = x_of(state)
                field_now = results[3][0] if micro and has_field else None
                params_ta = params_ta.write(t, tf.reshape(view.params(x_parts), [chains, n_params]))
                if with_mass:
                    in_window = tf.logical_and(g >= sched.mass_start, g < sched.mass_end)
                    mass_acc = tf.cond(in_window, lambda: tuple(welford_update(mass_acc, x_parts)),
                                       lambda: (mass_acc[0], list(mass_acc[1]), list(mass_acc[2])))
                if observes:
                    observed = observer.observe(observed, view, g, x_parts, field_now)
                return t + 1, state, results, traces, params_ta, observed, mass_acc

            loop_vars = (tf.constant(0), state, results, traces, params_ta, observed, mass_acc)
            (_, state, results, traces, params_ta, observed, mass_acc) = tf.while_loop(
                lambda t, *rest: t < n_steps, body, loop_vars, maximum_iterations=s.chunk_size)
            if micro:
                tlp_out, grads_out, tune_out = results[:3]
                da_out = {key: value for key, value in tune_out.items() if key not in read_only}
            else:
                inner = results.inner_results
                if self.nuts:
                    tlp_out, grads_out = inner.target_log_prob, inner.grads_target_log_prob
                else:
                    tlp_out = inner.accepted_results.target_log_prob
                    grads_out = inner.accepted_results.grads_target_log_prob
                da_out = {"step_size": list(results.new_step_size), "error_sum": list(results.error_sum),
                          "log_avg": list(results.log_averaging_step), "da_step": results.step,
                          "num_adapt": da["num_adapt"], "shrink": list(results.log_shrinkage_target)}
            stacked = {name: arr.stack() for name, arr in traces.items()}
            return {"state": list(state), "tlp": tlp_out, "grads": list(grads_out), "da": da_out,
                    "mass_acc": mass_acc, "traces": stacked, "params": params_ta.stack(), "observed": observed}

        def call(program, st, first, n, data, observed, with_mass, held=frozenset(), read_only=frozenset()):
            da = {k: v for k, v in st["da"].items() if k not in held and k not in read_only}
            fixed = {k: v for k, v in st["da"].items() if k in read_only}
            out = dict(program(st["state"], st["tlp"], st["grads"], da, fixed, st["scale"],
                               st["mass_acc"] if with_mass else (), observed, data,
                               tf.constant([st["seed"], SEED_STREAM], tf.int32),
                               tf.constant(first, tf.int32), tf.constant(n, tf.int32)))
            if held or fixed:     # the tuning arrays this chunk did not carry, as they were
                out["da"] = {**{k: st["da"][k] for k in held | read_only}, **out["da"]}
            if not with_mass:
                out["mass_acc"] = st["mass_acc"]
            return out

        if not micro:
            # one program (HMC / NUTS: a step is many gradients, the accumulation's per-step
            # tf.cond is noise beside them and a second compilation would cost start-up time)
            program = tf.function(lambda *a: chunk(*a, with_mass=adapt_mass, draws=True), jit_compile=True,
                                  autograph=self.autograph)
            return lambda st, first, n, data=None, observed=None: call(program, st, first, n, data, observed,
                                                                       adapt_mass)
        # MCLMC / MAMS (two gradients a step). With the diagonal adapted, two programs: one with
        # the mass-matrix accumulation for the chunks that overlap its window (stage 2) and one
        # without (its per-step tf.cond cost 6-15 % of a 32^3 step where it did nothing,
        # docs/benchmarks.md). Without it, one program, unless the moments of z are large
        # (core.run.engine_limits.stage2_apart): then the chunks of stage 2 have a program with
        # them, the others one without (issue #13). Stage 2 ends in warmup: its program makes
        # no field draws.
        tuner = self.tuner
        n_values = model.grid.n_cells if has_field else 1
        apart = adapt_mass or (tuner.uses_moments() and stage2_apart(chains, n_values))
        if adapt_mass and (sched.mass_start, sched.mass_end) != (tuner.stages.b1, tuner.stages.b2):
            raise DriverError(f"the mass-matrix window {sched.mass_start, sched.mass_end} is not stage 2 "
                              f"{tuner.stages.b1, tuner.stages.b2} of {s.algorithm}'s warmup")
        programs = {flag: tf.function(lambda *a, flag=flag: chunk(*a, with_mass=flag and adapt_mass,
                                                                     draws=not flag), jit_compile=True,
                                      autograph=self.autograph)
                    for flag in ((False, True) if apart else (False,))}

        def run_chunk(st, first, n, data=None, observed=None):
            stage2 = apart and tuner.in_stage2(first, n)
            held, read_only = tuner.chunk_keys(stage2 if apart else None)
            return call(programs[stage2], st, first, n, data, observed, stage2 and adapt_mass, held, read_only)
        return run_chunk

    # -- state: fresh, and between chunks --------------------------------------------

    def fresh_state(self, data=None, seed: int | None = None) -> dict:
        """The state at step 0: the model's initial state from ``seed`` (default: the sampler's),
        its log-density and gradient, the step size (HMC / NUTS: searched there; MCLMC / MAMS:
        their tuning's). ``seed`` also seeds every step (``st["seed"]``: a program argument)."""
        s = self.sampler
        seed = s.seed if seed is None else int(seed)
        parts = [tf.convert_to_tensor(p, self.dtype) for p in self.model.initial_state(s.chains, seed)]
        if self._lp_and_grad is None:
            def lp_and_grad(parts, data):
                view = self.view(data)
                return tfp.math.value_and_gradient(lambda *q: view.target_log_prob_fn(*q), list(parts))
            self._lp_and_grad = tf.function(lp_and_grad, jit_compile=True, autograph=self.autograph)
        tlp, grads = self._lp_and_grad(parts, data)
        if not np.all(np.isfinite(tlp.numpy())):
            raise DriverError(nonfinite_report(self.view(data), parts))   # names the term, its value
        scale = [tf.ones_like(p) for p in parts]
        if self.microcanonical:
            # their own tuning sets the step (core.engine.microcanonical); no search
            da = self.tuner.fresh(parts, seed)
            watch_step = np.full(s.chains, self.tuner.initial_step)
        else:
            # dual averaging starts from a step size searched at this state (sampler.step_size
            # is the search's first guess); a resumed run restores it from the checkpoint instead
            step = self.searched_step(parts, tlp, grads, scale, tf.constant(s.step_size, self.dtype), 0, seed, data)
            da = self.dual_averaging(step, da_step=0, num_adapt=self._first_adapt_steps())
            # the step size the warmup watch measures a collapse against: the larger of
            # sampler.step_size and the searched one (a search that went down by more than
            # STEP_COLLAPSE is a collapse too: the posterior is far narrower than the sampler moves)
            watch_step = np.maximum(np.asarray(step[0]).reshape(s.chains), s.step_size)
        return dict(state=parts, tlp=tlp, grads=list(grads), da=da, scale=scale,
                    mass_acc=tuple(welford_fresh(parts, self.groups, self.dtype)), step=0, watch_step=watch_step,
                    seed=seed)

    def searched_step(self, state, tlp, grads, scale, first_guess, g, seed: int, data=None):
        """Per-part step sizes (chains, 1, ...) from ``core.engine.step_search`` at ``state`` (in
        z, with x = scale * z), its momenta seeded by fold_in((seed, 104729), g): HMC searches
        with its own trajectory and ``target_accept``, NUTS with one leapfrog step (Stan's way)."""
        s = self.sampler
        if self._search_fn is None:
            nuts = self.nuts

            def search(state, tlp, grads, scale, first_guess, seed, data):
                target = self.view(data).target_log_prob_fn

                def target_z(*z):
                    return target(*[si * zi for si, zi in zip(scale, z)])
                return find_initial_step_size(
                    target_z, state, tlp, grads, first_guess, seed,
                    num_leapfrog_steps=1 if nuts else s.num_leapfrog_steps,
                    threshold=NUTS_SEARCH_ACCEPT if nuts else s.target_accept)[0]

            self._search_fn = tf.function(search, jit_compile=True, autograph=self.autograph)
        step_seed = tf.random.experimental.stateless_fold_in(tf.constant([seed, _SEARCH_STREAM], tf.int32), g)
        eps = self._search_fn(list(state), tlp, list(grads), list(scale), first_guess, step_seed, data)
        return [tf.reshape(eps, [s.chains] + [1] * (len(p.shape) - 1)) for p in state]

    def _first_adapt_steps(self) -> int:
        sched = self.schedule
        return sched.mass_end if sched.mass_end is not None else sched.num_warmup

    def dual_averaging(self, step_size, da_step, num_adapt):
        return fresh_dual_averaging(step_size, self.chains, self.dtype, da_step, num_adapt)

    @staticmethod
    def advance(st: dict, out: dict, first: int, n: int) -> dict:
        """``st`` after the chunk of steps [first, first + n) that returned ``out``."""
        st.update(state=out["state"], tlp=out["tlp"], grads=out["grads"], da=out["da"], mass_acc=out["mass_acc"])
        st["step"] = first + n
        return st

    def at_boundary(self, st: dict, data=None) -> None:
        """Between chunks: at the end of the mass-matrix window rescale z to the new x = s z and
        restart dual averaging; MCLMC / MAMS: then their own stage transitions."""
        self._rescale_at_mass_end(st, data)
        if self.microcanonical and st["step"] in self.schedule.tune_stops:
            st["da"] = self.tuner.at_boundary(st["step"], st["da"])

    def _rescale_at_mass_end(self, st, data):
        sched = self.schedule
        if sched.mass_end is None or st["step"] != sched.mass_end:
            return
        count, mean, m2 = st["mass_acc"]
        new_scale = diagonal_scale(Welford(count, list(mean), list(m2)), self.chains,
                                   unit_parts=(0,) if self.hyper_diagonal else ())
        if new_scale is None:
            return
        old_scale = st["scale"]
        # same x, new coordinates: z' = z s / s', and d/dz' = (d/dz) s' / s
        st["state"] = [z * so / sn for z, so, sn in zip(st["state"], old_scale, new_scale)]
        st["grads"] = [g * sn / so for g, so, sn in zip(st["grads"], old_scale, new_scale)]
        st["scale"] = new_scale
        if self.microcanonical:
            return       # their step size goes on from its value (core.engine.microcanonical)
        # the metric changed: search again from the adapted step, as Stan does after each window
        chains_step = tf.reshape(st["da"]["step_size"][0], [self.chains])
        step = self.searched_step(st["state"], st["tlp"], st["grads"], new_scale, chains_step, sched.mass_end,
                                  st["seed"], data)
        st["da"] = self.dual_averaging(step, da_step=0, num_adapt=sched.num_warmup - sched.mass_end)

