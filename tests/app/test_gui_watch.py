"""Watching a run that another process writes: ``fieldscope run`` in a terminal, the window
following its store (File > Open run directory), then the finished run browsed.

The window has no engine of its own here (engine=None): everything it shows comes from the
store the separate process writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from core.store import run_lock
from core.store.run_store import STORE_NAME, RunReader
from support.gui import TF_BEFORE, tf_modules, tiny_case

REPO = Path(__file__).resolve().parents[2]
RUN_MS = 240_000


def _cli_run(config, run_dir, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.Popen([sys.executable, "-m", "app", "run", str(config), "--out", str(run_dir)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def test_watching_a_store_written_by_a_separate_run_process(make_window, qtbot, tmp_path, xla_cache):
    config = tiny_case(tmp_path, warmup=10, samples=200, chunk=5, thin=2)
    run_dir = tmp_path / "cli-run"
    window = make_window(engine=None)
    proc = _cli_run(config, run_dir,
                    {"TF_XLA_FLAGS": f"--tf_xla_persistent_cache_directory={xla_cache}"})
    try:
        # open it as soon as the store exists (it may still be "created")
        qtbot.waitUntil(lambda: (run_dir / STORE_NAME).exists() or proc.poll() is not None,
                        timeout=RUN_MS)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert window.open_run_dir(run_dir), window.last_message
        assert window.runs.watching == run_dir and window.runs.watch_timer.isActive()
        # the separate process holds the writer lock: the window must not offer to continue it
        writer = run_lock.holder(run_dir)
        assert writer is not None and writer.pid == proc.pid and writer.alive
        assert window.runs.resumable_run() is None and not window.continue_action.isEnabled()

        # draws appear in the window as they land in the store, chunk after chunk
        seen = []

        def grew():
            n = window.run_state.n_steps
            if not seen or n > seen[-1]:
                seen.append(n)
            return len(seen) >= 3 and seen[-1] > 0

        qtbot.waitUntil(grew, timeout=RUN_MS)
        assert proc.poll() is None or len(seen) >= 3
        progress = RunReader(run_dir).progress
        assert window.run_state.n_steps <= progress["warmup_draws"] + progress["draws"]
        assert "watching" in window.message_label.text()
        qtbot.waitUntil(lambda: proc.poll() is not None, timeout=RUN_MS)
    finally:
        if proc.poll() is None:
            proc.kill()
    out, err = proc.communicate()
    assert proc.returncode == 0, err[-3000:]

    # the watch ends with the run, and the window then holds exactly what the store holds
    qtbot.waitUntil(lambda: window.runs.watching is None, timeout=10_000)
    reader = RunReader(run_dir)
    st = window.run_state
    assert reader.status == "finished" and st.status == "finished"
    assert st.n_steps == 10 + 200
    for name in ("lp", "step_size"):
        np.testing.assert_array_equal(st.stat(name), np.concatenate(
            [reader.stat(name, warmup=True), reader.stat(name)], axis=1))
    mean, std, count = reader.field_moments()
    np.testing.assert_array_equal(st.mean, mean)
    assert st.moment_count == count == 200 * 2      # draws x chains
    assert "finished" in window.message_label.text()
    assert run_lock.holder(run_dir) is None            # the writer released its lock
    assert not window.continue_action.isEnabled()      # finished: nothing to continue
    if not TF_BEFORE:
        assert tf_modules() == []


def _killed_run(tmp_path, xla_cache, name):
    """A run directory whose `fieldscope run` was killed after 2 chunks (status "running")."""
    config = tiny_case(tmp_path, warmup=10, samples=100_000, chunk=5)
    run_dir = tmp_path / name
    proc = _cli_run(config, run_dir,
                    {"TF_XLA_FLAGS": f"--tf_xla_persistent_cache_directory={xla_cache}"})
    try:
        deadline = time.monotonic() + RUN_MS / 1000
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if RunReader(run_dir).progress["chunks"] >= 2:
                    break
            except Exception:
                pass
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.communicate()
    assert RunReader(run_dir).status == "running"        # killed: it never said otherwise
    return run_dir


def test_a_run_whose_writer_was_killed_can_be_continued(make_window, qtbot, tmp_path, xla_cache):
    """A stale lock (its process is gone) does not block Continue."""
    run_dir = _killed_run(tmp_path, xla_cache, "killed-run")
    writer = run_lock.holder(run_dir)
    assert writer is not None and writer.alive is False

    window = make_window(engine=None)
    assert window.open_run_dir(run_dir)
    assert window.runs.resumable_run() == run_dir


def test_a_run_written_on_another_machine_is_followed_and_not_taken_over(make_window, qtbot, tmp_path, xla_cache):
    """The store on a shared disk, its writer on a cluster node (issue #34): the window follows
    it, names the node, and offers no Continue (it cannot tell whether that process runs);
    the message says how to take it over."""
    run_dir = _killed_run(tmp_path, xla_cache, "node-run")
    lock = run_dir / run_lock.LOCK_NAME
    info = json.loads(lock.read_text())
    lock.write_text(json.dumps({**info, "host": "node-7.cluster.example", "pid": 4242}))
    window = make_window(engine=None)
    said = []
    window.runs.message.connect(said.append)
    assert window.open_run_dir(run_dir)
    assert window.runs.watching == run_dir
    assert window.runs.resumable_run() is None
    text = " ".join(said)
    assert "process 4242 on host node-7.cluster.example" in text and "following it" in text
    assert f"delete {lock}" in text
    lock.unlink()                                  # the user knows it ended: Continue is offered
    assert window.runs.resumable_run() == run_dir


def test_opening_a_run_whose_observed_data_is_damaged_says_so(make_window, qtbot, tmp_path):
    """Issue #33: the window showed empty views and "no data yet" for a run whose observed-data
    chunk was truncated; it now says the run cannot be shown, naming the file (whole in the
    message line's tooltip)."""
    import numpy as np

    from core.store.run_store import STORE_NAME, RunStoreWriter

    grid = (6, 5, 4)
    writer = RunStoreWriter.create(
        tmp_path / "run", config_text="", model_kind="field", chains=2, num_warmup=2, num_samples=4,
        thin=1, param_names=["index"], grid_shape=grid, k_centres=[0.1, 0.2], k_counts=[6, 12],
        observed={"data": (["x", "y", "z"], np.random.default_rng(0).normal(size=grid)),
                  "mask": (["x", "y", "z"], np.ones(grid, bool))})
    writer.set_status("finished")
    chunk = tmp_path / "run" / STORE_NAME / "observed_data" / "data" / "0.0.0"
    chunk.write_bytes(chunk.read_bytes()[:20])
    window = make_window(engine=None)
    window.open_run_dir(tmp_path / "run")
    text = window.message_label.toolTip()
    assert "cannot be shown" in text and "observed_data/data/0.0.0" in text
