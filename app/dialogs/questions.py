"""Every question the main window asks and waits for, one function each.

The window calls these and nothing of ``QMessageBox`` / ``QFileDialog`` / ``QInputDialog``
directly, so a test answers a question by patching the function here (``monkeypatch.setattr(
questions, "ask_save_changes", lambda *a: "discard")``), and a test that must never block can
make every unpatched question fail.

    ask_save_changes(parent, name, doing) -> "save" | "discard" | "cancel"
    ask_integer(parent, title, label, value, low, high) -> int | None   (None: cancelled)
    choose_open_file(parent, title, start, filters) -> str              ("" : cancelled)
    choose_save_file(parent, title, start, filters) -> str
    choose_directory(parent, title, start) -> str
    ask_accept_changed_inputs(parent, message) -> bool                  (True: continue anyway)
"""

from __future__ import annotations

from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

__all__ = ["ask_save_changes", "ask_integer", "choose_open_file", "choose_save_file",
           "choose_directory", "ask_accept_changed_inputs", "SAVE", "DISCARD", "CANCEL"]

SAVE, DISCARD, CANCEL = "save", "discard", "cancel"


def ask_save_changes(parent, name: str, doing: str) -> str:
    """The config ``name`` has changes that are not saved, and ``doing`` ("opening
    field.toml", "quitting") would lose them: Save, Discard or Cancel."""
    box = QMessageBox(QMessageBox.Icon.Question, "Unsaved changes",
                      f"{name} has changes that are not saved.",
                      QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard
                      | QMessageBox.StandardButton.Cancel, parent)
    box.setInformativeText(f"Save them before {doing}?")
    box.setDefaultButton(QMessageBox.StandardButton.Save)
    answer = box.exec()
    box.deleteLater()
    return {QMessageBox.StandardButton.Save: SAVE,
            QMessageBox.StandardButton.Discard: DISCARD}.get(QMessageBox.StandardButton(answer), CANCEL)


def ask_integer(parent, title: str, label: str, value: int, low: int, high: int) -> int | None:
    number, ok = QInputDialog.getInt(parent, title, label, value, low, high)
    return int(number) if ok else None


def choose_open_file(parent, title: str, start: str, filters: str) -> str:
    return QFileDialog.getOpenFileName(parent, title, start, filters)[0]


def choose_save_file(parent, title: str, start: str, filters: str) -> str:
    return QFileDialog.getSaveFileName(parent, title, start, filters)[0]


def choose_figure_file(parent, title: str, start: str, formats: dict) -> str:
    """A file to save a figure in; ``formats`` maps a suffix to its filter. A name typed without
    one of the suffixes gets the chosen filter's."""
    path, chosen = QFileDialog.getSaveFileName(parent, title, start, ";;".join(formats.values()))
    if path and not any(path.lower().endswith(suffix) for suffix in formats):
        path += next((suffix for suffix, name in formats.items() if name == chosen), next(iter(formats)))
    return path


def choose_directory(parent, title: str, start: str) -> str:
    return QFileDialog.getExistingDirectory(parent, title, start)


def ask_accept_changed_inputs(parent, message: str) -> bool:
    """Continuing a run was refused because an input file (data, mask, noise map, P(k) table,
    model file) differs from the one it began with (``message`` names it): continue anyway, the
    change recorded in the run's store, or not."""
    box = QMessageBox(QMessageBox.Icon.Warning, "An input file changed",
                      "A file this run reads is not the one it began with.",
                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, parent)
    box.setInformativeText(message.split(". Resuming would", 1)[0] + ".\n\nContinue anyway? The new draws "
                           "then sample another posterior beside the stored ones; the change is recorded "
                           "in the run's store.")
    box.button(QMessageBox.StandardButton.Yes).setText("Continue anyway")
    box.setDefaultButton(QMessageBox.StandardButton.No)
    answer = box.exec()
    box.deleteLater()
    return QMessageBox.StandardButton(answer) == QMessageBox.StandardButton.Yes
