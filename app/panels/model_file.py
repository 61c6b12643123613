"""The Model file panel: your own model in a Python file (``model.kind = "python"`` or
``likelihood.kind = "python"``; README, "Your own model").

It picks the file, lists its PARAMETERS with their priors as the file writes them (read as text
by ``core.io.model_source``: this process never executes a model file, nor imports TensorFlow),
lets each be overridden in the config (a number = fixed, or a prior table in TOML, written to
``[parameters]``, never to the file), re-reads the file when it changes on disk, and runs
``fieldscope check-model`` in a process of its own (**Check model**), showing its report.
"""

from __future__ import annotations

import os
import sys
import tomllib

from PySide6.QtCore import QFileSystemWatcher, QProcess, Qt
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QWidget,
)

from app.panels.base import SetupPanel
from app.panels.binding import ERROR_STYLE, INFO_STYLE, _alive, _message_label
from app.state.config_state import ConfigState
from core.config.writer import _toml_value
from core.io.regular_file import write_atomic
from core.run.tensorflow_env import START_UP_NOISE

__all__ = ["ModelFilePanel"]

#: the columns of the parameters table
NAME, IN_FILE, OVERRIDE = range(3)
_CHECK_CONFIG = ".fieldscope-check-model.toml"


def parse_override(text: str):
    """What the user typed as a parameter's value in this config: "" = the file's (None), a
    number, or a TOML prior table such as ``{ dist = "normal", loc = 0, scale = 1 }``; text
    that is neither stays text (validation names it)."""
    text = text.strip()
    if not text:
        return None
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except (tomllib.TOMLDecodeError, ValueError, RecursionError):
        return text


class ModelFilePanel(SetupPanel):
    title = "Model file"
    keys = ("model.file", "model.dtype", "likelihood.file", "parameters")

    def __init__(self, state: ConfigState, parent=None):
        super().__init__(state, parent)
        self._build_file_rows()
        self._build_table()
        self._build_check()
        self.body.addStretch(1)
        self.watcher = QFileSystemWatcher(self)
        self.watcher.fileChanged.connect(self._file_changed)
        for key in ("model.kind", "likelihood.kind", "model.file", "likelihood.file", "parameters"):
            state.connect(key, lambda _v: self.refresh())
        self.refresh()

    def _build_file_rows(self) -> None:
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setStyleSheet(INFO_STYLE)
        self.form.addRow(self.note)
        row = QWidget()
        h = QHBoxLayout(row)
        h.setContentsMargins(0, 0, 0, 0)
        self.file_edit = QLineEdit()
        self.file_edit.setObjectName("model_file.path")
        self.file_edit.setPlaceholderText("my_model.py, relative to the config")
        self.file_edit.textEdited.connect(self._file_typed)
        self.browse = QToolButton()
        self.browse.setText("Browse…")
        self.browse.clicked.connect(self._browse)
        h.addWidget(self.file_edit)
        h.addWidget(self.browse)
        self.form.addRow("File", row)
        self.file_message = _message_label()
        self.form.addRow("", self.file_message)
        self.dtype = self._choice("model.dtype", "dtype", ["float32", "float64"],
                                  tip="model.dtype: the dtype the model file's params and data arrive in")

    def _build_table(self) -> None:
        self.table = QTableWidget(0, 3)
        self.table.setObjectName("model_file.parameters")
        self.table.setHorizontalHeaderLabels(["parameter", "in the file", "in this config"])
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(NAME, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(IN_FILE, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(OVERRIDE, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setVisible(False)
        self.table.setToolTip("a number fixes the parameter; a table such as { dist = \"normal\", loc = 0.0, "
                              "scale = 0.5 } samples it with that prior (written to [parameters], not to the file)")
        self.table.itemChanged.connect(self._override_edited)
        self.form.addRow("Parameters", self.table)
        self.parameters_message = _message_label()
        self.form.addRow("", self.parameters_message)

    def _build_check(self) -> None:
        self.check_button = QPushButton("Check model")
        self.check_button.setObjectName("model_file.check")
        self.check_button.setToolTip("fieldscope check-model: loads the file, evaluates it at prior draws, "
                                     "compares its gradients with finite differences (in its own process)")
        self.check_button.clicked.connect(lambda _checked=False: self.check_model())
        self.form.addRow("", self.check_button)
        self.report = QPlainTextEdit()
        self.report.setObjectName("model_file.report")
        self.report.setReadOnly(True)
        self.report.setPlaceholderText("check-model's report appears here")
        self.report.setMinimumHeight(140)
        self.form.addRow(self.report)
        self.process: QProcess | None = None
        self._check_path = None
        self._report_of = None          # (key, model file) the report is about

    # -- the file -----------------------------------------------------------------------

    def _file_typed(self, text: str) -> None:
        key = self.state.model_file_key()
        if key is not None:
            self.state[key] = text

    def _browse(self) -> None:
        from app.dialogs import questions

        key = self.state.model_file_key()
        if key is None:
            return
        start = str(self.state.resolve(self.state[key]).parent) if self.state[key] else str(self.state.base_dir)
        path = questions.choose_open_file(self, "Open model file", start, "Python (*.py);;All files (*)")
        if path:
            try:
                relative = os.path.relpath(path, self.state.base_dir)
            except ValueError:           # another drive
                relative = path
            self.state[key] = relative if not relative.startswith("..") else path

    def _file_changed(self, path: str) -> None:
        """The model file changed on disk: read again (an editor that replaces the file drops it
        from the watcher: it is watched again)."""
        if os.path.exists(path) and path not in self.watcher.files():
            self.watcher.addPath(path)
        self.refresh()
        if _alive(self.note):
            self.note.setText(self.note.text() + "  (re-read: the file changed on disk)")

    def _watch(self, path) -> None:
        current = self.watcher.files()
        if current and current != [str(path)]:
            self.watcher.removePaths(current)
        if path is not None and os.path.isfile(path) and str(path) not in self.watcher.files():
            self.watcher.addPath(str(path))

    # -- display --------------------------------------------------------------------------

    def refresh(self) -> None:
        if not _alive(self.table):
            return
        s = self.state
        key = s.model_file_key()
        shown = (key, str(s.resolve(s[key])) if key and s[key] else None)
        if shown != self._report_of and self.process is None:    # a report of another file: gone
            self.report.clear()
            self.report.setStyleSheet("")
        self._report_of = shown
        self.setEnabled(True)
        for widget in (self.file_edit, self.browse, self.table, self.check_button):
            widget.setEnabled(key is not None)
        python = s["model.kind"] == "python"
        self.form.setRowVisible(self.dtype, python)
        if key is None:
            self.note.setText("No model file: choose Model \u201cpython\u201d (Data tab) for a scalar model of your "
                              "own, or Kind \u201cpython\u201d (Likelihood tab) for your own likelihood of the field.")
            self.file_edit.setText("")
            self.table.setRowCount(0)
            self._watch(None)
            return
        if self.file_edit.text() != s[key]:
            self.file_edit.setText(s[key])
        self.note.setText("log_likelihood(params, data) of a scalar model" if python else
                          "log_likelihood(field, params, data): the field's likelihood")
        source = s.model_source()
        self._watch(s.resolve(s[key]) if s[key] else None)
        file_parameters = {} if source is None or source.parameters is None else source.parameters
        if source is not None and source.parameters is None and not source.problem:
            self.note.setText(self.note.text() + "; PARAMETERS is computed in the file: Check model lists them")
        overrides = s["parameters"]
        names = list(file_parameters) + [n for n in overrides if n not in file_parameters]
        self.table.blockSignals(True)
        self.table.setRowCount(len(names))
        for row, name in enumerate(names):
            cells = (name, _shown(file_parameters[name]) if name in file_parameters else "(not in the file)",
                     _shown(overrides[name]) if name in overrides else "")
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column != OVERRIDE:
                    item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
                self.table.setItem(row, column, item)
        self.table.blockSignals(False)

    def _override_edited(self, item: QTableWidgetItem) -> None:
        if item.column() != OVERRIDE:
            return
        name = self.table.item(item.row(), NAME).text()
        overrides = dict(self.state["parameters"])
        value = parse_override(item.text())
        if value is None:
            overrides.pop(name, None)
        else:
            overrides[name] = value
        self.state["parameters"] = overrides

    def show_errors(self, errors: dict[str, str]) -> None:
        super().show_errors(errors)
        key = self.state.model_file_key()
        file_text = errors.get(key, "") if key else ""
        self.file_message.setText(file_text)
        self.file_message.setVisible(bool(file_text))
        self.file_edit.setStyleSheet("QLineEdit { border: 1px solid #d9534f; }" if file_text else "")
        parameter_text = "\n".join(v for k, v in errors.items() if k == "parameters" or k.startswith("parameters."))
        self.parameters_message.setText(parameter_text)
        self.parameters_message.setVisible(bool(parameter_text))

    def error_keys(self) -> set[str]:
        return set(self.messages) | {"model.file", "likelihood.file", "parameters"}

    # -- check-model ----------------------------------------------------------------------

    def check_model(self) -> bool:
        """Run ``fieldscope check-model`` on the config as it is now (the saved file when it
        holds it, else a temporary copy beside it, removed after), in a process of its own."""
        if self.process is not None:
            return False
        from core.config import ConfigError

        s = self.state
        try:
            text = s.to_toml()
        except ConfigError as err:
            self.report.setPlainText(f"the config is not valid yet: {err}")
            return False
        if s.path is not None and not s.modified:
            path = s.path
        else:
            path = s.base_dir / _CHECK_CONFIG
            try:
                write_atomic(path, text.encode("utf-8"))
            except OSError as err:
                self.report.setPlainText(f"cannot write {path} for the check: {err.strerror or err}")
                return False
            self._check_path = path
        self.report.setPlainText(f"checking {s.resolve(s[s.model_file_key()])} ...")
        self.report.setStyleSheet("")
        self.check_button.setEnabled(False)
        process = QProcess(self)
        process.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
        process.finished.connect(self._checked)
        self.process = process
        process.start(sys.executable, ["-m", "app", "check-model", str(path)])
        return True

    def _checked(self, exit_code: int, _status) -> None:
        process, self.process = self.process, None
        if self._check_path is not None:
            try:
                os.unlink(self._check_path)
            except OSError:
                pass
            self._check_path = None
        if not _alive(self.report):
            return
        output = bytes(process.readAll()).decode("utf-8", "replace") if process is not None else ""
        lines = [line for line in output.splitlines() if line.strip() and not START_UP_NOISE.search(line)]
        self.report.setPlainText("\n".join(lines))
        self.report.setStyleSheet("" if exit_code == 0 else ERROR_STYLE)
        self.check_button.setEnabled(self.state.model_file_key() is not None)
        if process is not None:
            process.deleteLater()


def _shown(value) -> str:
    try:
        return _toml_value(value)
    except (TypeError, ValueError):
        return repr(value)
