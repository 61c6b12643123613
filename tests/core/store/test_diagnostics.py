"""Tests for core.store.diagnostics against ArviZ 0.23 (the peer library) and known answers."""

import contextlib
import csv
import io
import math
import pathlib
import subprocess
import sys
import time
import tracemalloc
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.store import diagnostics as diag

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)     # ArviZ 0.23 announces its refactor
    import arviz as az

RTOL = 1e-10
DRAWS = (4, 5, 6, 7, 8, 9, 10, 11, 20, 51, 100, 201)


# ----------------------------------------------------------------------------- helpers


def ar1(rng, n_chain, n_draw, rho, dtype=np.float64):
    """Stationary AR(1) chains with unit marginal variance."""
    noise = rng.standard_normal((n_chain, n_draw))
    x = np.empty((n_chain, n_draw))
    x[:, 0] = noise[:, 0]
    scale = math.sqrt(1 - rho**2)
    for t in range(1, n_draw):
        x[:, t] = rho * x[:, t - 1] + scale * noise[:, t]
    return x.astype(dtype)


def make_chains(rng, kind, n_chain, n_draw):
    if kind == "ar1":
        return ar1(rng, n_chain, n_draw, rng.uniform(-0.7, 0.95))
    if kind == "shifted":          # R-hat > 1: chains disagree about the mean
        return ar1(rng, n_chain, n_draw, 0.5) + rng.normal(0, 2, (n_chain, 1))
    if kind == "cauchy":
        return rng.standard_cauchy((n_chain, n_draw))
    if kind == "ties":             # discrete draws: tied ranks everywhere
        return np.round(rng.normal(size=(n_chain, n_draw)) * 2)
    if kind == "float32":          # ranked and folded in float32, as ArviZ does
        return ar1(rng, n_chain, n_draw, 0.3, np.float32) * np.float32(3.7)
    if kind == "scaled":           # a field voxel far from unit scale
        return 1e-6 * ar1(rng, n_chain, n_draw, 0.6) + 1e3
    raise ValueError(kind)


KINDS = ("ar1", "shifted", "cauchy", "ties", "float32", "scaled")


def reference(x):
    """ArviZ's diagnostics of one (chain, draw) array (its warnings silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"rhat": float(az.rhat(x, method="rank")),
                "ess_bulk": float(az.ess(x, method="bulk")),
                "ess_tail": float(az.ess(x, method="tail")),
                "ess_mean": float(az.ess(x, method="mean")),
                "mcse_mean": float(az.mcse(x, method="mean"))}


def ours(x, **kwargs):
    return {"rhat": diag.rhat(x, **kwargs), "ess_bulk": diag.ess_bulk(x, **kwargs),
            "ess_tail": diag.ess_tail(x, **kwargs), "ess_mean": diag.ess_mean(x, **kwargs),
            "mcse_mean": diag.mcse_mean(x, **kwargs)}


def relative_error(mine, ref):
    """0 when both are nan (or equal), inf when only one is nan."""
    mine, ref = np.asarray(mine, dtype=float), np.asarray(ref, dtype=float)
    both_nan = np.isnan(mine) & np.isnan(ref)
    one_nan = np.isnan(mine) ^ np.isnan(ref)
    with np.errstate(all="ignore"):
        err = np.where(mine == ref, 0.0, np.abs(mine - ref) / np.abs(ref))
    err = np.where(both_nan, 0.0, np.where(one_nan, np.inf, err))
    return float(np.max(err)) if err.size else 0.0


@contextlib.contextmanager
def no_warnings():
    """Turn every warning into an error: the edge cases must be silent."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


# ----------------------------------------------------------------------------- import


def test_import_pulls_in_no_tensorflow_or_arviz():
    code = ("import sys, core.store.diagnostics;"
            "bad = [m for m in ('tensorflow', 'arviz', 'xarray', 'pandas', 'PySide6', "
            "'pyqtgraph', 'vispy') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    repo_root = pathlib.Path(__file__).resolve().parents[3]
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=repo_root)
    assert result.returncode == 0, result.stdout + result.stderr


# ----------------------------------------------------------------------------- agreement


@pytest.mark.parametrize("kind", KINDS)
def test_agrees_with_arviz(kind):
    rng = np.random.default_rng(sum(map(ord, kind)))
    worst = {}
    for case in range(24):
        n_chain = 1 + case % 4
        n_draw = DRAWS[case % len(DRAWS)] if case < 12 else int(rng.integers(4, 300))
        x = make_chains(rng, kind, n_chain, n_draw)
        mine, ref = ours(x), reference(x)
        for name in mine:
            if kind == "float32" and name == "mcse_mean":
                continue                  # ArviZ takes this sd in float32, we in float64
            err = relative_error(mine[name], ref[name])
            worst[name] = max(worst.get(name, 0.0), err)
            assert err <= RTOL, (name, n_chain, n_draw, mine[name], ref[name])
    assert set(worst) >= {"rhat", "ess_bulk", "ess_tail", "ess_mean"}


@settings(max_examples=40, deadline=None)
@given(n_chain=st.integers(1, 4), n_draw=st.integers(0, 40), levels=st.integers(1, 6),
       seed=st.integers(0, 2**32 - 1))
def test_agrees_with_arviz_on_discrete_draws(n_chain, n_draw, levels, seed):
    # Few distinct values: ties, constant chains and constant split halves all turn up.
    x = np.random.default_rng(seed).integers(0, levels, (n_chain, n_draw)).astype(float)
    mine, ref = ours(x), reference(x)
    for name in mine:
        assert relative_error(mine[name], ref[name]) <= RTOL, (name, x, mine, ref)


def test_vectorised_columns_equal_scalar_and_arviz():
    rng = np.random.default_rng(7)
    n_chain, n_draw = 3, 61
    columns = [make_chains(rng, kind, n_chain, n_draw).astype(np.float64)
               for kind in KINDS for _ in range(2)]
    x = np.stack(columns, axis=-1).reshape(n_chain, n_draw, 3, 4)
    vector = ours(x)
    for name, values in vector.items():
        assert values.shape == (3, 4) and values.dtype == np.float64
    for j, column in enumerate(columns):
        scalar, ref = ours(column), reference(column)
        for name in scalar:
            assert relative_error(vector[name].ravel()[j], scalar[name]) <= 1e-13, name
            assert relative_error(vector[name].ravel()[j], ref[name]) <= RTOL, name
    both = diag.convergence(x)
    np.testing.assert_array_equal(both.rhat, vector["rhat"])
    np.testing.assert_array_equal(both.ess_bulk, vector["ess_bulk"])
    np.testing.assert_array_equal(both.ess_tail, vector["ess_tail"])


# ----------------------------------------------------------------------------- known answers


def test_iid_normal_draws_are_fully_effective():
    x = np.random.default_rng(11).standard_normal((4, 1000))
    assert 0.85 < diag.ess_bulk(x) / x.size < 1.15
    assert 0.85 < diag.ess_tail(x) / x.size < 1.15
    assert 0.85 < diag.ess_mean(x) / x.size < 1.15
    assert abs(diag.rhat(x) - 1) < 0.01
    assert diag.mcse_mean(x) == pytest.approx(1 / math.sqrt(x.size), rel=0.1)


@pytest.mark.parametrize("rho", [0.5, 0.8, -0.3])
def test_ar1_bulk_ess_is_n_times_one_minus_rho_over_one_plus_rho(rho):
    x = ar1(np.random.default_rng(12), 4, 5000, rho)
    expected = x.size * (1 - rho) / (1 + rho)
    assert diag.ess_bulk(x) == pytest.approx(expected, rel=0.15)
    assert diag.ess_mean(x) == pytest.approx(expected, rel=0.15)
    assert abs(diag.rhat(x) - 1) < 0.01


def test_chains_with_shifted_means_have_large_rhat():
    x = np.random.default_rng(13).standard_normal((4, 500)) + np.array([[0], [0], [0], [3]])
    assert diag.rhat(x) > 1.2
    # A difference in scale only is caught by the folded (tail) R-hat.
    y = np.random.default_rng(14).standard_normal((4, 500)) * np.array([[1], [1], [1], [6]])
    assert diag.rhat(y) > 1.05


# ----------------------------------------------------------------------------- edge cases


def test_constant_chains_match_arviz():
    x = np.full((3, 50), 2.5)
    with no_warnings():
        mine = ours(x)
    ref = reference(x)
    assert math.isnan(mine["rhat"]) and math.isnan(ref["rhat"])
    assert mine["ess_bulk"] == ref["ess_bulk"] == 3 * 50        # ArviZ counts them as iid
    for name in mine:
        assert relative_error(mine[name], ref[name]) == 0, name


def test_single_chain():
    x = np.random.default_rng(15).standard_normal((1, 400))
    mine, ref = ours(x), reference(x)
    assert math.isnan(mine["rhat"]) and math.isnan(ref["rhat"])   # ArviZ wants 2 chains
    for name in ("ess_bulk", "ess_tail", "ess_mean", "mcse_mean"):
        assert relative_error(mine[name], ref[name]) <= RTOL
    assert abs(diag.rhat(x, split_single_chain=True) - 1) < 0.02
    trend = x + np.linspace(0, 4, 400)
    assert diag.rhat(trend, split_single_chain=True) > 1.5
    # split_single_chain changes nothing when there are 2 chains or more.
    y = np.random.default_rng(16).standard_normal((2, 100))
    assert diag.rhat(y, split_single_chain=True) == diag.rhat(y)
    # A 1-D array is one chain, as in ArviZ.
    assert diag.ess_bulk(x[0]) == diag.ess_bulk(x)


@pytest.mark.parametrize("n_draw", [0, 1, 2, 3])
def test_fewer_than_four_draws_give_nan(n_draw):
    x = np.random.default_rng(n_draw).standard_normal((2, n_draw))
    with no_warnings():
        mine = ours(x)
        vector = ours(np.zeros((2, n_draw, 3)))
    ref = reference(x) if n_draw else dict.fromkeys(mine, math.nan)
    for name in mine:
        assert math.isnan(mine[name]) and math.isnan(ref[name]), name
        assert np.isnan(vector[name]).all() and vector[name].shape == (3,)


def test_nonfinite_draws_give_nan_for_that_quantity_only():
    rng = np.random.default_rng(17)
    x = rng.standard_normal((2, 80, 5))
    x[1, 10, 1] = np.nan
    x[0, 3, 2] = np.inf
    x[1, 70, 3] = -np.inf
    x[:, :, 4] = 7.0                                            # constant
    with no_warnings():
        mine = ours(x)
    for name, values in mine.items():
        assert np.isnan(values[1:4]).all(), name
        assert np.isfinite(values[0]), name
        assert relative_error(values[0], ours(x[:, :, 0])[name]) <= 1e-13
    assert np.isnan(mine["rhat"][4]) and mine["ess_bulk"][4] == 160
    # ArviZ agrees for NaN; for inf it returns finite rank-based values (documented).
    ref_nan = reference(x[:, :, 1])
    assert all(math.isnan(v) for v in ref_nan.values())


def test_empty_and_degenerate_shapes():
    assert diag.rhat(np.zeros((2, 10, 0))).shape == (0,)
    assert math.isnan(diag.ess_bulk(np.zeros((0, 10))))
    with pytest.raises(ValueError, match="real numbers"):
        diag.rhat(np.ones((2, 10), dtype=complex))


# ----------------------------------------------------------------------------- field path


def test_blocked_field_path_equals_unblocked():
    rng = np.random.default_rng(18)
    base = rng.standard_normal((2, 101, 6, 7, 8)).cumsum(axis=1) * 0.1 + rng.standard_normal(
        (2, 101, 6, 7, 8))
    huge = 1 << 40
    one = diag.convergence(base, memory_budget=huge)
    for budget in (1, 200_000, 1_000_000):          # 1 voxel, a few voxels, ragged blocks
        blocked = diag.convergence(base, memory_budget=budget)
        for a, b in zip(blocked, one):
            np.testing.assert_array_equal(a, b)
    mean_blocked = diag.ess_mean(base, memory_budget=1)
    np.testing.assert_array_equal(mean_blocked, diag.ess_mean(base, memory_budget=huge))
    # A non-contiguous input (grid axes reversed) is copied slab by slab.
    swapped = base.transpose(0, 1, 4, 3, 2)
    assert not swapped.flags.c_contiguous
    for a, b in zip(diag.convergence(swapped, memory_budget=200_000), one):
        np.testing.assert_allclose(a, b.transpose(2, 1, 0), rtol=1e-13)
    # Each voxel is its own scalar computation.
    voxel = base[:, :, 2, 3, 4]
    assert relative_error(one.ess_bulk[2, 3, 4], diag.ess_bulk(voxel)) <= 1e-13
    assert relative_error(one.rhat[2, 3, 4], reference(voxel)["rhat"]) <= RTOL


def test_memory_stays_within_budget():
    x = np.random.default_rng(19).standard_normal((4, 200, 16, 16, 16)).astype(np.float32)
    budget = 8 * 2**20
    tracemalloc.start()
    try:
        diag.convergence(x, memory_budget=budget)
        diag.mcse_mean(x, memory_budget=budget)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < budget < x.nbytes


def test_field_ess_summary():
    rng = np.random.default_rng(20)
    field = rng.standard_normal((2, 100, 8, 8, 8)).astype(np.float32)
    field[:, :, 1, 2, 3] = ar1(rng, 2, 100, 0.9)               # a slowly mixing voxel
    field[1, :, 4, 4, 4] += 3                                   # chains disagree here
    field[0, 5, 7, 7, 7] = np.nan
    summary = diag.field_ess_summary(field)
    ess = diag.ess_bulk(field)
    r = diag.rhat(field)
    good = ~np.isnan(ess)
    assert summary["n_voxels"] == 512 and summary["n_nan_ess"] == summary["n_nan_rhat"] == 1
    assert summary["ess_bulk_min"] == np.nanmin(ess)
    assert summary["ess_bulk_p05"] == np.percentile(ess[good], 5)
    assert summary["ess_bulk_median"] == np.median(ess[good])
    assert summary["ess_bulk_argmin"] == np.unravel_index(np.nanargmin(ess), (8, 8, 8))
    assert summary["ess_bulk_argmin"] in {(1, 2, 3), (4, 4, 4)}
    assert summary["rhat_max"] == np.nanmax(r) and summary["rhat_argmax"] == (4, 4, 4)
    one_chain = diag.field_ess_summary(field[:1])
    assert math.isnan(one_chain["rhat_max"]) and one_chain["rhat_argmax"] is None
    with pytest.raises(ValueError, match="field_draws"):
        diag.field_ess_summary(field[:, :, 0, 0, 0])


def test_field_32_cubed_runs_in_seconds():
    field = np.random.default_rng(21).standard_normal((2, 100, 32, 32, 32)).astype(np.float32)
    start = time.perf_counter()
    summary = diag.field_ess_summary(field)
    elapsed = time.perf_counter() - start
    print(f"field_ess_summary (2, 100, 32^3) float32: {elapsed:.2f} s")
    assert summary["n_nan_ess"] == 0 and 150 < summary["ess_bulk_median"] < 250
    assert 1.0 < summary["rhat_max"] < 1.2
    assert elapsed < 20            # a guard against pathologies, not a benchmark


def test_shell_diagnostics_is_per_shell_convergence():
    rng = np.random.default_rng(22)
    power = np.exp(rng.standard_normal((3, 80, 5)))
    shells = diag.shell_diagnostics(power)
    for i in range(5):
        ref = reference(power[:, :, i])
        assert relative_error(shells.rhat[i], ref["rhat"]) <= RTOL
        assert relative_error(shells.ess_bulk[i], ref["ess_bulk"]) <= RTOL
        assert relative_error(shells.ess_tail[i], ref["ess_tail"]) <= RTOL
    with pytest.raises(ValueError, match="n_shells"):
        diag.shell_diagnostics(power[:, :, 0])


# ----------------------------------------------------------------------------- summaries


def test_summarize_matches_numpy_and_arviz():
    rng = np.random.default_rng(23)
    draws = {"amplitude": ar1(rng, 2, 100, 0.4) + 5,
             "slope": rng.standard_normal((3, 50, 2)),
             "flag": rng.integers(0, 2, (2, 40))}
    rows = diag.summarize(draws)
    assert [r.name for r in rows] == ["amplitude", "slope[0]", "slope[1]", "flag"]
    columns = [draws["amplitude"], draws["slope"][..., 0], draws["slope"][..., 1],
               draws["flag"].astype(float)]
    for row, x in zip(rows, columns):
        ref = reference(x)
        assert row.mean == pytest.approx(x.mean(), rel=1e-13)
        assert row.sd == pytest.approx(x.std(ddof=1), rel=1e-13)
        q5, q50, q95 = np.quantile(x, [0.05, 0.5, 0.95])
        assert (row.q5, row.q50, row.q95) == pytest.approx((q5, q50, q95), rel=1e-13)
        assert row.chain_means == pytest.approx(tuple(x.mean(axis=1)), rel=1e-13)
        for name in ("rhat", "ess_bulk", "ess_tail", "mcse_mean"):
            assert relative_error(getattr(row, name), ref[name]) <= RTOL, (row.name, name)


def test_summarize_bad_input_names_the_key():
    with pytest.raises(ValueError, match="'theta'"):
        diag.summarize({"theta": np.ones(10)})
    with pytest.raises(ValueError, match="'label'"):
        diag.summarize({"label": np.array([["a", "b"]])})


def test_summarize_edge_cases_do_not_warn():
    with no_warnings():
        rows = diag.summarize({"empty": np.zeros((2, 0)), "one": np.ones((1, 1)),
                               "nan": np.full((2, 10), np.nan), "short": np.ones((2, 3))})
    empty, one, nan, short = rows
    assert math.isnan(empty.mean) and len(empty.chain_means) == 2
    assert all(math.isnan(c) for c in empty.chain_means)
    assert one.mean == 1 and math.isnan(one.sd) and math.isnan(one.rhat)
    assert math.isnan(nan.mean) and math.isnan(nan.ess_bulk)
    assert short.mean == 1 and math.isnan(short.ess_bulk)


def test_summary_table_text_is_aligned():
    rng = np.random.default_rng(24)
    rows = diag.summarize({"a": rng.standard_normal((2, 60)),
                           "long_parameter_name": 1e5 * rng.standard_normal((2, 60)),
                           "c": np.full((2, 60), np.nan)})
    text = diag.summary_table_text(rows)
    lines = text.splitlines()
    assert len(lines) == 4 and lines[0].split()[:2] == ["name", "mean"]
    header = lines[0]
    for column in ("mean", "ess_bulk", "r_hat"):
        end = header.index(column) + len(column)
        for line in lines[1:]:               # right-aligned: every value ends where its header does
            assert line[end - 1] != " " and (end == len(line) or line[end] == " "), (column, line)
    assert "nan" in lines[3]
    assert diag.summary_table_text([]).splitlines()[0].startswith("name")


def test_summary_csv_round_trips():
    rng = np.random.default_rng(25)
    rows = diag.summarize({"a": rng.standard_normal((2, 60)), "b": rng.standard_normal((3, 60))})
    parsed = list(csv.DictReader(io.StringIO(diag.summary_csv(rows))))
    assert [p["name"] for p in parsed] == ["a", "b"]
    for row, p in zip(rows, parsed):
        assert float(p["mean"]) == row.mean and float(p["r_hat"]) == row.rhat
        assert float(p["ess_tail"]) == row.ess_tail and float(p["q95"]) == row.q95
        assert float(p["chain_0_mean"]) == row.chain_means[0]
    assert parsed[0]["chain_2_mean"] == ""
    assert float(parsed[1]["chain_2_mean"]) == rows[1].chain_means[2]


# ----------------------------------------------------------------------------- helpers


def test_efficiency_helpers():
    assert diag.ess_per_gradient(400.0, 8000) == 0.05
    assert diag.ess_per_second(400.0, 20.0) == 20.0
    np.testing.assert_array_equal(diag.ess_per_second(np.array([10.0, 20.0]), 10), [1.0, 2.0])
    with no_warnings():
        assert math.isnan(diag.ess_per_gradient(400.0, 0))
        assert math.isnan(diag.ess_per_second(400.0, -1.0))
        assert math.isnan(diag.ess_per_second(400.0, math.nan))


def test_count_divergences():
    flags = np.zeros((3, 100), dtype=bool)
    flags[0, [3, 50]] = True
    flags[2, 99] = True
    result = diag.count_divergences(flags)
    assert result == diag.Divergences(3, (2, 0, 1), 0.01)
    assert diag.count_divergences(flags[0]).per_chain == (2,)
    assert diag.count_divergences(np.zeros((2, 0), dtype=bool)).total == 0
    with pytest.raises(ValueError, match="diverging"):
        diag.count_divergences(np.zeros((2, 3, 4)))
