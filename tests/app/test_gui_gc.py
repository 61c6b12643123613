"""Cycles that hold Qt objects are freed in the GUI thread (``app.gui_gc``), not in the
thread that happens to allocate past the collector's threshold (zarr's reader thread, a
view's worker): Qt objects destroyed in another thread leave their timers registered in
the GUI thread, whose next timer event then reaches freed memory."""

from __future__ import annotations

import gc
import threading

from PySide6.QtCore import QTimer

from app.gui_gc import INTERVAL_MS, collect_in_gui_thread


def test_a_cycle_made_garbage_is_freed_in_the_gui_thread_not_in_a_worker(qapp, qtbot):
    assert collect_in_gui_thread() is collect_in_gui_thread()       # installed once
    assert not gc.isenabled()
    freed_in = []

    class Cycle:
        def __init__(self):
            self.me = self
            self.timer = QTimer()

        def __del__(self):
            freed_in.append(threading.current_thread().name)

    Cycle()                                   # garbage now; only a collection frees it

    kept = []

    def allocate():            # containers kept: past generation 0's threshold many times
        kept.extend([i] for i in range(50 * gc.get_threshold()[0]))

    worker = threading.Thread(target=allocate, name="worker")
    worker.start()
    worker.join()
    assert freed_in == []
    qtbot.waitUntil(lambda: bool(freed_in), timeout=20 * INTERVAL_MS)
    assert freed_in == [threading.main_thread().name]


def test_a_window_turns_automatic_collection_off(make_window):
    gc.enable()
    make_window(engine=None)
    assert not gc.isenabled()
