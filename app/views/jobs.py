"""Work off the GUI thread for the views: two runners with different contracts.

Both run plain Python functions on daemon ``threading.Thread`` s (a computation never
delays the application's exit) and hand the results to the GUI thread with ``gui_call``,
which touches no Qt object in the worker: a queue and a byte written to a pipe whose
``QSocketNotifier`` (in the GUI thread) runs the calls there. A worker that emitted a Qt
signal itself could deadlock with the GUI thread deleting the receiving object (Qt locks
the object's connection mutex and then needs the GIL to drop its Python slots, while the
worker holds the GIL and waits for that mutex). A ``LatestJob`` keeps one worker thread
for its stream of requests (it ends after ``IDLE_EXIT_S`` without one, or at ``close``)
instead of a new thread per request: glibc gives each new thread that finds no free
malloc arena one of its own, and a view that asks again every second through a long run
would otherwise spread its buffers over many of them. The worker holds no Qt state and
touches no widget; results come out as signals emitted in the GUI thread. Neither decides whether a result is stale: the view that
asked tags each request (a key, or the job object itself) and drops results that no
longer match what it shows.

``LatestJob``
    Single flight, latest wins, not cancellable. One QObject per view; ``request(key, fn,
    *args)`` runs ``fn(*args)`` when nothing runs, or else replaces the one request that
    waits, so a burst of requests while a computation runs costs one more computation,
    with the newest arguments. Every request ends in ``finished(key, result, error)``
    except those replaced while waiting. Use it for a recomputation the view asks for
    again and again as a run moves on (power spectra, the summary table, the volume
    texture).

``CancellableJob`` (with ``WorkerRelay`` and ``Abandoned``)
    One object per computation, which the view keeps to identify its results and to
    cancel. ``fn(report)`` may deliver partial results with ``report(partial)`` and stops
    at its next ``report`` once cancelled; the outcome arrives as the relay's
    ``progress`` / ``finished`` / ``failed`` signals, with errors already turned into a
    one-line message. Use it for a long computation started once per run that should
    stop when the run is no longer shown (the exact posterior, the discretisation report,
    the predictive band).
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import traceback
from typing import Callable

import shiboken6
from pyqtgraph.Qt import QtCore

__all__ = ["Abandoned", "CancellableJob", "LatestJob", "WorkerRelay", "IDLE_EXIT_S", "gui_call"]

#: seconds a LatestJob's worker thread waits for the next request before it ends
IDLE_EXIT_S = 30.0


# --------------------------------------------------------------------------- to the GUI thread


class _GuiCalls:
    """Calls from any thread, run in the GUI thread in the order they came: a queue, and a
    pipe whose read end a ``QSocketNotifier`` of the GUI thread watches (the worker only
    writes a byte: no Qt call, no Qt lock)."""

    def __init__(self):
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        app = QtCore.QCoreApplication.instance()
        self.notifier = QtCore.QSocketNotifier(self._read, QtCore.QSocketNotifier.Type.Read, app)
        self.notifier.activated.connect(self._run)

    @property
    def alive(self) -> bool:
        return shiboken6.isValid(self.notifier)

    def put(self, fn, *args) -> None:
        self._calls.put((fn, args))
        try:
            os.write(self._write, b"\0")
        except BlockingIOError:          # the pipe is full: a wake-up is pending anyway
            pass

    def _run(self, *_):
        try:
            while os.read(self._read, 4096):    # the wake-ups first, then every call queued
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                fn, args = self._calls.get_nowait()
            except queue.Empty:
                return
            try:
                fn(*args)
            except Exception:            # noqa: BLE001 - one receiver's bug must not drop the others' results
                traceback.print_exc(file=sys.stderr)


_GUI_CALLS: _GuiCalls | None = None
_GUI_CALLS_LOCK = threading.Lock()


def _gui_calls() -> _GuiCalls:
    """The process's ``_GuiCalls`` (made in the GUI thread: the first job is made there)."""
    global _GUI_CALLS
    with _GUI_CALLS_LOCK:
        if _GUI_CALLS is None or not _GUI_CALLS.alive:
            _GUI_CALLS = _GuiCalls()
        return _GUI_CALLS


def _empty(box: list) -> None:
    """In the GUI thread: drop what ``box`` holds."""
    box.clear()


def _in_worker(box: list, method: str) -> None:
    """A worker thread's body: ``box[0].<method>()``, then ``box`` handed to the GUI thread to
    empty. The box is the thread's only reference to the job, so the job (and the views and Qt
    objects its function and arguments may hold) is never released in the worker: a Qt object
    destroyed there deadlocked with the GUI thread building widgets (Qt's lock against the
    GIL; a window test hung in MainWindow's construction while the previous test's worker
    ended, 2026-12-05)."""
    try:
        getattr(box[0], method)()
    finally:
        gui_call(_empty, box)


def gui_call(fn, *args) -> None:
    """Run ``fn(*args)`` in the GUI thread, soon (from any thread; touches no Qt object here).

    The calls run in the order they were made; an exception is printed to stderr."""
    calls = _GUI_CALLS
    if calls is None:
        raise RuntimeError("gui_call before any job was made in the GUI thread")
    calls.put(fn, *args)


# --------------------------------------------------------------------------- latest wins


class LatestJob(QtCore.QObject):
    """Runs one function at a time on a worker thread; only the newest waiting request is kept.

    ``request(key, fn, *args)`` starts ``fn(*args)`` on the job's worker thread (a daemon
    named ``name``, started on the first request and ended after ``IDLE_EXIT_S`` idle
    seconds or by ``close``) when nothing runs; while a computation runs it stores the request as the
    one that waits, replacing (and so dropping) any request that waited before. When a
    computation ends, the waiting request (if any) starts, then
    ``finished(key, result, error)`` is emitted in the thread that owns this object (the
    GUI thread): ``key`` is the request's key, unchanged; ``result`` is what ``fn``
    returned (None when it raised); ``error`` is the ``Exception`` it raised, or None.
    Nothing is cancelled once started: a running computation always runs to its end.

    ``cancel_pending()`` drops the waiting request. ``close()`` drops it and refuses
    further requests; the running computation finishes and its result is dropped (no
    ``finished``). Connect the owner's ``destroyed`` to ``close``. If this object is
    deleted while a computation runs, the result is dropped silently.

    ``busy``: whether a computation runs or waits. Thread-safe; ``request``,
    ``cancel_pending`` and ``close`` are meant for the owning (GUI) thread.
    """

    #: (key, result, error) of a finished computation, in the owning thread
    finished = QtCore.Signal(object, object, object)

    def __init__(self, parent=None, *, name: str = "fieldscope-view-worker"):
        super().__init__(parent)
        self.name = name
        self._lock = threading.Lock()
        self._running = False
        self._pending = None
        self._closed = False
        self._task = None               # the request handed to the worker thread, not yet taken
        self._thread: threading.Thread | None = None
        self._wake = threading.Condition(self._lock)
        _gui_calls()                    # made here, in the GUI thread, before a worker needs it

    @property
    def busy(self) -> bool:
        """Whether a computation runs or waits."""
        with self._lock:
            return self._running or self._pending is not None

    def request(self, key, fn, *args) -> None:
        """Run ``fn(*args)`` now, or as the one waiting request once the running one ends."""
        with self._lock:
            if self._closed:
                return
            if self._running:
                self._pending = (key, fn, args)
                return
            self._running = True
        self._start(key, fn, args)

    def cancel_pending(self) -> None:
        """Drop the waiting request (the running computation goes on and is delivered)."""
        with self._lock:
            self._pending = None

    def close(self) -> None:
        """No more requests; a running computation finishes and is dropped."""
        with self._lock:
            self._closed = True
            self._pending = None
            self._wake.notify_all()        # an idle worker thread ends now

    @property
    def thread(self) -> threading.Thread | None:
        """The worker thread while it lives (None before the first request and after it ended)."""
        with self._lock:
            return self._thread

    def _start(self, key, fn, args) -> None:
        with self._lock:
            self._task = (key, fn, args)
            new = self._thread is None
            if new:
                self._thread = threading.Thread(target=_in_worker, args=([self], "_loop"), daemon=True,
                                                name=self.name)
            else:
                self._wake.notify()
            thread = self._thread
        if new:
            thread.start()

    def _loop(self) -> None:
        """The worker thread: take each request handed over, run it, deliver it; end when
        closed or after IDLE_EXIT_S seconds without work."""
        while True:
            with self._lock:
                while self._task is None and not self._closed:
                    if not self._wake.wait(IDLE_EXIT_S) and self._task is None:
                        break
                task, self._task = self._task, None
                if task is None:
                    self._thread = None
                    return
            box = [task]                   # the arguments die in the GUI thread (``_in_worker``)
            del task
            self._work(*box[0])
            gui_call(_empty, box)
            del box

    def _work(self, key, fn, args) -> None:
        """Run one request and hand its outcome to the GUI thread (``_on_delivered``)."""
        try:
            result, error = fn(*args), None
        except Exception as err:           # reported through ``finished``, never lost
            result, error = None, err
        gui_call(self._deliver, key, result, error)

    def _deliver(self, key, result, error) -> None:
        """In the GUI thread: the outcome, unless this object was deleted meanwhile (then
        its worker ends when idle)."""
        if shiboken6.isValid(self):
            self._on_delivered(key, result, error)

    def _on_delivered(self, key, result, error) -> None:
        with self._lock:
            nxt, self._pending = self._pending, None
            self._running = nxt is not None and not self._closed
            closed = self._closed
        if nxt is not None and not closed:
            self._start(*nxt)
        if not closed:
            self.finished.emit(key, result, error)


# --------------------------------------------------------------------------- cancellable


class WorkerRelay(QtCore.QObject):
    """Carries ``CancellableJob`` results to the GUI thread (queued signal delivery).

    Create it in the GUI thread, parented to the view; one relay may serve many jobs in
    turn (each signal's first argument is the job, so the view can drop results of a job
    it no longer waits for). When the relay is destroyed, every job bound to it is
    cancelled.
    """

    progress = QtCore.Signal(object, object)   # (job, partial result)
    finished = QtCore.Signal(object, object)   # (job, result)
    failed = QtCore.Signal(object, str)        # (job, message)


class Abandoned(Exception):
    """Raised inside a ``CancellableJob``'s ``report`` once the job was cancelled: it stops the work."""


class CancellableJob:
    """``fn(report)`` on a daemon thread, cancellable, with partial results; signals via ``relay``.

    ``CancellableJob(fn, relay, name)`` makes the thread (named ``name``); ``start()``
    starts it and returns the job. ``fn`` returns the final result; it may call
    ``report(partial)`` to deliver partial results (``relay.progress(job, partial)``).
    The end is exactly one of ``relay.finished(job, result)``, ``relay.failed(job,
    message)`` with a one-line message (ValueError and OSError as their text, MemoryError
    as "not enough memory", anything else prefixed with its type name), or nothing when
    the job was cancelled.

    ``cancel()`` (any thread) suppresses every later signal, and the next ``report``
    raises ``Abandoned`` so the work stops there (a function that never reports runs to
    its end, unheard). Destroying the relay cancels the job. ``cancelled`` is the
    ``threading.Event`` behind it, ``thread`` the worker thread.
    """

    def __init__(self, fn: Callable, relay: WorkerRelay, name: str = "fieldscope-worker"):
        self.fn = fn
        self.relay = relay
        self.cancelled = threading.Event()
        self.thread = threading.Thread(target=_in_worker, args=([self], "_run"), name=name, daemon=True)
        # the relay goes with its view: then nobody wants the result
        relay.destroyed.connect(self.cancelled.set)
        _gui_calls()                    # made here, in the GUI thread, before the worker needs it

    def start(self) -> "CancellableJob":
        """Start the worker thread; returns this job."""
        self.thread.start()
        return self

    def cancel(self) -> None:
        """No more signals from this job; its next ``report`` raises ``Abandoned``."""
        self.cancelled.set()

    def _emit(self, signal: str, *args) -> None:
        """From the worker: the relay's ``signal`` (self, *args), emitted in the GUI thread."""
        if not self.cancelled.is_set():
            gui_call(self._deliver, signal, args)

    def _deliver(self, signal: str, args) -> None:
        if self.cancelled.is_set():
            return
        if not shiboken6.isValid(self.relay):      # the view (and its relay) is gone
            self.cancelled.set()
            return
        getattr(self.relay, signal).emit(self, *args)

    def report(self, partial) -> None:
        """Deliver a partial result (``relay.progress``); raises ``Abandoned`` once cancelled."""
        if self.cancelled.is_set():
            raise Abandoned
        self._emit("progress", partial)

    def _run(self) -> None:
        try:
            result = self.fn(self.report)
        except Abandoned:
            return
        except (ValueError, OSError) as exc:
            self._emit("failed", str(exc) or type(exc).__name__)
        except MemoryError:
            self._emit("failed", "not enough memory")
        except Exception as exc:  # noqa: BLE001 - a worker must report, never die silently
            self._emit("failed", f"{type(exc).__name__}: {exc}")
        else:
            self._emit("finished", result)
