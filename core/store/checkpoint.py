"""A run's checkpoint file: RUNDIR/checkpoint.npz, written atomically, read only as a regular file.

What goes in it (named arrays and a JSON record) is the engine's (``core.engine.checkpoint``);
this module writes and reads the file: an uncompressed zip of .npy members (``np.savez``'s
format), one array converted and written at a time, a temporary file fsynced and renamed into
place, so that a crash leaves the previous checkpoint whole.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from core.io.regular_file import NotRegularFile, open_regular
from core.store.errors import RunStoreError, write_error

__all__ = ["CHECKPOINT_NAME", "write_checkpoint", "read_checkpoint", "check_checkpoint"]

CHECKPOINT_NAME = "checkpoint.npz"


def write_checkpoint(run_dir, arrays: dict, meta: dict) -> None:
    """Atomically replace RUNDIR/checkpoint.npz (write a temporary file, fsync, rename).

    ``arrays``: name -> an array, or anything ``np.asarray`` takes (a tensor: on a GPU
    its copy to host memory is made here, one array at a time, and dropped once written,
    so that the checkpoint never holds a second copy of the whole state). The file is
    ``np.savez``'s (an uncompressed zip of .npy members; ``read_checkpoint``).
    A failing write raises StoreWriteError and leaves the previous checkpoint in place."""
    run_dir = Path(run_dir)
    tmp = str(run_dir / f".checkpoint-{os.urandom(8).hex()}.npz")
    try:       # mode 0666 less the umask, like the store's files (core.store.run_lock: file modes)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as err:
        raise write_error(run_dir, "writing the checkpoint", err) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            _write_npz(fh, {"__meta__": np.array(json.dumps(meta)), **arrays})
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, run_dir / CHECKPOINT_NAME)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(err, OSError):
            raise write_error(run_dir, "writing the checkpoint", err) from None
        raise


def _write_npz(fh, arrays: dict) -> None:
    """``np.savez(fh, **arrays)``, converting and writing one array at a time."""
    import zipfile

    with zipfile.ZipFile(fh, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, value in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)


def check_checkpoint(run_dir) -> None:
    """Whether RUNDIR/checkpoint.npz, when there is one, can be read: a regular file, a zip
    whose members' CRC-32 match, a record that parses (streamed: no array is held). Raises
    RunStoreError naming the file, the fault and what to do; for ``resume``'s checks before
    TensorFlow loads."""
    import zipfile

    path = Path(run_dir) / CHECKPOINT_NAME
    if not os.path.lexists(path):
        return
    advice = (f"; the run cannot continue from it. Nothing was changed: the stored draws stay readable "
              f"(fieldscope summary {run_dir}); start a new run in another folder (fieldscope run CONFIG "
              "--out NEWDIR)")
    try:
        fh = os.fdopen(open_regular(path, follow_symlinks=False), "rb")
    except NotRegularFile as err:
        raise RunStoreError(f"{err.strerror} (the checkpoint Fieldscope writes is a regular file){advice}") from None
    except OSError as err:
        raise RunStoreError(f"{path}: unreadable checkpoint ({err.strerror or err}){advice}") from None
    try:
        with fh, zipfile.ZipFile(fh) as zf:
            bad = zf.testzip()
            if bad is not None:
                raise RunStoreError(f"{path}: damaged checkpoint (member {bad} fails its CRC-32){advice}")
            with zf.open("__meta__.npy") as member:
                json.loads(str(np.lib.format.read_array(member, allow_pickle=False)))
    except RunStoreError:
        raise
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError) as err:
        raise RunStoreError(f"{path}: unreadable checkpoint ({err}){advice}") from None


def read_checkpoint(run_dir) -> tuple[dict[str, np.ndarray], dict]:
    path = Path(run_dir) / CHECKPOINT_NAME
    try:
        # written by write_checkpoint's rename: never a symlink, a FIFO or a device
        fh = os.fdopen(open_regular(path, follow_symlinks=False), "rb")
    except FileNotFoundError:
        raise RunStoreError(f"{path}: no checkpoint; the run has not completed a chunk, "
                            "start it again instead of resuming") from None
    except NotRegularFile as err:
        raise RunStoreError(f"{err.strerror} (the checkpoint Fieldscope writes is a regular file)") from None
    except OSError as err:
        raise RunStoreError(f"{path}: unreadable checkpoint ({err.strerror or err})") from None
    try:
        with fh, np.load(fh, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files if k != "__meta__"}
            meta = json.loads(str(data["__meta__"]))
    except Exception as err:
        raise RunStoreError(f"{path}: unreadable checkpoint ({err})") from None
    if not isinstance(meta, dict):
        raise RunStoreError(f"{path}: unreadable checkpoint (its record is {type(meta).__name__}, "
                            "not a JSON object)")
    return arrays, meta
