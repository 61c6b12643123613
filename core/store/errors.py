"""The run store's errors, one home for the store, its checkpoint and their readers."""

from __future__ import annotations

import os

__all__ = ["RunStoreError", "StoreWriteError", "write_error"]


class RunStoreError(ValueError):
    """A run directory that cannot be opened, written or resumed, with the reason."""


class StoreWriteError(RunStoreError):
    """Writing the store or the checkpoint failed (a full disk, a quota, a lost mount).

    ``errno`` is the operating system's error number (``errno.ENOSPC`` for a full
    disk). Every write is atomic (zarr's local store and ``write_checkpoint`` write a
    temporary file and rename it), so what was written before stays readable, and the
    run resumes from its last checkpoint once the cause is gone.
    """

    def __init__(self, message: str, errno: int | None = None):
        super().__init__(message)
        self.errno = errno


def write_error(run_dir, what: str, exc: OSError) -> StoreWriteError:
    import errno as errno_mod

    code = errno_mod.errorcode.get(exc.errno, "") if exc.errno is not None else ""
    reason = exc.strerror or str(exc) or type(exc).__name__
    # the file the OS refused (a rename's target: a directory planted in a file's place)
    target = getattr(exc, "filename2", None) or getattr(exc, "filename", None)
    return StoreWriteError(f"{run_dir}: {what} failed: {reason}" + (f" [{code}]" if code else "")
                           + (f" ({os.fspath(target)})" if target and exc.strerror else ""), exc.errno)
