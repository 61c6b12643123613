"""A view as a figure for a paper: its plots alone, without the buttons, boxes and labels of the
window around them, as PNG at a chosen resolution, SVG or PDF (File > Export > a view as image).

A view's figure is its plot widgets (``figure_parts``: every visible pyqtgraph ``GraphicsView``
in it: plots, graphics layouts, colour bars) placed as they are on screen, cropped to the box that
holds them. Each is painted through ``QGraphicsView.render`` onto one painter: a QImage scaled to
the DPI asked for (PNG: its resolution written into the file), a QSvgGenerator or a QPdfWriter
(SVG, PDF: vector paths and text; the 3D view, a rendered image, is embedded as one). Screen
geometry counts 96 dots per inch, so a figure 600 px wide on screen is 6.25 in wide at any DPI.
"""

from __future__ import annotations

from pathlib import Path

from pyqtgraph.Qt import QtCore, QtGui, QtWidgets

__all__ = ["FIGURE_FORMATS", "DEFAULT_DPI", "SCREEN_DPI", "export_figure", "figure_parts"]

#: suffix -> the file dialog's filter
FIGURE_FORMATS = {".png": "PNG image (*.png)", ".svg": "SVG vector image (*.svg)", ".pdf": "PDF (*.pdf)"}
DEFAULT_DPI = 300
SCREEN_DPI = 96           # the geometry's dots per inch (Qt's logical DPI on a standard display)
MIN_DPI, MAX_DPI = 50, 1200
_MAX_PIXELS = 400_000_000       # a PNG larger than this (20000 x 20000) is refused, not attempted


def figure_parts(view: QtWidgets.QWidget) -> list[tuple[QtWidgets.QWidget | QtGui.QImage, QtCore.QRect]]:
    """(part, its rectangle in ``view``'s coordinates) of every plot widget shown in ``view``."""
    import pyqtgraph as pg

    parts = []
    for widget in view.findChildren(pg.GraphicsView):
        if widget.isVisibleTo(view) and widget.width() > 0 and widget.height() > 0:
            top_left = widget.mapTo(view, QtCore.QPoint(0, 0))
            parts.append((widget, QtCore.QRect(top_left, widget.size())))
    return parts


def _background(parts) -> QtGui.QColor:
    """The plots' own background (the gaps between them take it), white when they have none."""
    for part, _rect in parts:
        if not isinstance(part, QtGui.QImage):
            colour = part.backgroundBrush().color()
            if colour.alpha() > 0:
                return colour
    return QtGui.QColor("white")


def _paint(painter: QtGui.QPainter, parts, origin: QtCore.QPoint) -> None:
    for part, rect in parts:
        target = QtCore.QRectF(rect.translated(-origin))
        if isinstance(part, QtGui.QImage):
            painter.drawImage(target, part)
        else:
            part.render(painter, target, part.viewport().rect())


def export_figure(parts, path, dpi: int = DEFAULT_DPI, title: str = "") -> str:
    """Write ``parts`` (``figure_parts``) to ``path`` as PNG at ``dpi``, SVG or PDF, by its suffix;
    returns the path. Raises ValueError for no parts, another suffix or a DPI out of range, and
    OSError naming the file when it cannot be written."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FIGURE_FORMATS:
        raise ValueError(f"{path.name}: export as .png, .svg or .pdf (not {suffix or 'no suffix'})")
    if not parts:
        raise ValueError("it shows no plot now (only its message)")
    if not MIN_DPI <= dpi <= MAX_DPI:
        raise ValueError(f"resolution {dpi} dpi: choose {MIN_DPI} to {MAX_DPI}")
    if not path.parent.is_dir():
        raise OSError(f"{path}: its folder does not exist")
    box = parts[0][1]
    for _part, rect in parts[1:]:
        box = box.united(rect)
    if suffix == ".png":
        _write_png(parts, box, path, dpi)
    else:
        device = _svg(path, box, title) if suffix == ".svg" else _pdf(path, box, title)
        painter = QtGui.QPainter()
        if not painter.begin(device):
            raise OSError(f"{path}: could not write the {suffix[1:].upper()} file")
        if suffix == ".pdf":      # the page in device units: fit the figure to it
            painter.scale(device.width() / box.width(), device.height() / box.height())
        _paint(painter, parts, box.topLeft())
        painter.end()
    if not path.exists() or path.stat().st_size == 0:
        raise OSError(f"{path}: could not write the {suffix[1:].upper()} file")
    return str(path)


def _write_png(parts, box: QtCore.QRect, path: Path, dpi: int) -> None:
    scale = dpi / SCREEN_DPI
    w, h = max(1, round(box.width() * scale)), max(1, round(box.height() * scale))
    if w * h > _MAX_PIXELS:
        raise ValueError(f"{w} x {h} pixels at {dpi} dpi is too large an image; choose a lower resolution")
    image = QtGui.QImage(w, h, QtGui.QImage.Format.Format_ARGB32)
    image.fill(_background(parts))
    # painted at the screen's DPI (text sized in points would otherwise grow by the DPI as
    # well as by the scale), then labelled with the DPI asked for
    _set_dpi(image, SCREEN_DPI)
    painter = QtGui.QPainter(image)
    painter.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing)
    painter.scale(scale, scale)
    _paint(painter, parts, box.topLeft())
    painter.end()
    _set_dpi(image, dpi)
    if not image.save(str(path), "PNG"):
        raise OSError(f"{path}: could not write the PNG image")


def _set_dpi(image: QtGui.QImage, dpi: float) -> None:
    dots_per_metre = round(dpi / 0.0254)
    image.setDotsPerMeterX(dots_per_metre)
    image.setDotsPerMeterY(dots_per_metre)


def _svg(path: Path, box: QtCore.QRect, title: str):
    from PySide6.QtSvg import QSvgGenerator

    device = QSvgGenerator()
    device.setFileName(str(path))
    device.setSize(box.size())
    device.setViewBox(QtCore.QRect(0, 0, box.width(), box.height()))
    device.setResolution(SCREEN_DPI)
    device.setTitle(title or path.stem)
    device.setDescription("Fieldscope")
    return device


def _pdf(path: Path, box: QtCore.QRect, title: str):
    device = QtGui.QPdfWriter(str(path))
    device.setResolution(SCREEN_DPI)
    device.setPageMargins(QtCore.QMarginsF(0, 0, 0, 0))
    points = QtCore.QSizeF(box.width() * 72 / SCREEN_DPI, box.height() * 72 / SCREEN_DPI)
    device.setPageSize(QtGui.QPageSize(points, QtGui.QPageSize.Unit.Point))
    device.setTitle(title or path.stem)
    device.setCreator("Fieldscope")
    return device
