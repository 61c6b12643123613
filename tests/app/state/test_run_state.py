"""RunState against engine events built exactly as ``core.engine.recorder.Recorder.record`` builds them.

No Qt and no TensorFlow: the model of the GUI is plain numpy (napari's rule). The stored-run
tests (``load_from_store``, following a run another process writes) are in
test_views_store.py, which runs the real engine once in a subprocess.
"""

from __future__ import annotations

import numpy as np
import pytest

from app.state.run_state import VOLUME_KINDS, GrowingBuffer, RunState
from core.run.messages import STAT_NAMES, status_event
from support.runs import fake_run, feed, meta_for


def test_growing_buffer_doubles_and_keeps_its_contents():
    buf = GrowingBuffer((3,), np.float64, capacity=4)
    blocks = [np.full((3, m), float(i)) for i, m in enumerate((3, 2, 9, 1))]
    for block in blocks:
        buf.append(block)
    assert buf.capacity == 16
    np.testing.assert_array_equal(buf.data, np.concatenate(blocks, axis=1))
    buf.truncate(4)
    np.testing.assert_array_equal(buf.data, np.concatenate(blocks, axis=1)[:, :4])
    with pytest.raises(ValueError, match="does not fit"):
        buf.append(np.zeros((2, 1)))


def test_buffers_equal_the_concatenated_chunk_events():
    # 700 steps: the buffers (256 to start) double twice
    events, _ = fake_run(num_warmup=300, num_samples=400, chunk_size=64, thin=7)
    state = RunState()
    state.reset(meta_for(num_warmup=300, num_samples=400, thin=7))
    feed(state, events)
    assert state.n_steps == 700 and state.steps_total == 700
    np.testing.assert_array_equal(state.steps, np.arange(700))
    for name in STAT_NAMES:
        expected = np.concatenate([e["stats"][name] for e in events], axis=1)
        got = state.stat(name)
        assert got.shape == (2, 700)
        np.testing.assert_array_equal(got, expected)
    assert state.stat("diverging").dtype == bool and state.stat("n_steps").dtype == np.int32
    for name in ("index", "amplitude"):
        np.testing.assert_array_equal(state.param(name),
                                      np.concatenate([e["params"][name] for e in events], axis=1))
    last = events[-1]
    np.testing.assert_array_equal(state.latest_field, last["latest_field"])
    np.testing.assert_array_equal(state.latest_power, last["latest_power"])
    np.testing.assert_array_equal(state.mean, last["moments"][0])
    np.testing.assert_array_equal(state.std, last["moments"][1])
    assert state.moment_count == 2 * 400
    assert state.progress == last["progress"]
    assert state.divergences == int(state.stat("diverging").sum())
    assert state.n_warmup_seen == 300


def test_state_learns_the_run_from_the_first_chunk_without_meta():
    events, _ = fake_run()
    state = RunState()
    feed(state, events)
    assert state.chains == 2 and state.param_names == ["index", "amplitude"]
    assert state.grid_shape == (6, 5, 4)
    assert state.n_steps == 100


def test_latest_field_step_is_the_last_kept_draw_of_the_chunk():
    events, drawn = fake_run(num_warmup=10, num_samples=50, chunk_size=16, thin=3)
    state = RunState()
    state.reset(meta_for(num_warmup=10, num_samples=50, thin=3))
    for event in events:
        state.on_chunk(event)
        if "latest_field" in event:
            index = drawn["kept_steps"].index(state.latest_field_step)
            np.testing.assert_array_equal(drawn["kept_fields"][index], event["latest_field"])


def test_pinned_voxel_follows_the_latest_field_of_each_chunk():
    events, _ = fake_run(num_warmup=10, num_samples=80, chunk_size=16, thin=3)
    state = RunState()
    state.reset(meta_for(num_warmup=10, num_samples=80, thin=3))
    feed(state, events[:3])
    trace = state.pin_voxel((1, 2, 3))
    assert len(trace) == 1                      # seeded with the latest draw it has
    expected_steps, expected_values = [state.latest_field_step], [state.latest_field[:, 1, 2, 3]]
    for event in events[3:]:
        state.on_chunk(event)
        if "latest_field" in event:
            expected_steps.append(state.latest_field_step)
            expected_values.append(event["latest_field"][:, 1, 2, 3])
    np.testing.assert_array_equal(trace.steps, expected_steps)
    np.testing.assert_allclose(trace.values, np.stack(expected_values, axis=1))
    assert trace.values.shape == (2, len(expected_steps))
    with pytest.raises(ValueError, match="outside the grid"):
        state.pin_voxel((6, 0, 0))
    version = state.version
    state.unpin((1, 2, 3))
    assert state.pins == {} and state.version > version


def test_a_resumed_run_replaces_the_steps_it_repeats():
    events, _ = fake_run(num_warmup=20, num_samples=40, chunk_size=10, thin=2, seed=1)
    state = RunState()
    state.reset(meta_for(num_warmup=20, num_samples=40, thin=2))
    feed(state, events[:5])                     # up to step 50
    state.pin_voxel((0, 0, 0))
    # the engine died in chunk 5; the resumed run starts again at its checkpoint, step 30
    resumed, _ = fake_run(num_warmup=20, num_samples=40, chunk_size=10, thin=2, seed=2, first_step=30)
    feed(state, resumed)
    np.testing.assert_array_equal(state.steps, np.arange(60))
    expected = np.concatenate([e["stats"]["lp"] for e in events[:3] + resumed], axis=1)
    np.testing.assert_array_equal(state.stat("lp"), expected)
    trace = state.pins[(0, 0, 0)]
    assert np.all(np.diff(trace.steps) > 0)


def test_volumes_and_their_availability():
    events, _ = fake_run()
    data = np.arange(120, dtype=float).reshape(6, 5, 4)
    mask = data % 7 != 0
    data[~mask] = np.nan
    truth = np.ones((6, 5, 4))
    noise = np.full((6, 5, 4), 0.5)
    state = RunState()
    state.reset(meta_for(observed={"data": data, "mask": mask, "truth": truth, "noise": noise}))
    assert state.available_volumes() == ["data", "mask", "noise", "truth"]
    assert state.volume("mean") is None and state.volume("latest") is None
    assert state.volume("noise") is noise
    feed(state, events)
    assert state.available_volumes() == list(VOLUME_KINDS)
    np.testing.assert_array_equal(state.volume("residual"), data - events[-1]["moments"][0])
    np.testing.assert_array_equal(state.volume("latest", chain=1), events[-1]["latest_field"][1])
    np.testing.assert_array_equal(state.volume("mask"), mask.astype(np.float32))
    with pytest.raises(ValueError, match="unknown volume kind"):
        state.volume("nonsense")


def test_version_counters_move_only_on_change():
    events, _ = fake_run()
    state = RunState()
    state.reset(meta_for())
    layout = state.layout_version
    v0, t0, f0 = state.version, state.trace_version, state.field_version
    assert state.version == v0                  # reading changes nothing
    state.stat("lp"), state.volume("mean")
    assert state.version == v0
    state.on_chunk(events[0])                   # warmup chunk: traces only
    assert state.version > v0 and state.trace_version > t0 and state.field_version == f0
    feed(state, events[1:])
    assert state.field_version > f0
    assert state.layout_version == layout
    state.reset(meta_for(chains=3))
    assert state.layout_version == layout + 1 and state.n_steps == 0 and state.stat("lp").shape == (3, 0)


def test_status_events():
    state = RunState()
    state.reset(meta_for())
    state.on_event(status_event("compiling"))
    assert state.status == "compiling"
    state.on_event(status_event("warmup"))
    assert state.status == "running" and state.phase == "warmup"
    state.on_event(status_event("failed", error="the log-density is not finite"))
    assert state.status == "failed" and "not finite" in state.error


def test_run_state_module_imports_neither_qt_nor_tensorflow():
    import subprocess
    import sys

    code = ("import sys, app.state.run_state; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'tensorflow', 'tensorflow_probability', 'PySide6', 'pyqtgraph'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
