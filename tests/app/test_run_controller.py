"""RunController's state machine against a fake engine client: no engine process, no
TensorFlow. The real engine drives it in test_gui_run.py and test_gui_watch.py."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.run_controller import PHASE_TEXT, RunController
from app.state.run_state import RunState
from core.run.messages import status_event
from support.runs import fake_run, meta_for


class FakeClient(QObject):
    """The signals and commands of ``app.engine_client.EngineClient``; records commands."""

    ready = Signal()
    status = Signal(str, object)
    chunk = Signal(object)
    error = Signal(str)
    done = Signal(str)
    engine_died = Signal(str)
    renewing = Signal(str)
    closed = Signal()

    def __init__(self):
        super().__init__()
        self.is_running = self.is_ready = True
        self.commands = []
        self.engine_pid = None
        self.ready_seconds = 1.0

    def start_run(self, text, base_dir, run_dir, resume=False, num_samples=None, accept_changed=False):
        self.commands.append(("run", str(run_dir), resume) + (("accept_changed",) if accept_changed else ()))
        return self.is_ready

    def pause(self):
        self.commands.append(("pause",))

    def resume(self):
        self.commands.append(("resume",))

    def stop(self):
        self.commands.append(("stop",))

    def respawn(self):
        self.commands.append(("respawn",))
        self.is_running = True

    def send_status(self, status, **extra):
        self.status.emit(status, status_event(status, **extra))


def make(qtbot):
    client, state = FakeClient(), RunState()
    runs = RunController(state)
    runs.set_client(client)
    phases, statuses = [], []
    runs.phase_text.connect(phases.append)
    runs.changed.connect(lambda: statuses.append(runs.status))
    return runs, client, state, phases, statuses


def test_a_run_from_start_to_finished(qtbot, tmp_path):
    runs, client, state, phases, statuses = make(qtbot)
    assert runs.can_start
    with qtbot.waitSignal(runs.run_started) as started:
        assert runs.launch("text", tmp_path, tmp_path / "run", resume=False, meta=meta_for())
    assert started.args == [str(tmp_path / "run")] and client.commands == [("run", str(tmp_path / "run"), False)]
    assert runs.status == "starting" and not runs.can_start and runs.run_dir == tmp_path / "run"
    client.send_status("loading")
    devices = []
    runs.device.connect(devices.append)
    client.send_status("compiling", device="CPU (2 threads)")
    assert runs.status == "starting" and devices == ["CPU (2 threads)"]
    client.send_status("warmup")
    assert runs.status == "running" and state.status == "running" and state.phase == "warmup"
    events, _ = fake_run()
    for event in events:
        client.chunk.emit(event)
    assert state.n_steps == 100
    with qtbot.waitSignals([runs.run_ended, runs.run_done], order="strict"):
        client.send_status("finished")
        client.done.emit("finished")
    assert runs.status == "idle" and runs.last_status == "finished" and runs.can_start
    assert phases[:4] == ["starting…", PHASE_TEXT["loading"], PHASE_TEXT["compiling"], "warmup"]
    assert phases[-1] == "finished"
    assert statuses[0] == "starting" and statuses[-1] == "idle"


def test_pause_resume_and_stop(qtbot, tmp_path):
    runs, client, state, phases, _ = make(qtbot)
    runs.launch("text", tmp_path, tmp_path / "run", resume=False, meta=meta_for())
    runs.toggle_pause()                       # still starting: nothing to pause
    assert client.commands[-1][0] == "run" and not runs.pause_pending
    client.send_status("warmup")
    runs.toggle_pause()
    assert client.commands[-1] == ("pause",) and runs.pause_pending
    assert phases[-1] == "pausing after the current chunk…"
    client.send_status("paused")
    assert runs.status == "paused" and not runs.pause_pending
    runs.toggle_pause()
    assert client.commands[-1] == ("resume",) and runs.pause_pending
    client.send_status("running")
    assert runs.status == "running" and not runs.pause_pending
    assert not runs.restart_engine()          # a run is going on a ready engine
    runs.stop()
    assert client.commands[-1] == ("stop",) and runs.status == "stopping"
    client.send_status("sampling")            # a chunk still on its way: still stopping
    assert runs.status == "stopping" and phases[-1] == "stopping after the current chunk…"
    client.send_status("stopped")
    assert phases[-1] == "stopped"
    client.done.emit("stopped")
    assert runs.status == "idle" and runs.last_status == "stopped"


def test_an_engine_that_dies_mid_run_fails_the_run(qtbot, tmp_path):
    runs, client, state, _, _ = make(qtbot)
    runs.launch("text", tmp_path, tmp_path / "run", resume=False, meta=meta_for())
    client.send_status("warmup")
    with qtbot.waitSignal(runs.engine_died) as died:
        client.is_running = client.is_ready = False
        client.engine_died.emit("killed")
    assert died.args == ["killed", True]
    assert runs.status == "idle" and runs.last_status == "failed"
    assert state.status == "failed" and state.error == "the engine process ended (killed)"
    assert runs.restart_engine() and client.commands[-1] == ("respawn",)


def test_a_client_that_refuses_the_run(qtbot, tmp_path):
    runs, client, _, _, _ = make(qtbot)
    client.is_ready = False
    assert not runs.can_start
    with qtbot.waitSignal(runs.problem) as problem:
        assert not runs.launch("text", tmp_path, tmp_path / "run", resume=False)
    assert problem.args == ["Cannot start", "The engine is not ready."]
    assert runs.status == "idle"


def test_nothing_to_continue_without_a_checkpoint(qtbot, tmp_path):
    runs, _, _, _, _ = make(qtbot)
    assert runs.resumable_run() is None and not runs.continue_run()
    runs.run_dir = tmp_path
    assert runs.resumable_run() is None


def test_loading_and_compiling_count_their_seconds_and_the_estimate_is_said(qtbot, tmp_path, monkeypatch):
    """Compiling a large grid takes minutes (#32 item 12): the status bar's words count the
    seconds of the loading and compiling phases (each second), the estimate the engine sends
    with "loading" is a status-bar message, and the count stops with the first chunk."""
    import app.run_controller as rc

    runs, client, state, phases, _ = make(qtbot)
    messages = []
    runs.message.connect(messages.append)
    clock = [100.0]
    monkeypatch.setattr(rc.time, "monotonic", lambda: clock[0])
    runs.launch("text", tmp_path, tmp_path / "run", resume=False, meta=meta_for())
    client.send_status("loading", estimate={"bytes": 3 * 2**30, "memory": "memory", "available": 8 * 2**30,
                                            "gradient_seconds": 0.01, "run_seconds": 125.0, "text": ""})
    assert messages == ["estimate: about 3.0 GiB of memory (8.0 GiB free), at least 2.1 min (FFT bound)"]
    assert runs.phase_timer.isActive()
    clock[0] = 103.4
    runs.phase_timer.timeout.emit()
    assert phases[-1] == f"{PHASE_TEXT['loading']} 3 s"
    client.send_status("compiling")
    clock[0] = 150.0
    runs.phase_timer.timeout.emit()
    assert phases[-1] == f"{PHASE_TEXT['compiling']} 47 s"
    client.send_status("warmup")
    assert not runs.phase_timer.isActive() and phases[-1] == "warmup"
    client.send_status("compiling")                 # again (a later stage's programs), then a chunk
    events, _ = fake_run()
    client.chunk.emit(events[0])
    assert not runs.phase_timer.isActive()
