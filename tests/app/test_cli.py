"""The command line: help, version, and the FFT self-test as a user runs it; the run
directory claimed before TensorFlow loads (a folder with draws, one whose run never drew, a
live writer, a read-only folder); the progress line; stop signals sent to a real
``fieldscope run``."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from app import cli
from core.run import run_folder
from core.run.messages import chunk_event, new_progress, status_event
from core.run.tensorflow_env import START_UP_NOISE, quiet_tensorflow
from core.store import run_lock
from core.store.run_record import zero_stats
from core.store.run_store import STORE_NAME, ChunkRecord, RunReader, RunStoreError, RunStoreWriter
from support.gui import TF_BEFORE, tf_modules, tiny_case


def test_help_lists_check(capsys):
    assert cli.main([]) == 0
    assert "check" in capsys.readouterr().out


def test_check_command_passes_in_a_fresh_process():
    out = subprocess.run([sys.executable, "-m", "app", "check"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert "VERDICT: PASS" in out.stdout
    assert out.stdout.count("[ok  ]") == 8


def test_app_process_never_imports_tensorflow():
    """The GUI process must not load TensorFlow (it crashes beside Mesa's OpenGL)."""
    code = ("import sys, pkgutil, importlib, app; "
            "[importlib.import_module('app.' + m.name) for m in pkgutil.iter_modules(app.__path__) "
            " if m.name != '__main__']; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'tensorflow_probability', 'tf_keras')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- the run directory


def _store_with_draws(run_dir, config_path, warmup=(3, 0), diverging=()):
    """A run store as the engine leaves it after chunks (core.store's writer, no TensorFlow):
    chunk c adds ``warmup[c]`` warmup draws; ``diverging``: the (chain, step) that diverged."""
    chains, names = 2, ["index"]
    writer = RunStoreWriter.create(run_dir, config_text=Path(config_path).read_text(),
                                   config_dir=Path(config_path).parent, model_kind="field",
                                   chains=chains, num_warmup=sum(warmup), num_samples=4, thin=1,
                                   param_names=names, observed={}, grid_shape=(4, 4, 4),
                                   k_centres=np.array([1.0, 2.0]), k_counts=np.array([6, 20]))
    progress, first = dict(new_progress()), 0
    for n in warmup:
        stats = zero_stats(chains, n)
        for chain, step in diverging:
            if first <= step < first + n:
                stats["diverging"][chain, step - first] = True
        empty = zero_stats(chains, 0)
        record = ChunkRecord(warmup_stats=stats, stats=empty,
                             warmup_params={nm: np.zeros((chains, n)) for nm in names},
                             params={nm: np.zeros((chains, 0)) for nm in names})
        progress = dict(progress, warmup_draws=progress["warmup_draws"] + n, chunks=progress["chunks"] + 1)
        writer.append(record, progress)
        first += n
    writer.set_status("stopped")
    return writer


def _no_tensorflow():
    return TF_BEFORE or tf_modules() == []


def test_run_into_a_folder_with_draws_is_refused_before_tensorflow_loads(tmp_path, capsys):
    config = tiny_case(tmp_path)
    run_dir = tmp_path / "run"
    _store_with_draws(run_dir, config)
    before = sorted(p.name for p in run_dir.iterdir())
    t0 = time.perf_counter()
    assert cli.main(["run", str(config), "--out", str(run_dir)]) == 2
    assert time.perf_counter() - t0 < 1.0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert f"{run_dir}: already holds a run (stopped, 3 draws per chain)" in err[0]
    assert f"fieldscope resume {run_dir}" in err[0]
    assert sorted(p.name for p in run_dir.iterdir()) == before          # untouched, lock released
    assert RunReader(run_dir).progress["warmup_draws"] == 3
    assert _no_tensorflow()


def test_a_folder_whose_run_has_no_draws_is_replaced_and_a_live_writer_refused(tmp_path, sleeper):
    config = tiny_case(tmp_path)
    run_dir = tmp_path / "run"
    _store_with_draws(run_dir, config, warmup=())          # killed while compiling: no chunk
    # a live writer (another process) holds the folder: refused by name, nothing removed
    (run_dir / run_lock.LOCK_NAME).write_text(json.dumps(
        {"host": socket.gethostname(), "pid": sleeper.pid, "started": "now"}))
    with pytest.raises(RunStoreError, match=f"another process {sleeper.pid} on this machine"):
        run_folder.claim_new(run_dir)
    assert (run_dir / STORE_NAME).exists()
    # its writer is gone (a stale lock): the run is replaced, saying so
    sleeper.kill()
    sleeper.wait()
    claim = run_folder.claim_new(run_dir)
    assert claim.note == (f"{run_dir}: replacing the run there, which ended before its first "
                          "chunk (stopped, no draws)")
    assert not (run_dir / STORE_NAME).exists()
    assert run_lock.holder(run_dir).pid == os.getpid()
    claim.release()
    assert run_lock.holder(run_dir) is None and run_dir.is_dir()
    # resume of a run with no checkpoint starts it again (the store stays until the engine
    # has loaded the model)
    _store_with_draws(run_dir, config, warmup=())
    claim = run_folder.claim_resume(run_dir)
    assert claim.restart and "starting it again from the beginning with its stored config" in claim.note
    claim.release()
    assert (run_dir / STORE_NAME).exists()
    # a folder the claim created and nothing was written to is removed again
    claim = run_folder.claim_new(tmp_path / "new")
    claim.release()
    assert not (tmp_path / "new").exists()


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture
def read_only_dir(tmp_path):
    """An empty folder nobody may write: mode 0555, or, for root (whom modes do not stop), a
    read-only tmpfs mounted there."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip("running as root, where mode 0555 does not stop writes, and mounting a "
                    f"read-only tmpfs is not permitted ({mounted.stderr.strip()})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_run_into_a_read_only_folder_is_one_line_before_tensorflow_loads(tmp_path, read_only_dir,
                                                                        capsys):
    config = tiny_case(tmp_path)
    for out in (read_only_dir, read_only_dir / "run"):
        assert cli.main(["run", str(config), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"fieldscope: {out}: cannot write the run directory: ")
        assert "Read-only file system" in err[0] or "Permission denied" in err[0]
    assert list(read_only_dir.iterdir()) == []
    assert _no_tensorflow()


def test_the_progress_line_counts_on_from_the_stored_divergences(tmp_path):
    """A resumed run's progress line: the divergences stored before its first chunk, then
    the new ones (it used to restart at 0)."""
    config = tiny_case(tmp_path)
    _store_with_draws(tmp_path / "run", config, warmup=(3, 2), diverging=[(0, 1), (1, 1), (1, 4)])
    stream = io.StringIO()
    line = cli.ProgressLine(stream, run_dir=tmp_path / "run")
    stats = zero_stats(2, 2, np.float32)
    stats["diverging"][0, 1] = True
    for first in (5, 7):              # the resumed chunks (the store's 5 steps before them)
        line(chunk_event(first_step=first, n_steps=2, phase="warmup", stats=stats,
                         params={"index": np.zeros((2, 2), np.float32)}, steps_total=10,
                         elapsed=1.0, steps_per_second=2.0, total_elapsed=1.0,
                         progress=dict(new_progress())))
    lines = stream.getvalue().splitlines()
    # all warmup: 0 post-warmup divergences, the warmup ones apart
    assert " div 0 (4 in warmup) " in lines[0] and " div 0 (5 in warmup) " in lines[1], lines
    assert line.divergences == 0 and line.warmup_divergences == 5
    fresh = cli.ProgressLine(io.StringIO(), run_dir=tmp_path / "run")
    stats["diverging"][:] = False
    fresh(chunk_event(first_step=0, n_steps=2, phase="warmup", stats=stats,
                      params={"index": np.zeros((2, 2), np.float32)}, steps_total=10,
                      elapsed=1.0, steps_per_second=2.0, total_elapsed=1.0,
                      progress=dict(new_progress())))
    assert fresh.divergences == 0      # a run from step 0 counts nothing stored


def test_the_progress_line_says_where_the_engine_computes():
    stream = io.StringIO()
    line = cli.ProgressLine(stream)
    line(status_event("loading"))
    line(status_event("compiling", device="GPU: NVIDIA H200 (compute capability 9.0)"))
    assert stream.getvalue().splitlines() == [
        "loading...", "device: GPU: NVIDIA H200 (compute capability 9.0)", "compiling..."]


def test_quiet_tensorflow_hides_cuinit_errors_only_without_a_gpu(tmp_path):
    env = {}
    assert quiet_tensorflow(env, pattern=str(tmp_path / "nvidia*")) == "3"      # no device
    (tmp_path / "nvidia0").touch()
    env = {}
    assert quiet_tensorflow(env, pattern=str(tmp_path / "nvidia*")) == "2"      # a GPU: errors show
    env = {"TF_CPP_MIN_LOG_LEVEL": "0"}
    assert quiet_tensorflow(env, pattern=str(tmp_path / "none*")) == "0"        # the user's choice
    assert "CUDA_VISIBLE_DEVICES" not in env


# --------------------------------------------------------------------------- stop signals

REPO = Path(__file__).resolve().parents[2]


class CliProcess:
    """``fieldscope ARGS`` in a subprocess, its stderr read line by line as it comes."""

    def __init__(self, args, xla_cache):
        env = dict(os.environ, TF_XLA_FLAGS=f"--tf_xla_persistent_cache_directory={xla_cache}")
        env.pop("TF_CPP_MIN_LOG_LEVEL", None)       # the CLI's own choice is under test
        self.proc = subprocess.Popen([sys.executable, "-m", "app", *map(str, args)], cwd=REPO,
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.err: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self.err.append(line.rstrip("\n"))

    def wait_for(self, predicate, timeout=240.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(predicate(line) for line in list(self.err)):
                return
            assert self.proc.poll() is None, "\n".join(self.err[-30:])
            time.sleep(0.05)
        raise AssertionError("timed out: " + "\n".join(self.err[-30:]))

    def finish(self, timeout=240.0):
        out = self.proc.stdout.read()
        self.proc.wait(timeout)
        self.reader.join(10)
        return self.proc.returncode, out, self.err

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _progress(line: str) -> bool:
    return "draws/s" in line


def test_stop_signals_leave_a_stopped_resumable_run_and_a_second_run_is_refused(tmp_path, xla_cache):
    """SIGTERM while compiling: the chunk ends, status "stopped", lock released, exit 0. A second
    ``run`` into the folder meanwhile is refused at once, naming the writer. Two Ctrl-C 20 ms
    apart during a resumed run: stopped at once, no traceback, still resumable. Then
    ``resume`` finishes the run, its divergence count going on from the stored one. Chunks of
    1000 steps (about a second here): the second Ctrl-C lands inside a chunk (with chunks of 5
    the first stop could complete before it came, under load)."""
    config = tiny_case(tmp_path, warmup=10, samples=100_000, chunk=1000)
    run_dir = tmp_path / "run"
    first = CliProcess(["run", config, "--out", run_dir], xla_cache)
    try:
        first.wait_for(lambda line: line == "compiling...")
        t0 = time.perf_counter()
        second = subprocess.run([sys.executable, "-m", "app", "run", str(config), "--out", str(run_dir)],
                                cwd=REPO, capture_output=True, text=True, timeout=60)
        assert time.perf_counter() - t0 < 10          # no TensorFlow loaded to find out
        assert second.returncode == 2 and "Traceback" not in second.stderr
        assert f"another process {first.proc.pid} on this machine (since" in second.stderr
        first.proc.send_signal(signal.SIGTERM)
        code, out, err = first.finish()
    finally:
        first.kill()
    assert code == 0, "\n".join(err[-30:])
    # and none of TensorFlow's start-up notices (core.run.tensorflow_env.start_up_notices_filtered)
    assert not any("Traceback" in line or "cuInit" in line or START_UP_NOISE.search(line) for line in err), err
    assert [line for line in err if "stopping" in line] == [
        "fieldscope: SIGTERM: stopping after the current chunk (again to stop at once; the run "
        "stays resumable)"]
    assert f"Continue with: fieldscope resume {run_dir}" in out
    reader = RunReader(run_dir)
    # stopped at the next safe point: before the first chunk (the signal came while the
    # initial gradient compiled) or after it (while the chunk compiled)
    assert reader.status == "stopped" and reader.progress["chunks"] in (0, 1)
    assert run_lock.holder(run_dir) is None

    resumed = CliProcess(["resume", run_dir], xla_cache)
    try:
        resumed.wait_for(_progress)
        if reader.progress["chunks"] == 0:      # no checkpoint: it starts again, saying so
            assert f"fieldscope: {run_dir}: the run ended before its first checkpoint (stopped); " \
                   "starting it again from the beginning with its stored config" in resumed.err
        resumed.proc.send_signal(signal.SIGINT)
        time.sleep(0.02)
        resumed.proc.send_signal(signal.SIGINT)
        code, out, err = resumed.finish()
    finally:
        resumed.kill()
    assert code == 128 + signal.SIGINT, "\n".join(err[-30:])
    assert not any("Traceback" in line for line in err), err
    assert len([line for line in err if line.startswith("fieldscope: stopped at once (SIGINT)")]) == 1, err
    reader = RunReader(run_dir)
    assert reader.status == "stopped" and run_lock.holder(run_dir) is None
    done = reader.progress["draws"]

    last = CliProcess(["resume", run_dir, "--num-samples", done + 10], xla_cache)
    try:
        code, out, err = last.finish()
    finally:
        last.kill()
    assert code == 0, "\n".join(err[-30:])
    reader = RunReader(run_dir)
    assert reader.status == "finished" and reader.progress["draws"] == done + 10
    warm, post = int(reader.stat("diverging", warmup=True).sum()), int(reader.stat("diverging").sum())
    last_line = [line for line in err if _progress(line)][-1]
    assert f"  div {post}{f' ({warm} in warmup)' if warm else ''}  ETA" in last_line, last_line


def test_the_start_up_notices_filtered_are_exactly_tensorflows_chatter():
    """What TensorFlow 2.21 writes while it loads on this CPU machine (copied from a run), and
    lines that must still reach the user."""
    noise = [
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        "I0000 00:00:1796136611.244489   15362 port.cc:153] oneDNN custom operations are on. You may "
        "see slightly different numerical results due to floating-point round-off errors from different "
        "computation orders. To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.",
        "I0000 00:00:1796136611.245538   15362 cudart_stub.cc:31] Could not find cuda drivers on your "
        "machine, GPU will not be used.",
    ]
    kept = ["E0000 00:00:1796134254.900820   29107 cuda_platform.cc:52] failed call to cuInit: INTERNAL",
            "ImportError: libcudnn.so.9: cannot open shared object file",
            "W tensorflow/core/framework/op_kernel.cc:1857] OP_REQUIRES failed at xla_ops.cc: RESOURCE_EXHAUSTED"]
    assert all(START_UP_NOISE.search(line) for line in noise)
    assert not any(START_UP_NOISE.search(line) for line in kept)


def test_a_first_ctrl_c_stops_a_calibration_at_once_before_its_first_batch(tmp_path, xla_cache):
    """Compiling a calibration's batch takes minutes at large batch sizes and waiting for it keeps
    nothing: a first SIGINT before the session's first batch is stored ends the command at once,
    the lock released, the same command resumable (issue #33)."""
    config = tiny_case(tmp_path, warmup=10, samples=20, chunk=5)
    out = tmp_path / "cal"
    process = CliProcess(["calibrate", config, "--simulations", 40, "--batch", 20, "--out", out], xla_cache)
    try:
        process.wait_for(lambda line: line == "calibrate: compiling")
        t0 = time.perf_counter()
        process.proc.send_signal(signal.SIGINT)
        code, _, err = process.finish()
    finally:
        process.kill()
    assert time.perf_counter() - t0 < 30
    assert code == 128 + signal.SIGINT, "\n".join(err[-30:])
    assert not any("Traceback" in line for line in err), err
    stopped = [line for line in err if line.startswith("fieldscope: stopped at once (SIGINT)")]
    assert len(stopped) == 1 and "Continue with: fieldscope calibrate" in stopped[0], err
    assert run_lock.holder(out) is None


def test_a_failed_calibration_of_an_unadjusted_sampler_says_how_to_tell_its_bias():
    from app.cli import unadjusted_hint
    from support.configs import field_config_text

    prior = {"kind": "power_law", "k_pivot": 0.1, "amplitude": 1.0, "index": -2.0}
    text = field_config_text(box_size=100.0, prior=prior, sampler={"algorithm": "hmc"})
    mclmc = field_config_text(box_size=100.0, prior=prior, sampler={"algorithm": "mclmc"})
    hint = unadjusted_hint(mclmc)
    assert "MCLMC" in hint and "no accept step" in hint and 'sampler.algorithm = "mams"' in hint
    assert unadjusted_hint(text) == ""                          # HMC: adjusted, nothing to add
    assert unadjusted_hint("not [ toml") == ""
