"""The child side of the engine process: load TensorFlow, then serve run commands.

Runs only in the process ``core.run.engine_process.EngineProcess`` spawns; the commands
and events are those of ``core.run.messages``.
"""

from __future__ import annotations

import threading
import time
import traceback

from core.run import messages as msgs
from core.run.tensorflow_env import quiet_tensorflow, start_up_notices_filtered

__all__ = ["serve"]


def serve(conn) -> None:
    """The engine process's main loop (``core.run.engine_process`` describes its life)."""
    quiet_tensorflow()       # before TensorFlow loads (core.run.tensorflow_env says why)
    t0 = time.perf_counter()
    try:
        # the slow part: do it before the user clicks Start (quietly: core.run.tensorflow_env)
        with start_up_notices_filtered():
            import tensorflow  # noqa: F401
            import tensorflow_probability  # noqa: F401

        from core.config import ConfigError, parse_config
        from core.engine import engine as engine_mod
        from core.store.run_store import RunStoreError
    except Exception as err:  # pragma: no cover - a broken installation
        conn.send(msgs.error_event(f"the engine could not load TensorFlow: {err}"))
        return
    conn.send(msgs.ready_event(time.perf_counter() - t0))
    lock = threading.Lock()
    control = engine_mod.Control()
    pending: list[dict] = []

    def listen():
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                control.stop = True
                with lock:
                    pending.append(msgs.control_command(msgs.EXIT))
                return
            cmd = msg.get("cmd")
            if cmd == msgs.PAUSE:
                control.pause = True
            elif cmd == msgs.RESUME:
                control.pause = False
            elif cmd == msgs.STOP:
                control.stop = True
                control.pause = False
            else:
                with lock:
                    pending.append(msg)
                if cmd == msgs.EXIT:
                    control.stop = True
                    return

    threading.Thread(target=listen, daemon=True).start()

    def send(event):
        try:
            conn.send(event)
        except (BrokenPipeError, OSError):
            control.stop = True

    while True:
        with lock:
            msg = pending.pop(0) if pending else None
        if msg is None:
            time.sleep(0.02)
            continue
        if msg["cmd"] == msgs.EXIT:
            return
        if msg["cmd"] != msgs.RUN:
            continue
        control.stop = False
        control.pause = False
        try:
            config = parse_config(msg["config_text"], base_dir=msg["base_dir"])
            engine = engine_mod.Engine(config, msg["config_text"], msg["run_dir"], emit=send, control=control)
            if msg["resume"]:
                status = engine.resume(num_samples=msg["num_samples"],
                                       accept_changed=msg.get("accept_changed", False))
            else:
                status = engine.start()
            send(msgs.done_event(status))
        except (ConfigError, RunStoreError, engine_mod.EngineError, ValueError) as err:
            send(msgs.error_event(str(err)))
            send(msgs.done_event("failed"))
        except Exception as err:  # an unexpected failure: report it, keep the process alive
            send(msgs.error_event(f"{type(err).__name__}: {err}", traceback.format_exc()))
            send(msgs.done_event("failed"))
