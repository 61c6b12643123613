"""Dual-averaging step-size adaptation (Hoffman & Gelman 2014) as TensorFlow Probability's
``DualAveragingStepSizeAdaptation`` runs it, as functions from a step's acceptance to the step
sizes (BlackJAX's ``adaptation/step_size.py`` shape):

    da = fresh_dual_averaging(step_size, chains, dtype, da_step=0, num_adapt=N)    # a dict
    state = DualAveragingState(**da)
    state = dual_averaging_step(state, log_accept_ratio, target_accept, position)  # after each step
    da = state._asdict()

HMC and NUTS (``core.engine.samplers.dual_averaging_kernel``) move with ``state.step_size`` and
update it from each transition's log acceptance ratio; the driver passes ``da`` into and out of
every compiled chunk and the checkpoint, and restarts it (from the searched step size, with the
shrinkage target mu = log(10 eps0)) when the metric changes, as Stan does after each window.
``dual_averaging_step`` is TFP 0.25's ``DualAveragingStepSizeAdaptation.one_step`` (its
``_one_step_part`` for each part, TFP's constants t0 = 10, gamma = 0.05, kappa = 0.75) with the
same arithmetic, so the step sizes are TFP's bit for bit: with t the step (from 1), a = min(1, r)
(0 where r is not finite) and eps_0 the step size searched at the start,

    H_t = H_{t-1} + target - a                      (``error_sum``: a sum, not TFP's mean)
    log eps_t = mu - H_t sqrt(t) / (t + t0) / gamma
    log eps_avg_t = t^-kappa log eps_t + (1 - t^-kappa) log eps_avg_{t-1}

for t < N; at t = N the step size becomes eps_avg (the end of adaptation), after it nothing
changes.

``dual_averaging_update`` is one step of Stan's form of the rule written out (t0 = 10,
gamma = 0.05, kappa = 0.75, Stan's and BlackJAX's constants), for MAMS
(``core.engine.adaptation.mams_tuning``). It is ``dual_averaging_step``'s rule (H_t there is
t + t0 times this one's) but for the average, which takes eps_{t-1} here, and for the
floating-point order: each keeps its family's draws as they were:

    H_t = (1 - 1 / (t + t0)) H_{t-1} + (target - accept) / (t + t0)
    log eps_t = mu - sqrt(t) / gamma H_t
    log eps_avg_t = t^-kappa log eps_t-1 + (1 - t^-kappa) log eps_avg_t-1
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf
from tensorflow_probability.python.internal import prefer_static as ps
from tensorflow_probability.python.math.generic import reduce_logmeanexp
from tensorflow_probability.python.mcmc.simple_step_size_adaptation import get_differing_dims

__all__ = ["DualAveragingState", "fresh_dual_averaging", "dual_averaging_step", "dual_averaging_update"]

#: TFP's DualAveragingStepSizeAdaptation defaults (Stan's): t0, gamma, kappa
STEP_COUNT_SMOOTHING = 10
EXPLORATION_SHRINKAGE = 0.05
DECAY_RATE = 0.75


class DualAveragingState(NamedTuple):
    """Dual averaging's state (the keys of ``fresh_dual_averaging``'s dict), with a list entry
    per state part: the step sizes to move with (chains, 1, ...), the summed errors H (chains,),
    log eps_avg, the step t (int32; 0 at the start), the steps of adaptation N (int32) and the
    shrinkage target mu."""

    step_size: list
    error_sum: list
    log_avg: list
    da_step: tf.Tensor
    num_adapt: tf.Tensor
    shrink: list


def fresh_dual_averaging(step_size, chains: int, dtype, da_step: int, num_adapt: int) -> dict:
    """The state at ``step_size`` (a list of per-part step sizes, (chains, 1, ...) each) with
    ``num_adapt`` steps of adaptation to come, counted from ``da_step``."""
    return {"step_size": list(step_size),
            # as TFP's bootstrap: one accumulated error per chain (the reduced acceptance)
            "error_sum": [tf.zeros([chains], dtype) for _ in step_size],
            "log_avg": [tf.zeros_like(v) for v in step_size],
            "da_step": tf.constant(da_step, tf.int32),
            "num_adapt": tf.constant(num_adapt, tf.int32),
            "shrink": [tf.math.log(10.0 * v) for v in step_size]}


def dual_averaging_update(t, avg_error, log_step, log_avg, mu, accept, target, t0: float = 10.0,
                          gamma: float = 0.05, kappa: float = 0.75):
    """One step of dual averaging (module docstring): (log eps_t, H_t, log eps_avg_t) from step
    t's state (H_{t-1} = ``avg_error``, log eps_{t-1} = ``log_step``, log eps_avg_{t-1} =
    ``log_avg``), its acceptance probability and the target."""
    reg = t + t0
    eta = tf.pow(t, -kappa)
    avg_error = (1.0 - 1.0 / reg) * avg_error + (target - accept) / reg
    log_x = mu - tf.sqrt(t) / gamma * avg_error
    log_avg = eta * log_step + (1.0 - eta) * log_avg
    return log_x, avg_error, log_avg


def _step_part(step_size, state_part, error_sum, log_avg, shrink, log_accept_prob, target, step, num_adapt):
    """TFP's ``DualAveragingStepSizeAdaptation._one_step_part``, for one part."""
    dtype = shrink.dtype
    # the acceptance, reduced to the step size's chain dimensions (none here: one per chain)
    num_reduce_dims = ps.minimum(ps.rank(log_accept_prob), ps.rank(state_part) - ps.rank(step_size))
    reduced = reduce_logmeanexp(log_accept_prob, axis=ps.range(num_reduce_dims), keepdims=False)
    reduced = reduce_logmeanexp(reduced, axis=get_differing_dims(reduced, step_size), keepdims=True)
    error_sum = error_sum + target - tf.math.exp(reduced)
    pad = ps.maximum(ps.rank(shrink) - ps.rank(error_sum), 0)
    error_sum_extend = tf.reshape(error_sum, shape=ps.pad(ps.shape(error_sum), paddings=[[0, pad]], constant_values=1))
    # the constants in the step size's dtype straight from Python (as TFP's __init__ converts them:
    # tf.cast(0.05, tf.float64) would round 0.05 to float32 first)
    smoothing = tf.convert_to_tensor(float(STEP_COUNT_SMOOTHING), dtype)
    t = tf.cast(step, dtype) + 1.
    log_step = shrink - ((tf.cast(error_sum_extend, dtype) * tf.math.sqrt(t))
                         / ((smoothing + t) * tf.convert_to_tensor(EXPLORATION_SHRINKAGE, dtype)))
    eta = t ** (-tf.convert_to_tensor(DECAY_RATE, dtype))
    new_log_avg = eta * log_step + (1. - eta) * log_avg
    # still adapting: the exploring step size; just finished: the averaged one; after: unchanged
    t = step + 1
    new_step = tf.where(t < num_adapt, tf.math.exp(log_step),
                        tf.where(t > num_adapt, step_size, tf.math.exp(new_log_avg)))
    return new_step, error_sum, tf.where(t > num_adapt, log_avg, new_log_avg)


def dual_averaging_step(state: DualAveragingState, log_accept_ratio, target_accept, position) -> DualAveragingState:
    """The state after a transition with ``log_accept_ratio`` (chains,) from ``position`` (the
    parts it started from; only their ranks count), towards ``target_accept`` (module
    docstring)."""
    # TFP's hmc_like_log_accept_prob_getter_fn: log min(1, r), -inf where r is not finite
    log_accept_prob = tf.minimum(tf.where(tf.math.is_finite(log_accept_ratio), log_accept_ratio,
                                          tf.constant(-np.inf, dtype=log_accept_ratio.dtype)), 0.)
    target = tf.cast(tf.convert_to_tensor(target_accept, dtype_hint=log_accept_prob.dtype), log_accept_prob.dtype)
    parts = [_step_part(*args, log_accept_prob, target, state.da_step, state.num_adapt)
             for args in zip(state.step_size, list(position)[:len(state.step_size)], state.error_sum,
                             state.log_avg, state.shrink)]
    step_size, error_sum, log_avg = (list(x) for x in zip(*parts))
    return state._replace(step_size=step_size, error_sum=error_sum, log_avg=log_avg, da_step=state.da_step + 1)
