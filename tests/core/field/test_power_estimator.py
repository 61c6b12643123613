"""Tests for core.field.power_estimator against independent references.

References used here, none of them the estimator itself:
* powerbox (a peer package). Its default Fourier convention (a, b) = (1, 1) is the
  cosmological one with angular k, and with ``vol_normalised_power=True`` (default)
  its ``pk`` is the same P(k) (unit^3) as ours: powerbox's own ``variance`` equals
  (1 / V) sum_k P(k) over the full grid, which is checked below. (The numpy
  convention (a, b) = (0, 2 pi) would use ordinary frequencies, k / 2 pi.)
* white noise of unit variance per cell, whose power is flat, P = V / N;
* single cosine modes, whose power is known in closed form;
* shell averages of P(|k|) computed here from numpy's fftfreq on the full grid.
"""

import math

import numpy as np
import powerbox
import pytest

from core.field.grid import Grid
from core.field.power_estimator import cross_power, expected_shell_power, measure_power
from core.field.power_spectrum import PowerLaw, PowerLawCutoff
from core.field.synthetic import gaussian_random_field


def full_grid_k(grid):
    axes = [2 * np.pi * np.fft.fftfreq(n, d=length / n)
            for n, length in zip(grid.shape, grid.box_size)]
    kx, ky, kz = np.meshgrid(*axes, indexing="ij")
    return np.sqrt(kx**2 + ky**2 + kz**2)


def reference_shells(grid, edges, p_of_k):
    """Mode count, mean |k|, mean P and exact sd per shell, from the full grid."""
    k = full_grid_k(grid).ravel()
    n_bins = len(edges) - 1
    counts, k_mean, p_mean, sd = (np.zeros(n_bins) for _ in range(4))
    for i in range(n_bins):
        upper = (k <= edges[i + 1]) if i == n_bins - 1 else (k < edges[i + 1])
        sel = (k >= edges[i]) & upper & (k > 0)
        counts[i] = sel.sum()
        if counts[i]:
            p = p_of_k(k[sel])
            k_mean[i], p_mean[i] = k[sel].mean(), p.mean()
            sd[i] = np.sqrt(2 * np.sum(p**2)) / counts[i]
    return counts, k_mean, p_mean, sd


def chi_square_check(mean_measured, expected, sd, n_fields):
    z = (mean_measured - expected) / (sd / np.sqrt(n_fields))
    dof = z.size
    assert np.max(np.abs(z)) < 5.0, z
    assert np.sum(z**2) < dof + 5 * np.sqrt(2 * dof), (np.sum(z**2), dof)
    return z


def test_powerbox_convention_variance_is_sum_of_power_over_volume():
    grid = Grid((16, 12, 10), (50.0, 40.0, 30.0))
    spectrum = PowerLawCutoff(30.0, -1.0, 0.1, 1.0)
    pb = powerbox.PowerBox(shape=grid.shape, pk=spectrum, size=grid.box_size, seed=0)
    k = full_grid_k(grid)
    assert pb.variance == pytest.approx(spectrum(k).sum() / grid.volume, rel=1e-10)


@pytest.mark.parametrize("shape, box", [
    ((32, 32, 32), (100.0, 100.0, 100.0)),
    ((24, 20, 15), (90.0, 60.0, 50.0)),          # non-cubic, odd last axis
])
def test_matches_powerbox_fields(shape, box):
    grid = Grid(shape, box)
    spectrum = PowerLawCutoff(amplitude=200.0, index=-1.2, k_pivot=0.1, cutoff_scale=3.0)
    n_fields = 6
    pb = powerbox.PowerBox(shape=grid.shape, pk=spectrum, size=grid.box_size, seed=123)
    fields = np.stack([pb.delta_x() for _ in range(n_fields)])
    measured = measure_power(fields, grid)
    counts, k_mean, p_mean, sd = reference_shells(grid, measured.edges, spectrum)
    np.testing.assert_array_equal(measured.counts, counts)
    ok = counts > 0
    np.testing.assert_allclose(measured.k[ok], k_mean[ok], rtol=1e-12)
    assert measured.power.shape == (n_fields, len(counts))
    chi_square_check(measured.power.mean(axis=0)[ok], p_mean[ok], sd[ok], n_fields)


def test_matches_synthetic_fields():
    grid = Grid((24, 24, 24), 60.0)
    spectrum = PowerLaw(amplitude=5.0, index=-2.0, k_pivot=0.5)
    rng = np.random.default_rng(11)
    n_fields = 6
    fields = np.stack([gaussian_random_field(grid, spectrum, rng) for _ in range(n_fields)])
    measured = measure_power(fields, grid)
    counts, _, p_mean, sd = reference_shells(grid, measured.edges, spectrum)
    chi_square_check(measured.power.mean(axis=0), p_mean, sd, n_fields)


def test_white_noise_mean_and_relative_error():
    """Unit white noise has P = V / N flat; its shell estimates scatter by sqrt(2 / c)."""
    grid = Grid((8, 8, 6), (4.0, 4.0, 3.0))
    rng = np.random.default_rng(5)
    n_fields = 600
    fields = rng.standard_normal((n_fields,) + grid.shape)
    measured = measure_power(fields, grid)
    p_true = grid.volume / grid.n_cells
    ratio = measured.power / p_true
    np.testing.assert_allclose(measured.relative_error, np.sqrt(2 / measured.counts))
    mean_sd = measured.relative_error / np.sqrt(n_fields)
    assert np.all(np.abs(ratio.mean(axis=0) - 1) < 5 * mean_sd)
    scatter = ratio.std(axis=0, ddof=1)
    # sd of a sample sd over 600 draws is ~ 3 %, more for the skewed small shells
    np.testing.assert_allclose(scatter, measured.relative_error, rtol=0.2)


@pytest.mark.parametrize("mode", [(2, 0, 0), (1, 2, 3), (0, 0, 4), (4, 0, 4), (3, -1, 0)])
def test_single_cosine_mode_has_exact_power(mode):
    """delta = A cos(k_m . x + phi): a mode in the interior of the half grid puts
    |X|^2 = (A N / 2)^2 on k_m and on -k_m; a self-conjugate mode (every index 0 or
    n_i / 2) gives X = A N cos(phi) on one full-grid mode."""
    grid = Grid((8, 8, 8), (3.0, 3.0, 3.0))
    amplitude, phase = 1.7, 0.4
    n = np.array(grid.shape)
    idx = np.meshgrid(*[np.arange(s) for s in grid.shape], indexing="ij")
    arg = sum(2 * np.pi * m * j / s for m, j, s in zip(mode, idx, grid.shape))
    field = amplitude * np.cos(arg + phase) + 3.0        # the mean must not matter
    self_conjugate = all((2 * m) % s == 0 for m, s in zip(mode, n))
    if self_conjugate:
        total = grid.volume / grid.n_cells**2 * (amplitude * grid.n_cells * math.cos(phase)) ** 2
    else:
        total = 2 * grid.volume / grid.n_cells**2 * (amplitude * grid.n_cells / 2) ** 2
    measured = measure_power(field, grid)
    k_mode = 2 * np.pi * np.linalg.norm(((np.array(mode) + n // 2) % n) - n // 2) / 3.0
    shell = np.searchsorted(measured.edges, k_mode, side="right") - 1
    # sum over shells of count * P recovers sum_k (V / N^2) |X_k|^2
    np.testing.assert_allclose(measured.power[shell] * measured.counts[shell], total,
                               rtol=1e-10)
    others = np.delete(measured.power, shell)
    assert np.all(np.abs(others) < 1e-20 * total)


def test_batch_equals_one_by_one_and_custom_edges():
    grid = Grid((10, 8, 6), (5.0, 4.0, 3.0))
    rng = np.random.default_rng(1)
    fields = rng.standard_normal((2, 3) + grid.shape)
    edges = np.array([0.5, 2.0, 4.0, 9.0])
    batch = measure_power(fields, grid, edges)
    assert batch.power.shape == (2, 3, 3)
    for i in range(2):
        for j in range(3):
            single = measure_power(fields[i, j], grid, edges)
            np.testing.assert_allclose(batch.power[i, j], single.power, rtol=1e-12)
    counts, k_mean, _, _ = reference_shells(grid, edges, np.ones_like)
    np.testing.assert_array_equal(batch.counts, counts)
    np.testing.assert_allclose(batch.k, k_mean, rtol=1e-12)


def test_empty_shells_are_nan_not_errors():
    grid = Grid((4, 4, 4), 2 * np.pi)
    measured = measure_power(np.ones(grid.shape), grid, edges=[0.1, 0.5, 1.5])
    assert measured.counts[0] == 0 and np.isnan(measured.power[0])
    assert np.isnan(measured.k[0]) and measured.relative_error[0] == np.inf
    assert measured.power[1] == 0.0


def test_expected_shell_power_matches_reference():
    grid = Grid((12, 10, 9), (30.0, 25.0, 20.0))
    spectrum = PowerLaw(2.0, -1.5, 0.3)
    expected = expected_shell_power(spectrum, grid)
    counts, k_mean, p_mean, sd = reference_shells(grid, expected.edges, spectrum)
    np.testing.assert_array_equal(expected.counts, counts)
    np.testing.assert_allclose(expected.power, p_mean, rtol=1e-12)
    np.testing.assert_allclose(expected.sd, sd, rtol=1e-12)


def test_cross_power():
    grid = Grid((16, 16, 16), 20.0)
    rng = np.random.default_rng(3)
    spectrum = PowerLaw(1.0, -1.0, 1.0)
    a = gaussian_random_field(grid, spectrum, rng)
    b = gaussian_random_field(grid, spectrum, rng)
    same = cross_power(a, a, grid)
    np.testing.assert_allclose(same.power, measure_power(a, grid).power, rtol=1e-12)
    np.testing.assert_allclose(same.correlation, 1.0, rtol=1e-12)
    np.testing.assert_allclose(cross_power(a, -2 * a, grid).correlation, -1.0, rtol=1e-12)
    independent = cross_power(a, b, grid)
    # r of independent fields: sd ~ 1 / sqrt(c / 2) per shell
    assert np.all(np.abs(independent.correlation) < 5 / np.sqrt(independent.counts / 2))
    batched = cross_power(np.stack([a, b]), a, grid)
    np.testing.assert_allclose(batched.power[1], independent.power, rtol=1e-12)


def test_bad_fields_are_value_errors():
    grid = Grid((4, 4, 4), 1.0)
    with pytest.raises(ValueError, match=r"\(4, 4, 5\)"):
        measure_power(np.zeros((4, 4, 5)), grid)
    bad = np.zeros(grid.shape)
    bad[1, 2, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        measure_power(bad, grid)
    with pytest.raises(ValueError, match="complex"):
        measure_power(np.zeros(grid.shape, complex), grid)
