"""calibration.zarr: written batch by batch, read by xarray and by the reader, resumable, and
every damage ends in one CalibrationStoreError naming the file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

from core.calibration import CalibrationReader, CalibrationStoreError, CalibrationWriter, PlanError, make_plan
from core.calibration.store import STORE_NAME, plan_differences

NAMES = ["index", "loglik", "power_k00", "voxel_1_1_1"]


def rows(plan, b, rng):
    n = plan.kept(b)
    return {"rank": rng.integers(0, plan.draws + 1, (n, len(NAMES))), "truth": rng.normal(size=(n, len(NAMES))),
            "posterior_mean": rng.normal(size=(n, len(NAMES))), "posterior_sd": rng.random((n, len(NAMES))),
            "divergences": np.zeros(n, np.int32), "acceptance": np.full(n, 0.8),
            "simulation": np.arange(b * plan.batch_size, b * plan.batch_size + n),
            "voxel_rank": rng.integers(0, plan.draws + 1, (n, 3, 3, 3))}


def new_store(tmp_path, plan):
    return CalibrationWriter.create(tmp_path, config_text="[model]\n", config_dir=tmp_path, simulate_text="",
                                    plan=plan, quantities=NAMES, model_kind="field", grid_shape=(3, 3, 3),
                                    k=[0.1, 0.2], voxels=[(1, 1, 1)])


def test_batches_append_and_xarray_reads_the_layout(tmp_path):
    plan = make_plan(simulations=10, draws=20, chains=2, num_samples=50, seed=1, batch_size=4)
    assert plan.batches == 3 and plan.kept(2) == 2 and plan.thin == 5
    writer = new_store(tmp_path, plan)
    rng = np.random.default_rng(0)
    written = [rows(plan, b, rng) for b in range(plan.batches)]
    for b, r in enumerate(written):
        writer.append(r, b + 1, seconds=1.0 + b)
    writer.set_status("finished")
    ds = xr.open_zarr(tmp_path / STORE_NAME)
    assert ds["rank"].dims == ("simulation", "quantity") and list(ds["quantity"].values) == NAMES
    assert ds["coverage"].dims == ("level", "quantity") and list(ds["level"].values) == [0.5, 0.9]
    assert ds.attrs["draws_per_simulation"] == 20 and ds.attrs["simulations"] == 10 and ds.attrs["config"]
    ranks = np.concatenate([r["rank"] for r in written])
    assert np.array_equal(ds["rank"].values, ranks)
    reader = CalibrationReader(tmp_path)
    assert np.array_equal(reader.ranks(), ranks) and reader.status == "finished"
    assert np.allclose(ds["coverage"].values, reader.coverage())
    assert reader.voxel_ranks().shape == (10, 3, 3, 3)


def test_reopen_cuts_rows_a_killed_writer_left_beyond_progress(tmp_path):
    plan = make_plan(simulations=8, draws=10, chains=2, num_samples=50, seed=1, batch_size=4)
    writer = new_store(tmp_path, plan)
    rng = np.random.default_rng(1)
    writer.append(rows(plan, 0, rng), 1, 1.0)
    # a batch's arrays appended, then killed before its progress was published
    for name in ("rank", "truth", "simulation"):
        writer.root[name].append(np.asarray(rows(plan, 1, rng)[name]), axis=0)
    reader = CalibrationReader(tmp_path)
    assert reader.simulations_done == 4 and reader.ranks().shape == (4, len(NAMES))
    writer = CalibrationWriter.reopen(tmp_path)
    assert writer.root["rank"].shape[0] == 4 and writer.progress == {"batches": 1, "simulations": 4}


def test_a_different_request_is_named(tmp_path):
    plan = make_plan(simulations=8, draws=10, chains=2, num_samples=50, seed=1, batch_size=4)
    new_store(tmp_path, plan)
    attrs = CalibrationReader(tmp_path).attrs
    assert plan_differences(attrs, "[model]\n", "", plan) == []
    other = make_plan(simulations=8, draws=20, chains=2, num_samples=50, seed=1, batch_size=4)
    assert any("--draws" in d for d in plan_differences(attrs, "[model]\n", "", other))
    assert plan_differences(attrs, "[other]\n", "", plan) == ["the config"]


@pytest.mark.parametrize("damage, needle", [
    (lambda p: (p / ".zattrs").write_text("{"), ".zattrs"),
    (lambda p: _edit(p, draws_per_simulation="ten"), "draws_per_simulation"),
    (lambda p: _edit(p, progress={"batches": 1, "simulations": 99}), "progress"),
    (lambda p: __import__("shutil").rmtree(p / "rank"), "'rank' is missing"),
    (lambda p: (p / "rank" / "0.0").write_bytes(b"garbage"), "rank"),
])
def test_damage_is_one_error_naming_the_file(tmp_path, damage, needle):
    plan = make_plan(simulations=8, draws=10, chains=2, num_samples=50, seed=1, batch_size=4)
    writer = new_store(tmp_path, plan)
    writer.append(rows(plan, 0, np.random.default_rng(2)), 1, 1.0)
    damage(tmp_path / STORE_NAME)
    with pytest.raises(CalibrationStoreError) as err:
        CalibrationReader(tmp_path).ranks()
    assert needle in str(err.value) and STORE_NAME in str(err.value)


def _edit(path, **changes):
    attrs = json.loads((path / ".zattrs").read_text())
    attrs.update(changes)
    (path / ".zattrs").write_text(json.dumps(attrs))


@pytest.mark.parametrize("kwargs, option", [
    (dict(simulations=0), "--simulations"), (dict(draws=7), "--draws"), (dict(draws=400), "--draws"),
    (dict(batch_size=50), "--batch")])
def test_plan_settings_are_checked(kwargs, option):
    settings = {**dict(simulations=10, draws=20, chains=2, num_samples=100, seed=1), **kwargs}
    with pytest.raises(PlanError, match=option):
        make_plan(**settings)
