"""The child side of the engine process: load TensorFlow, then serve run commands.

Runs only in the process ``core.run.engine_process.EngineProcess`` spawns; the protocol
(commands and events) is described there.
"""

from __future__ import annotations

import os
import threading
import time
import traceback

__all__ = ["serve"]


def serve(conn) -> None:
    """The engine process's main loop (see ``core.run.engine_process`` for the protocol)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    t0 = time.perf_counter()
    try:
        import tensorflow  # noqa: F401  (the slow part: do it before the user clicks Start)
        import tensorflow_probability  # noqa: F401

        from core.config import ConfigError, parse_config
        from core.engine import engine as engine_mod
        from core.store.run_store import RunStoreError
    except Exception as err:  # pragma: no cover - a broken installation
        conn.send({"type": "error", "message": f"the engine could not load TensorFlow: {err}"})
        return
    conn.send({"type": "ready", "seconds": time.perf_counter() - t0})
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
                    pending.append({"cmd": "exit"})
                return
            cmd = msg.get("cmd")
            if cmd == "pause":
                control.pause = True
            elif cmd == "resume":
                control.pause = False
            elif cmd == "stop":
                control.stop = True
                control.pause = False
            else:
                with lock:
                    pending.append(msg)
                if cmd == "exit":
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
        if msg["cmd"] == "exit":
            return
        if msg["cmd"] != "run":
            continue
        control.stop = False
        control.pause = False
        try:
            config = parse_config(msg["config_text"], base_dir=msg["base_dir"])
            engine = engine_mod.Engine(config, msg["config_text"], msg["run_dir"], emit=send, control=control)
            if msg.get("resume"):
                status = engine.resume(num_samples=msg.get("num_samples"))
            else:
                status = engine.start()
            send({"type": "done", "status": status})
        except (ConfigError, RunStoreError, engine_mod.EngineError, ValueError) as err:
            send({"type": "error", "message": str(err)})
            send({"type": "done", "status": "failed"})
        except Exception as err:  # an unexpected failure: report it, keep the process alive
            send({"type": "error", "message": f"{type(err).__name__}: {err}",
                  "traceback": traceback.format_exc()})
            send({"type": "done", "status": "failed"})
