"""The exact-posterior comparison: the Wiener filter next to the sampler's running moments.

For a Gaussian field run (Gaussian likelihood, every P(k) hyperparameter fixed) the
posterior is known exactly (``core.reference.field_posterior``). This view computes it once per run on a
worker thread and shows, on one slice plane (xy, xz or yz, chosen with a slider):

    Wiener mean | HMC mean (running) | z = (HMC mean - Wiener mean) / Wiener std
    Wiener std  | HMC std (running)  | histogram of z over every voxel

(the panes' titles say "Wiener mean", "HMC mean", "z", "Wiener std", "HMC std", "z, all
voxels"; the summary line below them defines z)

and the summary numbers RMS z, max |z| and the median of HMC std / Wiener std.

What z means. For a sampler that draws from the right posterior, the running mean's
error in voxel i has standard deviation sigma_W,i / sqrt(ESS_i), so z_i ~ N(0, 1/ESS_i)
and RMS z ~ 1/sqrt(ESS): it shrinks as draws accumulate, and 1 / RMS z^2 is the number
of independent posterior draws that would give a mean as accurate. A z that stays at
O(1), or a std ratio away from 1, means the chain has not converged to the right
answer. With a Monte-Carlo Wiener std (masks or noise maps above 4096 cells) z and
the ratio carry its relative error 1/sqrt(2 n_samples) too; the status line says so.

Layout. Each image pane shows exactly the slice (view range = the image, no padding) with
square voxels: the panes are sized to the slice's aspect ratio, within the space the
window gives them, whenever the view is resized or the slice's shape changes (another
plane, another grid); the histogram takes the rest of its column.

Threads. ``core.reference.field_posterior`` runs on a daemon thread (``app.views.jobs.CancellableJob``:
it never delays the application's exit; a superseded computation stops at its next batch
of exact draws) and hands its results to the GUI thread through a Qt signal (queued,
since it is emitted on another thread). Results of a run that is no longer shown are
discarded.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pyqtgraph as pg
from pyqtgraph.Qt import QtCore, QtWidgets

from app.state.run_state import RunState
from app.views.base import FIELD, FIELD_VIEWS, RunView
from app.views.jobs import CancellableJob, WorkerRelay
from app.views.slices import AXIS_NAMES, PLANES, robust_levels, slice_of
from app.views.style import narrow_label, steady_axes

__all__ = [
    "PANELS", "COLOUR_MAPS", "HIST_BINS", "Comparison", "compare_moments", "nice_limit",
    "ExactComparisonView"
]

#: (key, title, level group, row, column) of the image panels
#: (key, title, level group, row, column) of each image pane; the titles are short, as the
#: panes are narrow in a small window (z is defined in the summary line below the panes)
PANELS = (("wiener_mean", "Wiener mean", "mean", 0, 0),
          ("hmc_mean", "HMC mean", "mean", 0, 1),
          ("z", "z", "z", 0, 2),
          ("wiener_std", "Wiener std", "std", 1, 0),
          ("hmc_std", "HMC std", "std", 1, 1))
COLOUR_MAPS = {"mean": "viridis", "std": "magma", "z": "CET-D1"}
HIST_BINS = 60


# --------------------------------------------------------------------------- numbers


class Comparison(NamedTuple):
    """HMC running moments against the exact posterior, voxel by voxel.

    z: (HMC mean - Wiener mean) / Wiener std (grid shape).
    std_ratio: HMC std / Wiener std (grid shape), or None without an HMC std.
    rms_z, max_abs_z: over every voxel; median_std_ratio: median of std_ratio (nan
    without it); equivalent_draws: 1 / rms_z^2, the number of independent posterior
    draws whose mean would be as accurate (meaningful once the chain has converged).
    """

    z: np.ndarray
    std_ratio: np.ndarray | None
    rms_z: float
    max_abs_z: float
    median_std_ratio: float
    equivalent_draws: float


def compare_moments(hmc_mean, hmc_std, wiener_mean, wiener_std) -> Comparison:
    """The per-voxel z-scores and std ratios (see ``Comparison``); hmc_std may be None."""
    wiener_std = np.asarray(wiener_std, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (np.asarray(hmc_mean, np.float64) - np.asarray(wiener_mean, np.float64)) / wiener_std
        ratio = None if hmc_std is None else np.asarray(hmc_std, np.float64) / wiener_std
    finite = z[np.isfinite(z)]
    rms = float(np.sqrt(np.mean(finite**2))) if finite.size else math.nan
    max_abs = float(np.max(np.abs(finite))) if finite.size else math.nan
    median = math.nan
    if ratio is not None:
        good = ratio[np.isfinite(ratio)]
        median = float(np.median(good)) if good.size else math.nan
    equivalent = 1.0 / rms**2 if rms > 0 else math.inf
    return Comparison(z, ratio, rms, max_abs, median, equivalent)


def nice_limit(value: float) -> float:
    """The smallest of 1, 2, 5 x 10^k that is >= value (1 for 0, nan or inf): z levels
    and histogram ranges that move only now and then as a run goes on."""
    if not (math.isfinite(value) and value > 0):
        return 1.0
    exponent = math.floor(math.log10(value))
    for mantissa in (1.0, 2.0, 5.0, 10.0):
        limit = mantissa * 10.0**exponent
        if limit >= value * (1 - 1e-12):
            return limit
    return 10.0 ** (exponent + 1)


# --------------------------------------------------------------------------- the view


class _FittedLayoutWidget(pg.GraphicsLayoutWidget):
    """A GraphicsLayoutWidget that calls ``on_resize`` after each resize and when shown."""

    def __init__(self, on_resize):
        self._on_resize = None            # pyqtgraph resizes once while it builds the widget
        super().__init__()
        self._on_resize = on_resize

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._fit()

    def _fit(self) -> None:
        if self._on_resize is None:
            return
        try:
            self._on_resize()
        except RuntimeError:              # the view is being deleted (its items are gone)
            self._on_resize = None


def _item_width(item) -> float:
    return float(item.effectiveSizeHint(QtCore.Qt.SizeHint.PreferredSize).width()) if item.isVisible() else 0.0


def _item_height(item) -> float:
    return float(item.effectiveSizeHint(QtCore.Qt.SizeHint.PreferredSize).height()) if item.isVisible() else 0.0


def _margins_w(plot) -> float:
    left, _, right, _ = plot.layout.getContentsMargins()
    return left + right + 2 * plot.layout.horizontalSpacing()


def _margins_h(plot) -> float:
    _, top, _, bottom = plot.layout.getContentsMargins()
    return top + bottom + 2 * plot.layout.verticalSpacing()


class ExactComparisonView(RunView):
    """Wiener posterior vs HMC running moments on one slice plane, z histogram, summary.

    ``refresh(force=False) -> bool`` redraws when the run's field moments
    (``field_version``) or the exact posterior changed; a new run (config text, grid or
    observed data) starts a new exact computation. Signals: ``exact_ready`` when the
    exact posterior (or a better Monte-Carlo std) arrived, ``exact_failed(str)``.

    Attributes for tests and exports: ``status`` ("no run", "not applicable",
    "computing", "ready", "failed"), ``reason``, ``exact`` (``core.reference.field_posterior.ExactPosterior``
    or None), ``comparison`` (``Comparison`` or None), ``hist_edges``, ``hist_counts``,
    ``images`` (key -> ImageItem, keys of ``PANELS``).
    """

    title = "Exact posterior"
    group = FIELD_VIEWS
    kinds = frozenset({FIELD})

    exact_ready = QtCore.Signal()
    exact_failed = QtCore.Signal(str)

    def __init__(self, run_state: RunState, parent=None, *, n_samples: int = 64, batch: int = 8):
        super().__init__(run_state, parent)
        self.n_samples = int(n_samples)
        self.batch = int(batch)
        self.status = "no run"
        self.reason = ""
        self.exact = None
        self.comparison: Comparison | None = None
        self.hist_edges: np.ndarray | None = None
        self.hist_counts: np.ndarray | None = None
        self.plane = 0                       # index into app.views.slices.PLANES
        self.index = 0                       # slice position along the plane's normal
        self.levels: dict[str, tuple[float, float]] = {}
        self._key = None
        self._key_refs = None                # keeps the observed arrays alive: their ids stay unique
        self._job: CancellableJob | None = None
        self._exact_version = 0
        self._layout_seen = None
        self._drawn = None
        self._numbers_key = None
        self._fitting = False
        self._closed = False
        # after a fit changed the panes' sizes: fit again once laid out, with what each pane
        # really spends around its view box (a timer the view owns: nothing fires once it is gone)
        self._refit = QtCore.QTimer(self)
        self._refit.setSingleShot(True)
        self._refit.setInterval(0)
        self._refit.timeout.connect(self._view_box_resized)
        self._relay = WorkerRelay(self)
        self._relay.progress.connect(self._on_progress)
        self._relay.finished.connect(self._on_finished)
        self._relay.failed.connect(self._on_failed)
        self._build_widgets()

    # -- widgets (made once) -------------------------------------------------------------

    def _build_widgets(self) -> None:
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        self.status_label = QtWidgets.QLabel("no run")
        self.status_label.setWordWrap(True)
        self.status_label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status_label)
        row = QtWidgets.QHBoxLayout()
        self.plane_combo = QtWidgets.QComboBox()
        for name, _, normal in PLANES:
            self.plane_combo.addItem(f"{name} slice", name)
        self.plane_combo.currentIndexChanged.connect(self._plane_chosen)
        self.slider = QtWidgets.QSlider(QtCore.Qt.Orientation.Horizontal)
        self.slider.valueChanged.connect(self._slider_moved)
        self.slider_label = QtWidgets.QLabel("z = 0")
        self.slider_label.setMinimumWidth(52)
        row.addWidget(self.plane_combo)
        row.addWidget(self.slider_label)
        row.addWidget(self.slider, 1)
        layout.addLayout(row)
        self.graphics = _FittedLayoutWidget(self.fit_panes)     # resized: the panes are fitted again
        layout.addWidget(self.graphics, 1)
        self.plots: dict[str, pg.PlotItem] = {}
        self.images: dict[str, pg.ImageItem] = {}
        for key, title, group, r, c in PANELS:
            plot = self.graphics.addPlot(row=r, col=c)
            steady_axes(plot)
            plot.setTitle(title, size="9pt")
            narrow_label(plot.titleLabel)
            plot.setAspectLocked(True)
            plot.setMenuEnabled(False)
            plot.setMouseEnabled(x=False, y=False)     # the panes show the whole slice, always
            plot.hideButtons()
            plot.getViewBox().setBackgroundColor("#2b2b2b")
            image = pg.ImageItem()
            image.setColorMap(pg.colormap.get(COLOUR_MAPS[group]))
            plot.addItem(image)
            self.graphics.ci.layout.setAlignment(plot, QtCore.Qt.AlignmentFlag.AlignCenter)
            self.plots[key] = plot
            self.images[key] = image
        hist = self.graphics.addPlot(row=1, col=2)
        steady_axes(hist)
        hist.setTitle("z, all voxels", size="9pt")
        narrow_label(hist.titleLabel)
        hist.setLabel("bottom", "z")
        hist.getAxis("bottom").enableAutoSIPrefix(False)
        hist.setLabel("left", "voxels")
        hist.showGrid(x=True, y=True, alpha=0.15)
        self.hist_plot = hist
        self.hist_curve = hist.plot(stepMode="center", fillLevel=0, brush=(79, 163, 255, 120),
                                    pen=pg.mkPen("#4fa3ff"))
        hist.addItem(pg.InfiniteLine(pos=0, angle=90, pen=pg.mkPen((200, 200, 200, 120))))
        self.hist_hint = pg.TextItem("", color=(170, 170, 170), anchor=(0, 0))
        self.hist_hint.setParentItem(hist.getViewBox())
        self.hist_hint.setPos(8, 4)
        self.colour_bars: dict[str, pg.ColorBarItem] = {}
        # the panes' maximum sizes must not cap the whole layout: it always fills the widget
        self.graphics.ci.setMaximumSize(QtCore.QSizeF(1e6, 1e6))
        bars = self._bars = self.graphics.addLayout(row=2, col=0, colspan=3)
        for col, (group, label) in enumerate((("mean", "mean"), ("std", "std"), ("z", "z"))):
            bars.addLabel(label, row=0, col=2 * col)
            bar = pg.ColorBarItem(values=(0, 1), colorMap=COLOUR_MAPS[group], orientation="horizontal",
                                  interactive=False, width=12)
            steady_axes(bar)
            bars.addItem(bar, row=0, col=2 * col + 1)
            self.colour_bars[group] = bar
        self.graphics.ci.layout.setRowStretchFactor(0, 5)
        self.graphics.ci.layout.setRowStretchFactor(1, 5)
        self.graphics.ci.layout.setRowStretchFactor(2, 1)
        self.summary_label = QtWidgets.QLabel("")
        self.summary_label.setWordWrap(True)
        self.summary_label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.summary_label)

    # -- the run and its exact posterior -------------------------------------------------

    def _run_key(self):
        st = self.state
        observed = tuple(st.observed.get(name) for name in ("data", "mask", "noise"))
        key = (st.config_text, st.config_dir, st.grid_shape, st.model_kind,
               tuple(id(a) if a is not None else None for a in observed))
        return key, observed

    def _new_run(self, key, refs) -> None:
        """Forget the previous run's exact posterior and start this one's (if it applies)."""
        from core.reference.field_posterior import exact_not_applicable, exact_posterior_for_config

        if self._job is not None:
            self._job.cancel()
            self._job = None
        self._key, self._key_refs = key, refs
        self.exact = None
        self.comparison = None
        self.levels.clear()
        self._exact_version += 1
        st = self.state
        cfg = st.config
        if st.model_kind == "integral" or (cfg is not None and cfg.model.kind == "integral"):
            self._set_status("not applicable", "this is an integral-model run: the exact "
                             "comparison applies to Gaussian field runs")
            return
        if not st.has_field:
            self._set_status("no run", "no field run yet: start one or open a run directory")
            return
        if cfg is None:
            reason = ("the run's config is unreadable" if st.config_text else
                      "the run's config is unknown (no config text)")
            self._set_status("not applicable", reason)
            return
        reason = exact_not_applicable(cfg)
        if reason:
            self._set_status("not applicable", reason)
            return
        observed = {name: st.observed[name] for name in ("data", "mask", "noise")
                    if st.observed.get(name) is not None}
        if "data" in observed and tuple(observed["data"].shape) != tuple(st.grid_shape):
            observed = {}
        n_samples, batch = self.n_samples, self.batch

        def compute(report):
            return exact_posterior_for_config(cfg, observed, n_samples=n_samples, batch=batch,
                                              on_progress=report)

        self._set_status("computing", "")
        self._job = CancellableJob(compute, self._relay, name="fieldscope-exact-posterior").start()

    def _on_progress(self, job, partial) -> None:
        if job is not self._job:
            return
        self.exact = partial
        self._exact_version += 1
        self._set_status("computing", "")
        self.exact_ready.emit()
        self.refresh()

    def _on_finished(self, job, result) -> None:
        if job is not self._job:
            return
        self._job = None
        self.exact = result
        self._exact_version += 1
        self._set_status("ready", "")
        self.exact_ready.emit()
        self.refresh()

    def _on_failed(self, job, message: str) -> None:
        if job is not self._job:
            return
        self._job = None
        self._exact_version += 1
        self._set_status("failed", message)
        self.exact_failed.emit(message)
        self.refresh()

    def _set_status(self, status: str, reason: str) -> None:
        self.status, self.reason = status, reason
        # without an exact posterior the panels would be empty frames: the reason says it all
        shown = status in ("computing", "ready")
        for widget in (self.graphics, self.plane_combo, self.slider, self.slider_label):
            widget.setVisible(shown)
        exact = self.exact
        if status == "not applicable":
            text = f"Exact comparison not available: {reason}"
        elif status == "failed":
            text = f"The exact posterior could not be computed: {reason}"
        elif status == "no run":
            text = reason or "no run"
        elif exact is None:
            text = "computing the exact posterior\u2026"
        elif status == "computing":
            text = (f"{exact.describe()}; computing the std\u2026 "
                    f"({exact.n_samples} of {self.n_samples} exact draws so far)")
        else:
            text = exact.describe()
        self.status_label.setText(text)

    def is_computing(self) -> bool:
        return self._job is not None

    def cancel(self) -> None:
        """Abandon a running computation (it stops at its next batch of exact draws)."""
        if self._job is not None:
            self._job.cancel()
            self._job = None

    def closeEvent(self, event) -> None:
        self.cancel()
        self._closed = True
        self.graphics._on_resize = None
        super().closeEvent(event)

    # -- plane and slider ----------------------------------------------------------------

    def _apply_layout(self) -> None:
        shape = self.state.grid_shape
        self._layout_seen = (self.state.layout_version, shape)
        normal = PLANES[self.plane][2]
        n = shape[normal] if shape else 1
        self.slider.blockSignals(True)
        self.slider.setRange(0, max(n - 1, 0))
        self.index = n // 2
        self.slider.setValue(self.index)
        self.slider.setEnabled(bool(shape))
        self.slider.blockSignals(False)
        self.slider_label.setText(f"{AXIS_NAMES[normal]} = {self.index}")
        _, (h, v), _ = PLANES[self.plane]
        for plot in self.plots.values():
            plot.setLabel("bottom", AXIS_NAMES[h])
            plot.setLabel("left", AXIS_NAMES[v])
        self.fit_panes()

    def image_extent(self) -> tuple[int, int] | None:
        """(width, height) in voxels of the slice the image panes show (None: no grid)."""
        shape = self.state.grid_shape
        if not shape:
            return None
        _, (h, v), _ = PLANES[self.plane]
        return int(shape[h]), int(shape[v])

    def fit_panes(self) -> None:
        """Size the image panes so that their view boxes have the slice's aspect ratio and
        set each view range to the slice, without padding: the image fills its pane."""
        extent = self.image_extent()
        if extent is None:
            return
        width, height = extent
        view = self.graphics
        area = view.viewport().size() if view.isVisible() else view.size()
        grid = self.graphics.ci.layout
        spacing = grid.horizontalSpacing(), grid.verticalSpacing()
        margins = grid.getContentsMargins()
        bars = getattr(self, "_bars", None)
        if bars is None or not hasattr(self, "_refit"):      # still being built
            return
        bars_height = bars.effectiveSizeHint(QtCore.Qt.SizeHint.PreferredSize).height()
        # the room of one cell: three columns, two rows of images above the colour bars
        cell_w = (area.width() - margins[0] - margins[2] - 2 * spacing[0]) / 3
        cell_h = (area.height() - margins[1] - margins[3] - 2 * spacing[1] - bars_height) / 2
        changed = False
        for plot in self.plots.values():
            vb = plot.getViewBox()
            # what the pane spends around its view box (title, axes, margins): measured once
            # laid out, estimated before
            if vb.width() > 1 and vb.height() > 1:
                extra_w, extra_h = plot.width() - vb.width(), plot.height() - vb.height()
            else:
                extra_w = _item_width(plot.getAxis("left")) + _margins_w(plot)
                extra_h = (_item_height(plot.getAxis("bottom")) + _item_height(plot.titleLabel)
                           + _margins_h(plot))
            scale = max(min((cell_w - extra_w) / width, (cell_h - extra_h) / height), 1e-3)
            size = QtCore.QSizeF(width * scale + extra_w, height * scale + extra_h)
            old = plot.maximumSize()
            if abs(old.width() - size.width()) > 0.5 or abs(old.height() - size.height()) > 0.5:
                plot.setMinimumSize(QtCore.QSizeF(min(40.0, size.width()), min(40.0, size.height())))
                plot.setMaximumSize(size)
                plot.setPreferredSize(size)
                changed = True
            if vb.viewRange() != [[0, width], [0, height]]:
                vb.setRange(xRange=(0, width), yRange=(0, height), padding=0)
        # the histogram is as wide as the panes: the three columns share the width alike
        hist_width = self.plots["z"].maximumSize().width()
        if abs(self.hist_plot.maximumSize().width() - hist_width) > 0.5:
            self.hist_plot.setMinimumWidth(min(40.0, hist_width))
            self.hist_plot.setMaximumWidth(hist_width)
            changed = True
        if changed:
            grid.invalidate()
            # lay the items out again now (a plain invalidate keeps the old column widths
            # until the widget is resized)
            self.graphics.ci.setGeometry(QtCore.QRectF(QtCore.QPointF(0, 0),
                                                       QtCore.QSizeF(self.graphics.viewport().size())))
            if not self._fitting:
                self._refit.start()

    def _view_box_resized(self) -> None:
        # the layout tells what a pane spends around its view box: fit again with it
        if not self._fitting and not self._closed:
            self._fitting = True
            try:
                self.fit_panes()
            except RuntimeError:          # the view is being deleted (its items are gone)
                self._closed = True
            finally:
                self._fitting = False

    def set_plane(self, plane: int, index: int | None = None) -> None:
        """Show the xy (0), xz (1) or yz (2) plane at ``index`` (default: the middle)."""
        if plane not in (0, 1, 2):
            raise ValueError(f"plane must be 0 (xy), 1 (xz) or 2 (yz), got {plane!r}")
        self.plane_combo.blockSignals(True)
        self.plane_combo.setCurrentIndex(plane)
        self.plane_combo.blockSignals(False)
        self.plane = plane
        self._apply_layout()
        if index is not None:
            self.slider.setValue(int(index))
        self.refresh(force=True)

    def _plane_chosen(self, plane: int) -> None:
        self.set_plane(plane)

    def _slider_moved(self, value: int) -> None:
        self.index = int(value)
        self.slider_label.setText(f"{AXIS_NAMES[PLANES[self.plane][2]]} = {self.index}")
        self.refresh(force=True)

    # -- drawing -------------------------------------------------------------------------

    def refresh(self, force: bool = False) -> bool:
        """Redraw when the moments or the exact posterior changed. Returns whether it did."""
        st = self.state
        key, refs = self._run_key()
        if key != self._key:
            self._new_run(key, refs)
            force = True
        if self._layout_seen != (st.layout_version, st.grid_shape):
            self._apply_layout()
            force = True
        draw_key = (st.field_version, self._exact_version, self.plane, self.index)
        if draw_key == self._drawn and not force:
            return False
        self._drawn = draw_key
        self._draw()
        return True

    def _volumes(self) -> dict[str, np.ndarray | None]:
        st, exact = self.state, self.exact
        have_moments = st.moment_count > 0 and st.mean is not None
        return {"wiener_mean": None if exact is None else exact.mean,
                "wiener_std": None if exact is None else exact.std,
                "hmc_mean": st.mean if have_moments else None,
                "hmc_std": st.std if have_moments and st.moment_count > 1 else None}

    def _draw(self) -> None:
        st = self.state
        volumes = self._volumes()
        # z, levels and histogram depend on the moments and the exact result, not on the
        # plane shown: a slider move only re-slices
        numbers_key = (st.field_version, self._exact_version)
        if numbers_key != self._numbers_key:
            self._numbers_key = numbers_key
            self.comparison = None
            if volumes["wiener_mean"] is not None and volumes["hmc_mean"] is not None \
                    and volumes["wiener_std"] is not None \
                    and volumes["hmc_mean"].shape == volumes["wiener_mean"].shape:
                self.comparison = compare_moments(volumes["hmc_mean"], volumes["hmc_std"],
                                                  volumes["wiener_mean"], volumes["wiener_std"])
            volumes["z"] = None if self.comparison is None else self.comparison.z
            self._update_levels(volumes)
            self._draw_histogram()
            self.summary_label.setText(self._summary_text())
        volumes["z"] = None if self.comparison is None else self.comparison.z
        for key, _, group, _, _ in PANELS:
            volume = volumes.get(key)
            image = self.images[key]
            if volume is None or group not in self.levels or volume.ndim != 3:
                image.clear()
                continue
            plane = slice_of(volume, self.plane, min(self.index, volume.shape[PLANES[self.plane][2]] - 1))
            image.setImage(plane.astype(np.float32, copy=False), autoLevels=False,
                           levels=self.levels[group])
        for group, bar in self.colour_bars.items():
            if group in self.levels:
                bar.setLevels(self.levels[group])

    def _update_levels(self, volumes) -> None:
        """Mean and std levels are set once per exact result (from the Wiener arrays, so the
        HMC panels are compared on the same scale); z levels are symmetric, at the 1-2-5
        value above the 99th percentile of |z|."""
        if "mean" not in self.levels and volumes["wiener_mean"] is not None:
            self.levels["mean"] = robust_levels(volumes["wiener_mean"], "field")
        if "std" not in self.levels and volumes["wiener_std"] is not None:
            top = float(np.percentile(volumes["wiener_std"], 99))
            self.levels["std"] = (0.0, 1.2 * top if top > 0 else 1.0)
        if "mean" not in self.levels and volumes["hmc_mean"] is not None:
            self.levels["mean"] = robust_levels(volumes["hmc_mean"], "field")
        if volumes["z"] is not None:
            finite = np.abs(volumes["z"][np.isfinite(volumes["z"])])
            limit = nice_limit(float(np.percentile(finite, 99))) if finite.size else 1.0
            self.levels["z"] = (-limit, limit)

    def _draw_histogram(self) -> None:
        comparison = self.comparison
        if comparison is None:
            self.hist_edges = self.hist_counts = None
            self.hist_curve.setData([], [])
            st = self.state
            if self.status in ("not applicable", "failed", "no run"):
                hint = ""
            elif self.exact is None or self.exact.std is None:
                hint = "waiting for the exact posterior"
            elif not st.moment_count:
                hint = "waiting for post-warmup draws"
            else:
                hint = ""
            self.hist_hint.setText(hint)
            return
        limit = self.levels["z"][1]
        self.hist_edges = np.linspace(-limit, limit, HIST_BINS + 1)
        self.hist_counts, _ = np.histogram(comparison.z, bins=self.hist_edges)
        self.hist_curve.setData(self.hist_edges, self.hist_counts)
        self.hist_hint.setText("")

    def _summary_text(self) -> str:
        c = self.comparison
        st = self.state
        if c is None:
            if self.status in ("not applicable", "failed", "no run"):
                return ""
            if not st.moment_count:
                return "waiting for post-warmup draws (the HMC running moments)"
            return "waiting for the exact posterior"
        outside = int(c.z.size - self.hist_counts.sum())
        parts = [f"z = (HMC mean - Wiener mean) / Wiener std: RMS z = {c.rms_z:.3g} over {c.z.size} "
                 "voxels (a converged chain: about "
                 f"1/sqrt(ESS); as accurate as {c.equivalent_draws:.3g} independent draws, "
                 f"from {st.moment_count} draws)",
                 f"max |z| = {c.max_abs_z:.3g}" + (f" ({outside} outside the histogram)"
                                                   if outside else "")]
        if c.std_ratio is not None:
            parts.append(f"median HMC std / Wiener std = {c.median_std_ratio:.3f}")
        if self.exact is not None and self.exact.std_method == "sample":
            parts.append(f"Wiener std from {self.exact.n_samples} exact draws "
                         f"(+-{100 * self.exact.std_rel_error:.0f}% per voxel)")
        return "  |  ".join(parts)
