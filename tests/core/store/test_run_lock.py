"""The writer lock of a run directory (core.store.run_lock): one writer at a time, stale locks
of dead processes taken over, other hosts respected."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from core.store import run_lock
from core.store.checkpoint import CHECKPOINT_NAME, read_checkpoint, write_checkpoint
from core.store.run_store import STORE_NAME, RunReader, RunStoreError, RunStoreWriter

REPO = Path(__file__).resolve().parents[3]


def _write_lock(run_dir: Path, host: str, pid: int, **extra) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / run_lock.LOCK_NAME).write_text(json.dumps({"host": host, "pid": pid, "started": "t",
                                                          **extra}))


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    proc.kill()
    proc.wait()


def test_acquire_release_and_reacquire(tmp_path):
    run_dir = tmp_path / "run"
    lock = run_lock.acquire(run_dir)
    path = lock.path
    holder = run_lock.holder(run_dir)
    assert path.exists() and holder.pid == os.getpid() and holder.alive is True
    assert holder.host == socket.gethostname() and holder.token == lock.token
    assert run_lock.acquire(run_dir) == lock            # this process already holds it
    assert sorted(p.name for p in run_dir.iterdir()) == [run_lock.LOCK_NAME]   # no temporary left
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


# -- holding the lock: verified before every write ---------------------------------------


def test_verify_notices_a_deleted_lock_and_the_second_writer_it_let_in(tmp_path):
    run_dir = tmp_path / "run"
    lock = run_lock.acquire(run_dir)
    run_lock.verify(run_dir)
    lock.path.unlink()                                   # someone deletes the lock file
    with pytest.raises(run_lock.LockLost, match="writer lock was deleted") as info:
        run_lock.verify(run_dir)
    assert str(lock.path) in str(info.value)
    assert isinstance(info.value, RunStoreError)         # the engine and the CLI report it
    # a second writer (a real process) now gets in ...
    second = subprocess.run([sys.executable, "-c", "import os, sys; from core.store import run_lock; "
                             "run_lock.acquire(sys.argv[1]); print(os.getpid())", str(run_dir)],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    # ... and this process, told so by name, must not write; releasing leaves that lock alone
    with pytest.raises(run_lock.LockLost, match=f"taken over by another process {second.stdout.strip()}"):
        run_lock.verify(run_dir)
    run_lock.release(run_dir)
    assert run_lock.holder(run_dir).pid == int(second.stdout)
    with pytest.raises(run_lock.LockLost, match="does not hold"):
        run_lock.verify(run_dir)                         # released: nothing to write with


def test_a_lock_with_this_pid_but_another_token_is_a_previous_process(tmp_path):
    """pids restart (a container): a lock naming this pid that this process did not take
    was left by a dead process and is taken over, not mistaken for this process's own."""
    _write_lock(tmp_path, socket.gethostname(), os.getpid(), token="from-an-earlier-process")
    assert run_lock.holder(tmp_path).alive is False
    lock = run_lock.acquire(tmp_path)
    assert run_lock.holder(tmp_path).token == lock.token != "from-an-earlier-process"
    run_lock.verify(tmp_path)
    run_lock.release(tmp_path)


# Run in a fresh interpreter (the test process may hold TensorFlow and its threads: forking
# it is slow and unsafe): 8 forked processes per round wait at one barrier, then all call
# acquire on the same run directory; the winner stays alive until everyone has tried. Prints
# each round's outcomes, the lock's (pid, token) and the directory's listing as JSON.
RACE = """
import json, multiprocessing, os, sys
from core.store import run_lock

def race(run_dir, start, done, results):
    start.wait()
    try:
        lock = run_lock.acquire(run_dir)
        results.put(("won", os.getpid(), getattr(lock, "token", None)))
    except run_lock.LockHeld as err:
        results.put(("held", os.getpid(), str(err)))
    except BaseException as err:
        results.put(("error", os.getpid(), repr(err)))
    done.wait()

run_dir, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ctx, out = multiprocessing.get_context("fork"), []
for _ in range(rounds):
    start, done, results = ctx.Barrier(n), ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=race, args=(run_dir, start, done, results)) for _ in range(n)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=60) for _ in range(n)]
    for p in procs:
        p.join(timeout=60)
    with open(os.path.join(run_dir, run_lock.LOCK_NAME)) as fh:
        info = json.load(fh)
    out.append({"outcomes": outcomes, "lock": [info["pid"], info.get("token")],
                "listing": sorted(os.listdir(run_dir))})
print(json.dumps(out))
"""


@pytest.mark.parametrize("dead_lock", ["json", "unreadable"])
def test_racing_takeovers_of_a_dead_lock_have_exactly_one_winner(tmp_path, dead_lock):
    """8 processes start at one barrier to take over the same dead lock: exactly one gets it,
    the others are refused naming the winner; repeated 10 times (each round's lock is the
    last round's winner, dead by then). No temporary or claim file is left behind. (The
    unlink-then-O_EXCL takeover this replaced let two of them in about one round in five.)"""
    run_dir = tmp_path / "run"
    if dead_lock == "json":
        _write_lock(run_dir, socket.gethostname(), _dead_pid(), token="dead")
    else:
        run_dir.mkdir()
        (run_dir / run_lock.LOCK_NAME).write_text("{")
    result = subprocess.run([sys.executable, "-c", RACE, str(run_dir), "8", "10"], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    for rnd in json.loads(result.stdout):
        outcomes = rnd["outcomes"]
        assert [o for o in outcomes if o[0] == "error"] == []
        winners = [o for o in outcomes if o[0] == "won"]
        assert len(winners) == 1, outcomes
        (_, pid, token), = winners
        assert all(f"process {pid} on this machine" in o[2] for o in outcomes if o[0] == "held")
        assert rnd["lock"] == [pid, token]
        assert rnd["listing"] == [run_lock.LOCK_NAME]


def test_an_interrupted_takeover_is_refused_with_the_files_to_delete(tmp_path, monkeypatch):
    """A taker killed between its claim and its rename leaves the claim: the next writer
    is refused (after a short wait, not a hang) naming the lock and the claim file."""
    _write_lock(tmp_path, socket.gethostname(), _dead_pid(), token="dead")
    lock_path = tmp_path / run_lock.LOCK_NAME
    claim = tmp_path / f"{run_lock.TAKEOVER_PREFIX}{os.stat(lock_path).st_ino}"
    os.link(lock_path, claim)
    monkeypatch.setattr(run_lock, "_ATTEMPTS", 5)
    with pytest.raises(run_lock.LockHeld) as info:
        run_lock.acquire(tmp_path)
    assert str(lock_path) in str(info.value) and str(claim) in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([lock_path.name, claim.name])


# -- one mode policy for every file of a run directory ------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_the_store_the_checkpoint_and_the_lock_follow_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        run_dir = tmp_path / "run"
        run_lock.acquire(run_dir)
        RunStoreWriter.create(run_dir, config_text="", model_kind="integral", chains=1, num_warmup=1,
                              num_samples=1, thin=1, param_names=["A"],
                              observed={"y": (["time"], np.zeros(3))})
        write_checkpoint(run_dir, {"x": np.zeros(2)}, {"step": 1})
        run_lock.release(run_dir)
        run_lock.acquire(run_dir)
    finally:
        os.umask(old)

    def mode(p):
        return stat.S_IMODE(os.stat(p).st_mode)

    assert mode(run_dir / CHECKPOINT_NAME) == 0o666 & ~umask
    assert mode(run_dir / STORE_NAME / ".zattrs") == 0o666 & ~umask
    assert mode(run_dir / run_lock.LOCK_NAME) == 0o666 & ~umask
    assert mode(run_dir / STORE_NAME) == 0o777 & ~umask
    assert read_checkpoint(run_dir)[1] == {"step": 1}
    run_lock.release(run_dir)


# -- the engine stops when it is not the writer any more ----------------------------------


def test_the_engine_stops_without_writing_once_another_writer_took_its_lock(tmp_path, sleeper):
    """The lock is taken over by another (live) writer after the first chunk: the engine
    writes no further chunk, checkpoint or status, and fails with a message naming it."""
    from core.engine.engine import Engine
    from support.engine_cases import write_field_case

    config, text, *_ = write_field_case(tmp_path, shape=(4, 4, 4), warmup=10, samples=10, chunk=5,
                                        leapfrog=2, chains=1, thin=5, mass=False)
    run_dir = tmp_path / "run"
    events = []

    def take_over(event):
        events.append(event)
        if event.get("type") == "chunk":                 # another writer replaces the lock
            tmp = run_dir / "other.lock"
            tmp.write_text(json.dumps({"host": socket.gethostname(), "pid": sleeper.pid,
                                       "started": "t", "token": "other"}))
            os.replace(tmp, run_dir / run_lock.LOCK_NAME)

    with pytest.raises(RunStoreError, match=f"taken over by another process {sleeper.pid}"):
        Engine(config, text, run_dir, emit=take_over).start()
    assert sum(e.get("type") == "chunk" for e in events) == 1
    assert events[-1]["status"] == "failed" and f"process {sleeper.pid}" in events[-1]["error"]
    reader = RunReader(run_dir)
    assert reader.progress["chunks"] == 1 and reader.status == "running"   # left as it was
    assert read_checkpoint(run_dir)[1]["progress"]["chunks"] == 1
    assert run_lock.holder(run_dir).pid == sleeper.pid  # the other writer's lock is left alone
