"""Render resources/fieldscope.svg into the PNG icon sizes a desktop asks for.

    python resources/render_icons.py        # writes resources/fieldscope-<size>.png

The PNGs are committed (``fieldscope install-desktop`` copies them into the icon theme);
run this again after changing the SVG. ``tests/app/test_desktop.py`` renders one size the
same way and compares it with the committed file, pixel by pixel.

Qt's SVG renderer (QtSvg, part of PySide6-Essentials) draws each size from the vector
image, antialiased, on a transparent background.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["SIZES", "SVG_PATH", "png_path", "render", "main"]

#: the hicolor sizes installed (``<size>x<size>/apps/fieldscope.png``)
SIZES = (16, 32, 48, 64, 128, 256)
SVG_PATH = Path(__file__).resolve().parent / "fieldscope.svg"


def png_path(size: int) -> Path:
    """The committed PNG of ``size`` pixels."""
    return SVG_PATH.with_name(f"fieldscope-{size}.png")


def render(size: int, svg: Path = SVG_PATH):
    """``svg`` drawn at ``size`` x ``size`` pixels: a QImage (ARGB32, transparent outside)."""
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    if QGuiApplication.instance() is None:      # fonts and painting need one (offscreen is enough)
        raise RuntimeError("render() needs a QGuiApplication")
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"{svg}: not an SVG image Qt can read")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(0)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    return image.convertToFormat(QImage.Format.Format_ARGB32)


def main() -> int:
    import os

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 (kept alive)
    for size in SIZES:
        path = png_path(size)
        if not render(size).save(str(path), "PNG"):
            print(f"render_icons: could not write {path}", file=sys.stderr)
            return 1
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
