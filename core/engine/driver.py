"""The sampling driver: one kernel run in XLA-compiled chunks of steps, with its adaptation between
them. The engine (a run into a store), calibration (a batch of simulations, each its own posterior
with its own data) and the tests run this same code, so that calibration checks the sampler that
runs.

A driver is built from a model (``core.engine.models``), the config's sampler settings and the
run's ``Schedule``; ``chains_per_posterior`` groups consecutive chains that sample one posterior (a
run: all; a calibration batch: each simulation's). Its state is a dict of named parts:

    state, tlp, grads    the kernel's position z (x = S z: ``adaptation.metric``), log-density and
                         gradient there
    da                   the kernel's tuning state (HMC / NUTS: dual averaging,
                         ``core.engine.adaptation.dual_averaging``; MCLMC / MAMS: their tuning)
    scale                the metric's per-chain scale S of each part (ones until it is set; the
                         sampled hyperparameters' Cholesky factor where they are 2 or more)
    mass_acc             each chain's Welford sums of x over the metric's window (``adaptation.welford``)
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

Reproducibility. The random seed of step g is fold_in((seed, 7919), g), chain i's fold_in(that, i)
(``core.engine.chain_seeds``: a chain's random numbers depend on its seed alone, and its Welford
sums on its states alone, so chains split over devices draw what they draw together), and each chunk starts from
the state, log-density and gradient the previous one ended with, so the draws do not depend on
where chunks begin: a run stopped and resumed gives the draws of one run straight through.

A field cut over devices (``field.shard``: ``core.engine.sharded_model``) has its state in parts,
each on its device: its programs are TensorFlow graphs whose ops run where their inputs are
(``Driver.program``, ``core.engine.placement``; XLA compiles a program for one device), its
observer keeps each part's draws on its device, and ``place`` puts the per-part values a chunk
starts from (fresh, restored, rescaled) back on their devices.

Kernels. The driver knows no algorithm by name: the sampler registry (``core.samplers``) names
the kernel of ``sampler.algorithm`` (``core.engine.samplers``), which makes the steps, its tuning
state ``da``, its warmup plan (the diagonal's window and the chunk stops: ``schedule_for``) and
its chunk programs. With the diagonal, the variances of x are gathered over the kernel's window
(pooled over each posterior's chains), and at the window's end the diagonal is set
(``adaptation.mass_matrix``) and the kernel told (HMC / NUTS search the step size again and
restart dual averaging, as Stan does). ``preconditioner = "fourier"`` is the model's own change
of variables; sampled P(k) hyperparameters get the adapted metric beside it, the field's scale
held at 1: a dense one (their covariance's Cholesky factor) where two or more are sampled, since
they are often strongly correlated (an amplitude and an index away from the pivot: -0.95 on
bench/hyper_efficiency.py's slab2), which no diagonal undoes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from core.config import PER_MODE_PRECONDITIONERS
from core.engine import chain_seeds, placement
from core.engine.adaptation import Welford, adapted_scale, welford_fresh, welford_update
from core.engine.adaptation.metric import grad_to_x, grad_to_z, is_dense, marginal_sd, rescaled, to_x, to_z
from core.engine.models import nonfinite_report
from core.engine.samplers import kernel_class
from core.field.power_spectrum import hyperparameter_priors
from core.run.engine_limits import device_chain_split, field_buffer_draws
from core.run.messages import STAT_DTYPES, STAT_NAMES

__all__ = ["Driver", "DriverError", "DeviceSplit", "FieldDraws", "Schedule", "DIVERGENCE_THRESHOLD", "SEED_STREAM",
           "schedule_for", "samples_hyperparameters", "hyper_metric"]

DIVERGENCE_THRESHOLD = 1000.0   # energy error beyond which a transition counts as divergent
SEED_STREAM = 7919              # the seed of step g: fold_in((sampler.seed, SEED_STREAM), g)


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


#: the step in eta of the central differences that give the hyperparameters' starting scale
CURVATURE_STEP = 1e-3
#: beside a per-mode preconditioner with the modes independent given P(k), a hyperparameter's
#: window variance more than this many times its exact curvature's is the window's transient
#: (``Driver._guard_runaway_scale``)
RUNAWAY_SCALE = 2.0


def hyper_metric(config) -> bool:
    """A per-mode preconditioner scales the field; sampled hyperparameters get the adapted
    metric beside it (diagonal for one, dense for more)."""
    return config.sampler.preconditioner in PER_MODE_PRECONDITIONERS and samples_hyperparameters(config)


def schedule_for(config, sampler=None) -> Schedule:
    """The schedule of a run of ``config`` with ``sampler`` (default: the config's): the diagonal's
    window (HMC / NUTS: [15 %, 75 %) of warmup; MCLMC / MAMS: their variance stage) when the
    diagonal is adapted (``preconditioner = "diagonal"``, or a per-mode one with sampled
    hyperparameters, and at least 20 warmup steps), and the microcanonical tuning's stops."""
    s = sampler or config.sampler
    diagonal = (s.preconditioner == "diagonal" or hyper_metric(config)) and s.num_warmup >= 20
    window, stops = kernel_class(s.algorithm).plan(s.num_warmup, diagonal)
    return Schedule(s.num_warmup, s.num_samples, s.chunk_size, *(window or (None, None)), tune_stops=tuple(stops))


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

    def for_chains(self, chains: int) -> "FieldDraws":
        """The same observer for ``chains`` of the run's chains (``DeviceSplit``)."""
        return FieldDraws(self.model, self.schedule, chains, self.thin)

    @staticmethod
    def split(carry, rows):
        """The carry of the chains ``rows`` (``DeviceSplit``): none (``start`` makes its own)."""
        return carry

    @staticmethod
    def on_host(carry):
        """The carry as the engine records it (here: as it is; a sharded field's parts joined)."""
        return carry

    def merge(self, carries, sizes):
        """One carry from the carries of consecutive groups of chains (``DeviceSplit``), the
        first ``sizes[i]`` chains of carry i (a lone chain ran twice): the draws side by side,
        the moments' sums added (a lone chain's halved: its two copies are the same)."""
        field_bufs, power_bufs, n_fields, moments = zip(*carries)
        keeps = len(field_bufs[0].shape) > 1

        def join(parts):
            return tf.concat([p[:, :k] for p, k in zip(parts, sizes)], axis=1) if keeps else parts[0]

        def share(m, k, runs):
            return m if runs == k else m * tf.constant(k / runs, m.dtype)
        runs = [int(f.shape[1]) if keeps else k for f, k in zip(field_bufs, sizes)]
        totals = tuple(tf.add_n([share(m[j], k, r) for m, k, r in zip(moments, sizes, runs)]) for j in range(3))
        return join(field_bufs), join(power_bufs), n_fields[0], totals

    def observe(self, carry, view, g, x_parts, field_now):
        field_buf, power_buf, n_fields, moments = carry
        sched, thin, chains, dtype = self.schedule, self.thin, self.chains, view.dtype
        post = g >= sched.num_warmup

        def accumulate():
            # x, the buffers and the sums: a tensor each, or a sharded field's list of parts
            x = view.field(x_parts) if field_now is None else field_now
            shift = tf.constant(self.shift, dtype)
            dev = tf.nest.map_structure(lambda xk: xk - shift, x)
            count, total, total_sq = moments
            keep = tf.equal(tf.math.floormod(g - sched.num_warmup, thin), 0)

            def store():
                return (tf.nest.map_structure(lambda buf, xk: tf.tensor_scatter_nd_update(buf, [[n_fields]], xk[None]),
                                              field_buf, x),
                        tf.tensor_scatter_nd_update(power_buf, [[n_fields]], view.field_power(x)[None]),
                        n_fields + 1)

            fb, pb, nf = tf.cond(keep, store, lambda: (field_buf, power_buf, n_fields))
            return (count + chains, tf.nest.map_structure(lambda t, d: t + tf.reduce_sum(d, axis=0), total, dev),
                    tf.nest.map_structure(lambda t, d: t + tf.reduce_sum(d * d, axis=0), total_sq, dev)), fb, pb, nf

        moments, field_buf, power_buf, n_fields = tf.cond(
            post, accumulate, lambda: (moments, field_buf, power_buf, n_fields))
        return field_buf, power_buf, n_fields, moments


class Driver:
    """Runs one kernel over a model's chains in compiled chunks (module docstring)."""

    def __init__(self, model, sampler, schedule: Schedule, *, hyper_metric: bool = False,
                 chains_per_posterior: int | None = None, observer=None,
                 devices=(), chain_ids=None):
        self.model, self.sampler, self.schedule = model, sampler, schedule
        self.dtype = model.dtype
        self.chains = sampler.chains
        self.chains_per_posterior = int(chains_per_posterior or sampler.chains)
        self.groups = self.chains // self.chains_per_posterior
        # each chain's seeds: fold_in(step seed, its index in the run), wherever it runs
        self.chain_ids = tf.constant(range(self.chains) if chain_ids is None else chain_ids, tf.int32)
        self.hyper_metric = hyper_metric
        # a field cut over devices (core.engine.sharded_model): its programs are graphs placed by
        # their inputs, and its observer keeps each part's draws on its device
        self.sharded = bool(getattr(model, "sharded", False))
        self.programs = []
        self._functions = []        # every program's tf.function: ``traces``
        observer_class = getattr(model, "observer_class", FieldDraws)
        self.observer = observer if observer is not None else observer_class(model, schedule, sampler.chains,
                                                                              sampler.thin)
        self._lp_and_grad = None
        self.kernel = kernel_class(sampler.algorithm)(self)     # core.engine.samplers
        self.devices = list(devices)
        split = DeviceSplit(self, self.devices) if len(self.devices) > 1 else None
        self._subdrivers = split.subs if split is not None else []
        self.run_chunk = split.run_chunk if split is not None else self._make_chunk_fn()

    def traces(self) -> int:
        """How many times its programs (its devices' too) have been traced: each new trace is
        compiled at that call, so a chunk that raised it took its compiling's time as well."""
        return (sum(f.experimental_get_tracing_count() for f in self._functions)
                + sum(sub.traces() for sub in self._subdrivers))

    # -- the model ------------------------------------------------------------------

    def program(self, fn):
        """``fn`` compiled: one XLA program, or for a field sharded over devices a graph whose ops
        run on their inputs' devices (``placement.program``; one device's view of it is XLA's)."""
        if self.sharded and len(self.model.mesh.devices) > 1:
            compiled = placement.program(fn)
            self.programs.append(compiled)      # their graphs: where each op runs (the tests' census)
            self._functions.append(compiled.traced)
            return compiled
        # autograph off: the programs' loops are explicit (tf.while_loop), and converting TFP and the
        # densities to graphs cost most of a run's tracing (an 8^3 HMC run: 53 s -> 20 s in all)
        function = tf.function(fn, jit_compile=True, autograph=False)
        self._functions.append(function)
        return function

    def place(self, st: dict) -> dict:
        """``st`` with a sharded field's per-part values on their parts' devices (eager: a fresh
        state, a restored one, a scale set between chunks); unchanged otherwise."""
        if not self.sharded:
            return st
        on, n = self.model.on_devices, len(st["state"])
        st["state"], st["grads"], st["scale"] = on(st["state"]), on(st["grads"]), on(st["scale"])
        count, mean, m2 = st["mass_acc"]
        st["mass_acc"] = (count, on(list(mean)), on(list(m2)))
        st["da"] = {key: on(list(v)) if isinstance(v, (list, tuple)) and len(v) == n else v
                    for key, v in st["da"].items()}
        return st

    def view(self, data):
        """The model, or a copy of it whose likelihood is against ``data`` (a leading chain axis)."""
        return self.model if data is None else self.model.with_data(data)

    # -- the chunk --------------------------------------------------------------------

    def _interweave(self, view, scale, state, results, stats, seed):
        """The centred move (``core.engine.interweaving``) after a step: the state, the kernel's
        carry at it, the step's statistics (the gradient at the moved state counted)."""
        moved, _ = view.interweave(to_x(scale, state), seed)
        z = to_z(scale, moved)
        results, lp_moved = self.kernel.relocated(view, results, z, scale)
        return list(z), results, {**stats, "lp": lp_moved, "n_steps": stats["n_steps"] + 1}

    def _make_chunk_fn(self):
        model, s, sched = self.model, self.sampler, self.schedule
        chains = s.chains
        n_params = len(model.param_names)
        observer, kernel = self.observer, self.kernel
        interweaving = getattr(model, "interweaving", None) is not None
        interweave = self._interweave

        def chunk(state, tlp, grads, da, read_only, scale, mass_acc, observed, data, base_seed, chain_ids, step0,
                  n_steps, with_mass, draws):
            # da: the kernel's tuning state, the part of it this chunk carries, and read_only
            # the part it reads but does not return (MCLMC / MAMS: their tuning's chunk_keys,
            # core.engine.adaptation.microcanonical_stages). mass_acc: the Welford sums if
            # with_mass, else () (not taken, not returned: a value returned unchanged is still a copy). observed: the observer's
            # carry. draws: whether the chunk may reach the sampling phase (False: the observer
            # keeps nothing)
            view = self.view(data)
            dtype = view.dtype

            def x_of(z):
                return to_x(scale, z)

            results, kernel_step = kernel.start(view, state, tlp, grads, da, read_only, scale)

            def ta(dt, size=s.chunk_size):
                return tf.TensorArray(dt, size=size, element_shape=None)

            traces = {name: ta(tf.as_dtype(STAT_DTYPES[name]) if name in STAT_DTYPES else dtype)
                      for name in STAT_NAMES}
            params_ta = ta(dtype)
            observed, observes = observer.start(observed, view, draws)

            def body(t, state, results, traces, params_ta, observed, mass_acc):
                g = step0 + t
                seed = chain_seeds.for_chains(tf.random.experimental.stateless_fold_in(base_seed, g), chain_ids)
                state, results, stats, grads_now = kernel_step(state, results, seed, g)
                if interweaving:        # the centred move (core.engine.interweaving): one gradient more
                    state, results, stats = interweave(view, scale, state, results, stats, seed)
                # the gradient with respect to x: d/dx = S^-T d/dz
                grad_sq = tf.add_n([tf.reduce_sum(tf.reshape(gx, [chains, -1])**2, axis=1)
                                    for gx in grad_to_x(scale, grads_now)])
                stats = {**stats, "grad_norm": tf.sqrt(grad_sq)}
                traces = {name: traces[name].write(t, stats[name]) for name in STAT_NAMES}
                x_parts = x_of(state)
                field_now = kernel.field_now(results)
                params_ta = params_ta.write(t, tf.reshape(view.params(x_parts), [chains, n_params]))
                if with_mass:
                    in_window = tf.logical_and(g >= sched.mass_start, g < sched.mass_end)
                    mass_acc = tf.cond(in_window, lambda: tuple(welford_update(mass_acc, x_parts)),
                                       lambda: (mass_acc[0], list(mass_acc[1]), list(mass_acc[2])))
                if observes:
                    observed = observer.observe(observed, view, g, x_parts, field_now)
                return t + 1, state, results, traces, params_ta, observed, mass_acc

            loop_vars = (tf.constant(0), state, results, traces, params_ta, observed, mass_acc)
            (_, state, results, traces, params_ta, observed, mass_acc) = placement.while_loop(
                lambda t, *rest: t < n_steps, body, loop_vars, maximum_iterations=s.chunk_size)
            tlp_out, grads_out, da_out = kernel.finish(results, da, read_only)
            stacked = {name: arr.stack() for name, arr in traces.items()}
            return {"state": list(state), "tlp": tlp_out, "grads": list(grads_out), "da": da_out,
                    "mass_acc": mass_acc, "traces": stacked, "params": params_ta.stack(), "observed": observed}

        def call(program, st, first, n, data, observed, with_mass, held=frozenset(), read_only=frozenset()):
            da = {k: v for k, v in st["da"].items() if k not in held and k not in read_only}
            fixed = {k: v for k, v in st["da"].items() if k in read_only}
            out = dict(program(st["state"], st["tlp"], st["grads"], da, fixed, st["scale"],
                               st["mass_acc"] if with_mass else (), observed, data,
                               tf.constant([st["seed"], SEED_STREAM], tf.int32), self.chain_ids,
                               tf.constant(first, tf.int32), tf.constant(n, tf.int32)))
            if held or fixed:     # the tuning arrays this chunk did not carry, as they were
                out["da"] = {**{k: st["da"][k] for k in held | read_only}, **out["da"]}
            if not with_mass:
                out["mass_acc"] = st["mass_acc"]
            return out

        return kernel.chunk_runner(chunk, call)

    # -- state: fresh, and between chunks --------------------------------------------

    def fresh_state(self, data=None, seed: int | None = None) -> dict:
        """The state at step 0: the model's initial state from ``seed`` (default: the sampler's),
        its log-density and gradient, the step size (HMC / NUTS: searched there; MCLMC / MAMS:
        their tuning's). ``seed`` also seeds every step (``st["seed"]``: a program argument)."""
        s = self.sampler
        seed = s.seed if seed is None else int(seed)
        parts = [tf.convert_to_tensor(p, self.dtype) for p in self.model.initial_state(s.chains, seed)]
        tlp, grads = self._value_and_gradient(parts, data)
        if not np.all(np.isfinite(tlp.numpy())):
            raise DriverError(nonfinite_report(self.view(data), parts))   # names the term, its value
        scale = [tf.ones_like(p) for p in parts]
        dense = ()
        if self.hyper_metric:
            scale[1] = self._curvature_scale(parts, data)
            if int(parts[1].shape[-1]) >= 2:
                # their covariance is gathered for the dense metric; the start stays diagonal: under
                # a mask the inverse of the whole curvature at the start sent MCLMC off (slab2,
                # seed 43: R-hat 1.75), and without one it gained nothing (pair: ESS 2258 / 2193)
                dense, scale[1] = (1,), tf.linalg.diag(scale[1])
            parts, grads = to_z(scale, parts), grad_to_z(scale, grads)
        da, watch_step = self.kernel.fresh(parts, tlp, grads, scale, seed, data)
        return self.place(dict(state=parts, tlp=tlp, grads=list(grads), da=da, scale=scale,
                               mass_acc=tuple(welford_fresh(parts, self.dtype, dense)), step=0,
                               watch_step=watch_step, seed=seed))

    def _value_and_gradient(self, parts, data):
        """log p and its gradient in x at ``parts``, compiled once (a fresh state and a resumed
        one both reach it: the curvature at the window's end)."""
        if self._lp_and_grad is None:
            def lp_and_grad(parts, data):
                view = self.view(data)
                return tfp.math.value_and_gradient(lambda *q: view.target_log_prob_fn(*q), list(parts))
            self._lp_and_grad = self.program(lp_and_grad)
        return self._lp_and_grad(parts, data)

    def _curvature_scale(self, parts, data, dense: bool = False, step: float = CURVATURE_STEP) -> tf.Tensor:
        """The sampled hyperparameters' starting scale beside a per-mode preconditioner: per
        chain and coordinate, s = (-d^2 log p / d eta_i^2)^-1/2 at the starting state, the
        second derivative from central differences of the gradient (+-``step`` in eta); s = 1
        where that is not a positive finite number. ``dense``: the Cholesky factor of the
        inverse of the whole matrix H = -d^2 log p / d eta d eta^T (its columns from the same
        differences, symmetrised), whose marginal sds, unlike the diagonal's conditional ones,
        are the posterior's where the hyperparameters are correlated and the modes independent
        (``_guard_runaway_scale``); the diagonal's where H is not positive definite. Without
        the starting scale the kernel would start with
        s = 1 while a well-measured spectrum pins eta to a few thousandths: an unadjusted
        sampler (MCLMC) then moves eta by far more than its posterior width in every step, and
        its energy error, spread over the field's many coordinates, does not stop it (the
        window's variances then come from that wandering)."""
        field, eta = parts
        d = int(eta.shape[-1])
        columns = []
        for i in range(d):
            shift = step * tf.one_hot(i, d, dtype=eta.dtype)
            _, up = self._value_and_gradient([field, eta + shift], data)
            _, down = self._value_and_gradient([field, eta - shift], data)
            columns.append(-(up[1] - down[1]) / (2.0 * step))          # column i of H, (chains, d)
        hessian = tf.stack(columns, axis=-1)
        curvature = tf.linalg.diag_part(hessian)
        ok = tf.logical_and(tf.math.is_finite(curvature), curvature > 0.0)
        diagonal = tf.where(ok, tf.math.rsqrt(tf.where(ok, curvature, tf.ones_like(curvature))),
                            tf.ones_like(curvature))
        if not dense:
            return diagonal
        hessian = 0.5 * (hessian + tf.linalg.matrix_transpose(hessian))
        finite = tf.reduce_all(tf.math.is_finite(hessian), axis=[-2, -1], keepdims=True)
        hessian = tf.where(finite, hessian, tf.eye(d, dtype=eta.dtype))
        lower = tf.linalg.cholesky(hessian)          # NaN where H is not positive definite
        factor = tf.linalg.cholesky(tf.linalg.cholesky_solve(lower, tf.eye(d, batch_shape=[eta.shape[0]],
                                                                               dtype=eta.dtype)))
        good = tf.logical_and(finite, tf.reduce_all(tf.math.is_finite(factor), axis=[-2, -1], keepdims=True))
        return tf.where(good, factor, tf.linalg.diag(diagonal))

    def _guard_runaway_scale(self, new_scale, st, data):
        """The hyperparameters' scale at the window's end, where the state is independent of
        P(k) (``FieldPosterior.decoupled``: no mask, or a slab's exact conditional; the
        "conditional" density is then exactly p(eta | d) N(v; 0, I), so the curvature of log p
        in eta is the posterior's own):
        a window sd more than ``RUNAWAY_SCALE`` times the curvature's comes from the window's
        early steps, not from the posterior, and is replaced by the curvature's. Measured on a
        64^3 field at noise 0.1 (bench/hyper_efficiency.py hi_sn64): the window gave 3.4x the
        curvature's 0.00126, and MCLMC then sampled an index 8x too wide (R-hat 1.009); with
        the guard sd 0.98 of the exact one. Elsewhere (a mask, a noise map, counts) the
        curvature of the conditional is not the posterior's and the window's variance stands."""
        if not self.hyper_metric or not getattr(self.model.posterior, "decoupled", False):
            return new_scale
        x = to_x(st["scale"], st["state"])
        s = new_scale[1]
        if not is_dense(s, x[1]):
            curvature = self._curvature_scale(x, data)
            return [new_scale[0], tf.where(s > RUNAWAY_SCALE * curvature, curvature, s)]
        # dense: each runaway coordinate's row of L shrunk to the marginal sd of H^-1 (the
        # window's correlations kept)
        curvature = marginal_sd(self._curvature_scale(x, data, dense=True), x[1])
        sd = marginal_sd(s, x[1])
        shrink = tf.where(sd > RUNAWAY_SCALE * curvature, curvature / sd, tf.ones_like(sd))
        return [new_scale[0], s * shrink[..., :, None]]

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
        self.kernel.at_boundary(st)
        self.place(st)

    def _rescale_at_mass_end(self, st, data):
        sched = self.schedule
        if sched.mass_end is None or st["step"] != sched.mass_end:
            return
        count, mean, m2 = st["mass_acc"]
        new_scale = adapted_scale(Welford(count, list(mean), list(m2)), self.chains,
                                  unit_parts=(0,) if self.hyper_metric else (), groups=self.groups)
        if new_scale is None:
            return
        new_scale = self._guard_runaway_scale(new_scale, st, data)
        # same x, new coordinates
        st["state"], st["grads"] = rescaled(st["scale"], new_scale, st["state"], st["grads"])
        st["scale"] = new_scale
        self.place(st)
        self.kernel.after_rescale(st, data)       # HMC / NUTS: the step searched again


class DeviceSplit:
    """A run's chains spread over devices (``sampler.devices``, ``core.engine.devices.chain_devices``):
    consecutive groups of chains, one a device, each run by a driver of its own (its chunk
    programs compiled for its device), all chunks at once on GPUs (one thread each; TensorFlow
    runs them side by side), one after the other on logical CPU devices (which share the
    cores), their results joined in the chains' order. A chain's random numbers
    and Welford sums are its own (module docstring), the tuning's per-chain state is split
    along its chain axis (``kernel.chain_axis``) and everything between chunks (adaptation,
    checkpoints) runs on the joined state as on one device: the draws are those of one device,
    bit for bit.

    That needs XLA to compute a chain alike in a batch of any size. It does with two chains or
    more (measured: every kernel, 2-4 chains a device against 4 on one), not with one: a lone
    chain's per-chain scalars are compiled as scalar code, whose fused log / square / exp
    rounds differently from the vector code of a batch (1 ulp in 987 of 4200 values, measured;
    MCLMC's step-size predictor then drifts). So a device given one chain runs it twice (the
    same chain index: the same numbers) and keeps one: its memory is two chains'. Only field
    models spread: the integral model's arrays are a few dozen numbers a chain, whose
    compiled code differs between batches of 2 and 4, and a step takes microseconds anyway.
    """

    def __init__(self, d: Driver, devices):
        from dataclasses import replace

        chains, n = d.chains, len(devices)
        if chains < n:
            raise DriverError(f"sampler.devices = {n} but sampler.chains = {chains}: each device runs whole "
                              "chains; ask for at most as many devices as chains")
        if not getattr(d.model, "has_field", False):
            raise DriverError(f"sampler.devices = {n}: only a field model's chains spread over devices (this "
                              f"model's state is {sum(int(np.prod(p.shape[1:])) for p in d.model.initial_state(1, 0))} "
                              "numbers a chain, a step microseconds on one device); set devices = 1")
        self.d, self.devices = d, list(devices)
        self.sizes = device_chain_split(chains, n)
        starts = np.cumsum([0, *self.sizes])
        offset = int(d.chain_ids[0])
        # a lone chain runs twice (class docstring): rows (a, a); device_chain_groups counts it
        self.rows = [list(range(a, b)) if b - a > 1 else [a, a] for a, b in zip(starts[:-1], starts[1:])]
        self.subs = [Driver(d.model, replace(d.sampler, chains=len(rows), devices=1), d.schedule,
                            hyper_metric=d.hyper_metric, chains_per_posterior=len(rows),
                            observer=d.observer.for_chains(len(rows)),
                            chain_ids=[offset + r for r in rows])
                     for rows in self.rows]

    @staticmethod
    def _take(value, axis, rows):
        if axis is None:
            return value
        if isinstance(value, (list, tuple)):
            return [DeviceSplit._take(v, axis, rows) for v in value]
        return tf.gather(value, rows, axis=axis)

    @staticmethod
    def _join(values, axis, sizes):
        if axis is None:
            return values[0]
        if isinstance(values[0], (list, tuple)):
            return [DeviceSplit._join([v[i] for v in values], axis, sizes) for i in range(len(values[0]))]
        return tf.concat([v[(slice(None),) * axis + (slice(0, k),)] for v, k in zip(values, sizes)], axis)

    def _part(self, st, i):
        rows, axis = self.rows[i], self.d.kernel.chain_axis
        count, mean, m2 = st["mass_acc"]
        return {**{key: self._take(st[key], 0, rows) for key in ("state", "tlp", "grads", "scale")},
                "da": {key: self._take(v, axis(key), rows) for key, v in st["da"].items()},
                "mass_acc": (count, self._take(mean, 0, rows), self._take(m2, 0, rows)), "seed": st["seed"]}

    def run_chunk(self, st, first, n, data=None, observed=None):
        from concurrent.futures import ThreadPoolExecutor

        def run(i):
            with tf.device(self.devices[i]):
                return self.subs[i].run_chunk(self._part(st, i), first, n,
                                              None if data is None else tf.nest.map_structure(
                                                  lambda a: tf.gather(a, self.rows[i]), data),
                                              self.d.observer.split(observed, self.rows[i]))

        if all("CPU" in name.upper() for name in self.devices):
            # logical CPU devices share the cores: one after the other (side by side they only
            # oversubscribe the thread pool, and the draws are the same either way)
            outs = [run(i) for i in range(len(self.subs))]
        else:
            with ThreadPoolExecutor(len(self.subs)) as pool:
                outs = list(pool.map(run, range(len(self.subs))))
        self.placed = [out["tlp"].device for out in outs]      # where each group's chunk ran
        axis, sizes = self.d.kernel.chain_axis, self.sizes
        joined = {key: self._join([o[key] for o in outs], 0, sizes) for key in ("state", "tlp", "grads")}
        joined["da"] = {key: self._join([o["da"][key] for o in outs], axis(key), sizes) for key in outs[0]["da"]}
        joined["mass_acc"] = (outs[0]["mass_acc"][0], *(self._join([o["mass_acc"][j] for o in outs], 0, sizes)
                                                        for j in (1, 2)))
        joined["traces"] = {name: self._join([o["traces"][name] for o in outs], 1, sizes)
                            for name in outs[0]["traces"]}
        joined["params"] = self._join([o["params"] for o in outs], 1, sizes)
        joined["observed"] = self.d.observer.merge([o["observed"] for o in outs], sizes)
        return joined
