"""Who is writing a run directory: ``RUNDIR/writer.lock``.

Only one process may append to a run store. The engine takes the lock before it creates
or resumes a store, checks that it still holds it (``verify``) before every chunk and
checkpoint it writes, and releases it when the run ends (finished, stopped or failed). A
process killed with -9 leaves it behind, and the next writer on the same host sees that
its process is gone and takes it over. A lock held by another host cannot be checked
from here: it is respected, and the message says which file to delete if that process is
known to be gone (a shared disk between machines).

The lock file is JSON ``{"host", "pid", "started", "token"}``; ``token`` is a random
nonce drawn by ``acquire``, so the holder recognises its own lock (and only its own: a
later process that got the same pid, a lock deleted and re-created by another writer).

Race-free by construction (hard links, no O_EXCL-then-write window):

* Taking a free lock: the holder's JSON is written whole to a private temporary file
  ``.writer.lock.<token>``, which is then hard-linked as ``writer.lock``. ``link`` fails
  when the name exists, so of writers starting at once exactly one succeeds, and no
  reader ever sees a half-written lock.
* Taking over a dead writer's (or an unreadable) lock: the taker hard-links the dead lock
  as ``writer.lock.takeover-<its inode>``. Only one process can create that name; the
  one that does checks that the claim is still the very file it judged dead (same inode,
  same bytes: its token), then renames its own temporary file over ``writer.lock``
  (atomic) and removes the claim. Everyone else sees a live lock and is refused. A taker
  killed between claim and rename leaves the claim behind: the next writer is refused
  with a message naming both files to delete.
* On a file system without hard links a free lock is taken with O_EXCL, and a dead
  writer's lock is not taken over automatically (the message names the file to delete).

``verify`` raises ``LockLost`` (a ``LockHeld`` and a ``RunStoreError``) when the lock file
is gone or belongs to another holder: the engine then stops without writing anything
more, so a second writer let in by a deleted lock never has its chunks overwritten.

File modes. Every file Fieldscope writes in a run directory (the Zarr store, the
checkpoint, this lock) is created with mode 0666 (directories 0777) less the user's umask,
like any file the user's programs write: 0644 with the usual umask 022, private (0600)
with umask 077. To keep runs private, set a umask of 077.
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from core.io.regular_file import NotRegularFile, open_regular
from core.store.run_store import RunStoreError

LOCK_NAME = "writer.lock"
#: + the inode number of the dead lock being taken over (see the module docstring)
TAKEOVER_PREFIX = LOCK_NAME + ".takeover-"

__all__ = ["LOCK_NAME", "TAKEOVER_PREFIX", "LockHeld", "LockLost", "Holder", "Lock", "holder",
           "acquire", "verify", "release"]

# link(2) refused because the file system has no hard links (FAT, some network shares)
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK}
_ATTEMPTS = 200                 # ~2 s of retries while another process is mid-takeover


class LockHeld(RuntimeError):
    """Another live process writes this run directory."""


class LockLost(LockHeld, RunStoreError):
    """This process's lock on a run directory is gone or another writer's: it must stop
    writing (the run store's other writer would be overwritten)."""


@dataclass
class Holder:
    host: str
    pid: int
    started: str
    alive: bool | None       # True / False on this host; None: another host, unknown
    token: str = ""          # the holder's nonce ("" in a lock written before tokens)

    def describe(self) -> str:
        where = "this machine" if self.host == socket.gethostname() else f"host {self.host}"
        return f"process {self.pid} on {where} (since {self.started})"


@dataclass(frozen=True)
class Lock:
    """The writer lock this process holds on ``run_dir`` (what ``acquire`` returns)."""

    run_dir: Path
    path: Path
    token: str
    pid: int

    def verify(self) -> None:
        """Raise ``LockLost`` unless ``path`` still holds this lock (its token)."""
        try:
            seen = _read(self.path)
        except OSError as err:
            raise LockLost(f"{self.path}: cannot read the writer lock ({err.strerror or err}); "
                           "stopped without writing more to the run") from None
        if seen is None:
            raise LockLost(f"{self.path}: the writer lock was deleted while this process "
                           "wrote the run; it stopped without writing more, so that another "
                           "writer's work is not overwritten") from None
        info, _ident, _raw = seen
        if info is None or info.get("token") != self.token or info.get("pid") != self.pid:
            other = _holder_of(info)
            who = f"another {other.describe()}" if other is not None else "an unreadable file"
            raise LockLost(f"{self.path}: the writer lock was taken over by {who} while this "
                           "process wrote the run; it stopped without writing more, so that "
                           "the other writer's work is not overwritten") from None

    def release(self) -> None:
        release(self.run_dir)


# run directory (real path) -> the lock this process holds there
_held: dict[str, Lock] = {}


def _key(run_dir) -> str:
    return os.path.realpath(run_dir)


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


def _parse(raw: bytes) -> dict | None:
    try:
        info = json.loads(raw)
        return {"host": str(info["host"]), "pid": int(info["pid"]),
                "started": str(info.get("started", "?")), "token": str(info.get("token", ""))}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _read(path: Path):
    """(parsed JSON or None if unreadable, (st_dev, st_ino), raw bytes) of the lock file at
    ``path``, read through one open file; None when there is no such file."""
    try:
        fd = open_regular(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except NotRegularFile:
        # a FIFO, a device or a symlink in its place (never read: it could block or never
        # end) is an unreadable lock
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        return None, (st.st_dev, st.st_ino), b""
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        raw = fh.read(1 << 16)
    return _parse(raw), (st.st_dev, st.st_ino), raw


def _holder_of(info: dict | None) -> Holder | None:
    if info is None:
        return None
    host, pid, token = info["host"], info["pid"], info["token"]
    if host != socket.gethostname():
        alive = None
    elif pid == os.getpid():
        # this process: alive only if it is a lock this process took (the same pid with
        # another token was a previous process's, e.g. pids restarting in a container)
        alive = any(lock.token == token and lock.pid == pid for lock in _held.values())
    else:
        alive = _pid_alive(pid)
    return Holder(host, pid, info["started"], alive, token)


def holder(run_dir) -> Holder | None:
    """The process holding the lock of ``run_dir``, or None when nobody does (no lock
    file, or an unreadable one: corrupted, or a writer killed while writing it)."""
    try:
        seen = _read(Path(run_dir) / LOCK_NAME)
    except OSError:
        return None
    return None if seen is None else _holder_of(seen[0])


def _refuse(run_dir: Path, path: Path, current: Holder) -> LockHeld:
    hint = "" if current.alive else f"; if that process is gone, delete {path} and try again"
    return LockHeld(f"{run_dir}: another {current.describe()} is writing this run{hint}")


def _register(run_dir: Path, path: Path, token: str) -> Lock:
    lock = Lock(run_dir, path, token, os.getpid())
    _held[_key(run_dir)] = lock
    return lock


def acquire(run_dir) -> Lock:
    """Take the writer lock of ``run_dir`` (created if needed) for this process.

    Raises ``LockHeld`` naming the holder when a live process (or one on another host)
    holds it; a lock left by a dead process on this host is taken over (atomically: of
    several processes trying at once, exactly one gets it). Re-acquiring a lock this
    process holds returns the same ``Lock``.
    """
    run_dir = Path(run_dir)
    path = run_dir / LOCK_NAME
    run_dir.mkdir(parents=True, exist_ok=True)
    mine = _held.get(_key(run_dir))
    if mine is not None and mine.pid == os.getpid():
        try:
            mine.verify()
            return mine
        except LockLost:
            _held.pop(_key(run_dir), None)
    token = secrets.token_hex(16)
    me = {"host": socket.gethostname(), "pid": os.getpid(),
          "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
          "token": token}
    tmp = run_dir / f".{LOCK_NAME}.{token}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(me, fh)
        return _acquire(run_dir, path, tmp, me)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass            # renamed into place: it is the lock now


def _acquire(run_dir: Path, path: Path, tmp: Path, me: dict) -> Lock:
    claimed_by_other = None
    for _attempt in range(_ATTEMPTS):
        try:
            os.link(tmp, path)                  # the O_EXCL step, with the content in place
            return _register(run_dir, path, me["token"])
        except FileExistsError:
            pass
        except OSError as err:
            if err.errno not in _NO_LINKS:
                raise
            return _acquire_without_links(run_dir, path, me)
        seen = _read(path)
        if seen is None:
            continue                            # released in between: try again
        info, ident, raw = seen
        current = _holder_of(info)
        if current is not None and current.alive is not False:
            raise _refuse(run_dir, path, current)
        # a dead writer's lock (or an unreadable one): claim its takeover; one process can
        claim = run_dir / f"{TAKEOVER_PREFIX}{ident[1]}"
        try:
            os.link(path, claim)
        except FileNotFoundError:
            continue
        except FileExistsError:
            claimed_by_other = claim            # another process is taking it over now
            time.sleep(0.01)
            continue
        try:
            check = _read(claim)
            if check is None or check[1] != ident or check[2] != raw:
                continue                        # the lock changed after it was read: look again
            os.replace(tmp, path)               # only the claimant replaces the dead lock
            return _register(run_dir, path, me["token"])
        finally:
            try:
                os.unlink(claim)
            except FileNotFoundError:
                pass
    if claimed_by_other is not None:
        raise LockHeld(f"{run_dir}: could not take over the writer lock {path} of a process "
                       f"that is gone: {claimed_by_other} says another process is taking it "
                       f"over. If no other process is starting on this run, delete {path} and "
                       f"{claimed_by_other} and try again")
    raise LockHeld(f"{run_dir}: could not take the writer lock {path} (other writers keep "
                   "starting at the same moment)")


def _acquire_without_links(run_dir: Path, path: Path, me: dict) -> Lock:
    """A file system without hard links: O_EXCL creation; a dead writer's lock is left for
    the user to delete (replacing it safely needs ``link``)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        current = holder(run_dir)
        if current is not None and current.alive is not False:
            raise _refuse(run_dir, path, current) from None
        who = f"{current.describe()} is gone" if current is not None else "it is unreadable"
        raise LockHeld(f"{run_dir}: the writer lock {path} is stale ({who}), but this file "
                       f"system has no hard links to take it over safely: delete {path} and "
                       "try again") from None
    with os.fdopen(fd, "w") as fh:
        json.dump(me, fh)
    return _register(run_dir, path, me["token"])


def verify(run_dir) -> None:
    """Check that this process still holds the writer lock of ``run_dir``: raise
    ``LockLost`` (naming the file, and the new holder if there is one) when the lock file
    was deleted, replaced by another writer's, or never taken by this process."""
    lock = _held.get(_key(run_dir))
    if lock is None or lock.pid != os.getpid():
        raise LockLost(f"{Path(run_dir) / LOCK_NAME}: this process does not hold the writer "
                       "lock of the run; it writes nothing more")
    lock.verify()


def release(run_dir) -> None:
    """Release the lock if this process holds it (a no-op otherwise: another writer's lock,
    or none, is left alone)."""
    lock = _held.pop(_key(run_dir), None)
    if lock is None or lock.pid != os.getpid():
        return
    try:
        seen = _read(lock.path)
    except OSError:
        return
    if seen is not None and seen[0] is not None and seen[0]["token"] == lock.token:
        try:
            lock.path.unlink()
        except FileNotFoundError:
            pass
