"""File > New from data: the question for a box size the data file does not state.

The config itself comes from ``core.config.from_data.config_for_data``; the window
(``MainWindow.new_from_data``) asks this dialog only when the file gives no box size. The
dialog is window-modal but does not block the event loop (``open()``, as the window's message
boxes), so a run elsewhere, a screenshot timer or a test driving it goes on.
"""

from __future__ import annotations

import math

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QLabel, QLineEdit, QVBoxLayout

__all__ = ["BoxSizeDialog", "parse_box_size"]


def parse_box_size(text: str) -> tuple[list[float] | float | None, str]:
    """``(box_size, problem)`` from what the user typed: one number (a cube) or three,
    separated by spaces or commas, each positive and finite; ``problem`` is "" when it is
    good, else what is wrong (and ``box_size`` is None)."""
    parts = [p for p in text.replace(",", " ").split() if p]
    if len(parts) not in (1, 3):
        return None, (f"give one number (a cube) or three (L0 L1 L2), got {len(parts)} "
                      f"value(s): {text.strip()!r}" if parts else "give the box's side length")
    try:
        sizes = [float(p) for p in parts]
    except ValueError:
        return None, f"{text.strip()!r} is not a number (or three numbers)"
    if not all(math.isfinite(x) and x > 0 for x in sizes):
        return None, f"the box size must be positive and finite, got {text.strip()!r}"
    return (sizes[0] if len(sizes) == 1 else sizes), ""


class BoxSizeDialog(QDialog):
    """Asks for the box size (one number or three) and its unit; ``chosen(box_size, unit)`` on
    OK (a float or a list of three floats, and a string), nothing on Cancel."""

    chosen = Signal(object, str)

    def __init__(self, data_name: str, shape, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Box size")
        self.setObjectName("box_size_dialog")
        layout = QVBoxLayout(self)
        intro = self.intro = QLabel(f"{data_name}{f' {tuple(shape)}' if shape else ''} does not state the size of the box it covers. "
                       "The box size sets the wavenumbers k of P(k) and so the prior's units.")
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form = QFormLayout()
        self.box_edit = QLineEdit()
        self.box_edit.setPlaceholderText("e.g. 100 (a cube) or 100 100 50")
        self.unit_edit = QLineEdit()
        self.unit_edit.setPlaceholderText("e.g. Mpc/h, kpc, m (optional)")
        form.addRow("Box size:", self.box_edit)
        form.addRow("Unit:", self.unit_edit)
        layout.addLayout(form)
        self.message = QLabel()
        self.message.setStyleSheet("color: #d9534f;")
        self.message.setWordWrap(True)
        layout.addWidget(self.message)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                        | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.box_edit.textChanged.connect(self._check)
        self._check()

    def _check(self) -> bool:
        _, problem = parse_box_size(self.box_edit.text())
        self.message.setText(problem if self.box_edit.text().strip() else "")
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(not problem)
        return not problem

    def accept(self) -> None:
        box, problem = parse_box_size(self.box_edit.text())
        if problem:
            self.message.setText(problem)
            return
        super().accept()
        self.chosen.emit(box, self.unit_edit.text().strip())
