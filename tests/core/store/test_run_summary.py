"""The run summary's diagnostics table (pooled and per chain) on stores written here.

No TensorFlow: the stores are written with RunStoreWriter from synthetic chains, so every
expected number is computed from arrays this test made (ArviZ for single-chain ESS, a
hand-written split-halves R-hat, plain sums for gradient counts and divergences).
"""

from __future__ import annotations

import csv
import io
import math
import warnings

import numpy as np
import pytest
from scipy import stats

from core.field.grid import Grid
from core.field.power_estimator import measure_power
from core.store import diagnostics as dg
from core.store.run_store import ChunkRecord, RunReader, RunStoreWriter
from core.store.run_summary import TABLE_COLUMNS, format_cell, needs_attention, summarize_run

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

CHAINS, WARMUP, SAMPLES, CHUNK = 3, 10, 120, 30
GRID = (6, 5, 4)


def synthetic_run(seed=0):
    """Draws of a 3-chain run: 'index' AR(1) with chain 2 shifted (R-hat > 1.01),
    'amplitude' independent, a few divergences in chain 1, random leapfrog counts."""
    rng = np.random.default_rng(seed)
    total = WARMUP + SAMPLES
    x = np.empty((CHAINS, total))
    x[:, 0] = rng.normal(size=CHAINS)
    for t in range(1, total):
        x[:, t] = 0.7 * x[:, t - 1] + math.sqrt(1 - 0.49) * rng.normal(size=CHAINS)
    x[2] += 1.5
    stats_ = {"lp": rng.normal(size=(CHAINS, total)),
              "acceptance_rate": rng.uniform(0.5, 1.0, (CHAINS, total)),
              "step_size": np.linspace(0.3, 0.1, total)[None].repeat(CHAINS, 0) * np.array([[1.0], [0.9], [1.1]]),
              "energy_error": rng.normal(size=(CHAINS, total)),
              "diverging": np.zeros((CHAINS, total), bool),
              "n_steps": rng.integers(3, 30, (CHAINS, total)).astype(np.int32),
              "grad_norm": rng.uniform(1, 2, (CHAINS, total)),
              "trajectory_length": rng.uniform(1, 3, (CHAINS, total))}
    stats_["diverging"][1, [WARMUP + 5, WARMUP + 40, WARMUP + 99]] = True
    stats_["diverging"][0, 2] = True                  # a warmup divergence: not counted
    params = {"index": x, "amplitude": np.exp(rng.normal(size=(CHAINS, total)))}
    return stats_, params


def write_store(run_dir, timing=True, seed=0, chunks=None):
    stats_, params = synthetic_run(seed)
    grid = Grid(GRID, 30.0)
    ref = measure_power(np.zeros(GRID), grid)
    writer = RunStoreWriter.create(run_dir, config_text="", model_kind="field", chains=CHAINS,
                                   num_warmup=WARMUP, num_samples=SAMPLES, thin=2,
                                   param_names=list(params), observed={}, grid_shape=GRID,
                                   k_centres=ref.k, k_counts=ref.counts)
    rng = np.random.default_rng(seed + 1)
    progress = {"warmup_draws": 0, "draws": 0, "field_draws": 0, "chunks": 0}
    seconds = {"warmup_seconds": 0.0, "sampling_seconds": 0.0}
    bounds = [(0, WARMUP)] + [(g, min(g + CHUNK, WARMUP + SAMPLES)) for g in range(WARMUP, WARMUP + SAMPLES, CHUNK)]
    for i, (a, b) in enumerate(bounds[:chunks]):
        warm = a < WARMUP
        sel = slice(a, b)
        empty = {k: v[:, :0] for k, v in stats_.items()}
        empty_p = {k: v[:, :0] for k, v in params.items()}
        record = ChunkRecord(warmup_stats={k: v[:, sel] for k, v in stats_.items()} if warm else empty,
                             stats=empty if warm else {k: v[:, sel] for k, v in stats_.items()},
                             warmup_params={k: v[:, sel] for k, v in params.items()} if warm else empty_p,
                             params=empty_p if warm else {k: v[:, sel] for k, v in params.items()})
        if not warm:
            n_f = (b - a) // 2
            fields = rng.normal(size=(CHAINS, n_f, *GRID)).astype(np.float32)
            record.fields = fields
            record.powers = measure_power(fields, grid).power
            record.field_draw_index = np.arange(a - WARMUP, b - WARMUP, 2)
            progress["field_draws"] += n_f
        key = "warmup_draws" if warm else "draws"
        progress[key] += b - a
        progress["chunks"] += 1
        seconds["warmup_seconds" if warm else "sampling_seconds"] += 0.25 * (b - a) / 10
        writer.append(record, dict(progress), dict(seconds) if timing else None)
    writer.set_status("finished")
    return stats_, params, seconds


def split_halves_rhat(x):
    """max(bulk, folded) R-hat of one chain's two halves, from the formula (scipy ranks)."""
    n = len(x) // 2
    halves = np.stack([x[:n], x[len(x) - n:]])

    def r(y):
        ranks = stats.rankdata(y, method="average").reshape(y.shape)
        z = stats.norm.ppf((ranks - 0.375) / (y.size + 0.25))
        w = z.var(axis=1, ddof=1).mean()
        b = n * z.mean(axis=1).var(ddof=1)
        return math.sqrt((b / w + n - 1) / n)

    return max(r(halves), r(np.abs(halves - np.median(halves))))


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("summary") / "run"
    stats_, params, seconds = write_store(run_dir)
    return run_dir, stats_, params, seconds


def test_table_rows_pooled_and_per_chain_match_independent_references(stored):
    run_dir, stats_, params, seconds = stored
    summary = summarize_run(run_dir)
    table = summary.table()
    quantities = ["index", "amplitude", "lp"]
    assert [(r.scope, r.quantity) for r in table] == [
        (scope, q) for scope in ["pooled", "chain 0", "chain 1", "chain 2"] for q in quantities]
    post = slice(WARMUP, None)
    draws = {**{k: v[:, post] for k, v in params.items()}, "lp": stats_["lp"][:, post]}
    n_steps = stats_["n_steps"][:, post]
    assert summary.sampling_seconds == pytest.approx(seconds["sampling_seconds"], rel=1e-12)
    assert summary.warmup_seconds == pytest.approx(seconds["warmup_seconds"], rel=1e-12)
    rows = {(r.scope, r.quantity): r for r in table}
    for q in quantities:
        x = draws[q]
        pooled = rows[("pooled", q)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ess = float(az.ess(x, method="bulk"))
            assert pooled.r_hat == pytest.approx(float(az.rhat(x, method="rank")), rel=1e-10)
            assert pooled.ess_tail == pytest.approx(float(az.ess(x, method="tail")), rel=1e-10)
        assert pooled.ess_bulk == pytest.approx(ess, rel=1e-10)
        assert pooled.ess_bulk_per_second == pytest.approx(ess / seconds["sampling_seconds"], rel=1e-10)
        assert pooled.ess_bulk_per_gradient == pytest.approx(ess / n_steps.sum(), rel=1e-10)
        assert pooled.divergences == 3
        assert pooled.acceptance == pytest.approx(stats_["acceptance_rate"][:, post].mean(), rel=1e-12)
        assert pooled.step_size == pytest.approx(stats_["step_size"][:, -1].mean(), rel=1e-12)
        assert pooled.mean == pytest.approx(x.mean(), rel=1e-12)
        for c in range(CHAINS):
            row = rows[(f"chain {c}", q)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ess_c = float(az.ess(x[c][None], method="bulk"))
                assert row.ess_tail == pytest.approx(float(az.ess(x[c][None], method="tail")), rel=1e-10)
            assert row.ess_bulk == pytest.approx(ess_c, rel=1e-10)
            assert row.r_hat == pytest.approx(split_halves_rhat(x[c]), rel=1e-10)
            assert row.ess_bulk_per_second == pytest.approx(ess_c / seconds["sampling_seconds"], rel=1e-10)
            assert row.ess_bulk_per_gradient == pytest.approx(ess_c / n_steps[c].sum(), rel=1e-10)
            assert row.divergences == int(stats_["diverging"][c, post].sum())
            assert row.acceptance == pytest.approx(stats_["acceptance_rate"][c, post].mean(), rel=1e-12)
            assert row.step_size == stats_["step_size"][c, -1]
            assert row.mean == pytest.approx(x[c].mean(), rel=1e-12)
    # the shifted chain shows in the pooled R-hat, the divergences in chain 1
    assert needs_attention("r_hat", rows[("pooled", "index")].r_hat)
    assert not needs_attention("r_hat", rows[("pooled", "amplitude")].r_hat)
    assert needs_attention("divergences", rows[("chain 1", "lp")].divergences)
    assert not needs_attention("divergences", rows[("chain 0", "lp")].divergences)


def test_csv_and_text_carry_the_same_numbers(stored):
    run_dir = stored[0]
    summary = summarize_run(run_dir)
    parsed = list(csv.DictReader(io.StringIO(summary.table_csv())))
    assert tuple(parsed[0]) == TABLE_COLUMNS
    for row, line in zip(summary.table(), parsed, strict=True):
        for col in TABLE_COLUMNS:
            value = getattr(row, col)
            if col in ("scope", "quantity"):
                assert line[col] == value
            elif col == "divergences":
                assert int(line[col]) == value
            else:
                assert float(line[col]) == value or (math.isnan(value) and line[col] == "nan")
    text = summary.text()
    assert summary.table_text() in text
    assert "chain 2" in text and format_cell("r_hat", summary.table()[0].r_hat) in text
    assert summary.shell_k is not None and len(summary.shell_k) == len(summary.shells.rhat)


def test_shell_diagnostics_and_k_come_from_the_stored_powers(stored):
    summary = summarize_run(stored[0], field_diagnostics=False)
    k, _, power = RunReader(stored[0]).powers()
    expected = dg.shell_diagnostics(power)
    np.testing.assert_array_equal(summary.shell_k, k)
    for name in ("rhat", "ess_bulk", "ess_tail"):
        np.testing.assert_array_equal(getattr(summary.shells, name), getattr(expected, name))
    assert summary.field is None
    assert summarize_run(stored[0]).field is not None        # the CLI's default reads the fields


def test_store_without_timing_or_draws(tmp_path):
    write_store(tmp_path / "old", timing=False)
    summary = summarize_run(tmp_path / "old")
    assert math.isnan(summary.sampling_seconds)
    assert all(math.isnan(r.ess_bulk_per_second) for r in summary.table())
    assert all(r.ess_bulk_per_gradient > 0 for r in summary.table())
    assert "not recorded" in summary.text()
    write_store(tmp_path / "warm", chunks=1)                 # warmup only
    warm = summarize_run(tmp_path / "warm")
    assert warm.rows == [] and warm.table() == [] and warm.shells is None
    assert warm.table_csv().strip() == ",".join(TABLE_COLUMNS)
    assert "status: finished" in warm.text()


def test_format_cell_and_attention_rules():
    assert format_cell("r_hat", 1.23456) == "1.235" and format_cell("r_hat", float("nan")) == "nan"
    assert format_cell("ess_bulk", 99.6) == "100" and format_cell("divergences", 3) == "3"
    assert format_cell("ess_bulk_per_gradient", 0.012345) == "0.0123"
    assert needs_attention("r_hat", 1.0101) and not needs_attention("r_hat", 1.01)
    assert not needs_attention("r_hat", float("nan"))
    assert needs_attention("ess_tail", 99.9) and not needs_attention("ess_bulk", 100.0)
    assert needs_attention("divergences", 1) and not needs_attention("divergences", 0)
    assert not needs_attention("acceptance", 0.1)
