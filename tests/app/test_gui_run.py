"""End to end in the window: Start, watch, pause, a killed engine, continue, close mid-run.

Each test drives a real engine process (TensorFlow loads there, never here) on an 8^3
data set with chunks of 5 steps.
"""

from __future__ import annotations

import time

import numpy as np
from PySide6.QtWidgets import QMessageBox

from app.main_window import VIEW_REFRESH_HZ
from core.run import resources
from core.store.checkpoint import read_checkpoint
from core.store.run_store import RunReader
from support.gui import TF_BEFORE, tf_modules, tiny_case
from support.window_actions import answer_questions, trigger, window_actions

READY_MS = 90_000       # TensorFlow's import in the engine, on a busy 2-core machine
RUN_MS = 120_000        # XLA compilation of the first chunk included


def test_a_run_from_start_to_finish(make_window, qtbot, tmp_path):
    config = tiny_case(tmp_path)
    t0 = time.perf_counter()
    window = make_window(config)
    assert time.perf_counter() - t0 < 5.0             # the engine loads in the background
    assert not window.start_action.isEnabled()
    assert window.engine_label.text() == "engine getting ready…"
    assert "engine" in window.start_action.toolTip()
    qtbot.waitUntil(window.start_action.isEnabled, timeout=READY_MS)
    assert window.engine_label.text().startswith("engine ready")
    assert not window.pause_action.isEnabled() and not window.stop_action.isEnabled()

    # the views are refreshed by a 10 Hz timer, never per message
    refreshes, messages = [], []
    real_refresh = window.views.refresh
    window.views.refresh = lambda *a, **k: (refreshes.append(time.perf_counter()),
                                            real_refresh(*a, **k))[1]
    window.client.chunk.connect(lambda event: messages.append(event))
    window.client.status.connect(lambda status, event: messages.append(event))
    started = time.perf_counter()
    with qtbot.waitSignal(window.run_finished, timeout=RUN_MS) as blocker:
        window.start_action.trigger()
        assert not window.start_action.isEnabled() and window.stop_action.isEnabled()
        assert window.view_timer.isActive()
    elapsed = time.perf_counter() - started
    assert blocker.args == ["finished"]
    # 100 ms; Qt's coarse timers may fire up to 5 % early
    interval = int(1000 / VIEW_REFRESH_HZ)
    assert window.view_timer.interval() == interval and not window.view_timer.isActive()
    assert len(refreshes) <= elapsed * 1000 / (0.9 * interval) + 3
    assert len([m for m in messages if m["type"] == "chunk"]) == 6
    # where the engine computes, beside its state; the store keeps it for the summary
    assert window.engine_label.text().startswith("engine ready") and " · " in window.engine_label.text()
    assert window.engine_label.text().endswith(RunReader(window.run_dir).attrs["device"])

    run_dir = window.run_dir
    assert run_dir.parent == config.parent / "runs" and run_dir.name.startswith("tiny-")
    reader = RunReader(run_dir)
    assert reader.status == "finished" and reader.progress["draws"] == 20
    assert reader.param("index").shape == (2, 20)
    assert window.progress.value() == window.progress.maximum() == 30
    assert window.run_state.n_steps == 30 and window.run_state.status == "finished"
    assert window.start_action.isEnabled()             # ready for the next run
    assert not window.continue_action.isEnabled()      # finished: nothing to continue

    # an engine-side failure is a dialog with the engine's message; the app goes on
    with qtbot.waitSignal(window.run_finished, timeout=RUN_MS) as blocker:
        assert window.start_run(run_dir=run_dir)       # a directory that holds a run
    assert blocker.args == ["failed"]
    title, text = window.last_message
    assert title == "The run failed" and "already holds a run" in text
    assert window.start_action.isEnabled() and window.isVisible()

    # a stored run opens into the panels and the views
    window.state["sampler.num_warmup"] = 99
    assert window.open_run_dir(run_dir)
    assert window.state["sampler.num_warmup"] == 10
    assert window.run_state.n_steps == 30 and "finished" in window.message_label.text()
    assert not window.open_run_dir(tmp_path)
    assert "not a Fieldscope run directory" in window.last_message[1]
    if not TF_BEFORE:
        assert tf_modules() == []                       # the GUI process never loads TF


def every_action(window, qtbot, tmp_path, config, monkeypatch) -> None:
    """Trigger every action but Pause and Stop (``support.window_actions``), questions
    answered; then the test's config is back in the panels."""
    other = tiny_case(tmp_path / "other", name="other.toml")
    data = tmp_path / "other" / "tiny_field.npz"
    answer_questions(monkeypatch, {
        "ask_save_changes": "discard", "ask_integer": None,
        "choose_open_file": {"Open config": str(other), "New from data": str(data), "Open data file": str(data)},
        "choose_save_file": lambda title, start, filters: str(tmp_path / "other" / "saved.toml"),
        "choose_directory": str(tmp_path / "other")})
    with qtbot.captureExceptions() as exceptions:
        for name, action in window_actions(window):
            if name not in ("pause", "stop"):
                trigger(window, qtbot, name, action)
                assert not exceptions, (window.runs.status, name, exceptions)
    assert window.isVisible() and window.open_config(config)


def _long_run_going(make_window, qtbot, tmp_path):
    """A window on a run of 100,000 draws, started, two chunks in: (config, window, chunk events)."""
    config = tiny_case(tmp_path, samples=100_000, name="long.toml")
    window = make_window(config)
    qtbot.waitUntil(window.start_action.isEnabled, timeout=READY_MS)
    chunks = []
    window.client.chunk.connect(chunks.append)
    window.start_action.trigger()
    qtbot.waitUntil(lambda: len(chunks) >= 2, timeout=RUN_MS)
    return config, window, chunks


def test_pause_a_killed_engine_continue_and_close_during_a_run(make_window, qtbot, tmp_path,
                                                              monkeypatch):
    config, window, chunks = _long_run_going(make_window, qtbot, tmp_path)

    # every other action of the window while the run is running, then while it is paused:
    # nothing raises, no dialog stays open, the run goes on (Pause and Stop are this test's)
    every_action(window, qtbot, tmp_path, config, monkeypatch)
    assert window.runs.status == "running"

    # pause and resume from the toolbar
    window.pause_action.trigger()
    qtbot.waitUntil(lambda: window.runs.status == "paused", timeout=30_000)
    assert window.pause_action.text() == "Resume" and window.stop_action.isEnabled()
    every_action(window, qtbot, tmp_path, config, monkeypatch)
    assert window.runs.status == "paused"
    n = len(chunks)
    window.pause_action.trigger()
    qtbot.waitUntil(lambda: len(chunks) > n, timeout=30_000)
    assert window.pause_action.text() == "Pause"

    # the engine is killed mid-run: a dialog, the window stays usable, the run is kept
    window.last_message = None
    window.client.proc.kill()
    qtbot.waitUntil(lambda: window.last_message is not None, timeout=10_000)
    title, text = window.last_message
    assert title == "The engine stopped" and str(window.run_dir) in text
    assert window.isVisible() and window.runs.status == "idle"
    assert not window.start_action.isEnabled() and window.restart_engine_action.isEnabled()
    assert window.engine_label.text() == "engine stopped"
    # the store the killed engine left is consistent and resumable: readers see exactly
    # the published draws, and the checkpoint is that chunk's or the one before
    reader = RunReader(window.run_dir)
    prog = reader.progress
    before = prog["draws"]
    assert before > 0 and reader.status == "running"        # nobody wrote a final status
    assert reader.stat("lp").shape == (2, before)
    assert reader.stat("lp", warmup=True).shape == (2, prog["warmup_draws"])
    assert reader.field_draws().shape[:2] == (2, prog["field_draws"])
    assert np.isfinite(reader.stat("lp")).all()
    _, meta = read_checkpoint(window.run_dir)
    assert meta["progress"]["chunks"] in (prog["chunks"], prog["chunks"] - 1)
    # the window goes on working: the config still validates, the views redraw
    assert window.validate() == {}
    window.views.refresh()

    # a new engine, then Continue run resumes the same run directory
    window.restart_engine_action.trigger()
    qtbot.waitUntil(window.start_action.isEnabled, timeout=READY_MS)
    assert window.continue_action.isEnabled()
    # Start is enabled only while the run fits in the free memory (core.run.resources)
    need = resources.estimate_for_config(window.state.config(), (8, 8, 8)).needed(False)
    monkeypatch.setattr(resources, "available_memory", lambda: need - 1)
    assert set(window.validate()) == {"grid.memory"}
    assert not window.start_action.isEnabled()
    assert "grid: the run needs about" in window.start_action.toolTip()
    monkeypatch.setattr(resources, "available_memory", lambda: need)
    assert window.validate() == {} and window.start_action.isEnabled()
    run_dir = window.run_dir
    n = len(chunks)
    window.continue_action.trigger()
    qtbot.waitUntil(lambda: len(chunks) > n + 1, timeout=RUN_MS)
    assert window.run_dir == run_dir
    assert RunReader(run_dir).progress["draws"] > before

    # closing during a run asks first, then stops after the chunk and closes
    window.confirm_close = True
    window.close()
    assert window.isVisible()
    assert window.last_message[0] == "A run is in progress"
    box = window._dialogs[-1]
    box.button(QMessageBox.StandardButton.Yes).click()
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=60_000)
    reader = RunReader(run_dir)
    assert reader.status == "stopped" and reader.progress["draws"] > before
    if not TF_BEFORE:
        assert tf_modules() == []


def test_continue_run_after_a_data_file_changed_asks_before_it_goes_on(make_window, qtbot, tmp_path, monkeypatch):
    """Continue run of a run whose data file changed since it began is refused by the engine,
    naming the file; the window asks (not a failure dialog): No keeps the run as it is, Yes
    continues it and the store records the accepted change (``--accept-changed-data``)."""
    from app.dialogs import questions

    config, window, chunks = _long_run_going(make_window, qtbot, tmp_path)
    window.stop_action.trigger()
    qtbot.waitUntil(lambda: window.runs.status == "idle", timeout=RUN_MS)
    run_dir = window.run_dir
    data = tmp_path / "tiny_field.npz"
    arrays = dict(np.load(data))
    arrays["data"] = arrays["data"] + 0.1
    np.savez(data, **arrays)

    asked = []
    monkeypatch.setattr(questions, "ask_accept_changed_inputs", lambda _parent, message: asked.append(message) or False)
    window.last_message = None
    window.continue_action.trigger()
    qtbot.waitUntil(lambda: bool(asked) and window.runs.status == "idle", timeout=RUN_MS)
    assert "tiny_field.npz (data.path) is not the file the run began with" in asked[0]
    assert window.last_message is None                       # no "The run failed" dialog
    qtbot.waitUntil(lambda: window.message_label.text().startswith("not continued: "), timeout=10_000)
    assert "input_changes" not in RunReader(run_dir).attrs

    monkeypatch.setattr(questions, "ask_accept_changed_inputs", lambda _parent, message: asked.append(message) or True)
    n = len(chunks)
    window.continue_action.trigger()
    qtbot.waitUntil(lambda: len(asked) == 2 and len(chunks) > n, timeout=RUN_MS)
    assert window.run_dir == run_dir
    changes = RunReader(run_dir).attrs["input_changes"]
    assert len(changes) == 1 and "tiny_field.npz (data.path)" in changes[0]["changes"][0]
    window.stop_action.trigger()
    qtbot.waitUntil(lambda: window.runs.status == "idle", timeout=RUN_MS)
