"""An X display for the benchmarks that draw (bench/gui.py, gui_memory.py, volume.py, startup.py).

``start_display(size)`` returns None where $DISPLAY is set (the benchmark draws there), else
starts a virtual X server (Xvfb through pyvirtualdisplay, 24-bit colour) and returns it, for
the caller to ``stop()`` at its end. Import it before Qt: a QApplication needs the display.
"""

from __future__ import annotations

import os

__all__ = ["start_display"]


def start_display(size: tuple[int, int] = (1600, 1000)):
    """None where $DISPLAY is set, else a started pyvirtualdisplay ``Display`` of ``size``."""
    if os.environ.get("DISPLAY"):
        return None
    from pyvirtualdisplay import Display

    display = Display(visible=False, size=size, color_depth=24)
    display.start()
    return display
