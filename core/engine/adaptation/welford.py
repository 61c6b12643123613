"""Running moments of the state for the metric (Welford's algorithm), each chain's own, pooled
over the chains of each posterior when the metric is set (``mass_matrix``).

Each step adds each chain's state to that chain's sums,

    n <- n + 1,   mu_c' = mu_c + (x_c - mu_c) / n,   m2_c <- m2_c + (x_c - mu_c)(x_c - mu_c')

so that a chain's sums depend on that chain alone: chains run on several devices gather what
they gather on one (issue #34), and ``pooled`` combines them, in the order of the chains, into
each posterior's (G consecutive groups of k = chains / G: a run is one group of all its chains,
a calibration batch one group per simulation; Chan et al.'s pairwise formula with equal counts):

    mu = mean_c mu_c,   m2 = sum_c m2_c + n sum_c (mu_c - mu)(mu_c - mu),   over k n draws.

A part named in ``dense`` (shape (chains, d)) gathers the outer products instead, m2 (chains, d,
d): its covariance, for the dense metric.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from core.engine.adaptation.metric import is_dense

__all__ = ["Welford", "welford_fresh", "welford_update", "pooled"]


class Welford(NamedTuple):
    """count: steps gathered (scalar); mean, m2: per state part, (chains, ...) each."""

    count: tf.Tensor
    mean: list
    m2: list


def welford_fresh(parts, dtype, dense=()) -> Welford:
    """No observation yet, for state ``parts`` ((chains, ...) each); the parts whose index is in
    ``dense`` ((chains, d) each) gather their covariance."""
    return Welford(tf.constant(0.0, dtype), [tf.zeros(p.shape, dtype) for p in parts],
                   [tf.zeros([*p.shape, *(p.shape[1:] if i in dense else ())], dtype)
                    for i, p in enumerate(parts)])


def welford_update(acc: Welford, parts) -> Welford:
    """``acc`` with the state ``parts`` ((chains, ...) each) of one step added."""
    count, mean, m2 = acc
    n = count + 1.0
    new_mean, new_m2 = [], []
    for part, mu, q in zip(parts, mean, m2):
        mu_new = mu + (part - mu) / n
        new_mean.append(mu_new)
        if is_dense(q, part):        # dense: outer products
            new_m2.append(q + (part - mu)[..., :, None] * (part - mu_new)[..., None, :])
        else:
            new_m2.append(q + (part - mu) * (part - mu_new))
    return Welford(n, new_mean, new_m2)


def pooled(acc: Welford, groups: int) -> tuple[float, list, list]:
    """(draws per group, each group's mean (G, ...), each group's m2 (G, ...)) from the chains'
    sums, combined chain by chain in their order (module docstring)."""
    count, mean, m2 = acc
    n = float(count.numpy())
    means, m2s = [], []
    for mu, q in zip(mean, m2):
        k = int(mu.shape[0]) // groups
        dense = is_dense(q, mu)
        group_means, group_m2 = [], []
        for g in range(groups):
            rows = range(g * k, (g + 1) * k)
            centre = tf.add_n([mu[c] for c in rows]) / float(k)
            total = tf.add_n([q[c] for c in rows])
            for c in rows:
                dev = mu[c] - centre
                total = total + n * (dev[:, None] * dev[None, :] if dense else dev * dev)
            group_means.append(centre)
            group_m2.append(total)
        means.append(tf.stack(group_means))
        m2s.append(tf.stack(group_m2))
    return n * (int(mean[0].shape[0]) // groups), means, m2s
