"""Running moments of the state for the diagonal mass matrix (Welford's algorithm), pooled over
the chains of each posterior.

The chains are G consecutive groups of k = chains / G (a run: one group of all its chains; a
calibration batch: one group per simulation). Each step adds one observation per group: the mean
of its chains' states, and the squared deviations averaged over its chains,

    n <- n + 1,   mu' = mu + (xbar - mu) / n,   m2 <- m2 + mean_c[(x_c - mu)(x_c - mu')]

so that m2 / (n - 1) estimates the posterior variance of each coordinate (the within-step spread
of the chains counts with the spread along the run). A part named in ``dense`` (shape (chains, d))
gathers the outer products instead, m2 (G, d, d): its covariance, for the dense metric.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from core.engine.adaptation.metric import is_dense

__all__ = ["Welford", "welford_fresh", "welford_update"]


class Welford(NamedTuple):
    """count: steps gathered (scalar); mean, m2: per state part, (G, ...) each."""

    count: tf.Tensor
    mean: list
    m2: list


def welford_fresh(parts, groups: int, dtype, dense=()) -> Welford:
    """No observation yet, for state ``parts`` ((chains, ...) each) in ``groups`` groups; the
    parts whose index is in ``dense`` ((chains, d) each) gather their covariance."""
    return Welford(tf.constant(0.0, dtype), [tf.zeros([groups, *p.shape[1:]], dtype) for p in parts],
                   [tf.zeros([groups, *p.shape[1:], *(p.shape[1:] if i in dense else ())], dtype)
                    for i, p in enumerate(parts)])


def _group_mean(x, groups: int):
    return tf.reduce_mean(tf.reshape(x, [groups, -1, *x.shape[1:]]), axis=1)


def welford_update(acc: Welford, parts) -> Welford:
    """``acc`` with the state ``parts`` ((chains, ...) each) of one step added."""
    count, mean, m2 = acc
    n = count + 1.0
    new_mean, new_m2 = [], []
    for part, mu, q in zip(parts, mean, m2):
        groups = mu.shape[0]
        per_group = part.shape[0] // groups
        mu_new = mu + (_group_mean(part, groups) - mu) / n
        rep_mu, rep_new = tf.repeat(mu, per_group, axis=0), tf.repeat(mu_new, per_group, axis=0)
        new_mean.append(mu_new)
        if is_dense(q, part):        # dense: outer products
            new_m2.append(q + _group_mean((part - rep_mu)[..., :, None] * (part - rep_new)[..., None, :], groups))
        else:
            new_m2.append(q + _group_mean((part - rep_mu) * (part - rep_new), groups))
    return Welford(n, new_mean, new_m2)
