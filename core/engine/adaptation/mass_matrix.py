"""The diagonal mass matrix from the Welford sums, as Stan sets it.

var = m2 / (n - 1) regularised towards 1e-3: (n / (n + 5)) var + 1e-3 (5 / (n + 5)); the
kernel then moves z with x = s z, s = sqrt(var) (identity mass in z is mass 1 / s^2 in x).
Parts in ``unit_parts`` keep s = 1: the fourier preconditioner already scales the field, and
only sampled P(k) hyperparameters get the adapted diagonal beside it.
"""

from __future__ import annotations

import tensorflow as tf

from core.engine.adaptation.welford import Welford

__all__ = ["MIN_COUNT", "diagonal_scale"]

MIN_COUNT = 2          # fewer gathered steps give no variance: the metric is left as it is


def diagonal_scale(acc: Welford, chains: int, unit_parts=()) -> list | None:
    """Per-chain scales s (chains, ...) for each state part from ``acc`` (each group's variance
    repeated over its chains); None when fewer than ``MIN_COUNT`` steps were gathered."""
    count, _, m2 = acc
    c = float(count.numpy())
    if c < MIN_COUNT:
        return None
    scale = []
    for i, q in enumerate(m2):
        var = q / (c - 1.0)
        var = (c / (c + 5.0)) * var + 1e-3 * (5.0 / (c + 5.0))
        if i in unit_parts:
            var = tf.ones_like(var)
        scale.append(tf.repeat(tf.sqrt(var), chains // var.shape[0], axis=0))
    return scale
