"""Colours, pens and the plot set-up every live view shares.

Chains get one colour each from a qualitative palette without red (red marks divergences);
pinned voxels get colours from a second palette so they never look like a chain.
"""

from __future__ import annotations

import pyqtgraph as pg

__all__ = [
    "CHAIN_COLOURS", "PIN_COLOURS", "DIVERGENCE_COLOUR", "DATA_COLOUR", "WARMUP_BRUSH", "CHAIN_STYLES",
    "LEGEND_TEXT_SIZE", "TICK_LABEL_GAP", "LegendStrip", "chain_colour", "pin_colour", "chain_pen", "steady_axes",
    "parameter_label",
    "spaced_tick_labels", "configure_live_plot", "add_warmup_marker", "add_legend", "add_legend_strip",
    "add_empty_hint", "sparse_log_ticks", "narrow_label", "wrapping_label", "inverse_unit", "cubed_unit"
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
#: the text size of every legend
LEGEND_TEXT_SIZE = "8pt"
#: the least room in pixels between two tick labels of a horizontal axis: closer, neighbours
#: read as one number ("0.050.1"); a vertical axis keeps a third of it (its labels' boxes
#: are 80 % of a line already)
TICK_LABEL_GAP = 6.0


def chain_colour(chain: int) -> str:
    return CHAIN_COLOURS[chain % len(CHAIN_COLOURS)]


def pin_colour(index: int) -> str:
    return PIN_COLOURS[index % len(PIN_COLOURS)]


def chain_pen(chain: int, width: float = 1.0):
    return pg.mkPen(chain_colour(chain), width=width)


def steady_axes(*plots) -> None:
    """Axes whose tick-label space only grows and whose tick labels never run into each
    other (each plot a ``PlotItem``, a ``PlotWidget`` or a ``ColorBarItem``).

    pyqtgraph's default lets an axis shrink again when its labels get narrower. Where the
    view range depends on the axis width (x-linked plots line up their data in pixels; y
    follows the visible data), that feedback can oscillate for ever: wider labels, another
    x range, other visible data, narrower labels, ... (pyqtgraph issue 3135). The window
    then repaints without end and stops answering. Space that never shrinks ends such a
    loop after a few steps. Every plot the application makes goes through here, so every
    axis also draws only labels with room between them (``spaced_tick_labels``).
    """
    for plot in plots:
        item = plot.getPlotItem() if isinstance(plot, pg.PlotWidget) else plot   # a ColorBarItem is a PlotItem
        for name in ("left", "right", "top", "bottom"):
            axis = item.getAxis(name)
            axis.setStyle(autoReduceTextSpace=False)
            spaced_tick_labels(axis)


def _spaced(text_specs, horizontal: bool, gap: float) -> list:
    """The text specs (rect, flags, text) of ``AxisItem.generateDrawSpecs`` that keep ``gap``
    pixels from every label kept before them along the axis; empty texts dropped. Taken in
    pyqtgraph's order (major values first); where that keeps a single label, from one end of
    the axis to the other instead, if that keeps more (two labels give the scale)."""
    def span(spec):
        rect = spec[0]
        return (rect.left(), rect.right()) if horizontal else (rect.top(), rect.bottom())

    def greedy(specs):
        kept, spans = [], []
        for spec in specs:
            low, high = span(spec)
            if any(low < other_high + gap and high > other_low - gap for other_low, other_high in spans):
                continue
            kept.append(spec)
            spans.append((low, high))
        return kept

    specs = [spec for spec in text_specs if str(spec[2]).strip()]
    kept = greedy(specs)
    if len(kept) < 2 <= len(specs):
        along = greedy(sorted(specs, key=span))
        if len(along) > len(kept):
            kept = along
    return kept


def spaced_tick_labels(axis: pg.AxisItem) -> pg.AxisItem:
    """Draw an axis's tick labels only where they keep ``TICK_LABEL_GAP`` from each other.

    pyqtgraph decides how many levels of labels to draw from their total length, not from
    where they fall: on a log axis spanning a decade or two it labels every minor tick
    ("5·10¹6·10¹7·10¹" stacked on each other), and in a narrow plot neighbouring labels
    touch ("0.050.10.20.5 1"). Here the labels it would draw are taken in its order (the
    major level first, each level from low to high values) and one that would come closer
    than the gap to a label already kept is left out; its tick stays.
    """
    if getattr(axis, "_spaced_tick_labels", False):
        return axis
    generate = axis.generateDrawSpecs
    horizontal = axis.orientation in ("top", "bottom")
    gap = TICK_LABEL_GAP if horizontal else TICK_LABEL_GAP / 3

    def generate_draw_specs(painter):
        specs = generate(painter)
        if specs is None:
            return None
        axis_spec, tick_specs, text_specs = specs
        return axis_spec, tick_specs, _spaced(text_specs, horizontal, gap)

    axis.generateDrawSpecs = generate_draw_specs
    axis._spaced_tick_labels = True
    return axis


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
        sparse_log_ticks(plot.getAxis("left"))
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
    if label:
        _fit_warmup_label(boundary.label)
    plot.addItem(region, ignoreBounds=True)
    plot.addItem(boundary, ignoreBounds=True)
    return [region, boundary]


#: the warmup marker's label, from the first that fits in the plot: (text, where the line
#: meets it, as a fraction of its width)
WARMUP_LABELS = (("warmup | sampling", 0.5), ("sampling \u2192", 0.0), ("\u2190 warmup", 1.0))


def _fit_warmup_label(label) -> None:
    """Keep the warmup marker's label (an ``InfLineLabel``) inside its plot, which clips it:
    "warmup | sampling" centred on the line where it fits, else "sampling ->" right of the
    line, else "<- warmup" left of it."""
    update = label.updatePosition

    def update_position():
        update()
        box = label.parentItem()
        while box is not None and not isinstance(box, pg.ViewBox):   # (getViewBox() caches too early)
            box = box.parentItem()
        if box is None:
            return
        room = box.mapRectToScene(box.boundingRect())
        at = label.scenePos().x()
        margin = 2 * label.textItem.document().documentMargin()
        metrics = pg.QtGui.QFontMetricsF(label.textItem.font())
        text, anchor = WARMUP_LABELS[-1]
        for candidate, where in WARMUP_LABELS:
            width = metrics.horizontalAdvance(candidate) + margin
            if room.left() <= at - where * width and at + (1 - where) * width <= room.right():
                text, anchor = candidate, where
                break
        if label.format != text:
            label.format = text
            label.setText(text)
        if label.anchor.x() != anchor:
            label.setAnchor((anchor, label.anchor.y()))

    label.updatePosition = update_position


def add_legend(plot: pg.PlotItem, columns: int = 1):
    """A compact legend in the top right corner of the plot, on a dark translucent background
    (over the data: where a plot sits in a layout of the view's own, ``add_legend_strip``
    puts the legend beside it instead)."""
    legend = plot.addLegend(offset=(-10, 5), labelTextSize=LEGEND_TEXT_SIZE, brush=(0, 0, 0, 170),
                            pen=pg.mkPen((120, 120, 120)))
    legend.setColumnCount(max(1, columns))
    return legend


class LegendStrip(pg.LegendItem):
    """A legend in a cell of its own in a graphics layout, above or beside its plot, never
    over the data.

    Its entries flow into as many columns as the cell is wide (one at the least: the cell
    is never narrower than the widest entry) and it is as tall as its rows; without entries
    it takes no room. It is the plot's legend (``plot.legend``): curves made with a
    ``name`` add their entry, ``plot.clear()`` removes them. No frame, no dragging.
    """

    #: the room in pixels between one entry's text and the next entry's sample
    ENTRY_GAP = 14.0

    def __init__(self, plot: pg.PlotItem | None = None):
        super().__init__(offset=None, labelTextSize=LEGEND_TEXT_SIZE, frame=False, verSpacing=-4)
        self.layout.setContentsMargins(4, 0, 4, 0)
        if plot is not None:
            plot.legend = self

    def addItem(self, item, name) -> None:
        super().addItem(item, name)
        # the entries at their own width, packed from the left (a grid would spread them over the strip)
        _sample, label = self.items[-1]
        label.setSizePolicy(pg.QtWidgets.QSizePolicy.Policy.Fixed, pg.QtWidgets.QSizePolicy.Policy.Preferred)

    def _entry_widths(self) -> list[tuple[float, float]]:
        hint = pg.QtCore.Qt.SizeHint.PreferredSize
        return [(sample.effectiveSizeHint(hint).width(), label.effectiveSizeHint(hint).width())
                for sample, label in self.items]

    def _width(self, columns: int) -> float:
        """The width the entries need in ``columns`` columns (filled row by row)."""
        entries = self._entry_widths()
        left, _, right, _ = self.layout.getContentsMargins()
        widths = [max(s for s, _ in entries[c::columns]) + max(w for _, w in entries[c::columns])
                  for c in range(min(columns, len(entries)))]
        return (sum(widths) + len(widths) * self.layout.horizontalSpacing()
                + (len(widths) - 1) * LegendStrip.ENTRY_GAP + left + right)

    def columns_for(self, width: float) -> int:
        """The most columns (at least one) whose entries fit in ``width`` pixels."""
        fits = [c for c in range(1, len(self.items) + 1) if self._width(c) <= width]
        return max(fits, default=1)

    def _reflow(self, width: float) -> None:
        columns = self.columns_for(width) if self.items else 1
        if columns != self.columnCount:
            self.setColumnCount(columns)        # lays the entries out again (and calls updateSize)
        for column in range(2 * columns - 1):   # (sample, label) per entry, a gap between entries
            self.layout.setColumnSpacing(column, self.ENTRY_GAP if column % 2 else self.layout.horizontalSpacing())
        self.updateGeometry()

    def updateSize(self) -> None:
        # pyqtgraph's moves the legend to (0, 0) at its content's size: here the layout places it
        self._reflow(self.rect().width())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._reflow(event.newSize().width())

    def sizeHint(self, which, constraint=pg.QtCore.QSizeF()):
        height = self.layout.effectiveSizeHint(pg.QtCore.Qt.SizeHint.PreferredSize).height() if self.items else 0.0
        if which == pg.QtCore.Qt.SizeHint.MaximumSize:
            # as wide as the layout likes, even empty: a narrow maximum would narrow its columns
            return pg.QtCore.QSizeF(1e6, height)
        return pg.QtCore.QSizeF(self._width(1) if self.items else 0.0, height)

    def mouseDragEvent(self, event) -> None:
        event.ignore()


def add_legend_strip(layout: pg.GraphicsLayout, plot: pg.PlotItem | None, row: int, col: int = 0,
                     colspan: int = 1) -> LegendStrip:
    """The legend of ``plot`` in the cell (``row``, ``col``) of ``layout`` (a
    ``GraphicsLayout`` or ``GraphicsLayoutWidget``): a ``LegendStrip``, clear of the data.
    Without a plot, entries are added with ``addItem(item, name)``."""
    strip = LegendStrip(plot)
    layout.addItem(strip, row=row, col=col, colspan=colspan)
    return strip


def add_empty_hint(plot: pg.PlotItem, text: str) -> pg.TextItem:
    """A grey note in the plot's top left corner (in the view box's own coordinates, so it
    stays put whatever the data range); hide it once there is data. It wraps at the plot's
    width (the view box clips what sticks out)."""
    box = plot.getViewBox()
    hint = pg.TextItem(text, color=(170, 170, 170), anchor=(0, 0))
    hint.setParentItem(box)
    hint.setPos(8, 4)

    def fit(_box=None):
        hint.setTextWidth(max(box.width() - 16, 40.0))

    box.sigResized.connect(fit)
    fit()
    return hint


_SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def parameter_label(name: str, short: bool = False) -> str:
    """A parameter's name as an axis label in a narrow plot: a band power's "band_power_03" as
    "band 03", or with ``short`` (a pair plot's columns) "P₀₃"; others as they are."""
    if not name.startswith("band_power_"):
        return name
    number = name[len("band_power_"):]
    return "P" + number.translate(_SUBSCRIPTS) if short else "band " + number


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


def wrapping_label(label: pg.LabelItem) -> pg.LabelItem:
    """Let a LabelItem (a note above the plots) be narrower than its text by wrapping it onto
    more lines at its width (it grows taller), where ``narrow_label`` would cut it."""
    update = label.updateMin

    def update_min():
        width = label.rect().width()
        if width > 1 and abs(label.item.textWidth() - width) > 0.5:
            label.item.setTextWidth(width)
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
