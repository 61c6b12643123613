"""Python's cyclic garbage collector runs in the GUI thread only, on a timer.

The collector runs in whichever thread allocates past its threshold. In the window that
is often not the GUI thread: zarr's own asyncio thread reading a run's chunks, or a view's
worker (``app.views.jobs``). A cycle it collects there may hold Qt objects the GUI thread
owns (a pyqtgraph item, a QTimer a closed view kept): Qt then destroys them in the wrong
thread, cannot stop their timers from there ("QObject::~QObject: Timers cannot be stopped
from another thread"), and the GUI thread's next timer event goes to freed memory (a
segmentation fault in ``QApplication::notify``; seen between window tests, where closed
windows leave such cycles, as the tests' intermittent crash). pyqtgraph's
``GarbageCollector`` is the same remedy; this one is installed once per process and stays
in the application object.

``collect_in_gui_thread()`` turns automatic collection off and collects generation by
generation on a timer of the QApplication, in the GUI thread, with the thresholds the
collector had. Reference counting still frees everything outside cycles at once.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QObject, QTimer

__all__ = ["INTERVAL_MS", "collect_in_gui_thread"]

#: how often the GUI thread collects (when enough objects were allocated since the last time)
INTERVAL_MS = 250


class _Collector(QObject):
    def __init__(self, app):
        super().__init__(app)
        self.setObjectName("fieldscope-gc")
        self.thresholds = gc.get_threshold()
        self.timer = QTimer(self)
        self.timer.setInterval(INTERVAL_MS)
        self.timer.timeout.connect(self.collect)
        gc.disable()
        self.timer.start()

    def collect(self) -> None:
        """Collect the generations whose counts passed their thresholds (as the automatic
        collector would have done, later and in this thread)."""
        counts = gc.get_count()
        for generation in range(3):
            if counts[generation] <= self.thresholds[generation]:
                break
            gc.collect(generation)


def collect_in_gui_thread() -> QObject:
    """Install the collector on the running QApplication (once; later calls return it).

    Call it from the GUI thread after the QApplication exists; the main window does."""
    app = QCoreApplication.instance()
    if app is None:
        raise RuntimeError("collect_in_gui_thread needs a QApplication")
    existing = app.findChild(_Collector, "fieldscope-gc")
    if existing is not None:
        gc.disable()          # off again, should something have turned it back on
        return existing
    return _Collector(app)
