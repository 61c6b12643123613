"""The Prior panel: the P(k) family and its hyperparameters (fixed or sampled), or the integral
model's parameter priors; a prior draw of the field.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QToolButton,
    QWidget,
)

from app.panels.base import SetupPanel
from app.panels.binding import (
    _INVALID_EDIT,
    INFO_STYLE,
    _alive,
    _g,
    _info_label,
    _message_label,
    bind_check,
    bind_combo,
    bind_text,
)
from app.panels.data import _Preview
from app.state.config_state import FIELD_HYPERPARAMETERS, ConfigState, prior_kinds
from core.field.grid import Grid
from core.field.power_spectrum import spectrum_from_config
from core.integral.spec import PARAMETERS as INTEGRAL_PARAMETERS
from core.io import load_power_table
from core.priors import PRIOR_KINDS

__all__ = ["PriorPanel", "HYPER_LABELS"]

HYPER_LABELS = {
    "amplitude": "amplitude A",
    "index": "index n",
    "cutoff_scale": "cutoff scale R",
    "A": "A",
    "c": "c",
    "sigma": "sigma",
}



class _HyperEditor(QGroupBox):
    """One hyperparameter: fixed value, or sampled from dist(loc, scale | low, high)."""

    def __init__(self, state: ConfigState, name: str, panel: "PriorPanel"):
        super().__init__(HYPER_LABELS.get(name, name))
        self.state, self.name = state, name
        p = f"prior.{name}"
        dists = prior_kinds(name)          # the registry's kinds this parameter takes
        form = QFormLayout(self)
        self.form = form
        self.sampled = bind_check(state, f"{p}.sampled", QCheckBox("sampled (a prior)"),
                                  setter=lambda on: state.set_sampled(name, on))
        form.addRow("", self.sampled)
        self.value = bind_text(state, f"{p}.value", QLineEdit())
        form.addRow("value", self.value)
        self.dist = bind_combo(state, f"{p}.dist", QComboBox(), [(d, d) for d in dists])
        form.addRow("dist", self.dist)
        self.parts = {}
        # one row per parameter any of these kinds takes (registry order), shown as needed
        all_parts = dict.fromkeys(part for d in dists for part in PRIOR_KINDS[d].parameters)
        for part in all_parts:
            edit = bind_text(state, f"{p}.{part}", QLineEdit())
            form.addRow(part, edit)
            self.parts[part] = edit
        self.message = _message_label()
        form.addRow(self.message)
        panel.messages[p] = self.message
        panel.edits[p] = self
        self._dists = dists
        for part in ("sampled", "dist"):
            state.connect(f"{p}.{part}", lambda _v: self.update_rows())
        self.update_rows()

    def update_rows(self) -> None:
        if not _alive(self):
            return
        sampled = bool(self.state[f"prior.{self.name}.sampled"])
        dist = self.state[f"prior.{self.name}.dist"]
        needed = PRIOR_KINDS[dist].parameters if dist in self._dists else ()
        self.form.setRowVisible(self.value, not sampled)
        self.form.setRowVisible(self.dist, sampled)
        for part, edit in self.parts.items():
            self.form.setRowVisible(edit, sampled and part in needed)

    def set_invalid(self, text: str) -> None:
        for edit in [self.value, *self.parts.values()]:
            edit.setStyleSheet(_INVALID_EDIT if text else "")


class PriorPanel(SetupPanel):
    """The P(k) family and its hyperparameters, with the prior's P(k) and a draw."""

    title = "Prior"
    keys = ("prior.kind", "prior.k_pivot", "prior.table", "prior.amplitude", "prior.index",
            "prior.cutoff_scale", "prior.A", "prior.c", "prior.sigma", "integral.refine")

    #: number of hyperparameter draws behind the plotted 68 % band
    BAND_DRAWS = 200

    def __init__(self, state: ConfigState, parent=None):
        super().__init__(state, parent)
        s = state
        self.kind_combo = self._choice("prior.kind", "P(k) family", [
            ("power law: A (k/k_p)^n", "power_law"),
            ("power law with cutoff: A (k/k_p)^n exp(-(kR)^2)", "power_law_cutoff"),
            ("table of (k, P) rows", "table")], tip="prior.kind")
        self.pivot = self._number("prior.k_pivot", "k pivot",
                                  tip="prior.k_pivot: fixed convention, never sampled")
        row = QWidget()
        h = QHBoxLayout(row)
        h.setContentsMargins(0, 0, 0, 0)
        self.table_edit = bind_text(s, "prior.table", QLineEdit(), parse=str)
        browse = QToolButton()
        browse.setText("Browse…")
        browse.clicked.connect(self._browse_table)
        h.addWidget(self.table_edit)
        h.addWidget(browse)
        self.table_row = row
        self.edits["prior.table"] = row
        self._row("Table", row, "prior.table",
                  tip="prior.table: a text file of k, P rows (log-log interpolation)")
        self.refine = self._number("integral.refine", "refine",
                                   tip="integral.refine: trapezoid steps per data interval")
        self.editors: dict[str, _HyperEditor] = {}
        for name in ("amplitude", "index", "cutoff_scale", *INTEGRAL_PARAMETERS):
            editor = _HyperEditor(s, name, self)
            self.editors[name] = editor
            self.body.addWidget(editor)
        self.plot = pg.PlotWidget()
        self.plot.setLogMode(x=True, y=True)
        self.plot.setLabel("bottom", "k")
        self.plot.setLabel("left", "P(k)")
        self.plot.showGrid(x=True, y=True, alpha=0.2)
        self.plot.setMinimumHeight(200)
        self.curve = self.plot.plot(pen=pg.mkPen("#4fa3ff", width=2))
        self.band_lo = self.plot.plot(pen=pg.mkPen(None))
        self.band_hi = self.plot.plot(pen=pg.mkPen(None))
        self.band = pg.FillBetweenItem(self.band_lo, self.band_hi, brush=(79, 163, 255, 60))
        self.plot.addItem(self.band)
        self.k_lines = [pg.InfiniteLine(angle=90, movable=False,
                                        pen=pg.mkPen((200, 200, 200, 140), style=Qt.PenStyle.DashLine))
                        for _ in range(2)]
        for line in self.k_lines:
            self.plot.addItem(line)
            line.setVisible(False)
        self.plot_caption = _info_label()
        self.plot_caption.setStyleSheet(INFO_STYLE)
        self.body.addWidget(self.plot)
        self.body.addWidget(self.plot_caption)
        self.draw_button = QPushButton("Draw a field from the prior")
        self.draw_button.clicked.connect(self.draw_from_prior)
        self.body.addWidget(self.draw_button)
        self.draw_preview = _Preview(height=200)
        self.draw_preview.setVisible(False)
        self.body.addWidget(self.draw_preview)
        self.draw_caption = _info_label()
        self.body.addWidget(self.draw_caption)
        self.body.addStretch(1)
        self._draws = 0
        s.connect_any(self._on_change)
        self.refresh()

    def _browse_table(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open P(k) table", str(self.state.base_dir),
                                              "Tables (*.txt *.dat *.csv);;All files (*)")
        if path:
            try:
                rel = Path(path).relative_to(self.state.base_dir).as_posix()
            except ValueError:
                rel = path
            self.state["prior.table"] = rel

    def _on_change(self, keys) -> None:
        if _alive(self.plot) and any(k.startswith(("prior.", "grid.", "data.", "model."))
                                     for k in keys):
            self.refresh()

    def _row_visible(self, key):
        editor = self.editors.get(key.split(".", 1)[1]) if key.startswith("prior.") else None
        if editor is not None:
            return not editor.isHidden()
        return super()._row_visible(key)

    def show_errors(self, errors):
        super().show_errors(errors)
        for name, editor in self.editors.items():
            editor.set_invalid(errors.get(f"prior.{name}", ""))

    def refresh(self) -> None:
        s = self.state
        integral = s["model.kind"] == "integral"
        kind = s["prior.kind"]
        names = set(s.hyper_names())
        for name, editor in self.editors.items():
            editor.setVisible(name in names)
        for widget, key, visible in ((self.kind_combo, "prior.kind", not integral),
                                     (self.pivot, "prior.k_pivot", not integral and kind != "table"),
                                     (self.table_row, "prior.table", not integral and kind == "table"),
                                     (self.refine, "integral.refine", integral)):
            self.form.setRowVisible(widget, visible)
            widget.setHidden(not visible)
            if not visible:
                self.form.setRowVisible(self.messages[key], False)
        for widget in (self.plot, self.plot_caption, self.draw_button, self.draw_caption):
            widget.setVisible(not integral)
        if integral:
            self.draw_preview.setVisible(False)
            return
        self._update_plot()

    # -- the prior's P(k) ---------------------------------------------------------------------

    def spectrum(self, values: dict | None = None):
        """The spectrum at the hyperparameters' centres (or ``values``); None if invalid."""
        s = self.state
        kind = s["prior.kind"]
        try:
            if kind == "table":
                return load_power_table(s.resolve(s["prior.table"]))
            params = {"k_pivot": s["prior.k_pivot"]}
            for name in FIELD_HYPERPARAMETERS[kind]:
                params[name] = (values or {}).get(name, s.hyper_centre(name))
            return spectrum_from_config(kind, params)
        except (ValueError, TypeError, OSError, KeyError):
            return None

    def _grid(self) -> Grid | None:
        shape, box = self.state.data_shape(), self.state.box_size()
        if shape is None or box is None:
            return None
        return Grid(shape, box)

    def _k_values(self, spectrum) -> np.ndarray:
        grid = self._grid()
        if grid is not None:
            lo, hi = min(grid.k_fundamental), grid.k_max
        elif getattr(spectrum, "kind", "") == "table":
            lo, hi = float(spectrum.k[0]), float(spectrum.k[-1])
        else:
            kp = spectrum.k_pivot
            lo, hi = kp / 100.0, kp * 100.0
        return np.geomspace(lo, hi, 200)

    def _update_plot(self) -> None:
        s = self.state
        spectrum = self.spectrum()
        if spectrum is None:
            self.curve.setData([], [])
            self.band_lo.setData([], [])
            self.band_hi.setData([], [])
            self.plot_caption.setText("Fix the prior's settings to see its P(k).")
            self.draw_button.setEnabled(False)
            return
        k = self._k_values(spectrum)
        p = spectrum.evaluate(k)
        self.curve.setData(k, p)
        sampled = [n for n in FIELD_HYPERPARAMETERS.get(s["prior.kind"], ())
                   if s[f"prior.{n}.sampled"]]
        caption = "P(k) at the hyperparameters' medians"
        if sampled:
            priors = {n: s.hyper_prior(n) for n in sampled}
            if all(priors.values()):
                rng = np.random.default_rng(12345)      # a fixed stream: no flicker
                overrides = {n: pr.draw(rng, size=(self.BAND_DRAWS, 1)) for n, pr in priors.items()}
                try:
                    logp = spectrum.log_power(k[None, :], **overrides)
                    lo, hi = np.percentile(logp, [16, 84], axis=0)
                    self.band_lo.setData(k, np.exp(lo))
                    self.band_hi.setData(k, np.exp(hi))
                    caption += (f"; band: 68 % of P(k) over {self.BAND_DRAWS} draws of "
                                + ", ".join(sampled))
                except ValueError:
                    # e.g. a normal prior on the amplitude reaching A <= 0
                    self.band_lo.setData([], [])
                    self.band_hi.setData([], [])
                    caption += "; (no band: some prior draws are outside the family's range)"
        else:
            self.band_lo.setData([], [])
            self.band_hi.setData([], [])
        grid = self._grid()
        if grid is not None:
            for line, value in zip(self.k_lines, (min(grid.k_fundamental), min(grid.k_nyquist))):
                line.setPos(math.log10(value))
                line.setVisible(True)
            caption += "; dashed: k fundamental and k Nyquist of the grid"
        else:
            for line in self.k_lines:
                line.setVisible(False)
        self.plot_caption.setText(caption + ".")
        self.draw_button.setEnabled(grid is not None)
        self.draw_button.setToolTip("" if grid is not None else
                                    "needs the grid: choose a data file and a box size")

    def draw_from_prior(self) -> None:
        """Draw hyperparameters from their priors, then a Gaussian random field with
        that P(k) on the grid (core.field.synthetic), and show its middle slice."""
        from core.field.synthetic import gaussian_random_field

        s = self.state
        grid = self._grid()
        if grid is None:
            return
        seed = int(np.random.SeedSequence().entropy % 2**32)
        rng = np.random.default_rng(seed)
        values = {}
        for name in FIELD_HYPERPARAMETERS.get(s["prior.kind"], ()):
            prior = s.hyper_prior(name)
            if prior is None:
                return
            values[name] = float(prior.draw(rng))
        spectrum = self.spectrum(values)
        if spectrum is None:
            self.draw_caption.setText("This draw of the hyperparameters is outside the family's "
                                      "range (" + ", ".join(f"{k} = {_g(v)}" for k, v in values.items())
                                      + "); draw again.")
            return
        field = gaussian_random_field(grid, spectrum, rng)
        self._draws += 1
        self.draw_preview.setVisible(True)
        self.draw_preview.show_slice(field[grid.shape[0] // 2])
        drawn = ", ".join(f"{k} = {_g(v)}" for k, v in values.items()
                          if s[f"prior.{k}.sampled"])
        self.draw_caption.setText(
            f"Middle slice of a field drawn from the prior (seed {seed}"
            + (f"; {drawn}" if drawn else "") + f"); field sd {_g(float(field.std()))}.")
        self.last_draw = field


