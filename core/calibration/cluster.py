"""Where a calibration's batches run: ``fieldscope calibrate ... --scheduler SPEC``.

``parse_scheduler(spec)`` reads the option before TensorFlow or Dask load, so that a typo is
refused at once: ``local:N`` starts a Dask ``LocalCluster`` of N worker processes on this
machine; ``tcp://HOST:PORT`` (or ``tls://``) connects to the scheduler of a running Dask
distributed cluster (``dask scheduler`` and ``dask worker tcp://HOST:PORT`` on its machines,
each worker with Fieldscope installed and the config's files at the same paths). The batches
themselves run in ``core.engine.calibrate_cluster``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.calibration.plan import PlanError

__all__ = ["Scheduler", "parse_scheduler", "MAX_LOCAL_WORKERS"]

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
