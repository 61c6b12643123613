"""Where a calibration's batches run: ``fieldscope calibrate ... --scheduler SPEC``.

``parse_scheduler(spec)`` reads the option before TensorFlow or Dask load, so that a typo is
refused at once: ``local:N`` starts a Dask ``LocalCluster`` of N worker processes on this
machine; ``tcp://HOST:PORT`` (or ``tls://``) connects to the scheduler of a running Dask
distributed cluster (``dask scheduler`` and ``dask worker tcp://HOST:PORT`` on its machines,
each worker with Fieldscope installed and the config's files at the same paths). The batches
themselves run in ``core.engine.calibrate_cluster``.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

from core.calibration.plan import PlanError

__all__ = ["Scheduler", "parse_scheduler", "MAX_LOCAL_WORKERS", "local_worker_env", "visible_gpus"]

MAX_LOCAL_WORKERS = 256         # a LocalCluster of more processes than this is a typo

_ADDRESS = re.compile(r"^(tcp|tls)://\[?[A-Za-z0-9_.:-]+\]?:(\d{1,5})$")


@dataclass(frozen=True)
class Scheduler:
    """A parsed ``--scheduler``: ``workers`` processes of a LocalCluster (``address`` None), or
    the ``address`` of a running scheduler (``workers`` None)."""

    workers: int | None = None
    address: str | None = None

    @property
    def is_local(self) -> bool:
        return self.address is None

    def __str__(self) -> str:
        return f"local:{self.workers}" if self.is_local else str(self.address)


def parse_scheduler(spec: str) -> Scheduler:
    """``local:N`` or ``tcp://HOST:PORT`` (``tls://`` too) -> Scheduler; PlanError naming the
    option otherwise."""
    text = spec.strip()
    expected = "expected local:N (N worker processes on this machine) or tcp://HOST:PORT (a Dask scheduler)"
    if text.startswith("local:"):
        count = text[len("local:"):]
        if not count.isdigit() or not 1 <= int(count) <= MAX_LOCAL_WORKERS:
            raise PlanError(f"--scheduler {spec!r}: N must be a whole number from 1 to {MAX_LOCAL_WORKERS}; {expected}")
        return Scheduler(workers=int(count))
    match = _ADDRESS.match(text)
    if match is None:
        raise PlanError(f"--scheduler {spec!r}: {expected}")
    if not 1 <= int(match.group(2)) <= 65535:
        raise PlanError(f"--scheduler {spec!r}: the port must be 1 to 65535")
    return Scheduler(address=text)


def visible_gpus(environ=None) -> list[str]:
    """The NVIDIA GPUs this process may use, as CUDA_VISIBLE_DEVICES names them: that variable's
    list when it is set ("" or "-1": none), else one index per GPU ``nvidia-smi -L`` lists (none
    where it is missing or fails). No TensorFlow: the submitting process must not claim a GPU."""
    environ = os.environ if environ is None else environ
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        names = [name.strip() for name in listed.split(",") if name.strip()]
        return [] if not names or names[0] == "-1" else names
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    return [str(i) for i, line in enumerate(line for line in out.stdout.splitlines() if line.startswith("GPU "))]


def local_worker_env(worker: int, workers: int, gpus: list[str], cores: int) -> dict[str, str]:
    """The environment of worker ``worker`` of a LocalCluster of ``workers`` processes: as
    dask-cuda's LocalCUDACluster does, each worker sees one GPU (round robin over ``gpus``; with
    more workers than GPUs they share, TensorFlow's memory then allocated as it grows instead of
    all at once); without GPUs none, and cores / workers TensorFlow threads each."""
    env = {"TF_NUM_INTRAOP_THREADS": str(max(1, cores // workers)), "TF_NUM_INTEROP_THREADS": "1"}
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[worker % len(gpus)]
        if workers > len(gpus):
            env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    else:
        env["CUDA_VISIBLE_DEVICES"] = "-1"        # a CPU worker: no process claims a GPU by accident
    return env
