"""Benchmark: XLA's memory account of the slab's exact conditional, against the estimate.

Each case compiles, in a fresh process with ``--xla_dump_to``, what a microcanonical sampler
computes at each gradient (the log-density, its gradient and the field, 2 chains, float32 state;
``bench/slab_cost.py``'s posteriors: 16 band powers, a slab of ``missing`` of the planes along
the first axis) for "conditional" made exact under the slab (``exact``) and with its diagonal
centre and dense block (``diagonal``), and reads the program's buffer assignment (parameters,
outputs, temporaries: ``bench/device_memory.py``'s reader). Printed: both totals, the
difference, and what ``core.run.resources`` adds for the slab's factors
(``slab_factor_bytes``, an upper bound of that difference; the dense block it drops aside).

Usage: python bench/slab_memory.py [--cases 32:0.25 64:0.25 64:0.5 96:0.25 128:0.25]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

CHAINS = 2


def worker(n: int, missing: float, which: str) -> dict:
    import numpy as np
    import slab_cost
    import tensorflow as tf

    post = slab_cost._posteriors(n, missing)[which]   # noqa: SLF001
    rng = np.random.default_rng(2)
    v = tf.constant(rng.normal(size=(CHAINS, n, n, n)), tf.float32)
    eta = tf.constant(np.log(100.0) + 0.1 * rng.normal(size=(CHAINS, 16)), tf.float32)

    @tf.function(jit_compile=True)
    def step(v, eta):
        with tf.GradientTape() as tape:
            tape.watch([v, eta])
            lp, signal = post.log_prob_and_signal(v, eta)
        return lp, tape.gradient(lp, [v, eta]), signal

    step(v, eta)
    return {"rows": post.slab.n_rows if post.slab is not None else 0}


def account(n: int, missing: float, which: str) -> tuple[float, dict]:
    """The largest compiled program's bytes and the worker's answer."""
    from device_memory import program_units

    with tempfile.TemporaryDirectory() as dump:
        env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={dump}", TF_CPP_MIN_LOG_LEVEL="3")
        out = subprocess.run([sys.executable, __file__, "--worker", str(n), str(missing), which], env=env,
                             capture_output=True, text=True, check=True)
        return max(m["total"] for m in program_units(Path(dump), 1)), json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", default=["32:0.25", "64:0.25", "64:0.5", "96:0.25", "128:0.25"],
                   help="size:share of the planes missing")
    p.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(int(args.worker[0]), float(args.worker[1]), args.worker[2])))
        return 0
    from core.run.resources import slab_factor_bytes

    mib = 2**20
    print(" size |  r | rows | exact MiB | diagonal MiB | difference MiB | estimate's factors MiB")
    for case in args.cases:
        n, share = case.split(":")
        n, share = int(n), float(share)
        exact, info = account(n, share, "exact")
        diagonal, _ = account(n, share, "diagonal")
        r = round(n * share)
        estimate = slab_factor_bytes((n, n, n), (0, r), CHAINS)
        print(f" {n:>3}^3 | {r:>2} | {info['rows']:>4} | {exact / mib:9.1f} | {diagonal / mib:12.1f} | "
              f"{(exact - diagonal) / mib:14.1f} | {estimate / mib:22.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
