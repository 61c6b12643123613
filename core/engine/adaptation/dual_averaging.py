"""The state of dual-averaging step-size adaptation (Hoffman & Gelman 2014, as TensorFlow
Probability's ``DualAveragingStepSizeAdaptation`` carries it), started from a step size.

HMC and NUTS run inside TFP's kernel, which updates this state each step; the driver passes it
into and out of every compiled chunk and restarts it (from the searched step size, with the
shrinkage target mu = log(10 eps0)) when the metric changes, as Stan does after each window.
"""

from __future__ import annotations

import tensorflow as tf

__all__ = ["fresh_dual_averaging"]


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
