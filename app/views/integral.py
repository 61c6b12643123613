"""The integral-model view: data with the posterior predictive, parameter traces and
histograms, and the discretisation report.

For a run with ``model.kind = "integral"`` (y_i = c + integral_0^t_i exp(A s) f(s) ds
+ e_i, e_i ~ N(0, sigma^2); ``core.integral``) it shows

    the data (t, y) with, over a subset of the post-warmup draws (at most
        ``max_band_draws``, evenly spaced through the chain-major pooled draws), the
        posterior mean of the model curve mu(t) = c + I(t; A) (``predictive_mean``:
        the trapezoid rule with the run's ``refine``, the model the sampler samples),
        its 90 % credible band (5th and 95th percentiles of mu(t_i) over the draws),
        and the 90 % posterior predictive band of a new observation y(t_i) = mu(t_i)
        + sigma e: the 5 % and 95 % quantiles of the mixture of N(mu_d(t_i), sigma_d^2)
        over the draws d (solved exactly by bisection, no noise draws);
    a trace (per chain, against the step; warmup shaded) and a histogram (post-warmup
        draws of every chain) of each sampled parameter (A, c, sigma); fixed parameters
        are listed with their values;
    the discretisation report (``core.integral.discretisation_report``: the
        posterior of A at refine r, 2r and with the exact integral), computed once per
        run on a worker thread; the quadrature mean +- sd of A at refine r is drawn on
        A's histogram (named in the legend above the parameters).

Layout: the data (legend above the plots, residuals below) over the report, beside the
parameters' rows when the view is at least ``SIDE_BY_SIDE_WIDTH`` wide, above them when it
is narrower (the main window's left half, mostly): squeezed beside the data, the traces get
no width and their labels run off.

The band is computed on a worker thread too (its cost grows with the series length);
requests made while one is running are coalesced into one more computation with the
draws of that moment. Results of a run no longer shown are discarded.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pyqtgraph as pg
from pyqtgraph.Qt import QtCore, QtGui, QtWidgets
from scipy.special import ndtr

from app.state.run_state import RunState
from app.views.base import FIELD_VIEWS, INTEGRAL, RunView
from app.views.jobs import CancellableJob, WorkerRelay
from app.views.style import (
    LegendStrip,
    add_empty_hint,
    add_legend_strip,
    add_warmup_marker,
    chain_pen,
    configure_live_plot,
    steady_axes,
)
from core.integral.spec import PARAMETERS
from core.priors import SampledPrior

__all__ = [
    "BAND_LEVEL", "BAND_QUANTILES", "HIST_BINS", "BAND_BRUSH", "PRED_BRUSH", "Band",
    "mixture_quantiles", "predictive_band", "band_subset", "spec_for", "IntegralView"
]

BAND_LEVEL = 0.90
BAND_QUANTILES = ((1 - BAND_LEVEL) / 2, (1 + BAND_LEVEL) / 2)
HIST_BINS = 40
BAND_BRUSH = (79, 163, 255, 110)
PRED_BRUSH = (255, 166, 64, 70)


# --------------------------------------------------------------------------- numbers


class Band(NamedTuple):
    """The posterior predictive at the data times (arrays of len(t)).

    mean: mean over the draws of mu(t) = c + I(t; A); lo, hi: its 5th / 95th
    percentiles (numpy.quantile, linear interpolation); pred_lo, pred_hi: the 5 % / 95 %
    quantiles of a new observation, the mixture of N(mu_d, sigma_d^2) over the draws d;
    n_draws: how many draws.
    """

    t: np.ndarray
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    pred_lo: np.ndarray
    pred_hi: np.ndarray
    n_draws: int


def mixture_quantiles(mu: np.ndarray, sigma: np.ndarray, quantiles, iterations: int = 200,
                      rtol: float = 1e-12) -> np.ndarray:
    """Quantiles of the equal-weight mixture of N(mu[d, i], sigma[d]^2) over d, per i.

    mu: (draws, n), sigma: (draws,) > 0. Solves mean_d Phi((x - mu[d, i]) / sigma[d]) = q
    by bisection on [min mu - 10 max sigma, max mu + 10 max sigma] until the bracket is
    below rtol times its scale. Returns (len(quantiles), n).
    """
    mu = np.asarray(mu, np.float64)
    sigma = np.asarray(sigma, np.float64)[:, None]
    lo0 = mu.min(axis=0) - 10 * sigma.max()
    hi0 = mu.max(axis=0) + 10 * sigma.max()
    scale = np.maximum(np.abs(lo0), np.abs(hi0)) + sigma.max()
    out = []
    for q in quantiles:
        lo, hi = lo0.copy(), hi0.copy()
        for _ in range(iterations):
            mid = 0.5 * (lo + hi)
            below = np.mean(ndtr((mid - mu) / sigma), axis=0) < q
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
            if np.all(hi - lo <= rtol * scale):
                break
        out.append(0.5 * (lo + hi))
    return np.array(out)


def predictive_band(spec, A, c, sigma) -> Band:
    """The ``Band`` of draws (A, c, sigma), each (draws,), for ``spec``
    (``core.integral.IntegralModelSpec``)."""
    from core.integral import predictive_mean

    A, c, sigma = (np.asarray(v, np.float64) for v in (A, c, sigma))
    mu = predictive_mean(spec, A, c)                        # (draws, n), trapezoid with spec.refine
    keep = np.all(np.isfinite(mu), axis=1) & np.isfinite(sigma) & (sigma > 0)
    mu, sigma = mu[keep], sigma[keep]
    if not len(mu):
        raise ValueError("no draw gives a finite model curve")
    lo, hi = np.quantile(mu, BAND_QUANTILES, axis=0)
    pred_lo, pred_hi = mixture_quantiles(mu, sigma, BAND_QUANTILES)
    return Band(np.asarray(spec.t), mu.mean(axis=0), lo, hi, pred_lo, pred_hi, len(mu))


def band_subset(n: int, max_draws: int) -> np.ndarray:
    """Indices of at most ``max_draws`` draws evenly spaced through n (all when n is smaller)."""
    if n <= max_draws:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, max_draws)).astype(np.int64))


def spec_for(cfg, observed: dict | None = None):
    """The ``IntegralModelSpec`` of an integral run: t, y (and f) from the store's observed
    data when there, else from the config's data file; refine and priors from the config."""
    from core.integral import spec_from_config

    observed = observed or {}
    if observed.get("t") is not None and observed.get("y") is not None:
        t, y, f = observed["t"], observed["y"], observed.get("f")
    else:
        from core.io import load_series_inputs

        series = load_series_inputs(cfg)
        t, y, f = series.t, series.y, series.f
    return spec_from_config(cfg, t, y, f)


def _report(spec):
    from core.integral import discretisation_report

    return discretisation_report(spec)


# --------------------------------------------------------------------------- the view


#: the quadrature posterior mean of A on its histogram (the +- sd region in the same orange)
QUADRATURE_PEN = pg.mkPen("#ffa640", width=1.5)
#: the least width in pixels of the view that shows the data and the parameters side by side
#: (narrower: the parameters below the data)
SIDE_BY_SIDE_WIDTH = 800


class ProportionalSplitter(QtWidgets.QSplitter):
    """A splitter that keeps its panes in proportion to ``weights`` as it is resized (each
    at its minimum size at least), until the user moves a handle."""

    def __init__(self, orientation, weights, parent=None):
        super().__init__(orientation, parent)
        self.weights = tuple(weights)
        self.by_hand = False
        self.setChildrenCollapsible(False)
        self.splitterMoved.connect(self._moved)

    def _moved(self, _pos: int, _index: int) -> None:
        self.by_hand = True

    def set_weights(self, weights) -> None:
        self.weights, self.by_hand = tuple(weights), False
        self._apply()

    def _apply(self) -> None:
        total = sum(self.sizes())
        if total > 0 and len(self.weights) == self.count():
            self.setSizes([round(total * w / sum(self.weights)) for w in self.weights])

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if not self.by_hand:
            self._apply()


class IntegralView(RunView):
    """Data and posterior predictive, parameter traces and histograms, discretisation report.

    ``refresh(force=False) -> bool`` redraws when the state's traces moved
    (``trace_version``; the band is recomputed on a worker, see the module docstring) or
    the run changed (``layout_version``, config text, observed data). Signals:
    ``band_ready`` when a new band is drawn, ``report_ready(str)`` with the report text
    (or the reason there is none).

    Attributes for tests and exports: ``status`` ("no run", "not integral", "failed",
    "ok"), ``spec``, ``fixed`` (name -> value of the fixed parameters), ``draws`` (name ->
    pooled post-warmup draws of the sampled ones), ``band`` (``Band`` or None),
    ``band_draws`` (name -> the draws the band used), ``hists`` (name -> (edges, counts)),
    ``report`` (``DiscretisationReport`` or None) and ``report_text``.
    """

    title = "Integral model"
    group = FIELD_VIEWS
    kinds = frozenset({INTEGRAL})

    band_ready = QtCore.Signal()
    report_ready = QtCore.Signal(str)

    def __init__(self, run_state: RunState, parent=None, *, max_band_draws: int = 200,
                 hist_bins: int = HIST_BINS):
        super().__init__(run_state, parent)
        self.max_band_draws = int(max_band_draws)
        self.hist_bins = int(hist_bins)
        self.status = "no run"
        self.spec = None
        self.fixed: dict[str, float] = {}
        self.draws: dict[str, np.ndarray] = {}
        self.band: Band | None = None
        self.band_draws: dict[str, np.ndarray] = {}
        self.hists: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.report = None
        self.report_text = ""
        self._key = None
        self._key_refs = None
        self._layout_seen = None
        self._traces_seen = None
        self._report_job: CancellableJob | None = None
        self._band_job: CancellableJob | None = None
        self._band_pending = False
        self._report_relay = WorkerRelay(self)
        self._report_relay.finished.connect(self._report_finished)
        self._report_relay.failed.connect(self._report_failed)
        self._band_relay = WorkerRelay(self)
        self._band_relay.finished.connect(self._band_finished)
        self._band_relay.failed.connect(self._band_failed)
        self.params_legend = LegendStrip()     # in the parameters' layout once it is built
        self._wide: bool | None = None         # data and parameters side by side (else stacked)
        self.trace_plots: dict[str, pg.PlotItem] = {}
        self.trace_curves: dict[str, list[pg.PlotDataItem]] = {}
        self.hist_plots: dict[str, pg.PlotItem] = {}
        self.hist_curves: dict[str, pg.PlotDataItem] = {}
        self._quadrature_items: list = []
        self._build_widgets()

    # -- widgets -------------------------------------------------------------------------

    def _build_widgets(self) -> None:
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        self.status_label = QtWidgets.QLabel("no run")
        self.status_label.setWordWrap(True)
        self.status_label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status_label)
        self.splitter = ProportionalSplitter(QtCore.Qt.Orientation.Horizontal, (3, 2))
        layout.addWidget(self.splitter, 1)

        left = self.left_splitter = ProportionalSplitter(QtCore.Qt.Orientation.Vertical, (3, 2))
        self.data_widget = pg.GraphicsLayoutWidget()
        # the legend (what is drawn: the data and the posterior predictive) in a row of its
        # own above the plot: over it, it would cover the series
        plot = self.data_widget.addPlot(row=1, col=0)
        steady_axes(plot)
        plot.setLabel("left", "y")
        plot.showGrid(x=True, y=True, alpha=0.15)
        add_legend_strip(self.data_widget, plot, row=0)
        self.data_plot = plot
        # the same bands relative to the posterior mean curve: on the data's scale they are
        # often thinner than a line
        resid = self.data_widget.addPlot(row=2, col=0)
        steady_axes(resid)
        resid.setLabel("left", "y - mean")
        resid.setLabel("bottom", "t")
        resid.showGrid(x=True, y=True, alpha=0.15)
        resid.setXLink(plot)
        plot.getAxis("bottom").setStyle(showValues=False)
        self.data_widget.ci.layout.setRowStretchFactor(1, 3)
        self.data_widget.ci.layout.setRowStretchFactor(2, 2)
        self.residual_plot = resid
        self.band_items: dict[str, dict[str, pg.PlotDataItem]] = {}
        for key, target in (("data", plot), ("residual", resid)):
            items = {name: pg.PlotDataItem(pen=pg.mkPen(None))
                     for name in ("pred_lo", "pred_hi", "lo", "hi")}
            pred_fill = pg.FillBetweenItem(items["pred_lo"], items["pred_hi"], brush=PRED_BRUSH)
            band_fill = pg.FillBetweenItem(items["lo"], items["hi"], brush=BAND_BRUSH)
            for item in (items["pred_lo"], items["pred_hi"], pred_fill, items["lo"], items["hi"],
                         band_fill):
                target.addItem(item)
            items["mean"] = target.plot(pen=pg.mkPen("#4fa3ff", width=2),
                                        name="mean of c + I(t; A)" if key == "data" else None)
            items["points"] = target.plot(pen=None, symbol="o", symbolSize=4, symbolPen=None,
                                          symbolBrush=(230, 230, 230, 200),
                                          name="data" if key == "data" else None)
            self.band_items[key] = items
        self.mean_curve = self.band_items["data"]["mean"]
        self.lo_curve, self.hi_curve = self.band_items["data"]["lo"], self.band_items["data"]["hi"]
        self.pred_lo_curve = self.band_items["data"]["pred_lo"]
        self.pred_hi_curve = self.band_items["data"]["pred_hi"]
        self.data_points = self.band_items["data"]["points"]
        # legend entries through stand-ins: a FillBetweenItem in a legend crashes at teardown
        self._legend_proxies = []
        for brush, label in ((BAND_BRUSH, "its 90% band"), (PRED_BRUSH, "90% predictive (with sigma)")):
            proxy = pg.PlotDataItem(pen=pg.mkPen(None), fillLevel=0, fillBrush=brush)
            plot.legend.addItem(proxy, label)
            self._legend_proxies.append(proxy)
        self.data_hint = add_empty_hint(plot, "")
        left.addWidget(self.data_widget)
        self.report_box = QtWidgets.QPlainTextEdit()
        self.report_box.setReadOnly(True)
        font = QtGui.QFontDatabase.systemFont(QtGui.QFontDatabase.SystemFont.FixedFont)
        self.report_box.setFont(font)
        self.report_box.setLineWrapMode(QtWidgets.QPlainTextEdit.LineWrapMode.NoWrap)
        left.addWidget(self.report_box)
        left.setStretchFactor(0, 3)
        left.setStretchFactor(1, 2)
        self.splitter.addWidget(left)
        self.params_widget = pg.GraphicsLayoutWidget()
        self.splitter.addWidget(self.params_widget)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)

    def resizeEvent(self, event) -> None:
        # side by side when there is room for both halves, else the parameters below the
        # data: squeezed beside it, their traces get no width and their labels run off
        super().resizeEvent(event)
        wide = event.size().width() >= SIDE_BY_SIDE_WIDTH
        if wide == self._wide:
            return
        self._wide = wide
        self.splitter.setOrientation(QtCore.Qt.Orientation.Horizontal if wide else QtCore.Qt.Orientation.Vertical)
        # beside the parameters, the whole report below the data, the data 3 : 2 to them;
        # below them, a few lines of it (it scrolls) and the rest for the plots, as high as them
        self.report_box.setMinimumHeight((12 if wide else 5) * self.report_box.fontMetrics().lineSpacing())
        self.left_splitter.set_weights((3, 2) if wide else (1000, 1))
        self.splitter.set_weights((3, 2) if wide else (1, 1))

    def _build_param_rows(self) -> None:
        """One row per sampled parameter: its trace (per chain) and its histogram."""
        st = self.state
        self.params_widget.clear()
        self.trace_plots.clear()
        self.trace_curves.clear()
        self.hist_plots.clear()
        self.hist_curves.clear()
        self._quadrature_items = []
        names = self._sampled_names()
        chains = st.chains or 0
        first = None
        # row 0: the legend of what is drawn over the histograms (the quadrature's posterior)
        self.params_legend = add_legend_strip(self.params_widget, None, row=0, colspan=2)
        for row, name in enumerate(names, start=1):
            trace = self.params_widget.addPlot(row=row, col=0)
            configure_live_plot(trace, ylabel=name)
            trace.getAxis("left").enableAutoSIPrefix(False)
            add_warmup_marker(trace, st.num_warmup, label=first is None)
            if first is None:
                first = trace
            else:
                trace.setXLink(first)
            last = row == len(names)
            trace.setLabel("bottom", "step" if last else None)
            trace.getAxis("bottom").setStyle(showValues=last)          # the steps are x-linked
            self.trace_curves[name] = [trace.plot(pen=chain_pen(c), connect="finite")
                                       for c in range(chains)]
            hist = self.params_widget.addPlot(row=row, col=1)
            steady_axes(hist)
            hist.showGrid(x=True, y=True, alpha=0.15)
            hist.getAxis("bottom").enableAutoSIPrefix(False)
            hist.getAxis("left").setStyle(showValues=False)        # counts: the shape is what tells
            hist.setLabel("bottom", name if last else None)
            hist.setTitle(f"posterior of {name}" if row == 1 else None, size="8pt")
            self.hist_curves[name] = hist.plot(stepMode="center", fillLevel=0,
                                               brush=(79, 163, 255, 120), pen=pg.mkPen("#4fa3ff"))
            self.trace_plots[name] = trace
            self.hist_plots[name] = hist
        layout = self.params_widget.ci.layout
        layout.setColumnStretchFactor(0, 3)
        layout.setColumnStretchFactor(1, 2)
        self._layout_seen = (st.layout_version, tuple(names), chains)
        self._draw_quadrature()

    # -- the run -------------------------------------------------------------------------

    def _sampled_names(self) -> list[str]:
        return [n for n in self.state.param_names if n in PARAMETERS]

    def _run_key(self):
        st = self.state
        refs = tuple(st.observed.get(name) for name in ("t", "y", "f"))
        key = (st.config_text, st.config_dir, st.model_kind, st.grid_shape,
               tuple(id(a) if a is not None else None for a in refs))
        return key, refs

    def _new_run(self, key, refs) -> None:
        for job in (self._report_job, self._band_job):
            if job is not None:
                job.cancel()
        self._report_job = self._band_job = None
        self._band_pending = False
        self._key, self._key_refs = key, refs
        self.spec, self.fixed, self.draws, self.band_draws, self.hists = None, {}, {}, {}, {}
        self.band, self.report, self.report_text = None, None, ""
        self._traces_seen = None
        self._clear_band()
        st = self.state
        cfg = st.config
        kind = (cfg.model.kind if cfg is not None else "") or st.model_kind
        if st.model_kind == "field" or st.has_field or kind == "field":
            self._set_status("not integral", "not an integral-model run: this view shows runs "
                             "with model.kind = \"integral\"")
            self._set_report("")
            return
        if cfg is None:
            if st.model_kind == "integral":
                reason = ("the run's config is unreadable" if st.config_text else
                          "the run's config is unknown (no config text)")
                self._set_status("failed", reason)
            else:
                self._set_status("no run", "no integral-model run yet: start one or open a run directory")
            self._set_report("")
            return
        try:
            self.spec = spec_for(cfg, st.observed)
        except (ValueError, OSError) as exc:
            self._set_status("failed", f"cannot build the model from the run's data: {exc}")
            self._set_report("")
            return
        self.fixed = {name: float(getattr(cfg.prior, name)) for name in PARAMETERS
                      if not isinstance(getattr(cfg.prior, name), SampledPrior)}
        self._set_status("ok", "")
        self.data_points.setData(self.spec.t, self.spec.y)
        spec = self.spec
        self._set_report("computing the discretisation report (refine r vs 2r)\u2026")
        self._report_job = CancellableJob(lambda report: _report(spec), self._report_relay,
                                          name="fieldscope-integral-report").start()

    def _set_status(self, status: str, reason: str) -> None:
        self.status = status
        if status != "ok":
            self.status_label.setText(reason)
            return
        spec = self.spec
        parts = [f"integral model: {len(spec.t)} data points, refine {spec.refine}"]
        if self.fixed:
            parts.append("fixed: " + ", ".join(f"{n} = {v:.6g}" for n, v in self.fixed.items()))
        if self.band is not None:
            parts.append(f"bands from {self.band.n_draws} of {self._n_pooled()} post-warmup draws")
        self.status_label.setText("  |  ".join(parts))

    def _n_pooled(self) -> int:
        return len(next(iter(self.draws.values()))) if self.draws else 0

    def _set_report(self, text: str) -> None:
        self.report_text = text
        self.report_box.setPlainText(text)

    def _report_finished(self, job, report) -> None:
        if job is not self._report_job:
            return
        self._report_job = None
        self.report = report
        self._set_report(report.format())
        self._draw_quadrature()
        self.report_ready.emit(self.report_text)

    def _report_failed(self, job, message: str) -> None:
        if job is not self._report_job:
            return
        self._report_job = None
        self._set_report(f"no discretisation report: {message}")
        self.report_ready.emit(self.report_text)

    def is_computing(self) -> bool:
        return self._report_job is not None or self._band_job is not None

    def cancel(self) -> None:
        """Abandon running computations (their results are discarded)."""
        for job in (self._report_job, self._band_job):
            if job is not None:
                job.cancel()
        self._report_job = self._band_job = None
        self._band_pending = False

    def closeEvent(self, event) -> None:
        self.cancel()
        super().closeEvent(event)

    # -- drawing -------------------------------------------------------------------------

    def refresh(self, force: bool = False) -> bool:
        """Redraw what changed. Returns whether anything was redrawn."""
        st = self.state
        key, refs = self._run_key()
        if key != self._key:
            self._new_run(key, refs)
            force = True
        if self.status != "ok":
            if force:
                self._clear_params()
                self.data_hint.setText("")
            return force
        names = tuple(self._sampled_names())
        if self._layout_seen != (st.layout_version, names, st.chains or 0):
            self._build_param_rows()
            force = True
        seen = (st.layout_version, st.trace_version)
        if seen == self._traces_seen and not force:
            return False
        self._traces_seen = seen
        self._draw_traces()
        self._collect_draws()
        self._draw_histograms()
        self._request_band()
        return True

    def _clear_params(self) -> None:
        self.params_widget.clear()
        self.trace_plots.clear()
        self.trace_curves.clear()
        self.hist_plots.clear()
        self.hist_curves.clear()
        self._quadrature_items = []
        self._layout_seen = None
        self.data_points.setData([], [])

    def _draw_traces(self) -> None:
        st = self.state
        steps = st.steps
        for name, curves in self.trace_curves.items():
            values = st.param(name)
            for c, curve in enumerate(curves):
                curve.setData(steps, values[c])

    def _collect_draws(self) -> None:
        """Pooled post-warmup draws (chain-major) of every sampled parameter; draws where
        any of them is NaN (a parameter first seen later) are dropped for all."""
        st = self.state
        post = st.steps >= st.num_warmup
        names = self._sampled_names()
        if not names or not post.any():
            self.draws = {name: np.empty(0) for name in names}
            return
        stacked = np.stack([st.param(name)[:, post].reshape(-1) for name in names])
        good = np.all(np.isfinite(stacked), axis=0)
        self.draws = {name: stacked[i, good] for i, name in enumerate(names)}

    def _draw_histograms(self) -> None:
        self.hists = {}
        for name, curve in self.hist_curves.items():
            values = self.draws.get(name, np.empty(0))
            if not values.size:
                curve.setData([], [])
                continue
            counts, edges = np.histogram(values, bins=self.hist_bins)
            self.hists[name] = (edges, counts)
            curve.setData(edges, counts)

    def _draw_quadrature(self) -> None:
        """The quadrature posterior mean +- sd of A at refine r (from the report) on A's histogram."""
        plot = self.hist_plots.get("A")
        for item in self._quadrature_items:
            if plot is not None:
                plot.removeItem(item)
        self._quadrature_items = []
        self.params_legend.clear()
        if plot is None or self.report is None:
            return
        m, s = self.report.mean_r, self.report.sd_r
        region = pg.LinearRegionItem(values=(m - s, m + s), movable=False, brush=(255, 166, 64, 50),
                                     pen=pg.mkPen(None))
        line = pg.InfiniteLine(pos=m, angle=90, pen=QUADRATURE_PEN)
        for item in (region, line):
            plot.addItem(item)
        self._quadrature_items = [region, line]
        # named in the legend above the parameters (a label on the line runs out of a narrow plot)
        self.params_legend.addItem(pg.PlotDataItem(pen=QUADRATURE_PEN), "quadrature posterior of A: mean ± sd")

    # -- the band (worker) ---------------------------------------------------------------

    def _band_inputs(self):
        """Copies of the draws the band uses (the worker never touches the state's buffers)."""
        n = self._n_pooled()
        if not n and self._sampled_names():
            return None
        idx = band_subset(max(n, 1), self.max_band_draws)
        values = {}
        for name in PARAMETERS:
            if name in self.draws:
                values[name] = self.draws[name][idx].copy()
            else:
                values[name] = np.full(len(idx), self.fixed.get(name, math.nan))
        return values

    def _request_band(self) -> None:
        if self.spec is None:
            return
        if self._band_job is not None:
            self._band_pending = True
            return
        inputs = self._band_inputs()
        if inputs is None:
            self._clear_band()
            self.data_hint.setText("waiting for post-warmup draws")
            return
        spec = self.spec

        def compute(report):
            return predictive_band(spec, inputs["A"], inputs["c"], inputs["sigma"]), inputs

        self._band_job = CancellableJob(compute, self._band_relay, name="fieldscope-integral-band").start()

    def _band_finished(self, job, result) -> None:
        if job is not self._band_job:
            return
        self._band_job = None
        self.band, self.band_draws = result
        band = self.band
        for key, items in self.band_items.items():
            offset = band.mean if key == "residual" else 0.0
            for name in ("mean", "lo", "hi", "pred_lo", "pred_hi"):
                items[name].setData(band.t, getattr(band, name) - offset)
        self.band_items["residual"]["points"].setData(band.t, self.spec.y - band.mean)
        self.data_hint.setText("")
        self._set_status("ok", "")
        self.band_ready.emit()
        self._band_next()

    def _band_failed(self, job, message: str) -> None:
        if job is not self._band_job:
            return
        self._band_job = None
        self.data_hint.setText(f"no predictive band: {message}")
        self._band_next()

    def _band_next(self) -> None:
        if self._band_pending:
            self._band_pending = False
            self._request_band()

    def _clear_band(self) -> None:
        self.band = None
        for items in self.band_items.values():
            for name in ("mean", "lo", "hi", "pred_lo", "pred_hi"):
                items[name].setData([], [])
        self.band_items["residual"]["points"].setData([], [])
