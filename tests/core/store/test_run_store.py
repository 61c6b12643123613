"""RunReader owns the store's layout: what it reads back is what the writer appended, and
the stored config comes back with the folder its paths are relative to."""

from __future__ import annotations

import sys

import numpy as np

from core.run.messages import STAT_NAMES
from core.store.run_store import ChunkRecord, RunReader, RunStoreWriter, stored_run_config

CONFIG = '[model]\nkind = "integral"\n[data]\npath = "s.csv"\n'
GRID = (3, 4, 5)


def write_store(run_dir, config_dir=None, chains=2, warmup=3, draws=4, kept=(0, 2), num_samples=None):
    rng = np.random.default_rng(1)
    writer = RunStoreWriter.create(
        run_dir, config_text=CONFIG, config_dir=config_dir, model_kind="field", chains=chains,
        num_warmup=warmup, num_samples=num_samples or draws, thin=2, param_names=["A"],
        observed={"data": (["x", "y", "z"], rng.normal(size=GRID))}, grid_shape=GRID,
        k_centres=[0.1, 0.2], k_counts=[6, 12])

    def series(n):
        return {name: rng.normal(size=(chains, n)).astype(
            bool if name == "diverging" else np.int32 if name == "n_steps" else np.float64)
            for name in STAT_NAMES}

    fields = rng.normal(size=(chains, len(kept), *GRID)).astype(np.float32)
    powers = rng.uniform(size=(chains, len(kept), 2))
    mean, std = rng.normal(size=GRID), rng.uniform(size=GRID)
    record = ChunkRecord(warmup_stats=series(warmup), stats=series(draws),
                         warmup_params={"A": rng.normal(size=(chains, warmup))},
                         params={"A": rng.normal(size=(chains, draws))}, fields=fields,
                         powers=powers, field_draw_index=np.asarray(kept), moments=(mean, std, 8))
    writer.append(record, {"warmup_draws": warmup, "draws": draws, "field_draws": len(kept),
                           "chunks": 1})
    return record


def test_the_reader_gives_back_what_was_appended(tmp_path):
    record = write_store(tmp_path / "run")
    reader = RunReader(tmp_path / "run")
    assert reader.grid_shape == GRID
    k, counts = reader.shells()
    np.testing.assert_array_equal(k, [0.1, 0.2])
    np.testing.assert_array_equal(counts, [6, 12])
    np.testing.assert_array_equal(reader.stat("lp", warmup=True), record.warmup_stats["lp"])
    np.testing.assert_array_equal(reader.stat("lp", False, 1, 3), record.stats["lp"][:, 1:3])
    np.testing.assert_array_equal(reader.param("A", False, 2), record.params["A"][:, 2:])
    assert reader.stat("lp", False, 0, 99).shape == (2, 4)          # never past progress
    np.testing.assert_array_equal(reader.field_draw_steps(), [0, 2])
    np.testing.assert_array_equal(reader.field_draw(1), record.fields[:, 1])
    np.testing.assert_array_equal(reader.power_draw(0), record.powers[:, 0])
    np.testing.assert_array_equal(reader.voxel_trace((2, 1, 4), 0, 2), record.fields[:, :, 2, 1, 4])
    assert reader.moment_count == 8
    assert set(reader.observed_data()) == {"data"}


def test_the_stored_config_and_its_folder(tmp_path):
    write_store(tmp_path / "run", config_dir=tmp_path / "configs")
    stored = RunReader(tmp_path / "run").stored_config
    assert (stored.text, stored.base_dir) == (CONFIG, str(tmp_path / "configs"))
    assert stored.source == f"{tmp_path / 'run'} (stored config)"
    config, text = stored_run_config(tmp_path / "run")
    assert text == CONFIG and config.data_path == tmp_path / "configs" / "s.csv"
    # a store without a config folder resolves paths from the run directory
    write_store(tmp_path / "bare")
    config, _ = stored_run_config(tmp_path / "bare")
    assert config.data_path == tmp_path / "bare" / "s.csv"


_PROGRESS = {"warmup_draws": 3, "draws": 4, "field_draws": 2, "chunks": 1}


def test_a_store_from_before_trajectory_length_reads_and_resumes(tmp_path, monkeypatch):
    """Stores written before a statistic joined STAT_NAMES (trajectory_length, #12) are not
    damaged: the reader gives NaN for it, and resume adds the array and goes on."""
    from core.store import run_store

    older = tuple(name for name in STAT_NAMES if name not in run_store.LATER_STATS)
    with monkeypatch.context() as old_code:
        old_code.setattr(run_store, "STAT_NAMES", older)
        old_code.setattr(sys.modules[__name__], "STAT_NAMES", older)
        record = write_store(tmp_path / "run", draws=4, num_samples=6)
    assert not (tmp_path / "run" / "run.zarr" / "sample_stats" / "trajectory_length").exists()
    reader = RunReader(tmp_path / "run")
    np.testing.assert_array_equal(reader.stat("lp"), record.stats["lp"])
    assert reader.stat("trajectory_length").shape == (2, 4)
    assert np.isnan(reader.stat("trajectory_length")).all()
    assert reader.stat("trajectory_length", True, 1, 3).shape == (2, 2)
    # resume: the array is added (NaN before), the new draws carry the statistic
    progress = _PROGRESS
    writer = RunStoreWriter.reopen(tmp_path / "run", progress)
    stats = {name: np.ones((2, 2), bool if name == "diverging" else np.int32 if name == "n_steps" else float)
             for name in STAT_NAMES}
    writer.append(ChunkRecord(warmup_stats={k: v[:, :0] for k, v in stats.items()}, stats=stats,
                              warmup_params={"A": np.zeros((2, 0))}, params={"A": np.zeros((2, 2))}),
                  {**progress, "draws": 6, "chunks": 2})
    length = RunReader(tmp_path / "run").stat("trajectory_length")
    assert np.isnan(length[:, :4]).all() and (length[:, 4:] == 1).all()
