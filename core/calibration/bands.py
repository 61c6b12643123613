"""Simultaneous ECDF bands for rank uniformity (Sailynoja, Burkner and Vehtari 2022) and the
p-value of uniformity that goes with them.

N simulations each give a rank r in {0, ..., M} (the truth among M draws). If the pipeline
is calibrated, every rank value has probability 1/(M+1). The ECDF of the ranks is read at
K rank boundaries b_1 < ... < b_K in 1..M (all M of them, or K = ``MAX_POINTS`` evenly
spread), at z_i = b_i/(M+1):

    F(z_i) = #{r < b_i} / N,      C_i = N F(z_i) ~ Binomial(N, z_i)   under uniformity,

and the counts form the uniform order-statistics process of continuous ranks: given C_{i-1},
the increment C_i - C_{i-1} is Binomial(N - C_{i-1}, (z_i - z_{i-1}) / (1 - z_{i-1})). So the
probability that the whole ECDF stays inside given pointwise intervals is computed exactly by
propagating the distribution of C_i from point to point (``inside_probability``: O(K N^2)
time; the K transition matrices are kept for N <= 400, 50 MiB at most).

The band (Sailynoja et al.'s "optimisation" construction): at each point the interval of
counts whose two-sided pointwise tail probability

    p_i(k) = 2 min(P(C_i <= k), P(C_i >= k))

exceeds gamma, with gamma the largest value for which the probability of the whole ECDF
staying inside is at least 1 - alpha (found by bisection). Pointwise, the band is wider
than a binomial 95 % interval: it holds 95 % of uniform ECDFs over all K points at once.

The p-value. The statistic is T = min_i p_i(C_i), the pointwise tail probability of the
ECDF's most extreme point; p = P(T <= T_observed) under uniformity = 1 - inside_probability
(gamma = T_observed). So an ECDF leaves the 1 - alpha band exactly when its p-value is
below alpha (up to the discreteness of the counts): the plot and the number say the same.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["MAX_POINTS", "EcdfBand", "rank_boundaries", "evaluation_points", "ecdf_counts", "inside_probability", "simultaneous_band",
           "uniformity_pvalue"]


#: the most rank boundaries the ECDF is read at (Sailynoja et al. use K <= N; 50 resolve
#: every departure a few hundred simulations can show, at a bounded cost)
MAX_POINTS = 50


def rank_boundaries(draws: int) -> np.ndarray:
    """The boundaries b_i (ints in 1..M) where the ECDF of ranks in {0..M} is read."""
    if draws < 1:
        raise ValueError(f"draws: at least 1 needed, got {draws}")
    if draws <= MAX_POINTS:
        return np.arange(1, draws + 1)
    return np.unique(np.round(np.arange(1, MAX_POINTS + 1) * (draws + 1) / (MAX_POINTS + 1)).astype(int))


def evaluation_points(draws: int) -> np.ndarray:
    """z_i = b_i / (M + 1): the uniform CDF at each rank boundary."""
    return rank_boundaries(draws) / (draws + 1.0)


def ecdf_counts(ranks, draws: int) -> np.ndarray:
    """C_i = #{r < b_i}: the counts of ranks below each rank boundary."""
    ranks = np.asarray(ranks, np.int64).reshape(-1)
    if ranks.size and (ranks.min() < 0 or ranks.max() > draws):
        raise ValueError(f"ranks must lie in 0..{draws}, got {ranks.min()}..{ranks.max()}")
    below = np.concatenate([[0], np.cumsum(np.bincount(ranks, minlength=draws + 1))])
    return below[rank_boundaries(draws)]


def _transition(n: int, z_prev: float, z: float) -> np.ndarray:
    """T[c, c'] = P(C_i = c' | C_{i-1} = c): c' - c ~ Binomial(N - c, (z - z_prev) / (1 - z_prev))."""
    c = np.arange(n + 1)
    step = c[None, :] - c[:, None]
    p = (z - z_prev) / (1.0 - z_prev)
    return np.where(step >= 0, stats.binom.pmf(np.maximum(step, 0), (n - c)[:, None], p), 0.0)


@functools.lru_cache(maxsize=8)
def _kept_transitions(n: int, draws: int) -> tuple[np.ndarray, ...]:
    z = np.concatenate([[0.0], evaluation_points(draws)])
    return tuple(_transition(n, z[i - 1], z[i]) for i in range(1, len(z)))


def _transitions(n: int, draws: int):
    if n <= 400:
        return _kept_transitions(n, draws)
    z = np.concatenate([[0.0], evaluation_points(draws)])
    return (_transition(n, z[i - 1], z[i]) for i in range(1, len(z)))


@functools.lru_cache(maxsize=64)
def _pointwise_tails(n: int, draws: int) -> np.ndarray:
    """p_i(k) = min(1, 2 min(P(C_i <= k), P(C_i >= k))) for every point i and count k: (K, N+1)."""
    z = evaluation_points(draws)[:, None]
    k = np.arange(n + 1)[None, :]
    below = stats.binom.cdf(k, n, z)
    above = stats.binom.sf(k - 1, n, z)
    return np.minimum(1.0, 2.0 * np.minimum(below, above))


def inside_probability(n: int, draws: int, gamma: float) -> float:
    """P(p_i(C_i) > gamma at every point i) for N = ``n`` uniform ranks in {0..``draws``}."""
    tails = _pointwise_tails(n, draws)
    prob = np.zeros(n + 1)
    prob[0] = 1.0
    for t, allowed in zip(_transitions(n, draws), tails > gamma):
        prob = (prob @ t) * allowed
    return float(prob.sum())


@dataclass(frozen=True)
class EcdfBand:
    """The simultaneous band of the ECDF of ``n`` ranks in {0..``draws``} at level ``level``.

    ``z``: the evaluation points; ``lower``, ``upper``: the band of F(z) (fractions, not
    counts); ``gamma``: the pointwise tail probability it is built from; ``coverage``: its
    exact simultaneous coverage (at least ``level``; above it by the counts' discreteness)."""

    n: int
    draws: int
    level: float
    gamma: float
    coverage: float
    z: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


@functools.lru_cache(maxsize=64)
def simultaneous_band(n: int, draws: int, level: float = 0.95) -> EcdfBand:
    """The ``level`` simultaneous ECDF band for ``n`` ranks in {0..``draws``} (module doc)."""
    if n < 1:
        raise ValueError(f"n: at least one rank needed, got {n}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    # inside_probability falls as gamma grows; bisect log gamma for the largest gamma whose
    # band still holds ``level`` of uniform ECDFs
    lo, hi = math.log(1e-300), 0.0
    if inside_probability(n, draws, math.exp(lo)) < level:
        lo = -math.inf
    else:
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            if inside_probability(n, draws, math.exp(mid)) >= level:
                lo = mid
            else:
                hi = mid
    gamma = math.exp(lo) if lo > -math.inf else 0.0
    tails = _pointwise_tails(n, draws)
    allowed = tails > gamma
    counts = np.arange(n + 1)
    lower = np.where(allowed, counts, n + 1).min(axis=1) / n
    upper = np.where(allowed, counts, -1).max(axis=1) / n
    return EcdfBand(n=n, draws=draws, level=level, gamma=gamma,
                    coverage=inside_probability(n, draws, gamma), z=evaluation_points(draws),
                    lower=lower, upper=upper)


def uniformity_pvalue(ranks, draws: int) -> float:
    """P(T <= T_observed) for uniform ranks, T the smallest pointwise tail probability of the
    ECDF (module doc); 1.0 for no ranks."""
    ranks = np.asarray(ranks).reshape(-1)
    n = ranks.size
    if n == 0:
        return 1.0
    counts = ecdf_counts(ranks, draws)
    tails = _pointwise_tails(n, draws)
    t_obs = float(tails[np.arange(len(counts)), counts].min())
    # P(T <= t) = 1 - P(every p_i > t); the band's own "inside" computation at gamma = t
    return float(min(1.0, max(0.0, 1.0 - inside_probability(n, draws, t_obs))))
