"""The diagnostics panel: the summary table of a run (pooled and per chain) and the
convergence of P(k) shell by shell.

The numbers are ``core.store.run_summary``'s, read from the run store (``RunState.run_dir``):
the table is ``RunSummary.table()`` -- exactly what ``fieldscope summary`` prints and
``summary --csv`` writes -- with the cells formatted by ``run_summary.format_cell``. So the
panel works alike for a run this window drives (the engine writes the store), a store
another process is writing, and a finished run.

Columns: scope (pooled, chain c), quantity (each sampled parameter, lp), mean, sd, R-hat,
bulk and tail ESS, ESS per second, ESS per gradient evaluation, divergences, acceptance,
step size (definitions in ``core.store.run_summary``). Cells that need attention are coloured:
R-hat > 1.01 and divergences > 0 red, an ESS below 100 orange. The scope's health columns
(divergences, acceptance, step size) span its rows.

Below the table, bulk and tail ESS and R-hat of the stored P(k) draws per k-shell
(``core.store.diagnostics.shell_diagnostics``), against the shell centre k.

Above it, when something is red, what to try (``core.store.advice``: the summary's ``advice``,
the lines ``fieldscope summary`` prints): one line each, with a button that sets the change in
the window's config (``apply_requested(changes)``; the window sets the keys, and the next Start
runs with them).

Threading. Reading the store and computing the diagnostics run in a worker thread
(``app.views.jobs.LatestJob``): at most one computation is in flight, and
``refresh`` asks for a new one only when the run's progress (draws, chunks) or status
moved since the last request; requests made while one runs collapse into one that
starts when it ends. A result for another run (``layout_version`` or run directory
changed) is dropped; a result of the same run that is one chunk old is shown and the
newer one follows.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from pyqtgraph.Qt import QtCore, QtGui, QtWidgets

from app.state.run_state import RunState
from app.views.base import MODEL_KINDS, PLOTS, RunView
from app.views.jobs import LatestJob
from app.views.style import add_legend_strip, sparse_log_ticks, steady_axes, wrapping_label
from core.store import run_summary
from core.store.run_store import STORE_NAME, RunStoreError
from core.store.run_summary import TEXT_COLUMNS, format_cell, needs_attention

__all__ = ["DiagnosticsView", "compute_summary", "ATTENTION_COLOURS", "COLUMN_PRIORITY", "SHELL_PLOTS_BESIDE_WIDTH"]

#: the least width in pixels of the k-shell plots' area with the ESS and R-hat plots side by side
SHELL_PLOTS_BESIDE_WIDTH = 420
#: the least height in pixels of one k-shell plot (the table above gives way: it scrolls)
SHELL_PLOT_MIN_HEIGHT = 130

#: the order in which columns are kept when the panel is too narrow for all of them (the
#: estimate first, the first numbers a scientist reads (issue #32 item 11), then what decides
#: whether it can be trusted; the rest are hidden first, from the end); the header's context
#: menu shows or hides any column by hand
COLUMN_PRIORITY = ("scope", "quantity", "mean", "sd", "r_hat", "ess_bulk", "divergences", "ess_tail",
                   "ess_bulk_per_gradient", "acceptance", "ess_bulk_per_second", "step_size",
                   "warmup_divergences")

#: background of cells that need attention
ATTENTION_COLOURS = {"r_hat": "#b3261e", "divergences": "#b3261e", "ess_bulk": "#c26a00",
                     "ess_tail": "#c26a00"}
ATTENTION_TIPS = {"r_hat": "R-hat above 1.01: the chains have not mixed (run longer, check the model)",
                  "divergences": "divergent transitions: the sampler missed part of the posterior "
                                 "(smaller step size, higher target acceptance, reparameterise)",
                  "ess_bulk": "bulk ESS below 100: too few effective draws for reliable estimates",
                  "ess_tail": "tail ESS below 100: quantiles and intervals are unreliable"}
HEADER_TIPS = {
    "r_hat": "rank-normalised split R-hat; for one chain, its two halves compared",
    "ess_bulk": "bulk effective sample size (rank-normalised)",
    "ess_tail": "tail effective sample size (5% and 95% quantiles)",
    "ess_bulk_per_second": "bulk ESS per second of post-warmup sampling wall time",
    "ess_bulk_per_gradient": "bulk ESS per gradient evaluation (post-warmup leapfrog steps)",
    "divergences": "divergent post-warmup transitions",
    "acceptance": "mean acceptance rate of the post-warmup draws",
    "step_size": "final adapted step size (pooled: mean over chains)",
}
#: columns that describe a whole scope (a chain, or all): one cell spans the scope's rows
SCOPE_COLUMNS = ("scope", "divergences", "acceptance", "step_size")


def compute_summary(run_dir) -> run_summary.RunSummary:
    """The panel's worker: ``summarize_run`` without the voxel-wise field ESS (which reads
    whole fields and is not shown here)."""
    return run_summary.summarize_run(run_dir, field_diagnostics=False)


class DiagnosticsView(RunView):
    """Table of R-hat / ESS / health per chain and pooled, and P(k)-shell diagnostics.

    ``table`` is the QTableWidget (each item also holds its raw value in
    ``Qt.UserRole``); ``shell_curves`` maps "ess_bulk", "ess_tail", "rhat" to their curves;
    ``summary`` is the RunSummary on show (None before the first). ``computed`` is
    emitted after a result was shown (or an error reported).
    """

    title = "Diagnostics"
    group = PLOTS
    kinds = frozenset(MODEL_KINDS)     # every model: its parameters and statistics
    csv_contents = "Diagnostics table"

    computed = QtCore.Signal()
    #: config key -> value: the advice's change the user asked to apply (the window sets it)
    apply_requested = QtCore.Signal(dict)

    def __init__(self, run_state: RunState, parent=None):
        super().__init__(run_state, parent)
        self.summary: run_summary.RunSummary | None = None
        self._make_messages()
        self.table = QtWidgets.QTableWidget(0, len(TEXT_COLUMNS))
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.setAlternatingRowColors(False)
        for col, (name, header) in enumerate(TEXT_COLUMNS):
            item = QtWidgets.QTableWidgetItem(header)
            item.setToolTip(HEADER_TIPS.get(name, ""))
            self.table.setHorizontalHeaderItem(col, item)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.ResizeToContents)
        header.setContextMenuPolicy(QtCore.Qt.ContextMenuPolicy.CustomContextMenu)
        header.customContextMenuRequested.connect(self._column_menu)
        #: columns the user showed or hid by hand (name -> shown); the others follow the width
        self.column_choice: dict[str, bool] = {}
        self.table.installEventFilter(self)
        self._make_shell_plots()
        splitter = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        splitter.addWidget(self.table)
        splitter.addWidget(self.graphics)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.message)
        layout.addWidget(self.advice_box)
        layout.addWidget(splitter, 1)
        self.job = LatestJob(self)
        self.job.finished.connect(self._on_computed)
        self.destroyed.connect(self.job.close)
        self._requested = None
        self._run_seen = None
        self._error = ""
        self._show_hint()

    def _make_shell_plots(self) -> None:
        """ESS and R-hat per k-shell (``shell_curves``) in ``graphics``, with the hint above them."""
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.installEventFilter(self)   # resized: the shell plots beside or below each other
        self._shells_beside = True
        # above the two plots: why they are empty (a line as wide as both), then the legend
        self.shell_hint = wrapping_label(pg.LabelItem("", size="9pt", color=(170, 170, 170), justify="left"))
        self.graphics.addItem(self.shell_hint, row=0, col=0, colspan=2)
        self.ess_plot = self.graphics.addPlot(row=2, col=0)
        self.rhat_plot = self.graphics.addPlot(row=2, col=1)
        for plot, label in ((self.ess_plot, "ESS"), (self.rhat_plot, "R-hat")):
            steady_axes(plot)
            plot.setLogMode(x=True)
            plot.showGrid(x=True, y=True, alpha=0.15)
            plot.setLabel("left", label)
            plot.setLabel("bottom", "k-shell centre")
            plot.getAxis("bottom").enableAutoSIPrefix(False)
            sparse_log_ticks(plot.getAxis("bottom"))
        self.rhat_plot.setXLink(self.ess_plot)
        add_legend_strip(self.graphics, self.ess_plot, row=1, colspan=2)
        self.shell_curves = {
            "ess_bulk": self.ess_plot.plot(pen=pg.mkPen("#4fa3ff", width=1.5), symbol="o", symbolSize=4,
                                           symbolPen=None, symbolBrush="#4fa3ff", name="bulk ESS",
                                           connect="finite"),
            "ess_tail": self.ess_plot.plot(pen=pg.mkPen("#ffa640", width=1.5), symbol="o", symbolSize=4,
                                           symbolPen=None, symbolBrush="#ffa640", name="tail ESS",
                                           connect="finite"),
            "rhat": self.rhat_plot.plot(pen=pg.mkPen("#5fd35f", width=1.5), symbol="o", symbolSize=4,
                                        symbolPen=None, symbolBrush="#5fd35f", connect="finite"),
        }
        dashed = QtCore.Qt.PenStyle.DashLine
        self.ess_plot.addItem(pg.InfiniteLine(pos=run_summary.ESS_ATTENTION, angle=0, movable=False,
                                              pen=pg.mkPen(ATTENTION_COLOURS["ess_bulk"], style=dashed)))
        self.rhat_plot.addItem(pg.InfiniteLine(pos=run_summary.RHAT_ATTENTION, angle=0, movable=False,
                                               pen=pg.mkPen(ATTENTION_COLOURS["r_hat"], style=dashed)))

    # -- refreshing -----------------------------------------------------------------------

    def _run_key(self):
        st = self.state
        return (st.layout_version, str(st.run_dir) if st.run_dir is not None else None)

    def refresh(self, force: bool = False) -> bool:
        """Ask for a new summary when the run's progress or status moved (or ``force``).
        Returns whether a computation was asked for; the table changes when it lands."""
        st = self.state
        run = self._run_key()
        if run != self._run_seen:              # another run: forget the one on show
            self._run_seen = run
            self.job.cancel_pending()
            self._requested = None
            self._error = ""
            self._show(None)
        if st.run_dir is None or not (st.run_dir / STORE_NAME).exists():
            self._show_hint()
            return False
        key = (run, tuple(sorted(st.progress.items())), st.status)
        if key == self._requested and not force:
            return False
        self._requested = key
        self.job.request(run, compute_summary, st.run_dir)
        return True

    @property
    def busy(self) -> bool:
        """Whether a computation runs or waits."""
        return self.job.busy

    @QtCore.Slot(object, object, object)
    def _on_computed(self, run, summary, error) -> None:
        if run != self._run_key():
            return                               # another run's: dropped
        if error is not None:
            if isinstance(error, (RunStoreError, KeyError, OSError, ValueError)):
                self._error = f"the run store could not be read: {error}"
            else:
                self._error = f"the diagnostics failed: {type(error).__name__}: {error}"
            self._show_hint()
        else:
            self._error = ""
            self._show(summary)
        self.computed.emit()

    # -- drawing ------------------------------------------------------------------------

    def _show(self, summary) -> None:
        self.summary = summary
        self._fill_table(summary.table() if summary is not None else [])
        self._show_advice(summary.advice or [] if summary is not None else [])
        shells = summary.shells if summary is not None else None
        if shells is not None and summary.shell_k is not None:
            k = np.asarray(summary.shell_k, float)
            for name, curve in self.shell_curves.items():
                curve.setData(k, np.asarray(getattr(shells, name), float))
        else:
            for curve in self.shell_curves.values():
                curve.setData([], [])
        self._show_hint()

    def _make_messages(self) -> None:
        """The line above the table (errors, hints) and the advice's rows."""
        self.message = QtWidgets.QLabel("")
        self.message.setWordWrap(True)
        self.advice_box = QtWidgets.QWidget()
        self.advice_box.setVisible(False)
        self._advice_layout = QtWidgets.QVBoxLayout(self.advice_box)
        self._advice_layout.setContentsMargins(4, 2, 4, 2)
        #: (label, button) per advice on show
        self.advice_rows: list[tuple[QtWidgets.QLabel, QtWidgets.QPushButton]] = []

    def _show_advice(self, advice) -> None:
        for label, button in self.advice_rows:
            label.deleteLater()
            button.deleteLater()
        self.advice_rows = []
        while self._advice_layout.count():
            item = self._advice_layout.takeAt(0)
            if item.layout() is not None:
                item.layout().deleteLater()
        for item in advice:
            row = QtWidgets.QHBoxLayout()
            label = QtWidgets.QLabel("Try: " + item.text)
            label.setWordWrap(True)
            label.setStyleSheet(f"color: {ATTENTION_COLOURS['ess_bulk']};")
            button = QtWidgets.QPushButton(item.action[:1].upper() + item.action[1:] if item.action else "Apply")
            button.setToolTip(run_summary.settings_text(item.changes) + " in the config; Start runs with it")
            button.setEnabled(bool(item.changes))
            button.clicked.connect(lambda _=False, changes=dict(item.changes): self.apply_requested.emit(changes))
            row.addWidget(label, 1)
            row.addWidget(button, 0)
            self._advice_layout.addLayout(row)
            self.advice_rows.append((label, button))
        self.advice_box.setVisible(bool(advice))

    def _fill_table(self, rows) -> None:
        table = self.table
        table.setUpdatesEnabled(False)
        table.clearSpans()
        table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for col, (name, _) in enumerate(TEXT_COLUMNS):
                self._set_cell(r, col, name, getattr(row, name))
        # one cell per scope for what describes the scope, not the quantity
        start = 0
        for r in range(1, len(rows) + 1):
            if r == len(rows) or rows[r].scope != rows[start].scope:
                if r - start > 1:
                    for name in SCOPE_COLUMNS:
                        table.setSpan(start, _column(name), r - start, 1)
                start = r
        table.setUpdatesEnabled(True)
        self.fit_columns()

    def _set_cell(self, r: int, col: int, name: str, value) -> None:
        """Cell (r, col) showing ``value`` of column ``name``. A cell's item is made once and
        then updated in place: replacing items made the table delete the old ones, and that
        crashed PySide6 6.11 now and then (a segmentation fault in Shiboken's releaseWrapper
        under QTableWidget.setItem, 2 of 3 demo runs watched in this view, seen by gdb)."""
        item = self.table.item(r, col)
        if item is None:
            item = QtWidgets.QTableWidgetItem()
            if name not in ("scope", "quantity"):
                item.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
            self.table.setItem(r, col, item)
        item.setText(format_cell(name, value))
        item.setData(QtCore.Qt.ItemDataRole.UserRole, value.item() if isinstance(value, np.generic) else value)
        attention = needs_attention(name, value)
        item.setData(QtCore.Qt.ItemDataRole.BackgroundRole,
                     QtGui.QBrush(QtGui.QColor(ATTENTION_COLOURS[name])) if attention else None)
        item.setData(QtCore.Qt.ItemDataRole.ForegroundRole,
                     QtGui.QBrush(QtGui.QColor("#ffffff")) if attention else None)
        item.setToolTip(ATTENTION_TIPS[name] if attention else "")

    # -- columns that fit -----------------------------------------------------------------------

    def eventFilter(self, obj, event):
        if obj is self.table and event.type() == QtCore.QEvent.Type.Resize:
            self.fit_columns()
        elif obj is self.graphics and event.type() == QtCore.QEvent.Type.Resize:
            self._arrange_shell_plots(event.size().width())
        return super().eventFilter(obj, event)

    def _arrange_shell_plots(self, width: int) -> None:
        """The ESS and R-hat plots side by side in a graphics area at least
        ``SHELL_PLOTS_BESIDE_WIDTH`` wide, else R-hat below ESS (beside each other in a
        narrow panel, neither has room for its tick labels)."""
        beside = width >= SHELL_PLOTS_BESIDE_WIDTH
        if beside == self._shells_beside:
            return
        self._shells_beside = beside
        grid = self.graphics.ci.layout          # moved within the layout: the plot stays in the scene
        grid.removeItem(self.rhat_plot)
        grid.addItem(self.rhat_plot, *((2, 1) if beside else (3, 0)))
        axis = self.ess_plot.getAxis("bottom")        # stacked: one k axis, R-hat's (x-linked)
        axis.setStyle(showValues=beside)
        axis.showLabel(beside)
        self.graphics.setMinimumHeight(SHELL_PLOT_MIN_HEIGHT * (1 if beside else 2))

    def hidden_columns(self) -> list[str]:
        """The columns not shown now (too narrow a panel, or hidden by hand)."""
        return [name for col, (name, _) in enumerate(TEXT_COLUMNS) if self.table.isColumnHidden(col)]

    def fit_columns(self) -> None:
        """Show the columns in ``COLUMN_PRIORITY`` order while they fit the table's width (no
        horizontal scrolling); the rest are hidden and named in the header's tooltip. A column
        shown or hidden by hand (header context menu) stays so."""
        table = self.table
        header = table.horizontalHeader()
        available = table.viewport().width()
        if available <= 0:
            return
        for col in range(table.columnCount()):         # every column's width at its contents
            table.setColumnHidden(col, False)
        header.resizeSections(QtWidgets.QHeaderView.ResizeMode.ResizeToContents)
        used = 0
        shown = set()
        full = False
        for name in COLUMN_PRIORITY:
            if self.column_choice.get(name) is False:
                continue
            width = header.sectionSize(_column(name))
            if self.column_choice.get(name) or name in ("scope", "quantity"):
                shown.add(name)
                used += width
            elif not full and used + width <= available:
                shown.add(name)
                used += width
            else:
                full = True        # keep a prefix of the priority: no small column past a big one
        for col, (name, _) in enumerate(TEXT_COLUMNS):
            table.setColumnHidden(col, name not in shown)
        hidden = self.hidden_columns()
        header.setToolTip("right-click to choose the columns" + (
            "; hidden now: " + ", ".join(dict(TEXT_COLUMNS)[n] for n in hidden) if hidden else ""))

    def _column_menu(self, pos) -> None:
        menu = QtWidgets.QMenu(self)
        for col, (name, label) in enumerate(TEXT_COLUMNS):
            if name in ("scope", "quantity"):
                continue
            action = menu.addAction(label)
            action.setCheckable(True)
            action.setChecked(not self.table.isColumnHidden(col))
            action.toggled.connect(lambda on, name=name: self.choose_column(name, on))
        menu.addSeparator()
        menu.addAction("Fit the columns to the width", self.reset_columns)
        menu.popup(self.table.horizontalHeader().mapToGlobal(pos))

    def choose_column(self, name: str, shown: bool) -> None:
        """Show or hide column ``name`` by hand (it no longer follows the width)."""
        self.column_choice[name] = shown
        self.fit_columns()

    def reset_columns(self) -> None:
        """Forget the columns chosen by hand: every column follows the width again."""
        self.column_choice.clear()
        self.fit_columns()

    def _show_hint(self) -> None:
        st, s = self.state, self.summary
        if self._error:
            text = self._error
        elif st.run_dir is None:
            text = "no run store: the diagnostics appear once a run writes one (or open a run)"
        elif not (st.run_dir / STORE_NAME).exists():
            text = f"waiting for the run store in {st.run_dir}"
        elif s is None:
            text = "reading the run store..."
        elif not s.rows:
            text = (f"{s.status}: no post-warmup draws yet; the table fills in once sampling has "
                    "begun (R-hat and ESS need at least 4 draws per chain)")
        else:
            p = s.progress
            parts = [s.status, f"{p.get('draws', 0)} draws per chain",
                     f"{s.sampling_gradient_evaluations} gradient evaluations"]
            parts.append("sampling time not recorded (ESS/s is nan)" if math.isnan(s.sampling_seconds)
                         else f"sampling time {s.sampling_seconds:.3g} s")
            text = "  |  ".join(parts)
        self.message.setText(text)
        # the k-shell plots belong to field runs: elsewhere they go, and the table has the room
        self.graphics.setVisible(st.has_field or st.chains is None)
        if s is None or s.shells is None:
            self.shell_hint.setText("P(k) shells: need at least 4 stored field draws"
                                    if st.has_field or st.chains is None else "no field in this run")
            self.shell_hint.setVisible(True)
        else:
            self.shell_hint.setVisible(False)

    # -- export -----------------------------------------------------------------------------

    def export_csv(self, path) -> None:
        """Write the table as ``fieldscope summary --csv`` does. Raises ValueError when there
        is nothing to write yet, OSError (with the path and reason) when it cannot be written."""
        if self.summary is None:
            raise ValueError("no diagnostics to export yet (the run store has not been read)")
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(self.summary.table_csv())
        except OSError as err:
            raise OSError(f"{path}: cannot write the diagnostics table: {err.strerror or err}") from None


def _column(name: str) -> int:
    return [c for c, _ in TEXT_COLUMNS].index(name)
