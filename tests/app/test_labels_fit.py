"""Every tick label, legend, title and axis label of every plot view fits (#32), measured on
the pyqtgraph items of the main window at its default size and at 1280 x 800 (and of the
calibration window, at the size it opens with and at 1280 x 800).

The window opens finished runs written here without TensorFlow (``support.sampled_runs``: a
field run sampling P(k), one with P(k) fixed (the exact posterior applies) and an integral-
model run, each with the ranges a real run has), every tab is shown in turn and drawn, and
then the geometry is checked in scene coordinates, in each ``pg.GraphicsView`` of the view:

- tick labels: the rectangles an ``AxisItem`` draws its labels in (``generateDrawSpecs``'s
  text specs, measured with its tick font as ``paint`` measures them) lie in the visible
  part of the view, and the labels of one axis keep a gap between each other: no
  "0.050.10.20.5 1", no stacked "5·10¹6·10¹"; an axis that shows values shows one at least,
  two once it is ``TWO_LABELS_FROM`` long;
- legends: each lies in the visible part of the view and, when it sits in a plot, inside
  that plot's view box (which clips it: "hain 0"); each entry's text (its font's advance of
  the plain text) fits in its label and inside the legend; a legend in a plot covers at
  most ``COVERED`` of what any curve draws there;
- titles and notes (``LabelItem``) are as wide as their text and visible; axis labels are
  no longer than their axis; notes in a plot (``TextItem``: hints, the warmup marker's
  label) lie inside its view box, which clips them;
- no two of all these texts overlap.

A problem is described with the run, the size, the tab and the item, and all of them are
reported at once.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pyqtgraph as pg
import pytest
import shiboken6
from pyqtgraph.Qt import QtCore, QtGui, QtWidgets

from app.main_window import MainWindow
from app.views.base import LazyView
from app.views.calibration import CalibrationWindow
from support.sampled_runs import calibration_store, field_run, integral_run

#: the sizes checked: the window's own default size (None) and a common laptop screen
SIZES = {"default": None, "1280x800": (1280, 800)}
#: the least gap in pixels between neighbouring tick labels of one horizontal axis (less and
#: the numbers read as one: "0.050.1"); vertical labels must not touch (pyqtgraph's text
#: rectangles are 80 % of the line height already)
TICK_GAP = 4.0
#: an axis at least this long (pixels) shows two tick labels at least, a shorter one one: two
#: give the scale, and from about this length pyqtgraph's ticks leave room for two labels
TWO_LABELS_FROM = 150.0
#: the fraction of a curve's visible length (its drawn segments) a legend in the plot may cover
COVERED = 0.05
#: rounding: text rectangles are floats, layout cells whole pixels
SLACK = 1.0


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("label_runs")
    return {"field": field_run(folder / "field"), "exact": field_run(folder / "exact", exact=True),
            "bands": field_run(folder / "bands", bands=6), "integral": integral_run(folder / "integral")}


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    win = MainWindow(engine=None, remember_layout=False)
    yield win
    for view in win.views.views.values():           # background computations end first
        inner = view.view if isinstance(view, LazyView) else view
        if inner is not None and hasattr(inner, "cancel"):
            inner.cancel()
    win.confirm_close = False
    win.close()
    win.deleteLater()
    QtCore.QCoreApplication.sendPostedEvents(None, QtCore.QEvent.Type.DeferredDelete)


# ----------------------------------------------------------------------------- geometry


def _text_lines(text: str) -> list[str]:
    return [line for line in re.split("[\n\u2028\u2029]", text) if line.strip()]


def _scene_text_rect(item: QtWidgets.QGraphicsTextItem) -> QtCore.QRectF:
    """Where a text item's text is, without its document margin, in scene coordinates."""
    m = item.document().documentMargin()
    return item.mapRectToScene(item.boundingRect().adjusted(m, m, -m, -m))


def _label_font(label: pg.LabelItem) -> QtGui.QFont:
    """The font a LabelItem draws with (its size, bold and italic are HTML styles)."""
    font = QtGui.QFont(label.item.font())
    size = str(label.opts.get("size") or "")
    if size.endswith("pt"):
        font.setPointSizeF(float(size[:-2]))
    elif size.endswith("px"):
        font.setPixelSize(int(float(size[:-2])))
    font.setBold(bool(label.opts.get("bold")))
    font.setItalic(bool(label.opts.get("italic")))
    return font


def _text_width(label: pg.LabelItem) -> float:
    """The width of a label's widest line: the advance of its plain text in its font, or,
    for a label that wraps its text (a text width set), the widest line as laid out."""
    item = label.item
    if item.textWidth() > 0:
        widths, block = [], item.document().begin()
        while block.isValid():
            layout = block.layout()
            widths += [layout.lineAt(i).naturalTextWidth() for i in range(layout.lineCount())]
            block = block.next()
        return max(widths, default=0.0)
    metrics = QtGui.QFontMetricsF(_label_font(label))
    return max((metrics.horizontalAdvance(line) for line in _text_lines(item.toPlainText())), default=0.0)


def _inside(inner: QtCore.QRectF, outer: QtCore.QRectF, slack: float = SLACK) -> bool:
    return outer.adjusted(-slack, -slack, slack, slack).contains(inner)


def _overlap(a: QtCore.QRectF, b: QtCore.QRectF) -> bool:
    return a.adjusted(SLACK, SLACK, -SLACK, -SLACK).intersects(b.adjusted(SLACK, SLACK, -SLACK, -SLACK))


def _rect_text(rect: QtCore.QRectF) -> str:
    return f"({rect.x():.0f}, {rect.y():.0f}, {rect.width():.0f} x {rect.height():.0f})"


def _shown(item) -> bool:
    return shiboken6.isValid(item) and item.isVisible() and item.scene() is not None


def _owner(item) -> pg.ViewBox | None:
    """The view box an item is drawn in (it clips its children), if any."""
    parent = item.parentItem()
    while parent is not None:
        if isinstance(parent, pg.ViewBox):
            return parent
        parent = parent.parentItem()
    return None


def _box(item) -> QtCore.QRectF:
    return item.mapRectToScene(QtCore.QRectF(0, 0, item.width(), item.height()))


def _plot_name(item) -> str:
    """The plot an item belongs to, by its title or its left axis label."""
    parent = item
    while parent is not None and not isinstance(parent, pg.PlotItem):
        parent = parent.parentItem()
    if parent is None:
        return "the layout"
    title = parent.titleLabel.item.toPlainText().strip() if parent.titleLabel.isVisible() else ""
    left = parent.getAxis("left").labelText
    return f"plot {title or left or '(untitled)'!r}"


def tick_labels(axis: pg.AxisItem) -> list[tuple[QtCore.QRectF, str]]:
    """(scene rectangle, text) of each tick label the axis draws now (``AxisItem.paint``)."""
    if not axis.style["showValues"]:
        return []
    picture = QtGui.QPicture()
    painter = QtGui.QPainter(picture)
    try:
        if axis.style["tickFont"]:
            painter.setFont(axis.style["tickFont"])
        specs = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    if specs is None:
        return []
    return [(axis.mapRectToScene(rect), text) for rect, _flags, text in specs[2] if text.strip()]


def axis_problems(axis: pg.AxisItem, visible: QtCore.QRectF, texts: list) -> list[str]:
    name = f"{_plot_name(axis)}, {axis.orientation} axis"
    problems = []
    labels = tick_labels(axis)
    horizontal = axis.orientation in ("top", "bottom")
    length = _box(axis).width() if horizontal else _box(axis).height()
    wanted = 2 if length >= TWO_LABELS_FROM else 1
    if axis.style["showValues"] and len(labels) < wanted:
        problems.append(f"{name}: {len(labels)} tick label(s) {[t for _, t in labels]} on {length:.0f} px: "
                        "the scale cannot be read")
    ordered = sorted(labels, key=lambda lt: lt[0].center().x() if horizontal else lt[0].center().y())
    for (a, ta), (b, tb) in zip(ordered, ordered[1:]):
        gap = b.left() - a.right() if horizontal else b.top() - a.bottom()
        if gap < (TICK_GAP if horizontal else 0.0) - 1e-6:
            problems.append(f"{name}: tick labels {ta!r} and {tb!r} {'overlap' if gap < 0 else 'touch'}"
                            f" (gap {gap:.1f} px)")
    for rect, text in labels:
        if not _inside(rect, visible):
            problems.append(f"{name}: tick label {text!r} at {_rect_text(rect)} is cut by the view's edge")
        texts.append((rect, f"{name} tick label {text!r}", ("axis", id(axis))))
    if axis.label.isVisible() and axis.labelText:
        rect = _scene_text_rect(axis.label)
        along = _box(axis)
        along = along.adjusted(-SLACK, -1e6, SLACK, 1e6) if horizontal else along.adjusted(-1e6, -SLACK, 1e6, SLACK)
        what = f"{name}: axis label {axis.label.toPlainText()!r}"
        if not along.contains(rect):
            problems.append(f"{what} ({rect.width() if horizontal else rect.height():.0f} px) is longer "
                            f"than its axis ({_box(axis).width() if horizontal else _box(axis).height():.0f} px)")
        elif not _inside(rect, visible):
            problems.append(f"{what} is cut by the view's edge")
        texts.append((rect, what, None))
    return problems


def label_problems(label: pg.LabelItem, visible: QtCore.QRectF, texts: list, what: str) -> list[str]:
    plain = " / ".join(_text_lines(label.item.toPlainText()))
    if not plain:
        return []
    problems = []
    needed, width = _text_width(label), label.width()
    if needed > width + SLACK:
        problems.append(f"{what} {plain!r} is cut: its text is {needed:.0f} px wide, its label {width:.0f} px")
    rect = _scene_text_rect(label.item)
    if rect.height() > label.height() + SLACK:
        problems.append(f"{what} {plain!r} is cut: its text is {rect.height():.0f} px high, its label "
                        f"{label.height():.0f} px")
    if not _inside(rect, visible):
        problems.append(f"{what} {plain!r} at {_rect_text(rect)} is cut by the view's edge")
    texts.append((rect, f"{what} {plain!r}", None))
    return problems


def _covered(legend: pg.LegendItem, box: pg.ViewBox) -> list[str]:
    """The curves of ``box`` of which the legend covers more than COVERED of the visible
    length (each drawn segment sampled every pixel or so)."""
    frame = _box(legend)
    view = _box(box)
    out = []
    transform = box.childGroup.sceneTransform()
    for item in box.addedItems:
        if not isinstance(item, pg.PlotDataItem) or not item.isVisible():
            continue
        x, y = item.getData()
        if x is None or len(x) == 0:
            continue
        x, y = np.asarray(x, float), np.asarray(y, float)
        sx = transform.m11() * x + transform.m21() * y + transform.dx()
        sy = transform.m12() * x + transform.m22() * y + transform.dy()
        if len(sx) > 1 and item.opts.get("pen") is not None:      # a line: its segments, densely
            steps = np.clip(np.hypot(np.diff(sx), np.diff(sy)), 1, 50).astype(int)
            steps = np.where(np.isfinite(steps), steps, 1)
            at = np.repeat(np.arange(len(sx) - 1), steps) + np.concatenate([np.arange(n) / n for n in steps])
            sx, sy = np.interp(at, np.arange(len(sx)), sx), np.interp(at, np.arange(len(sy)), sy)
        seen = np.isfinite(sx) & np.isfinite(sy) & (sx >= view.left()) & (sx <= view.right()) \
            & (sy >= view.top()) & (sy <= view.bottom())
        under = seen & (sx >= frame.left()) & (sx <= frame.right()) & (sy >= frame.top()) & (sy <= frame.bottom())
        if seen.sum() and under.sum() > COVERED * seen.sum():
            name = item.name() or "a curve"
            out.append(f"{name!r} ({100 * under.sum() / seen.sum():.0f} % of what is drawn)")
    return out


def legend_problems(legend: pg.LegendItem, visible: QtCore.QRectF, texts: list) -> list[str]:
    if not legend.items:
        return []
    name = f"{_plot_name(legend) if _owner(legend) else 'the layout'}, legend"
    frame = _box(legend)
    problems = []
    if not _inside(frame, visible):
        problems.append(f"{name} at {_rect_text(frame)} is cut by the view's edge")
    box = _owner(legend)
    if box is not None:
        if not _inside(frame, _box(box)):
            problems.append(f"{name} at {_rect_text(frame)} is cut by its plot {_rect_text(_box(box))}")
        covered = _covered(legend, box)
        if covered:
            problems.append(f"{name} covers " + ", ".join(covered))
    for _sample, label in legend.items:
        if not _shown(label):
            continue
        problems += label_problems(label, visible, texts, f"{name} entry")
        rect = _scene_text_rect(label.item)
        if not _inside(rect, frame):
            problems.append(f"{name} entry {label.item.toPlainText()!r} sticks out of the legend")
    return problems


def text_item_problems(item: pg.TextItem, visible: QtCore.QRectF, texts: list) -> list[str]:
    plain = " / ".join(_text_lines(item.textItem.toPlainText()))
    if not plain:
        return []
    rect = _scene_text_rect(item.textItem)
    box = _owner(item)
    what = f"{_plot_name(box) if box is not None else 'the layout'}, note {plain!r}"
    texts.append((rect, what, ("note", id(box))))
    if box is not None and not _inside(rect, _box(box)):
        return [f"{what} at {_rect_text(rect)} is cut by its plot {_rect_text(_box(box))}"]
    if not _inside(rect, visible):
        return [f"{what} at {_rect_text(rect)} is cut by the view's edge"]
    return []


def scene_problems(gview: pg.GraphicsView) -> list[str]:
    """Every label problem of the items one graphics view shows."""
    visible = gview.mapToScene(gview.viewport().rect()).boundingRect()
    problems, texts = [], []
    legend_labels = set()
    for item in gview.scene().items():
        if not _shown(item):
            continue
        if isinstance(item, pg.AxisItem):
            problems += axis_problems(item, visible, texts)
        elif isinstance(item, pg.LegendItem):
            problems += legend_problems(item, visible, texts)
            legend_labels.update(id(label) for _, label in item.items)
        elif isinstance(item, pg.TextItem):
            problems += text_item_problems(item, visible, texts)
    for item in gview.scene().items():
        if isinstance(item, pg.LabelItem) and _shown(item) and id(item) not in legend_labels:
            problems += label_problems(item, visible, texts, f"{_plot_name(item)}, title or note")
    for (a, what_a, group_a), (b, what_b, group_b) in itertools.combinations(texts, 2):
        if group_a is not None and group_a == group_b:
            continue                       # one axis's labels: their gaps are checked above
        if _overlap(a, b):
            problems.append(f"{what_a} and {what_b} overlap")
    return problems


def view_problems(view: QtWidgets.QWidget) -> list[str]:
    gviews = [g for g in view.findChildren(pg.GraphicsView) if g.isVisible() and g.width() > 0]
    return [p for g in gviews for p in scene_problems(g)]


# ----------------------------------------------------------------------------- the window


def _busy(view) -> bool:
    inner = view.view if isinstance(view, LazyView) else view
    if inner is None:
        return False
    jobs = [getattr(inner, name, None) for name in ("job", "plane_job")]
    computing = getattr(inner, "is_computing", None)
    return any(job is not None and job.busy for job in jobs) or bool(computing and computing())


def _layout_key(view) -> tuple:
    return tuple((round(item.x()), round(item.y()), round(item.width()), round(item.height()))
                 for g in view.findChildren(pg.GraphicsView) for item in g.scene().items()
                 if isinstance(item, (pg.AxisItem, pg.LegendItem, pg.LabelItem)))


def settle(qtbot, view) -> None:
    """Wait for the view's background computations, then until its layout stops moving."""
    qtbot.waitUntil(lambda: not _busy(view), timeout=60_000)
    last, still = None, 0
    for _ in range(100):
        qtbot.wait(30)
        key = _layout_key(view)
        still = still + 1 if key == last else 0
        if still >= 3:
            return
        last = key


def shown_window(window, qtbot, run_dir, size):
    if size is not None:
        window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    assert window.open_run_dir(run_dir), window.last_message
    return window


def tab_problems(window, qtbot, run: str, size: str) -> list[str]:
    views = window.views
    problems = []
    for name in views.tab_names("left") + views.tab_names("right"):
        view = views.show_tab(name)
        views.refresh(force=True)
        settle(qtbot, view)
        problems += [f"{run} run, {size} ({window.width()} x {window.height()}), {name}: {p}"
                     for p in view_problems(view)]
    return problems


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("run", ["field", "exact", "bands", "integral"])
def test_every_label_legend_and_title_fits(window, qtbot, runs, run, size):
    shown_window(window, qtbot, runs[run], SIZES[size])
    if size == "1280x800":
        assert (window.width(), window.height()) == (1280, 800)
    problems = tab_problems(window, qtbot, run, size)
    assert not problems, f"{len(problems)} label problems:\n" + "\n".join(problems)


@pytest.mark.parametrize("size", SIZES)
def test_the_calibration_window_labels_fit(qtbot, tmp_path, size):
    window = CalibrationWindow(calibration_store(tmp_path / "calibration"))     # watching: no process
    qtbot.addWidget(window)
    if SIZES[size] is not None:
        window.resize(*SIZES[size])
    window.show()
    qtbot.waitExposed(window)
    window.view.quantity_box.setCurrentText("power_k03")
    window.view.refresh(force=True)
    settle(qtbot, window)
    problems = [f"calibration window, {size} ({window.width()} x {window.height()}): {p}"
                for p in view_problems(window)]
    assert not problems, f"{len(problems)} label problems:\n" + "\n".join(problems)
