"""File > Runs… > Compare: two or more stored runs overlaid, one colour per run.

Three parts, every run in its own colour (``app.views.style.chain_colour`` of its place in the
selection) and named in a legend:

    Traces    every sampled parameter of any of the runs (lp when none samples one) against
              the post-warmup draw index; every chain of a run in the run's colour (ArviZ's
              ``plot_trace`` of several runs, overlaid)
    P(k)      per run, the mean of its stored P(k) draws over all chains and draws and the
              band between their 5 % and 95 % quantiles (``app.run_catalog.power_band``), at
              the stored shell centres; log axes with units as in the P(k) view (k in 1/unit,
              P in unit^3), from the runs' stored configs. A run without a field (the
              integral model) or without a kept field draw yet is named below the plot.
    Summary   per quantity (the parameters, then lp) and run: mean, sd, R-hat and bulk ESS of
              the pooled draws, the Diagnostics view's numbers (``compute_summary``), with its
              formatting and colours for values that need attention.

The runs are read in a worker thread (``app.views.jobs.CancellableJob``; closing the window
drops the result); a run that cannot be read is named in the note and the others are shown.
Like the main window, the comparison has Python's cyclic collector run in the GUI thread only
(``app.gui_gc``): a worker must never free its plots.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from pyqtgraph.Qt import QtCore, QtGui, QtWidgets

from app.gui_gc import collect_in_gui_thread
from app.run_catalog import RunDraws, power_band, read_draws, run_labels
from app.views.diagnostics import ATTENTION_COLOURS
from app.views.jobs import CancellableJob, WorkerRelay
from app.views.style import (
    add_legend,
    chain_colour,
    configure_live_plot,
    cubed_unit,
    inverse_unit,
    sparse_log_ticks,
    steady_axes,
)
from core.store.run_summary import format_cell, needs_attention

__all__ = ["RunComparison", "SUMMARY_COLUMNS", "BAND_FLOOR", "read_runs"]

#: the summary's columns per run: (ScalarSummary field, table column of format_cell, header)
SUMMARY_COLUMNS = (("mean", "mean", "mean"), ("sd", "sd", "sd"), ("rhat", "r_hat", "R-hat"),
                   ("ess_bulk", "ess_bulk", "ESS bulk"))
#: the band's lower edge is clipped to this fraction of the mean (a log axis shows no value <= 0)
BAND_FLOOR = 1e-3
VALUE_ROLE = QtCore.Qt.ItemDataRole.UserRole


def read_runs(paths, labels, report=None) -> list:
    """``read_draws`` of each run, or (path, message) for one that cannot be read."""
    out = []
    for path, label in zip(paths, labels):
        if report is not None:
            report(label)              # stops here when the window was closed
        try:
            out.append(read_draws(path, label))
        except Exception as err:       # noqa: BLE001 - one damaged run must not hide the others
            out.append((path, str(err) or type(err).__name__))
    return out


class RunComparison(QtWidgets.QDialog):
    """The comparison of the runs in ``paths`` (see the module docstring).

    ``runs``: the ``RunDraws`` shown, in the order given; ``trace_curves``: quantity -> one
    list of curves (one per chain) per run in ``runs`` (empty where that run has no such
    quantity); ``power_curves``: per run, {"mean", "low", "high"} curves or None;
    ``computed`` is emitted once everything is drawn."""

    computed = QtCore.Signal()

    def __init__(self, paths, parent=None):
        super().__init__(parent)
        collect_in_gui_thread()       # its plots' cycles are freed in the GUI thread (app.gui_gc)
        self.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose)
        self.paths = list(paths)
        self.labels = run_labels(self.paths)
        self.setWindowTitle("Compare runs: " + ", ".join(self.labels))
        self.runs: list[RunDraws] = []
        self.failed: list[tuple] = []
        self.trace_curves: dict[str, list[list]] = {}
        self.power_curves: list[dict | None] = []
        self.busy = True
        self._build()
        self.resize(1400, 900)
        self.relay = WorkerRelay(self)
        self.relay.finished.connect(self._on_read)
        self.relay.failed.connect(self._on_failed)
        paths, labels = list(self.paths), list(self.labels)        # the worker holds no widget
        self.job = CancellableJob(lambda report: read_runs(paths, labels, report), self.relay,
                                  name="fieldscope-run-compare").start()

    def _build(self) -> None:
        self.traces = pg.GraphicsLayoutWidget()
        self.power_widget = pg.PlotWidget()
        self.power_plot = self.power_widget.getPlotItem()
        steady_axes(self.power_plot)
        self.power_plot.setLogMode(x=True, y=True)
        self.power_plot.showGrid(x=True, y=True, alpha=0.15)
        for axis in ("left", "bottom"):
            self.power_plot.getAxis(axis).enableAutoSIPrefix(False)
            sparse_log_ticks(self.power_plot.getAxis(axis))
        self.power_plot.setTitle("P(k) of the stored draws: mean and 5-95 % band", size="9pt")
        self.table = QtWidgets.QTableWidget()
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.note = QtWidgets.QLabel("reading the runs…")
        self.note.setWordWrap(True)
        self.note.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        plots = QtWidgets.QSplitter(QtCore.Qt.Orientation.Horizontal)
        plots.addWidget(self.traces)
        plots.addWidget(self.power_widget)
        plots.setSizes([800, 600])
        self.splitter = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        self.splitter.addWidget(plots)
        self.splitter.addWidget(self.table)
        self.splitter.setSizes([620, 240])
        buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(self.splitter, 1)
        layout.addWidget(self.note)
        layout.addWidget(buttons)

    # -- the result --------------------------------------------------------------------------

    def _on_failed(self, job, message: str) -> None:
        if job is self.job:
            self.busy = False
            self.note.setText(f"the runs could not be read: {message}")
            self.computed.emit()

    def _on_read(self, job, results) -> None:
        if job is not self.job:
            return
        self.runs = [r for r in results if isinstance(r, RunDraws)]
        self.failed = [r for r in results if not isinstance(r, RunDraws)]
        notes = [f"{path}: cannot be read ({message})" for path, message in self.failed]
        self._draw_traces()
        notes += self._draw_power()
        self._fill_table()
        self.note.setText("\n".join(notes))
        self.note.setVisible(bool(notes))
        self.busy = False
        self.computed.emit()

    def _draw_traces(self) -> None:
        names = []
        for run in self.runs:
            names += [n for n in run.params if n != "lp" and n not in names]
        names = names or ["lp"]
        first = None
        for row, name in enumerate(names):
            plot = self.traces.addPlot(row=row, col=0)
            configure_live_plot(plot, ylabel="log density" if name == "lp" else name)
            if first is None:
                first = plot
                add_legend(plot, min(len(self.runs), 4))
            else:
                plot.setXLink(first)
            last = row == len(names) - 1
            plot.setLabel("bottom", "post-warmup draw" if last else None)
            plot.getAxis("bottom").setStyle(showValues=last)
            self.trace_curves[name] = [self._trace(plot, j, run, name) for j, run in enumerate(self.runs)]

    def _trace(self, plot, j: int, run: RunDraws, name: str) -> list:
        draws = run.params.get(name)
        if draws is None:
            return []
        colour = QtGui.QColor(chain_colour(j))
        colour.setAlpha(210)
        pen = pg.mkPen(colour, width=1)
        x = np.arange(draws.shape[1])
        return [plot.plot(x, draws[c], pen=pen, name=run.label if c == 0 else None, connect="finite")
                for c in range(draws.shape[0])]

    def _draw_power(self) -> list[str]:
        """The P(k) of each run with stored draws; returns the notes on the others."""
        plot, notes = self.power_plot, []
        legend = add_legend(plot)
        legend.anchor(itemPos=(0, 1), parentPos=(0, 1), offset=(10, -10))   # spectra fall to the right
        units = {run.unit for run in self.runs if run.power is not None}
        unit = units.pop() if len(units) == 1 else ""
        plot.setLabel("left", f"P(k) [{cubed_unit(unit)}]" if unit else "P(k)")
        plot.setLabel("bottom", f"k [{inverse_unit(unit)}]" if unit else "k")
        if units:
            notes.append("the runs' grids have different units ("
                         + ", ".join(f"{r.label}: {r.unit or 'none'}" for r in self.runs if r.power is not None)
                         + "): P(k) is drawn in each run's own")
        for j, run in enumerate(self.runs):
            if run.power is None:
                what = "the integral model has no field" if run.model == "integral" else "no kept field draw"
                notes.append(f"{run.label}: no P(k) draws ({what})")
                self.power_curves.append(None)
                continue
            self.power_curves.append(self._power(plot, j, run))
        return notes

    def _power(self, plot, j: int, run: RunDraws) -> dict:
        mean, low, high = power_band(run.power)
        k = np.asarray(run.k, np.float64)
        keep = (k > 0) & np.isfinite(mean) & (mean > 0)
        low = np.maximum(low, mean * BAND_FLOOR)
        colour = QtGui.QColor(chain_colour(j))
        edge, fill = QtGui.QColor(colour), QtGui.QColor(colour)
        edge.setAlpha(110)
        fill.setAlpha(55)
        curves = {"low": plot.plot(k[keep], low[keep], pen=pg.mkPen(edge)),
                  "high": plot.plot(k[keep], high[keep], pen=pg.mkPen(edge))}
        band = pg.FillBetweenItem(curves["low"], curves["high"], brush=pg.mkBrush(fill))
        band.setZValue(-10)
        plot.addItem(band)
        curves["mean"] = plot.plot(k[keep], mean[keep], pen=pg.mkPen(colour, width=2), symbol="o", symbolSize=4,
                                   symbolPen=None, symbolBrush=colour, name=run.label)
        return curves

    def _fill_table(self) -> None:
        table, per = self.table, len(SUMMARY_COLUMNS)
        quantities = []
        for run in self.runs:
            quantities += [row.name for row in run.rows if row.name != "lp" and row.name not in quantities]
        quantities.append("lp")
        table.setColumnCount(1 + per * len(self.runs))
        table.setRowCount(1 + len(quantities))
        table.setHorizontalHeaderLabels(["quantity"] + [h for _ in self.runs for _, _, h in SUMMARY_COLUMNS])
        table.setItem(0, 0, QtWidgets.QTableWidgetItem("run"))
        for j, run in enumerate(self.runs):
            head = QtWidgets.QTableWidgetItem(run.label)
            head.setBackground(QtGui.QColor(chain_colour(j)))
            head.setForeground(QtGui.QColor("#101010"))
            head.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignCenter)
            head.setToolTip(str(run.path))
            table.setItem(0, 1 + per * j, head)
            table.setSpan(0, 1 + per * j, 1, per)
            rows = {row.name: row for row in run.rows}
            for i, name in enumerate(quantities):
                if name in rows:
                    for c, (attr, column, _) in enumerate(SUMMARY_COLUMNS):
                        table.setItem(1 + i, 1 + per * j + c, _cell(column, getattr(rows[name], attr)))
        for i, name in enumerate(quantities):
            table.setItem(1 + i, 0, QtWidgets.QTableWidgetItem(name))
        table.resizeColumnsToContents()
        self.quantities = quantities

    def closeEvent(self, event) -> None:
        self.job.cancel()
        super().closeEvent(event)


def _cell(column: str, value: float) -> QtWidgets.QTableWidgetItem:
    item = QtWidgets.QTableWidgetItem("–" if math.isnan(value) else format_cell(column, value))
    item.setData(VALUE_ROLE, float(value))
    item.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
    if needs_attention(column, value):          # marked as the Diagnostics view marks it
        item.setBackground(QtGui.QColor(ATTENTION_COLOURS[column]))
        item.setForeground(QtGui.QColor("#ffffff"))
    return item
