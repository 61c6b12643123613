"""The pair plot (corner plot) of the sampled parameters: each one's posterior histogram on the
diagonal, each pair's post-warmup draws below it, every chain in its own colour.

For the P(k) hyperparameters of a field run and for a model file's parameters alike (ArviZ's
``plot_pair`` and corner.py draw the same). Post-warmup draws only (the warmup's are not the
posterior); at most ``MAX_PARAMETERS`` parameters (the first ones, said in the plot) and
``MAX_POINTS`` points per panel (evenly thinned, each chain alike). Built once per run
(``RunState.layout_version``), fed on ``trace_version``.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from app.state.run_state import RunState
from app.views.base import MODEL_KINDS, PLOTS, TracesFedView
from app.views.style import add_empty_hint, chain_colour, parameter_label, steady_axes

__all__ = ["PairPlotView", "MAX_PARAMETERS", "MAX_POINTS"]

MAX_PARAMETERS = 6
MAX_POINTS = 2000
_BINS = 30


def pair_draws(state: RunState, names) -> dict[str, np.ndarray]:
    """name -> (chains, n) post-warmup draws of each parameter."""
    first = state.n_warmup_seen
    return {name: np.asarray(state.param(name), np.float64)[:, first:] for name in names}


def histogram(values: np.ndarray, bins: int = _BINS) -> tuple[np.ndarray, np.ndarray]:
    """(edges, density) of the finite ``values``; empty arrays when there are fewer than two."""
    finite = values[np.isfinite(values)]
    if finite.size < 2:
        return np.empty(0), np.empty(0)
    low, high = float(finite.min()), float(finite.max())
    if high == low:
        low, high = low - 0.5, high + 0.5
    density, edges = np.histogram(finite, bins=bins, range=(low, high), density=True)
    return edges, density


class PairPlotView(TracesFedView):
    """Posterior histograms and pairwise scatter of the sampled parameters (post-warmup)."""

    title = "Pairs"
    group = PLOTS
    kinds = frozenset(MODEL_KINDS)

    def __init__(self, run_state: RunState, parent=None):
        super().__init__(run_state, parent)
        self.names: list[str] = []
        self.diagonal: dict[str, pg.PlotDataItem] = {}
        self.scatter: dict[tuple[str, str], pg.ScatterPlotItem] = {}
        self.plots: dict[tuple[str, str], pg.PlotItem] = {}
        self.hint = None

    def _build(self) -> None:
        st = self.state
        self.graphics.clear()
        self.diagonal.clear()
        self.scatter.clear()
        self.plots.clear()
        names = list(st.param_names)
        self.names = names[:MAX_PARAMETERS]
        if not self.names:
            plot = self.graphics.addPlot(row=0, col=0)
            steady_axes(plot)
            self.hint = add_empty_hint(plot, "no sampled parameter: all are fixed")
            self.plots[("", "")] = plot
            return
        n = len(self.names)
        for i, y_name in enumerate(self.names):
            for j, x_name in enumerate(self.names[:i + 1]):
                plot = self.graphics.addPlot(row=i, col=j)
                steady_axes(plot)
                plot.showGrid(x=True, y=True, alpha=0.15)
                for axis in ("left", "bottom"):          # "0.5", not "500" and "sigma (x0.001)"
                    plot.getAxis(axis).enableAutoSIPrefix(False)
                plot.setLabel("bottom", parameter_label(x_name, short=True) if i == n - 1 else None)
                plot.getAxis("bottom").setStyle(showValues=i == n - 1)
                # y values in the first column only (as corner plots have them): a row's
                # scatter plots share their y range, and the columns get the width
                plot.getAxis("left").setStyle(showValues=j == 0)
                if i == j:
                    plot.setLabel("left", "density" if i == 0 else None)
                    self.diagonal[x_name] = plot.plot(stepMode="center", fillLevel=0,
                                                      brush=(120, 160, 220, 90), pen=pg.mkPen((200, 200, 200)))
                else:
                    plot.setLabel("left", parameter_label(y_name, short=True) if j == 0 else None)
                    item = pg.ScatterPlotItem(size=3, pen=None)
                    plot.addItem(item)
                    self.scatter[(x_name, y_name)] = item
                    plot.setXLink(self.plots[(x_name, x_name)])
                    if j > 0:
                        plot.setYLink(self.plots[(self.names[0], y_name)])
                self.plots[(x_name, y_name)] = plot
        first = self.plots[(self.names[0], self.names[0])]
        text = "waiting for post-warmup draws"
        if len(names) > MAX_PARAMETERS:
            text += f" (the first {MAX_PARAMETERS} of {len(names)} sampled parameters)"
        self.hint = add_empty_hint(first, text)

    def refresh(self, force: bool = False) -> bool:
        if not self._traces_changed(force):
            return False
        st = self.state
        if not self.names:
            return True
        draws = pair_draws(st, self.names)
        n_draws = next(iter(draws.values())).shape[1] if draws else 0
        if self.hint is not None:
            self.hint.setVisible(n_draws < 2)
        for name, curve in self.diagonal.items():
            edges, density = histogram(draws[name].reshape(-1))
            curve.setData(edges, density) if edges.size else curve.setData([], [])
        if not self.scatter:
            return True
        chains = draws[self.names[0]].shape[0]
        step = max(1, (chains * n_draws) // MAX_POINTS)
        brushes = np.repeat([pg.mkBrush(chain_colour(c)) for c in range(chains)],
                            len(range(0, n_draws, step)))
        for (x_name, y_name), item in self.scatter.items():
            x = draws[x_name][:, ::step].reshape(-1)
            y = draws[y_name][:, ::step].reshape(-1)
            item.setData(x=x, y=y, brush=list(brushes[:x.size]))
        return True
