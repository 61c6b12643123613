"""The state of one run as the GUI sees it: plain Python + numpy, no Qt.

``RunState`` is the single source of truth for a live run (fed with the engine's "chunk"
and "status" events, ``core.run.messages``) or a stored one (read through the run store's
``RunReader``, also while another process writes it). Views hold a reference to it, read its arrays and never keep settings about
the run themselves (napari's model / glue's viewer state: the model knows nothing of the
widgets that draw it).

Layout of what it holds, with ``n`` the number of steps received so far:

    steps                 (n,)          global step index g of each recorded step; warmup is
                                        g < num_warmup, draw d of the posterior is g = num_warmup + d
    stat(name)            (chains, n)   lp, acceptance_rate, step_size, energy_error,
                                        grad_norm, diverging (bool), n_steps (int32)
    param(name)           (chains, n)   each sampled hyperparameter (constrained value)
    latest_field          (chains, x, y, z)  the most recent kept field draw, latest_field_step its g
                                        (from a store: a FieldVolume, below)
    latest_power          (chains, k)   its P(k); k_centres (k,) the shell centres
    mean, std             (x, y, z)     running posterior moments over every post-warmup draw
    observed[name]        the run store's observed_data (data with NaN where masked, mask, noise,
                                        truth when the data set has one; t, y for the integral model)
                          or, before any run, the data preview's (below)
    pins[(i, j, k)]       PinnedTrace: steps (m,), values (chains, m) of one voxel

The arrays returned by ``steps``, ``stat``, ``param`` and ``PinnedTrace`` are views into
buffers that grow by doubling; read them, copy them if kept, never write them.

Field-shaped arrays of a stored run. Fed by events, ``latest_field``, ``mean`` and ``std``
are numpy arrays (the engine sends them). Read from a store (``source == "store"``: a run
opened or watched) they are ``core.store.run_store.FieldVolume`` s instead: nothing is read
until a view indexes them, and then only the blocks it asks for (a slice view's three
planes, the voxel under the cursor); ``np.asarray`` reads one whole (the 3D view's block
means and the P(k) view's FFTs do, in their worker threads). So this state holds no field
draw of a stored run, however many the run keeps, and the GUI thread never reads one
whole; ``volume("residual")`` is a ``LazyResidual`` of the same kind.

Change tracking. ``version`` increases on every change; ``trace_version`` when the
per-step series or the pinned traces change, ``field_version`` when a field-shaped array
(latest draw, moments, observed data) changes, ``layout_version`` when the run itself
changes (``reset``, or chains, parameters or grid learned later from the first chunk or
the store). A view redraws only when the counter it depends on moved.

Data preview. Before a run is started or opened, ``show_preview(DataPreview)`` makes the
state show the data file chosen in the Data panel: ``grid_shape`` is the data's shape,
``observed`` holds its data (as read, not masked), mask, noise sd and truth, no chains,
``is_preview`` is True, and ``config_text`` is the current config (the P(k) view's grid
and prior; ``set_preview_config`` follows edits). The arrays are the Data panel's own
(no copy). A run started from the preview keeps showing them (``preview_meta``: they
are *provisional*) until its store's observed_data replace them; a run opened from a
store replaces them at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.run import messages as msgs
from core.run.messages import STAT_DTYPES, STAT_NAMES
from core.store.run_store import STORE_NAME, FieldVolume, RunReader, RunStoreError, StoredConfig

__all__ = ["RunState", "GrowingBuffer", "PinnedTrace", "DataPreview", "LazyResidual", "StoreLook",
           "StoreUpdate", "read_store_update", "VOLUME_KINDS", "VOLUME_LABELS"]

#: What the slice views can show, in menu order (see :meth:`RunState.volume`).
VOLUME_KINDS = ("data", "mask", "noise", "latest", "mean", "std", "residual", "truth")
VOLUME_LABELS = {
    "data": "data",
    "mask": "mask",
    "noise": "noise sd",
    "latest": "latest draw",
    "mean": "posterior mean",
    "std": "posterior std",
    "residual": "residual (data - mean)",
    "truth": "truth",
}


class GrowingBuffer:
    """An array that grows along its last axis, doubling its capacity when full.

    ``GrowingBuffer((chains,), float)`` holds (chains, n); ``GrowingBuffer((), int)`` holds (n,).
    Appending m values costs O(m) amortised; ``data`` is a view of the filled part.
    """

    def __init__(self, lead_shape=(), dtype=np.float64, capacity: int = 256):
        self.lead_shape = tuple(lead_shape)
        self._buf = np.empty((*self.lead_shape, max(1, int(capacity))), dtype=dtype)
        self.n = 0

    def __len__(self) -> int:
        return self.n

    @property
    def capacity(self) -> int:
        return self._buf.shape[-1]

    @property
    def data(self) -> np.ndarray:
        return self._buf[..., : self.n]

    def append(self, block) -> None:
        block = np.asarray(block)
        if block.shape[:-1] != self.lead_shape:
            raise ValueError(f"block of shape {block.shape} does not fit a buffer of "
                             f"shape {(*self.lead_shape, 'n')}")
        m = block.shape[-1]
        if self.n + m > self.capacity:
            new_cap = self.capacity
            while new_cap < self.n + m:
                new_cap *= 2
            grown = np.empty((*self.lead_shape, new_cap), dtype=self._buf.dtype)
            grown[..., : self.n] = self._buf[..., : self.n]
            self._buf = grown
        self._buf[..., self.n: self.n + m] = block
        self.n += m

    def truncate(self, n: int) -> None:
        self.n = max(0, min(int(n), self.n))


@dataclass
class PinnedTrace:
    """The value of one voxel in the thinned field draws that reached this state.

    In a live run (engine events) that is the last kept field draw of each chunk, one point
    per chunk; read from a store it is every stored (every ``thin``-th post-warmup) draw.
    When a voxel is pinned during a live run whose store is readable, the draws stored so
    far are filled in first, so the trace starts at the first draw either way.
    """

    voxel: tuple
    serial: int            # the how-many-th pin of this state (views pick its colour from it)
    _steps: GrowingBuffer
    _values: GrowingBuffer

    @property
    def steps(self) -> np.ndarray:
        """(m,) global step index of each point."""
        return self._steps.data

    @property
    def values(self) -> np.ndarray:
        """(chains, m) the voxel's value in each chain."""
        return self._values.data

    def __len__(self) -> int:
        return len(self._steps)

    def append(self, steps, values) -> None:
        steps = np.atleast_1d(np.asarray(steps, np.int64))
        values = np.asarray(values, np.float64).reshape(self._values.lead_shape + (len(steps),))
        self._steps.append(steps)
        self._values.append(values)

    def truncate_from(self, step: int) -> None:
        """Drop points at global step >= ``step`` (a resumed run repeats them)."""
        self._steps.truncate(int(np.searchsorted(self.steps, step, side="left")))
        self._values.truncate(len(self._steps))


class LazyResidual:
    """data - mean where the mean is a stored ``FieldVolume``: indexing reads only the mean's
    blocks the selection covers; ``np.asarray`` computes it whole."""

    def __init__(self, data: np.ndarray, mean: FieldVolume):
        self.data, self.mean = data, mean
        self.shape, self.ndim = tuple(data.shape), data.ndim
        self.dtype = np.result_type(data.dtype, mean.dtype)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def block_shape(self) -> tuple[int, ...]:
        return self.mean.block_shape

    def __getitem__(self, key):
        return self.data[key] - self.mean[key]

    def __array__(self, dtype=None, copy=None):
        values = self.data - self.mean[...]
        return values if dtype is None else values.astype(dtype, copy=False)


@dataclass(frozen=True, eq=False)
class StoreLook:
    """What ``read_store_update`` needs of a ``RunState`` (``RunState.store_look``): its
    store, its reader (the identity a later update is checked against), the counts it has
    seen, its chains, the statistics and parameters it keeps and its pinned voxels."""

    run_dir: Path
    reader: RunReader
    seen: dict
    chains: int | None
    stat_names: tuple
    param_names: tuple
    pins: tuple
    num_warmup: int


@dataclass(frozen=True, eq=False)
class StoreUpdate:
    """What a look at the store found (``read_store_update``), for ``RunState.take_store_update``.

    ``reader`` is a new ``RunReader`` of the store (nothing else holds it, so the thread
    that read it never shares one being refreshed); ``series`` is, per new range of steps,
    (steps, stats, params), or None when the state's chains are unknown; ``field`` is (f0,
    f1, steps of the new kept field draws, the newest as a FieldVolume, its P(k), {pinned
    voxel: (chains, f1 - f0) values}) or None; ``moments`` is (mean, std, count) when the
    count moved; ``error`` a store that could not be read (its RunStoreError's text)."""

    look: StoreLook
    reader: RunReader | None = None
    error: str = ""
    status: str = ""
    error_attr: str = ""
    num_samples: int = 0
    progress: dict | None = None
    series: list | None = None
    warmup_draws: int = 0
    draws: int = 0
    field: tuple | None = None
    moments: tuple | None = None


def read_store_update(look: StoreLook) -> StoreUpdate:
    """Read what the store gained since ``look.seen`` (any thread: it touches no state).

    Everything the store holds per step (statistics, parameters, pinned voxels, P(k)) of
    the new steps is read here; field draws and moments are not read, only described
    (``FieldVolume`` s: the views read them by block, the P(k) and 3D workers whole). The
    store's layout check (``RunReader``) lists the chunk files of the published draws, so
    its cost grows with the run: one reason this runs off the GUI thread."""
    try:
        reader = RunReader(look.run_dir)
        progress = reader.progress
        a = reader.attrs
        header = dict(status=a.get("status", ""), error_attr=a.get("error", ""),
                      num_samples=int(a.get("num_samples", 0)), progress=dict(progress))
        seen = look.seen
        w1, d1 = int(progress.get("warmup_draws", 0)), int(progress.get("draws", 0))
        if look.chains is None:
            return StoreUpdate(look, reader, warmup_draws=seen["warmup_draws"], draws=seen["draws"], **header)
        series = []
        for warmup, a0, a1, offset in ((True, seen["warmup_draws"], w1, 0),
                                       (False, seen["draws"], d1, look.num_warmup)):
            if a1 <= a0:
                continue
            series.append((np.arange(a0, a1, dtype=np.int64) + offset,
                           {name: reader.stat(name, warmup, a0, a1) for name in look.stat_names},
                           {name: reader.param(name, warmup, a0, a1) for name in look.param_names}))
        field = moments = None
        if reader.has_field:
            f0, f1 = seen["field_draws"], int(progress.get("field_draws", 0))
            if f1 > f0:
                steps = reader.field_draw_steps(f0, f1) + look.num_warmup
                traces = {voxel: reader.voxel_trace(voxel, f0, f1) for voxel in look.pins}
                field = (f0, f1, steps, reader.field_volume(f1 - 1), reader.power_draw(f1 - 1), traces)
            count = reader.moment_count
            if count != seen["moment_count"]:
                moments = (reader.moment_volume("mean"), reader.moment_volume("std"), count)
        return StoreUpdate(look, reader, series=series, warmup_draws=w1, draws=d1, field=field,
                           moments=moments, **header)
    except (RunStoreError, KeyError, OSError) as err:
        return StoreUpdate(look, error=str(err) or type(err).__name__)


@dataclass(frozen=True, eq=False)
class DataPreview:
    """The arrays of a data file before any run (what the Data panel read; no copies).

    data    (x, y, z) real array as read from the file (masked voxels keep their values)
    mask    (x, y, z) bool, True = observed, or None (no mask, or it could not be read)
    noise   (x, y, z) noise sd map, or None; a single sd for every voxel is a read-only
            broadcast view (no memory)
    truth   the file's "truth" array, or None
    path    the data file;  notes: why a mask or noise map is not shown
    """

    data: np.ndarray
    mask: np.ndarray | None = None
    noise: np.ndarray | None = None
    truth: np.ndarray | None = None
    path: str = ""
    notes: tuple[str, ...] = ()

    def observed(self) -> dict[str, np.ndarray]:
        """The arrays by their run-store names (data, mask, noise, truth)."""
        return {name: value for name, value in (("data", self.data), ("mask", self.mask),
                                                ("noise", self.noise), ("truth", self.truth))
                if value is not None}


class RunState:
    """Everything the views draw about one run. See the module docstring for the layout."""

    def __init__(self):
        self.version = 0
        self.trace_version = 0
        self.field_version = 0
        self.layout_version = 0
        self.reset({})

    # -- set-up -------------------------------------------------------------------------

    def reset(self, meta: dict) -> None:
        """Forget everything and describe a new run.

        ``meta`` keys (all optional; what is missing is filled from the first chunk or the
        run store): ``chains``, ``param_names``, ``grid_shape`` (None for a run without a
        field), ``num_warmup``, ``num_samples``, ``thin``, ``steps_total`` (default
        num_warmup + num_samples), ``k_centres``, ``k_counts``, ``model_kind``, ``status``,
        ``observed`` (name -> array), ``run_dir`` (its observed_data is read as soon as the
        store exists).
        """
        meta = dict(meta)
        self.chains = int(meta["chains"]) if meta.get("chains") is not None else None
        self.param_names = list(meta.get("param_names") or [])
        gs = meta.get("grid_shape")
        self.grid_shape = tuple(int(v) for v in gs) if gs is not None else None
        self.num_warmup = int(meta.get("num_warmup") or 0)
        self.num_samples = int(meta.get("num_samples") or 0)
        self.thin = int(meta.get("thin") or 1)
        total = meta.get("steps_total")
        self.steps_total = int(total) if total is not None else self.num_warmup + self.num_samples
        self.k_centres = None if meta.get("k_centres") is None else np.asarray(meta["k_centres"], float)
        self.k_counts = None if meta.get("k_counts") is None else np.asarray(meta["k_counts"])
        self.model_kind = meta.get("model_kind", "field" if self.grid_shape else "")
        self.status = meta.get("status", "created")
        self.error = ""
        self.phase = ""
        self.run_dir = Path(meta["run_dir"]) if meta.get("run_dir") else None
        self.observed: dict[str, np.ndarray] = {name: np.asarray(v) for name, v in
                                                (meta.get("observed") or {}).items()}
        # shown until the run store's observed_data replace them (a run started from a preview)
        self._provisional = set()
        for name, value in (meta.get("provisional") or {}).items():
            if name not in self.observed:
                self.observed[name] = value
                self._provisional.add(name)
        self.preview: DataPreview | None = None
        self.config_text = str(meta.get("config_text") or "")
        self.config_dir = str(meta.get("config_dir") or "")
        self._config = None
        self.progress = dict(msgs.new_progress())
        self.source = "events"          # "events": fed by the engine; "store": read from the store
        self.steps_per_second = 0.0
        self.total_elapsed = 0.0
        self.latest_field = None
        self.latest_field_step = -1
        self.latest_power = None
        self.mean = None
        self.std = None
        self.moment_count = 0
        self.pins: dict[tuple, PinnedTrace] = {}
        self._pin_serial = 0
        self._reader: RunReader | None = None
        self._attach_error = ""             # why the store could not be opened (``_try_attach_store``)
        self._store_seen = {"warmup_draws": 0, "draws": 0, "field_draws": 0, "moment_count": 0}
        self._steps = GrowingBuffer((), np.int64)
        self._stats: dict[str, GrowingBuffer] = {}
        self._params: dict[str, GrowingBuffer] = {}
        if self.chains is not None:
            self._make_buffers()
        self._try_attach_store()
        self.layout_version += 1
        self._changed(traces=True, field=True)

    def _make_buffers(self) -> None:
        c = self.chains
        self._stats = {name: GrowingBuffer((c,), STAT_DTYPES.get(name, np.float64)) for name in STAT_NAMES}
        self._params = {name: GrowingBuffer((c,), np.float64) for name in self.param_names}

    def _changed(self, traces: bool = False, field: bool = False) -> None:
        self.version += 1
        if traces:
            self.trace_version += 1
        if field:
            self.field_version += 1

    @staticmethod
    def meta_from_reader(reader: RunReader) -> dict:
        """``reset`` metadata from a run store's attributes."""
        a = reader.attrs
        stored = reader.stored_config
        meta = {"chains": a.get("chains"), "param_names": reader.param_names,
                "num_warmup": a.get("num_warmup", 0), "num_samples": a.get("num_samples", 0),
                "thin": a.get("thin", 1), "model_kind": a.get("model_kind", ""),
                "status": a.get("status", ""), "run_dir": reader.run_dir,
                "grid_shape": reader.grid_shape, "config_text": stored.text,
                "config_dir": stored.base_dir}
        if reader.has_field:
            meta["k_centres"], meta["k_counts"] = reader.shells()
        return meta

    def _try_attach_store(self) -> bool:
        """Open the run store once it exists and read what is fixed for the run (observed data)."""
        if self._reader is not None:
            return True
        if self.run_dir is None or not (self.run_dir / STORE_NAME).exists():
            return False
        try:
            reader = RunReader(self.run_dir)
            observed = reader.observed_data()
            meta = self.meta_from_reader(reader)
        except (RunStoreError, KeyError, OSError, ValueError) as err:   # being created (the next chunk
            self._attach_error = str(err) or type(err).__name__        # tries again) or damaged
            return False
        self._attach_error = ""
        self._reader = reader
        for name in self._provisional:       # the run's own arrays replace the preview's
            self.observed.pop(name, None)
        self._provisional.clear()
        for name, value in observed.items():
            self.observed.setdefault(name, value)
        if self.grid_shape is None and meta["grid_shape"] is not None:
            self.grid_shape = meta["grid_shape"]
            self.layout_version += 1
        if self.k_centres is None and meta.get("k_centres") is not None:
            self.k_centres, self.k_counts = meta["k_centres"], meta["k_counts"]
        if self.chains is None and meta.get("chains") is not None:
            self.chains = int(meta["chains"])
            self._make_buffers()
            self.layout_version += 1
        for name in meta["param_names"]:
            self._ensure_param(name)
        self.model_kind = self.model_kind or meta["model_kind"]
        if not self.config_text and meta.get("config_text"):
            self.config_text, self.config_dir = meta["config_text"], meta["config_dir"]
            self._config = None
        self._changed(field=True)
        return True

    # -- the data preview (no run) ----------------------------------------------------------

    def show_preview(self, preview: DataPreview | None, config_text: str = "", config_dir: str = "") -> None:
        """Show the data of ``preview`` with no run (None: show nothing); see the module
        docstring. Replaces whatever the state showed."""
        if preview is None:
            self.reset({})
            return
        self.reset({"grid_shape": preview.data.shape, "model_kind": "field", "status": "preview",
                    "observed": preview.observed(), "config_text": config_text,
                    "config_dir": config_dir})
        self.preview = preview

    @property
    def is_preview(self) -> bool:
        """Whether the state shows a data preview (no run)."""
        return self.preview is not None

    def set_preview_config(self, config_text: str, config_dir: str = "") -> bool:
        """The config changed while a preview is shown (the prior, the box): read it anew.
        Returns whether anything changed."""
        if self.preview is None or (config_text, config_dir) == (self.config_text, self.config_dir):
            return False
        self.config_text, self.config_dir, self._config = config_text, config_dir, None
        self._changed()
        return True

    def preview_meta(self) -> dict:
        """``reset`` metadata that keeps the preview's arrays on show, provisionally, for a
        run started from it (empty when no preview is shown)."""
        return {"provisional": self.preview.observed()} if self.preview is not None else {}

    @property
    def config(self):
        """The run's ``core.config.RunConfig`` (parsed from the config text the run was
        started with, or the one stored in its run store), or None when unknown or
        unreadable. Views read the grid's box size, the prior and the likelihood from it."""
        if self._config is None and self.config_text:
            from core.config import ConfigError

            try:
                self._config = StoredConfig(self.config_text, self.config_dir or ".",
                                            "the run's config").parse()
            except ConfigError:
                self._config = False
        return self._config or None

    # -- the series -----------------------------------------------------------------------

    @property
    def n_steps(self) -> int:
        """Number of steps (warmup and post-warmup) received so far."""
        return len(self._steps)

    @property
    def steps(self) -> np.ndarray:
        return self._steps.data

    def stat(self, name: str) -> np.ndarray:
        """(chains, n) of one sample statistic (``core.run.messages.STAT_NAMES``)."""
        if name not in self._stats:
            return np.empty((self.chains or 0, 0))
        return self._stats[name].data

    def param(self, name: str) -> np.ndarray:
        """(chains, n) of one sampled hyperparameter."""
        if name not in self._params:
            return np.empty((self.chains or 0, 0))
        return self._params[name].data

    @property
    def n_warmup_seen(self) -> int:
        return int(np.searchsorted(self.steps, self.num_warmup, side="left"))

    @property
    def divergences(self) -> int:
        """Divergent transitions held, warmup and post-warmup, all chains."""
        return int(self.stat("diverging").sum()) if self.n_steps else 0

    @property
    def warmup_divergences(self) -> int:
        """Divergent warmup transitions held (all chains): expected while the step size adapts."""
        return int(self.stat("diverging")[:, :self.n_warmup_seen].sum()) if self.n_steps else 0

    @property
    def sampling_divergences(self) -> int:
        """Divergent post-warmup transitions held (all chains): the ones that count."""
        return int(self.stat("diverging")[:, self.n_warmup_seen:].sum()) if self.n_steps else 0

    # -- events --------------------------------------------------------------------------

    def on_event(self, event: dict) -> None:
        """Dispatch one engine event (``core.run.messages``: "chunk" or "status"; others
        are ignored)."""
        kind = event.get("type")
        if kind == msgs.CHUNK:
            self.on_chunk(event)
        elif kind == msgs.STATUS:
            self.on_status(event)

    def on_status(self, event: msgs.StatusEvent) -> None:
        """Take one "status" event (``core.run.messages.StatusEvent``)."""
        status = event.get("status", "")
        if status in msgs.PHASES:
            self.phase = status
            status = "running"
        self.status = status
        if event.get("error"):
            self.error = str(event["error"])
        if event.get("progress"):
            self.progress = dict(event["progress"])
        self._try_attach_store()
        self._changed()

    def on_chunk(self, event: msgs.ChunkEvent) -> None:
        """Append one "chunk" event (``core.run.messages.ChunkEvent``). Fields a test or
        a view's preview leaves out are filled as missing (zeros, NaN parameters)."""
        first, n = int(event["first_step"]), int(event["n_steps"])
        stats = {name: np.asarray(v) for name, v in event["stats"].items()}
        params = {name: np.asarray(v) for name, v in event.get("params", {}).items()}
        if self.chains is None:
            self.chains = int(next(iter(stats.values())).shape[0])
            self.param_names = self.param_names or list(params)
            self._make_buffers()
            self.layout_version += 1
        for name in params:
            self._ensure_param(name)
        self._try_attach_store()
        self.source = "events"
        # a resumed run (after a crash, or one loaded from its store) repeats steps from its
        # checkpoint: what this state holds from `first` on is superseded
        if self.n_steps and self.steps[-1] >= first:
            self._truncate_from(first)
        self._steps.append(np.arange(first, first + n, dtype=np.int64))
        for name, buf in self._stats.items():
            if name in stats:
                buf.append(stats[name][:, :n])
            else:
                buf.append(np.zeros((self.chains, n), buf.data.dtype))
        for name, buf in self._params.items():
            if name in params:
                buf.append(params[name][:, :n])
            else:
                buf.append(np.full((self.chains, n), np.nan))
        self.phase = event.get("phase", self.phase)
        self.status = "running" if self.status in ("created", "loading", "compiling", "") else self.status
        if event.get("steps_total") is not None:
            self.steps_total = int(event["steps_total"])
        if event.get("progress"):
            self.progress = dict(event["progress"])
            # the store holds the same draws: a later refresh_from_store goes on from here
            for key in ("warmup_draws", "draws", "field_draws"):
                self._store_seen[key] = int(self.progress.get(key, self._store_seen[key]))
        self.steps_per_second = float(event.get("steps_per_second", self.steps_per_second))
        self.total_elapsed = float(event.get("total_elapsed", self.total_elapsed))
        field_changed = False
        if event.get("latest_field") is not None:
            field = np.asarray(event["latest_field"])
            if self.grid_shape is None:
                self.grid_shape = tuple(field.shape[1:])
                self.layout_version += 1
            self.latest_field = field
            self.latest_field_step = self._last_kept_step(first, n)
            for voxel, trace in self.pins.items():
                trace.append([self.latest_field_step], field[(slice(None), *voxel)][:, None])
            field_changed = True
        if event.get("latest_power") is not None:
            self.latest_power = np.asarray(event["latest_power"])
        if event.get("moments") is not None:
            mean, std, count = event["moments"]
            self.mean, self.std, self.moment_count = np.asarray(mean), np.asarray(std), int(count)
            self._store_seen["moment_count"] = self.moment_count
            field_changed = True
        self._changed(traces=True, field=field_changed)

    def _ensure_param(self, name: str) -> None:
        """A buffer for a parameter first seen now, NaN for the steps already held."""
        if name not in self.param_names:
            self.param_names.append(name)
            self.layout_version += 1
        if self.chains is not None and name not in self._params:
            buf = GrowingBuffer((self.chains,), np.float64)
            buf.append(np.full((self.chains, self.n_steps), np.nan))
            self._params[name] = buf

    def _last_kept_step(self, first: int, n: int) -> int:
        """Global step of the last field draw kept in a chunk (every thin-th post-warmup step)."""
        post = np.arange(first, first + n) - self.num_warmup
        kept = post[(post >= 0) & (post % max(self.thin, 1) == 0)]
        return int(kept[-1]) + self.num_warmup if kept.size else first + n - 1

    def _truncate_from(self, step: int) -> None:
        keep = int(np.searchsorted(self.steps, step, side="left"))
        self._steps.truncate(keep)
        for buf in (*self._stats.values(), *self._params.values()):
            buf.truncate(keep)
        for trace in self.pins.values():
            trace.truncate_from(step)

    # -- pinned voxels -------------------------------------------------------------------

    def pin_voxel(self, voxel) -> PinnedTrace:
        """Follow one voxel's value in the thinned field draws (see :class:`PinnedTrace`).

        Returns the (possibly existing) trace. Raises ValueError for a voxel outside the grid.
        """
        voxel = tuple(int(v) for v in voxel)
        inside = self.grid_shape is not None and len(voxel) == 3 and all(
            0 <= v < s for v, s in zip(voxel, self.grid_shape))
        if not inside:
            raise ValueError(f"voxel {voxel}: outside the grid {self.grid_shape}")
        if voxel in self.pins:
            return self.pins[voxel]
        trace = PinnedTrace(voxel, self._pin_serial, GrowingBuffer((), np.int64, 64),
                            GrowingBuffer((self.chains or 1,), np.float64, 64))
        self._pin_serial += 1
        self._backfill(trace)
        if self.latest_field is not None and (not len(trace) or trace.steps[-1] < self.latest_field_step):
            trace.append([self.latest_field_step], self.latest_field[(slice(None), *voxel)][:, None])
        self.pins[voxel] = trace
        self._changed(traces=True)
        return trace

    def unpin(self, voxel) -> None:
        voxel = tuple(int(v) for v in voxel)
        if self.pins.pop(voxel, None) is not None:
            self._changed(traces=True)

    def clear_pins(self) -> None:
        if self.pins:
            self.pins.clear()
            self._changed(traces=True)

    def _backfill(self, trace: PinnedTrace) -> None:
        """The stored field draws of a pinned voxel, up to what this state has seen."""
        reader = self._reader
        if reader is None or not reader.has_field:
            return
        try:
            reader.refresh()
            n = reader.progress.get("field_draws", 0)
            if self.source == "store":
                n = min(n, self._store_seen["field_draws"])
            if not n:
                return
            steps = reader.field_draw_steps(0, n) + self.num_warmup
            if self.source == "events" and self.latest_field_step >= 0:
                n = int(np.searchsorted(steps, self.latest_field_step, side="right"))
                steps = steps[:n]
            if not n:
                return
            values = reader.voxel_trace(trace.voxel, 0, n)
        except (RunStoreError, KeyError, OSError, ValueError):
            return
        trace.append(steps, np.asarray(values, np.float64))

    # -- field-shaped arrays ---------------------------------------------------------------

    @property
    def has_field(self) -> bool:
        return self.grid_shape is not None

    def volume(self, kind: str, chain: int = 0) -> np.ndarray | None:
        """The (x, y, z) array the slice views show for ``kind`` (``VOLUME_KINDS``), or None
        when it does not exist (yet): ``latest`` is chain ``chain``'s latest kept draw,
        ``residual`` is data - posterior mean (NaN where the data are masked)."""
        if not self.has_field:
            return None
        data = self.observed.get("data")
        data = data if data is not None and data.shape == self.grid_shape else None
        if kind == "data":
            return data
        if kind == "mask":
            mask = self.observed.get("mask")
            return None if mask is None else mask.astype(np.float32)
        if kind == "noise":
            return self._grid_array("noise")
        if kind == "truth":
            return self.observed.get("truth")
        if kind == "latest":
            if self.latest_field is None:
                return None
            chain = min(max(int(chain), 0), self.latest_field.shape[0] - 1)
            if isinstance(self.latest_field, FieldVolume):
                return self.latest_field.chain(chain)          # read by the view, by block
            return self.latest_field[chain]
        if kind == "mean":
            return self.mean if self.moment_count else None
        if kind == "std":
            return self.std if self.moment_count else None
        if kind == "residual":
            if data is None or self.mean is None or not self.moment_count:
                return None
            if isinstance(self.mean, FieldVolume):
                return LazyResidual(data, self.mean)
            return data - self.mean
        raise ValueError(f"unknown volume kind {kind!r}; one of {', '.join(VOLUME_KINDS)}")

    def has_volume(self, kind: str) -> bool:
        """Whether :meth:`volume` of ``kind`` exists now (cheap: computes nothing)."""
        if not self.has_field:
            return False
        data = self.observed.get("data")
        has_data = data is not None and data.shape == self.grid_shape
        have = {"data": has_data, "mask": self.observed.get("mask") is not None,
                "noise": self._grid_array("noise") is not None,
                "truth": self.observed.get("truth") is not None,
                "latest": self.latest_field is not None,
                "mean": self.mean is not None and self.moment_count > 0,
                "std": self.std is not None and self.moment_count > 0}
        have["residual"] = has_data and have["mean"]
        if kind not in have:
            raise ValueError(f"unknown volume kind {kind!r}; one of {', '.join(VOLUME_KINDS)}")
        return have[kind]

    def _grid_array(self, name: str) -> np.ndarray | None:
        value = self.observed.get(name)
        return value if value is not None and value.shape == self.grid_shape else None

    @property
    def observed_mask(self) -> np.ndarray | None:
        """The (x, y, z) bool mask (True = observed) when there is one of the grid's shape."""
        mask = self._grid_array("mask")
        return None if mask is None else np.asarray(mask, bool)

    def available_volumes(self) -> list[str]:
        return [kind for kind in VOLUME_KINDS if self.has_volume(kind)]

    # -- stores --------------------------------------------------------------------------

    def load_from_store(self, run_dir) -> None:
        """Show a stored run (finished, stopped, or being written by another process). Raises
        ``RunStoreError`` when ``run_dir`` holds no readable store (or its observed data is damaged)."""
        reader = RunReader(run_dir)
        self.reset(self.meta_from_reader(reader))
        self.source = "store"
        self.refresh_from_store()
        if self._reader is None and self._attach_error:
            raise RunStoreError(self._attach_error)

    def refresh_from_store(self) -> bool:
        """Append what the store gained since the last look; whether anything changed. In this
        thread; a window that watches a store reads off its GUI thread (``app.run_controller``)."""
        look = self.store_look()
        return False if look is None else self.take_store_update(read_store_update(look))

    def store_look(self) -> "StoreLook | None":
        """What a look at the store needs to know of this state (a copy: the look may run in
        another thread while this state changes), or None before the store exists."""
        if not self._try_attach_store():
            return None
        return StoreLook(self._reader.run_dir, self._reader, dict(self._store_seen), self.chains,
                         tuple(self._stats), tuple(self._params), tuple(self.pins), self.num_warmup)

    def take_store_update(self, update: "StoreUpdate") -> bool:
        """Take what ``read_store_update`` found (in the thread that owns this state; cheap:
        no store read but the stored draws of a voxel pinned while the look ran). An update
        from before a ``reset`` or one that events overtook is dropped. Returns whether
        anything changed."""
        look = update.look
        if look.reader is not self._reader or look.seen != self._store_seen:
            return False
        if update.error:
            self.error = update.error
            return False
        self._reader = update.reader          # the look's fresh reader: what the views index
        changed = False
        if update.status != self.status or update.error_attr != self.error:
            self.status, self.error = update.status, update.error_attr
            changed = True
        if update.num_samples != self.num_samples:      # a resume asked for more draws
            self.num_samples = update.num_samples
            self.steps_total = self.num_warmup + update.num_samples
            changed = True
        self.progress = dict(update.progress)
        if self.chains is None or update.series is None:
            return changed
        seen = self._store_seen
        new_traces = False
        for steps, stats, params in update.series:
            if self.n_steps and self.steps[-1] >= steps[0]:
                self._truncate_from(int(steps[0]))
            self._steps.append(steps)
            for name, buf in self._stats.items():
                buf.append(stats[name])
            for name, buf in self._params.items():
                buf.append(params[name])
            new_traces = True
        seen["warmup_draws"], seen["draws"] = update.warmup_draws, update.draws
        new_field = False
        if update.field is not None:
            f0, f1, steps, latest, power, traces = update.field
            self.latest_field, self.latest_field_step, self.latest_power = latest, int(steps[-1]), power
            for voxel, trace in self.pins.items():
                if len(trace) and trace.steps[-1] >= steps[0]:
                    trace.truncate_from(int(steps[0]))
                values = traces.get(voxel)
                if values is None:         # pinned while the look ran
                    try:
                        values = update.reader.voxel_trace(voxel, f0, f1)
                    except (RunStoreError, KeyError, OSError, ValueError):
                        continue
                trace.append(steps, np.asarray(values, np.float64))
            seen["field_draws"] = f1
            new_field = new_traces = True
        if update.moments is not None:
            self.mean, self.std, self.moment_count = update.moments
            seen["moment_count"] = self.moment_count
            new_field = True
        if new_traces or new_field or changed:
            self.source = "store"
            self._changed(traces=new_traces, field=new_field)
            return True
        return False
