"""Tests for core.field.grid: wavevectors against independent numpy constructions."""

import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.field.grid import Grid

shapes = st.tuples(*[st.integers(1, 9)] * 3)
lengths = st.floats(0.1, 1e3, allow_nan=False, allow_infinity=False)
boxes = st.tuples(lengths, lengths, lengths)


def reference_k_full(shape, box):
    """|k| on the full grid written out from fftfreq: k_i = 2 pi m / L_i."""
    axes = [2 * np.pi * np.fft.fftfreq(n) * n / length for n, length in zip(shape, box)]
    kx, ky, kz = np.meshgrid(*axes, indexing="ij")
    return np.sqrt(kx**2 + ky**2 + kz**2), (kx, ky, kz)


def reference_k_half(shape, box):
    n0, n1, n2 = shape
    a0 = 2 * np.pi * np.fft.fftfreq(n0) * n0 / box[0]
    a1 = 2 * np.pi * np.fft.fftfreq(n1) * n1 / box[1]
    a2 = 2 * np.pi * np.arange(n2 // 2 + 1) / box[2]      # rfftfreq(n2) * n2 = 0, 1, ...
    kx, ky, kz = np.meshgrid(a0, a1, a2, indexing="ij")
    return np.sqrt(kx**2 + ky**2 + kz**2), (kx, ky, kz)


def test_import_pulls_in_no_tensorflow_or_qt():
    code = ("import sys, core.field.grid, core.field.power_spectrum, core.field.power_estimator, core.field.synthetic;"
            "bad = [m for m in ('tensorflow', 'PySide6', 'pyqtgraph', 'vispy') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    repo_root = pathlib.Path(__file__).resolve().parents[3]
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=repo_root)
    assert result.returncode == 0, result.stdout + result.stderr


@settings(max_examples=60, deadline=None)
@given(shape=shapes, box=boxes)
def test_wavevectors_match_fftfreq(shape, box):
    grid = Grid(shape, box)
    k_full, (kx, ky, kz) = reference_k_full(shape, box)
    np.testing.assert_allclose(grid.k_magnitude_full(), k_full, rtol=1e-12, atol=0)
    full_axes = np.broadcast_arrays(*grid.k_axes_full())
    for mine, ref in zip(full_axes, (kx, ky, kz)):
        np.testing.assert_allclose(mine, ref, rtol=1e-12, atol=0)
    k_half, (hx, hy, hz) = reference_k_half(shape, box)
    assert grid.half_shape == k_half.shape
    np.testing.assert_allclose(grid.k_magnitude_half(), k_half, rtol=1e-12, atol=0)
    half_axes = np.broadcast_arrays(*grid.k_axes_half())
    for mine, ref in zip(half_axes, (hx, hy, hz)):
        np.testing.assert_allclose(mine, ref, rtol=1e-12, atol=0)
    # the half grid is exactly the first n2 // 2 + 1 columns of the full grid
    np.testing.assert_allclose(k_half, k_full[..., : shape[2] // 2 + 1], rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(shape=shapes, box=boxes)
def test_multiplicity_counts_every_full_mode_once(shape, box):
    grid = Grid(shape, box)
    w = grid.multiplicity_half()
    assert w.shape == grid.half_shape
    assert w.sum() == grid.n_cells
    # independent: a half-grid mode stands for itself and, unless it is its own
    # conjugate along the last axis, for the full-grid mode at -k.
    n2 = shape[2]
    cols = np.arange(n2 // 2 + 1)
    self_conjugate = (cols == 0) | (2 * cols == n2)
    np.testing.assert_array_equal(grid.multiplicity_half(broadcast=False),
                                  np.where(self_conjugate, 1.0, 2.0))
    # weighted sums over the half grid equal full-grid sums of an even function
    k_full, _ = reference_k_full(shape, box)
    np.testing.assert_allclose((w * np.cos(grid.k_magnitude_half())).sum(),
                               np.cos(k_full).sum(), rtol=1e-10, atol=1e-10)


def test_sizes_and_characteristic_wavenumbers():
    grid = Grid((16, 8, 6), (100.0, 50.0, 30.0), unit="Mpc/h")
    assert grid.n_cells == 768
    assert grid.volume == pytest.approx(150000.0)
    assert grid.cell_size == pytest.approx((6.25, 6.25, 5.0))
    assert grid.k_fundamental == pytest.approx((2 * math.pi / 100, 2 * math.pi / 50,
                                                2 * math.pi / 30))
    assert grid.k_nyquist == pytest.approx((math.pi * 16 / 100, math.pi * 8 / 50,
                                            math.pi * 6 / 30))
    # Nyquist = pi / cell size
    assert grid.k_nyquist == pytest.approx(tuple(math.pi / d for d in grid.cell_size))
    assert grid.n_independent_modes == 767
    assert grid.k_max == pytest.approx(grid.k_magnitude_full().max())
    assert Grid((4, 4, 4), 2.0).box_size == (2.0, 2.0, 2.0)


@pytest.mark.parametrize("shape, fragment", [
    ((0, 32, 32), "(0, 32, 32)"),
    ((32, -1, 32), "-1"),
    ((32, 32), "(32, 32)"),
    ((32, 32.5, 32), "32.5"),
    ((32, True, 32), "True"),
    ("abc", "abc"),
])
def test_bad_shape_names_the_value(shape, fragment):
    with pytest.raises(ValueError, match="grid shape") as info:
        Grid(shape, 1.0)
    assert fragment in str(info.value)


@pytest.mark.parametrize("box, fragment", [
    (0.0, "0.0"),
    ((1.0, -2.0, 1.0), "-2.0"),
    ((1.0, float("inf"), 1.0), "inf"),
    (float("nan"), "nan"),
    ((1.0, 2.0), "(1.0, 2.0)"),
    ("big", "big"),
])
def test_bad_box_size_names_the_value(box, fragment):
    with pytest.raises(ValueError, match="box size") as info:
        Grid((4, 4, 4), box)
    assert fragment in str(info.value)


def test_grid_is_frozen_and_hashable():
    grid = Grid([4, 4, 4], [1, 2, 3])
    assert grid.shape == (4, 4, 4) and grid.box_size == (1.0, 2.0, 3.0)
    with pytest.raises(AttributeError):
        grid.shape = (2, 2, 2)
    assert hash(grid) == hash(Grid((4, 4, 4), (1.0, 2.0, 3.0)))


def test_default_shells_cubic_are_centred_on_multiples_of_kf():
    grid = Grid((8, 8, 8), 2 * math.pi)       # k_f = 1
    edges = grid.shell_edges()
    np.testing.assert_allclose(edges, np.arange(8) + 0.5)
    assert edges[-1] > grid.k_max
    index = grid.shell_index_full(edges)
    k_full, _ = reference_k_full(grid.shape, grid.box_size)
    expected = np.floor(k_full - 0.5).astype(int)
    expected[k_full == 0] = -1
    np.testing.assert_array_equal(index, expected)
    assert (index >= 0).sum() == grid.n_cells - 1       # every mode but k = 0


@settings(max_examples=40, deadline=None)
@given(shape=shapes, box=boxes)
def test_default_shells_hold_every_nonzero_mode(shape, box):
    grid = Grid(shape, box)
    index = grid.shell_index_half(grid.shell_edges())
    w = grid.multiplicity_half()
    k = grid.k_magnitude_half()
    assert np.all(index[k == 0] == -1)
    assert w[index >= 0].sum() == grid.n_cells - 1


def test_explicit_shells_and_closed_last_edge():
    grid = Grid((6, 6, 6), 2 * math.pi)
    edges = grid.shell_edges(n_bins=3, kmin=1.0, kmax=3.0)
    np.testing.assert_allclose(edges, [1.0, 5 / 3, 7 / 3, 3.0])
    k = grid.k_magnitude_half()
    index = grid.shell_index_half(edges)
    assert np.all(index[np.isclose(k, 3.0)] == 2)         # |k| = 3 on the last edge
    assert np.all(index[k < 1.0] == -1) and np.all(index[k > 3.0] == -1)
    assert np.all(index[np.isclose(k, 1.0)] == 0)
    with pytest.raises(ValueError, match="strictly increasing"):
        grid.shell_index_half([1.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="kmax"):
        grid.shell_edges(kmin=2.0, kmax=1.0)
    with pytest.raises(ValueError, match="n_bins 0"):
        grid.shell_edges(n_bins=0)


def test_memory_estimate_by_hand():
    grid = Grid((16, 16, 16), 1.0)
    n, h = 4096, 16 * 16 * 9
    est = grid.memory_estimate(chains=2, dtype="float32", n_field_draws_kept=10)
    assert est.field_state == 2 * 2 * n * 4
    assert est.momentum == 2 * n * 4
    assert est.gradient == 2 * 2 * n * 4
    assert est.half_spectrum == 2 * 2 * h * 8
    assert est.fft_workspace == 2 * h * 8
    assert est.running_stats == 2 * n * 4
    assert est.kept_draws == 10 * 2 * n * 4
    assert est.total == sum(v for key, v in est.as_dict().items() if key != "total")
    doubled = grid.memory_estimate(chains=2, dtype="float64", n_field_draws_kept=10)
    assert doubled.total == 2 * est.total
    assert "total" in est.describe()
    with pytest.raises(ValueError, match="int8"):
        grid.memory_estimate(dtype="int8")
    with pytest.raises(ValueError, match="chains 0"):
        grid.memory_estimate(chains=0)


@settings(max_examples=40, deadline=None)
@given(shape=st.tuples(*[st.integers(2, 9)] * 3), box=boxes)
def test_default_shells_are_never_empty(shape, box):
    grid = Grid(shape, box)
    edges = grid.shell_edges()
    index = grid.shell_index_half(edges)
    counts = np.bincount(index[index >= 0], minlength=len(edges) - 1)
    assert np.all(counts > 0)
