"""Trace plots: log-density and every sampled hyperparameter per chain, and pinned voxels.

One stacked column of plots sharing the step axis (global step index; warmup shaded).
Plot items are made once per run (when ``RunState.layout_version`` moves) and per pinned
voxel; ``refresh`` only feeds them with ``setData`` from the state's buffers.
"""

from __future__ import annotations

import pyqtgraph as pg
from pyqtgraph.Qt import QtWidgets

from app.state.run_state import RunState
from app.views.base import MODEL_KINDS, PLOTS, TracesFedView
from app.views.style import (
    CHAIN_STYLES,
    add_empty_hint,
    add_legend_strip,
    add_warmup_marker,
    chain_pen,
    configure_live_plot,
    parameter_label,
    pin_colour,
)

__all__ = ["TracesView", "MIN_PLOT_HEIGHT"]

#: each plot keeps this height at least (pixels, with its legend row): past that (many band
#: powers) the column scrolls instead of squeezing plots below their axis labels
MIN_PLOT_HEIGHT = 120
LEGEND_ROW_HEIGHT = 30


class TracesView(TracesFedView):
    """Log-density, hyperparameters and pinned voxel values against the step index."""

    title = "Traces"
    group = PLOTS
    kinds = frozenset(MODEL_KINDS)     # every model: its parameters and statistics

    def __init__(self, run_state: RunState, parent=None):
        super().__init__(run_state, parent)
        self.plots: dict[str, pg.PlotItem] = {}          # "lp", each param name, "pins"
        self.curves: dict[str, list[pg.PlotDataItem]] = {}   # same keys: one curve per chain
        self.pin_curves: dict[tuple, list[pg.PlotDataItem]] = {}
        self.pins_hint = None
        scroll = QtWidgets.QScrollArea()          # the column scrolls once its plots reach their least height
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(pg.QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.layout().replaceWidget(self.graphics, scroll)
        scroll.setWidget(self.graphics)
        self.scroll = scroll

    # -- building -----------------------------------------------------------------------

    def _build(self) -> None:
        st = self.state
        self.graphics.clear()
        self.plots.clear()
        self.curves.clear()
        self.pin_curves.clear()
        self.pins_hint = None
        chains = st.chains or 0
        rows = [("lp", "log density")] + [(name, parameter_label(name)) for name in st.param_names]
        if st.has_field:
            rows.append(("pins", "pinned voxels"))
        first = None
        # legends sit in rows of their own, above their plot (clear of the curves): the
        # chains' above the first plot, the pinned voxels' above theirs
        row = 0
        for key, label in rows:
            legend_row = None
            if key == "pins" or (first is None and chains > 1):
                legend_row, row = row, row + 1
            plot = self.graphics.addPlot(row=row, col=0)
            row += 1
            configure_live_plot(plot, ylabel=label)
            add_warmup_marker(plot, st.num_warmup, label=first is None)
            if first is None:
                first = plot
                self.empty_hint = add_empty_hint(plot, "waiting for the first chunk of draws")
                if chains > 1:
                    add_legend_strip(self.graphics, plot, row=legend_row)
            else:
                plot.setXLink(first)
            if key != "pins":
                self.curves[key] = [plot.plot(pen=chain_pen(c), name=f"chain {c}", connect="finite")
                                    for c in range(chains)]
            else:
                self.pins_legend = add_legend_strip(self.graphics, plot, row=legend_row)
                self.pins_hint = add_empty_hint(plot, "click a voxel in a slice to follow it")
            self.plots[key] = plot
        self.graphics.setMinimumHeight(len(rows) * MIN_PLOT_HEIGHT + (row - len(rows)) * LEGEND_ROW_HEIGHT)
        for key, plot in self.plots.items():
            last = key == rows[-1][0]
            plot.setLabel("bottom", "step" if last else None)
            plot.getAxis("bottom").setStyle(showValues=last)

    def _sync_pins(self) -> None:
        """Make curves for new pins and drop those of removed ones (created once per pin)."""
        plot = self.plots.get("pins")
        if plot is None:
            return
        pins = self.state.pins
        for voxel in [v for v in self.pin_curves if v not in pins]:
            for curve in self.pin_curves.pop(voxel):
                plot.removeItem(curve)
                if plot.legend is not None:
                    plot.legend.removeItem(curve)
        for voxel, trace in pins.items():
            if voxel in self.pin_curves:
                continue
            colour = pin_colour(trace.serial)
            chains = trace.values.shape[0]
            curves = []
            for c in range(chains):
                pen = pg.mkPen(colour, width=1.2, style=CHAIN_STYLES[c % len(CHAIN_STYLES)])
                curves.append(plot.plot(pen=pen, symbol="o", symbolSize=4, symbolPen=None,
                                        symbolBrush=colour, connect="finite",
                                        name=str(voxel) if c == 0 else None))
            self.pin_curves[voxel] = curves
        if self.pins_hint is not None:
            self.pins_hint.setVisible(not pins)
            self.pins_legend.setVisible(bool(pins))

    # -- drawing ------------------------------------------------------------------------

    def refresh(self, force: bool = False) -> bool:
        """Feed the curves when the state's traces changed. Returns whether it redrew."""
        if not self._traces_changed(force):
            return False
        st = self.state
        self.empty_hint.setVisible(st.n_steps == 0)
        steps = st.steps
        series = {"lp": st.stat("lp"), **{name: st.param(name) for name in st.param_names}}
        for name, curves in self.curves.items():
            values = series.get(name)
            for c, curve in enumerate(curves):
                curve.setData(steps, values[c])
        self._sync_pins()
        for voxel, curves in self.pin_curves.items():
            trace = st.pins[voxel]
            for c, curve in enumerate(curves):
                curve.setData(trace.steps, trace.values[c])
        return True
