"""The run store: one directory per run, Zarr (format 2) laid out as ArviZ InferenceData.

numpy + zarr only (the GUI process reads stores; no TensorFlow). Layout::

    RUNDIR/
      run.zarr/                         xarray.open_datatree(RUNDIR/run.zarr, engine="zarr")
        .zattrs                         config (TOML text), config_dir (the folder its paths are
                                        relative to), fieldscope_version, status, error,
                                        model_kind, progress {warmup_draws, draws, field_draws,
                                        chunks}, timing {warmup_seconds, sampling_seconds},
                                        chains, num_warmup, num_samples, thin, ...
        posterior/<param>               (chain, draw)       every post-warmup draw
        warmup_posterior/<param>        (chain, draw)       every warmup draw
        sample_stats/<stat>             (chain, draw)       lp, acceptance_rate, step_size,
                                                            energy_error, diverging, n_steps,
                                                            grad_norm
        warmup_sample_stats/<stat>      (chain, draw)
        posterior_field/field           (chain, field_draw, x, y, z)   every thin-th draw
        posterior_field/power           (chain, field_draw, k)         P(k) of each field draw
        posterior_field/field_draw      (field_draw,)       index of each field draw in `draw`
        posterior_field/k, k_count      (k,)                shell centres and mode counts
        field_moments/mean, std         (x, y, z)           over all post-warmup draws so far
        observed_data/data, mask        (x, y, z)           (integral model: t, y (time,))
      checkpoint.npz                    exact state to resume the same chains

Concurrency and crashes. After each chunk the writer appends every array, then updates
the root attribute ``progress``, re-consolidates the metadata, and finally replaces
``checkpoint.npz`` atomically. Readers (another process, the GUI) read ``progress`` first
and use only that many draws, so a store that is being written is always readable.
A process killed mid-chunk leaves arrays possibly longer than ``progress`` says; resume
truncates them back to the checkpoint's counts.

Write failures. Every file is written whole or not at all (zarr's local store writes a
temporary file and renames it; so does ``write_checkpoint``), so a write that fails (a
full disk: ENOSPC) leaves every chunk published before readable. The writer raises
``StoreWriteError`` naming the write and the OS's reason; the engine ends the run as
failed, and resume continues from the last checkpoint once the cause is gone.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zarr

from core import __version__
from core.run.messages import STAT_DTYPES, STAT_NAMES, STORE_STATUSES, new_progress

__all__ = ["STORE_NAME", "CHECKPOINT_NAME", "RunStoreError", "StoreWriteError", "ChunkRecord",
           "RunStoreWriter", "write_checkpoint", "read_checkpoint", "RunReader", "StoredConfig",
           "stored_run_config", "remove_run"]

STORE_NAME = "run.zarr"
CHECKPOINT_NAME = "checkpoint.npz"


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


def _write_error(run_dir, what: str, exc: OSError) -> StoreWriteError:
    import errno as errno_mod

    code = errno_mod.errorcode.get(exc.errno, "") if exc.errno is not None else ""
    reason = exc.strerror or str(exc) or type(exc).__name__
    return StoreWriteError(f"{run_dir}: {what} failed: {reason}" + (f" [{code}]" if code else ""),
                           exc.errno)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _open_root(store_path: Path, mode: str):
    # Never through the consolidated metadata: it is a snapshot, and the group would keep
    # handing out arrays with the shapes they had when it was opened. (It is rewritten after
    # every chunk for xarray / ArviZ, which read a store once.)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zarr.open_group(str(store_path), mode=mode, zarr_format=2, use_consolidated=False)


def _consolidate(store_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(str(store_path))


@dataclass
class ChunkRecord:
    """What one chunk adds to the store (numpy arrays, chain-major).

    ``warmup_stats`` / ``stats``: name -> (chains, n) arrays for the warmup and post-warmup
    steps of the chunk (n may be 0); the same for ``warmup_params`` / ``params``.
    ``fields``: (chains, n_field, x, y, z) float32; ``powers``: (chains, n_field, k);
    ``field_draw_index``: (n_field,) index into ``draw``. ``moments``: (mean, std, count).
    """

    warmup_stats: dict
    stats: dict
    warmup_params: dict
    params: dict
    fields: np.ndarray | None = None
    powers: np.ndarray | None = None
    field_draw_index: np.ndarray | None = None
    moments: tuple | None = None


class RunStoreWriter:
    """Creates a run store and appends chunks to it (one writer per run)."""

    def __init__(self, run_dir: Path, root):
        self.run_dir = Path(run_dir)
        self.store_path = self.run_dir / STORE_NAME
        self.root = root

    # -- creation ---------------------------------------------------------------

    @classmethod
    def create(cls, run_dir, *, config_text: str, config_dir=None, model_kind: str, chains: int,
               num_warmup: int,
               num_samples: int, thin: int, param_names: list[str], observed: dict[str, tuple],
               grid_shape: tuple | None = None, k_centres=None, k_counts=None,
               extra_attrs: dict | None = None) -> "RunStoreWriter":
        """A new, empty store. ``observed``: name -> (dims, array). ``config_text`` and
        ``config_dir`` (the folder its relative paths are resolved from; None: the run
        directory) are what ``RunReader.stored_config`` gives back."""
        run_dir = Path(run_dir)
        if (run_dir / STORE_NAME).exists():
            raise RunStoreError(f"{run_dir}: already holds a run; resume it, or choose a new directory")
        # Built complete under a temporary name, then renamed: a reader never sees half a store.
        building = run_dir / (STORE_NAME + ".creating")
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(building, ignore_errors=True)
            root = _open_root(building, "w")
        except OSError as err:
            raise RunStoreError(f"{run_dir}: cannot create the run store: {err}") from None
        try:
            if config_dir is not None:
                extra_attrs = {"config_dir": str(config_dir), **(extra_attrs or {})}
            return cls._build(run_dir, building, root, config_text=config_text,
                              model_kind=model_kind, chains=chains, num_warmup=num_warmup,
                              num_samples=num_samples, thin=thin, param_names=param_names,
                              observed=observed, grid_shape=grid_shape, k_centres=k_centres,
                              k_counts=k_counts, extra_attrs=extra_attrs)
        except OSError as err:
            shutil.rmtree(building, ignore_errors=True)
            raise _write_error(run_dir, "creating the run store", err) from None

    @classmethod
    def _build(cls, run_dir: Path, building: Path, root, *, config_text, model_kind, chains,
               num_warmup, num_samples, thin, param_names, observed, grid_shape, k_centres,
               k_counts, extra_attrs) -> "RunStoreWriter":
        root.attrs.update({
            "config": config_text, "fieldscope_version": __version__, "status": "created",
            "error": "", "model_kind": model_kind, "created": _now(), "updated": _now(),
            "chains": int(chains), "num_warmup": int(num_warmup), "num_samples": int(num_samples),
            "thin": int(thin), "param_names": list(param_names),
            "progress": dict(new_progress()),
            **(extra_attrs or {}),
        })
        writer = cls(run_dir, root)
        writer.store_path = building
        for group in ("posterior", "warmup_posterior"):
            g = root.create_group(group)
            for name in param_names:
                writer._new_array(g, name, (chains, 0), (chains, 1024), "float64", ["chain", "draw"])
        for group in ("sample_stats", "warmup_sample_stats"):
            g = root.create_group(group)
            for name in STAT_NAMES:
                writer._new_array(g, name, (chains, 0), (chains, 1024),
                                  STAT_DTYPES[name].name if name in STAT_DTYPES else "float64",
                                  ["chain", "draw"])
        obs = root.create_group("observed_data")
        for name, (dims, values) in observed.items():
            values = np.asarray(values)
            arr = writer._new_array(obs, name, values.shape, values.shape or (1,), values.dtype.str, dims)
            arr[...] = values
        if grid_shape is not None:
            pf = root.create_group("posterior_field")
            writer._new_array(pf, "field", (chains, 0, *grid_shape), (1, 1, *grid_shape), "float32",
                              ["chain", "field_draw", "x", "y", "z"])
            nk = len(k_centres)
            writer._new_array(pf, "power", (chains, 0, nk), (chains, 256, nk), "float64",
                              ["chain", "field_draw", "k"])
            writer._new_array(pf, "field_draw", (0,), (4096,), "int64", ["field_draw"])
            k_arr = writer._new_array(pf, "k", (nk,), (nk,), "float64", ["k"])
            k_arr[...] = np.asarray(k_centres, float)
            c_arr = writer._new_array(pf, "k_count", (nk,), (nk,), "int64", ["k"])
            c_arr[...] = np.asarray(k_counts, np.int64)
            fm = root.create_group("field_moments")
            for name in ("mean", "std"):
                writer._new_array(fm, name, tuple(grid_shape), tuple(grid_shape), "float64", ["x", "y", "z"])
            fm.attrs["count"] = 0
        _consolidate(building)
        os.replace(building, run_dir / STORE_NAME)
        writer.store_path = run_dir / STORE_NAME
        writer.root = _open_root(writer.store_path, "r+")
        return writer

    @staticmethod
    def _new_array(group, name, shape, chunks, dtype, dims):
        # no fill value: xarray would read values equal to it as missing (NaN)
        arr = group.create_array(name, shape=tuple(shape), chunks=tuple(max(1, c) for c in chunks),
                                 dtype=dtype, fill_value=None)
        arr.attrs["_ARRAY_DIMENSIONS"] = list(dims)
        return arr

    # -- resume -----------------------------------------------------------------

    @classmethod
    def reopen(cls, run_dir, progress: dict) -> "RunStoreWriter":
        """Open an existing store for appending, truncated to ``progress`` (the checkpoint's)."""
        run_dir = Path(run_dir)
        try:
            root = _open_root(run_dir / STORE_NAME, "r+")
        except Exception as err:  # zarr raises several kinds for a missing or broken store
            raise RunStoreError(f"{run_dir}: no readable run store ({err})") from None
        writer = cls(run_dir, root)
        try:
            writer._truncate(progress)
        except OSError as err:
            raise _write_error(run_dir, "truncating the run store to its checkpoint", err) \
                from None
        return writer

    def _truncate(self, progress: dict) -> None:
        sizes = {"warmup": progress["warmup_draws"], "": progress["draws"]}
        for prefix, n in sizes.items():
            for group in (f"{prefix}_posterior" if prefix else "posterior",
                          f"{prefix}_sample_stats" if prefix else "sample_stats"):
                for _, arr in self.root[group].arrays():
                    if arr.shape[1] != n:
                        arr.resize((arr.shape[0], n))
        if "posterior_field" in self.root:
            pf = self.root["posterior_field"]
            n = progress["field_draws"]
            for name in ("field", "power"):
                arr = pf[name]
                if arr.shape[1] != n:
                    arr.resize((arr.shape[0], n, *arr.shape[2:]))
            if pf["field_draw"].shape[0] != n:
                pf["field_draw"].resize((n,))
        self.root.attrs["progress"] = dict(progress)
        _consolidate(self.store_path)

    # -- appending ---------------------------------------------------------------

    def append(self, record: ChunkRecord, progress: dict, timing: dict | None = None) -> None:
        """Append one chunk, then publish ``progress`` (readers trust only that) and, when
        given, ``timing`` (root attribute: warmup_seconds, sampling_seconds, the wall time
        of the chunks so far, for ESS per second).

        A failing write (OSError) raises StoreWriteError; the chunks of the ``progress``
        published before stay readable (readers and resume use only those)."""
        try:
            self._append(record, progress, timing)
        except OSError as err:
            raise _write_error(self.run_dir, f"writing chunk {progress.get('chunks', '?')} "
                               "to the run store", err) from None

    def _append(self, record: ChunkRecord, progress: dict, timing: dict | None) -> None:
        r = self.root
        for group, values in (("warmup_sample_stats", record.warmup_stats), ("sample_stats", record.stats),
                              ("warmup_posterior", record.warmup_params), ("posterior", record.params)):
            for name, arr in values.items():
                if arr.shape[1]:
                    r[group][name].append(np.asarray(arr), axis=1)
        if record.fields is not None and record.fields.shape[1]:
            pf = r["posterior_field"]
            pf["field"].append(record.fields.astype(np.float32), axis=1)
            pf["power"].append(record.powers, axis=1)
            pf["field_draw"].append(np.asarray(record.field_draw_index, np.int64))
        if record.moments is not None:
            mean, std, count = record.moments
            fm = r["field_moments"]
            fm["mean"][...] = mean
            fm["std"][...] = std
            fm.attrs["count"] = int(count)
        attrs = {"progress": dict(progress), "updated": _now()}
        if timing is not None:
            attrs["timing"] = {key: float(value) for key, value in timing.items()}
        r.attrs.update(attrs)
        _consolidate(self.store_path)

    def set_status(self, status: str, error: str = "") -> None:
        if status not in STORE_STATUSES:
            raise ValueError(f"unknown run status {status!r}")
        try:
            self.root.attrs.update({"status": status, "error": error, "updated": _now()})
            _consolidate(self.store_path)
        except OSError as err:
            raise _write_error(self.run_dir, f"recording the status {status!r}", err) \
                from None


# ---------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------


def write_checkpoint(run_dir, arrays: dict[str, np.ndarray], meta: dict) -> None:
    """Atomically replace RUNDIR/checkpoint.npz (write a temporary file, fsync, rename).

    A failing write raises StoreWriteError and leaves the previous checkpoint in place."""
    run_dir = Path(run_dir)
    tmp = str(run_dir / f".checkpoint-{os.urandom(8).hex()}.npz")
    try:       # mode 0666 less the umask, like the store's files (core.store.run_lock: file modes)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as err:
        raise _write_error(run_dir, "writing the checkpoint", err) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, __meta__=np.array(json.dumps(meta)), **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, run_dir / CHECKPOINT_NAME)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(err, OSError):
            raise _write_error(run_dir, "writing the checkpoint", err) from None
        raise


def read_checkpoint(run_dir) -> tuple[dict[str, np.ndarray], dict]:
    path = Path(run_dir) / CHECKPOINT_NAME
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files if k != "__meta__"}
            meta = json.loads(str(data["__meta__"]))
    except FileNotFoundError:
        raise RunStoreError(f"{run_dir}: no checkpoint; the run has not completed a chunk, "
                            "start it again instead of resuming") from None
    except Exception as err:
        raise RunStoreError(f"{path}: unreadable checkpoint ({err})") from None
    return arrays, meta


# ---------------------------------------------------------------------------
# Reading (also while another process writes)
# ---------------------------------------------------------------------------


class RunReader:
    """Read a run store, live or finished. Call :meth:`refresh` to see new chunks."""

    def __init__(self, run_dir):
        self.run_dir = Path(run_dir)
        self.store_path = self.run_dir / STORE_NAME
        if not self.store_path.exists():
            raise RunStoreError(f"{self.run_dir}: not a Fieldscope run directory (no {STORE_NAME})")
        self.refresh()

    def refresh(self) -> dict:
        try:
            self.root = _open_root(self.store_path, "r")
            self.attrs = dict(self.root.attrs)
        except Exception as err:
            raise RunStoreError(f"{self.run_dir}: unreadable run store ({err})") from None
        if "progress" not in self.attrs:
            raise RunStoreError(f"{self.run_dir}: the run store has no progress record (not a "
                                "Fieldscope run, or a damaged one)")
        self.progress = dict(self.attrs["progress"])
        return self.progress

    @property
    def status(self) -> str:
        return self.attrs.get("status", "")

    @property
    def config_text(self) -> str:
        return self.attrs.get("config", "")

    @property
    def stored_config(self) -> "StoredConfig":
        """The config the run was started with (text and folder; ``StoredConfig``)."""
        return StoredConfig(self.config_text, self.attrs.get("config_dir") or str(self.run_dir),
                            f"{self.run_dir} (stored config)")

    @property
    def param_names(self) -> list[str]:
        return list(self.attrs.get("param_names", []))

    def _series(self, group: str, name: str, n: int, start: int = 0,
                stop: int | None = None) -> np.ndarray:
        arr = self.root[group][name]
        stop = n if stop is None else min(int(stop), n)
        return np.asarray(arr[:, int(start):stop])

    def stat(self, name: str, warmup: bool = False, start: int = 0,
             stop: int | None = None) -> np.ndarray:
        """(chain, draw) array of a sample statistic, committed draws only (draws
        ``start`` to ``stop``, at most what ``progress`` publishes)."""
        if warmup:
            return self._series("warmup_sample_stats", name, self.progress["warmup_draws"],
                                start, stop)
        return self._series("sample_stats", name, self.progress["draws"], start, stop)

    def param(self, name: str, warmup: bool = False, start: int = 0,
              stop: int | None = None) -> np.ndarray:
        """(chain, draw) array of a sampled parameter; draws as in :meth:`stat`."""
        if warmup:
            return self._series("warmup_posterior", name, self.progress["warmup_draws"],
                                start, stop)
        return self._series("posterior", name, self.progress["draws"], start, stop)

    @property
    def has_field(self) -> bool:
        return "posterior_field" in self.root

    @property
    def grid_shape(self) -> tuple[int, ...] | None:
        """(x, y, z) of the field draws, or None for a run without a field."""
        if not self.has_field:
            return None
        return tuple(int(n) for n in self.root["posterior_field"]["field"].shape[2:])

    def shells(self) -> tuple[np.ndarray, np.ndarray]:
        """(k centres, mode counts) of the P(k) shells of a field run."""
        pf = self.root["posterior_field"]
        return np.asarray(pf["k"][:]), np.asarray(pf["k_count"][:])

    def field_draw_steps(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """(m,) index in ``draw`` (post-warmup) of the kept field draws ``start`` to ``stop``
        (at most the published ones)."""
        n = self.progress["field_draws"]
        stop = n if stop is None else min(int(stop), n)
        return np.asarray(self.root["posterior_field"]["field_draw"][int(start):stop], np.int64)

    def field_draw(self, index: int) -> np.ndarray:
        """(chain, x, y, z) kept field draw number ``index``."""
        return np.asarray(self.root["posterior_field"]["field"][:, int(index)])

    def power_draw(self, index: int) -> np.ndarray:
        """(chain, k) P(k) of kept field draw number ``index``."""
        return np.asarray(self.root["posterior_field"]["power"][:, int(index)])

    def voxel_trace(self, voxel, start: int = 0, stop: int | None = None) -> np.ndarray:
        """(chain, m) one voxel's value in the kept field draws ``start`` to ``stop``
        (reads only that voxel)."""
        n = self.progress["field_draws"]
        stop = n if stop is None else min(int(stop), n)
        arr = self.root["posterior_field"]["field"]
        return np.asarray(arr.get_orthogonal_selection(
            (slice(None), slice(int(start), stop), *(int(v) for v in voxel))))

    @property
    def moment_count(self) -> int:
        """How many draws the stored field moments are over (0 before the first)."""
        return int(self.root["field_moments"].attrs.get("count", 0))

    def field_draws(self, chain=slice(None), draws=slice(None)) -> np.ndarray:
        n = self.progress["field_draws"]
        arr = self.root["posterior_field"]["field"]
        idx = np.arange(n)[draws]
        return np.asarray(arr.get_orthogonal_selection((chain, idx, slice(None), slice(None), slice(None))))

    def powers(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(k centres, mode counts, power (chain, field_draw, k))."""
        pf = self.root["posterior_field"]
        n = self.progress["field_draws"]
        return np.asarray(pf["k"][:]), np.asarray(pf["k_count"][:]), np.asarray(pf["power"][:, :n])

    def field_moments(self) -> tuple[np.ndarray, np.ndarray, int]:
        fm = self.root["field_moments"]
        return np.asarray(fm["mean"][:]), np.asarray(fm["std"][:]), int(fm.attrs.get("count", 0))

    def observed(self, name: str) -> np.ndarray:
        return np.asarray(self.root["observed_data"][name][...])

    def observed_data(self) -> dict[str, np.ndarray]:
        """Every array of ``observed_data`` (data, mask, noise, truth; t, y), by name."""
        if "observed_data" not in self.root:
            return {}
        return {name: self.observed(name) for name in self.root["observed_data"].array_keys()}


@dataclass(frozen=True)
class StoredConfig:
    """The config a run was started with, as its store keeps it: the exact ``text``, the
    folder ``base_dir`` its relative paths are resolved from (the config's folder when
    the run started) and ``source``, how messages name it."""

    text: str
    base_dir: str
    source: str

    def parse(self):
        """The ``core.config.RunConfig``; ConfigError when the text does not parse."""
        from core.config import parse_config

        return parse_config(self.text, base_dir=self.base_dir, source=self.source)


def stored_run_config(run_dir) -> tuple:
    """(``core.config.RunConfig``, text) of the config a run was started with, parsed
    relative to its original folder (what ``fieldscope resume`` runs)."""
    stored = RunReader(run_dir).stored_config
    return stored.parse(), stored.text


def remove_run(run_dir) -> None:
    """Delete a run directory (used by tests and by 'start again')."""
    shutil.rmtree(run_dir, ignore_errors=True)
