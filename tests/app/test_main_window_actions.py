"""Every menu and toolbar action of the window (``app.state.actions.ACTIONS``, the View menu's
dock toggles, File > Open recent's and File > Export's entries) triggered in every state of a
window without an engine: no config, an unsaved config, a saved one, a stopped run (one to
continue), a finished run, a failed run, a run another process is writing (running) and one it
paused. Each must raise nothing and leave no dialog open but the window's own messages and its
run browser (File > Runs…, closed after each action like those); every
question is answered through ``app.dialogs.questions`` (``support.window_actions``). The runs
are real stores (``support.runs.stored_run``); the two written "by another process" are locked
by this test's process, as a terminal's ``fieldscope run`` locks its run. The window's own
engine running and paused: tests/app/test_gui_run.py triggers every action then.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QApplication

from app.run_browser import RunBrowser
from core.store import run_lock
from support.gui import UrlCatcher, tiny_case
from support.runs import stored_run
from support.window_actions import answer_questions, dynamic_actions, trigger, window_actions


@pytest.fixture
def case(tmp_path, monkeypatch):
    config = tiny_case(tmp_path / "a", name="a.toml")
    other = tiny_case(tmp_path / "b", name="b.toml")
    data = tmp_path / "c" / "mine.npy"
    data.parent.mkdir()
    np.save(data, np.random.default_rng(1).normal(size=(8, 8, 8)))
    runs = {status: stored_run(tmp_path / "runs" / status, config, status, checkpoint=status == "stopped",
                               error="the sampler diverged" if status == "failed" else "")
            for status in ("stopped", "finished", "failed", "running", "paused")}
    locks = [run_lock.acquire(runs[s]) for s in ("running", "paused")]
    out = tmp_path / "out"
    out.mkdir()

    def save_as(title, start, filters):
        """Save config -> out/saved.toml; "Export P(k) as CSV" -> out/export_p_k_as_csv.csv"""
        if title == "Save config":
            return str(out / "saved.toml")
        return str(out / ("".join(c if c.isalnum() else "_" for c in title.lower()) + "." + title.split()[-1].lower()))
    answers = {
        "ask_save_changes": "discard",
        "ask_integer": None,                    # Calibrate: the number of simulations, cancelled
        "choose_open_file": {"Open config": str(other), "New from data": str(data),
                             "Open data file": str(data)},
        "choose_save_file": save_as,
        "choose_figure_file": lambda title, start, formats: str(out / (Path(start).stem + ".pdf")),
        "choose_directory": {"Open run directory": str(runs["finished"])},
    }
    asked = answer_questions(monkeypatch, answers)
    catcher = UrlCatcher()
    QDesktopServices.setUrlHandler("file", catcher, "open")
    yield {"config": config, "runs": runs, "asked": asked, "out": out, "urls": catcher.urls}
    QDesktopServices.unsetUrlHandler("file")
    for run in ("running", "paused"):
        run_lock.release(runs[run])
    del locks


def _unsaved(window, case):
    window.open_config(case["config"])
    window.state["sampler.num_warmup"] += 1        # a change (Save may have written the last one)


def _run(status):
    return lambda window, case: window.open_run_dir(case["runs"][status])


#: state -> how to bring the window into it (again, before every action)
STATES = {
    "no config": lambda window, case: window.clear_config(),
    "unsaved config": _unsaved,
    "saved config": lambda window, case: window.open_config(case["config"]),
    "stopped run": _run("stopped"),
    "finished run": _run("finished"),
    "failed run": _run("failed"),
    "running (another process)": _run("running"),
    "paused (another process)": _run("paused"),
}


def _check_state(name, window):
    status = window.status()
    assert status.resumable == (name == "stopped run"), name
    assert (window.runs.watching is not None) == name.endswith("(another process)"), name
    assert window.state.modified == (name == "unsaved config"), name


def _where(window):
    """What an action may change: the config, its file and changes, the run shown."""
    return (window.state.path, window.state.modified, window.state.document(), window.run_dir,
            window.runs.watching, window.isVisible())


@pytest.mark.parametrize("state", list(STATES))
def test_every_action_in_every_state(state, make_window, qtbot, case):
    enter = STATES[state]
    window = make_window(engine=None)
    window.add_recent(case["config"])
    window.add_recent(case["runs"]["finished"])

    def run(name, find):
        """Bring the window into the state (again, when the last action changed it), trigger."""
        if _where(window) != entered[0]:
            enter(window, case)
            entered[0] = _where(window)
        _check_state(state, window)
        trigger(window, qtbot, name, find())
        assert not exceptions, (state, name, exceptions)

    with qtbot.captureExceptions() as exceptions:
        enter(window, case)
        entered = [_where(window)]
        actions = dict(window_actions(window))
        for name, action in actions.items():
            if name != "quit":
                run(name, lambda a=action: a)
        if state == "finished run":           # File > Recent's and File > Export's entries
            # File > Runs… lists the run directories the window knows (here the recent one, before
            # Clear recent below), each read
            window.action["runs"].trigger()
            browser = next(d for d in window._dialogs if isinstance(d, RunBrowser) and d.isVisible())
            qtbot.waitUntil(lambda: not browser.busy, timeout=30_000)
            assert {r.path.name: (r.status, r.draws) for r in browser.records.values()} == {"finished": ("finished", 4)}
            trigger(window, qtbot, "runs", window.action["runs"])      # shown again, then closed
            assert not [w for w in QApplication.topLevelWidgets() if isinstance(w, RunBrowser) and w.isVisible()]
            for name in [name for name, _ in dynamic_actions(window)]:
                run(name, lambda n=name: dict(dynamic_actions(window))[n])
            written = sorted(p.suffix for p in case["out"].iterdir())
            # every view with a plot as a figure (PDF here), the whole window as PNG, the tables as CSV
            assert written.count(".pdf") >= 5 and ".png" in written and ".csv" in written, written
        run("quit", lambda: actions["quit"])
    assert not window.isVisible()                   # Quit (unsaved changes discarded) closed it
    assert [u.toLocalFile().endswith("README.md") for u in case["urls"]] == [True]
