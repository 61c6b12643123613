"""The state of dual-averaging step-size adaptation (Hoffman & Gelman 2014, as TensorFlow
Probability's ``DualAveragingStepSizeAdaptation`` carries it), started from a step size.

HMC and NUTS run inside TFP's kernel, which updates this state each step; the driver passes it
into and out of every compiled chunk and restarts it (from the searched step size, with the
shrinkage target mu = log(10 eps0)) when the metric changes, as Stan does after each window.

``dual_averaging_update`` is one step of the same rule written out (t0 = 10, gamma = 0.05,
kappa = 0.75, Stan's and BlackJAX's constants), for a sampler that is not a TFP kernel (MAMS,
``core.engine.microcanonical``):

    H_t = (1 - 1 / (t + t0)) H_{t-1} + (target - accept) / (t + t0)
    log eps_t = mu - sqrt(t) / gamma H_t
    log eps_avg_t = t^-kappa log eps_t-1 + (1 - t^-kappa) log eps_avg_t-1
"""

from __future__ import annotations

import tensorflow as tf

__all__ = ["fresh_dual_averaging", "dual_averaging_update"]


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
