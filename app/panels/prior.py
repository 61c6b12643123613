"""The Prior panel: the P(k) family and its hyperparameters (fixed or sampled), or the integral
model's parameter priors; a prior draw of the field; a fit of the hyperparameters to the data.

"Fit to data" reads the data file, mask and noise of the current config and fits every
family to the data's P(k) (``core.field.prior_fit.fit_families``; the noise held at the
config's, or fitted too when "fit the noise level too" is ticked) in a worker thread
(``app.views.jobs.LatestJob``): the GUI thread only builds the config and draws the result.
The panel shows the fit of the config's family, and which family the BIC prefers. A result
is dropped when the data, grid, likelihood or family changed since it was asked for. "Use as
fixed values" and "Use as prior centres" write through ``ConfigState`` keys, as typing the
numbers would (validation and the config text follow). A flagged fit (chi^2 / dof far above
1: the family or the noise level does not describe the data) is shown in red with what the
flag means, and those two buttons stay disabled until the user ticks "Use this flagged fit
anyway".
"""

from __future__ import annotations

import math
import warnings
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
    QLabel,
    QLineEdit,
    QPushButton,
    QToolButton,
    QWidget,
)

from app.panels.band_powers import BandPowersEditor, band_prior, band_spectrum, default_band_power
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
from app.views.jobs import LatestJob
from app.views.style import DATA_COLOUR, sparse_log_ticks, steady_axes
from core.field.grid import Grid
from core.field.power_spectrum import spectrum_from_config
from core.integral.spec import PARAMETERS as INTEGRAL_PARAMETERS
from core.io import load_power_table
from core.priors import PRIOR_KINDS

__all__ = ["PriorPanel", "HYPER_LABELS", "fit_for_config", "round_to_error"]

HYPER_LABELS = {
    "amplitude": "amplitude A",
    "index": "index n",
    "cutoff_scale": "cutoff scale R",
    "A": "A",
    "c": "c",
    "sigma": "sigma",
}


#: changes after which a fit no longer describes the config (prior.<p>.* edits keep it)
_FIT_KEYS = ("data.", "grid.", "likelihood.", "model.", "prior.kind", "prior.k_pivot")
FIT_COLOUR = "#ff9f40"


def fit_for_config(config, start=None, noise="given"):
    """``core.field.prior_fit.fit_families`` for a validated field ``RunConfig``: its data
    file, mask and noise read as a run reads them; every family fitted (``start`` the
    config's centres, for its own family), ``noise`` "given" or "fit". Runs in the worker
    thread; raises ``LoadError`` / ``ValueError`` (``PriorFitError``) with a message naming
    the problem."""
    from core.field.prior_fit import fit_families
    from core.io import load_observations

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # NaN voxels masked: the Data panel says so
        _, observations, grid = load_observations(config)
    return fit_families(observations, grid, config.prior.k_pivot,
                        start={config.prior.kind: dict(start or {})}, noise=noise)


def round_to_error(value: float, error: float) -> float:
    """``value`` to two significant digits of its ``error`` (four significant digits when
    the error is not finite): what a fitted number is worth writing into a config."""
    if not math.isfinite(value) or value == 0:
        return float(value)
    if math.isfinite(error) and error > 0:
        digits = 1 - math.floor(math.log10(error))
    else:
        digits = 3 - math.floor(math.log10(abs(value)))
    return float(round(value, digits))


def fitted_text(fit, name: str) -> str:
    """``name = x ± sd``, or for a positive hyperparameter known to worse than 10 %
    ``x +up −down`` (``FitResult.interval``: its error is symmetric in log x)."""
    x, sd = fit.values[name], fit.errors[name]
    low, high = fit.interval(name)
    label = HYPER_LABELS.get(name, name)
    if math.isfinite(sd) and high - x > 1.1 * (x - low):
        return f"{label} = {_g(x)} +{_g(high - x, 2)} −{_g(x - low, 2)}"
    return f"{label} = {_g(x)} ± {_g(sd, 2)}"


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
            ("table of (k, P) rows", "table"),
            ("band powers: P(k) constant in bins of k, each bin sampled", "band_powers")], tip="prior.kind")
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
        self.band_editor = BandPowersEditor(s, self)
        self.body.addWidget(self.band_editor)
        self._kind_seen = s["prior.kind"]
        s.connect("prior.kind", self._kind_changed)
        self.plot = pg.PlotWidget()
        steady_axes(self.plot)
        self.plot.setLogMode(x=True, y=True)
        self.plot.setLabel("bottom", "k")
        self.plot.setLabel("left", "P(k)")
        self.plot.showGrid(x=True, y=True, alpha=0.2)
        sparse_log_ticks(self.plot.getAxis("bottom"))     # labels at 1, 2, 5 x 10^n only
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
        self._build_fit()
        self.body.addStretch(1)
        self._draws = 0
        s.connect_any(self._on_change)
        self.refresh()

    # -- the fit to the data ------------------------------------------------------------------

    def _build_fit(self) -> None:
        self.fit_result = None
        self.fit_choice = None
        self._fit_generation = 0
        self._fitter = LatestJob(self, name="fieldscope-prior-fit")
        self._fitter.finished.connect(self._fit_done)
        self.destroyed.connect(lambda *_, job=self._fitter: job.close())
        # plot() items follow the plot's log mode (given P, they draw log10 P)
        self.fit_data = self.plot.plot(pen=None, symbol="o", symbolSize=7,
                                       symbolPen=pg.mkPen(DATA_COLOUR), symbolBrush=DATA_COLOUR)
        self.fit_dropped = self.plot.plot(pen=None, symbol="o", symbolSize=7,
                                          symbolPen=pg.mkPen(DATA_COLOUR), symbolBrush=None)
        self.fit_curve = self.plot.plot(pen=pg.mkPen(FIT_COLOUR, width=2,
                                                     style=Qt.PenStyle.DashLine))
        box = QGroupBox("Prior from the data")
        v = QFormLayout(box)
        self.fit_button = QPushButton("Fit to data")
        self.fit_button.setObjectName("prior.fit")
        self.fit_button.clicked.connect(self.fit_to_data)
        self.fit_noise = QCheckBox("fit the noise level too")
        self.fit_noise.setObjectName("prior.fit.noise")
        self.fit_noise.setToolTip("fit the white-noise power with the P(k) hyperparameters "
                                  "instead of holding it at the Data panel's noise: a check of "
                                  "the noise level set")
        fit_row = QWidget()
        fh = QHBoxLayout(fit_row)
        fh.setContentsMargins(0, 0, 0, 0)
        fh.addWidget(self.fit_button)
        fh.addWidget(self.fit_noise)
        v.addRow(fit_row)
        self.fit_label = QLabel()
        self.fit_label.setWordWrap(True)
        self.fit_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        v.addRow(self.fit_label)
        row = QWidget()
        h = QHBoxLayout(row)
        h.setContentsMargins(0, 0, 0, 0)
        self.use_fixed_button = QPushButton("Use as fixed values")
        self.use_fixed_button.clicked.connect(self.use_fit_as_fixed)
        self.use_centres_button = QPushButton("Use as prior centres")
        self.use_centres_button.clicked.connect(self.use_fit_as_centres)
        h.addWidget(self.use_fixed_button)
        h.addWidget(self.use_centres_button)
        v.addRow(row)
        # a flagged fit (chi^2 / dof >> 1) is used only on the user's word
        self.accept_flagged = QCheckBox("Use this flagged fit anyway (I know why it fits badly)")
        self.accept_flagged.setObjectName("prior.fit.accept_flagged")
        self.accept_flagged.toggled.connect(lambda _on: self._update_use_buttons())
        v.addRow(self.accept_flagged)
        self.fit_box = box
        self.body.addWidget(box)
        self._show_fit(None, "")

    def _fit_problem(self) -> str:
        """Why "Fit to data" cannot run now ("" when it can)."""
        s = self.state
        if s["prior.kind"] not in FIELD_HYPERPARAMETERS or not FIELD_HYPERPARAMETERS[s["prior.kind"]]:
            what = "band powers are" if s["prior.kind"] == "band_powers" else "a table is"
            return f"{what} not a parametric family; choose one to fit its hyperparameters"
        if s.data_shape() is None:
            return "needs a data file with a 3-D array (Data panel)"
        if s.box_size() is None:
            return "needs a valid grid box size"
        return ""

    def _update_fit_button(self) -> None:
        problem = self._fit_problem()
        busy = self._fitter.busy
        self.fit_button.setEnabled(not problem and not busy)
        self.fit_button.setToolTip(problem or "fit the family's hyperparameters to the data's "
                                   "P(k), noise subtracted and mask corrected")

    def fit_to_data(self) -> None:
        """Start the fit in the worker thread (nothing happens while one runs)."""
        if self._fit_problem() or self._fitter.busy:
            return
        s = self.state
        try:
            config = s.config()
        except ValueError as exc:           # ConfigError: the message names the key
            self._show_fit(None, f"Fix the config first: {exc}")
            return
        start = {name: s.hyper_centre(name) for name in FIELD_HYPERPARAMETERS[s["prior.kind"]]}
        start = {name: value for name, value in start.items() if value is not None}
        self._fit_generation += 1
        self._show_fit(None, "fitting the data's P(k)…")
        self._fitter.request(self._fit_generation, fit_for_config, config, start,
                             "fit" if self.fit_noise.isChecked() else "given")
        self._update_fit_button()

    def _fit_done(self, generation, result, error) -> None:
        if not _alive(self.fit_label):
            return
        self._update_fit_button()
        if generation != self._fit_generation:
            return                          # the data or the family changed since
        if error is not None:
            known = isinstance(error, (ValueError, OSError))
            text = str(error) if known else f"{type(error).__name__}: {error}"
            self._show_fit(None, f"No fit: {text}")
        else:
            kind = self.state["prior.kind"]
            if kind in result.fits:
                self._show_fit(result.fits[kind], "", result)
            else:
                self._show_fit(None, f"No fit: {result.failures.get(kind, result.message)}")
        self.scroll.ensureWidgetVisible(self.fit_box)     # the answer to the click, in view

    def _show_fit(self, fit, text: str, choice=None) -> None:
        self.fit_result = fit
        self.fit_choice = choice
        has = fit is not None
        self.accept_flagged.setChecked(False)           # a new fit asks again
        self.accept_flagged.setVisible(has and fit.flagged)
        self._update_use_buttons()
        if not has:
            self.fit_label.setStyleSheet("")
            self.fit_label.setText(text)
            for item in (self.fit_data, self.fit_dropped):
                item.setData([], [])
            self.fit_curve.setData([], [])
            self._update_fit_button()
            return
        parts = [fitted_text(fit, n) for n in fit.names]
        noise = (f"noise sd fitted: {fit.noise_sigma:.6g} ± {_g(fit.noise_sigma_error, 2)} "
                 f"(rms over the observed voxels)" if fit.noise_fitted
                 else f"noise sd held at {fit.noise_sigma:.6g} (rms over the observed voxels)")
        lines = ["; ".join(parts),
                 f"{fit.message}; chi² {fit.chi2:.1f} for {fit.dof} degrees of freedom "
                 f"(chi²/dof {fit.chi2_per_dof:.2f}); {noise}; observed fraction "
                 f"{fit.observed_fraction:.3f}."]
        if choice is not None and len(choice.fits) > 1:
            if choice.chosen == fit.kind:
                lines.append(f"Best family by BIC: this one ({choice.message}).")
            else:
                lines.append(f"The data prefer {choice.chosen} by BIC ({choice.message}); "
                             "choose it above to use that fit.")
        if fit.flagged:
            lines.append("FLAGGED: " + fit.warning)
        lines.append("Dots: the data's P(k), noise subtracted, mask corrected (hollow: less "
                     "than 2 sd above 0); dashed: the fit; solid: the prior.")
        self.fit_label.setStyleSheet("color: #d9534f;" if fit.flagged else "")
        self.fit_label.setText("\n".join(lines))
        finite = np.isfinite(fit.power) & fit.used
        # above zero by two of its sd: detected; the others are drawn hollow at their value
        detected = finite & (fit.power > 2.0 * fit.power_error)
        shown = finite & (fit.power > 0)
        self.fit_data.setData(fit.k[detected], fit.power[detected])
        self.fit_dropped.setData(fit.k[shown & ~detected], fit.power[shown & ~detected])
        k = fit.k[np.isfinite(fit.k)]
        k = np.geomspace(k.min(), k.max(), 200)
        p = fit.spectrum.evaluate(k)
        # the fit drawn where the data can see it: not decades below the noise
        visible = p > 1e-3 * fit.noise_power
        self.fit_curve.setData(k[visible], p[visible])

    def fit_usable(self) -> bool:
        """A fit to use: there is one, and it is not flagged or the user said to use it."""
        fit = self.fit_result
        return fit is not None and (not fit.flagged or self.accept_flagged.isChecked())

    def _update_use_buttons(self) -> None:
        usable = self.fit_usable()
        self.use_fixed_button.setEnabled(usable)
        self.use_centres_button.setEnabled(usable)
        tip = ("" if usable or self.fit_result is None else
               "the fit is flagged (chi²/dof far above 1): tick 'Use this flagged fit anyway' "
               "to use it")
        self.use_fixed_button.setToolTip(tip)
        self.use_centres_button.setToolTip(tip)

    def _fitted(self):
        fit = self.fit_result
        if not self.fit_usable():
            return []
        return [(n, round_to_error(fit.values[n], fit.errors[n])) for n in fit.names]

    def use_fit_as_fixed(self) -> None:
        """Every fitted hyperparameter fixed at its fitted value (rounded to its error)."""
        s = self.state
        with s.batch():
            for name, value in self._fitted():
                s.set_sampled(name, False)
                s[f"prior.{name}.value"] = value

    def use_fit_as_centres(self) -> None:
        """Each sampled hyperparameter's prior moved to be centred (median) on the fitted value,
        its width kept; a fixed one takes the value. A prior that cannot be centred there (a
        lognormal on a negative value) is left as it is, and the label says so."""
        s = self.state
        skipped = []
        with s.batch():
            for name, value in self._fitted():
                p = f"prior.{name}"
                if not s[f"{p}.sampled"]:
                    s[f"{p}.value"] = value
                    continue
                dist = s[f"{p}.dist"]
                if dist == "normal":
                    s[f"{p}.loc"] = value
                elif dist == "lognormal" and value > 0:
                    s[f"{p}.loc"] = round_to_error(math.log(value),
                                                   self.fit_result.errors[name] / value)
                elif dist == "uniform" and all(isinstance(s[f"{p}.{b}"], (int, float))
                                               for b in ("low", "high")):
                    half = 0.5 * (s[f"{p}.high"] - s[f"{p}.low"])
                    s[f"{p}.low"], s[f"{p}.high"] = value - half, value + half
                else:
                    skipped.append(f"{name} ({dist} prior)")
        if skipped:
            self.fit_label.setText(self.fit_label.text() + "\nNot centred: " + ", ".join(skipped)
                                   + " cannot be centred on the fitted value.")

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
        if not _alive(self.plot):
            return
        if any(k.startswith(_FIT_KEYS) for k in keys):
            self._fit_generation += 1           # a fit under way or shown no longer applies
            if self.fit_result is not None or self._fitter.busy:
                self._show_fit(None, "")
        if any(k.startswith(("prior.", "grid.", "data.", "model.")) for k in keys):
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
        # a model file's scalar model: its priors are the Model file tab's
        self.setEnabled(s["model.kind"] != "python")
        integral = s["model.kind"] in ("integral", "python")
        kind = s["prior.kind"]
        names = set(s.hyper_names())
        for name, editor in self.editors.items():
            editor.setVisible(name in names)
        for widget, key, visible in ((self.kind_combo, "prior.kind", not integral),
                                     (self.pivot, "prior.k_pivot", not integral and kind not in ("table", "band_powers")),
                                     (self.table_row, "prior.table", not integral and kind == "table"),
                                     (self.refine, "integral.refine", integral)):
            self.form.setRowVisible(widget, visible)
            widget.setHidden(not visible)
            if not visible:
                self.form.setRowVisible(self.messages[key], False)
        for widget in (self.plot, self.plot_caption, self.draw_button, self.draw_caption,
                       self.fit_box):
            widget.setVisible(not integral)
        self.band_editor.setVisible(not integral and kind == "band_powers")
        self._update_fit_button()
        if integral:
            self.draw_preview.setVisible(False)
            return
        self._update_plot()

    # -- the prior's P(k) ---------------------------------------------------------------------

    def spectrum(self, values: dict | None = None, kind: str | None = None):
        """The spectrum at the hyperparameters' centres (or ``values``) of the config's family
        (or ``kind``'s); None if invalid."""
        s = self.state
        kind = kind or s["prior.kind"]
        try:
            if kind == "table":
                return load_power_table(s.resolve(s["prior.table"]))
            if kind == "band_powers":
                prior = band_prior(s, self._grid())
                return None if isinstance(prior, str) else band_spectrum(prior[0], prior[1])
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
        if s["prior.kind"] == "band_powers":
            self._update_band_plot()
            return
        spectrum = self.spectrum()
        if spectrum is None:
            self._show_curves()
            self.plot_caption.setText("Fix the prior's settings to see its P(k).")
            self.draw_button.setEnabled(False)
            return
        k = self._k_values(spectrum)
        p = spectrum.evaluate(k)
        band = None
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
                    band = np.exp(np.percentile(logp, [16, 84], axis=0))
                    caption += (f"; band: 68 % of P(k) over {self.BAND_DRAWS} draws of "
                                + ", ".join(sampled))
                except ValueError:
                    # e.g. a normal prior on the amplitude reaching A <= 0
                    caption += "; (no band: some prior draws are outside the family's range)"
        self._show_curves(k, p, band)
        self._finish_plot(caption)

    def _show_curves(self, k=None, p=None, band=None) -> None:
        """The prior's P(k) and its band ((low, high)); nothing where not given. The fill is
        hidden without a band: pyqtgraph's keeps its last shape when its curves are emptied."""
        empty = ([], [])
        self.curve.setData(*((k, p) if p is not None else empty))
        self.band_lo.setData(*((k, band[0]) if band is not None else empty))
        self.band_hi.setData(*((k, band[1]) if band is not None else empty))
        self.band.setVisible(band is not None)

    def _update_band_plot(self) -> None:
        """Band powers: each bin's prior median and 68 % band (``band_log_prior``)."""
        prior = band_prior(self.state, self._grid())
        if isinstance(prior, str):
            self._show_curves()
            for line in self.k_lines:
                line.setVisible(False)
            self.plot_caption.setText(f"Band powers: {prior}.")
            self.draw_button.setEnabled(False)
            return
        edges, mean, cov = prior
        k = np.geomspace(edges[0], edges[-1], 400)
        sd = np.sqrt(np.diag(cov))
        self._show_curves(k, band_spectrum(edges, mean).evaluate(k),
                          (band_spectrum(edges, mean - sd).evaluate(k), band_spectrum(edges, mean + sd).evaluate(k)))
        walk = self.state["prior.random_walk_scale"]
        self._finish_plot(f"{len(mean)} band powers: each bin's prior median {_g(math.exp(mean[0]))} and "
                          f"68 % band" + (f"; the random walk (step sd {_g(walk)}) ties neighbouring bins: "
                                          f"sd of log P {_g(sd.min(), 2)}-{_g(sd.max(), 2)} per bin"
                                          if walk is not None else ""))

    def _finish_plot(self, caption: str) -> None:
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
        if s["prior.kind"] == "band_powers":
            return self._draw_bands(grid, rng, seed)
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



    def _draw_bands(self, grid, rng, seed) -> None:
        """Band powers: log P drawn from its Gaussian prior, then a field with that P(k)."""
        from core.field.synthetic import gaussian_random_field

        prior = band_prior(self.state, grid)
        if isinstance(prior, str):
            return
        edges, mean, cov = prior
        log_p = rng.multivariate_normal(mean, cov)
        field = gaussian_random_field(grid, band_spectrum(edges, log_p), rng)
        self._draws += 1
        self.draw_preview.setVisible(True)
        self.draw_preview.show_slice(field[grid.shape[0] // 2])
        self.draw_caption.setText(f"Middle slice of a field drawn from the prior (seed {seed}; "
                                  f"{len(mean)} band powers from {_g(float(np.exp(log_p.min())))} to "
                                  f"{_g(float(np.exp(log_p.max())))}); field sd {_g(float(field.std()))}.")
        self.last_draw = field

    def _kind_changed(self, kind) -> None:
        """Band powers chosen: each bin's prior, when the config has none, centred on the
        P(k) the previous family gives over the grid's k range (its geometric mean)."""
        previous, self._kind_seen = self._kind_seen, kind
        if kind != "band_powers" or self.state["prior.band_power"] is not None:
            return
        level = None
        spectrum = self.spectrum(kind=previous) if previous in FIELD_HYPERPARAMETERS else None
        if spectrum is not None:
            with np.errstate(all="ignore"):
                p = spectrum.evaluate(self._k_values(spectrum))
            p = p[np.isfinite(p) & (p > 0)]
            level = float(np.exp(np.mean(np.log(p)))) if p.size else None
        self.state["prior.band_power"] = default_band_power(level)
