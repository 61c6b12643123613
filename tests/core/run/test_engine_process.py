"""The engine in a spawned process: events in order, pause/resume/stop, a killed engine."""

from __future__ import annotations

import time

import pytest

from core.run.engine_process import EngineProcess
from core.run.messages import PAUSE, RESUME, STOP, check_event, control_command
from core.store.run_store import RunReader
from support.engine_cases import write_field_case


def collect(engine, until, timeout=180.0):
    events, deadline = [], time.time() + timeout
    while time.time() < deadline:
        event = engine.poll(0.2)
        if event is None:
            continue
        check_event(event)
        events.append(event)
        if until(event):
            return events
    raise AssertionError(f"timed out; got {[e.get('type') + ':' + str(e.get('status', '')) for e in events]}")


@pytest.fixture
def engine():
    proc = EngineProcess.spawn()
    yield proc
    proc.shutdown()


def test_events_arrive_in_order_and_the_process_serves_two_runs(engine, tmp_path):
    _, text, *_ = write_field_case(tmp_path, shape=(8, 8, 8), warmup=20, samples=30, chunk=10)
    ready = collect(engine, lambda e: e["type"] == "ready")
    assert ready[-1]["seconds"] > 0
    for name in ("first", "second"):
        engine.run(text, tmp_path, tmp_path / name)
        events = collect(engine, lambda e: e["type"] == "done")
        kinds = [e["type"] if e["type"] != "status" else e["status"] for e in events]
        assert kinds[:3] == ["loading", "compiling", "warmup"]
        assert kinds[-2:] == ["finished", "done"]
        chunks = [e for e in events if e["type"] == "chunk"]
        # chunk boundaries: every 10 steps, plus the end of the mass-matrix window (75 % of warmup)
        assert [c["first_step"] for c in chunks] == [0, 10, 15, 20, 30, 40]
        assert chunks[-1]["latest_field"].shape == (2, 8, 8, 8)
        assert RunReader(tmp_path / name).progress["draws"] == 30


def test_pause_resume_and_stop(engine, tmp_path):
    _, text, *_ = write_field_case(tmp_path, shape=(8, 8, 8), warmup=20, samples=2000, chunk=10)
    collect(engine, lambda e: e["type"] == "ready")
    engine.run(text, tmp_path, tmp_path / "run")
    collect(engine, lambda e: e["type"] == "chunk")
    engine.send(control_command(PAUSE))
    collect(engine, lambda e: e.get("status") == "paused")
    assert RunReader(tmp_path / "run").status == "paused"
    time.sleep(0.5)
    assert engine.poll(0.3) is None                       # nothing happens while paused
    engine.send(control_command(RESUME))
    collect(engine, lambda e: e["type"] == "chunk")
    engine.send(control_command(STOP))
    events = collect(engine, lambda e: e["type"] == "done")
    assert events[-1]["status"] == "stopped"
    reader = RunReader(tmp_path / "run")
    done = reader.progress["warmup_draws"] + reader.progress["draws"]
    assert reader.status == "stopped" and 0 < done < 2020


def test_bad_config_is_an_error_event_and_the_engine_stays_usable(engine, tmp_path):
    _, text, *_ = write_field_case(tmp_path, shape=(8, 8, 8), warmup=10, samples=10)
    collect(engine, lambda e: e["type"] == "ready")
    engine.run(text.replace('path = "data.npz"', 'path = "missing.npz"'), tmp_path, tmp_path / "bad")
    events = collect(engine, lambda e: e["type"] == "done")
    errors = [e for e in events if e["type"] == "error"]
    assert errors and "missing.npz" in errors[0]["message"]
    engine.run(text, tmp_path, tmp_path / "good")
    assert collect(engine, lambda e: e["type"] == "done")[-1]["status"] == "finished"


def test_a_killed_engine_is_reported_and_its_run_can_be_resumed(tmp_path):
    _, text, *_ = write_field_case(tmp_path, shape=(8, 8, 8), warmup=20, samples=5000, chunk=10)
    proc = EngineProcess.spawn()
    collect(proc, lambda e: e["type"] == "ready")
    proc.run(text, tmp_path, tmp_path / "run")
    collect(proc, lambda e: e["type"] == "chunk" and e["progress"]["draws"] > 0)
    proc.kill()
    with pytest.raises(EOFError):
        for _ in range(100):
            proc.poll(0.05)
    before = RunReader(tmp_path / "run").progress["draws"]
    again = EngineProcess.spawn()
    try:
        collect(again, lambda e: e["type"] == "ready")
        again.run(text, tmp_path, tmp_path / "run", resume=True, num_samples=before + 30)
        assert collect(again, lambda e: e["type"] == "done")[-1]["status"] == "finished"
    finally:
        again.shutdown()
    assert RunReader(tmp_path / "run").progress["draws"] == before + 30


def test_the_renewal_budget_and_the_memory_it_reads(monkeypatch):
    """``FIELDSCOPE_ENGINE_RENEW_MIB`` sets the growth past which an idle engine is renewed
    (a bad value: the default); the memory is read from /proc/PID/status (this process's own
    here, against /proc/self/statm's resident pages)."""
    import os

    from core.run.engine_process import RENEW_ENV, process_rss, renew_growth_bytes

    monkeypatch.delenv(RENEW_ENV, raising=False)
    assert renew_growth_bytes() == 1024 * 2**20
    for raw, expected in (("0", 0), ("2.5", int(2.5 * 2**20)), ("-3", 0), ("lots", 1024 * 2**20)):
        monkeypatch.setenv(RENEW_ENV, raw)
        assert renew_growth_bytes() == expected
    rss = process_rss(os.getpid())
    pages = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert rss > 10 * 2**20 and abs(rss - pages) < 0.05 * pages
    assert process_rss(None) is None and process_rss(2**22 + 12345) is None
