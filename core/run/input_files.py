"""The files a run reads (data, mask, noise map, P(k) table, model file), fingerprinted when it starts and
checked when it resumes.

numpy-free and TensorFlow-free (``hashlib``): the command line checks before TensorFlow loads.
A run's store keeps, in its root attribute ``inputs``, one record per file setting::

    {"data.path": {"path": "/abs/field.npz", "sha256": "9f2c...", "bytes": 1048576}, ...}

``input_digests(config)`` makes it (the engine, when it creates the store). Resume
(``verify_inputs``) hashes the files the stored config names now and refuses, naming the
file and the setting, when one differs: resuming would sample another posterior while the
store keeps the old observed data (or, for a stored config with an absolute path from
another person's folder, copy that person's file into a shared store). ``accept=True``
(``fieldscope resume --accept-changed-data``) accepts the change: ``record_accepted``
stores the new fingerprints and appends the change to the attribute ``input_changes``.
A store written before fingerprints were kept has none: its kept observed data are compared
with what the data file gives now instead (``core.run.stored_data``).
Files are read through ``core.io.regular_file`` (never a FIFO or a device).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from core.config.schema import model_file_setting
from core.io.regular_file import NotRegularFile, open_regular
from core.store.run_store import STORE_NAME, RunReader, RunStoreError
from core.store.zarr_files import consolidate, open_group, utc_now

__all__ = ["InputsChanged", "input_files", "file_digest", "input_digests", "model_file_sha256", "changed_inputs", "verify_inputs",
           "record_accepted", "ACCEPT_OPTION"]

ACCEPT_OPTION = "--accept-changed-data"
_BLOCK = 1 << 20


class InputsChanged(RunStoreError):
    """An input file of a run differs from the one it started with; the message names it."""


def input_files(config) -> dict[str, str]:
    """setting -> absolute path of every file the config's run reads."""
    from core.io.field_inputs import referenced_file

    files = {"data.path": str(config.data_path)}
    for setting in ("mask", "noise_map"):
        ref = getattr(config.data, setting, None)
        name = referenced_file(ref) if ref is not None else None
        if name is not None:
            files[f"data.{setting}"] = str(config.resolve_path(name))
    table = getattr(config.prior, "table", None)
    if table:
        files["prior.table"] = str(config.resolve_path(table))
    setting = model_file_setting(config)
    if setting is not None:       # a changed model file samples another posterior too
        files[setting] = str(config.model_file)
    return {setting: os.path.abspath(path) for setting, path in files.items()}


def file_digest(path) -> dict:
    """{path, sha256, bytes} of the regular file ``path``; OSError (``NotRegularFile`` for a
    FIFO or a device) when it cannot be read."""
    fd = open_regular(path)
    digest, size = hashlib.sha256(), 0
    with os.fdopen(fd, "rb") as fh:
        while block := fh.read(_BLOCK):
            digest.update(block)
            size += len(block)
    return {"path": os.fspath(path), "sha256": digest.hexdigest(), "bytes": size}


def model_file_sha256(config) -> str | None:
    """The SHA-256 of the config's model file (None: it has none, or it cannot be read: loading
    the model says why)."""
    setting = model_file_setting(config)
    if setting is None:
        return None
    try:
        return file_digest(config.model_file)["sha256"]
    except OSError:
        return None


def input_digests(config) -> dict:
    """setting -> ``file_digest`` of every input file the run reads; a file that cannot be
    read is left out (loading the model reports it)."""
    out = {}
    for setting, path in input_files(config).items():
        try:
            out[setting] = file_digest(path)
        except OSError:
            pass
    return out


def _stored(reader: RunReader) -> dict | None:
    value = reader.attrs.get("inputs")
    if value is None:
        return None
    where = reader.store_path / ".zattrs"
    if not isinstance(value, dict) or not all(
            isinstance(rec, dict) and isinstance(rec.get("path"), str) and isinstance(rec.get("sha256"), str)
            for rec in value.values()):
        raise RunStoreError(f"{where}: inputs is {value!r}, not the fingerprints of the run's files")
    return value


def changed_inputs(reader: RunReader, config) -> tuple[list[str], dict | None]:
    """(one line per changed input file, the fingerprints now); ([], None) for a store without
    fingerprints."""
    stored = _stored(reader)
    if stored is None:
        return [], None
    now, changes = {}, []
    for setting, path in input_files(config).items():
        before = stored.get(setting)
        try:
            now[setting] = current = file_digest(path)
        except FileNotFoundError:
            changes.append(f"{path} ({setting}) is missing")
            continue
        except NotRegularFile as err:
            changes.append(f"{err.strerror} ({setting})")
            continue
        except OSError as err:
            changes.append(f"{path} ({setting}) cannot be read: {err.strerror or err}")
            continue
        if before is None:
            changes.append(f"{path} ({setting}) was not read when the run began")
        elif before["sha256"] != current["sha256"] or before["path"] != current["path"]:
            moved = f" (it began with {before['path']})" if before["path"] != current["path"] else ""
            changes.append(f"{path} ({setting}) is not the file the run began with{moved}: "
                           f"{current['bytes']} bytes, SHA-256 {current['sha256'][:12]}..., "
                           f"not {before.get('bytes', '?')} bytes, {before['sha256'][:12]}...")
    return changes, now


def verify_inputs(run_dir, config, accept: bool = False) -> str | None:
    """Check the input files of the run in ``run_dir`` against its fingerprints. Raises
    ``InputsChanged`` naming each changed file (unless ``accept``); returns a note for the
    user (the changes accepted) or None. Reads only."""
    reader = RunReader(run_dir)
    changes, now = changed_inputs(reader, config)
    if now is None:       # a store older than the fingerprints: its kept data against the file's now
        from core.run.stored_data import stored_data_changes

        changes = stored_data_changes(run_dir, config)
    if not changes:
        return None
    if accept:
        return f"{run_dir}: accepting changed input files: " + "; ".join(changes)
    raise InputsChanged(f"{run_dir}: " + "; ".join(changes) + ". Resuming would sample another posterior "
                        "beside the stored draws and data: put the original file back, start a new run, or "
                        f"resume with {ACCEPT_OPTION} to accept the change (it is recorded in the store)")


def record_accepted(run_dir, config) -> None:
    """Store the fingerprints of the input files now and append the accepted changes to the
    attribute ``input_changes`` (the caller holds the run's writer lock)."""
    reader = RunReader(run_dir)
    changes, now = changed_inputs(reader, config)
    if now is None:       # a store older than the fingerprints: record them from now on
        from core.run.stored_data import stored_data_changes

        changes, now = stored_data_changes(run_dir, config), input_digests(config)
    if not changes:
        return
    root = open_group(Path(run_dir) / STORE_NAME, "r+")
    history = list(root.attrs.get("input_changes") or [])
    history.append({"accepted": utc_now(), "changes": changes})
    try:
        root.attrs.update({"inputs": now, "input_changes": history})
        consolidate(Path(run_dir) / STORE_NAME)
    except OSError as err:
        raise RunStoreError(f"{run_dir}: cannot record the accepted input files: {err.strerror or err}") from None
