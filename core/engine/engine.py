"""The sampling engine: one run of a config into a run directory, on the sampling driver.

One run = one config + one run directory. The engine

* builds the model (``core.engine.models``) and the driver (``core.engine.driver``: the kernel,
  its adaptation and the compiled chunks of steps, the same code calibration runs);
* runs the schedule's chunks through the driver, its observer (``FieldDraws``) keeping every
  ``thin``-th post-warmup field draw and its P(k) and the field's moments; every step's
  log-density, gradient norm, acceptance probability, step size, energy error, divergence flag,
  leapfrog count and parameters come back with each chunk;
* after each chunk appends to the run store (the chunk's record and event from
  ``core.engine.recorder``), writes an exact checkpoint (``core.engine.checkpoint``) and
  publishes a progress event; between chunks it honours pause and stop. The engine itself is
  the run's lifecycle: start, resume, restart, the writer's lock, pause, stop and failure.

Reproducibility, warmup and the preconditioners are the driver's (its module docstring): the
draws do not depend on where chunks begin, so a run stopped and resumed gives the very same
draws as one run straight through (tests/core/engine/test_draw_digests.py checks it, and that
the driver draws what the engine drew before it existed).

Faults. A field run that cannot fit in the machine's free memory is refused before the
model loads (``core.run.resources``). A write that fails during the run (a full disk) raises
``core.store.run_store.StoreWriteError``: the run ends as failed with the reason (recorded in the
store when it can still be written), the chunks already published stay readable, and
``resume`` continues from the last checkpoint. ``core.engine.warmup.WarmupWatch`` ends a warmup whose
log-density is NaN everywhere, whose step size collapses or which accepts nothing, with a
diagnosis naming what to check, after storing the chunk that shows it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from core import config as cfgmod
from core.engine import checkpoint
from core.engine.devices import DeviceError, chain_devices, compute_device, device_count, gpu_free_memory, memory_kind
from core.engine.driver import (
    DIVERGENCE_THRESHOLD,
    Driver,
    DriverError,
    Schedule,
    hyper_metric,
    samples_hyperparameters,
    schedule_for,
)
from core.engine.model_check import Report, check_built
from core.engine.model_file import ModelFileError, failure_of
from core.engine.models import build_model
from core.engine.recorder import Recorder
from core.engine.warmup import WarmupWatch
from core.run import input_files, run_folder
from core.run.messages import Estimate, chunk_event, new_progress, status_event
from core.store import run_lock
from core.store.field_parts import FieldParts
from core.store.run_store import RunStoreError, RunStoreWriter, StoreWriteError

__all__ = ["Engine", "EngineError", "Control", "Schedule", "DIVERGENCE_THRESHOLD",
           "CHECKPOINT_FORMAT", "samples_hyperparameters"]

CHECKPOINT_FORMAT = checkpoint.FORMAT


class EngineError(DriverError):
    """A run that cannot go on, with a diagnosis a user can act on."""


@dataclass
class Control:
    """Commands from outside, checked between chunks (thread-safe enough: plain flags).

    ``writing`` is held by the engine while it writes the run store or its checkpoint: a
    client that must end the process at once (a second Ctrl-C) takes it first, so that it
    never cuts a write short, and keeps it, so that nothing is written after it."""

    stop: bool = False
    pause: bool = False
    writing: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    def wait_while_paused(self, on_pause: Callable[[], None], on_resume: Callable[[], None]):
        if not self.pause:
            return
        on_pause()
        while self.pause and not self.stop:
            time.sleep(0.05)
        on_resume()


class Engine:
    """Runs one config into one run directory. Use :meth:`start` or :meth:`resume`."""

    def __init__(self, config: cfgmod.RunConfig, config_text: str, run_dir, *,
                 emit: Callable[[dict], None] | None = None, control: Control | None = None):
        self.config = config
        self.config_text = config_text
        self.run_dir = Path(run_dir)
        self.emit = emit or (lambda event: None)
        self.control = control or Control()
        self.sampler = config.sampler
        self.schedule = schedule_for(config)

    # -- set-up -------------------------------------------------------------------

    def _status(self, status: str, **extra):
        self.emit(status_event(status, **extra))

    def _build(self, estimate: Estimate | None = None):
        self._status("loading", estimate=estimate or None)
        try:
            self.model = build_model(self.config, devices=self.devices)
            if cfgmod.uses_model_file(self.config):
                self._check_model_file()
        except ModelFileError as err:
            raise EngineError(str(err)) from None
        self.dtype = self.model.dtype
        self.device = compute_device()
        sharded = getattr(self.model, "sharded", False)
        if self.devices:
            names = ", ".join(name.rsplit("device:", 1)[-1] for name in self.devices)
            what = (f"the field cut in {self.config.field.shard}s" if sharded else "the chains")
            self.device += f"; {what} over {len(self.devices)} devices ({names})"
        self._status("compiling", device=self.device)
        self.recorder = Recorder(self.model, self.schedule, self.sampler.thin)
        try:
            self.driver = Driver(self.model, self.sampler, self.schedule,
                                 hyper_metric=hyper_metric(self.config), devices=() if sharded else self.devices)
        except DriverError as err:
            raise EngineError(str(err)) from None

    def _check_model_file(self) -> None:
        """The cheap part of ``fieldscope check-model`` before every run of a model file: its terms
        at the chains' starting point and its gradients there against finite differences."""
        report = check_built(self.model, Report(), draws=1, directions=2, seed=self.sampler.seed)
        if not report.ok:
            raise EngineError("the model file's check before the run failed: " + " | ".join(report.problems)
                              + " (fieldscope check-model CONFIG gives the full report)")

    def _fresh_state(self) -> dict:
        try:
            st = self.driver.fresh_state()
        except DriverError as err:
            raise EngineError(str(err)) from None
        except Exception as err:
            failure = failure_of(err, getattr(self.model, "model_file", None))
            if failure is None:
                raise
            raise EngineError(str(failure)) from None
        shape = self.model.grid.shape if self.model.has_field else [1]
        regions = getattr(self.model, "field_regions", None)      # a field cut over devices: in parts
        zeros = ((lambda: FieldParts.zeros(shape, regions)) if regions is not None
                 else (lambda: np.zeros(shape, np.float64)))
        st.update(moments=(np.float64(0.0), zeros(), zeros()), progress=dict(new_progress()))
        return st

    def _checkpoint(self, st):
        checkpoint.save(self.run_dir, st, self.driver.kernel, self.config_text)

    def _restore(self):
        try:
            st, meta = checkpoint.load(self.run_dir, self.driver.kernel, self.sampler)
        except checkpoint.CheckpointError as err:
            raise EngineError(str(err)) from None
        problem = self.model.state_problem(st["state"]) if getattr(self.model, "sharded", False) else None
        if problem is not None:
            raise EngineError(problem)
        return self.driver.place(st), meta

    # -- running ------------------------------------------------------------------------

    def _preflight(self, new_run: bool = False) -> Estimate | None:
        """Refuse a field run this machine cannot hold or whose grid is too small
        (``core.run.resources``; a new run: also a store its disk cannot hold), before the
        model loads. Returns the estimate for the "loading" status event: bytes,
        available, gradient_seconds, run_seconds, text. First the devices the chains spread
        over (``sampler.devices``): on a CPU split before TensorFlow starts."""
        try:
            self.devices = chain_devices(self.sampler.devices)
        except DeviceError as err:
            raise EngineError(str(err)) from None
        if self.config.model.kind != "field":
            return None
        from core import io as loaders
        from core.field.observations import settings_take_exact_slab
        from core.run import resources

        try:
            info = loaders.array_info(self.config.data_path, self.config.data.key)
        except loaders.LoadError:
            return None       # loading the model reports it, with every check
        if info.shape is None or len(info.shape) != 3 or 0 in info.shape:
            return None
        slab = None
        if settings_take_exact_slab(self.sampler.preconditioner, self.config.field.parameterisation,
                                    resources.samples_hyperparameters(self.config)):
            try:       # the slab's exact conditional has factors of its own (its memory)
                slab = loaders.exact_slab(self.config)
            except loaders.LoadError:
                return None       # loading the model reports it, with every check
        estimate = resources.estimate_for_config(self.config, info.shape, devices=device_count(self.sampler.devices),
                                                 slab=slab)
        available = resources.available_memory()
        kind = memory_kind()       # a GPU: its own memory for the model, the host's for the rest
        device_free = gpu_free_memory() if kind == "gpu" else None
        # this process has imported TensorFlow already: its memory is not free any more
        problem = resources.run_problem(estimate, available, include_import=False,
                                        run_dir=self.run_dir if new_run else None, device=kind,
                                        device_available=device_free)
        if problem is not None:
            raise resources.ResourceError(f"{self.config.data_path}: {problem}")
        return Estimate(bytes=estimate.device_bytes(kind),
                        available=device_free if kind == "gpu" else available,
                        memory="GPU memory" if kind == "gpu" else "memory",
                        gradient_seconds=estimate.gradient_seconds,
                        run_seconds=estimate.run_seconds, text=estimate.describe())

    def start(self) -> str:
        """A new run in a run directory with no run, or one whose run never completed a
        chunk (``core.run.run_folder.claim_new``: replaced). Returns the final status."""
        estimate = self._preflight(new_run=True)
        claim = run_folder.claim_new(self.run_dir)   # the writer lock, taken before the model loads
        try:
            self._build(estimate)
            return self._start()
        finally:
            claim.release()

    def _start(self) -> str:
        model, s = self.model, self.sampler
        extra = {}
        if model.has_field:
            extra = dict(grid_shape=model.grid.shape, k_centres=model.k_centres, k_counts=model.k_counts)
        attrs = {"algorithm": s.algorithm, "device": self.device, "inputs": input_files.input_digests(self.config)}
        model_file = getattr(model, "model_file", None)
        if model_file is not None:       # what ran, kept with the run (never executed from here)
            attrs["model_file"] = {"path": str(model_file.path), "sha256": model_file.sha256,
                                   "text": model_file.text}
        with self.control.writing:
            self.store = RunStoreWriter.create(
                self.run_dir, config_text=self.config_text, config_dir=self.config.base_dir,
                model_kind=model.kind, chains=s.chains,
                num_warmup=s.num_warmup, num_samples=self.schedule.num_samples, thin=s.thin,
                param_names=model.param_names, observed=model.observed, extra_attrs=attrs, **extra)
        self._release_observed()
        return self._run(self._fresh_state())

    def _release_observed(self):
        """The store holds the observed maps: the model's loaded float64 copies go
        (``FieldModel.release_observed``), before the state is drawn and XLA runs."""
        if self.model.has_field:
            self.model.release_observed()

    def resume(self, num_samples: int | None = None, accept_changed: bool = False) -> str:
        """Continue the chains of a stopped (or finished, with more ``num_samples``) run.

        A run with no checkpoint (it ended before its first chunk was checkpointed) has
        nothing to continue from: it starts again from the beginning, in place, with its
        config (``core.run.run_folder.claim_resume``). An input file that changed since the run
        began is refused, unless ``accept_changed`` (then the change is recorded in the store)."""
        claim = run_folder.claim_resume(self.run_dir)
        try:
            if accept_changed:
                input_files.record_accepted(self.run_dir, self.config)
            input_files.verify_inputs(self.run_dir, self.config)     # a changed data file: refused
            if claim.restart:
                return self._restart(num_samples)
            return self._resume(num_samples)
        finally:
            claim.release()

    def _restart(self, num_samples: int | None) -> str:
        if num_samples is not None:
            self.schedule.num_samples = num_samples
        self._build(self._preflight())
        # only now that the model is built (its data files load): the old store keeps the
        # config until a new one holds it
        with self.control.writing:
            run_folder.remove_store(self.run_dir)
        return self._start()

    def _resume(self, num_samples: int | None) -> str:
        self._build(self._preflight())
        self._release_observed()          # the store has them from its start
        st, meta = self._restore()
        if meta.get("config_digest") != checkpoint.config_digest(self.config_text):
            raise EngineError("the run's configuration changed since the checkpoint; resume needs the same config")
        if num_samples is not None:
            if num_samples < st["progress"]["draws"]:
                raise EngineError(f"the run already has {st['progress']['draws']} draws; "
                                  f"--num-samples {num_samples} would not add any")
            self.schedule.num_samples = num_samples
        if st["step"] >= self.schedule.total:
            raise EngineError(f"the run is already finished ({st['progress']['draws']} draws); "
                              "give a larger number of samples to extend it")
        with self.control.writing:
            self.store = RunStoreWriter.reopen(self.run_dir, st["progress"])
            self.store.root.attrs["device"] = self.device     # this session's device
            if num_samples is not None:
                self.store.root.attrs["num_samples"] = int(num_samples)
        return self._run(st)

    def _run(self, st) -> str:
        sched = self.schedule
        with self.control.writing:
            self.store.set_status("running")
        started = time.perf_counter()
        # wall time of the warmup and post-warmup chunks, over every session of the run (a
        # resumed run goes on from what the store holds); chunks never straddle num_warmup
        stored = self.store.root.attrs.get("timing") or {}
        timing = {key: float(stored.get(key, 0.0)) for key in ("warmup_seconds", "sampling_seconds")}
        steps_done_here = 0
        watch = WarmupWatch(st["watch_step"])
        published = st["progress"]["chunks"]     # chunks readers can see in the store
        try:
            for first, n in sched.boundaries(st["step"]):
                if self.control.stop:
                    return self._finish("stopped", st)
                self.control.wait_while_paused(lambda: self._paused(True), lambda: self._paused(False))
                if self.control.stop:
                    return self._finish("stopped", st)
                phase = "warmup" if first < sched.num_warmup else "sampling"
                self._status(phase)
                t0, traced = time.perf_counter(), self.driver.traces()
                out = self.driver.run_chunk(st, first, n)
                traces, params = out["traces"], out["params"]
                field_buf, power_buf, n_fields, sums = self.driver.observer.on_host(out["observed"])
                elapsed = time.perf_counter() - t0
                # a chunk that compiled a program: its time is mostly the compiling's, so its rate
                # (and an ETA from it) would read minutes per chunk; 0 = not known yet
                rate = n / max(elapsed, 1e-9) if self.driver.traces() == traced else 0.0
                self.driver.advance(st, out, first, n)
                st["moments"] = self.recorder.fold_moments(st["moments"], sums)
                diagnosis = None
                if first < sched.num_warmup:
                    diagnosis = watch.update({name: np.asarray(traces[name])[:n].T for name in
                                              ("lp", "acceptance_rate", "step_size",
                                               "energy_error")}, first)
                self.driver.at_boundary(st)
                record, contents = self.recorder.record(first, n, traces, params, field_buf, power_buf,
                                                int(n_fields), st)
                timing["warmup_seconds" if first < sched.num_warmup else "sampling_seconds"] += elapsed
                with self.control.writing:
                    run_lock.verify(self.run_dir)      # still this run's writer: else stop, write nothing
                    self.store.append(record, st["progress"], timing)
                    published = st["progress"]["chunks"]
                    run_lock.verify(self.run_dir)
                    self._checkpoint(st)
                steps_done_here += n
                self.emit(chunk_event(**contents, elapsed=elapsed,
                                      steps_per_second=rate,
                                      total_elapsed=time.perf_counter() - started))
                # not held while the next chunk runs (on a GPU its draws are device memory)
                del out, sums, traces, params, field_buf, power_buf, record, contents
                if diagnosis is not None:     # the chunk that shows it is stored first
                    raise EngineError(diagnosis)
            return self._finish("finished", st)
        except StoreWriteError as err:
            if published:
                kept = (f"the {published} chunk{'s' if published != 1 else ''} written before "
                        f"{'stay' if published != 1 else 'stays'} readable. Once the cause is "
                        f"fixed (e.g. free disk space), continue with: fieldscope resume "
                        f"{self.run_dir}")
            else:
                kept = ("no chunk had been written yet. Once the cause is fixed (e.g. free disk "
                        f"space), start it again with: fieldscope resume {self.run_dir}")
            message = f"{err}. The run stopped as failed; {kept}"
            self._fail(message)
            raise StoreWriteError(message, err.errno) from None
        except (EngineError, RunStoreError) as err:
            self._fail(str(err))
            raise
        except Exception as err:
            failure = failure_of(err, getattr(self.model, "model_file", None))
            if failure is not None:         # the user's code: its file and line, one line
                self._fail(str(failure))
                raise EngineError(str(failure)) from None
            self._fail(f"{type(err).__name__}: {err}")
            raise

    def _fail(self, message: str) -> None:
        """Record "failed" and the reason in the store if it can still be written (a full
        disk may refuse even that), and tell the listeners in any case."""
        try:
            with self.control.writing:
                run_lock.verify(self.run_dir)      # a writer that lost its lock writes nothing
                self.store.set_status("failed", message)
        except RunStoreError:
            pass
        self._status("failed", error=message)

    def _paused(self, paused: bool):
        with self.control.writing:
            self.store.set_status("paused" if paused else "running")
        self._status("paused" if paused else "running")

    def _finish(self, status: str, st) -> str:
        with self.control.writing:
            self.store.set_status(status)
        self._status(status, progress=dict(st["progress"]))
        return status
