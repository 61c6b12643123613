"""A run's lifetime, from Start to its final status, as the desktop app lives it.

``RunController`` is a ``QObject`` between the engine client (``app.engine_client``)
and the window: it starts a run (or continues a stored one), pauses, resumes and stops
it, follows a run store that another process writes (a timer polls it), checks the
run-directory lock (``core.store.run_lock``) before offering to continue a run, feeds
the engine's events to the ``RunState`` the views draw (``app.state.run_state``), and
keeps the one state machine of a run's lifetime:

    idle --start/continue--> starting --first phase or chunk--> running <--> paused
      ^                                                            |
      +-------------------- done / engine died <------ stopping <--+ (stop)

``status`` is that state; ``pause_pending`` is set between a pause (or resume) command
and the engine's answer. ``last_status`` is how the last run seen ended ("finished",
"stopped", "failed", "interrupted": its writer is gone) or the status of the stored run
shown. The window wires the signals below to its menus, status bar and views and keeps
no run state of its own. Never imports TensorFlow.

Signals (all in the GUI thread):

    engine_ready()          the engine imported TensorFlow and waits for a run
    engine_renewing(str)    after a run, a fresh engine is loading (why: the old one's growth)
    changed()               status, pause_pending, the run directory or the watch changed
    phase_text(str)         what the run is doing now, for the status bar
    message(str)            a status-bar line (a watched store, a views problem)
    problem(str, str)       title and text of a dialog (a run that cannot start or continue)
    run_started(str)        a run was handed to the engine (its run directory)
    chunk(object)           a "chunk" event (``core.run.messages.ChunkEvent``), after
                            ``run_state`` took it
    run_error(str)          the engine says a run could not start or failed
    run_ended(str)          a run is over (done, or its engine died): its final status
    run_done(str)           ... and the engine said so ("done"), after run_ended
    engine_died(str, bool)  the engine process is gone: why, whether a run was going
    engine_closed()         the engine's reader thread ended (after ``shutdown``)
    store_changed()         the run state was (re)read from a store: redraw
    watch_progress(float)   a watched store was polled: seconds since it last grew
"""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from app.state.run_state import read_store_update
from app.views.jobs import LatestJob
from core.run.messages import FINAL_STATUSES, LIVE_STATUSES, PHASES, status_event
from core.store import run_lock
from core.store.checkpoint import CHECKPOINT_NAME
from core.store.run_store import RunReader, RunStoreError

__all__ = ["RunController", "PHASE_TEXT", "WATCH_INTERVAL_MS", "ACTIVE"]

#: how often a run written by another process is polled (reads only the store's
#: attributes unless it grew; the writer is never slowed down: see bench/watch.py)
WATCH_INTERVAL_MS = 1000
#: the status bar's words for each engine status
PHASE_TEXT = {"loading": "loading the data and building the model…",
              "compiling": "compiling the sampler (XLA; the first chunk takes longest)…",
              "warmup": "warmup", "sampling": "sampling", "paused": "paused",
              "running": "running", "finished": "finished", "stopped": "stopped",
              "failed": "failed"}
#: engine statuses whose status-bar words count the seconds (compiling a large grid takes minutes)
TIMED_STATUSES = ("loading", "compiling")
#: controller statuses of a run handed to the engine and not yet stopping
ACTIVE = ("starting", "running", "paused")


class RunController(QObject):
    """See the module docstring. ``run_state``: the views' ``RunState`` (None when the
    views are not available: runs still start, stop and are stored)."""

    engine_ready = Signal()
    engine_renewing = Signal(str)
    changed = Signal()
    phase_text = Signal(str)
    #: where the engine computes ("CPU (2 threads)", "GPU: NVIDIA H200 ..."): the
    #: "compiling" status event's ``device``
    device = Signal(str)
    message = Signal(str)
    problem = Signal(str, str)
    run_started = Signal(str)
    chunk = Signal(object)
    run_error = Signal(str)
    run_ended = Signal(str)
    run_done = Signal(str)
    engine_died = Signal(str, bool)
    engine_closed = Signal()
    store_changed = Signal()
    watch_progress = Signal(float)

    def __init__(self, run_state=None, parent=None):
        super().__init__(parent)
        self.run_state = run_state
        self.client = None
        self.run_dir: Path | None = None
        self.status = "idle"          # idle | starting | running | paused | stopping
        self.pause_pending = False
        self.last_status = ""
        # following a run store that another process writes (File > Open run directory)
        self.watching: Path | None = None
        self.watch_timer = QTimer(self)
        self.watch_timer.setInterval(WATCH_INTERVAL_MS)
        self.watch_timer.timeout.connect(self._watch_tick)
        # the seconds spent loading or compiling, counted in the status bar
        self._timed: tuple[str, float] | None = None     # (status, its start on time.monotonic)
        self.phase_timer = QTimer(self)
        self.phase_timer.setInterval(1000)
        self.phase_timer.timeout.connect(self._tick_phase)
        self._watch_last_change = 0.0
        # each poll reads the store in a worker thread (the layout check lists the chunk
        # files, growing with the run, and zarr's reads queue behind the views' workers')
        self._store_job = LatestJob(self, name="fieldscope-store-watch")
        self._store_job.finished.connect(self._watch_read)

    # -- the engine ----------------------------------------------------------------------------

    def set_client(self, client) -> None:
        """Use ``client`` (an ``EngineClient``; None: set-up only) and start its engine."""
        self.client = client
        if client is None:
            return
        client.ready.connect(self.engine_ready)
        client.status.connect(self._on_status)
        client.chunk.connect(self._on_chunk)
        client.error.connect(self.run_error)
        client.done.connect(self._on_done)
        client.engine_died.connect(self._on_engine_died)
        client.renewing.connect(self._on_renewing)
        client.closed.connect(self.engine_closed)
        if not client.is_running:
            client.start()
        elif client.is_ready:
            QTimer.singleShot(0, self.engine_ready.emit)

    @property
    def engine_ready_now(self) -> bool:
        return self.client is not None and self.client.is_ready

    @property
    def can_start(self) -> bool:
        """A ready engine and no run in progress."""
        return self.engine_ready_now and self.status == "idle"

    def restart_engine(self) -> bool:
        """A new engine process (when the old one died, or no run is going)."""
        if self.client is None or self.status != "idle" and self.client.is_ready:
            return False
        self.client.respawn()
        self.changed.emit()
        return True

    def shutdown(self, timeout_ms: int = 10_000) -> None:
        """Stop watching, stop a run after its chunk and let the engine exit (waits)."""
        self.watch_timer.stop()
        if self.client is not None:
            self.client.shutdown()
            self.client.wait(timeout_ms)

    # -- runs ----------------------------------------------------------------------------------

    def launch(self, text: str, base_dir, run_dir, *, resume: bool, meta: dict | None = None,
               accept_changed: bool = False) -> bool:
        """Hand a run to the engine: a new one (``meta``: ``RunState.reset`` metadata) or,
        with ``resume``, the stored run in ``run_dir`` (``accept_changed``: although an input
        file changed since it began)."""
        self.stop_watching()
        self.run_dir = Path(run_dir)
        if self.run_state is not None:
            try:
                if resume:
                    self.run_state.load_from_store(run_dir)
                elif meta is not None:
                    self.run_state.reset(meta)
            except Exception as exc:    # a views problem must not stop the run
                self.message.emit(f"live views: {exc}")
        if not self.client.start_run(text, base_dir, run_dir, resume=resume, accept_changed=accept_changed):
            self.problem.emit("Cannot start", "The engine is not ready.")
            return False
        self.status = "starting"
        self.phase_text.emit("starting…")
        self.run_started.emit(str(run_dir))
        self.changed.emit()
        return True

    def continue_run(self, accept_changed: bool = False) -> bool:
        """Resume the current run directory with its stored config (as ``fieldscope
        resume`` does; ``accept_changed``: as with ``--accept-changed-data``)."""
        run_dir = self.resumable_run()
        if run_dir is None or not self.can_start:
            return False
        try:
            stored = RunReader(run_dir).stored_config
        except RunStoreError as exc:
            self.problem.emit("Cannot continue", str(exc))
            return False
        return self.launch(stored.text, stored.base_dir, run_dir, resume=True, accept_changed=accept_changed)

    def toggle_pause(self) -> None:
        if self.client is None:
            return
        if self.status == "running":
            self.client.pause()
            self.phase_text.emit("pausing after the current chunk…")
        elif self.status == "paused":
            self.client.resume()
            self.phase_text.emit("resuming…")
        else:
            return
        self.pause_pending = True
        self.changed.emit()

    def stop(self) -> None:
        if self.client is None or self.status not in ACTIVE:
            return
        self.client.stop()
        self.status = "stopping"
        self.phase_text.emit("stopping after the current chunk…")
        self.changed.emit()

    def forget_run(self) -> None:
        """Another config replaced the one whose run was shown: no run is shown any more (Run >
        Continue run has nothing to continue, no status of that run is reported). Only when
        idle: a run in progress is never forgotten."""
        if self.status != "idle":
            return
        self.stop_watching()
        self.run_dir = None
        self.last_status = ""
        self.changed.emit()

    def resumable_run(self) -> Path | None:
        """The current run directory if it can be continued (stopped, paused or
        interrupted, with a checkpoint)."""
        if self.run_dir is None or not (self.run_dir / CHECKPOINT_NAME).exists():
            return None
        try:
            reader = RunReader(self.run_dir)
        except RunStoreError:
            return None
        if reader.status == "finished":
            return None
        writer = run_lock.holder(self.run_dir)
        if writer is not None and writer.alive is not False and not self._own_writer(writer):
            return None      # another process is writing it (e.g. a watched terminal run)
        return self.run_dir

    def _own_writer(self, writer) -> bool:
        """Whether ``writer`` (a lock holder) is this window's engine process."""
        pid = self.client.engine_pid if self.client is not None else None
        return pid is not None and writer.pid == pid and writer.alive

    @staticmethod
    def writer_gone(path) -> bool:
        """Whether the process that wrote ``path`` is known to be gone (its lock is held by
        a dead process on this machine)."""
        writer = run_lock.holder(path)
        return writer is not None and writer.alive is False

    # -- a stored run, and watching one another process writes -------------------------------

    def show_store(self, reader: RunReader) -> None:
        """Show the stored run ``reader`` reads; follow it while its writer appends."""
        path = reader.run_dir
        self.run_dir = Path(path)
        problem = ""
        if self.run_state is not None:
            try:
                self.run_state.load_from_store(path)
                self.store_changed.emit()
            except Exception as exc:     # a damaged store: said, never hidden behind empty views
                problem = f"run {path} ({reader.status}) cannot be shown: {exc}"
        progress = reader.progress
        self.last_status = reader.status
        self.message.emit(problem or (
            f"run {path}: {reader.status}, {progress.get('warmup_draws', 0)} warmup and "
            f"{progress.get('draws', 0)} draws per chain recorded"))
        self.stop_watching()
        if reader.status in LIVE_STATUSES and self.run_state is not None:
            if self.writer_gone(path):
                self._say_interrupted(path)
            else:
                self.start_watching(path)
                self._say_remote_writer(path)
        self.changed.emit()

    def _say_remote_writer(self, path) -> None:
        """A run written on another machine (a cluster node, the store on a shared disk): say
        which, and what to do if that process has ended (it cannot be checked from here)."""
        writer = run_lock.holder(path)
        if writer is not None and writer.alive is None:
            self.message.emit(
                f"run {path}: written by {writer.describe()}; following it. Whether that process still "
                f"runs cannot be checked from here: if it has ended, delete {Path(path) / run_lock.LOCK_NAME}, "
                "then Run > Continue run resumes it")

    def start_watching(self, path) -> None:
        """Follow the run store at ``path`` as its writer (``fieldscope run`` in a terminal,
        maybe on another machine with a shared disk) appends chunks: poll it every
        WATCH_INTERVAL_MS, append what landed, redraw. Stops when the run ends."""
        self.watching = Path(path)
        self._watch_last_change = time.monotonic()
        self.watch_timer.start()
        self.phase_text.emit("watching")
        self.watch_progress.emit(0.0)

    def stop_watching(self) -> None:
        self.watch_timer.stop()
        if self.watching is not None:
            self.watching = None
            self.phase_text.emit(PHASE_TEXT.get(self.last_status, self.last_status))

    def _watch_tick(self) -> None:
        st = self.run_state
        if self.watching is None or st is None:
            self.watch_timer.stop()
            return
        if self._store_job.busy:        # the last poll still reads: this one is skipped
            return
        look = st.store_look()
        if look is not None:
            self._store_job.request((self.watching, look), read_store_update, look)

    def _watch_read(self, key, update, error) -> None:
        """A poll's read of the store is in (``_watch_tick``): take it and redraw."""
        st = self.run_state
        if self.watching is None or st is None or key[0] != self.watching:
            return
        try:
            if error is not None:
                raise error
            changed = st.take_store_update(update)
        except Exception as exc:       # a store deleted or damaged while watched
            self.stop_watching()
            self.message.emit(f"stopped watching {self.run_dir}: {exc}")
            return
        now = time.monotonic()
        if st.status in LIVE_STATUSES and self.writer_gone(self.watching):
            path = self.watching
            self.stop_watching()
            self.store_changed.emit()
            self._say_interrupted(path)
            self.changed.emit()
            return
        if changed:
            self._watch_last_change = now
            self.store_changed.emit()
        self.last_status = st.status
        self.watch_progress.emit(now - self._watch_last_change)
        if st.status not in LIVE_STATUSES:
            path = self.watching
            self.stop_watching()
            self.message.emit(f"run {path}: {st.status}" + (
                f" ({st.error})" if st.error else "") + " (it was written by another process)")
            self.changed.emit()

    def _say_interrupted(self, path) -> None:
        self.last_status = "interrupted"
        self.phase_text.emit("interrupted")
        self.message.emit(f"run {path}: interrupted (the process writing it is gone); "
                          "Run > Continue run resumes it")

    # -- engine events -------------------------------------------------------------------------

    def _on_status(self, status: str, event) -> None:
        if self.run_state is not None:
            try:
                self.run_state.on_status(event)
            except Exception as exc:
                self.message.emit(f"live views: {exc}")
        if status == "paused":
            if self.status != "stopping":
                self.status = "paused"
            self.pause_pending = False
        elif status in (*PHASES, "running") and self.status in ("starting", "paused"):
            self.status = "running"
            self.pause_pending = False
        if event.get("device"):
            self.device.emit(str(event["device"]))
        if event.get("estimate"):
            from core.run.resources import estimate_line

            self.message.emit(estimate_line(event["estimate"]))
        self._time_phase(status)
        if self.status != "stopping" or status in FINAL_STATUSES:
            self.phase_text.emit(PHASE_TEXT.get(status, status))
        self.changed.emit()

    def _time_phase(self, status: str) -> None:
        """Count the seconds of a loading or compiling phase (``phase_text`` each second)."""
        if status not in TIMED_STATUSES:
            self._timed = None
            self.phase_timer.stop()
        elif self._timed is None or self._timed[0] != status:
            self._timed = (status, time.monotonic())
            self.phase_timer.start()

    def _tick_phase(self) -> None:
        if self._timed is None or self.status not in ACTIVE:
            self._timed = None
            self.phase_timer.stop()
            return
        status, since = self._timed
        self.phase_text.emit(f"{PHASE_TEXT[status]} {time.monotonic() - since:.0f} s")

    def _on_chunk(self, event) -> None:
        self._time_phase("")
        if self.run_state is not None:
            try:
                self.run_state.on_chunk(event)
            except Exception as exc:
                self.message.emit(f"live views: {exc}")
        if self.status == "starting":
            self.status = "running"
        self.chunk.emit(event)
        if self.status not in ("stopping", "paused"):
            self.phase_text.emit(str(event.get("phase", "")))
        self.changed.emit()

    def _on_done(self, status: str) -> None:
        self._end(status)
        self.run_done.emit(status)

    def _on_renewing(self, why: str) -> None:
        self.engine_renewing.emit(why)
        self.changed.emit()               # Start waits for the fresh engine's ready

    def _on_engine_died(self, message: str) -> None:
        running = self.status != "idle"
        if running and self.run_state is not None:
            try:
                self.run_state.on_status(status_event(
                    "failed", error=f"the engine process ended ({message})"))
            except Exception:
                pass
        self._end("failed" if running else self.last_status)
        self.engine_died.emit(message, running)

    def _end(self, status: str) -> None:
        self._time_phase("")
        self.status = "idle"
        self.pause_pending = False
        self.last_status = status
        self.run_ended.emit(status)
        self.phase_text.emit(PHASE_TEXT.get(status, status) if status else "")
        self.changed.emit()
