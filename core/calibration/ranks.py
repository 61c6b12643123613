"""Ranks of the truth among posterior draws, and the coverage of central intervals read from them.

The rank of a simulation's true value among its M posterior draws is r = #{draws < truth},
in {0, ..., M}. If the posterior is the exact posterior of the data simulated from the
prior, the truth is one more draw from it, so r is uniform on {0..M} (Talts et al. 2018).
The draws are continuous, so ties have probability 0; ``ranks_of`` breaks the ties it
finds anyway (a quantity that is the same in every draw, such as the P(k) of a shell with
a stuck chain) at random, so that a tie never looks like a rank of 0.

Coverage. The central interval at level alpha is [d_(a), d_(M+1-a)] between the a-th and
(M+1-a)-th of the sorted draws, with a = round((1 - alpha)/2 (M + 1)). The truth lies in it
exactly when a <= r <= M - a, so coverage is read from the ranks alone, and a calibrated
pipeline covers with probability (M + 1 - 2a)/(M + 1) (``expected_coverage``: 0.505 and
0.901 for M = 100), within 1/(M + 1) of alpha.
"""

from __future__ import annotations

import numpy as np

__all__ = ["LEVELS", "ranks_of", "interval_ranks", "expected_coverage", "coverage"]

#: the nominal levels of the central intervals whose coverage is recorded
LEVELS = (0.5, 0.9)


def ranks_of(truth, draws, axis: int = 1, rng: np.random.Generator | None = None) -> np.ndarray:
    """#{draws < truth} along ``axis`` of ``draws``; ``truth`` has that axis removed. Ties
    (draws equal to the truth) count as below with probability 1/2 each (``rng``; a fixed
    generator by default, so ranks are reproducible)."""
    draws = np.asarray(draws)
    truth = np.expand_dims(np.asarray(truth), axis)
    below = np.sum(draws < truth, axis=axis)
    ties = np.sum(draws == truth, axis=axis)
    if np.any(ties):
        rng = rng or np.random.default_rng(0)
        below = below + rng.binomial(ties, 0.5)
    return below.astype(np.int64)


def interval_ranks(draws: int, level: float) -> tuple[int, int]:
    """(a, M - a): the ranks with the truth inside the central ``level`` interval."""
    a = int(round((1.0 - level) / 2.0 * (draws + 1)))
    a = min(max(a, 0), draws // 2)
    return a, draws - a


def expected_coverage(draws: int, level: float) -> float:
    """The coverage of a calibrated pipeline: (M + 1 - 2a) / (M + 1)."""
    a, b = interval_ranks(draws, level)
    return (b - a + 1) / (draws + 1.0)


def coverage(ranks, draws: int, levels=LEVELS, axis: int = 0) -> np.ndarray:
    """The fraction of simulations (along ``axis``) whose truth lies in each central interval:
    shape (len(levels), *the other axes); NaN where there are no simulations."""
    ranks = np.asarray(ranks)
    out = []
    for level in levels:
        a, b = interval_ranks(draws, level)
        inside = (ranks >= a) & (ranks <= b)
        n = ranks.shape[axis]
        out.append(inside.mean(axis=axis) if n else np.full(np.delete(ranks.shape, axis), np.nan))
    return np.stack(out)
