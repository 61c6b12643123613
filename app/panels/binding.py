"""Binding widgets to ``ConfigState`` keys, and the labels and formats every panel uses."""

from __future__ import annotations

import shiboken6
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QLabel, QLineEdit

from app.state.config_state import ConfigState, format_value, parse_number
from core.run import resources

__all__ = [
    "ERROR_STYLE", "INFO_STYLE", "bind_text", "bind_combo", "bind_editable_combo", "bind_check"
]

ERROR_STYLE = "color: #d9534f;"
INFO_STYLE = "color: #6b6b6b;"
_INVALID_EDIT = "QLineEdit { border: 1px solid #d9534f; }"


def _alive(widget) -> bool:
    return widget is not None and shiboken6.isValid(widget)


# --------------------------------------------------------------------------- bindings


def bind_text(state: ConfigState, key: str, edit: QLineEdit, parse=parse_number) -> QLineEdit:
    """Two-way binding of a line edit to ``state[key]`` (``parse`` turns text into the
    value; for numbers, text that is not a number is kept and validation names it)."""
    edit.setText(format_value(state[key]))

    def from_widget(text):
        state[key] = parse(text)

    def from_state(value):
        if not _alive(edit):
            return
        current = parse(edit.text())
        if type(current) is type(value) and current == value or (
                isinstance(value, (int, float)) and not isinstance(value, bool)
                and isinstance(current, (int, float)) and current == value):
            return
        edit.setText(format_value(value))

    edit.textEdited.connect(from_widget)
    state.connect(key, from_state)
    edit.setObjectName(key)
    return edit


def bind_combo(state: ConfigState, key: str, combo: QComboBox, items) -> QComboBox:
    """A fixed-choice combo box: ``items`` are (label, value) pairs."""
    for label, value in items:
        combo.addItem(label, value)

    def sync(value):
        if not _alive(combo):
            return
        index = combo.findData(value)
        if index < 0:      # a value the file had that is not a choice: shown, flagged
            combo.addItem(f"{value} (unknown)", value)
            index = combo.count() - 1
        if combo.currentIndex() != index:
            combo.blockSignals(True)
            combo.setCurrentIndex(index)
            combo.blockSignals(False)

    sync(state[key])
    combo.currentIndexChanged.connect(lambda i: state.set(key, combo.itemData(i)))
    state.connect(key, sync)
    combo.setObjectName(key)
    return combo


def bind_editable_combo(state: ConfigState, key: str, combo: QComboBox) -> QComboBox:
    """An editable combo box (an array name chosen from a file, or typed)."""
    combo.setEditable(True)
    combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
    combo.setEditText(format_value(state[key]))

    def sync(value):
        if _alive(combo) and combo.currentText() != (value or ""):
            combo.blockSignals(True)
            combo.setEditText(value or "")
            combo.blockSignals(False)

    combo.currentTextChanged.connect(lambda text: state.set(key, text))
    state.connect(key, sync)
    combo.setObjectName(key)
    return combo


def bind_check(state: ConfigState, key: str, box: QCheckBox, setter=None) -> QCheckBox:
    box.setChecked(bool(state[key]))

    def sync(value):
        if _alive(box) and box.isChecked() != bool(value):
            box.blockSignals(True)
            box.setChecked(bool(value))
            box.blockSignals(False)

    box.toggled.connect(setter or (lambda on: state.set(key, bool(on))))
    state.connect(key, sync)
    box.setObjectName(key)
    return box


def _message_label() -> QLabel:
    label = QLabel()
    label.setWordWrap(True)
    label.setStyleSheet(ERROR_STYLE)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setVisible(False)
    return label


def _info_label() -> QLabel:
    label = QLabel()
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


# --------------------------------------------------------------------------- estimates


_si_time = resources.format_seconds
_bytes = resources.format_bytes


def _g(x, digits=4) -> str:
    return f"{x:.{digits}g}"


