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

Renewal. A process keeps every XLA program it compiles (TensorFlow has no way to drop them),
and each run compiles its own: measured on the 32^3 demo (MCLMC, conditional preconditioner),
the engine process grew by about 200 MiB a run, to 2.8 GiB after 8 runs. So a client renews
an idle engine whose memory has grown by more than ``renew_growth_bytes()`` since it became
ready (``should_renew``): it lets it exit and spawns a fresh one, which loads TensorFlow
while the user looks at the run that just ended.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from dataclasses import dataclass
from pathlib import Path

from core.run import messages as msgs

__all__ = ["EngineProcess", "RENEW_ENV", "renew_growth_bytes"]

#: the environment variable that sets the growth (MiB) past which an idle engine is renewed
RENEW_ENV = "FIELDSCOPE_ENGINE_RENEW_MIB"
_DEFAULT_RENEW_MIB = 1024


def renew_growth_bytes() -> int:
    """How much an engine process may grow after it became ready before it is renewed
    (``FIELDSCOPE_ENGINE_RENEW_MIB``, default 1024 MiB; 0: after every run)."""
    raw = os.environ.get(RENEW_ENV, "").strip()
    try:
        mib = float(raw) if raw else _DEFAULT_RENEW_MIB
    except ValueError:
        mib = _DEFAULT_RENEW_MIB
    return int(max(mib, 0.0) * 2**20)


def process_rss(pid: int | None) -> int | None:
    """The resident memory of process ``pid`` in bytes (Linux's /proc), or None."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{int(pid)}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


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
    ready_rss: int | None = None      # its resident memory when it became ready (``mark_ready``)

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

    def rss(self) -> int | None:
        """Its resident memory now, in bytes (None where unknown)."""
        return process_rss(self.process.pid)

    def mark_ready(self) -> None:
        """Note its memory at the "ready" event (the start of its growth)."""
        self.ready_rss = self.rss()

    def should_renew(self, limit: int | None = None) -> tuple[bool, str]:
        """Whether it grew by more than ``limit`` bytes (default ``renew_growth_bytes()``) since
        it became ready, and a sentence that says so."""
        limit = renew_growth_bytes() if limit is None else limit
        now = self.rss()
        if now is None or self.ready_rss is None or now - self.ready_rss <= limit:
            return False, ""
        return True, (f"the engine process grew from {self.ready_rss / 2**30:.1f} to {now / 2**30:.1f} GiB "
                      "(compiled programs TensorFlow keeps): a fresh one is loading")

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
