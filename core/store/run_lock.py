"""Who is writing a run directory: ``RUNDIR/writer.lock``.

Only one process may append to a run store. The engine takes the lock before it creates
or resumes a store and releases it when the run ends (finished, stopped or failed); a
process killed with -9 leaves it behind, and the next writer on the same host sees that
its process is gone and takes it over. A lock held by another host cannot be checked
from here: it is respected, and the message says which file to delete if that process is
known to be gone (a shared disk between machines).

The lock file is JSON ``{"host", "pid", "started"}``, created with O_EXCL so that two
writers starting at once cannot both succeed. Standard library only (the GUI reads it).
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

LOCK_NAME = "writer.lock"

__all__ = ["LOCK_NAME", "LockHeld", "Holder", "holder", "acquire", "release"]


class LockHeld(RuntimeError):
    """Another live process writes this run directory."""


@dataclass
class Holder:
    host: str
    pid: int
    started: str
    alive: bool | None       # True / False on this host; None: another host, unknown

    def describe(self) -> str:
        where = "this machine" if self.host == socket.gethostname() else f"host {self.host}"
        return f"process {self.pid} on {where} (since {self.started})"


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True            # exists, owned by someone else
    except OSError:
        return False
    # a zombie (exited, not yet reaped by its parent) writes nothing any more
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def holder(run_dir) -> Holder | None:
    """The process holding the lock of ``run_dir``, or None when nobody does (no lock
    file, or an unreadable one: a writer killed while writing the lock)."""
    path = Path(run_dir) / LOCK_NAME
    try:
        info = json.loads(path.read_text())
        host, pid, started = str(info["host"]), int(info["pid"]), str(info.get("started", "?"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    alive = _pid_alive(pid) if host == socket.gethostname() else None
    return Holder(host, pid, started, alive)


def acquire(run_dir) -> Path:
    """Take the writer lock of ``run_dir`` (created if needed) for this process.

    Raises ``LockHeld`` naming the holder when a live process (or one on another host)
    holds it; a lock left by a dead process on this host is taken over. Returns the path
    of the lock file. Re-acquiring a lock this process holds is allowed.
    """
    run_dir = Path(run_dir)
    path = run_dir / LOCK_NAME
    run_dir.mkdir(parents=True, exist_ok=True)
    me = {"host": socket.gethostname(), "pid": os.getpid(),
          "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    for _attempt in range(3):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            current = holder(run_dir)
            if current is not None and current.host == me["host"] and current.pid == me["pid"]:
                return path
            if current is not None and current.alive is not False:
                hint = "" if current.alive else (
                    f"; if that process is gone, delete {path} and try again")
                raise LockHeld(f"{run_dir}: another {current.describe()} is writing this run"
                               f"{hint}") from None
            try:
                path.unlink()          # left by a dead writer (or unreadable): take it over
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, "w") as fh:
            json.dump(me, fh)
        return path
    raise LockHeld(f"{run_dir}: could not take the writer lock {path} (another writer is "
                   "starting at the same moment)")


def release(run_dir) -> None:
    """Release the lock if this process holds it (a no-op otherwise)."""
    path = Path(run_dir) / LOCK_NAME
    current = holder(run_dir)
    if current is None or (current.host == socket.gethostname() and current.pid == os.getpid()):
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as err:
            if err.errno != errno.ENOENT:
                raise
