"""Faults before and during a run: a machine too small, a full disk, a broken density.

References: an uninterrupted run of the same config (draws compared bit for bit after a
failed run is resumed), what the store held before the fault, the engine's own peak
memory measured as its peak resident set (VmHWM; against core.run.resources' estimate), and
hand-made traces for the warmup diagnosis.
"""

from __future__ import annotations

import errno
import io
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import zarr.storage._local as zarr_local

import core.engine.engine as engine_mod
from app import cli
from core.config import parse_config
from core.engine.engine import Engine, EngineError
from core.engine.warmup import ACCEPT_FLOOR, STALL_CHUNKS, STEP_COLLAPSE, WarmupWatch
from core.field.grid import Grid
from core.run import resources
from core.store.run_store import RunReader, StoreWriteError, stored_run_config
from support.engine_cases import assert_same_run, run, write_field_case
from support.files import fits_bytes

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(shape=(8, 8, 8), warmup=20, samples=40, chunk=10)     # 6 chunks


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """One uninterrupted run of the SMALL case: the reference for every resumed run."""
    base = tmp_path_factory.mktemp("straight")
    config, text, *_ = write_field_case(base, **SMALL)
    status, _ = run(config, text, base / "run")
    assert status == "finished"
    return base / "run"


class DiskFull:
    """zarr's file writes (every store write goes through ``_put``) fail with ENOSPC once
    ``armed``: after ``allow`` more writes succeed; ``once``: only that write fails (space
    comes back at once), else every later write fails too (the disk stays full)."""

    def __init__(self, monkeypatch, allow=0, once=True):
        self.allow, self.once, self.armed, self.failures = allow, once, False, 0
        real = zarr_local._put

        def put(path, value, exclusive=False):
            if self.armed:
                if self.allow > 0:
                    self.allow -= 1
                elif not self.once or self.failures == 0:
                    self.failures += 1
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            return real(path, value, exclusive)

        monkeypatch.setattr(zarr_local, "_put", put)


def arm_after_chunks(disk, k):
    """An emit function that arms ``disk`` once chunk ``k`` has been written."""
    events = []

    def emit(event):
        events.append(event)
        if event.get("type") == "chunk" and event["progress"]["chunks"] == k:
            disk.armed = True
    return emit, events


def assert_prefix_of(reader, reference, chunks):
    """The faulted run's store holds exactly the reference run's first ``chunks``."""
    ref = RunReader(reference)
    assert reader.progress["chunks"] == chunks
    warm, draws = reader.progress["warmup_draws"], reader.progress["draws"]
    assert 0 < warm + draws < ref.progress["warmup_draws"] + ref.progress["draws"]
    for name in ("lp", "step_size", "grad_norm"):
        np.testing.assert_array_equal(reader.stat(name, warmup=True),
                                      ref.stat(name, warmup=True)[:, :warm])
        np.testing.assert_array_equal(reader.stat(name), ref.stat(name)[:, :draws])
    nf = reader.progress["field_draws"]
    np.testing.assert_array_equal(reader.field_draws(), ref.field_draws()[:, :nf])


# --------------------------------------------------------------------------- a full disk


@pytest.mark.parametrize("allow, once", [(3, True), (0, False)],
                         ids=["mid-append, space back", "disk stays full"])
def test_enospc_while_appending_fails_the_run_keeps_the_chunks_and_resumes_identically(
        tmp_path, monkeypatch, straight, allow, once):
    config, text, *_ = write_field_case(tmp_path, **SMALL)
    disk = DiskFull(monkeypatch, allow=allow, once=once)
    emit, events = arm_after_chunks(disk, 3)
    engine = Engine(config, text, tmp_path / "run", emit=emit)
    with pytest.raises(StoreWriteError) as info:
        engine.start()
    message = str(info.value)
    assert info.value.errno == errno.ENOSPC and disk.failures >= 1
    assert "writing chunk 4 to the run store failed: No space left on device [ENOSPC]" in message
    assert "the 3 chunks written before stay readable" in message
    assert f"fieldscope resume {tmp_path / 'run'}" in message
    failed = [e for e in events if e.get("type") == "status" and e["status"] == "failed"]
    assert failed and failed[-1]["error"] == message
    reader = RunReader(tmp_path / "run")
    if once:      # the status could still be written: failed, with the reason
        assert reader.status == "failed" and reader.attrs["error"] == message
    else:         # nothing could be written any more: the store still says running
        assert reader.status == "running"
    assert_prefix_of(reader, straight, 3)

    disk.armed = False                  # space is back
    cfg, txt = stored_run_config(tmp_path / "run")
    assert Engine(cfg, txt, tmp_path / "run").resume() == "finished"
    assert_same_run(straight, tmp_path / "run")


def test_enospc_while_writing_the_checkpoint(tmp_path, monkeypatch, straight):
    """The chunk reached the store but its checkpoint did not: the store shows it, the
    old checkpoint stays (no temporary file left), resume goes back one chunk."""
    config, text, *_ = write_field_case(tmp_path, **SMALL)
    real_fsync, calls = os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)       # core.store.checkpoint.write_checkpoint's
    with pytest.raises(StoreWriteError, match=r"writing the checkpoint failed: No space left "
                                              r"on device \[ENOSPC\]"):
        Engine(config, text, tmp_path / "run").start()
    monkeypatch.setattr(os, "fsync", real_fsync)
    reader = RunReader(tmp_path / "run")
    assert reader.status == "failed" and "checkpoint" in reader.attrs["error"]
    assert_prefix_of(reader, straight, 3)
    assert [p.name for p in (tmp_path / "run").iterdir() if p.name.startswith(".checkpoint")] == []
    with np.load(tmp_path / "run" / "checkpoint.npz") as data:
        assert json.loads(str(data["__meta__"]))["progress"]["chunks"] == 2
    cfg, txt = stored_run_config(tmp_path / "run")
    assert Engine(cfg, txt, tmp_path / "run").resume() == "finished"
    assert_same_run(straight, tmp_path / "run")


def test_cli_full_disk_is_one_line_and_a_non_zero_exit_then_resume(tmp_path, monkeypatch,
                                                                   capsys, straight):
    write_field_case(tmp_path, **SMALL)
    disk = DiskFull(monkeypatch, allow=0, once=False)
    real_append = engine_mod.RunStoreWriter.append

    def append(self, record, progress, *args, **kwargs):
        if progress["chunks"] == 5:
            disk.armed = True
        return real_append(self, record, progress, *args, **kwargs)

    monkeypatch.setattr(engine_mod.RunStoreWriter, "append", append)
    out_dir = tmp_path / "run"
    assert cli.main(["run", str(tmp_path / "run.toml"), "--out", str(out_dir)]) == 2
    err_lines = [line for line in capsys.readouterr().err.splitlines()
                 if line.startswith("fieldscope:")]
    assert len(err_lines) == 1, err_lines
    assert "No space left on device [ENOSPC]" in err_lines[0]
    assert f"fieldscope resume {out_dir}" in err_lines[0]
    disk.armed = False
    monkeypatch.setattr(engine_mod.RunStoreWriter, "append", real_append)
    assert cli.main(["resume", str(out_dir)]) == 0
    assert_same_run(straight, out_dir)


# --------------------------------------------------------------------------- memory


def test_a_run_that_cannot_fit_is_refused_before_anything_loads(tmp_path, monkeypatch,
                                                                 capsys):
    config, text, *_ = write_field_case(tmp_path, shape=(16, 16, 16), chains=4)
    estimate = resources.estimate_for_config(config, (16, 16, 16))
    free = estimate.needed(include_import=False) - 2**20
    monkeypatch.setattr(resources, "available_memory", lambda: free)
    built = []
    monkeypatch.setattr(engine_mod, "build_model", lambda c, **kw: built.append(c))
    with pytest.raises(resources.ResourceError) as info:
        Engine(config, text, tmp_path / "run").start()
    message = str(info.value)
    assert "data.npz" in message and "16 x 16 x 16 grid, 4 chains" in message
    assert resources.format_bytes(estimate.needed(include_import=False)) in message
    assert f"{resources.format_bytes(free)} free" in message and "fewer chains" in message
    assert built == [] and not (tmp_path / "run").exists()
    assert cli.main(["run", str(tmp_path / "run.toml"), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fieldscope: ") and "needs about" in err[0]
    # with this machine's memory a small run goes ahead; the estimate comes with "loading"
    monkeypatch.undo()
    events = []
    small, small_text, *_ = write_field_case(tmp_path, shape=(8, 8, 8), warmup=5, samples=5)
    assert Engine(small, small_text, tmp_path / "ok", emit=events.append).start() == "finished"
    assert events[0]["type"] == "status" and events[0]["status"] == "loading"
    expected = resources.estimate_for_config(small, (8, 8, 8))
    assert events[0]["estimate"]["bytes"] == expected.total
    assert events[0]["estimate"]["run_seconds"] > 0


def test_estimate_parts_and_refusal_message():
    base = dict(chains=2, dtype="float32", num_leapfrog_steps=10, chunk_size=25, thin=5)
    e = resources.estimate_run((64, 64, 64), **base)
    n = 64**3
    assert not e.unrolled      # 10 unrolled steps would cost 10 (24 C N b + 15 MiB) > 512 MiB
    assert e.xla_working_set == (resources.XLA_BUFFERS_PER_CHAIN * 2 + resources.XLA_SHARED_BUFFERS) * n * 4
    assert e.arrays["model_state"] == Grid((64, 64, 64), 1.0).memory_estimate(
        chains=2, dtype="float32", n_field_draws_kept=6).total      # ceil(25 / 5) + 1 draws
    assert e.total == sum(e.arrays.values()) + e.xla_working_set + e.runtime
    # twice the chains or float64: the grid-sized parts double
    # float64: the grid-sized parts double
    o = resources.estimate_run((64, 64, 64), **dict(base, dtype="float64"))
    assert o.xla_working_set == 2 * e.xla_working_set
    nuts = resources.estimate_run((64, 64, 64), **dict(base, num_leapfrog_steps=3),
                                  algorithm="nuts")
    assert nuts.xla_working_set == (resources.NUTS_BUFFERS_PER_CHAIN * 2 + resources.XLA_SHARED_BUFFERS) * n * 4
    # the leapfrog loop reuses its buffers: the memory does not depend on L (issue #13)
    for steps in (10, 40, 100, 2048):
        assert resources.estimate_run((64,) * 3, **dict(base, num_leapfrog_steps=steps)).total == e.total
    # a small run keeps the unrolled loop, and its L steps' buffers
    small = resources.estimate_run((64,) * 3, **dict(base, chains=1, num_leapfrog_steps=4))
    assert small.unrolled and small.xla_working_set == 24 * 4 * 1 * n * 4
    assert resources.memory_problem(e, available=e.total) is None
    text = resources.memory_problem(e, available=e.total - 1)
    assert "64 x 64 x 64 grid, 2 chains, float32, 10 leapfrog steps" in text
    assert "fewer chains or a smaller grid" in text
    assert resources.memory_problem(e, available=e.needed(False), include_import=False) is None
    assert "of memory (host RAM: the CPU computes)" in text
    # on a GPU the device holds the chunk program's buffers by XLA's own account (looped HMC:
    # 13.0 a chain + 10.6 grid-sized buffers + the chunk's 6 field draws a chain) and the
    # CUDA runtime; the host the runtime, the chunk's copies and one checkpoint array (or
    # the set-up's maps)
    n4 = n * 4
    assert resources.DEVICE_PROGRAMS[("hmc", False)] == ((13.0, 10.6, True),)
    assert e.device_bytes("gpu") == math.ceil((13.0 * 2 + 10.6 + 6 * 2) * n4) + resources.GPU_RUNTIME_BYTES
    assert e.host_bytes("gpu") == e.runtime + max(2 * 6 * 2 * n4 + 4 * n * 8 + 2 * n4 + 2 * n4,
                                                  2 * 3 * n * 8)
    assert e.device_bytes("cpu") == e.host_bytes("cpu") == e.total
    ok = dict(available=e.host_bytes("gpu"), device="gpu")
    assert resources.memory_problem(e, device_available=e.device_bytes("gpu"), **ok) is None
    short = resources.memory_problem(e, device_available=e.device_bytes("gpu") - 1, **ok)
    assert "of GPU (device) memory" in short and resources.format_bytes(e.device_bytes("gpu")) in short
    host = resources.memory_problem(e, available=e.host_bytes("gpu") - 1, device="gpu",
                                    device_available=None)
    assert "of host memory (beside the GPU's)" in host
    free = resources.available_memory()
    assert free is None or 0 < free <= (resources.physical_memory() or free)


MEASURE = textwrap.dedent("""
    import os, resource, sys, json
    sys.path.insert(0, {root!r})
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from support.engine_cases import write_field_case, run
    base = Path(sys.argv[1])
    config, text, *_ = write_field_case(base, shape=(int(sys.argv[2]),) * 3, chains=3,
                                        leapfrog=8, warmup=10, samples=20, chunk=10,
                                        dtype="float32", mass=False)
    import tensorflow
    status, _ = run(config, text, base / "run")
    assert status == "finished"
    # VmHWM: this process's own peak. (Linux's ru_maxrss keeps the parent's peak across
    # fork and exec, so a child of a big pytest process would report the parent's.)
    with open("/proc/self/status") as fh:
        hwm = [line.split()[1] for line in fh if line.startswith("VmHWM:")]
    peak = int(hwm[0]) * 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(peak))
""")


@pytest.mark.slow
def test_estimate_against_the_measured_peak_memory_of_engine_runs(tmp_path):
    """Peak RSS of engine runs (subprocesses, CPU) against the estimate: the grid-sized
    part from the difference of a 56^3 and an 8^3 run (the runtime cancels), and the
    whole. A grid, chain count and step count the constants were not fitted on."""
    code = MEASURE.format(root=str(ROOT), tests=str(ROOT / "tests"))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1"}
    peaks = {}
    for n in (8, 56):
        (tmp_path / str(n)).mkdir()
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path / str(n)), str(n)],
                             capture_output=True, text=True, timeout=300, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        peaks[n] = json.loads(out.stdout.strip().splitlines()[-1])
    kw = dict(chains=3, dtype="float32", num_leapfrog_steps=8, chunk_size=10, thin=5)
    est = {n: resources.estimate_run((n,) * 3, **kw) for n in (8, 56)}
    grid_measured = peaks[56] - peaks[8]
    grid_estimated = est[56].total - est[8].total
    ratio_grid = grid_measured / grid_estimated
    ratio_total = peaks[56] / est[56].total
    print(f"\npeak RSS 56^3: {peaks[56] / 2**20:.0f} MiB measured, {est[56].total / 2**20:.0f} "
          f"MiB estimated (ratio {ratio_total:.2f}); grid-sized part {grid_measured / 2**20:.0f}"
          f" vs {grid_estimated / 2**20:.0f} MiB (ratio {ratio_grid:.2f}); 8^3 runtime "
          f"{peaks[8] / 2**20:.0f} vs {est[8].total / 2**20:.0f} MiB")
    # the estimate may read high, not low: HMC as a pure step (issue #29) holds less than the
    # estimate was fitted on (grid part 358 MiB against 400 before, same machine, alternating
    # runs; XLA's buffer assignment of the chunk program unchanged, 13.0 W and 6.6 S), and the
    # spread between processes is wide (a CI on the same commit measured 306 MiB: 0.71), and
    # wider across machines (an AMD EPYC with AVX2 and no AVX-512, 2026-12-06: 0.62)
    assert 0.55 < ratio_grid < 1.3
    assert 0.75 < ratio_total < 1.3


MEASURE_STEPS = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {root!r})
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from support.engine_cases import write_field_case, run
    import tensorflow
    folder, steps = Path(sys.argv[1]), int(sys.argv[2])
    config, text, *_ = write_field_case(folder, shape=(32,) * 3, chains=1, leapfrog=steps,
                                        warmup=2, samples=2, chunk=2, mass=False)
    assert run(config, text, folder / "run")[0] == "finished"
    with open("/proc/self/status") as fh:
        print(json.dumps(int([ln.split()[1] for ln in fh if ln.startswith("VmHWM:")][0]) * 1024))
""")


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_leapfrog_steps(tmp_path):
    """Issue #13: the leapfrog loop's buffers are reused, so a run with L = 60 needs no more
    memory than one with L = 30 (each in a fresh process: one process running both would
    hold both compiled programs). Both are looped (an unrolled kernel at these L would keep
    ~24 grid-sized buffers per chain and ~15 MiB of program per step: ~540 MiB more for the
    30 extra steps here). An unrolled L = 2 against a looped L = 30 is no test of this: the
    two programs' runtimes differ by 0-140 MiB from one install to the next."""
    code = MEASURE_STEPS.format(root=str(ROOT), tests=str(ROOT / "tests"))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1"}
    estimate = {L: resources.estimate_run((32,) * 3, chains=1, num_leapfrog_steps=L, chunk_size=2,
                                          thin=5) for L in (2, 30, 60, 300)}
    # L = 2 is small enough to unroll (core.run.engine_limits.unrolls), L >= 30 is not; from
    # there on the estimate, as the engine, does not depend on L
    assert estimate[2].unrolled and not estimate[30].unrolled
    assert estimate[30].total == estimate[60].total == estimate[300].total
    peaks = {}
    for steps in (30, 60):
        folder = tmp_path / str(steps)
        folder.mkdir()
        out = subprocess.run([sys.executable, "-c", code, str(folder), str(steps)], capture_output=True,
                             text=True, timeout=300, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        peaks[steps] = json.loads(out.stdout.strip().splitlines()[-1])
    short, long = peaks[30], peaks[60]
    print(f"\npeak RSS: L = 30 {short / 2**20:.0f} MiB, L = 60 {long / 2**20:.0f} MiB")
    assert abs(long - short) < 100 * 2**20
    # at 32^3 the peak is TensorFlow's runtime and programs, which vary between processes and
    # installs by more than the grid-sized part: 929 to 1074 MiB measured (development trees,
    # fresh clones' CI; 956 MiB in one CI of 2026-12-05) against 1287 MiB estimated since the
    # import was recalibrated (ENGINE_IMPORT_BYTES 946 MiB), so a lower bound of 0.7 here;
    # test_estimate_against_the_measured_peak_memory_of_engine_runs checks the grid-sized part
    assert 0.7 < long / estimate[60].total < 1.3


# --------------------------------------------------------------------------- warmup diagnosis


def chunk_stats(chains=2, n=10, lp=0.0, accept=0.8, step=0.1, energy=0.1):
    full = lambda v: np.broadcast_to(np.asarray(v, float), (chains, n)).copy()   # noqa: E731
    return {"lp": full(lp), "acceptance_rate": full(accept), "step_size": full(step),
            "energy_error": full(energy)}


def test_warmup_watch_on_hand_made_traces():
    # a healthy warmup: a few rejected, divergent steps at first, then dual averaging copes
    watch = WarmupWatch(0.1)
    first = chunk_stats(accept=0.0, step=np.geomspace(0.1, 1e-3, 10), energy=np.inf)
    first["acceptance_rate"][:, 6:] = 0.7
    first["energy_error"][:, 6:] = 0.2
    assert watch.update(first, 0) is None
    for k in range(1, 10):
        assert watch.update(chunk_stats(step=0.02), 10 * k) is None

    # every step's log-density NaN for STALL_CHUNKS chunks
    watch = WarmupWatch(0.1)
    for k in range(STALL_CHUNKS - 1):
        assert watch.update(chunk_stats(lp=np.nan, energy=np.nan), 10 * k) is None
    text = watch.update(chunk_stats(lp=np.nan, energy=np.nan), 20)
    assert "NaN or infinite at every step" in text and "priors" in text and "noise" in text
    # ... the count restarts after a finite chunk
    watch = WarmupWatch(0.1)
    for k in range(2 * STALL_CHUNKS):
        bad = k % 2 == 0
        assert watch.update(chunk_stats(lp=np.nan if bad else 0.0,
                                        energy=np.nan if bad else 0.1), 10 * k) is None

    # a step size collapsing in one chain, with finite proposals: the posterior is too narrow
    steps = np.full((2, 10), 0.1)
    steps[1, 7] = 0.1 * STEP_COLLAPSE / 2
    text = WarmupWatch(0.1).update(chunk_stats(step=steps, accept=0.0, energy=5e3), 30)
    assert "chain 1's step size fell to 5e-10 at step 37" in text
    assert "far narrower" in text and "0% of the proposals" in text and "noise" in text
    # ... with NaN proposals: the density is broken
    text = WarmupWatch(0.1).update(chunk_stats(step=steps, accept=0.0, energy=np.nan), 30)
    assert "NaN or infinite at 100% of the proposals" in text and "broken" in text

    # no proposal accepted in any chain for STALL_CHUNKS chunks of at least 30 steps
    watch = WarmupWatch(0.1)
    results = [watch.update(chunk_stats(accept=ACCEPT_FLOOR / 2, energy=50.0, n=10), 10 * k)
               for k in range(3)]
    assert results[:2] == [None, None] and "acceptance stayed below 0.001 for 30 steps" in \
        results[2] and "no proposal is accepted" in results[2]
    watch = WarmupWatch(0.1)                 # short chunks: the step count decides
    assert all(watch.update(chunk_stats(accept=0.0, energy=50.0, n=2), 2 * k) is None
               for k in range(14))
    assert watch.update(chunk_stats(accept=0.0, energy=50.0, n=2), 28) is not None


class _NaNAwayFromStart:
    """The real model, whose log-density is NaN everywhere but at the initial state."""

    def __init__(self, model, config):
        self._model = model
        s = config.sampler
        self._x0 = tf.constant(np.asarray(model.initial_state(s.chains, s.seed)[0]),
                               model.dtype)

    def __getattr__(self, name):
        return getattr(self._model, name)

    @property
    def target_log_prob_fn(self):
        f = self._model.target_log_prob_fn

        def target(*parts):
            lp = f(*parts)
            same = tf.reduce_all(tf.reshape(tf.equal(parts[0], self._x0),
                                            [tf.shape(parts[0])[0], -1]), axis=1)
            return tf.where(same, lp, tf.constant(np.nan, lp.dtype))
        return target


def test_nan_log_density_ends_warmup_with_a_diagnosis(tmp_path, monkeypatch):
    config, text, *_ = write_field_case(tmp_path, shape=(8, 8, 8), warmup=500, samples=100,
                                        chunk=10, mass=False)
    real = engine_mod.build_model
    monkeypatch.setattr(engine_mod, "build_model",
                        lambda c, **kw: _NaNAwayFromStart(real(c, **kw), c))
    events = []
    with pytest.raises(EngineError) as info:
        Engine(config, text, tmp_path / "run", emit=events.append).start()
    message = str(info.value)
    assert "NaN or infinite" in message and "broken" in message
    assert "priors" in message and "noise" in message and "step_size" in message
    reader = RunReader(tmp_path / "run")
    assert reader.status == "failed" and reader.attrs["error"] == message
    chunks = reader.progress["chunks"]
    assert 1 <= chunks <= STALL_CHUNKS and reader.progress["warmup_draws"] == 10 * chunks
    assert reader.progress["draws"] == 0
    assert not np.isfinite(reader.stat("energy_error", warmup=True)).all()
    assert events[-1] == {"type": "status", "status": "failed", "error": message}


def test_a_noise_level_far_below_the_data_collapses_the_step_size(tmp_path):
    config, text, *_ = write_field_case(tmp_path, shape=(8, 8, 8), warmup=500, samples=100,
                                        chunk=10, mass=False, leapfrog=1, dtype="float64",
                                        sigma=1e-12)
    with pytest.raises(EngineError) as info:
        run(config, text, tmp_path / "run")
    message = str(info.value)
    assert "step size fell to" in message and f"below {STEP_COLLAPSE:g} x the initial 0.1" \
        in message
    assert "far narrower" in message and "noise" in message
    reader = RunReader(tmp_path / "run")
    assert reader.status == "failed" and reader.progress["chunks"] <= 3


# --------------------------------------------------------------------------- FITS end to end


def test_a_run_from_a_fits_cube(tmp_path):
    """A scaled (BSCALE / BZERO) big-endian FITS cube with a mask extension, through the
    config, the engine and the store: the observed data are the physical values."""
    from astropy.io import fits

    rng = np.random.default_rng(5)
    stored = rng.integers(-3000, 3000, size=(8, 8, 8)).astype(">i2")
    mask = (rng.random((8, 8, 8)) < 0.8).astype(np.uint8)
    cards = [("SIMPLE", True), ("BITPIX", 16), ("NAXIS", 3), ("NAXIS1", 8), ("NAXIS2", 8),
             ("NAXIS3", 8), ("EXTEND", True), ("BSCALE", 1e-3), ("BZERO", 0.5)]
    cards += [(f"{k}{i}", v) for i in (1, 2, 3) for k, v in (("CDELT", 4.0), ("CUNIT", "Mpc"))]
    extension = io.BytesIO()
    fits.HDUList([fits.PrimaryHDU(), fits.ImageHDU(mask, name="MASK")]).writeto(extension)
    (tmp_path / "cube.fits").write_bytes(fits_bytes(cards, stored.tobytes())
                                         + extension.getvalue()[2880:])
    text = textwrap.dedent("""
        [model]
        kind = "field"
        [data]
        path = "cube.fits"
        mask = "MASK"
        noise_sigma = 0.5
        [grid]
        box_size = 32.0
        unit = "Mpc"
        [sampler]
        num_warmup = 10
        num_samples = 10
        chunk_size = 10
        chains = 1
    """)
    config = parse_config(text, base_dir=tmp_path)
    status, _ = run(config, text, tmp_path / "run")
    assert status == "finished"
    reader = RunReader(tmp_path / "run")
    # BZERO + BSCALE * stored, in float32 as the FITS convention for BITPIX 16 has it
    physical = stored.astype(np.float32) * np.float32(1e-3) + np.float32(0.5)
    data = reader.observed("data")
    np.testing.assert_array_equal(data[mask == 1], physical[mask == 1])
    assert np.isnan(data[mask == 0]).all()
