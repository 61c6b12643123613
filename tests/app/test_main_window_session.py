"""The window's session paths, driven through its actions as a user drives them: File >
Calibrate from a saved config, Save / Discard / Cancel before anything replaces or closes a
config with unsaved changes, no status of an old run left over when another config comes in,
and a data file shown at once (no modal box-size question; a config next to it offered).

Questions are answered by patching ``app.dialogs.questions`` (the ``answers`` fixture); a
question the test did not expect fails it. Windows have no engine (nothing here runs); runs
are real stores written by ``support.runs.stored_run``.
"""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtWidgets import QApplication, QDialog, QMessageBox

from app.dialogs import questions
from support.gui import tiny_case
from support.runs import fake_run, stored_run

QUESTIONS = ("ask_save_changes", "ask_integer", "choose_open_file", "choose_save_file", "choose_directory")


@pytest.fixture
def answers(monkeypatch):
    """``(given, asked)``: set ``given[name]`` to the answer of question ``name`` of
    ``app.dialogs.questions``; ``asked`` lists (name, arguments) of every question asked. A
    question without an answer raises (pytest-qt fails the test on an exception in a slot)."""
    given, asked = {}, []

    def patch(name):
        def ask(parent, *args):
            asked.append((name, args))
            if name not in given:
                raise AssertionError(f"unexpected question {name}{args}")
            return given[name]
        monkeypatch.setattr(questions, name, ask)

    for name in QUESTIONS:
        patch(name)
    return given, asked


def open_dialogs(window) -> list:
    """Visible dialogs other than the window's own non-blocking messages."""
    return [w for w in QApplication.topLevelWidgets()
            if isinstance(w, QDialog) and w.isVisible() and w not in window._dialogs]


def test_calibrate_from_a_saved_config_asks_the_number_of_simulations(make_window, tmp_path, answers):
    """#32 bug 1: File > Calibrate... raised "'bool' object is not callable" from every saved config."""
    given, asked = answers
    config = tiny_case(tmp_path)
    window = make_window(config, engine=None)
    given["ask_integer"] = None                           # the user cancels the number
    window.calibrate_action.trigger()
    assert [name for name, _ in asked] == ["ask_integer"]
    assert not hasattr(window, "calibration_window")
    # a saved config with changes is saved first (to its file, no question), then asked
    window.state["sampler.num_warmup"] = 12
    window.calibrate_action.trigger()
    assert not window.state.modified and "num_warmup = 12" in config.read_text()
    assert [name for name, _ in asked] == ["ask_integer", "ask_integer"]


# -- Save / Discard / Cancel ------------------------------------------------------------------------

def _new_from_data(window, qtbot, given, files):
    given["choose_open_file"] = str(files["data"])
    if given["ask_save_changes"] == "cancel":
        window.new_from_data_action.trigger()
        return
    with qtbot.waitSignal(window.new_config_done, timeout=30_000) as done:
        window.new_from_data_action.trigger()
    assert done.args == [True]


def _open_config(window, qtbot, given, files):
    given["choose_open_file"] = str(files["other"])
    window.open_config_action.trigger()


def _recent(window, qtbot, given, files):
    window.add_recent(files["other"])
    window.add_recent(files["config"])
    window._fill_recent_menu()
    entry = next(a for a in window.recent_menu.actions() if a.data() == str(files["other"]))
    entry.trigger()


def _open_run(window, qtbot, given, files):
    given["choose_directory"] = str(files["run"])
    window.open_run_action.trigger()


#: path -> (what the user does, what the window holds once it went ahead)
REPLACING = {
    "open config": (_open_config, lambda w, f: w.state.path == f["other"]),
    "new from data": (_new_from_data, lambda w, f: w.state.path is None
                      and w.state["data.path"] == "mine.npy"),
    "demo": (lambda w, qtbot, given, files: w.action["demo_1"].trigger(),
             lambda w, f: w.state.path.name == "field_exact.toml"),
    "recent": (_recent, lambda w, f: w.state.path == f["other"]),
    "run directory": (_open_run, lambda w, f: w.run_dir == f["run"]),
}


@pytest.fixture
def files(tmp_path):
    config = tiny_case(tmp_path / "a", name="a.toml")
    other = tiny_case(tmp_path / "b", name="b.toml")
    data = tmp_path / "c" / "mine.npy"
    data.parent.mkdir()
    np.save(data, np.random.default_rng(1).normal(size=(8, 8, 8)))
    run = stored_run(tmp_path / "run", other, "finished")
    return {"config": config, "other": other, "data": data, "run": run}


@pytest.mark.parametrize("path", list(REPLACING))
def test_unsaved_changes_are_saved_discarded_or_kept_before_a_config_is_replaced(
        path, make_window, qtbot, files, answers):
    given, asked = answers
    do, replaced = REPLACING[path]
    config = files["config"]
    window = make_window(config, engine=None)

    window.state["sampler.num_warmup"] = 12
    assert window.windowTitle().endswith("a.toml *")
    given["ask_save_changes"] = "cancel"
    do(window, qtbot, given, files)
    assert [name for name, _ in asked] == ["ask_save_changes"]      # asked first, nothing else
    assert window.state.path == config and window.state["sampler.num_warmup"] == 12
    assert window.state.modified and not replaced(window, files)

    given["ask_save_changes"] = "discard"
    do(window, qtbot, given, files)
    assert replaced(window, files) and not window.state.modified
    assert "num_warmup = 12" not in config.read_text()

    assert window.open_config(config)
    window.state["sampler.num_warmup"] = 13
    given["ask_save_changes"] = "save"
    do(window, qtbot, given, files)
    assert replaced(window, files)
    assert "num_warmup = 13" in config.read_text()                  # saved to its own file
    assert asked[0][1][0] == "a.toml" and all(name != "choose_save_file" for name, _ in asked)
    assert not open_dialogs(window)


@pytest.mark.parametrize("how", ["quit", "close"])
def test_unsaved_changes_are_asked_about_before_quitting(how, make_window, qtbot, tmp_path, answers):
    given, asked = answers
    config = tiny_case(tmp_path)

    def leave(window):
        window.confirm_close = True
        window.quit_action.trigger() if how == "quit" else window.close()

    for answer, closes, saved in (("cancel", False, False), ("discard", True, False), ("save", True, True)):
        window = make_window(config, engine=None)
        window.state["sampler.num_warmup"] = 14
        given["ask_save_changes"] = answer
        leave(window)
        assert asked[-1] == ("ask_save_changes", ("tiny.toml", "closing"))
        assert window.isVisible() != closes
        assert ("num_warmup = 14" in config.read_text()) == saved
    # an untitled config with changes: Save asks where
    window = make_window(engine=None)
    window.state["sampler.num_warmup"] = 15
    given["ask_save_changes"], given["choose_save_file"] = "save", ""      # ... and the user cancels that
    leave(window)
    assert window.isVisible() and asked[-1][0] == "choose_save_file"
    # no changes: no question
    window.state.load_file(config)
    n = len(asked)
    leave(window)
    assert not window.isVisible() and len(asked) == n


# -- no stale status across configs and runs (#32 bug 4) ---------------------------------------------

def test_a_replaced_config_leaves_no_status_of_the_old_run(make_window, qtbot, tmp_path, answers):
    given, _ = answers
    config = tiny_case(tmp_path / "a", name="a.toml")
    other = tiny_case(tmp_path / "b", name="b.toml")
    stopped = stored_run(tmp_path / "stopped", config, "stopped", checkpoint=True)
    finished = stored_run(tmp_path / "finished", config, "finished", warmup=6, samples=10)
    window = make_window(config, engine=None)

    # a stopped run: the status bar says so, and it is one to continue
    assert window.open_run_dir(stopped)
    assert window.phase_label.text() == "stopped" and window.status().resumable
    assert (window.progress.value(), window.progress.maximum()) == (10, 10) and window.progress.isVisible()
    # a finished run opened next: the bar and the views' summary at the top agree
    assert window.open_run_dir(finished)
    assert window.phase_label.text() == "finished" and not window.status().resumable
    assert (window.progress.value(), window.progress.maximum()) == (16, 16)
    summary = window.views.summary.text()
    assert summary.startswith("finished") and "step 16/16" in summary

    # a live run's chunk sets the rate and ETA; then another config comes in
    assert window.open_run_dir(stopped)
    events, _ = fake_run(num_warmup=6, num_samples=4, chunk_size=5)
    window._on_chunk(events[-1])
    assert "draws/s" in window.rate_label.text() and window.eta_label.text().startswith("ETA")
    assert window.open_config(other)
    assert window.run_dir is None and not window.status().resumable
    assert [label.text() for label in (window.phase_label, window.rate_label, window.eta_label,
                                       window.divergence_label)] == ["", "", "", ""]
    assert not window.progress.isVisible()
    window.refresh_views()
    assert window.run_state.chains is None and "finished" not in window.views.summary.text()

    # the same after File > New from data
    assert window.open_run_dir(finished)
    window._on_chunk(events[-1])
    data = tmp_path / "mine.npy"
    np.save(data, np.random.default_rng(2).normal(size=(8, 8, 8)))
    with qtbot.waitSignal(window.new_config_done, timeout=30_000):
        assert window.new_from_data(data)
    assert window.run_dir is None and window.rate_label.text() == "" and window.phase_label.text() == ""
    assert not window.progress.isVisible()


# -- a data file shown at once (#32 bug 5) -------------------------------------------------------------

def test_a_data_file_without_a_box_size_is_shown_at_once_in_voxels(make_window, qtbot, tmp_path):
    data = tmp_path / "mydata.npy"
    field = np.random.default_rng(3).normal(size=(12, 10, 8))
    np.save(data, field)
    window = make_window(engine=None)
    with qtbot.waitSignal(window.new_config_done, timeout=30_000) as done:
        assert window.new_from_data(data)
    assert done.args == [True] and not open_dialogs(window)        # no modal question
    assert window.state["grid.box_size"] == [12.0, 10.0, 8.0] and window.state["grid.unit"] == "voxel"
    assert not window.errors and not window.state.modified
    grid = window.panel["grid"]
    assert grid.asking_box_size and "mydata.npy does not state the size of the box" in grid.box_question.text()
    assert not grid.visibleRegion().isEmpty()                       # its dock is brought to the front
    qtbot.waitUntil(lambda: window.run_state.is_preview and window.run_state.grid_shape == (12, 10, 8),
                    timeout=10_000)
    window.refresh_views()
    np.testing.assert_array_equal(window.views.slices.images[0].image,
                                  field[:, :, window.views.slices.settings.cursor[2]].T.astype(np.float32))
    # the user answers in the panel: the question goes, the voxel unit with it
    grid.cube.setChecked(True)
    grid.lengths[0].clear()
    qtbot.keyClicks(grid.lengths[0], "60")
    assert not grid.asking_box_size and window.state["grid.box_size"] == 60.0
    assert window.state["grid.unit"] == ""


def test_a_config_next_to_the_data_is_offered(make_window, qtbot, tmp_path):
    config = tiny_case(tmp_path, name="mydata.toml")
    data = tmp_path / "mydata.npy"
    np.save(data, np.random.default_rng(4).normal(size=(8, 8, 8)))
    window = make_window(engine=None)

    def offer():
        assert window.new_from_data(data)
        box = window._dialogs[-1]
        assert box.objectName() == "config_beside_question" and box.isVisible()
        assert not window._from_data.busy                 # nothing read before the user chose
        buttons = {b.text(): b for b in box.buttons()}
        buttons["cancel"] = box.button(QMessageBox.StandardButton.Cancel)
        return buttons

    with qtbot.waitSignal(window.new_config_done, timeout=10_000) as done:
        offer()["Open mydata.toml"].click()
    assert done.args == [True] and window.state.path == config

    with qtbot.waitSignal(window.new_config_done, timeout=30_000) as done:
        offer()["New config from the data"].click()
    assert done.args == [True] and window.state.path is None and window.state["data.path"] == "mydata.npy"
    with qtbot.waitSignal(window.new_config_done, timeout=10_000) as done:
        offer()["cancel"].click()
    assert done.args == [False] and window.state["data.path"] == "mydata.npy"
