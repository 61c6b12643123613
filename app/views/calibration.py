"""The Calibration view: simulation-based calibration of a config, live as batches finish.

``CalibrationView`` draws one ``calibration.zarr`` (``core.calibration.store``, read through
its reader only): the verdict line naming the quantities outside their bands, and for the
chosen quantity its rank histogram (with the expected count per bin and its 95 % binomial
range) and the ECDF difference F(z) - z with the 95 % simultaneous band of
``core.calibration.bands``; below, the coverage of the central 50 % and 90 % intervals per
k-shell (field model) or per quantity, against the level a calibrated pipeline gives.
``refresh`` re-reads the store and redraws only when a batch landed.

``CalibrationWindow`` runs the calibration as the engine runs: in its own process (a
``fieldscope calibrate`` subprocess, so TensorFlow never loads here) that the view watches
every second; Stop sends SIGTERM, which ends the process after its current batch (the same
command resumes it), and the process's last line (its progress, or why it failed) is shown.

State, drawing and widgets as glue does: ``CalibrationView.quantity`` is the one setting (the
combo box shows it); the plot items are made once and fed with ``setData``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from pyqtgraph.Qt import QtCore, QtWidgets
from scipy import stats

from app.views.style import add_legend_strip, steady_axes
from core.calibration import CalibrationReader, CalibrationStoreError, simultaneous_band
from core.calibration.bands import ecdf_counts, evaluation_points
from core.calibration.ranks import LEVELS, expected_coverage

__all__ = ["CalibrationView", "CalibrationWindow", "calibrate_command"]

_BINS = 10
#: the calibration window's size when it opens: room for its three plots' labels, within a
#: 1280 x 800 screen (Qt's default for a new window is about 530 x 530)
DEFAULT_WINDOW_SIZE = (960, 720)


def calibrate_command(config, simulations: int, out_dir, draws: int | None = None) -> list[str]:
    """The ``fieldscope calibrate`` command line the window runs (this Python, ``-m app``)."""
    args = [sys.executable, "-m", "app", "calibrate", str(config), "--simulations", str(int(simulations)),
            "--out", str(out_dir)]
    if draws:
        args += ["--draws", str(int(draws))]
    return args


class CalibrationView(QtWidgets.QWidget):
    """Rank histogram, ECDF difference with its band, coverage, verdict of one calibration store."""

    def __init__(self, out_dir=None, parent=None):
        super().__init__(parent)
        self.out_dir = None
        self.reader: CalibrationReader | None = None
        self.quantity: str | None = None
        self._seen = None                   # (progress, quantity) last drawn
        self.verdict_label = QtWidgets.QLabel("no calibration yet")
        self.verdict_label.setWordWrap(True)
        self.status_label = QtWidgets.QLabel("")
        self.quantity_box = QtWidgets.QComboBox()
        self.quantity_box.currentTextChanged.connect(self._choose)
        self.histogram = pg.PlotWidget()
        self.histogram.setTitle("rank histogram", size="9pt")            # the other views' title size
        self.histogram.setLabel("bottom", "rank of the truth")
        self.histogram.setLabel("left", "simulations")
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.9, brush=(80, 130, 200))
        self.histogram.addItem(self.bars)
        self.expected_lines = [self.histogram.plot(pen=pg.mkPen((120, 120, 120), style=style))
                               for style in (QtCore.Qt.PenStyle.SolidLine, QtCore.Qt.PenStyle.DashLine,
                                             QtCore.Qt.PenStyle.DashLine)]
        # short titles: a title's width is its plot's least width, and the two plots share the
        # window's width (the band is the 95 % simultaneous one, core.calibration.bands)
        self.ecdf = pg.PlotWidget()
        self.ecdf.setTitle("ECDF difference, 95 % band", size="9pt")
        self.ecdf.setLabel("bottom", "fractional rank z")
        self.ecdf.setLabel("left", "F(z) - z")
        self.band_low = self.ecdf.plot(pen=pg.mkPen((200, 120, 60)))
        self.band_high = self.ecdf.plot(pen=pg.mkPen((200, 120, 60)))
        # the ECDF in the views' foreground blue, the band in orange (dark plot background)
        self.ecdf_curve = self.ecdf.plot(pen=pg.mkPen((110, 180, 255), width=2), stepMode=None)
        # the coverage plot with its legend in a row of its own above it (in a short plot a
        # legend covers the curves); the legend names the intervals, no title
        self.coverage_widget = pg.GraphicsLayoutWidget()
        self.coverage = self.coverage_widget.addPlot(row=1, col=0)
        self.coverage.setLabel("left", "coverage")
        add_legend_strip(self.coverage_widget, self.coverage, row=0)
        colours = ((60, 120, 200), (200, 80, 60))
        self.coverage_curves = [self.coverage.plot(pen=pg.mkPen(c, width=2), symbol="o", symbolBrush=c,
                                                   name=f"central {int(100 * lv)} % intervals")
                               for c, lv in zip(colours, LEVELS)]
        self.nominal_curves = [self.coverage.plot(pen=pg.mkPen(c, style=QtCore.Qt.PenStyle.DashLine))
                               for c in colours]
        self.coverage.setYRange(0, 1.05)
        for plot in (self.histogram, self.ecdf, self.coverage):
            steady_axes(plot)
            for side in ("left", "bottom"):
                plot.getAxis(side).enableAutoSIPrefix(False)   # plain numbers, no "(x0.001)"
        top = QtWidgets.QHBoxLayout()
        top.addWidget(QtWidgets.QLabel("quantity"))
        top.addWidget(self.quantity_box)
        top.addWidget(self.status_label, 1)
        plots = QtWidgets.QHBoxLayout()
        plots.addWidget(self.histogram)
        plots.addWidget(self.ecdf)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(self.verdict_label)
        layout.addLayout(top)
        layout.addLayout(plots, 2)
        layout.addWidget(self.coverage_widget, 1)
        if out_dir is not None:
            self.set_store(out_dir)

    def set_store(self, out_dir) -> None:
        self.out_dir = Path(out_dir)
        self.reader = None
        self._seen = None
        self.refresh()

    def _choose(self, name: str) -> None:
        if name:
            self.quantity = name
            self.refresh(force=True)

    def refresh(self, force: bool = False) -> bool:
        """Re-read the store; redraw when a batch landed (or ``force``). Returns whether it drew."""
        if self.out_dir is None:
            return False
        try:
            if self.reader is None:
                self.reader = CalibrationReader(self.out_dir)
            else:
                self.reader.refresh()
        except CalibrationStoreError as err:
            self.reader = None
            self.status_label.setText(str(err) if (self.out_dir / "calibration.zarr").exists()
                                      else "waiting for the first batch…")
            return False
        reader = self.reader
        key = (reader.simulations_done, reader.status, self.quantity)
        if key == self._seen and not force:
            return False
        self._seen = key
        names = reader.quantities
        if [self.quantity_box.itemText(i) for i in range(self.quantity_box.count())] != names:
            self.quantity_box.blockSignals(True)
            self.quantity_box.clear()
            self.quantity_box.addItems(names)
            self.quantity_box.blockSignals(False)
        if self.quantity not in names:
            self.quantity = names[0]
        self.quantity_box.setCurrentText(self.quantity)
        self.status_label.setText(f"{reader.simulations_done} of {reader.simulations} simulations, "
                                  f"{reader.draws} draws each ({reader.status})"
                                  + (f": {reader.error}" if reader.error else ""))
        try:
            ranks = reader.ranks()
        except CalibrationStoreError as err:
            self.status_label.setText(str(err))
            return False
        self.verdict_label.setText(reader.verdict().line() if len(ranks) else "no simulation finished yet")
        self._draw(ranks, names, reader)
        return True

    def _draw(self, ranks, names, reader) -> None:
        draws, n = reader.draws, len(ranks)
        column = ranks[:, names.index(self.quantity)] if n else np.zeros(0, int)
        bins = min(_BINS, draws + 1)
        edges = np.linspace(0, draws + 1, bins + 1)
        counts, _ = np.histogram(column, bins=edges)
        width = edges[1] - edges[0]
        self.bars.setOpts(x=0.5 * (edges[:-1] + edges[1:]), height=counts, width=0.9 * width)
        if n:
            p = 1.0 / bins
            lo, hi = stats.binom.ppf(0.025, n, p), stats.binom.ppf(0.975, n, p)
            for line, level in zip(self.expected_lines, (n * p, lo, hi)):
                line.setData([0, draws + 1], [level, level])
            band = simultaneous_band(n, draws, 0.95)
            z = evaluation_points(draws)
            self.band_low.setData(np.r_[0, z, 1], np.r_[0, band.lower - z, 0])
            self.band_high.setData(np.r_[0, z, 1], np.r_[0, band.upper - z, 0])
            self.ecdf_curve.setData(np.r_[0, z, 1], np.r_[0, ecdf_counts(column, draws) / n - z, 0])
        self._draw_coverage(ranks, names, reader)

    def _draw_coverage(self, ranks, names, reader) -> None:
        cover = reader.coverage() if len(ranks) else np.full((len(LEVELS), len(names)), np.nan)
        shells = [j for j, nm in enumerate(names) if nm.startswith("power_k")]
        if shells:
            x, columns = reader.k(), shells
            self.coverage.setLabel("bottom", "k-shell centre")
        else:
            x, columns = np.arange(len(names), dtype=float), list(range(len(names)))
            self.coverage.setLabel("bottom", "quantity (" + ", ".join(names) + ")")
        for j, (curve, nominal) in enumerate(zip(self.coverage_curves, self.nominal_curves)):
            curve.setData(x, cover[j, columns])
            nominal.setData(x, np.full(len(x), expected_coverage(reader.draws, LEVELS[j])))


class CalibrationWindow(QtWidgets.QWidget):
    """A ``CalibrationView`` watching a ``fieldscope calibrate`` process it started (or a store
    another process writes, ``command=None``)."""

    def __init__(self, out_dir, command: list[str] | None = None, parent=None):
        super().__init__(parent, QtCore.Qt.WindowType.Window)
        self.setWindowTitle(f"Calibration: {out_dir}")
        self.resize(*DEFAULT_WINDOW_SIZE)
        self.view = CalibrationView(out_dir)
        self.line = QtWidgets.QLabel("")
        self.line.setWordWrap(True)
        self.stop_button = QtWidgets.QPushButton("Stop after this batch")
        self.stop_button.clicked.connect(self.stop)
        bottom = QtWidgets.QHBoxLayout()
        bottom.addWidget(self.line, 1)
        bottom.addWidget(self.stop_button)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(self.view)
        layout.addLayout(bottom)
        self.timer = QtCore.QTimer(self)
        self.timer.setInterval(1000)
        self.timer.timeout.connect(self.view.refresh)
        self.timer.start()
        self.process: QtCore.QProcess | None = None
        self._output = ""
        if command:
            self.start(command)
        else:
            self.stop_button.setEnabled(False)

    def start(self, command: list[str]) -> None:
        process = QtCore.QProcess(self)
        process.setProcessChannelMode(QtCore.QProcess.ProcessChannelMode.MergedChannels)
        process.readyReadStandardOutput.connect(self._read_output)
        process.finished.connect(self._finished)
        process.errorOccurred.connect(self._failed_to_start)
        self.process = process
        self.line.setText("starting " + " ".join(command[2:]))
        process.start(command[0], command[1:])

    def _read_output(self) -> None:
        text = bytes(self.process.readAllStandardOutput()).decode(errors="replace")
        self._output = (self._output + text)[-20000:]
        lines = [ln.strip() for ln in text.replace("\r", "\n").splitlines() if ln.strip()]
        if lines:
            self.line.setText(lines[-1])

    def _finished(self, code: int, _status=None) -> None:
        self.stop_button.setEnabled(False)
        self.view.refresh(force=True)
        if code == 2:       # refused: the CLI's one-line reason
            lines = [ln for ln in self._output.splitlines() if ln.startswith("fieldscope:")]
            self.line.setText(lines[-1] if lines else f"calibrate ended with status {code}")
        elif code in (0, 1):
            self.line.setText(self.view.verdict_label.text())
        else:
            self.line.setText(f"calibrate ended with status {code}; the finished batches are kept and the "
                              "same calibration resumes them")

    def _failed_to_start(self, error) -> None:
        if error == QtCore.QProcess.ProcessError.FailedToStart:
            self.line.setText("could not start fieldscope calibrate")
            self.stop_button.setEnabled(False)

    def stop(self) -> None:
        """Stop after the current batch (SIGTERM: the CLI's first stop signal)."""
        if self.process is not None and self.process.state() != QtCore.QProcess.ProcessState.NotRunning:
            self.process.terminate()
            self.line.setText("stopping after the current batch…")
            self.stop_button.setEnabled(False)

    def closeEvent(self, event) -> None:
        self.stop()
        if self.process is not None:
            self.process.waitForFinished(200)
        super().closeEvent(event)
