"""The writer lock of a run directory (core.store.run_lock): one writer at a time, stale locks
of dead processes taken over, other hosts respected."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from core.store import run_lock

REPO = Path(__file__).resolve().parents[3]


def _write_lock(run_dir: Path, host: str, pid: int) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / run_lock.LOCK_NAME).write_text(json.dumps({"host": host, "pid": pid, "started": "t"}))


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    proc.kill()
    proc.wait()


def test_acquire_release_and_reacquire(tmp_path):
    run_dir = tmp_path / "run"
    path = run_lock.acquire(run_dir)
    holder = run_lock.holder(run_dir)
    assert path.exists() and holder.pid == os.getpid() and holder.alive is True
    assert holder.host == socket.gethostname()
    assert run_lock.acquire(run_dir) == path            # this process already holds it
    run_lock.release(run_dir)
    assert not path.exists() and run_lock.holder(run_dir) is None
    run_lock.release(run_dir)                            # releasing twice is harmless


def test_a_live_writer_is_refused_by_name(tmp_path, sleeper):
    run_dir = tmp_path / "run"
    _write_lock(run_dir, socket.gethostname(), sleeper.pid)
    with pytest.raises(run_lock.LockHeld, match=f"process {sleeper.pid} on this machine"):
        run_lock.acquire(run_dir)
    run_lock.release(run_dir)                            # not ours: left alone
    assert run_lock.holder(run_dir).pid == sleeper.pid


def test_the_lock_of_a_dead_process_is_taken_over(tmp_path, sleeper):
    run_dir = tmp_path / "run"
    _write_lock(run_dir, socket.gethostname(), sleeper.pid)
    sleeper.kill()
    sleeper.wait()
    assert run_lock.holder(run_dir).alive is False
    run_lock.acquire(run_dir)
    assert run_lock.holder(run_dir).pid == os.getpid()


def test_a_zombie_writer_counts_as_gone(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    # not reaped yet: a zombie until wait()
    import time

    for _ in range(200):
        with open(f"/proc/{proc.pid}/stat", "rb") as fh:
            if fh.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                break
        time.sleep(0.01)
    _write_lock(tmp_path, socket.gethostname(), proc.pid)
    try:
        assert run_lock.holder(tmp_path).alive is False
    finally:
        proc.wait()


def test_another_hosts_lock_is_respected_with_a_way_out(tmp_path):
    _write_lock(tmp_path, "some-other-host.example", 4242)
    assert run_lock.holder(tmp_path).alive is None
    with pytest.raises(run_lock.LockHeld) as info:
        run_lock.acquire(tmp_path)
    message = str(info.value)
    assert "host some-other-host.example" in message and "delete" in message
    assert run_lock.LOCK_NAME in message


@pytest.mark.parametrize("content", ["", "{", "[]", '{"host": 1}', '{"host": "h", "pid": "x"}'])
def test_an_unreadable_lock_is_replaced(tmp_path, content):
    (tmp_path / run_lock.LOCK_NAME).write_text(content)
    assert run_lock.holder(tmp_path) is None
    run_lock.acquire(tmp_path)
    assert run_lock.holder(tmp_path).pid == os.getpid()


def test_the_cli_refuses_to_write_a_run_another_process_writes(tmp_path, sleeper):
    """`fieldscope run --out DIR` where a live process holds DIR's lock: one line naming
    that process, a non-zero exit, and the directory left as it was."""
    from core.demo import write_demo

    paths = write_demo(tmp_path / "demo")
    run_dir = tmp_path / "run"
    _write_lock(run_dir, socket.gethostname(), sleeper.pid)
    result = subprocess.run([sys.executable, "-m", "app", "run", str(paths["field_config"]),
                             "--out", str(run_dir)], cwd=REPO, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert f"process {sleeper.pid} on this machine" in result.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == [run_lock.LOCK_NAME]
    assert run_lock.holder(run_dir).pid == sleeper.pid
