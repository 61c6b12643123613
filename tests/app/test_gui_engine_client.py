"""EngineClient: the engine process's events as Qt signals, in order, from a reader QThread."""

from __future__ import annotations

import time

import pytest

from app.engine_client import EngineClient, running_readers
from core.store.run_store import RunReader
from support.gui import tiny_case, use_xla_cache


@pytest.fixture
def client(qtbot, monkeypatch, xla_cache):
    """An engine client, not started yet (so a test can connect before ``ready``)."""
    use_xla_cache(monkeypatch, xla_cache)
    c = EngineClient()
    yield c
    c.shutdown()
    assert c.wait(60_000)
    assert not running_readers()


def record(client) -> list[str]:
    events: list[str] = []
    client.ready.connect(lambda: events.append("ready"))
    client.status.connect(lambda status, event: events.append(f"status:{status}"))
    client.chunk.connect(lambda event: events.append(f"chunk:{event['first_step']}"))
    client.error.connect(lambda message: events.append(f"error:{message}"))
    client.done.connect(lambda status: events.append(f"done:{status}"))
    client.engine_died.connect(lambda message: events.append("died"))
    return events


def test_signals_in_order_pause_resume_stop_errors_and_a_killed_engine(client, qtbot, tmp_path):
    config = tiny_case(tmp_path)                       # 10 warmup + 20 draws, chunks of 5
    events = record(client)
    with qtbot.waitSignal(client.ready, timeout=90_000):
        client.start()
    assert client.is_ready and client.ready_seconds > 0
    chunks = []
    client.chunk.connect(chunks.append)
    with qtbot.waitSignal(client.done, timeout=120_000) as blocker:
        assert client.start_run(config.read_text(), config.parent, tmp_path / "short")
    assert blocker.args == ["finished"]
    phases = ["warmup", "warmup", "sampling", "sampling", "sampling", "sampling"]
    expected = ["ready", "status:loading", "status:compiling"]
    for first, phase in zip(range(0, 30, 5), phases):
        expected += [f"status:{phase}", f"chunk:{first}"]
    expected += ["status:finished", "done:finished"]
    assert events == expected
    assert chunks[-1]["latest_field"].shape == (2, 8, 8, 8)
    assert chunks[-1]["progress"]["draws"] == 20
    assert RunReader(tmp_path / "short").progress["draws"] == 20

    # the same warm engine serves a second run: pause, resume, stop
    long = tiny_case(tmp_path, samples=100_000, name="long.toml")
    del events[:]
    with qtbot.waitSignal(client.chunk, timeout=120_000):
        client.start_run(long.read_text(), long.parent, tmp_path / "long")
    with qtbot.waitSignal(client.status, timeout=30_000,
                          check_params_cb=lambda status, event: status == "paused"):
        client.pause()
    n = len(chunks)
    qtbot.wait(600)
    assert len(chunks) == n                            # nothing happens while paused
    assert RunReader(tmp_path / "long").status == "paused"
    # a sampling chunk (the pause may come within the 2 warmup chunks: a loaded machine)
    with qtbot.waitSignal(client.chunk, timeout=30_000,
                          check_params_cb=lambda event: event["progress"]["draws"] > 0):
        client.resume()
    assert "status:running" in events
    with qtbot.waitSignal(client.done, timeout=30_000) as blocker:
        client.stop()
    assert blocker.args == ["stopped"]
    reader = RunReader(tmp_path / "long")
    assert reader.status == "stopped" and 0 < reader.progress["draws"] < 100_000
    assert [e for e in events if e.startswith(("error", "died"))] == []

    # a run that cannot start: an error signal naming the file, and the engine stays usable
    text = config.read_text().replace('"tiny_field.npz"', '"missing.npz"')
    del events[:]
    with qtbot.waitSignal(client.done, timeout=60_000):
        client.start_run(text, config.parent, tmp_path / "bad")
    errors = [e for e in events if e.startswith("error:")]
    assert errors and "missing.npz" in errors[0]
    assert events[-1] == "done:failed" and client.is_ready

    # killed: engine_died (no traceback, no hang); commands are refused until a respawn
    # (tests/app/test_gui_run.py restarts the engine from the window)
    with qtbot.waitSignal(client.engine_died, timeout=10_000) as blocker:
        client.proc.kill()
    assert "ended" in blocker.args[0]
    assert not client.is_ready and not client.is_running
    assert not client.start_run(config.read_text(), config.parent, tmp_path / "x")
    assert not client.proc.alive


def test_shutting_down_before_ready_does_not_wait_for_tensorflow(client, qtbot):
    client.start()
    qtbot.waitUntil(lambda: client.proc is not None, timeout=10_000)
    t0 = time.perf_counter()
    client.shutdown()
    assert client.wait(10_000)
    assert time.perf_counter() - t0 < 5.0
    assert not client.proc.alive


def test_an_engine_grown_past_its_budget_is_renewed_after_a_run(client, qtbot, tmp_path, monkeypatch):
    """Each run compiles XLA programs the process keeps (core.run.engine_process: renewal). With
    the budget at 0 MiB the idle engine is let go after each run and a fresh one loads: a new
    process, ``renewing`` then ``ready``, and the next run on it finishes; within the default
    budget (1 GiB; a tiny run grows far less) the same process serves the next run."""
    from core.run.engine_process import RENEW_ENV

    config = tiny_case(tmp_path)
    events = record(client)
    reasons = []
    client.renewing.connect(reasons.append)
    with qtbot.waitSignal(client.ready, timeout=90_000):
        client.start()
    first = client.engine_pid
    with qtbot.waitSignal(client.done, timeout=120_000):     # the default budget: kept
        assert client.start_run(config.read_text(), config.parent, tmp_path / "a")
    qtbot.wait(300)
    assert client.engine_pid == first and client.is_ready and reasons == []
    monkeypatch.setenv(RENEW_ENV, "0")
    with qtbot.waitSignal(client.ready, timeout=120_000):
        with qtbot.waitSignal(client.done, timeout=120_000):
            assert client.start_run(config.read_text(), config.parent, tmp_path / "b")
    assert len(reasons) == 1 and "a fresh one is loading" in reasons[0] and "GiB" in reasons[0]
    second = client.engine_pid
    assert second not in (None, first)
    assert events[-3:] == ["status:finished", "done:finished", "ready"]
    monkeypatch.setenv(RENEW_ENV, "100000")
    with qtbot.waitSignal(client.done, timeout=120_000) as blocker:
        assert client.start_run(config.read_text(), config.parent, tmp_path / "c")
    assert blocker.args == ["finished"] and client.engine_pid == second
    assert RunReader(tmp_path / "c").progress["draws"] == 20
    assert [e for e in events if e.startswith(("error", "died"))] == []
