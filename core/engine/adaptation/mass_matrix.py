"""The mass matrix from the Welford sums, as Stan sets it.

Diagonal: var = m2 / (n - 1) regularised towards 1e-3: (n / (n + 5)) var + 1e-3 (5 / (n + 5)), n
the draws of a posterior's chains together;
the kernel then moves z with x = s z, s = sqrt(var) (identity mass in z is mass 1 / s^2 in x).
Dense (a part whose sums are its covariance, ``welford_fresh(dense=...)``): the same
regularisation of the covariance matrix, and x = L z with L its Cholesky factor
(``core.engine.adaptation.metric``). Parts in ``unit_parts`` keep s = 1: the fourier
preconditioner already scales the field, and only sampled P(k) hyperparameters get the adapted
metric beside it.
"""

from __future__ import annotations

import tensorflow as tf

from core.engine.adaptation.metric import is_dense
from core.engine.adaptation.welford import Welford, pooled

__all__ = ["MIN_COUNT", "adapted_scale"]

MIN_COUNT = 2          # fewer gathered steps give no variance: the metric is left as it is


def adapted_scale(acc: Welford, chains: int, unit_parts=(), groups: int = 1) -> list | None:
    """Per-chain scales (chains, ...) for each state part from the chains' sums ``acc``, pooled
    over each of ``groups`` groups of consecutive chains (``welford.pooled``; each group's
    estimate repeated over its chains): s for a diagonal part, the Cholesky factor L for a dense
    one; None when fewer than ``MIN_COUNT`` steps were gathered. Stan's regularisation counts
    the draws of a group (its chains' together)."""
    if float(acc.count.numpy()) < MIN_COUNT:
        return None
    c, mean, m2 = pooled(acc, groups)
    scale = []
    for i, (mu, q) in enumerate(zip(mean, m2)):
        if i in unit_parts:
            s = tf.ones_like(mu)
        elif is_dense(q, mu):
            eye = tf.eye(int(q.shape[-1]), dtype=q.dtype)
            cov = q / (c - 1.0)
            s = tf.linalg.cholesky((c / (c + 5.0)) * cov + 1e-3 * (5.0 / (c + 5.0)) * eye)
        else:
            var = q / (c - 1.0)
            s = tf.sqrt((c / (c + 5.0)) * var + 1e-3 * (5.0 / (c + 5.0)))
        scale.append(tf.repeat(s, chains // s.shape[0], axis=0))
    return scale
