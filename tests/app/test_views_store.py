"""RunState and LiveViews on run stores: one written chunk by chunk here (zarr, no TensorFlow),
and one written by the real engine running in another process (``python -m app run``).

The test process never imports TensorFlow: the engine runs in a subprocess, the store is
read with ``core.store.run_store.RunReader`` as the GUI reads it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from app.state.run_state import RunState
from core.field.grid import Grid
from core.field.power_spectrum import PowerLaw
from core.field.synthetic import make_dataset, save_dataset
from core.run.messages import STAT_NAMES
from core.store.run_store import STORE_NAME, ChunkRecord, RunReader, RunStoreError, RunStoreWriter
from support.configs import field_config_text
from support.runs import fake_run

REPO = Path(__file__).resolve().parents[2]
SHAPE = (12, 12, 12)
PIN = (3, 7, 5)
# no diagonal: with 20 warmup steps its window is 12 steps, and chain 0 then accepted 3 % of its
# proposals (a run that `fieldscope run` rightly ends with a warning and exit status 1)
CONFIG = field_config_text(
    box_size=48.0,
    prior={"kind": "power_law", "k_pivot": 0.1, "amplitude": 300.0,
           "index": {"dist": "normal", "loc": -1.5, "scale": 0.3}},
    field={"dtype": "float32"},
    sampler={"algorithm": "hmc", "num_warmup": 20, "num_samples": 30, "num_leapfrog_steps": 5,
             "step_size": 0.1, "adapt_mass_matrix": False, "chains": 2, "seed": 3, "thin": 2,
             "chunk_size": 10})


@pytest.fixture(scope="module")
def engine_run(tmp_path_factory):
    """A finished engine run, followed while it was written (refresh_from_store, a pin)."""
    d = tmp_path_factory.mktemp("engine_run")
    grid = Grid(SHAPE, 48.0)
    dataset = make_dataset(grid, PowerLaw(amplitude=300.0, index=-1.5, k_pivot=0.1), 0.5,
                           mask="slab", mask_fraction=0.25, seed=11)
    save_dataset(d / "data.npz", dataset)
    (d / "run.toml").write_text(CONFIG)
    run_dir = d / "run"
    proc = subprocess.Popen([sys.executable, "-m", "app", "run", str(d / "run.toml"), "--out", str(run_dir)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    followed = RunState()
    loaded, refreshes = False, 0
    deadline = time.monotonic() + 240
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if not loaded and (run_dir / "run.zarr").exists():
                try:
                    followed.load_from_store(run_dir)
                    loaded = followed.chains is not None
                except (RunStoreError, KeyError):
                    pass              # caught it half-created
            elif loaded:
                refreshes += followed.refresh_from_store()
                if not followed.pins:
                    followed.pin_voxel(PIN)
            time.sleep(0.02)
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err[-3000:]
    if not loaded:
        followed.load_from_store(run_dir)
        followed.pin_voxel(PIN)
    followed.refresh_from_store()
    return {"run_dir": run_dir, "followed": followed, "dataset": dataset, "refreshes": refreshes}


def assert_state_equals_store(state: RunState, run_dir: Path) -> None:
    reader = RunReader(run_dir)
    w, d = reader.progress["warmup_draws"], reader.progress["draws"]
    assert state.n_steps == w + d
    np.testing.assert_array_equal(state.steps, np.arange(w + d))
    for name in STAT_NAMES:
        np.testing.assert_array_equal(state.stat(name), np.concatenate(
            [reader.stat(name, warmup=True), reader.stat(name)], axis=1))
    for name in reader.param_names:
        np.testing.assert_array_equal(state.param(name), np.concatenate(
            [reader.param(name, warmup=True), reader.param(name)], axis=1))
    mean, std, count = reader.field_moments()
    np.testing.assert_array_equal(state.mean, mean)
    np.testing.assert_array_equal(state.std, std)
    assert state.moment_count == count
    n_fields = reader.progress["field_draws"]
    last_draw = reader.field_draws(draws=slice(n_fields - 1, n_fields))[:, 0]
    np.testing.assert_array_equal(state.latest_field, last_draw)
    k, counts, power = reader.powers()
    np.testing.assert_array_equal(state.latest_power, power[:, -1])
    np.testing.assert_array_equal(state.k_centres, k)
    field_index = np.asarray(reader.root["posterior_field"]["field_draw"][:n_fields])
    assert state.latest_field_step == state.num_warmup + field_index[-1]
    for name in ("data", "mask", "truth"):
        np.testing.assert_array_equal(state.observed[name], reader.observed(name))
    for voxel, trace in state.pins.items():
        np.testing.assert_array_equal(trace.steps, state.num_warmup + field_index)
        np.testing.assert_array_equal(trace.values, reader.field_draws()[(slice(None), slice(None), *voxel)])
    assert state.status == reader.status


def test_following_a_store_written_by_the_engine_process(engine_run):
    state = engine_run["followed"]
    assert state.status == "finished" and state.chains == 2 and state.param_names == ["index"]
    assert state.grid_shape == SHAPE and state.num_warmup == 20 and state.steps_total == 50
    assert engine_run["refreshes"] >= 1
    assert_state_equals_store(state, engine_run["run_dir"])
    # nothing new: no change, no version bump
    version = state.version
    assert not state.refresh_from_store() and state.version == version


def test_load_from_store_equals_the_store(engine_run):
    state = RunState()
    state.load_from_store(engine_run["run_dir"])
    assert state.source == "store" and state.n_steps == 50
    state.pin_voxel(PIN)           # filled from every stored field draw
    assert len(state.pins[PIN]) == 15
    assert_state_equals_store(state, engine_run["run_dir"])
    ds = engine_run["dataset"]
    np.testing.assert_array_equal(state.volume("mask"), ds.mask.astype(np.float32))
    np.testing.assert_allclose(state.volume("truth"), ds.truth)
    np.testing.assert_array_equal(np.isnan(state.volume("residual")), ~ds.mask)


def test_not_a_run_directory(tmp_path):
    with pytest.raises(RunStoreError, match="not a Fieldscope run directory"):
        RunState().load_from_store(tmp_path)


def test_live_views_of_the_engine_store(qtbot, engine_run, tmp_path):
    from app.views.live import LiveViews

    state = RunState()
    state.load_from_store(engine_run["run_dir"])
    views = LiveViews(state)
    qtbot.addWidget(views)
    views.resize(1400, 800)
    views.show()
    qtbot.waitExposed(views)
    views.slices.pin(PIN)
    views.refresh()
    assert "finished" in views.summary.text() and "step 50/50" in views.summary.text()
    for curves in views.traces.curves.values():
        assert all(len(c.getOriginalDataset()[0]) == 50 for c in curves)
    assert len(views.traces.pin_curves[PIN][0].getOriginalDataset()[0]) == 15
    assert views.slices.shown_kind() == "mean"
    qtbot.waitUntil(lambda: not views.slices.plane_job.busy, timeout=30000)   # planes: read in its worker
    for image in views.slices.images:
        assert image.image is not None and np.isfinite(image.image).all()
    image = views.grab().toImage()
    assert image.width() > 1000
    assert views.grab().save(str(tmp_path / "views.png"))


def records_of(events, info):
    """What Engine._run appends to the store for each chunk event."""
    out = []
    for event, fields in zip(events, info["chunk_fields"]):
        first, n = event["first_step"], event["n_steps"]
        warm = np.arange(first, first + n) < 20
        stats, params = event["stats"], event["params"]
        record = ChunkRecord(warmup_stats={k: v[:, warm] for k, v in stats.items()},
                             stats={k: v[:, ~warm] for k, v in stats.items()},
                             warmup_params={k: v[:, warm] for k, v in params.items()},
                             params={k: v[:, ~warm] for k, v in params.items()})
        if fields is not None:
            record.fields, record.powers, record.field_draw_index = fields
        if "moments" in event:
            mean, std, count = event["moments"]
            record.moments = (mean.astype(np.float64), std.astype(np.float64), count)
        out.append(record)
    return out


def _field_store(run_dir, grid, status, data=None):
    """A field run's store (20 warmup, 45 draws, 2 chains) with observed ``data`` (default: a
    seeded normal field) and no chunk yet."""
    data = np.random.default_rng(0).normal(size=grid) if data is None else data
    writer = RunStoreWriter.create(
        run_dir, config_text="", model_kind="field", chains=2, num_warmup=20, num_samples=45,
        thin=3, param_names=["index"], observed={"data": (["x", "y", "z"], data),
                                                 "mask": (["x", "y", "z"], np.ones(grid, bool))},
        grid_shape=grid, k_centres=[0.1, 0.2, 0.3], k_counts=[6, 12, 20])
    writer.set_status(status)
    return writer


def test_refresh_from_store_follows_chunk_by_chunk(tmp_path):
    grid = (6, 5, 4)
    events, info = fake_run(num_warmup=20, num_samples=45, chunk_size=8, thin=3, grid=grid,
                            param_names=("index",))
    data = np.random.default_rng(0).normal(size=grid)
    writer = _field_store(tmp_path / "run", grid, "running", data)
    state = RunState()
    state.load_from_store(tmp_path / "run")
    assert state.n_steps == 0 and state.status == "running"
    np.testing.assert_array_equal(state.volume("data"), data)
    state.pin_voxel((1, 2, 3))
    fed = RunState()                           # the same run from its events
    fed.reset(RunState.meta_from_reader(RunReader(tmp_path / "run")))
    fed.pin_voxel((1, 2, 3))
    for i, (event, record) in enumerate(zip(events, records_of(events, info))):
        writer.append(record, event["progress"])
        version = state.trace_version
        assert state.refresh_from_store()
        assert state.trace_version > version
        fed.on_chunk(event)
        np.testing.assert_array_equal(state.steps, fed.steps)
        for name in STAT_NAMES:
            np.testing.assert_array_equal(state.stat(name), fed.stat(name))
        np.testing.assert_array_equal(state.param("index"), fed.param("index"))
        if fed.latest_field is not None:
            np.testing.assert_array_equal(state.latest_field, fed.latest_field)
            assert state.latest_field_step == fed.latest_field_step
            np.testing.assert_array_equal(state.mean, fed.mean)
    writer.set_status("finished")
    assert state.refresh_from_store() and state.status == "finished"
    # the store keeps every thin-th draw; the events only each chunk's last one
    trace = state.pins[(1, 2, 3)]
    np.testing.assert_array_equal(trace.steps, info["kept_steps"])
    expected = np.stack([f[:, 1, 2, 3] for f in info["kept_fields"]], axis=1)
    np.testing.assert_array_equal(trace.values, expected)
    live = fed.pins[(1, 2, 3)]
    assert set(live.steps) < set(trace.steps) and live.steps[-1] == trace.steps[-1]


def test_a_live_state_with_a_store_backfills_a_new_pin(tmp_path):
    grid = (6, 5, 4)
    events, info = fake_run(num_warmup=20, num_samples=45, chunk_size=8, thin=3, grid=grid,
                            param_names=("index",))
    writer = RunStoreWriter.create(
        tmp_path / "run", config_text="", model_kind="field", chains=2, num_warmup=20, num_samples=45,
        thin=3, param_names=["index"], observed={}, grid_shape=grid, k_centres=[0.1, 0.2, 0.3],
        k_counts=[6, 12, 20])
    state = RunState()
    state.reset({"chains": 2, "param_names": ["index"], "num_warmup": 20, "num_samples": 45, "thin": 3,
                 "grid_shape": grid, "run_dir": tmp_path / "run"})
    for event, record in zip(events[:6], records_of(events, info)[:6]):
        writer.append(record, event["progress"])
        state.on_chunk(event)
    trace = state.pin_voxel((0, 1, 2))
    n = len([s for s in info["kept_steps"] if s <= state.latest_field_step])
    np.testing.assert_array_equal(trace.steps, info["kept_steps"][:n])
    expected = np.stack([f[:, 0, 1, 2] for f in info["kept_fields"][:n]], axis=1)
    np.testing.assert_array_equal(trace.values, expected)


def test_a_damaged_observed_data_chunk_is_named_when_the_run_is_opened(tmp_path):
    """Issue #33: the window opened such a run with empty views and said nothing (the state
    waited for a store "being created"); opening it now names the chunk file."""
    _field_store(tmp_path / "run", (6, 5, 4), "finished")
    RunState().load_from_store(tmp_path / "run")                 # whole: opens
    chunk = tmp_path / "run" / STORE_NAME / "observed_data" / "data" / "0.0.0"
    raw = chunk.read_bytes()
    chunk.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(RunStoreError, match="observed_data/data"):
        RunState().load_from_store(tmp_path / "run")
