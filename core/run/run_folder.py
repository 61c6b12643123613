"""A run directory claimed before a run writes it: for a new run, or to resume one.

TensorFlow-free and quick, so that the command line refuses a wrong folder in a fraction of
a second, before it loads TensorFlow; the engine makes the same claim (a no-op the second
time in one process). A claim takes the folder's writer lock (``core.store.run_lock``)
first, so that of two runs started into one folder at once exactly one goes on and the
other is refused at once, naming the holder.

* A new run (``claim_new``) goes into a folder with no run store, or one whose run never
  completed a chunk (stopped or killed while loading or compiling, or failed before its
  first chunk: no draws, and no live writer): that store is replaced, and the claim's
  ``note`` says so. A store holding draws is never overwritten, nor one that cannot be read.
* A resumed run (``claim_resume``) without a checkpoint never completed its first chunk's
  checkpoint: it has nothing to continue from, so it starts again from the beginning with
  its stored config (``restart``); at most that first chunk's draws were stored, and the same
  seed draws them again. A store of more than one chunk (or a finished one) without a
  checkpoint lost it: resume refuses, changing nothing, rather than draw everything again.

Every refusal is a ``RunStoreError`` naming the folder and what to do.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from core.store import run_lock
from core.store.checkpoint import CHECKPOINT_NAME
from core.store.run_store import STORE_NAME, RunReader, RunStoreError

__all__ = ["Claim", "claim_new", "claim_resume", "drawn", "remove_store", "check_num_samples"]


@dataclass
class Claim:
    """A run directory this process holds the writer lock of.

    ``note``: a line for the user (a store replaced, a run started again), or None;
    ``restart``: a resumed run starts from the beginning; ``created``: the folder did not
    exist before the claim (``release`` removes it again if nothing was written there)."""

    run_dir: Path
    note: str | None = None
    restart: bool = False
    created: bool = False

    def release(self) -> None:
        """Release the lock (if this process holds it), and remove a folder the claim
        created that stayed empty."""
        run_lock.release(self.run_dir)
        if self.created:
            try:
                self.run_dir.rmdir()
            except OSError:
                pass            # something was written there: keep it


def drawn(reader: RunReader) -> int:
    """Draws per chain (warmup and post-warmup) a run store has published."""
    progress = reader.progress
    return int(progress.get("warmup_draws", 0)) + int(progress.get("draws", 0))


def remove_store(run_dir) -> None:
    """Remove a run's store and checkpoint (nothing else in the folder)."""
    run_dir = Path(run_dir)
    shutil.rmtree(run_dir / STORE_NAME)
    try:
        (run_dir / CHECKPOINT_NAME).unlink()
    except FileNotFoundError:
        pass


def _lock(run_dir: Path) -> bool:
    """Take the writer lock; returns whether the folder was created for it."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunStoreError(f"{run_dir}: exists and is not a directory; choose a run directory")
    created = not run_dir.exists()
    try:
        run_lock.acquire(run_dir)
    except run_lock.LockHeld as err:
        raise RunStoreError(str(err)) from None
    except OSError as err:
        raise RunStoreError(f"{run_dir}: cannot write the run directory: {err.strerror or err}"
                            f" ({err.filename or run_dir})") from None
    return created


def claim_new(run_dir) -> Claim:
    """Claim ``run_dir`` for a new run (see the module's description)."""
    run_dir = Path(run_dir)
    claim = Claim(run_dir, created=_lock(run_dir))
    try:
        if not (run_dir / STORE_NAME).exists():
            return claim
        try:
            reader = RunReader(run_dir)
        except RunStoreError as err:
            raise RunStoreError(f"{err}; it is left as it is: choose a new directory, or delete "
                                f"{run_dir / STORE_NAME} if that run is not needed") from None
        n = drawn(reader)
        if n or reader.progress.get("chunks"):
            raise RunStoreError(
                f"{run_dir}: already holds a run ({reader.status or 'unknown status'}, {n} draws "
                f"per chain); continue it with: fieldscope resume {run_dir}, or choose a new "
                "directory")
        try:
            remove_store(run_dir)
        except OSError as err:
            raise RunStoreError(f"{run_dir}: cannot replace the run there, which has no draws: "
                                f"{err.strerror or err}") from None
        claim.note = (f"{run_dir}: replacing the run there, which ended before its first chunk "
                      f"({reader.status or 'unknown status'}, no draws)")
        return claim
    except BaseException:
        claim.release()
        raise


def claim_resume(run_dir) -> Claim:
    """Claim ``run_dir``, which holds a run, to continue it (see the module's description)."""
    run_dir = Path(run_dir)
    reader = RunReader(run_dir)            # not a run directory: refused before anything is written
    claim = Claim(run_dir, created=_lock(run_dir))
    try:
        reader.refresh()                   # as it is now that nobody else writes it
        if not os.path.lexists(run_dir / CHECKPOINT_NAME):
            n = drawn(reader)
            chunks = reader.progress["chunks"]
            if chunks > 1 or (n and reader.status == "finished"):
                # the first chunk's checkpoint was written: it was lost, and starting again
                # would replace every stored draw
                raise RunStoreError(
                    f"{run_dir}: {CHECKPOINT_NAME} is missing, but the run stored {n} draws per chain "
                    f"in {chunks} chunks ({reader.status}): its checkpoint was lost, and resume needs it to "
                    f"continue the same chains. Nothing was changed: the draws stay readable (fieldscope "
                    f"summary {run_dir}); put {CHECKPOINT_NAME} back to resume, or start a new run in "
                    "another folder (fieldscope run CONFIG --out NEWDIR)")
            again = (f" (its {n} stored draws per chain are drawn again: the same seed gives the "
                     "same draws)") if n else ""
            claim.restart = True
            claim.note = (f"{run_dir}: the run ended before its first checkpoint "
                          f"({reader.status or 'unknown status'}); starting it again from the "
                          f"beginning with its stored config{again}")
        return claim
    except BaseException:
        claim.release()
        raise


def check_num_samples(run_dir, num_samples: int | None) -> None:
    """Refuse at once (before anything loads or is written) a new total of post-warmup draws
    that cannot extend the run in ``run_dir``: below 1, above the config limit
    (``core.config.limits.MAX_DRAWS``), or not more than it holds when it is finished
    (fewer than it holds: they would be lost); None (the run's own total) for a finished
    run. RunStoreError naming ``--num-samples``."""
    from core.config.limits import MAX_DRAWS

    n = num_samples
    if n is None:
        reader = RunReader(run_dir)
        if reader.status == "finished":
            held = reader.progress["draws"]
            raise RunStoreError(f"{run_dir} is finished with {held} post-warmup draws per chain: nothing to "
                                f"continue; to extend it give a larger total, e.g. fieldscope resume {run_dir} "
                                f"--num-samples {2 * held}")
        return
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_DRAWS:
        raise RunStoreError(f"--num-samples {n}: a run takes 1 to {MAX_DRAWS:,} post-warmup draws per chain "
                            "(the limit of sampler.num_samples)")
    reader = RunReader(run_dir)
    held = reader.progress["draws"]
    if n < held:
        raise RunStoreError(f"--num-samples {n}: {run_dir} already holds {held} post-warmup draws per chain; "
                            "give more to extend it (nothing stored is removed)")
    if n == held and reader.status == "finished":
        raise RunStoreError(f"--num-samples {n}: {run_dir} is finished with {held} draws per chain; give a "
                            "larger number to extend it")
