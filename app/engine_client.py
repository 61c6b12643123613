"""The GUI's handle on the engine process: pipe messages in, Qt signals out.

``EngineClient`` owns one ``core.run.engine_process.EngineProcess`` (spawned when the window
opens, so TensorFlow loads in the background while the user sets up the run) and one
``QThread`` that reads the pipe. The thread has no Qt event loop (superqt's pattern):
commands go in through a thread-safe queue, which the thread drains between polls
(every 0.1 s), and every engine event comes out as a signal, delivered in the GUI
thread in the order the engine sent it:

    ready()                  the engine imported TensorFlow and waits for a run
    status(str, object)      status name (``core.run.messages.ENGINE_STATUSES``) and the
                             "status" event (``core.run.messages.StatusEvent``)
    chunk(object)            one "chunk" event (``core.run.messages.ChunkEvent``)
    error(str)               a run could not start or failed; the message says why
    done(str)                a run ended with this status
    engine_died(str)         the process is gone (killed, crashed); ``respawn`` starts
                             a new one
    renewing(str)            after a run, an engine grown past its memory budget was let go
                             and a fresh one is loading (``ready`` follows; the sentence
                             says why: ``core.run.engine_process``'s renewal)
    closed()                 the reader thread ended (after ``shutdown`` or a death)

Only this module's thread reads or writes the pipe. ``shutdown`` stops a run after its
current chunk (everything recorded stays in the run store), lets the process exit and
ends the thread; ``wait`` joins it.
"""

from __future__ import annotations

import queue
import time
import weakref

from PySide6.QtCore import QObject, QThread, Signal, Slot

from core.run import messages as msgs
from core.run.engine_process import EngineProcess

__all__ = ["EngineClient", "running_readers"]

_SHUTDOWN = object()
_READERS: "weakref.WeakSet[_Reader]" = weakref.WeakSet()


def running_readers() -> list:
    """Reader threads still running, in this process (tests check none leak)."""
    return [r for r in list(_READERS) if r.isRunning()]


class _Reader(QThread):
    """Spawns the engine, sends queued commands, polls its events (no event loop)."""

    ready = Signal()
    status = Signal(str, object)
    chunk = Signal(object)
    error = Signal(str)
    done = Signal(str)
    died = Signal(str)
    renewing = Signal(str)

    def __init__(self, spawn, stop_timeout: float, parent=None):
        super().__init__(parent)
        self._spawn = spawn
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._stop_timeout = stop_timeout
        self.proc: EngineProcess | None = None
        self.is_ready = False
        self.run_active = False
        self.ended = False          # set before the thread's last signal (died / exit)
        self.ready_seconds: float | None = None

    def command(self, msg) -> None:
        self._commands.put(msg)

    def run(self) -> None:  # the thread
        try:
            self.proc = self._spawn()
        except Exception as exc:   # e.g. no resources to start a process
            self.ended = True
            self.died.emit(f"the engine process could not start: {exc}")
            return
        while True:
            try:
                while True:
                    msg = self._commands.get_nowait()
                    if msg is _SHUTDOWN:
                        self._shutdown()
                        return
                    if msg["cmd"] == msgs.RUN:
                        self.run_active = True
                    self.proc.send(msg)       # a dead pipe shows up as EOF in poll
            except queue.Empty:
                pass
            try:
                event = self.proc.poll(0.1)
            except EOFError as exc:
                self.run_active = False
                self.is_ready = False
                self.ended = True
                self._reap()
                self.died.emit(str(exc))
                return
            if event is not None:
                self._dispatch(event)
                if self.ended:          # a renewal that could not spawn (``died`` said so)
                    return

    def _dispatch(self, event: dict) -> None:
        kind = event["type"]
        if kind == msgs.READY:
            self.is_ready = True
            self.ready_seconds = event["seconds"]
            self.proc.mark_ready()
            self.ready.emit()
        elif kind == msgs.STATUS:
            self.status.emit(event["status"], event)
        elif kind == msgs.CHUNK:
            self.chunk.emit(event)
        elif kind == msgs.ERROR:
            self.error.emit(event["message"])
        elif kind == msgs.DONE:
            self.run_active = False
            self.done.emit(event["status"])
            renew, why = self.proc.should_renew()
            if renew and self._commands.empty():
                self._renew(why)

    def _renew(self, why: str) -> None:
        """Let the idle engine exit and spawn a fresh one (its "ready" follows)."""
        self.is_ready = False
        self.renewing.emit(why)
        self.proc.shutdown(timeout=5.0)
        try:
            self.proc = self._spawn()
        except Exception as exc:   # e.g. no resources to start a process
            self.ended = True
            self.died.emit(f"the engine process could not start again: {exc}")

    def _shutdown(self) -> None:
        proc = self.proc
        self.ended = True
        if not self.is_ready:
            # still importing TensorFlow: nothing to save, and it would not read a command
            # before the import ends
            proc.kill()
            self._reap()
            return
        if self.run_active:
            # stop after the current chunk; keep reading (and reporting) until the run
            # says it is done, so the store and the GUI see the final status
            proc.send(msgs.control_command(msgs.STOP))
            deadline = time.monotonic() + self._stop_timeout
            while self.run_active and time.monotonic() < deadline:
                try:
                    event = proc.poll(0.1)
                except EOFError:
                    self.run_active = False
                    self._reap()
                    return
                if event is not None:
                    self._dispatch(event)
        # Nothing is running now: the store is complete. The process exits by itself
        # (TensorFlow's teardown takes a second or two); after a short grace it is killed.
        proc.shutdown(timeout=1.0)

    def _reap(self) -> None:
        """Collect a dead (or killed) process and close its end of the pipe."""
        try:
            self.proc.process.join(2.0)
            self.proc.conn.close()
        except (OSError, ValueError, AttributeError):
            pass


class EngineClient(QObject):
    """See the module docstring. ``start()`` spawns the engine (in the reader thread)."""

    ready = Signal()
    status = Signal(str, object)
    chunk = Signal(object)
    error = Signal(str)
    done = Signal(str)
    engine_died = Signal(str)
    renewing = Signal(str)
    closed = Signal()

    def __init__(self, parent=None, *, spawn=EngineProcess.spawn, stop_timeout: float = 120.0):
        """``stop_timeout``: how long ``shutdown`` waits for a running chunk to end
        before the process is killed (a killed chunk is lost; earlier ones are kept)."""
        super().__init__(parent)
        self._spawn = spawn
        self._stop_timeout = stop_timeout
        self._reader: _Reader | None = None
        self._old_readers: list[_Reader] = []
        self.died_message = ""

    # -- lifetime ------------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the engine process and start reading it (no-op if already running)."""
        if self.is_running:
            return
        self._retire_reader()
        self.died_message = ""
        reader = _Reader(self._spawn, self._stop_timeout)
        _READERS.add(reader)
        reader.ready.connect(self._on_ready)
        reader.status.connect(self._on_status)
        reader.chunk.connect(self._on_chunk)
        reader.error.connect(self._on_error)
        reader.done.connect(self._on_done)
        reader.died.connect(self._on_died)
        reader.renewing.connect(self.renewing)
        reader.finished.connect(self._on_finished)
        self._reader = reader
        reader.start()

    def respawn(self) -> None:
        """A new engine after the old one died (or was shut down)."""
        if self._reader is not None and self._reader.isRunning():
            self.shutdown()
            self._reader.wait(10_000)
        self.start()

    def shutdown(self) -> None:
        """Stop a run after its chunk, let the engine exit and end the reader (async;
        ``wait`` to join)."""
        if self._reader is not None and self._reader.isRunning():
            self._reader.command(_SHUTDOWN)

    def wait(self, timeout_ms: int | None = None) -> bool:
        """Join the reader thread (it ends after ``shutdown`` or when the engine died)."""
        ok = True
        for reader in [*self._old_readers, self._reader]:
            if reader is not None:
                ok = (reader.wait() if timeout_ms is None else reader.wait(timeout_ms)) and ok
        return ok

    def _retire_reader(self) -> None:
        if self._reader is not None:
            self._old_readers = [r for r in self._old_readers if r.isRunning()]
            if self._reader.isRunning():
                self._old_readers.append(self._reader)
            self._reader = None

    # -- state -----------------------------------------------------------------------------

    @property
    def proc(self) -> EngineProcess | None:
        return self._reader.proc if self._reader is not None else None

    @property
    def engine_pid(self) -> int | None:
        """The engine process's id (None when there is none)."""
        proc = self.proc
        try:
            return proc.process.pid if proc is not None else None
        except AttributeError:
            return None

    @property
    def is_ready(self) -> bool:
        r = self._reader
        return bool(r is not None and r.isRunning() and r.is_ready and not r.ended)

    @property
    def is_running(self) -> bool:
        """Whether the engine is alive (and not shutting down) with its reader thread."""
        r = self._reader
        return bool(r is not None and r.isRunning() and not r.ended)

    @property
    def run_active(self) -> bool:
        return bool(self._reader is not None and self._reader.run_active)

    @property
    def ready_seconds(self) -> float | None:
        return self._reader.ready_seconds if self._reader is not None else None

    # -- commands (thread-safe) ----------------------------------------------------------------

    def start_run(self, config_text: str, base_dir, run_dir, resume: bool = False,
                  num_samples: int | None = None, accept_changed: bool = False) -> bool:
        """Start (or, with ``resume``, continue) a run. False if no engine is ready."""
        if not self.is_ready:
            return False
        self._reader.command(msgs.run_command(config_text, base_dir, run_dir, resume,
                                              num_samples, accept_changed))
        return True

    def pause(self) -> None:
        self._send(msgs.control_command(msgs.PAUSE))

    def resume(self) -> None:
        self._send(msgs.control_command(msgs.RESUME))

    def stop(self) -> None:
        """Stop the run after its current chunk (the engine reports done("stopped"))."""
        self._send(msgs.control_command(msgs.STOP))

    def _send(self, msg: dict) -> None:
        if self._reader is not None and self._reader.isRunning():
            self._reader.command(msg)

    # -- re-emitted in the GUI thread --------------------------------------------------------

    @Slot()
    def _on_ready(self):
        self.ready.emit()

    @Slot(str, object)
    def _on_status(self, status, event):
        self.status.emit(status, event)

    @Slot(object)
    def _on_chunk(self, event):
        self.chunk.emit(event)

    @Slot(str)
    def _on_error(self, message):
        self.error.emit(message)

    @Slot(str)
    def _on_done(self, status):
        self.done.emit(status)

    @Slot(str)
    def _on_died(self, message):
        self.died_message = message
        self.engine_died.emit(message)

    @Slot()
    def _on_finished(self):
        if self.sender() is self._reader or self._reader is None:
            self.closed.emit()
