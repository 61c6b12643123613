"""The engine in its own spawned OS process, driven through a pipe.

The GUI never imports TensorFlow (it and Mesa's software OpenGL crash when they share a
process, and a TensorFlow kernel abort must not take the GUI down). It starts an engine
process as soon as its window opens; the process imports TensorFlow and TFP in the
background and reports a "ready" event; a "run" command then starts or resumes a run.
This module itself imports no TensorFlow: only the child does (``core.engine.serve``).

The commands (parent -> child) and events (child -> parent) are those of
``core.run.messages``: "ready", the engine's "status" and "chunk" events, "error" for a
run that could not start or failed, and "done" when a run ends. After a run the child
waits for the next command, so one warm process serves several runs.
"""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass

from core.run import messages as msgs

__all__ = ["EngineProcess"]


def _engine_main(conn) -> None:  # runs in the child
    # The only edge from core.run into core.engine (an import-linter exception): the parent,
    # which the GUI uses, never executes it.
    from core.engine.serve import serve

    serve(conn)


@dataclass
class EngineProcess:
    """Handle on a spawned engine process."""

    process: mp.Process
    conn: object

    @classmethod
    def spawn(cls) -> "EngineProcess":
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe(duplex=True)
        process = ctx.Process(target=_engine_main, args=(child,), daemon=True, name="fieldscope-engine")
        process.start()
        child.close()
        return cls(process, parent)

    def send(self, msg: dict) -> bool:
        """Send a command (``core.run.messages``); False when the process is gone."""
        try:
            self.conn.send(msg)
            return True
        except (BrokenPipeError, OSError, EOFError):
            return False

    def run(self, config_text: str, base_dir: str, run_dir: str, resume: bool = False,
            num_samples: int | None = None) -> bool:
        return self.send(msgs.run_command(config_text, base_dir, run_dir, resume, num_samples))

    def poll(self, timeout: float = 0.0):
        """The next event, or None if none arrived within ``timeout`` seconds.

        Raises EOFError when the process is gone (killed, crashed) and nothing is left to read.
        """
        try:
            if self.conn.poll(timeout):
                return self.conn.recv()
        except (EOFError, OSError):
            raise EOFError("the engine process ended") from None
        if not self.process.is_alive():
            # drain whatever it sent before it died
            try:
                if self.conn.poll(0):
                    return self.conn.recv()
            except (EOFError, OSError):
                pass
            raise EOFError(f"the engine process ended (exit code {self.process.exitcode})")
        return None

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Ask the process to stop after its chunk and exit; kill it if it does not."""
        self.send(msgs.control_command(msgs.STOP))
        self.send(msgs.control_command(msgs.EXIT))
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout)
        try:
            self.conn.close()
        except OSError:
            pass

    def kill(self) -> None:
        self.process.kill()
        self.process.join(5)
