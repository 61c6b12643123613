"""The microcanonical family: MCLMC and MAMS (``core.engine.microcanonical``), each chain with
its own step size and trajectory length L, tuned in stages over warmup; their tuning state is
carried through the chunks and the checkpoint like dual averaging's.

The stage ends also end chunks (``plan``), and their stage transitions run between chunks
(``at_boundary``). With the diagonal adapted the window is their tuning's variance stage and
their step size goes on from its value when it is set. Two chunk programs when the diagonal is
adapted: one with the mass-matrix accumulation for the chunks that overlap its window (stage
2) and one without (its per-step tf.cond cost 6-15 % of a 32^3 step where it did nothing,
docs/benchmarks.md). Without it, one program, unless the moments of z are large
(``core.run.engine_limits.stage2_apart``): then the chunks of stage 2 have a program with them,
the others one without (issue #13). Stage 2 ends in warmup: its program makes no field draws.

A member (``mclmc.py``, ``mams.py``) is the algorithm as a pure kernel (``init`` /
``build_kernel``, BlackJAX's shape: step(seed, state, params) -> (state, info) on named
tuples), its staged tuning (``tuning_class``, in ``core.engine.adaptation``), and the glue of
the two for the driver: ``tuned_step`` (one kernel step, then the tuning's update, and the
step's statistics), ``fresh_tuning`` and ``settings`` (the tuning's arguments beyond the
family's).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from core.engine import microcanonical
from core.engine.adaptation.metric import to_x
from core.engine.driver import DriverError
from core.run.engine_limits import stage2_apart

__all__ = ["MicrocanonicalKernel"]


class MicrocanonicalKernel:
    """MCLMC / MAMS's shared part (module docstring); ``d`` is the driver."""

    tuning_class: type = None

    def __init__(self, d):
        self.d = d
        s = d.sampler
        # the state's shapes, from one draw (eager, at build): not a prior draw in every trace
        parts = [tf.zeros([s.chains, *p.shape[1:]], d.dtype) for p in d.model.initial_state(1, s.seed)]
        try:
            self.tuner = self.tuning_class(parts, s.chains, d.dtype, s.num_warmup, d.schedule.mass_end is not None,
                                           s.step_size, chains_per_posterior=d.chains_per_posterior,
                                           **self.settings())
        except ValueError as err:
            raise DriverError(f"sampler.algorithm = {s.algorithm!r}: {err}; this model has "
                              f"{microcanonical.n_dims(parts)}: use \"hmc\" or \"nuts\"") from None

    # -- what a member says --------------------------------------------------------

    def settings(self) -> dict:
        """Keyword arguments of ``tuning_class`` beyond the family's."""
        return {}

    def fresh_tuning(self, parts, seed: int) -> dict:
        """The tuning state (with any kernel state the driver carries in it) at step 0."""
        return self.tuner.fresh()

    @staticmethod
    def build_kernel(target, has_aux: bool = False):
        """The kernel's step(seed, state, params) -> (state, info) on ``target``."""
        raise NotImplementedError

    @staticmethod
    def tuned_step(kernel, tuner, x, lp, g, tune, seed, step_index, aux=()):
        """One step of ``kernel`` from (x, lp, g, aux) with tune's parameters, then ``tuner``'s
        update -> x, lp, g, tune, the step's statistics (``core.run.messages.STAT_NAMES`` less
        lp and grad_norm), aux."""
        raise NotImplementedError

    # -- the family ----------------------------------------------------------------

    @classmethod
    def plan(cls, num_warmup: int, diagonal: bool):
        return cls.tuning_class.plan(num_warmup, diagonal)

    def fresh(self, parts, tlp, grads, scale, seed, data):
        # their own tuning sets the step; no search
        return self.fresh_tuning(parts, seed), np.full(self.d.chains, self.tuner.initial_step)

    def start(self, view, state, tlp, grads, da, read_only, scale):
        """One step on z with x = S z -> (state, (lp, gradient, tuning[, [field]]), statistics,
        gradient). The field at the state rides along with a field model (the density computes it
        for the likelihood: ``FieldModel.target_log_prob_and_field``; the observer takes it
        instead of a transform of its own)."""
        with_field = self.d.model.has_field
        # the aux parts: [the field], or a sharded field's parts
        results = (tlp, list(grads), {**da, **read_only},
                   *([self._as_aux(view.field(to_x(scale, state)))] if with_field else []))
        target = view.target_log_prob_and_field if with_field else view.target_log_prob_fn
        kernel = self.build_kernel(lambda *z: target(*to_x(scale, z)), has_aux=with_field)

        def step(state, results, seed, g):
            lp, grads, tune, *aux = results
            state, lp, grads, tune, stats, aux = self.tuned_step(kernel, self.tuner, list(state), lp, grads, tune,
                                                                 seed, g, aux[0] if aux else ())
            return state, (lp, grads, tune, *([aux] if with_field else [])), {**stats, "lp": lp}, grads
        return results, step

    def relocated(self, view, results, state, scale):
        """The carry at ``state``, a state the driver moved to (``core.engine.interweaving``):
        its log-density, gradient and field, the tuning as it was -> (carry, log-density)."""
        with_field = self.d.model.has_field
        target = view.target_log_prob_and_field if with_field else view.target_log_prob_fn
        lp, grads, aux = microcanonical.value_and_grad_fn(lambda *z: target(*to_x(scale, z)),
                                                           has_aux=with_field)(list(state))
        return (lp, grads, results[2], *([aux] if with_field else [])), lp

    def _as_aux(self, field):
        return list(field) if self.d.sharded else [field]

    def field_now(self, results):
        if not self.d.model.has_field:
            return None
        return list(results[3]) if self.d.sharded else results[3][0]

    @staticmethod
    def finish(results, da, read_only):
        tlp_out, grads_out, tune_out = results[:3]
        return tlp_out, grads_out, {key: value for key, value in tune_out.items() if key not in read_only}

    def chunk_runner(self, chunk, call):
        d, sched, tuner = self.d, self.d.schedule, self.tuner
        adapt_mass = sched.mass_end is not None
        n_values = d.model.grid.n_cells if d.model.has_field else 1
        apart = adapt_mass or (tuner.uses_moments() and stage2_apart(d.chains, n_values))
        if adapt_mass and (sched.mass_start, sched.mass_end) != (tuner.stages.b1, tuner.stages.b2):
            raise DriverError(f"the mass-matrix window {sched.mass_start, sched.mass_end} is not stage 2 "
                              f"{tuner.stages.b1, tuner.stages.b2} of {d.sampler.algorithm}'s warmup")
        programs = {flag: d.program(lambda *a, flag=flag: chunk(*a, with_mass=flag and adapt_mass, draws=not flag))
                    for flag in ((False, True) if apart else (False,))}

        def run_chunk(st, first, n, data=None, observed=None):
            stage2 = apart and tuner.in_stage2(first, n)
            held, read_only = tuner.chunk_keys(stage2 if apart else None)
            return call(programs[stage2], st, first, n, data, observed, stage2 and adapt_mass, held, read_only)
        return run_chunk

    def after_rescale(self, st, data):
        pass       # their step size goes on from its value

    def at_boundary(self, st):
        if st["step"] in self.d.schedule.tune_stops:
            st["da"] = self.tuner.at_boundary(st["step"], st["da"])

    def chain_axis(self, key):
        """The chain axis of the tuning state's ``key`` (None: one value for all chains)."""
        return self.tuner.chain_axis(key)

    def checkpoint(self, da, put, arrays) -> dict:
        # the tuning state as it is: a tensor, or a list of tensors (one per state part)
        parts = {}
        for key, value in da.items():
            if isinstance(value, (list, tuple)):
                parts[key] = len(value)
                put(f"tune_{key}", value)
            else:
                arrays[f"tune_{key}"] = np.asarray(value)
        return {"tuning": {"algorithm": self.d.sampler.algorithm, "keys": sorted(da), "parts": parts}}

    def restore(self, arrays, meta, get) -> dict:
        tuning = meta["tuning"]
        if tuning["algorithm"] != self.d.sampler.algorithm:
            raise ValueError(f"a {tuning['algorithm']} checkpoint")
        da = {key: ([tf.constant(arrays[f"tune_{key}_{i}"]) for i in range(tuning["parts"][key])]
                    if key in tuning["parts"] else tf.constant(arrays[f"tune_{key}"]))
              for key in tuning["keys"]}
        return self.tuner.complete(da)
