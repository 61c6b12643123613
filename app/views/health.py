"""Sampler health: gradient norm (log scale), acceptance rate and step size per chain.

Divergent transitions are red points on the gradient-norm and acceptance plots, at the
step where they happened: filled after warmup (they count: the sampler missed part of the
posterior), hollow during warmup (expected while the step size adapts). The note in the
gradient-norm plot gives both counts ("0 divergences (49 in warmup)"). The warmup steps
are shaded: step sizes move there by design.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from app.state.run_state import RunState
from app.views.base import MODEL_KINDS, PLOTS, TracesFedView
from app.views.style import (
    DIVERGENCE_COLOUR,
    add_empty_hint,
    add_legend_strip,
    add_warmup_marker,
    chain_pen,
    configure_live_plot,
    wrapping_label,
)
from core.store.run_summary import divergence_text

__all__ = ["HEALTH_PLOTS", "DIVERGENCE_PLOTS", "HealthView"]

#: (stat name, axis label, log y)
HEALTH_PLOTS = (("grad_norm", "gradient norm", True),
                ("acceptance_rate", "acceptance rate", False),
                ("step_size", "step size", True))
#: the plots that also show divergences
DIVERGENCE_PLOTS = ("grad_norm", "acceptance_rate")


class HealthView(TracesFedView):
    """Per-chain gradient norm, acceptance rate and step size against the step index.

    ``divergences[name]``: the scatter of the divergent post-warmup steps on plot ``name``
    (filled), ``warmup_divergences[name]`` that of the warmup ones (hollow);
    ``divergence_note``: both counts."""

    title = "Health"
    group = PLOTS
    kinds = frozenset(MODEL_KINDS)     # every model: its parameters and statistics

    def __init__(self, run_state: RunState, parent=None):
        super().__init__(run_state, parent)
        self.plots: dict[str, pg.PlotItem] = {}
        self.curves: dict[str, list[pg.PlotDataItem]] = {}
        self.divergences: dict[str, pg.PlotDataItem] = {}
        self.warmup_divergences: dict[str, pg.PlotDataItem] = {}
        self._divergences_seen = None

    def _build(self) -> None:
        st = self.state
        self.graphics.clear()
        self.plots.clear()
        self.curves.clear()
        self.divergences.clear()
        self.warmup_divergences.clear()
        self._divergences_seen = None
        chains = st.chains or 0
        first = None
        # the divergence counts and the legend above the plots, clear of the curves
        self.divergence_note = wrapping_label(pg.LabelItem("", size="8pt", color=(170, 170, 170),
                                                           justify="left"))
        self.graphics.addItem(self.divergence_note, row=0, col=0)
        for row, (name, label, log_y) in enumerate(HEALTH_PLOTS):
            plot = self.graphics.addPlot(row=row + 2, col=0)
            configure_live_plot(plot, ylabel=label, log_y=log_y)
            add_warmup_marker(plot, st.num_warmup, label=row == 0)
            if first is None:
                first = plot
                self.empty_hint = add_empty_hint(plot, "waiting for the first chunk of draws")
                add_legend_strip(self.graphics, plot, row=1)
            else:
                plot.setXLink(first)
            self.curves[name] = [plot.plot(pen=chain_pen(c), name=f"chain {c}", connect="finite")
                                 for c in range(chains)]
            if name in DIVERGENCE_PLOTS:
                dots = plot.plot(pen=None, symbol="o", symbolSize=6, symbolPen=None,
                                 symbolBrush=DIVERGENCE_COLOUR, name="divergent" if row == 0 else None)
                dots.setZValue(10)
                self.divergences[name] = dots
                warm_dots = plot.plot(pen=None, symbol="o", symbolSize=6, symbolPen=pg.mkPen(DIVERGENCE_COLOUR, width=1.2),
                                      symbolBrush=None,
                                      name="in warmup" if row == 0 else None)
                warm_dots.setZValue(9)
                self.warmup_divergences[name] = warm_dots
            last = row == len(HEALTH_PLOTS) - 1
            plot.setLabel("bottom", "step" if last else None)
            plot.getAxis("bottom").setStyle(showValues=last)
            self.plots[name] = plot
        self.plots["acceptance_rate"].setYRange(0, 1.02, padding=0)
        self.plots["acceptance_rate"].enableAutoRange(y=False)

    def refresh(self, force: bool = False) -> bool:
        """Feed the curves when the state's traces changed. Returns whether it redrew."""
        if not self._traces_changed(force):
            return False
        st = self.state
        self.empty_hint.setVisible(st.n_steps == 0)
        self.divergence_note.setVisible(st.n_steps > 0)
        steps = st.steps
        for name, curves in self.curves.items():
            values = st.stat(name)
            for c, curve in enumerate(curves):
                curve.setData(steps, values[c])
        # divergences only accumulate, and a scatter of thousands of points is slow to
        # rebuild: set it again only when they changed
        diverging = st.stat("diverging").astype(bool)
        chain_idx, step_idx = np.nonzero(diverging)
        div_key = (st.layout_version, len(step_idx), int(steps[step_idx].max()) if len(step_idx) else -1)
        if div_key != self._divergences_seen or force:
            self._divergences_seen = div_key
            warm = steps[step_idx] < st.num_warmup
            for name, dots in self.divergences.items():
                values = st.stat(name)[chain_idx, step_idx]
                dots.setData(steps[step_idx][~warm], values[~warm])
                self.warmup_divergences[name].setData(steps[step_idx][warm], values[warm])
            sampling, warmup = int((~warm).sum()), int(warm.sum())
            self.divergence_note.setText(divergence_text(sampling, warmup)
                                         + ("; hollow: in warmup, expected" if warmup else ""),
                                         color=DIVERGENCE_COLOUR if sampling else "#aaaaaa")
        return True
