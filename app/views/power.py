"""The power-spectrum panel: P(k) of the latest draw, the running mean, the prior, the data
and the truth, with a ratio subplot (sample / prior) and the cosmic-variance band.

Every measured curve is ``core.field.power_estimator.measure_power`` on the run's grid (the box
size comes from the run's config): shell-averaged |DFT|^2 V / N^2 over the full-grid modes
of each shell, at the shells' mode-averaged k. The engine stores the same estimator
(``core.engine.models.FieldModel.field_power``), computed in the model's dtype (float32 by
default) inside the sampler; the panel recomputes it in float64 from the stored draw, so
its curves are core's estimator exactly and agree with the engine's ``latest_power`` to
float32 rounding (about 1e-6 relative).

Curves (x: k in 1/unit, y: P in unit^3, both log):

    latest draw     P(k) of each chain's latest kept field draw (chain colours)
    posterior mean  P(k) of the running posterior mean; below the prior wherever the noise
                    dominates (the mean is shrunk towards 0), not a draw of P(k)
    prior           P(k) of the prior at the hyperparameters' latest sampled values (each
                    chain's own: chain 0 solid, the others dashed and only when a
                    hyperparameter is sampled), fixed ones from the config (before any
                    run, the data preview: sampled ones at their prior's median); evaluated at
                    the shell centres. The expectation of a shell estimate is the mode
                    average of P over the shell, which differs from P(k_shell) only where
                    P curves within a shell (second order in the shell width).
    cosmic variance the band P(k) (1 +- 1 / sqrt(N_ind(k))) around chain 0's prior: the
                    1-sigma spread of one draw's shell estimate, sqrt(2 / c) for c modes
                    (``core.field.power_estimator.relative_error``).
    data            P(k) of the observed data: masked (and NaN) voxels zero-filled after
                    subtracting the mean of the observed ones, the power divided by the
                    observed fraction f (the pseudo-power's leading-order correction for
                    the lost volume; the mask still couples neighbouring shells). It
                    includes the noise (the dotted line is the white-noise level
                    <sigma^2> V / N over the observed voxels) and any beam. Gaussian
                    likelihood only (for counts it is not a P(k) of the field).
    truth           P(k) of the true field, when the data set has one
    P(k) posterior  when hyperparameters are sampled (a parametric family or band powers):
                    the median and the 68 % and 95 % bands of P(k; theta) over the kept
                    post-warmup draws of theta, all chains (``posterior_quantiles``; at most
                    ``POSTERIOR_DRAWS`` of them, evenly spaced): the spectrum's posterior, to
                    hold against the data's estimate and the truth. For band powers, each
                    bin's posterior.

The ratio subplot shows each chain's latest draw over its own prior, with the line at 1
and the band 1 +- 1 / sqrt(N_ind(k)).

Threading. The FFTs (one per chain, the mean, the data and the truth: about 20 ms each at
64^3), one field at a time, run in a worker thread (``app.views.jobs.LatestJob``: one
computation at a time, only the newest waiting request kept), which also reads the latest
draw and the mean of a stored run (``core.store.run_store.FieldVolume``) from the store:
``refresh`` only hands the state's arrays over when ``field_version`` moved, and draws what
the last computation returned.
The prior (a few dozen numbers) is evaluated in the GUI thread when ``trace_version``
moved. A result computed for an older run (``layout_version``) is dropped.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field

import numpy as np
import pyqtgraph as pg
from pyqtgraph.Qt import QtCore, QtWidgets

from app.state.run_state import RunState
from app.views.base import FIELD, PLOTS, RunView
from app.views.jobs import LatestJob
from app.views.style import (
    DATA_COLOUR,
    add_empty_hint,
    add_legend_strip,
    chain_colour,
    chain_pen,
    cubed_unit,
    inverse_unit,
    sparse_log_ticks,
    steady_axes,
)
from core.field.grid import Grid
from core.field.power_estimator import masked_data_field, measure_power, relative_error

__all__ = ["PowerCurves", "PowerView", "masked_data_field", "measure_curves",
           "posterior_quantiles", "prior_spectrum"]

MEAN_COLOUR = "#ffffff"
PRIOR_COLOUR = "#d0d0d0"
TRUTH_COLOUR = "#ffd700"
BAND_BRUSH = (200, 200, 200, 45)
BAND_PEN = (200, 200, 200, 70)
#: the band's lower edge is clipped to this fraction of P (a log axis cannot show <= 0)
BAND_FLOOR = 1e-3
POSTERIOR_COLOUR = "#2dd4bf"
#: the posterior band uses at most this many draws of the hyperparameters (evenly spaced) ...
POSTERIOR_DRAWS = 2000
#: ... and is drawn from this many on
POSTERIOR_MIN_DRAWS = 20
#: the quantiles drawn: the 95 % band, the 68 % band, the median
POSTERIOR_QUANTILES = (0.025, 0.16, 0.5, 0.84, 0.975)


# ----------------------------------------------------------------------------- numbers


def prior_spectrum(config, grid: Grid | None = None):
    """(spectrum, sampled names): the run's P(k) family with its fixed hyperparameters, and
    the names of the sampled ones (their stand-in values are always overridden with
    ``evaluate(k, name=value)``); band powers without edges in the config take them from
    ``grid``. Raises ValueError with the reason."""
    from core.field.power_spectrum import hyperparameter_priors, prior_spectrum
    from core.io import LoadError, load_prior_table

    prior = config.prior
    if prior.kind == "band_powers" and prior.edges is None and grid is None:
        raise ValueError("band powers: the bins' edges come from the grid, which is not known yet")
    sampled = [name for name, p in hyperparameter_priors(prior).items() if not p.is_fixed]
    # a sampled hyperparameter gets a valid stand-in; the panel always overrides it
    stand_in = {"index": 0.0, "cutoff_scale": 0.0}
    try:
        spectrum = prior_spectrum(prior, load_prior_table(config),
                                  {n: stand_in.get(n, 1.0) for n in sampled}, grid=grid)
    except (LoadError, OSError) as err:
        raise ValueError(f"prior table: {err}") from None
    return spectrum, sampled


def posterior_quantiles(spectrum, k, draws: dict) -> np.ndarray:
    """(len(POSTERIOR_QUANTILES), len(k)): the quantiles of P(k; theta) over the draws
    ({name: 1-D array of one length}: each hyperparameter's draws, the others fixed), at
    most ``POSTERIOR_DRAWS`` of them evenly spaced; NaN where k is not finite."""
    n = min(len(v) for v in draws.values())
    pick = np.unique(np.linspace(0, n - 1, min(n, POSTERIOR_DRAWS)).round().astype(int))
    k = np.asarray(k, np.float64)
    ok = np.isfinite(k) & (k > 0)
    out = np.full((len(POSTERIOR_QUANTILES), k.size), np.nan)
    values = spectrum.evaluate(k[ok], **{name: np.asarray(v, np.float64)[pick, None]
                                         for name, v in draws.items()})
    out[:, ok] = np.quantile(values, POSTERIOR_QUANTILES, axis=0)
    return out


@dataclass
class PowerCurves:
    """What one background computation measured (``measure_curves``)."""

    layout: int                         # RunState.layout_version it was computed for
    field_version: int
    k: np.ndarray
    counts: np.ndarray
    latest: np.ndarray | None = None    # (chains, n_k)
    mean: np.ndarray | None = None
    data: np.ndarray | None = None
    data_fraction: float = float("nan")
    truth: np.ndarray | None = None
    notes: list = field(default_factory=list)


def measure_curves(grid: Grid, latest=None, mean=None, data=None, mask=None, truth=None,
                   layout: int = 0, field_version: int = 0) -> PowerCurves:
    """``measure_power`` of each given field on ``grid`` (the panel's worker). A field with
    NaN or inf is skipped with a note; see ``masked_data_field`` for the data."""
    k_ref = measure_power(np.zeros((1, *grid.shape)), grid)
    out = PowerCurves(layout, field_version, k_ref.k, k_ref.counts)

    def one(value) -> np.ndarray | None:
        # one field at a time: a stored one is read here (the worker), and the float64 copy
        # and the FFT of one grid are all this holds at once
        value = np.asarray(value, np.float64)
        if not np.all(np.isfinite(value)):
            return None
        return measure_power(value[None], grid).power[0]

    if latest is not None:
        chains = latest.shape[0]
        rows = [one(latest.chain(c) if hasattr(latest, "chain") else latest[c]) for c in range(chains)]
        if any(r is None for r in rows):
            out.notes.append("the latest field has NaN or inf values: its P(k) is not shown")
        else:
            out.latest = np.stack(rows)
    for name, value in (("mean", mean), ("truth", truth)):
        if value is None:
            continue
        power = one(value)
        if power is None:
            out.notes.append(f"the {name} field has NaN or inf values: its P(k) is not shown")
        else:
            setattr(out, name, power)
    if data is not None:
        filled, fraction = masked_data_field(data, mask)
        out.data_fraction = fraction
        if fraction > 0:
            out.data = measure_power(filled[None].astype(np.float64, copy=False), grid).power[0] / fraction
        else:
            out.notes.append("no observed data voxel: the data's P(k) is not shown")
    return out


# ----------------------------------------------------------------------------- the view


class PowerView(RunView):
    """Log-log P(k) of a run with a ratio subplot; see the module docstring.

    ``curves`` (name -> PlotDataItem): ``latest`` (list per chain), ``mean``, ``prior``
    (list per chain), ``band_low``/``band_high``, ``data``, ``noise``, ``truth``;
    ``ratio_curves`` (list per chain) and ``ratio_band_low/high`` in the ratio plot.
    ``computed`` is emitted after a background result was drawn.
    """

    title = "P(k)"
    group = PLOTS
    kinds = frozenset({FIELD})
    csv_contents = "P(k) curves"

    computed = QtCore.Signal()

    def __init__(self, run_state: RunState, parent=None):
        super().__init__(run_state, parent)
        self.graphics = pg.GraphicsLayoutWidget()
        self.note = QtWidgets.QLabel("")
        self.note.setWordWrap(True)
        self.note.setStyleSheet("font-size: 8pt")
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.graphics, 1)
        layout.addWidget(self.note)
        self.job = LatestJob(self)
        self.job.finished.connect(self._on_computed)
        self.destroyed.connect(self.job.close)
        # the legend in a row of its own above the plots: spectra fill the plot from corner
        # to corner, a legend in it would cover some of them
        self.plot = self.graphics.addPlot(row=1, col=0)
        self.ratio_plot = self.graphics.addPlot(row=2, col=0)
        self.graphics.ci.layout.setRowStretchFactor(1, 3)
        self.graphics.ci.layout.setRowStretchFactor(2, 1)
        for p in (self.plot, self.ratio_plot):
            steady_axes(p)
            p.setLogMode(x=True, y=True)
            p.showGrid(x=True, y=True, alpha=0.15)
            for axis in ("left", "bottom"):
                p.getAxis(axis).enableAutoSIPrefix(False)
                sparse_log_ticks(p.getAxis(axis))
        self.plot.getAxis("bottom").setStyle(showValues=False)    # the ratio plot's axis shows k
        self.ratio_plot.setLabel("left", "draw / prior")
        self.ratio_plot.setXLink(self.plot)
        self.legend = add_legend_strip(self.graphics, self.plot, row=0)
        self.empty_hint = add_empty_hint(self.plot, "")
        self.curves: dict = {}
        self.ratio_curves: list = []
        self.grid: Grid | None = None
        self.measured: PowerCurves | None = None
        self.prior_values: np.ndarray | None = None    # (chains, n_k), NaN where unknown
        self.posterior: np.ndarray | None = None       # posterior_quantiles', or None
        self._spectrum = None
        self._sampled: list = []
        self._spectrum_error = ""
        self._config_seen = None
        self._layout_seen = -1
        self._field_seen = None
        self._trace_seen = None
        self._build()

    # -- building -----------------------------------------------------------------------

    def _build(self) -> None:
        """Make the curves of the current run (when ``layout_version`` moved)."""
        st = self.state
        self.job.cancel_pending()
        self.plot.clear()                 # also empties the legend
        self.ratio_plot.clear()
        self.measured = None
        self.prior_values = self.posterior = None
        self._prior_sampled = False
        self._error_note = ""
        self._field_seen = self._trace_seen = None
        chains = st.chains or 0
        plot, ratio = self.plot, self.ratio_plot
        unit = self._unit()
        plot.setLabel("left", f"P(k) [{cubed_unit(unit)}]" if unit else "P(k)")
        ratio.setLabel("bottom", f"k [{inverse_unit(unit)}]" if unit else "k")
        c = self.curves = {}
        # the edges need a pen: pyqtgraph builds no path for a curve without one
        c["band_low"], c["band_high"] = plot.plot(pen=BAND_PEN), plot.plot(pen=BAND_PEN)
        c["band"] = pg.FillBetweenItem(c["band_low"], c["band_high"], brush=BAND_BRUSH)
        c["band"].setZValue(-10)
        plot.addItem(c["band"])
        post = pg.mkColor(POSTERIOR_COLOUR)
        for width, alpha in ((95, 40), (68, 80)):
            edges = [plot.plot(pen=pg.mkPen(post.red(), post.green(), post.blue(), alpha)) for _ in "lh"]
            c[f"posterior_{width}"] = (*edges, pg.FillBetweenItem(*edges, brush=(post.red(), post.green(),
                                                                                 post.blue(), alpha)))
            c[f"posterior_{width}"][2].setZValue(-9)
            plot.addItem(c[f"posterior_{width}"][2])
        c["posterior"] = plot.plot(pen=pg.mkPen(POSTERIOR_COLOUR, width=2),
                                   name="P(k) posterior: median, 68 / 95 %")
        c["prior"] = [plot.plot(pen=pg.mkPen(PRIOR_COLOUR, width=2) if ch == 0 else
                                pg.mkPen(chain_colour(ch), width=1, style=QtCore.Qt.PenStyle.DashLine),
                                name="prior ± cosmic variance" if ch == 0 else None)
                      for ch in range(max(chains, 1))]
        c["latest"] = [plot.plot(pen=chain_pen(ch, 1.5), symbol="o", symbolSize=4, symbolPen=None,
                                 symbolBrush=chain_colour(ch), name=f"latest draw, chain {ch}")
                       for ch in range(chains)]
        c["mean"] = plot.plot(pen=pg.mkPen(MEAN_COLOUR, width=1.5, style=QtCore.Qt.PenStyle.DashLine),
                              name="posterior mean")
        c["data"] = plot.plot(pen=pg.mkPen(DATA_COLOUR, width=1.5), name="data (see below)")
        c["noise"] = plot.plot(pen=pg.mkPen(DATA_COLOUR, width=1, style=QtCore.Qt.PenStyle.DotLine),
                               name="noise level")
        c["truth"] = plot.plot(pen=pg.mkPen(TRUTH_COLOUR, width=1.5), name="truth")
        self.ratio_band_low, self.ratio_band_high = ratio.plot(pen=BAND_PEN), ratio.plot(pen=BAND_PEN)
        rband = pg.FillBetweenItem(self.ratio_band_low, self.ratio_band_high, brush=BAND_BRUSH)
        rband.setZValue(-10)
        ratio.addItem(rband)
        unity = pg.InfiniteLine(pos=0.0, angle=0, movable=False,     # log axis: 10^0 = 1
                                pen=pg.mkPen((220, 220, 220), style=QtCore.Qt.PenStyle.DashLine))
        ratio.addItem(unity, ignoreBounds=True)
        self.ratio_curves = [ratio.plot(pen=chain_pen(ch, 1.5), symbol="o", symbolSize=3, symbolPen=None,
                                        symbolBrush=chain_colour(ch)) for ch in range(chains)]
        self._forget_config()
        self._layout_seen = st.layout_version

    def _forget_config(self) -> None:
        """Grid and prior come from the run's config: read again when it changes (a store
        opened later may bring the config text of a run that started without one)."""
        self.grid, self._spectrum, self._sampled, self._spectrum_error = self._make_grid(), None, [], ""
        self._config_seen = self.state.config_text

    def _unit(self) -> str:
        cfg = self.state.config
        return cfg.grid.unit if cfg is not None and cfg.grid is not None else ""

    def _make_grid(self) -> Grid | None:
        st, cfg = self.state, self.state.config
        if not st.has_field or cfg is None or cfg.grid is None:
            return None
        try:
            return Grid(st.grid_shape, cfg.grid.box_size, cfg.grid.unit)
        except ValueError:
            return None

    def _spectrum_of_config(self):
        if self._spectrum is None and not self._spectrum_error:
            cfg = self.state.config
            if cfg is None or cfg.prior is None or cfg.prior.kind is None:
                self._spectrum_error = "no prior: the run's config is not known"
            else:
                try:
                    self._spectrum, self._sampled = prior_spectrum(cfg, self.grid)
                except ValueError as err:
                    self._spectrum_error = str(err)
        return self._spectrum

    # -- refreshing -----------------------------------------------------------------------

    def refresh(self, force: bool = False) -> bool:
        """Start the FFTs when the fields changed, redraw the prior when the hyperparameters
        did. Returns whether anything was redrawn now."""
        st = self.state
        if st.layout_version != self._layout_seen:
            self._build()
        if st.config_text != self._config_seen or (self.grid is None and st.has_field and st.config is not None):
            grid = self.grid
            self._forget_config()
            self._trace_seen = None
            if not _same_grid(grid, self.grid):
                self._field_seen = None       # measured on another grid: again (else the prior only)
        fkey = (st.layout_version, st.field_version)
        if (fkey != self._field_seen or force) and self.grid is not None:
            self._field_seen = fkey
            self._request()
        tkey = (st.layout_version, st.trace_version, st.field_version)
        if tkey == self._trace_seen and not force:
            return False
        self._trace_seen = tkey
        self._update_prior()
        self._draw()
        return True

    def _request(self) -> None:
        st = self.state
        data = st.observed.get("data")
        gaussian = st.config is None or st.config.likelihood is None or st.config.likelihood.kind == "gaussian"
        if data is None or data.shape != st.grid_shape or not gaussian:
            data = None
        truth = st.observed.get("truth")
        truth = truth if truth is not None and truth.shape == st.grid_shape else None
        mean = st.mean if st.moment_count and st.mean is not None else None
        self.job.request(st.layout_version, measure_curves, self.grid, st.latest_field, mean, data,
                         st.observed.get("mask"), truth, st.layout_version, st.field_version)

    @QtCore.Slot(object, object, object)
    def _on_computed(self, key, result, error) -> None:
        if key != self.state.layout_version:
            return                                   # an older run's: dropped
        if error is not None:
            self.measured = None
            self._error_note = f"P(k) could not be measured: {error}"
        else:
            self.measured, self._error_note = result, ""
        self._update_prior()
        self._draw()
        self.computed.emit()

    def _k(self) -> np.ndarray | None:
        if self.measured is not None:
            return self.measured.k
        return self.state.k_centres

    def _counts(self) -> np.ndarray | None:
        if self.measured is not None:
            return self.measured.counts
        return self.state.k_counts

    def _update_prior(self) -> None:
        st = self.state
        k = self._k()
        spectrum = self._spectrum_of_config() if st.has_field else None
        self.posterior = None
        if k is None or spectrum is None:
            self.prior_values = None
            return
        chains = max(st.chains or 0, 1)
        values = np.full((chains, len(k)), np.nan)
        sampled = self._sampled
        medians = self._prior_medians() if st.is_preview else {}
        for ch in range(chains):
            overrides = {}
            for name in sampled:
                series = st.param(name)
                overrides[name] = series[ch, -1] if series.shape[1] and ch < series.shape[0] else \
                    medians.get(name, np.nan)
            if any(not np.isfinite(v) for v in overrides.values()):
                continue
            try:
                values[ch] = spectrum.evaluate(k, **{n: float(v) for n, v in overrides.items()})
            except ValueError:
                continue
        self.prior_values = values
        self._prior_sampled = bool(sampled)
        if sampled and not st.is_preview:
            draws = {name: st.param(name)[:, st.n_warmup_seen:].ravel() for name in sampled}
            if min(v.size for v in draws.values()) >= POSTERIOR_MIN_DRAWS:
                with np.errstate(all="ignore"):
                    try:
                        self.posterior = posterior_quantiles(spectrum, k, draws)
                    except ValueError:        # a draw outside the family's rules: none drawn
                        self.posterior = None

    def _prior_medians(self) -> dict[str, float]:
        """Each sampled hyperparameter's prior median (the data preview's prior: no draws yet)."""
        cfg = self.state.config
        out = {}
        for name in self._sampled:
            try:
                out[name] = float(getattr(cfg.prior, name).median())
            except (AttributeError, TypeError, ValueError):
                continue
        return out

    # -- drawing ------------------------------------------------------------------------

    def _draw(self) -> None:
        st = self.state
        c = self.curves
        m = self.measured
        k = self._k()
        notes = []
        latest = None
        if m is not None and m.latest is not None:
            latest = m.latest
        elif m is None and st.latest_power is not None and st.k_centres is not None:
            latest = st.latest_power          # no grid (config unknown): the engine's values
            if self.grid is None and st.has_field:
                notes.append("box size unknown (no run config): showing the engine's P(k) of the "
                             "latest draw only")
        for ch, curve in enumerate(c["latest"]):
            curve.setData(*(_finite(k, latest[ch]) if latest is not None and ch < len(latest) else ([], [])))
        for name in ("mean", "data", "truth"):
            value = getattr(m, name) if m is not None else None
            c[name].setData(*(_finite(k, value) if value is not None else ([], [])))
            c[name].setVisible(value is not None)
        self._draw_noise(m)
        prior = self.prior_values
        for ch, curve in enumerate(c["prior"]):
            show = prior is not None and ch < len(prior) and (ch == 0 or self._prior_sampled) \
                and np.isfinite(prior[ch]).any()
            curve.setData(*(_finite(k, prior[ch]) if show else ([], [])))
            curve.setVisible(bool(show))
        self._draw_posterior(k)
        counts = self._counts()
        rel = relative_error(counts) if counts is not None else None
        if prior is not None and rel is not None and np.isfinite(prior[0]).any():
            kk, p0 = _finite(k, prior[0])
            # the same shells _finite keeps: a prior that underflows to 0 at high k (a
            # cutoff on a 256^3 grid) is dropped there too
            with np.errstate(invalid="ignore"):
                r = rel[np.isfinite(k) & np.isfinite(prior[0]) & (k > 0) & (prior[0] > 0)]
            c["band_low"].setData(kk, p0 * np.maximum(1 - r, BAND_FLOOR))
            c["band_high"].setData(kk, p0 * (1 + r))
        else:
            c["band_low"].setData([], [])
            c["band_high"].setData([], [])
        for ch, curve in enumerate(self.ratio_curves):
            if latest is not None and prior is not None and ch < len(latest) and ch < len(prior):
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):   # prior ~ 0: inf, dropped
                    curve.setData(*_finite(k, latest[ch] / prior[ch]))
            else:
                curve.setData([], [])
        if rel is not None and k is not None:
            ok = np.isfinite(k) & np.isfinite(rel)
            self.ratio_band_low.setData(k[ok], np.maximum(1 - rel[ok], BAND_FLOOR))
            self.ratio_band_high.setData(k[ok], 1 + rel[ok])
        cfg = st.config
        if st.has_field and cfg is not None and cfg.likelihood is not None and cfg.likelihood.kind != "gaussian":
            what = ("the model file's data" if cfg.likelihood.kind == "python" else
                    f"counts ({cfg.likelihood.kind} likelihood)")
            notes.append(f"data: {what}, not a P(k) of the field: not shown")
        if self._spectrum_error and st.has_field:
            notes.append(self._spectrum_error)
        elif prior is not None and not np.isfinite(prior[0]).any():
            notes.append("prior: waiting for the first draw of the hyperparameters")
        elif prior is not None and st.is_preview and self._sampled:
            medians = self._prior_medians()
            notes.append("prior at the median of each sampled hyperparameter's prior: "
                         + ", ".join(f"{name} = {value:.4g}" for name, value in medians.items()))
        if m is not None:
            notes.extend(m.notes)
            if m.data is not None:
                notes.append(f"data: masked voxels zero-filled (after subtracting the observed "
                             f"mean), P divided by the observed fraction f = {m.data_fraction:.3f}; "
                             "includes the noise")
        if getattr(self, "_error_note", ""):
            notes.append(self._error_note)
        self.note.setText("\n".join(notes))
        if not st.has_field:
            hint = "no field in this run (integral model)" if st.chains is not None else "no run"
        elif st.is_preview:
            hint = "" if m is not None and m.data is not None else "no run yet: the data's P(k) and the prior"
        elif latest is None:
            hint = "waiting for the first field draw"
        else:
            hint = ""
        self.empty_hint.setText(hint)
        self.empty_hint.setVisible(bool(hint))

    def _draw_posterior(self, k) -> None:
        c, q = self.curves, self.posterior
        c["posterior"].setData(*(_finite(k, q[2]) if q is not None else ([], [])))
        c["posterior"].setVisible(q is not None)
        for width, (lo, hi) in ((95, (0, 4)), (68, (1, 3))):
            low, high, fill = c[f"posterior_{width}"]
            ok = np.zeros(0, bool)
            if q is not None:
                with np.errstate(invalid="ignore"):
                    ok = np.isfinite(k) & (k > 0) & (q[lo] > 0) & np.isfinite(q[hi])
            for curve, row in ((low, lo), (high, hi)):
                curve.setData(*((k[ok], q[row][ok]) if q is not None else ([], [])))
            fill.setVisible(q is not None)

    def _draw_noise(self, m: PowerCurves | None) -> None:
        st, curve = self.state, self.curves["noise"]
        noise = st.observed.get("noise")
        if m is None or m.data is None or noise is None or self.grid is None or noise.shape != self.grid.shape:
            curve.setData([], [])
            curve.setVisible(False)
            return
        level = self.noise_level()
        curve.setData(*_finite(m.k, np.full(m.k.shape, level)))
        curve.setVisible(True)

    def noise_level(self) -> float:
        """The white-noise power <sigma^2> V / N over the observed voxels (nan if unknown)."""
        st, g = self.state, self.grid
        noise, data = st.observed.get("noise"), st.observed.get("data")
        if noise is None or g is None or data is None:
            return float("nan")
        observed = np.isfinite(data)
        mask = st.observed.get("mask")
        if mask is not None:
            observed &= np.asarray(mask, bool)
        if not observed.any():
            return float("nan")
        return float(np.mean(np.asarray(noise, np.float64)[observed] ** 2) * g.volume / g.n_cells)

    # -- export -----------------------------------------------------------------------------

    def curve_table(self) -> tuple[list[str], np.ndarray]:
        """(column names, (n_k, columns) values) of every curve now drawn, NaN where absent."""
        st = self.state
        k = self._k()
        if k is None:
            return ["k"], np.empty((0, 1))
        m = self.measured
        counts = self._counts()
        cols = {"k": k, "mode_count": counts if counts is not None else np.full(len(k), np.nan)}
        latest = m.latest if m is not None and m.latest is not None else st.latest_power
        for ch in range(st.chains or 0):
            cols[f"latest_chain_{ch}"] = latest[ch] if latest is not None and ch < len(latest) else None
        for name in ("mean", "data", "truth"):
            cols[name] = getattr(m, name) if m is not None else None
        prior = self.prior_values
        for ch in range(st.chains or 0):
            cols[f"prior_chain_{ch}"] = prior[ch] if prior is not None and ch < len(prior) else None
        rel = relative_error(counts) if counts is not None else None
        if prior is not None and rel is not None:
            cols["band_low"] = prior[0] * np.maximum(1 - rel, BAND_FLOOR)
            cols["band_high"] = prior[0] * (1 + rel)
        if self.posterior is not None:
            for q, row in zip(POSTERIOR_QUANTILES, self.posterior):
                cols["posterior_median" if q == 0.5 else f"posterior_q{100 * q:g}"] = row
        names = list(cols)
        table = np.column_stack([np.full(len(k), np.nan) if v is None else np.asarray(v, np.float64)
                                 for v in cols.values()])
        return names, table

    def export_csv(self, path) -> None:
        """Write k, the mode counts and every curve (one column each) as CSV. Raises OSError
        with the path and reason when the file cannot be written."""
        names, table = self.curve_table()
        unit = self._unit()
        if unit:        # the header names the units: k, then counts, then P(k) curves (ratios none)
            names = [f"k [{inverse_unit(unit)}]" if n == "k" else n if n == "mode_count" else
                     f"{n} [{cubed_unit(unit)}]" for n in names]
        try:
            with open(path, "w", encoding="utf-8", newline="") as fh:
                writer = csv.writer(fh, lineterminator="\n")
                writer.writerow(names)
                for row in table:
                    writer.writerow([repr(float(v)) for v in row])
        except OSError as err:
            raise OSError(f"{path}: cannot write the P(k) table: {err.strerror or err}") from None


def _same_grid(a: Grid | None, b: Grid | None) -> bool:
    if a is None or b is None:
        return a is b
    return (tuple(a.shape), tuple(a.box_size), a.unit) == (tuple(b.shape), tuple(b.box_size), b.unit)


def _finite(k, values):
    """(k, values) where both are finite and positive (a log-log plot shows nothing else)."""
    k = np.asarray(k, np.float64)
    values = np.asarray(values, np.float64)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(k) & np.isfinite(values) & (k > 0) & (values > 0)
    return k[ok], values[ok]
