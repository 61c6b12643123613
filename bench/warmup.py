"""Benchmark: what warmup costs and how it starts, on the built-in demo (32^3 field, a mask).

For each algorithm (HMC with the demo's 10 leapfrog steps, NUTS) and each start step size,
one engine run of the demo config (``core.demo``: 150 warmup + 300 sampling steps, 2 chains,
the spectral index sampled, adapted diagonal mass) is read back from its store and reported:

  div<50     divergences in the first 50 warmup steps, per chain
  eps0       the step size of the first step, per chain (the search's result, or sampler.step_size)
  eps        the final (sampling) step size per chain, and the ratio of the largest to the smallest
  accept     mean acceptance of the sampling phase
  leap w/s   leapfrog steps (gradient evaluations) of warmup and of sampling, all chains, and
             their ratio; NUTS also per warmup window (before / in / after the mass window)
  time w/s   wall seconds of warmup and of sampling (the store's ``timing`` attribute) and ratio

Compilation is inside the first chunk's time (warmup). Usage:
python bench/warmup.py [--algorithms hmc nuts] [--step-sizes 0.05] [--warmup 150] [--samples 300]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from core.config import parse_config  # noqa: E402
from core.demo import write_demo  # noqa: E402
from core.engine.engine import Engine  # noqa: E402
from core.store.run_store import RunReader  # noqa: E402


def demo_text(directory: Path, algorithm: str, step_size: float, warmup: int, samples: int,
              exact: bool) -> str:
    paths = write_demo(directory)
    text = paths["exact_config" if exact else "field_config"].read_text()
    text = (text.replace('algorithm = "hmc"', f'algorithm = "{algorithm}"')
            .replace("step_size = 0.05", f"step_size = {step_size!r}")
            .replace("num_warmup = 150", f"num_warmup = {warmup}")
            .replace("num_samples = 300", f"num_samples = {samples}"))
    return text


def report(run_dir: Path, warmup: int) -> dict:
    r = RunReader(run_dir)
    div = r.stat("diverging", warmup=True)[:, :50].sum(axis=1)
    steps_w = r.stat("step_size", warmup=True)
    steps_s = r.stat("step_size")
    leap_w = r.stat("n_steps", warmup=True)
    leap_s = r.stat("n_steps")
    timing = r.attrs.get("timing") or {}
    a, b = int(0.15 * warmup), int(0.75 * warmup)
    return dict(div50=div.tolist(), eps0=steps_w[:, 0].tolist(), eps=steps_s[:, -1].tolist(),
                accept=float(r.stat("acceptance_rate").mean()),
                leap_w=int(leap_w.sum()), leap_s=int(leap_s.sum()),
                leap_windows=[int(leap_w[:, :a].sum()), int(leap_w[:, a:b].sum()), int(leap_w[:, b:].sum())],
                t_w=float(timing.get("warmup_seconds", np.nan)), t_s=float(timing.get("sampling_seconds", np.nan)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algorithms", nargs="+", default=["hmc", "nuts"])
    ap.add_argument("--step-sizes", nargs="+", type=float, default=[0.05])
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--exact", action="store_true", help="the demo with P(k) fixed (field_exact.toml)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for algorithm in args.algorithms:
            for step_size in args.step_sizes:
                d = Path(tmp) / f"{algorithm}-{step_size}"
                d.mkdir()
                text = demo_text(d, algorithm, step_size, args.warmup, args.samples, args.exact)
                config = parse_config(text, base_dir=d)
                status = Engine(config, text, d / "run").start()
                m = report(d / "run", args.warmup)
                eps = np.asarray(m["eps"])
                print(f"{algorithm:4s} step_size={step_size:<8g} {status}: div<50 {m['div50']}  "
                      f"eps0 {np.round(m['eps0'], 4).tolist()}  eps {np.round(eps, 4).tolist()} "
                      f"(max/min {eps.max() / eps.min():.2f})  accept {m['accept']:.3f}")
                print(f"      leap w/s {m['leap_w']} / {m['leap_s']} = {m['leap_w'] / m['leap_s']:.2f} "
                      f"(warmup windows {m['leap_windows']})  time w/s {m['t_w']:.1f} / {m['t_s']:.1f} s "
                      f"= {m['t_w'] / m['t_s']:.2f}", flush=True)


if __name__ == "__main__":
    main()
