"""Triggering every action of the main window, with every question answered and none left
open: shared by the window's action test (tests/app/test_main_window_actions.py) and the
real-engine run test (tests/app/test_gui_run.py, while a run is running and paused).

``answer_questions(monkeypatch, answers)`` patches each function of ``app.dialogs.questions``
to answer from ``answers`` (question name -> answer, -> {dialog title: answer}, or -> a
function of the question's arguments after the parent); a
question without an answer fails the test, and so does any blocking Qt dialog opened around
those functions (``QDialog.exec``, ``QFileDialog``'s and ``QInputDialog``'s static questions)
instead of hanging it. ``window_actions(window)`` lists every action: each row of
``app.state.actions.ACTIONS``, the View menu's dock toggles; ``dynamic_actions`` the entries
of File > Open recent and File > Export. ``trigger(window, qtbot, name, action)`` triggers one,
waits for the work it started, fails on a dialog left open that the window does not own, and
closes the window's own (non-blocking) messages.
"""

from __future__ import annotations

from PySide6.QtWidgets import QApplication, QDialog, QFileDialog, QInputDialog, QMessageBox

from app.dialogs import questions
from app.state.actions import ACTIONS

QUESTIONS = ("ask_save_changes", "ask_integer", "choose_open_file", "choose_save_file", "choose_figure_file",
             "choose_directory")


def answer_questions(monkeypatch, answers: dict, asked: list | None = None) -> list:
    """Patch ``app.dialogs.questions`` (see the module docstring); returns the list of
    (name, arguments) of the questions asked."""
    asked = [] if asked is None else asked

    def patch(name):
        def ask(parent, *args):
            asked.append((name, args))
            if name not in answers:
                raise AssertionError(f"unexpected question {name}{args}")
            answer = answers[name]
            if callable(answer):
                return answer(*args)
            if isinstance(answer, dict):
                title = args[0]
                if title not in answer:
                    raise AssertionError(f"no answer for {name}({title!r})")
                answer = answer[title]
            return answer
        monkeypatch.setattr(questions, name, ask)

    for name in QUESTIONS:
        patch(name)

    def blocking(*args, **kwargs):
        raise AssertionError("a blocking dialog was opened outside app.dialogs.questions")

    for cls, names in ((QDialog, ("exec",)), (QMessageBox, ("exec",)),
                       (QFileDialog, ("getOpenFileName", "getSaveFileName", "getExistingDirectory")),
                       (QInputDialog, ("getInt", "getText", "getDouble", "getItem"))):
        for attr in names:
            monkeypatch.setattr(cls, attr, blocking)
    return asked


def window_actions(window) -> list[tuple[str, object]]:
    """(name, QAction) of every row of ``ACTIONS`` and of the View menu's dock toggles."""
    actions = [(spec.name, window.action[spec.name]) for spec in ACTIONS]
    actions += [(f"view {dock.windowTitle()}", dock.toggleViewAction()) for dock in window.docks]
    return actions


def dynamic_actions(window) -> list[tuple[str, object]]:
    """(name, QAction) of File > Open recent's and File > Export's entries, filled as when opened."""
    window._fill_recent_menu()
    window._fill_export_menu()
    return [(f"{menu.title()}: {a.text()}", a) for menu in (window.recent_menu, window.export_menu)
            for a in menu.actions() if not a.isSeparator()]


def foreign_dialogs(window) -> list:
    """Visible dialogs that are not the window's own non-blocking messages."""
    return [w for w in QApplication.topLevelWidgets()
            if isinstance(w, QDialog) and w.isVisible() and w not in window._dialogs]


def trigger(window, qtbot, name: str, action) -> None:
    """Trigger ``action`` (a disabled one does nothing, as a click on it), wait for the work it
    started, check that no dialog is left open but the window's own messages, close those."""
    action.trigger()
    qtbot.waitUntil(lambda: not window._from_data.busy, timeout=30_000)
    QApplication.processEvents()
    left = foreign_dialogs(window)
    assert not left, f"{name}: dialogs left open: {[d.windowTitle() for d in left]}"
    for box in list(window._dialogs):
        if box is not None and _alive(box) and box.isVisible():
            box.close()
    QApplication.processEvents()


def _alive(widget) -> bool:
    import shiboken6

    return shiboken6.isValid(widget)
