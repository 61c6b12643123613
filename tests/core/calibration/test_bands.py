"""The ECDF bands, the p-value of uniformity, ranks, coverage and the verdict, against
independent checks: exhaustive enumeration, Monte Carlo over uniform ranks, sorted draws."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from core.calibration import bands
from core.calibration.ranks import coverage, expected_coverage, ranks_of
from core.calibration.verdict import judge


def brute_inside(n, draws, gamma):
    """P(every pointwise tail > gamma) by enumerating every tuple of n ranks in 0..draws."""
    tails = bands._pointwise_tails(n, draws)
    total = 0
    for ranks in itertools.product(range(draws + 1), repeat=n):
        counts = bands.ecdf_counts(ranks, draws)
        total += np.all(tails[np.arange(len(counts)), counts] > gamma)
    return total / (draws + 1) ** n


@pytest.mark.parametrize("n, draws, gamma", [(3, 2, 0.3), (4, 3, 0.1), (5, 2, 0.5), (4, 4, 0.05)])
def test_inside_probability_is_exact(n, draws, gamma):
    assert bands.inside_probability(n, draws, gamma) == pytest.approx(brute_inside(n, draws, gamma), abs=1e-12)


def test_band_holds_95_percent_of_uniform_ecdfs_at_once():
    rng = np.random.default_rng(1)
    for n, draws in ((40, 20), (60, 99)):
        band = bands.simultaneous_band(n, draws)
        assert 0.95 <= band.coverage < 0.96
        ranks = rng.integers(0, draws + 1, size=(4000, n))
        ecdf = np.array([bands.ecdf_counts(r, draws) for r in ranks]) / n
        inside = np.all((ecdf >= band.lower) & (ecdf <= band.upper), axis=1)
        # Monte Carlo sd at 4000 replicates: 0.0035
        assert abs(inside.mean() - band.coverage) < 0.012
        # simultaneous: wider than the pointwise 95 % binomial interval somewhere
        z = band.z
        sd = np.sqrt(z * (1 - z) / n)
        assert np.any(band.upper - band.lower > 2 * 1.96 * sd)


def test_pvalue_is_uniform_for_uniform_ranks_and_agrees_with_the_band():
    rng = np.random.default_rng(2)
    n, draws = 40, 20
    band = bands.simultaneous_band(n, draws)
    ps, outside = [], []
    for _ in range(400):
        r = rng.integers(0, draws + 1, size=n)
        ps.append(bands.uniformity_pvalue(r, draws))
        ecdf = bands.ecdf_counts(r, draws) / n
        outside.append(not np.all((ecdf >= band.lower) & (ecdf <= band.upper)))
    ps, outside = np.array(ps), np.array(outside)
    assert 0.02 < np.mean(ps < 0.05) < 0.09
    assert 0.14 < np.mean(ps < 0.2) < 0.27
    # leaving the 95 % band is p < 0.05 (p <= gamma's level, up to the counts' discreteness)
    assert np.array_equal(outside, ps < 1 - band.coverage + 1e-12)


def test_pvalue_detects_skewed_and_narrow_rank_distributions():
    rng = np.random.default_rng(3)
    draws = 20
    shifted = np.minimum(rng.integers(0, draws + 1, 60) + 6, draws)        # truths above the draws
    u_shaped = np.where(rng.random(60) < 0.5, rng.integers(0, 4, 60), rng.integers(17, 21, 60))
    assert bands.uniformity_pvalue(shifted, draws) < 1e-4
    assert bands.uniformity_pvalue(u_shaped, draws) < 1e-4


def test_many_draws_read_at_a_bounded_number_of_boundaries():
    b = bands.rank_boundaries(999)
    assert len(b) <= bands.MAX_POINTS and b[0] >= 1 and b[-1] <= 999 and np.all(np.diff(b) > 0)
    r = np.random.default_rng(4).integers(0, 1000, 30)
    assert np.array_equal(bands.ecdf_counts(r, 999), [(r < bi).sum() for bi in b])


def test_ranks_and_coverage_agree_with_sorted_draws():
    rng = np.random.default_rng(5)
    draws = 39
    samples = rng.normal(size=(500, draws))
    truth = rng.normal(size=500)
    ranks = ranks_of(truth, samples)
    assert np.array_equal(ranks, (samples < truth[:, None]).sum(axis=1))
    for j, level in enumerate((0.5, 0.9)):
        a = int(round((1 - level) / 2 * (draws + 1)))
        ordered = np.sort(samples, axis=1)
        inside = (truth >= ordered[:, a - 1]) & (truth <= ordered[:, draws - a])     # [d_(a), d_(M+1-a)]
        assert coverage(ranks, draws)[j] == pytest.approx(inside.mean())
        # truth and draws from one distribution: coverage near the exact expectation
        assert abs(inside.mean() - expected_coverage(draws, level)) < 0.07
    # ties are split at random, not counted as all below or all above
    tied = ranks_of(np.zeros(2000), np.zeros((2000, 10)))
    assert 4.7 < tied.mean() < 5.3


def test_verdict_names_the_failing_quantity_and_holds_the_family():
    rng = np.random.default_rng(6)
    draws, n, q = 20, 50, 12
    ranks = rng.integers(0, draws + 1, size=(n, q))
    ranks[:, 3] = np.minimum(ranks[:, 3] + 8, draws)
    names = [f"q{j}" for j in range(q)]
    verdict = judge(ranks, names, draws)
    assert verdict.failed == ["q3"] and not verdict.passed
    assert verdict.line().startswith("FAIL: q3 (p ")
    ok = judge(np.delete(ranks, 3, axis=1), names[:3] + names[4:], draws)
    assert ok.passed and ok.line().startswith("PASS")
    assert "expected" in ok.table() and "cover 90%" in ok.table()
