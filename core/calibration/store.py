"""The calibration store: ``DIR/calibration.zarr``, Zarr format 2 readable by xarray.

numpy + zarr only (the GUI reads it while ``fieldscope calibrate`` writes it). Layout::

    DIR/
      calibration.zarr/            xarray.open_zarr("DIR/calibration.zarr")
        .zattrs                    config (the model's TOML text), config_dir, simulate_config
                                   (the text the data were simulated with, "" = the same),
                                   fieldscope_version, status, error, model_kind, progress
                                   {batches, simulations}, timing {seconds}, the plan
                                   (simulations, draws_per_simulation, chains, batch_size, thin,
                                   num_samples, seed), levels, expected_coverage, voxels
        quantity     (quantity)                 names: index, amplitude, loglik, power_k00, voxel_4_4_4
        simulation   (simulation)               the simulation's index (its seed)
        level        (level)                    0.5, 0.9
        rank         (simulation, quantity)     #{draws < truth}, in 0..draws_per_simulation
        truth        (simulation, quantity)     the simulated true value
        posterior_mean, posterior_sd (simulation, quantity)   over the M draws
        divergences  (simulation)               post-warmup divergent transitions, all chains
        acceptance   (simulation)               mean post-warmup acceptance probability
        coverage     (level, quantity)          fraction of simulations whose truth lies in
                                                the central interval (core.calibration.ranks)
        k            (k)                        field model: the k-shell centres (power_kNN)
        voxel_rank   (simulation, x, y, z)      field model: the rank at every voxel
        voxel_coverage (level, x, y, z)         field model: the coverage at every voxel

Writing. Each finished batch appends its rows (only the simulations of the plan), rewrites
the coverage arrays over every finished simulation, then publishes ``progress`` and
re-consolidates the metadata. Readers trust ``progress`` alone, so a store being written
is always readable; a process killed mid-batch leaves rows beyond ``progress``, which
``reopen`` cuts away before the next batch. Every chunk carries a CRC32, as the run store's.

Damage. The reader checks the attributes it needs (types, the plan's numbers, ``progress``
within the plan and in step with its batches, a ``finished`` status only with every
simulation done) and every array's presence, dims, shape and chunk files (a missing one
would read as zeros) before it reads; the simulations must be numbered 0, 1, ... and the
ranks lie in 0..draws. A chunk that cannot be decoded raises ``CalibrationStoreError``
naming it. Its files are read as the run store's are (``core.store.zarr_files``: regular
files inside the store only, each bounded by its metadata).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import zarr
from numcodecs import CRC32

from core import __version__
from core.calibration.plan import CalibrationPlan
from core.calibration.ranks import LEVELS, coverage, expected_coverage
from core.calibration.verdict import Verdict, judge
from core.io.regular_file import NotRegularFile
from core.store.zarr_files import (
    WRITE_EVERY_CHUNK,
    consolidate,
    damaged_chunk,
    first_bad_chunk,
    open_group,
    read_store_json,
    remove_leftover,
    utc_now,
)

__all__ = ["STORE_NAME", "STATUSES", "CalibrationStoreError", "CalibrationWriter", "CalibrationReader",
           "plan_differences"]

STORE_NAME = "calibration.zarr"
STATUSES = ("created", "running", "stopped", "finished", "failed")
_ROW_ARRAYS = ("rank", "truth", "posterior_mean", "posterior_sd", "divergences", "acceptance", "simulation")
_PLAN_KEYS = ("simulations", "draws_per_simulation", "chains", "batch_size", "thin", "num_samples", "seed")


class CalibrationStoreError(ValueError):
    """A calibration store that cannot be read or written; the message names the file."""


def _new(root, name, shape, chunks, dtype, dims, values=None):
    arr = root.create_array(name, shape=tuple(shape), chunks=tuple(max(1, c) for c in chunks),
                            dtype=dtype, fill_value=None, filters=[CRC32()])
    arr.attrs["_ARRAY_DIMENSIONS"] = list(dims)
    if values is not None:
        arr[...] = values
    return arr


def plan_differences(attrs: dict, config_text: str, simulate_text: str, plan: CalibrationPlan,
                     model_file_sha256: str | None = None) -> list[str]:
    """What differs between a stored calibration and a new request (empty: it can resume);
    ``model_file_sha256``: the SHA-256 of the config's model file now (None: it has none)."""
    out = []
    if attrs.get("config") != config_text:
        out.append("the config")
    if (attrs.get("model_file_sha256") or None) != model_file_sha256:
        out.append("the model file (its SHA-256 changed since the calibration began)")
    if (attrs.get("simulate_config") or "") != (simulate_text or ""):
        out.append("the config the data are simulated with")
    for key, value in plan.as_attrs().items():
        if attrs.get(key) != value:
            option = {"simulations": "--simulations", "draws_per_simulation": "--draws",
                      "batch_size": "--batch"}.get(key, key)
            out.append(f"{option} ({attrs.get(key)!r} stored, {value!r} now)")
    return out


class CalibrationWriter:
    """Creates a calibration store and appends finished batches (one writer at a time:
    the caller holds ``core.store.run_lock`` on the directory)."""

    def __init__(self, out_dir: Path, root):
        self.out_dir = Path(out_dir)
        self.path = self.out_dir / STORE_NAME
        self.root = root

    @classmethod
    def create(cls, out_dir, *, config_text: str, config_dir, simulate_text: str, plan: CalibrationPlan,
               quantities: list[str], model_kind: str, grid_shape=None, k=None, voxels=(),
               model_file_sha256: str | None = None) -> "CalibrationWriter":
        out_dir = Path(out_dir)
        final = out_dir / STORE_NAME
        if final.exists():
            raise CalibrationStoreError(f"{final}: already exists; resume it with the same settings, "
                                        "or choose another --out")
        building = out_dir / (STORE_NAME + ".creating")
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            remove_leftover(building)        # a killed build's folder, or a link planted there
            root = open_group(building, "w")
            with zarr.config.set(WRITE_EVERY_CHUNK):
                root.attrs.update({
                    "config": config_text, "config_dir": str(config_dir), "simulate_config": simulate_text or "",
                    "fieldscope_version": __version__, "status": "created", "error": "",
                    "model_kind": model_kind, "progress": {"batches": 0, "simulations": 0},
                    "timing": {"seconds": 0.0}, "levels": list(LEVELS),
                    "expected_coverage": [expected_coverage(plan.draws, lv) for lv in LEVELS],
                    "voxels": [list(v) for v in voxels], "created": utc_now(), "updated": utc_now(),
                    **({"model_file_sha256": model_file_sha256} if model_file_sha256 else {}),
                    **plan.as_attrs()})
                q = len(quantities)
                rows = plan.batch_size
                width = max(8, max(len(n) for n in quantities))
                _new(root, "quantity", (q,), (q,), f"<U{width}", ["quantity"], np.array(quantities))
                _new(root, "level", (len(LEVELS),), (len(LEVELS),), "float64", ["level"], np.array(LEVELS))
                _new(root, "simulation", (0,), (rows,), "int64", ["simulation"])
                for name, dtype in (("rank", "int32"), ("truth", "float64"), ("posterior_mean", "float64"),
                                    ("posterior_sd", "float64")):
                    _new(root, name, (0, q), (rows, q), dtype, ["simulation", "quantity"])
                _new(root, "divergences", (0,), (rows,), "int32", ["simulation"])
                _new(root, "acceptance", (0,), (rows,), "float64", ["simulation"])
                _new(root, "coverage", (len(LEVELS), q), (len(LEVELS), q), "float64", ["level", "quantity"],
                     np.full((len(LEVELS), q), np.nan))
                if grid_shape is not None:
                    nk = len(k)
                    _new(root, "k", (nk,), (max(nk, 1),), "float64", ["k"], np.asarray(k, float))
                    _new(root, "voxel_rank", (0, *grid_shape), (rows, *grid_shape), "int32",
                         ["simulation", "x", "y", "z"])
                    _new(root, "voxel_coverage", (len(LEVELS), *grid_shape), (len(LEVELS), *grid_shape),
                         "float64", ["level", "x", "y", "z"], np.full((len(LEVELS), *grid_shape), np.nan))
            consolidate(building)
            os.replace(building, final)
        except OSError as err:
            shutil.rmtree(building, ignore_errors=True)
            raise CalibrationStoreError(f"{final}: cannot create the calibration store: "
                                        f"{err.strerror or err}") from None
        return cls(out_dir, open_group(final, "r+"))

    @classmethod
    def reopen(cls, out_dir) -> "CalibrationWriter":
        """An existing store, checked, with the rows beyond ``progress`` cut away. The ranks
        every ``append`` reads back (for the coverage) are read first: a damaged chunk of them
        is a CalibrationStoreError naming it now, not a codec's traceback after a batch ran."""
        reader = CalibrationReader(out_dir)
        reader.ranks()
        if reader.has_field:
            reader.voxel_ranks()
        writer = cls(out_dir, open_group(reader.path, "r+"))
        n = reader.progress["simulations"]
        try:
            with zarr.config.set(WRITE_EVERY_CHUNK):
                for name in (*_ROW_ARRAYS, "voxel_rank"):
                    if name in writer.root:
                        arr = writer.root[name]
                        if arr.shape[0] != n:
                            arr.resize((n, *arr.shape[1:]))
                consolidate(writer.path)
        except OSError as err:
            raise CalibrationStoreError(f"{writer.path}: cannot truncate to its {n} finished "
                                        f"simulations: {err.strerror or err}") from None
        return writer

    @property
    def progress(self) -> dict:
        return dict(self.root.attrs["progress"])

    def append(self, rows: dict, batches: int, seconds: float) -> None:
        """Append one batch's rows (name -> array with the simulation axis first: every
        name of ``_ROW_ARRAYS``, and ``voxel_rank`` for the field model), update the coverage,
        then publish ``progress`` = {batches, simulations}."""
        r = self.root
        try:
            with zarr.config.set(WRITE_EVERY_CHUNK):
                names = _ROW_ARRAYS + (("voxel_rank",) if "voxel_rank" in r else ())
                for name in names:
                    r[name].append(np.asarray(rows[name]), axis=0)
                draws = int(r.attrs["draws_per_simulation"])
                n = r["rank"].shape[0]
                r["coverage"][...] = coverage(r["rank"][:n], draws, LEVELS)
                if "voxel_rank" in r:
                    r["voxel_coverage"][...] = coverage(r["voxel_rank"][:n], draws, LEVELS)
                r.attrs.update({"progress": {"batches": int(batches), "simulations": int(n)},
                                "timing": {"seconds": float(seconds)}, "updated": utc_now()})
                consolidate(self.path)
        except OSError as err:
            raise CalibrationStoreError(f"{self.path}: cannot write batch {batches}: "
                                        f"{err.strerror or err}") from None

    def set_status(self, status: str, error: str = "") -> None:
        if status not in STATUSES:
            raise ValueError(f"unknown calibration status {status!r}")
        try:
            self.root.attrs.update({"status": status, "error": error, "updated": utc_now()})
            consolidate(self.path)
        except OSError as err:
            raise CalibrationStoreError(f"{self.path}: cannot record the status {status!r}: "
                                        f"{err.strerror or err}") from None


class CalibrationReader:
    """Reads a calibration store, finished or being written: call :meth:`refresh` for new batches."""

    def __init__(self, out_dir):
        self.out_dir = Path(out_dir)
        self.path = self.out_dir / STORE_NAME
        if not self.path.is_dir():
            raise CalibrationStoreError(f"{self.out_dir}: no calibration here (no {STORE_NAME})")
        self.refresh()

    def _error(self, what: str) -> CalibrationStoreError:
        return CalibrationStoreError(f"{self.path}: {what}")

    def refresh(self) -> dict:
        """Re-read the attributes and check the layout; returns ``progress``."""
        if self.path.is_symlink():
            raise self._error("a symlink; a calibration store is a folder of its own, never a link")
        try:
            attrs = read_store_json(self.path, ".zattrs")
        except NotRegularFile as err:
            raise CalibrationStoreError(f"{err.strerror} (its attributes); the calibration store is "
                                        "damaged") from None
        except (OSError, ValueError) as err:
            raise self._error(f"cannot read its attributes (.zattrs: {err})") from None
        if not isinstance(attrs, dict):
            raise self._error(".zattrs is not a JSON object")
        for key in _PLAN_KEYS:
            value = attrs.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if key == "seed" else 1):
                raise self._error(f"attribute {key!r} is {value!r}, not a positive integer")
        for key in ("config", "status", "model_kind"):
            if not isinstance(attrs.get(key), str):
                raise self._error(f"attribute {key!r} is {attrs.get(key)!r}, not a string")
        progress = attrs.get("progress")
        if not (isinstance(progress, dict) and all(isinstance(progress.get(k), int) for k in ("batches", "simulations"))):
            raise self._error(f"attribute 'progress' is {progress!r}, not {{batches, simulations}}")
        if not 0 <= progress["simulations"] <= attrs["simulations"]:
            raise self._error(f"progress counts {progress['simulations']} simulations of {attrs['simulations']}")
        # every finished batch but the last runs batch_size simulations of the plan
        done = min(progress["batches"] * attrs["batch_size"], attrs["simulations"])
        if progress["batches"] < 0 or progress["simulations"] != done:
            raise self._error(f"progress counts {progress['simulations']} simulations in {progress['batches']} "
                              f"batches of {attrs['batch_size']}, not {done}: edited or damaged")
        if attrs["status"] == "finished" and progress["simulations"] != attrs["simulations"]:
            raise self._error(f"status 'finished' but progress counts {progress['simulations']} of "
                              f"{attrs['simulations']} simulations: edited or damaged; resume it to finish")
        names = list(_ROW_ARRAYS) + ["quantity", "coverage", "level"]
        if attrs["model_kind"] == "field":
            names += ["k", "voxel_rank", "voxel_coverage"]
        # the metadata files zarr reads, checked first so that a damaged one is named
        for rel in (".zgroup", *(f"{name}/{meta}" for name in names for meta in (".zarray", ".zattrs"))):
            self._json(rel)
        try:
            self.root = open_group(self.path, "r")
            arrays = {name: self.root[name] for name in names}
        except Exception as err:  # noqa: BLE001 - zarr raises many kinds for a broken store
            raise self._error(f"zarr cannot open it ({err})") from None
        self.attrs = attrs
        self.progress = dict(progress)
        for name, arr in arrays.items():
            if name in (*_ROW_ARRAYS, "voxel_rank") and arr.shape[0] < progress["simulations"]:
                raise self._error(f"array {name!r} holds {arr.shape[0]} simulations, "
                                  f"progress says {progress['simulations']}")
        for name in names:
            self._check_chunks(name, progress["simulations"] if name in (*_ROW_ARRAYS, "voxel_rank") else None)
        self._quantities = [str(q) for q in self._read("quantity", ())]
        if not self._quantities or not all(q.isprintable() and q for q in self._quantities):
            raise self._error(f"array 'quantity' holds {self._quantities!r}, not the names of the "
                              "quantities: damaged")
        index = self._rows("simulation")
        if not np.array_equal(index, np.arange(progress["simulations"])):
            raise self._error("array 'simulation' does not number the finished simulations 0, 1, ...: "
                              "damaged")
        if self.root["rank"].shape[1:] != (len(self._quantities),):
            raise self._error(f"array 'rank' has shape {self.root['rank'].shape}, not (simulation, "
                              f"{len(self._quantities)} quantities)")
        return self.progress

    def _json(self, rel: str) -> dict:
        """The JSON object of the store's metadata file ``rel``; CalibrationStoreError naming it."""
        try:
            value = read_store_json(self.path, rel)
        except FileNotFoundError:
            folder = rel.rpartition("/")[0]
            what = f"array {folder!r} is missing" if folder else "missing"
            raise CalibrationStoreError(f"{self.path / rel}: {what}; the calibration store is damaged") from None
        except NotRegularFile as err:
            raise CalibrationStoreError(f"{err.strerror}; the calibration store is damaged") from None
        except (OSError, ValueError) as err:
            raise CalibrationStoreError(f"{self.path / rel}: unreadable or not JSON ({err}); the calibration "
                                        "store is damaged") from None
        if not isinstance(value, dict):
            raise CalibrationStoreError(f"{self.path / rel}: not a JSON object; the calibration store is damaged")
        return value

    def _check_chunks(self, name: str, rows: int | None) -> None:
        """Every chunk file of array ``name`` covering its first ``rows`` simulations (None: all
        of a fixed array) exists and is a regular file: zarr would read a missing one as zeros
        (ranks 0, names ''); a FIFO or a link is named here, before anything reads it."""
        arr = self.root[name]
        extent = list(arr.shape)
        if rows is not None:
            extent[0] = rows
        try:
            found = first_bad_chunk(self.path / name, extent, arr.chunks)
        except OSError as err:
            raise self._error(f"array {name!r} is unreadable ({err.strerror or err})") from None
        if found is None:
            return
        key, what = found
        if what != "missing":
            raise CalibrationStoreError(f"{self.path / name / key}: {what}, not a regular file (a chunk file of "
                                        f"{name}); the calibration store is damaged")
        raise CalibrationStoreError(f"{self.path / name / key}: missing chunk file of {name}: the "
                                    "calibration store is damaged (zarr would read it as zeros)")

    def _read(self, name: str, selection) -> np.ndarray:
        arr = self.root[name]
        try:
            return np.asarray(arr[selection])
        except Exception as err:  # noqa: BLE001 - zarr and the codecs raise many kinds
            found = damaged_chunk(arr, selection if isinstance(selection, tuple) else (selection,))
            if found is None:
                raise self._error(f"cannot read {name} ({err})") from None
            key, chunk_err = found
            if isinstance(chunk_err, NotRegularFile):
                raise CalibrationStoreError(f"{chunk_err.strerror} (a chunk file of {name}); the calibration "
                                            "store is damaged") from None
            raise CalibrationStoreError(f"{self.path / name / key}: damaged chunk of {name} (truncated or "
                                        f"corrupt: {chunk_err})") from None

    def _rows(self, name: str) -> np.ndarray:
        return self._read(name, slice(0, self.progress["simulations"]))

    @property
    def status(self) -> str:
        return self.attrs["status"]

    @property
    def error(self) -> str:
        return str(self.attrs.get("error", ""))

    @property
    def config_text(self) -> str:
        return self.attrs["config"]

    @property
    def quantities(self) -> list[str]:
        return list(self._quantities)

    @property
    def draws(self) -> int:
        return int(self.attrs["draws_per_simulation"])

    @property
    def simulations(self) -> int:
        return int(self.attrs["simulations"])

    @property
    def simulations_done(self) -> int:
        return int(self.progress["simulations"])

    @property
    def has_field(self) -> bool:
        return self.attrs["model_kind"] == "field"

    def _ranks(self, name: str) -> np.ndarray:
        ranks = self._rows(name).astype(np.int64)
        if ranks.size and (ranks.min() < 0 or ranks.max() > self.draws):
            raise self._error(f"array {name!r} holds ranks outside 0..{self.draws}: damaged")
        return ranks

    def ranks(self) -> np.ndarray:
        """(finished simulations, quantities) ranks in 0..draws."""
        return self._ranks("rank")

    def truth(self) -> np.ndarray:
        return self._rows("truth")

    def posterior_mean(self) -> np.ndarray:
        return self._rows("posterior_mean")

    def posterior_sd(self) -> np.ndarray:
        return self._rows("posterior_sd")

    def divergences(self) -> np.ndarray:
        return self._rows("divergences")

    def simulation_index(self) -> np.ndarray:
        return self._rows("simulation")

    def voxel_ranks(self) -> np.ndarray:
        """(finished simulations, x, y, z) ranks at every voxel (field model)."""
        return self._ranks("voxel_rank")

    def k(self) -> np.ndarray:
        return self._read("k", slice(None)) if self.has_field else np.zeros(0)

    def coverage(self) -> np.ndarray:
        """(levels, quantities) from the finished simulations' ranks (as stored)."""
        return coverage(self.ranks(), self.draws, LEVELS)

    def voxel_coverage(self) -> np.ndarray:
        return coverage(self.voxel_ranks(), self.draws, LEVELS)

    def verdict(self) -> Verdict:
        return judge(self.ranks(), self.quantities, self.draws, LEVELS)
