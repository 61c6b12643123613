"""A calibration's batches on a Dask distributed cluster (issue #34): ``fieldscope calibrate ...
--scheduler local:N`` (a ``LocalCluster`` of N worker processes here) or ``--scheduler
tcp://HOST:PORT`` (the scheduler of a running cluster: ``dask scheduler``, then ``dask worker
tcp://HOST:PORT`` on each machine, in an environment with Fieldscope installed).

Each batch is one Dask task, ``run_batch(job, b)``: a worker process (TensorFlow in it, loaded
once) rebuilds the config from its text, checks that it reads the same input files as the
submitting machine (their SHA-256: a worker on another host reads them by the same paths, on
a shared file system), builds and compiles the calibration program once per process
(``core.engine.calibrate``'s cache) and runs batch b, seeded by (seed, b) as in one process: the
ranks are those of a single-process calibration. Only the submitting process writes the store,
batch after batch in order (a batch finished early waits on the cluster for the ones before
it). Dask runs again, on another worker, a batch whose worker died (killed, out of memory):
after ``distributed.scheduler.allowed-failures`` deaths (3) the calibration fails, naming it.
A stop (Ctrl-C, the window's Stop) cancels what is queued; the finished batches are stored and
the same command resumes at the first unfinished one.

A LocalCluster's workers share the machine's cores: each gets cores / N TensorFlow threads
(``TF_NUM_INTRAOP_THREADS``) and runs one batch at a time. On a machine with GPUs each worker sees
one (``CUDA_VISIBLE_DEVICES``, round robin, as dask-cuda's LocalCUDACluster does), and the
submitting process, which only writes the store, computes on none of them (``hide_gpus``).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass

from core.calibration import CalibrationPlan
from core.calibration.cluster import Scheduler, local_worker_env, visible_gpus
from core.config import parse_config
from core.run.input_files import input_digests
from core.run.tensorflow_env import start_up_notices_filtered

__all__ = ["BatchJob", "ClusterBatches", "local_cluster", "run_batch"]

_POLL_SECONDS = 0.5             # how often a wait for the next batch looks at the stop flag
_CONNECT_TIMEOUT = "20s"

# the worker process's models and program, by job: built and compiled once per process
_WORKER_CACHE: dict = {}


@dataclass(frozen=True)
class BatchJob:
    """What a worker needs to run any batch of one calibration: the configs as text with the
    folders their relative paths start from, the plan, and the SHA-256 of every input file
    on the submitting machine (setting -> digest; the simulating config's under "simulate ")."""

    config_text: str
    config_dir: str
    simulate_text: str
    simulate_dir: str
    plan: CalibrationPlan
    digests: dict


def input_sha256(config, simulate_config=None) -> dict:
    """setting -> SHA-256 of the input files of ``config`` (and of ``simulate_config``, its
    settings prefixed with "simulate ")."""
    out = {setting: d["sha256"] for setting, d in input_digests(config).items()}
    if simulate_config is not None:
        out.update({f"simulate {setting}": d["sha256"] for setting, d in input_digests(simulate_config).items()})
    return out


def _check_inputs(job: BatchJob, config, simulate_config) -> None:
    from core.engine.engine import EngineError

    here = input_sha256(config, simulate_config)
    host = socket.gethostname()
    for setting, digest in job.digests.items():
        if setting not in here:
            raise EngineError(f"worker on {host}: cannot read the file of {setting}; the Dask workers read the "
                              "config's files by the same absolute paths (put them on a shared file system)")
        if here[setting] != digest:
            raise EngineError(f"worker on {host}: the file of {setting} differs from the submitting machine's "
                              "(another SHA-256); the workers must read the same files")


def run_batch(job: BatchJob, b: int):
    """Run batch ``b`` of ``job`` in this (worker) process -> (BatchResult, seconds, host).
    This module imports no TensorFlow at its top: the worker loads it here, its start-up
    notices filtered as the command line's are."""
    key = (job.config_text, job.config_dir, job.simulate_text, job.simulate_dir, job.plan)
    if key not in _WORKER_CACHE:
        with start_up_notices_filtered():
            from core.engine.calibrate import calibration_models
        config = parse_config(job.config_text, base_dir=job.config_dir)
        simulate = parse_config(job.simulate_text, base_dir=job.simulate_dir) if job.simulate_text else None
        _check_inputs(job, config, simulate)
        _WORKER_CACHE.clear()
        _WORKER_CACHE[key] = (config, *calibration_models(config, simulate, job.plan)[1:])
    config, sim_model, program = _WORKER_CACHE[key]
    t0 = time.perf_counter()
    result = program.run_batch(sim_model, b, config.sampler, job.plan)
    return result, time.perf_counter() - t0, socket.gethostname()


def local_cluster(workers: int, gpus: list[str], cores: int):
    """A Dask cluster of ``workers`` worker processes on this machine (one thread each, one batch
    at a time), each with its own environment (``core.calibration.cluster.local_worker_env``:
    its GPU, its TensorFlow threads): a LocalCluster whose workers differ, as dask-cuda's."""
    from distributed import Nanny, SpecCluster
    from distributed import Scheduler as DaskScheduler

    specs = {i: {"cls": Nanny, "options": {"nthreads": 1, "env": local_worker_env(i, workers, gpus, cores),
                                           "silence_logs": logging.ERROR}}
             for i in range(workers)}
    return SpecCluster(workers=specs, scheduler={"cls": DaskScheduler, "options": {"dashboard_address": None}},
                       silence_logs=logging.ERROR, name="fieldscope-calibrate")


class ClusterBatches:
    """The cluster of ``scheduler`` for one calibration: ``with ClusterBatches(s, emit) as cluster:
    for b, result, seconds in cluster.results(job, batches, control): ...``."""

    def __init__(self, scheduler: Scheduler, emit=None):
        self.scheduler = scheduler
        self.emit = emit or (lambda text: None)
        self.client = self.cluster = None

    def __enter__(self):
        from distributed import Client

        from core.engine.engine import EngineError

        s = self.scheduler
        if s.is_local:
            gpus = visible_gpus()
            self.emit(f"starting {s.workers} Dask worker process{'es' if s.workers > 1 else ''}"
                      + (f" on {len(gpus)} GPU{'s' if len(gpus) > 1 else ''}" if gpus else ""))
            self.cluster = local_cluster(s.workers, gpus, os.cpu_count() or 1)
            self.client = Client(self.cluster)
        else:
            self.emit(f"connecting to the Dask scheduler at {s.address}")
            try:
                self.client = Client(s.address, timeout=_CONNECT_TIMEOUT)
            except (OSError, TimeoutError) as err:
                raise EngineError(f"--scheduler {s.address}: cannot reach the Dask scheduler ({err}); is "
                                  "`dask scheduler` running there, and the port open?") from None
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        """Disconnect, and end a LocalCluster's worker processes (a second call does nothing)."""
        client, cluster, self.client, self.cluster = self.client, self.cluster, None, None
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()

    def workers(self) -> int:
        """Workers connected to the scheduler now."""
        return len(self.client.scheduler_info().get("workers", {}))

    def results(self, job: BatchJob, batches, control):
        """(b, BatchResult, seconds on its worker) of ``batches`` in order; returns early when
        ``control.stop`` is set (what is queued is cancelled)."""
        from distributed import KilledWorker

        from core.engine.engine import EngineError

        batches = list(batches)
        token = uuid.uuid4().hex[:12]
        futures = {b: self.client.submit(run_batch, job, b, key=f"fieldscope-calibrate-{token}-{b}", pure=False,
                                         priority=-b) for b in batches}
        workers = self.workers()
        self.emit(f"{len(batches)} batches queued on {workers} Dask worker{'s' if workers != 1 else ''}"
                  + ("" if workers else " (none yet: waiting for one to join)") + "; compiling on each")
        try:
            for b in batches:
                while True:
                    if control.stop:
                        return
                    try:
                        result, seconds, _host = futures[b].result(timeout=_POLL_SECONDS)
                        break
                    except TimeoutError:
                        continue
                    except ImportError as err:       # a worker without Fieldscope (or another version)
                        raise EngineError(
                            f"batch {b}: a Dask worker cannot import what Fieldscope runs ({err}); install this "
                            "Fieldscope in the workers' environment (the same version as here)") from None
                    except KilledWorker:
                        raise EngineError(
                            f"batch {b}: its worker process died each time it ran it (out of memory? see the "
                            "workers' logs); the finished batches are stored: give the same command again to "
                            "resume, with fewer simulations per batch (--batch) if memory ran out") from None
                del futures[b]
                yield b, result, seconds
        finally:
            for future in futures.values():
                future.cancel()
