"""File > Runs…: the runs Fieldscope knows, in one sortable table; open one, or compare several.

Where it looks and how each row is read: ``app.run_catalog`` (recent run directories, the data
file's folder, the config's folder, ``$XDG_DATA_HOME/fieldscope/runs``; two levels deep,
bounded, never following a link). Columns: the run's name, its status (running, paused,
stopped, finished, failed, interrupted: its writer is gone, or damaged), when it started
(local time), the model, the sampler, post-warmup draws stored / asked for, the worst R-hat
of its summary (the Diagnostics view's rows), the folder it is in and a note (a failed run's
error, what is damaged). Click a header to sort.

The folders are scanned and each run is read in a worker thread (``CancellableJob``): rows
appear at once with "reading…" and fill in as each run is read, and the dialog answers all
the while (a folder on a slow disk delays only its rows). Whatever was skipped (a folder it
cannot list, a link out of the folder, a scan cut short) is listed below the table.

Double-click a row (or Open) to show that run in the window (``MainWindow.open_recent``:
asks first about unsaved changes, refuses during a run). Select two or more and Compare:
``app.run_compare.RunComparison``, one window per comparison, closed with the browser.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Callable

from pyqtgraph.Qt import QtCore, QtGui, QtWidgets

from app.gui_gc import collect_in_gui_thread
from app.run_catalog import DAMAGED, MAX_DEPTH, Place, RunRecord, find_runs, local_time, read_record
from app.run_compare import RunComparison
from app.state.session import user_data_dir
from app.views.diagnostics import ATTENTION_COLOURS
from app.views.jobs import CancellableJob, WorkerRelay
from core.store.run_summary import format_cell, needs_attention

__all__ = ["RunBrowser", "COLUMNS", "places_for", "show_run_browser", "READING"]

#: (key, header) of the table's columns, in order
COLUMNS = (("run", "Run"), ("status", "Status"), ("started", "Started"), ("model", "Model"),
           ("sampler", "Sampler"), ("draws", "Draws"), ("rhat", "Worst R-hat"), ("folder", "Folder"),
           ("note", "Note"))
COLUMN = {key: i for i, (key, _) in enumerate(COLUMNS)}
#: the status of a row found and not read yet
READING = "reading…"
SORT_ROLE = QtCore.Qt.ItemDataRole.UserRole + 1
PATH_ROLE = QtCore.Qt.ItemDataRole.UserRole + 2
VALUE_ROLE = QtCore.Qt.ItemDataRole.UserRole
STATUS_COLOURS = {DAMAGED: "#b3261e", "failed": "#b3261e", "interrupted": "#c26a00",
                  "running": "#2e7d32", "paused": "#2e7d32"}
STATUS_TIPS = {
    "interrupted": "the process writing it is gone; open it and Run > Continue run resumes it",
    "running": "being written by a run (this window's or another process's)",
    "stopped": "stopped before its end; open it and Run > Continue run resumes it",
    DAMAGED: "the run store cannot be read: see the note",
}
HEADER_TIPS = {
    "status": "as the run store records it; interrupted: its writer is gone; damaged: it cannot be read",
    "started": "when the run was created (local time); the tooltip says when it was last written",
    "draws": "post-warmup draws per chain stored / asked for",
    "rhat": "the largest rank-normalised split R-hat of the run's parameters and lp, pooled over the "
            "chains (the Diagnostics view's table); red above 1.01",
}
#: skipped entries named below the table (all of them in its tooltip)
SHOWN_SKIPPED = 4


def places_for(window) -> list[Place]:
    """Where the window's browser looks (``app.run_catalog``): the recent run directories, the
    data file's folder, the saved config's folder, the per-user runs folder; each folder once."""
    places = [Place("recent", p, scan=False) for p in window.recent_paths() if p.suffix != ".toml"]
    state = window.state
    try:
        data = state["data.path"]
        if isinstance(data, str) and data:
            places.append(Place("data folder", state.resolve(data).parent))
    except (KeyError, ValueError, OSError):
        pass
    if state.path is not None:
        places.append(Place("config folder", Path(state.path).parent))
    places.append(Place("user runs", user_data_dir() / "runs"))
    seen, out = set(), []
    for place in places:
        key = (os.path.realpath(place.path), place.scan)
        if key not in seen:
            seen.add(key)
            out.append(place)
    return out


def show_run_browser(window, dialogs) -> "RunBrowser":
    """File > Runs…: the window's browser (the one among ``dialogs`` if it is open, else a new
    one), looking again where the window says, shown and raised."""
    browser = next((d for d in dialogs if isinstance(d, RunBrowser)), None)
    if browser is None:
        browser = RunBrowser(places_for(window), window.open_recent, window)
    else:
        browser.places = places_for(window)
        browser.rescan()
    browser.show()
    browser.raise_()
    browser.activateWindow()
    return browser


def _scan(places, report) -> int:
    """The worker: find the runs, then read them one by one (each reported as it is read)."""
    found = find_runs(places)
    report(("found", found))
    for path, labels in found.runs.items():
        report(("record", read_record(path, labels)))
    return len(found.runs)


def _home(path: Path) -> str:
    text, home = str(path), os.path.expanduser("~")
    return "~" + text[len(home):] if home not in ("", "/") and (text + "/").startswith(home + "/") else text


class RunBrowser(QtWidgets.QDialog):
    """The run browser over ``places`` (``app.run_catalog.Place``); ``open_run(path)`` shows a
    run (None: no Open). ``records``: path -> the ``RunRecord`` of each row read; ``skipped``:
    (path, reason) of what the scan skipped; ``busy`` while it scans; ``scanned`` is emitted
    when every row is read."""

    scanned = QtCore.Signal()

    def __init__(self, places, open_run: Callable[[Path], object] | None = None, parent=None):
        super().__init__(parent)
        collect_in_gui_thread()       # cycles of Qt objects freed in the GUI thread only (app.gui_gc)
        self.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setWindowTitle("Runs")
        self.places = list(places)
        self.open_run = open_run
        self.records: dict[Path, RunRecord] = {}
        self.skipped: list[tuple[Path, str]] = []
        self.comparisons: list[RunComparison] = []
        self.busy = False
        self.job: CancellableJob | None = None
        self.relay = WorkerRelay(self)
        self.relay.progress.connect(self._on_progress)
        self.relay.finished.connect(self._on_finished)
        self.relay.failed.connect(self._on_failed)
        self._build()
        self.resize(1280, 560)
        self.rescan()

    # -- building --------------------------------------------------------------------------------

    def _build(self) -> None:
        self.where = QtWidgets.QLabel()
        self.where.setWordWrap(True)
        self.where.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.model = QtGui.QStandardItemModel(0, len(COLUMNS), self)
        self.model.setHorizontalHeaderLabels([header for _, header in COLUMNS])
        for key, tip in HEADER_TIPS.items():
            self.model.setHeaderData(COLUMN[key], QtCore.Qt.Orientation.Horizontal, tip,
                                     QtCore.Qt.ItemDataRole.ToolTipRole)
        self.proxy = QtCore.QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.model)
        self.proxy.setSortRole(SORT_ROLE)
        self.proxy.setDynamicSortFilter(True)
        self.table = QtWidgets.QTableView()
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(COLUMN["started"], QtCore.Qt.SortOrder.DescendingOrder)
        self.table.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setTextElideMode(QtCore.Qt.TextElideMode.ElideMiddle)
        self.table.doubleClicked.connect(lambda _index: self.open_selected())
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._update_buttons())
        self.status = QtWidgets.QLabel()
        self.skipped_label = QtWidgets.QLabel()
        self.skipped_label.setWordWrap(True)
        self.skipped_label.setStyleSheet("color: #a0a0a0")
        self.skipped_label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        buttons = QtWidgets.QDialogButtonBox()
        self.rescan_button = buttons.addButton("Rescan", QtWidgets.QDialogButtonBox.ButtonRole.ResetRole)
        self.open_button = buttons.addButton("Open", QtWidgets.QDialogButtonBox.ButtonRole.ActionRole)
        self.compare_button = buttons.addButton("Compare", QtWidgets.QDialogButtonBox.ButtonRole.ActionRole)
        close = buttons.addButton(QtWidgets.QDialogButtonBox.StandardButton.Close)
        self.rescan_button.clicked.connect(self.rescan)
        self.open_button.clicked.connect(self.open_selected)
        self.compare_button.clicked.connect(self.compare_selected)
        close.clicked.connect(self.close)
        self.open_button.setToolTip("show the selected run in the window (or double-click it)")
        self.compare_button.setToolTip("overlay the traces, P(k) and summaries of the selected runs")
        self.open_button.setVisible(self.open_run is not None)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(self.where)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.status)
        layout.addWidget(self.skipped_label)
        layout.addWidget(buttons)

    def _describe_places(self) -> str:
        parts = []
        for place in self.places:
            if place.scan:
                parts.append(f"{place.label}: {_home(Path(place.path))} ({MAX_DEPTH} levels)")
        recent = sum(1 for place in self.places if not place.scan)
        if recent:
            parts.insert(0, f"{recent} recent run director{'y' if recent == 1 else 'ies'}")
        return "Looking in: " + "; ".join(parts) if parts else "Nowhere to look"

    # -- scanning ------------------------------------------------------------------------------

    def rescan(self) -> None:
        """Forget the rows and scan the places again (in the worker thread)."""
        if self.job is not None:
            self.job.cancel()
        self.model.removeRows(0, self.model.rowCount())
        self._rows: dict[str, int] = {}
        self.records.clear()
        self.skipped = []
        self.where.setText(self._describe_places())
        self.status.setText("scanning…")
        self.skipped_label.setVisible(False)
        self.busy = True
        self._update_buttons()
        places = list(self.places)
        self.job = CancellableJob(lambda report: _scan(places, report), self.relay,
                                  name="fieldscope-run-browser").start()

    def _on_progress(self, job, partial) -> None:
        if job is not self.job:
            return
        kind, value = partial
        if kind == "found":
            self.skipped = list(value.skipped)
            for path, labels in value.runs.items():
                self._add_row(path, labels)
            self._show_skipped()
            self.status.setText(f"reading {len(value.runs)} runs…")
        else:
            self.records[value.path] = value
            self._fill_row(value)

    def _on_finished(self, job, count) -> None:
        if job is not self.job:
            return
        self.busy = False
        damaged = sum(1 for r in self.records.values() if r.damaged)
        self.status.setText(f"{count} run{'' if count == 1 else 's'}" +
                            (f", {damaged} damaged" if damaged else "") +
                            ("" if count else ": none found") +
                            "; select two or more to compare them")
        self._fit_columns()
        self._update_buttons()
        self.scanned.emit()

    def _on_failed(self, job, message: str) -> None:
        if job is self.job:
            self.busy = False
            self.status.setText(f"the scan failed: {message}")
            self.scanned.emit()

    def _show_skipped(self) -> None:
        lines = [f"{_home(path)}: {reason}" for path, reason in self.skipped]
        if not lines:
            self.skipped_label.setVisible(False)
            return
        shown = lines[:SHOWN_SKIPPED]
        if len(lines) > len(shown):
            shown.append(f"… and {len(lines) - len(shown)} more (hover to see them all)")
        self.skipped_label.setText(f"Skipped ({len(lines)}):\n" + "\n".join(shown))
        self.skipped_label.setToolTip("\n".join(lines))
        self.skipped_label.setVisible(True)

    def _fit_columns(self) -> None:
        """Every column but the note as wide as its contents, none wider than a third of the
        table; the note takes the rest (a long note or path is elided: its tooltip has it whole)."""
        widest = max(160, self.table.viewport().width() // 3)
        for column in range(len(COLUMNS) - 1):
            self.table.resizeColumnToContents(column)
            if self.table.columnWidth(column) > widest:
                self.table.setColumnWidth(column, widest)

    # -- rows --------------------------------------------------------------------------------

    def _add_row(self, path: Path, labels) -> None:
        items = [QtGui.QStandardItem() for _ in COLUMNS]
        for item in items:
            item.setData(str(path), PATH_ROLE)
        self._rows[str(path)] = self.model.rowCount()      # rows are only ever appended
        self.model.appendRow(items)
        self._fill_row(RunRecord(path, tuple(labels), READING))

    def _fill_row(self, record: RunRecord) -> None:
        row = self._rows.get(str(record.path), -1)
        if row < 0:
            return
        for key, (text, sort, tip) in _cells(record).items():
            item = self.model.item(row, COLUMN[key])
            item.setText(text)
            item.setData(sort, SORT_ROLE)
            item.setToolTip(tip)
            if key in ("draws", "rhat"):
                item.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
        item = self.model.item(row, COLUMN["rhat"])
        item.setData(record.worst_rhat, VALUE_ROLE)
        red = needs_attention("r_hat", record.worst_rhat)       # as the Diagnostics view marks it
        item.setBackground(QtGui.QColor(ATTENTION_COLOURS["r_hat"]) if red else QtGui.QBrush())
        item.setForeground(QtGui.QColor("#ffffff") if red else QtGui.QBrush())
        colour = STATUS_COLOURS.get(record.status)
        self.model.item(row, COLUMN["status"]).setForeground(QtGui.QColor(colour) if colour else QtGui.QBrush())

    # -- selection and actions -----------------------------------------------------------------

    def selected_records(self) -> list[RunRecord | None]:
        """The selected rows' records in the table's order (None for a row not read yet)."""
        rows = sorted(index.row() for index in self.table.selectionModel().selectedRows())
        paths = [Path(self.proxy.index(row, 0).data(PATH_ROLE)) for row in rows]
        return [self.records.get(path) for path in paths]

    def select_paths(self, paths) -> None:
        """Select the rows of ``paths`` (for tests and scripts)."""
        wanted = {str(Path(os.path.realpath(p))) for p in paths}
        selection = QtCore.QItemSelection()
        for row in range(self.proxy.rowCount()):
            if self.proxy.index(row, 0).data(PATH_ROLE) in wanted:
                selection.select(self.proxy.index(row, 0), self.proxy.index(row, len(COLUMNS) - 1))
        self.table.selectionModel().select(selection, QtCore.QItemSelectionModel.SelectionFlag.ClearAndSelect)

    def _update_buttons(self) -> None:
        chosen = self.selected_records()
        readable = [r for r in chosen if r is not None and not r.damaged]
        self.open_button.setEnabled(len(chosen) == 1 and len(readable) == 1)
        self.compare_button.setEnabled(len(readable) >= 2)

    def open_selected(self) -> bool:
        """Show the one selected run in the window (``open_run``)."""
        chosen = self.selected_records()
        if len(chosen) != 1 or chosen[0] is None or self.open_run is None:
            return False
        if chosen[0].damaged:
            self.status.setText(f"{chosen[0].path} cannot be opened: {chosen[0].note}")
            return False
        return bool(self.open_run(chosen[0].path))

    def compare_selected(self) -> RunComparison | None:
        """A comparison window of the selected readable runs (two or more)."""
        readable = [r for r in self.selected_records() if r is not None and not r.damaged]
        if len(readable) < 2:
            self.status.setText("select two or more runs that can be read to compare them")
            return None
        window = RunComparison([r.path for r in readable], self)
        self.comparisons = [c for c in self.comparisons if _alive(c)] + [window]
        window.show()
        return window

    def closeEvent(self, event) -> None:
        if self.job is not None:
            self.job.cancel()
        for window in self.comparisons:
            if _alive(window):
                window.close()
        super().closeEvent(event)


def _draws_cell(record: RunRecord) -> tuple[str, object, str]:
    if record.draws is None:
        return "", -1, ""
    text = f"{record.draws}/{record.total}" if record.total is not None else str(record.draws)
    tip = f"{record.draws} post-warmup draws per chain stored of {record.total}"
    if record.chains:
        tip += f", {record.chains} chain{'' if record.chains == 1 else 's'}"
    if record.warmup is not None:
        done, wanted = record.warmup
        tip += f"; warmup {done}/{wanted}"
        if record.draws == 0 and wanted and done < wanted:
            text += f" (warmup {done}/{wanted})"
    return text, record.draws, tip


def _rhat_cell(record: RunRecord) -> tuple[str, object, str]:
    value = record.worst_rhat
    if record.status in (READING, DAMAGED) and math.isnan(value):
        return "", -1.0, ""
    if math.isnan(value):
        return "–", -1.0, "undefined: fewer than 4 post-warmup draws, or one chain"
    return (format_cell("r_hat", value), value,
            f"largest R-hat of the run's summary: {record.worst_quantity} (pooled over the chains)")


def _cells(record: RunRecord) -> dict[str, tuple[str, object, str]]:
    """(text, sort key, tooltip) of each column of ``record``'s row."""
    path = record.path
    found = f"found in: {', '.join(record.found_in)}" if record.found_in else ""
    tip = STATUS_TIPS.get(record.status, "")
    return {
        "run": (path.name, path.name.lower(), f"{path}\n{found}".strip()),
        "status": (record.status, record.status, tip),
        "started": (local_time(record.started), record.started,
                    f"last written {local_time(record.updated)}" if record.updated else ""),
        "model": (record.model, record.model, ""),
        "sampler": (record.sampler, record.sampler, ""),
        "draws": _draws_cell(record),
        "rhat": _rhat_cell(record),
        "folder": (_home(path.parent), str(path.parent), f"{path.parent}\n{found}".strip()),
        "note": (record.note.replace("\n", " "), record.note, record.note),
    }


def _alive(widget) -> bool:
    import shiboken6

    return widget is not None and shiboken6.isValid(widget)
