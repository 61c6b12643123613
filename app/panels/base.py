"""``SetupPanel``: a scrolling form bound to the config state, with a message label per key."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QFormLayout, QFrame, QLabel, QLineEdit, QScrollArea, QVBoxLayout, QWidget

from app.panels.binding import _INVALID_EDIT, _alive, _message_label, bind_combo, bind_text
from app.state.config_state import ConfigState

__all__ = ["SetupPanel"]

# --------------------------------------------------------------------------- panels


class SetupPanel(QWidget):
    """Base: a scrolling form bound to ``state``; ``show_errors`` fills message labels."""

    title = ""
    #: state keys this panel edits (prefixes: "prior.index" covers its sub-keys)
    keys: tuple[str, ...] = ()

    def __init__(self, state: ConfigState, parent=None):
        super().__init__(parent)
        self.state = state
        self.messages: dict[str, QLabel] = {}
        self.edits: dict[str, QWidget] = {}
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        self.scroll = scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        outer.addWidget(scroll)
        body = QWidget()
        scroll.setWidget(body)
        self.body = QVBoxLayout(body)
        self.form = QFormLayout()
        self.form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.body.addLayout(self.form)

    # -- building helpers -----------------------------------------------------------------

    def _row(self, label: str, widget, key: str, form: QFormLayout | None = None,
             tip: str = "") -> QWidget:
        form = form or self.form
        form.addRow(label, widget)
        message = _message_label()
        form.addRow("", message)
        self.messages[key] = message
        if tip:
            label_item = form.labelForField(widget)
            if label_item is not None:
                label_item.setToolTip(tip)
            if isinstance(widget, QWidget):
                widget.setToolTip(tip)
        return widget

    def _number(self, key: str, label: str, tip: str = "", form=None) -> QLineEdit:
        edit = bind_text(self.state, key, QLineEdit())
        self.edits[key] = edit
        self._row(label, edit, key, form, tip)
        return edit

    def _choice(self, key: str, label: str, items, tip: str = "", form=None) -> QComboBox:
        combo = bind_combo(self.state, key, QComboBox(), [(str(i), i) for i in items]
                           if items and not isinstance(items[0], tuple) else items)
        self.edits[key] = combo
        self._row(label, combo, key, form, tip)
        return combo

    def _set_row_visible(self, widget: QWidget, key: str, visible: bool,
                         form: QFormLayout | None = None) -> None:
        form = form or self.form
        form.setRowVisible(widget, visible)
        message = self.messages.get(key)
        if message is not None:
            form.setRowVisible(message, visible and bool(message.text()))

    # -- errors -----------------------------------------------------------------------------

    def show_errors(self, errors: dict[str, str]) -> None:
        """Show each message next to its widget; clear the others."""
        for key, label in self.messages.items():
            text = errors.get(key, "")
            if not _alive(label):
                continue
            label.setText(text)
            parent_visible = self._row_visible(key)
            label.setVisible(bool(text) and parent_visible)
            edit = self.edits.get(key)
            if isinstance(edit, QLineEdit):
                edit.setStyleSheet(_INVALID_EDIT if text else "")

    def _row_visible(self, key: str) -> bool:
        edit = self.edits.get(key)
        return edit is None or not edit.isHidden()

    def error_keys(self) -> set[str]:
        return set(self.messages)


