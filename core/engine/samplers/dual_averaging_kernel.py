"""The dual-averaging family: HMC and NUTS, each a pure step, with dual averaging of each chain's
step size during warmup.

A transition is the algorithm's step (``core.engine.hmc``, ``core.engine.nuts``: ``step(seed,
state, step_size) -> (state, info)``) with the step sizes of the dual-averaging state, then one
update of that state from the step's acceptance (``core.engine.adaptation.dual_averaging``:
``dual_averaging_step``, TFP's ``DualAveragingStepSizeAdaptation`` arithmetic; after
``num_adapt`` steps it holds the step size). Each chain has its own step size, adapted for
``num_warmup`` steps towards ``target_accept`` from the one ``core.engine.adaptation.step_search`` finds at
the fresh state (``sampler.step_size`` is the search's first guess; its momenta come from
fold_in((seed, 104729), step), so the search is reproducible). With the diagonal, dual averaging
first runs to the window's end, where the step size is searched again in the new coordinates and
dual averaging restarts for the rest of warmup, as Stan does after each metric update. The step
moves z with x = S z on the target p(S z) (``adaptation.metric``).

A member of the family says only what differs (``hmc.py``, ``nuts.py``, ``hmc_jittered.py``): its
step on a target (``kernel``) and the named tuple of its state (``State``: position, log-density,
gradient), how the step search runs (``search_settings``) and what its info says of a
transition (``transition``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from core.engine.adaptation.dual_averaging import DualAveragingState, dual_averaging_step, fresh_dual_averaging
from core.engine.adaptation.metric import to_x
from core.engine.adaptation.step_search import find_initial_step_size

__all__ = ["DualAveragingKernel", "DualAveragingResults", "SEARCH_STREAM"]

SEARCH_STREAM = 104729    # the seed of the step-size search at step g: fold_in((seed, this), g)
_DA_KEYS = ("step_size", "error_sum", "log_avg", "shrink")


class DualAveragingResults(NamedTuple):
    """What a chunk carries from step to step besides the position: the log-density and its
    gradient there, and the dual-averaging state."""

    logdensity: tf.Tensor
    logdensity_grad: list
    adaptation: DualAveragingState


class DualAveragingKernel:
    """HMC / NUTS's shared part (module docstring); ``d`` is the driver."""

    def __init__(self, d):
        self.d = d
        self._search_fn = None

    # -- what a member says --------------------------------------------------------

    #: the named tuple of the step's state: (position, logdensity, logdensity_grad)
    State = None

    def kernel(self, target_z):
        """The algorithm's step on z: step(seed, State, step sizes) -> (State, info)."""
        raise NotImplementedError

    def search_settings(self) -> tuple[int, float]:
        """(leapfrog steps of a search trajectory, the acceptance it searches for)."""
        raise NotImplementedError

    def transition(self, info):
        """(log acceptance ratio, leapfrog steps (chains,), divergent (chains,)) of a step."""
        raise NotImplementedError

    # -- the family ----------------------------------------------------------------

    @classmethod
    def plan(cls, num_warmup: int, diagonal: bool):
        """The diagonal's window [15 %, 75 %) of warmup; no further stops."""
        return ((int(0.15 * num_warmup), int(0.75 * num_warmup)) if diagonal else None), ()

    def fresh(self, parts, tlp, grads, scale, seed, data):
        s = self.d.sampler
        # dual averaging starts from a step size searched at this state (sampler.step_size
        # is the search's first guess); a resumed run restores it from the checkpoint instead
        step = self.searched_step(parts, tlp, grads, scale, tf.constant(s.step_size, self.d.dtype), 0, seed, data)
        sched = self.d.schedule
        da = self.dual_averaging(step, da_step=0,
                                 num_adapt=sched.mass_end if sched.mass_end is not None else sched.num_warmup)
        # the step size the warmup watch measures a collapse against: the larger of
        # sampler.step_size and the searched one (a search that went down by more than
        # STEP_COLLAPSE is a collapse too: the posterior is far narrower than the sampler moves)
        watch_step = np.maximum(np.asarray(step[0]).reshape(s.chains), s.step_size)
        return da, watch_step

    def dual_averaging(self, step_size, da_step, num_adapt):
        return fresh_dual_averaging(step_size, self.d.chains, self.d.dtype, da_step, num_adapt)

    def searched_step(self, state, tlp, grads, scale, first_guess, g, seed: int, data=None):
        """Per-part step sizes (chains, 1, ...) from ``core.engine.adaptation.step_search`` at ``state`` (in
        z, with x = scale * z), its momenta seeded by fold_in((seed, 104729), g)."""
        d = self.d
        if self._search_fn is None:
            leapfrogs, threshold = self.search_settings()

            def search(state, tlp, grads, scale, first_guess, seed, data):
                target = d.view(data).target_log_prob_fn

                def target_z(*z):
                    return target(*to_x(scale, z))
                return find_initial_step_size(target_z, state, tlp, grads, first_guess, seed,
                                              num_leapfrog_steps=leapfrogs, threshold=threshold)[0]

            self._search_fn = d.program(search)
        step_seed = tf.random.experimental.stateless_fold_in(tf.constant([seed, SEARCH_STREAM], tf.int32), g)
        eps = self._search_fn(list(state), tlp, list(grads), list(scale), first_guess, step_seed, data)
        return [tf.reshape(eps, [d.chains] + [1] * (len(p.shape) - 1)) for p in state]

    def start(self, view, state, tlp, grads, da, read_only, scale):
        """The chunk's carry (``DualAveragingResults``) from its start values, and one step: the
        algorithm's transition with the adapted step sizes, then their update from its acceptance."""
        chains = self.d.chains
        target = view.target_log_prob_fn

        def target_z(*z):                   # x = S z (S = 1 before the metric is set)
            return target(*to_x(scale, z))

        kernel_step = self.kernel(target_z)
        target_accept = tf.constant(self.d.sampler.target_accept, self.d.dtype)
        results = DualAveragingResults(tlp, list(grads), DualAveragingState(**da))

        def step(state, results, seed, g):
            adaptation = results.adaptation
            used_step = tf.reshape(adaptation.step_size[0], [chains])
            moved, info = kernel_step(seed, self.State(list(state), results.logdensity, results.logdensity_grad),
                                      adaptation.step_size)
            lar, n_leap, diverging = self.transition(info)
            adaptation = dual_averaging_step(adaptation, lar, target_accept, state)
            accept = tf.where(tf.math.is_finite(lar), tf.exp(tf.minimum(lar, 0.)), tf.zeros_like(lar))
            stats = {"lp": moved.logdensity, "acceptance_rate": accept, "step_size": used_step,
                     "energy_error": -lar, "diverging": diverging, "n_steps": n_leap,
                     "trajectory_length": used_step * tf.cast(n_leap, used_step.dtype)}
            results = DualAveragingResults(moved.logdensity, list(moved.logdensity_grad), adaptation)
            return list(moved.position), results, stats, results.logdensity_grad
        return results, step

    @staticmethod
    def field_now(results):
        return None

    @staticmethod
    def relocated(view, results, state, scale):
        """The carry at ``state``, a state the driver moved to (``core.engine.interweaving``):
        its log-density and gradient -> (carry, log-density)."""
        target = view.target_log_prob_fn
        lp, grads = tfp.math.value_and_gradient(lambda *z: target(*to_x(scale, z)), list(state))
        return results._replace(logdensity=lp, logdensity_grad=list(grads)), lp

    def finish(self, results, da, read_only):
        return results.logdensity, results.logdensity_grad, dict(results.adaptation._asdict())

    def chunk_runner(self, chunk, call):
        # one program (a step is many gradients: the diagonal's per-step tf.cond is noise beside
        # them, and a second compilation would cost start-up time)
        adapt_mass = self.d.schedule.mass_end is not None
        program = self.d.program(lambda *a: chunk(*a, with_mass=adapt_mass, draws=True))
        return lambda st, first, n, data=None, observed=None: call(program, st, first, n, data, observed,
                                                                   adapt_mass)

    def after_rescale(self, st, data):
        """The metric changed: search again from the adapted step, as Stan does after each window."""
        d, sched = self.d, self.d.schedule
        chains_step = tf.reshape(st["da"]["step_size"][0], [d.chains])
        step = self.searched_step(st["state"], st["tlp"], st["grads"], st["scale"], chains_step, sched.mass_end,
                                  st["seed"], data)
        st["da"] = self.dual_averaging(step, da_step=0, num_adapt=sched.num_warmup - sched.mass_end)

    def at_boundary(self, st):
        pass

    @staticmethod
    def chain_axis(key):
        """The chain axis of the tuning state's ``key`` (None: one value for all chains)."""
        return None if key in ("da_step", "num_adapt") else 0

    @staticmethod
    def checkpoint(da, put, arrays) -> dict:
        for key in _DA_KEYS:
            put(f"da_{key}", da[key])
        arrays["da_step"] = np.asarray(da["da_step"])
        arrays["da_num_adapt"] = np.asarray(da["num_adapt"])
        return {}

    @staticmethod
    def restore(arrays, meta, get) -> dict:
        da = {key: get(f"da_{key}") for key in _DA_KEYS}
        da["da_step"] = tf.constant(arrays["da_step"])
        da["num_adapt"] = tf.constant(arrays["da_num_adapt"])
        return da
