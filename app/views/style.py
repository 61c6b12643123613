"""Colours, pens and the plot set-up every live view shares.

Chains get one colour each from a qualitative palette without red (red marks divergences);
pinned voxels get colours from a second palette so they never look like a chain.
"""

from __future__ import annotations

import pyqtgraph as pg

__all__ = [
    "CHAIN_COLOURS", "PIN_COLOURS", "DIVERGENCE_COLOUR", "DATA_COLOUR", "WARMUP_BRUSH", "CHAIN_STYLES",
    "chain_colour", "pin_colour", "chain_pen", "steady_axes", "configure_live_plot", "add_warmup_marker",
    "add_legend", "add_empty_hint", "sparse_log_ticks", "narrow_label", "inverse_unit", "cubed_unit"
]

CHAIN_COLOURS = ("#4fa3ff", "#ffa640", "#5fd35f", "#c58cff", "#e0c060", "#ff7fd0", "#40e0e0", "#b0b0b0")
PIN_COLOURS = ("#ffe119", "#42d4f4", "#f032e6", "#bfef45", "#fabed4", "#ffffff", "#f58231", "#9a6324")
DIVERGENCE_COLOUR = "#ff2020"
#: the data's P(k) (and its noise level) wherever it is drawn: the P(k) view, the Prior panel
DATA_COLOUR = "#ff6b6b"
WARMUP_BRUSH = (255, 255, 255, 22)
#: line styles for the chains of one pinned voxel (its colour is the voxel's)
CHAIN_STYLES = (pg.QtCore.Qt.PenStyle.SolidLine, pg.QtCore.Qt.PenStyle.DashLine,
                pg.QtCore.Qt.PenStyle.DotLine, pg.QtCore.Qt.PenStyle.DashDotLine)


def chain_colour(chain: int) -> str:
    return CHAIN_COLOURS[chain % len(CHAIN_COLOURS)]


def pin_colour(index: int) -> str:
    return PIN_COLOURS[index % len(PIN_COLOURS)]


def chain_pen(chain: int, width: float = 1.0):
    return pg.mkPen(chain_colour(chain), width=width)


def steady_axes(*plots) -> None:
    """Axes whose tick-label space only grows (each plot a ``PlotItem``, a ``PlotWidget`` or a
    ``ColorBarItem``).

    pyqtgraph's default lets an axis shrink again when its labels get narrower. Where the
    view range depends on the axis width (x-linked plots line up their data in pixels; y
    follows the visible data), that feedback can oscillate for ever: wider labels, another
    x range, other visible data, narrower labels, ... (pyqtgraph issue 3135). The window
    then repaints without end and stops answering. Space that never shrinks ends such a
    loop after a few steps. Every plot the application makes goes through here.
    """
    for plot in plots:
        item = plot.getPlotItem() if isinstance(plot, pg.PlotWidget) else plot   # a ColorBarItem is a PlotItem
        for name in ("left", "right", "top", "bottom"):
            item.getAxis(name).setStyle(autoReduceTextSpace=False)


def configure_live_plot(plot: pg.PlotItem, *, ylabel: str = "", log_y: bool = False) -> pg.PlotItem:
    """The pyqtgraph settings of a plot fed with growing series (see examples/scrollingPlots.py)."""
    steady_axes(plot)
    plot.setDownsampling(auto=True, mode="peak")
    plot.setClipToView(True)
    plot.showGrid(x=True, y=True, alpha=0.15)
    if ylabel:
        plot.setLabel("left", ylabel)
    if log_y:
        plot.setLogMode(y=True)
    # y follows what is visible, so zooming into late draws is not squashed by early warmup
    plot.getViewBox().setAutoVisible(y=True)
    return plot


def add_warmup_marker(plot: pg.PlotItem, num_warmup: int, *, label: bool = False) -> list:
    """Shade steps [0, num_warmup) and draw a dashed line where sampling starts."""
    if num_warmup <= 0:
        return []
    region = pg.LinearRegionItem(values=(0, num_warmup), movable=False, brush=WARMUP_BRUSH,
                                 pen=pg.mkPen(None))
    region.setZValue(-20)
    for line in region.lines:
        line.setPen(pg.mkPen(None))
    opts = {}
    if label:
        opts = dict(label="warmup | sampling", labelOpts={"position": 0.06, "color": (200, 200, 200),
                                                           "anchors": [(0.5, 1), (0.5, 1)]})
    dashed = pg.mkPen((200, 200, 200, 150), style=pg.QtCore.Qt.PenStyle.DashLine)
    boundary = pg.InfiniteLine(pos=num_warmup, angle=90, movable=False, pen=dashed, **opts)
    plot.addItem(region, ignoreBounds=True)
    plot.addItem(boundary, ignoreBounds=True)
    return [region, boundary]


def add_legend(plot: pg.PlotItem, columns: int = 1):
    """A compact legend in the top right corner, on a dark translucent background."""
    legend = plot.addLegend(offset=(-10, 5), labelTextSize="8pt", brush=(0, 0, 0, 170),
                            pen=pg.mkPen((120, 120, 120)))
    legend.setColumnCount(max(1, columns))
    return legend


def add_empty_hint(plot: pg.PlotItem, text: str) -> pg.TextItem:
    """A grey note in the plot's top left corner (in the view box's own coordinates, so it
    stays put whatever the data range); hide it once there is data."""
    hint = pg.TextItem(text, color=(170, 170, 170), anchor=(0, 0))
    hint.setParentItem(plot.getViewBox())
    hint.setPos(8, 4)
    return hint


def sparse_log_ticks(axis: pg.AxisItem) -> pg.AxisItem:
    """Label a log-mode axis only at 1, 2 and 5 times powers of ten (plus every power of
    ten): pyqtgraph labels every minor tick when the range spans about one decade, and in
    a narrow panel the labels run into each other. The ticks themselves stay."""
    plain = axis.logTickStrings

    def tick_strings(values, scale, spacing):
        strings = plain(values, scale, spacing)
        if len(values) <= 4:
            return strings
        keep = []
        for value, text in zip(values, strings):
            mantissa = 10 ** (float(value) % 1.0)
            keep.append(text if min(abs(mantissa - m) for m in (1.0, 2.0, 5.0, 10.0)) < 0.05
                        else "")
        return keep

    axis.logTickStrings = tick_strings
    return axis


def narrow_label(label: pg.LabelItem) -> pg.LabelItem:
    """Let a LabelItem (a plot title, a note) be narrower than its text: pyqtgraph makes the
    text's width its minimum on every resize, which widens the whole layout past its widget
    in a small window; the text is cut instead."""
    update = label.updateMin

    def update_min():
        update()
        label.setMinimumWidth(0)

    label.updateMin = update_min
    label.setMinimumWidth(0)
    return label


def inverse_unit(unit: str) -> str:
    """The unit of a wavenumber for lengths in ``unit``, unambiguous: "Mpc/h" -> "h/Mpc",
    "Mpc" -> "1/Mpc", "" -> "" (a grid without a unit)."""
    unit = unit.strip()
    if not unit:
        return ""
    if unit.count("/") == 1 and " " not in unit and "(" not in unit:
        top, bottom = unit.split("/")
        if top and bottom:
            return f"{bottom}/{top}"
    return f"1/{unit}" if unit.isalnum() else f"1/({unit})"


def cubed_unit(unit: str) -> str:
    """A volume in ``unit`` (the unit of P(k)), unambiguous: "Mpc/h" -> "(Mpc/h)^3", "Mpc" ->
    "Mpc^3", "" -> ""."""
    unit = unit.strip()
    if not unit:
        return ""
    return f"{unit}^3" if unit.isalnum() else f"({unit})^3"
