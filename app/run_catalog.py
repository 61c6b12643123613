"""The runs File > Runs… lists: where they are found, one record per run, and what a
comparison of runs reads. Plain functions, no widgets: the run browser calls them in a
worker thread (``app.run_browser``).

Where runs are found (``Place``; the browser makes them from the window, ``places_for``):

    recent        File > Open recent's run directories (``RecentFiles``); one that is gone
                  is reported as skipped
    data folder   the folder of the config's data file, its sub-folders and theirs (two
                  levels: ``<folder>/runs/<run>`` is where a saved config's runs go)
    config folder the saved config's own folder, the same way (when it is another folder)
    user runs     ``$XDG_DATA_HOME/fieldscope/runs`` (``app.state.session.user_data_dir``),
                  where the runs of a config not saved yet go, two levels

A run directory is what ``core.store.run_store.RunReader`` opens (File > Open run directory
uses it too): the scan offers the reader each folder that holds an entry named
``STORE_NAME`` (the reader's own first test), and the reader decides. Runs are read only
through it and ``core.store.run_summary`` (the Diagnostics view's ``compute_summary``).

Hostile folders. The scan never follows a symbolic link (a link to a folder outside the
scanned folder is reported as skipped, one inside it is reached as itself), descends only
into directories (a FIFO, a socket or a device is never opened; inside a store the reader
opens only regular files reached without a link), reports a folder it cannot list, and
stops after ``MAX_ENTRIES`` entries per place and ``MAX_RUNS`` runs in all (reported). A
store the reader refuses, or whose draws cannot be read, is a record with status
``DAMAGED`` and the reader's message as its note.

Status (``RunRecord.status``): the store's (``core.store.run_record.STORE_STATUSES``:
created, running, paused, stopped, finished, failed), "interrupted" for a live status whose
writer is known to be gone (``RunController.writer_gone``, as the window decides when it
shows the run) and ``DAMAGED``.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from app.run_controller import RunController
from app.views.diagnostics import compute_summary
from core.store.run_record import LIVE_STATUSES
from core.store.run_store import STORE_NAME, RunReader

__all__ = ["Place", "Found", "RunRecord", "RunDraws", "DAMAGED", "MAX_DEPTH", "MAX_ENTRIES", "MAX_RUNS",
           "find_runs", "read_record", "read_draws", "power_band", "local_time", "run_labels"]

#: folders below a scanned folder that are looked into (1: its sub-folders, 2: theirs too)
MAX_DEPTH = 2
#: directory entries examined per scanned folder at most (a folder of a million files stays quick)
MAX_ENTRIES = 20_000
#: runs listed at most
MAX_RUNS = 500
#: the status of a store the reader refuses (or whose draws it cannot read)
DAMAGED = "damaged"


@dataclass(frozen=True)
class Place:
    """Where to look: ``label`` ("recent", "data folder", ...) and ``path``; ``scan``: a folder
    to scan ``MAX_DEPTH`` levels deep, or else one run directory (a recent entry)."""

    label: str
    path: Path
    scan: bool = True


@dataclass
class Found:
    """What ``find_runs`` found: run directories (each with the labels of the places it was
    found in, in the order found) and (path, reason) of what it skipped."""

    runs: dict[Path, list[str]] = field(default_factory=dict)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    entries: int = 0          # entries examined (all places)

    def add(self, path: Path, label: str) -> None:
        key = Path(os.path.realpath(path))
        if key in self.runs:
            if label not in self.runs[key]:
                self.runs[key].append(label)
        elif len(self.runs) >= MAX_RUNS:
            if not any(reason.startswith("more than") for _, reason in self.skipped):
                self.skipped.append((path, f"more than {MAX_RUNS} runs: the rest are not listed"))
        else:
            self.runs[key] = [label]


def find_runs(places, *, max_depth: int = MAX_DEPTH, max_entries: int = MAX_ENTRIES) -> Found:
    """The run directories of ``places`` (see the module docstring); never raises for a
    folder it cannot read (it is skipped with the reason)."""
    found = Found()
    for place in places:
        path = Path(place.path)
        if place.scan:
            _scan(path, place.label, found, max_depth, max_entries)
        else:
            _one(path, place.label, found)
    return found


def _holds_store(path) -> bool:
    """Whether ``path`` holds an entry named STORE_NAME (RunReader's first test), without
    following a link at ``path/STORE_NAME``."""
    return os.path.lexists(os.path.join(path, STORE_NAME))


def _one(path: Path, label: str, found: Found) -> None:
    """A recent entry: a run directory (a config file is no run: not listed)."""
    if not os.path.lexists(path):
        found.skipped.append((path, f"{label}: no longer exists"))
    elif os.path.isdir(path):
        if _holds_store(path):
            found.add(path, label)
        else:
            found.skipped.append((path, f"{label}: holds no run any more (no {STORE_NAME})"))


def _inside(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:
        return False


def _over_budget(folder: Path, found: Found, max_entries: int) -> None:
    found.skipped.append((folder, f"the scan stopped after {max_entries} entries: the rest of this "
                                  "folder was not looked into"))


def _listing(folder: Path, budget: list[int], found: Found) -> list[os.DirEntry]:
    """The entries of ``folder`` (sorted by name), at most ``budget[0]`` of them (what is left
    of the place's ``budget[1]``)."""
    entries = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                if budget[0] <= 0:
                    _over_budget(folder, found, budget[1])
                    break
                budget[0] -= 1
                found.entries += 1
                entries.append(entry)
    except OSError as err:
        found.skipped.append((folder, f"cannot be listed: {err.strerror or err}"))
    return sorted(entries, key=lambda e: e.name)


def _link(entry: os.DirEntry, real_root: str, found: Found) -> None:
    """A symbolic link met in a scan: never followed; one to a folder outside the scanned
    folder is reported."""
    target = os.path.realpath(entry.path)
    if not _inside(target, real_root) and os.path.isdir(target):
        found.skipped.append((Path(entry.path), f"a symbolic link to {target}, outside {real_root}: "
                                                "not followed (open that folder's runs from there)"))


def _scan(root: Path, label: str, found: Found, max_depth: int, max_entries: int) -> None:
    if not os.path.isdir(root):
        return
    if _holds_store(root):
        found.add(root, label)
        return
    real_root = os.path.realpath(root)
    budget = [max_entries, max_entries]
    stack = [(root, 0)]
    while stack:
        if budget[0] <= 0:
            _over_budget(stack[-1][0], found, max_entries)
            return
        folder, depth = stack.pop()
        below = []
        for entry in _listing(folder, budget, found):
            try:
                if entry.is_symlink():
                    _link(entry, real_root, found)
                    continue
                if not entry.is_dir(follow_symlinks=False) or entry.name == STORE_NAME:
                    continue
            except OSError:
                continue
            path = Path(entry.path)
            if _holds_store(path):
                found.add(path, label)
            elif depth + 1 < max_depth:
                below.append((path, depth + 1))
        stack.extend(reversed(below))        # depth first, in name order


# -- one record per run -------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRecord:
    """One row of the run browser. ``draws`` / ``total``: post-warmup draws per chain stored /
    asked for; ``worst_rhat``: the largest R-hat of the run's summary rows (its sampled
    parameters and lp, pooled over the chains: the Diagnostics view's table), nan when it is
    undefined (fewer than 4 draws, one chain); ``note``: a failed run's error, what is
    damaged, or ""."""

    path: Path
    found_in: tuple[str, ...]
    status: str
    started: str = ""
    updated: str = ""
    model: str = ""
    sampler: str = ""
    chains: int | None = None
    draws: int | None = None
    total: int | None = None
    warmup: tuple[int, int] | None = None
    worst_rhat: float = math.nan
    worst_quantity: str = ""
    note: str = ""

    @property
    def damaged(self) -> bool:
        return self.status == DAMAGED


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _sampler(reader: RunReader) -> str:
    """The run's algorithm: recorded by the engine, or from its stored config (older stores)."""
    algorithm = reader.attrs.get("algorithm")
    if isinstance(algorithm, str) and algorithm:
        return algorithm
    try:
        return reader.stored_config.parse().sampler.algorithm
    except Exception:       # noqa: BLE001 - a config that no longer parses: the sampler is unknown
        return ""


def _worst(rows) -> tuple[float, str]:
    finite = [(row.rhat, row.name) for row in rows if math.isfinite(row.rhat)]
    return max(finite) if finite else (math.nan, "")


def read_record(path, found_in=()) -> RunRecord:
    """The ``RunRecord`` of the run directory ``path``; a store that cannot be read gives a
    ``DAMAGED`` record naming the reason (never an exception)."""
    path = Path(path)
    found_in = tuple(found_in)
    try:
        reader = RunReader(path)
    except Exception as err:        # noqa: BLE001 - RunStoreError, or an OSError of the file system
        return RunRecord(path, found_in, DAMAGED, note=str(err) or type(err).__name__)
    a, progress = reader.attrs, reader.progress
    status = reader.status or "unknown"
    if status in LIVE_STATUSES and RunController.writer_gone(path):
        status = "interrupted"
    record = dict(path=path, found_in=found_in, status=status, started=str(a.get("created") or ""),
                  updated=str(a.get("updated") or ""), model=str(a.get("model_kind") or ""),
                  sampler=_sampler(reader), chains=_int(a.get("chains")), draws=progress["draws"],
                  total=_int(a.get("num_samples")),
                  warmup=(progress["warmup_draws"], _int(a.get("num_warmup")) or 0),
                  note=str(a.get("error") or ""))
    try:
        record["worst_rhat"], record["worst_quantity"] = _worst(compute_summary(path).rows)
    except Exception as err:        # noqa: BLE001 - a damaged chunk: the row says so
        record.update(status=DAMAGED, note=f"{status} run; its draws cannot be read: {err}")
    return RunRecord(**record)


def local_time(stamp: str) -> str:
    """A store's ISO 8601 UTC time stamp in local time, "YYYY-MM-DD HH:MM" ("" when there is none,
    the text itself when it does not parse)."""
    if not stamp:
        return ""
    try:
        when = _dt.datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    if when.tzinfo is not None:
        when = when.astimezone()
    return when.strftime("%Y-%m-%d %H:%M")


def run_labels(paths) -> list[str]:
    """A short name per run directory: its own name, with its parent's where two share one."""
    paths = [Path(p) for p in paths]
    names = [p.name for p in paths]
    return [f"{p.parent.name}/{p.name}" if names.count(p.name) > 1 else p.name for p in paths]


# -- what a comparison reads --------------------------------------------------------------------


@dataclass
class RunDraws:
    """What the comparison window shows of one run: ``params`` name -> (chain, draw)
    post-warmup draws (every sampled parameter, then "lp"); ``k`` and ``power`` (chain,
    field_draw, k) the stored P(k) draws (None for a run without a field, or before its first
    kept draw); ``unit`` the grid's length unit from the stored config ("" when unknown);
    ``rows`` the pooled summary rows (``core.store.diagnostics.ScalarSummary``: the Diagnostics
    view's)."""

    path: Path
    label: str
    params: dict
    k: np.ndarray | None
    power: np.ndarray | None
    unit: str
    rows: list
    model: str = ""


def _unit(reader: RunReader) -> str:
    try:
        grid = reader.stored_config.parse().grid
    except Exception:       # noqa: BLE001 - a config that no longer parses: no unit
        return ""
    return grid.unit if grid is not None and grid.unit else ""


def read_draws(path, label: str = "") -> RunDraws:
    """The ``RunDraws`` of one run directory; RunStoreError naming what cannot be read."""
    reader = RunReader(path)
    params = {name: reader.param(name) for name in reader.param_names}
    params["lp"] = reader.stat("lp")
    k = power = None
    if reader.has_field and reader.progress["field_draws"] > 0:
        k, _counts, power = reader.powers()
    rows = compute_summary(path).rows
    return RunDraws(Path(path), label or Path(path).name, params, k, power, _unit(reader), rows,
                    str(reader.attrs.get("model_kind") or ""))


def power_band(power, low: float = 5.0, high: float = 95.0):
    """(mean, low quantile, high quantile) over every chain and draw of P(k) draws
    (chain, draw, k), per k: what the comparison draws for a run (the quantiles are numpy's
    linear ones, as the summary's 5% and 95%)."""
    flat = np.asarray(power, np.float64)
    flat = flat.reshape(-1, flat.shape[-1])
    return flat.mean(axis=0), np.percentile(flat, low, axis=0), np.percentile(flat, high, axis=0)
