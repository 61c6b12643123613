"""The engine killed (kill -9) and interrupted (Ctrl-C) in a `fieldscope run` process, then
resumed: against an uninterrupted run. Apart from test_engine.py so that the test workers
(pytest-xdist, a file to a worker) run these process tests beside the in-process ones."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from core.engine.engine import Engine
from core.store.run_store import RunReader, stored_run_config
from support.engine_cases import assert_same_run, run, write_field_case


@pytest.mark.slow
def test_kill_minus_nine_then_resume_loses_nothing_but_the_chunk_in_flight(tmp_path):
    config, text, *_ = write_field_case(tmp_path, warmup=60, samples=400, chunk=20, shape=(16, 16, 16))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.Popen([sys.executable, "-m", "app", "run", str(tmp_path / "run.toml"),
                             "--out", str(tmp_path / "killed")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen = []
    try:
        deadline = time.time() + 400      # a guard against a hang, generous for loaded CI workers
        while time.time() < deadline and proc.poll() is None:    # a run that ended at once: no wait
            time.sleep(0.2)
            try:
                reader = RunReader(tmp_path / "killed")
            except Exception:
                continue
            prog = reader.progress
            seen.append(prog.get("draws", 0))
            # a store being written is readable and consistent
            assert reader.stat("lp").shape == (2, prog["draws"])
            if prog.get("draws", 0) >= 100:
                break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert seen and max(seen) >= 100 and sorted(seen) == seen
    reader = RunReader(tmp_path / "killed")
    assert reader.status == "running"           # killed: nobody wrote a final status
    done_before = reader.progress["draws"]
    assert done_before >= 100
    out = subprocess.run([sys.executable, "-m", "app", "resume", str(tmp_path / "killed")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    run(config, text, tmp_path / "straight")
    assert_same_run(tmp_path / "straight", tmp_path / "killed")


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_after_the_chunk_and_the_run_resumes(tmp_path):
    config, text, *_ = write_field_case(tmp_path, warmup=20, samples=100000, chunk=10, shape=(8, 8, 8))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.Popen([sys.executable, "-m", "app", "run", str(tmp_path / "run.toml"),
                             "--out", str(tmp_path / "run")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 400      # a guard against a hang, generous for loaded CI workers
        while time.time() < deadline and proc.poll() is None:    # a run that ended at once: no wait
            time.sleep(0.2)
            try:
                if RunReader(tmp_path / "run").progress.get("draws", 0) >= 20:
                    break
            except Exception:
                continue
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "fieldscope resume" in out
    reader = RunReader(tmp_path / "run")
    assert reader.status == "stopped"
    n = reader.progress["draws"]
    cfg, txt = stored_run_config(tmp_path / "run")
    assert Engine(cfg, txt, tmp_path / "run").resume(num_samples=n + 20) == "finished"
    assert RunReader(tmp_path / "run").progress["draws"] == n + 20
