"""Cost of one gradient of the slab's exact conditional (``core.engine.slab_conditional``).

What a microcanonical sampler computes at each gradient evaluation: the log-density, its gradient
and the field the likelihood sees (``FieldModel.target_log_prob_and_field``), 2 chains, float32,
under ``tf.function(jit_compile=True)``, on a field seen through a slab mask (25 % of the planes unless ``--missing``) (noise 0.5) with
16 band powers sampled, for

* ``exact``: "conditional" as the engine builds it there (the slab's exact conditional);
* ``diagonal``: "conditional" with its diagonal centre and dense block (what it was before, and
  what any other mask gets), the same data;
* ``no mask``: the same field without the mask ("conditional" is exact there already).

The three are timed round by round (interleaved), medians printed with the ratio to ``diagonal``.
The first call's seconds (tracing and XLA's compilation) are printed for ``exact``.
Usage: ``nice python bench/slab_cost.py [--sizes 32 64] [--missing 0.25] [--rounds 5] [--calls 10]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CHAINS = 2


def _posteriors(n: int, missing: float) -> dict:
    import tensorflow as tf

    from core.engine import field_density
    from core.engine.field_density import FieldPosterior
    from core.field.grid import Grid
    from core.field.observations import Observations
    from core.field.power_spectrum import BandPowers
    from core.priors import LogNormalPrior

    shape = (n, n, n)
    grid = Grid(shape, 100.0)
    rng = np.random.default_rng(1)
    data = rng.normal(size=shape)
    mask = np.ones(shape, bool)
    mask[: round(n * missing)] = False
    k = grid.k_magnitude_full()
    edges = np.geomspace(k[k > 0].min() * 0.999, k.max() * 1.001, 17)
    spectrum = BandPowers(edges=edges, powers=[100.0] * 16, random_walk_scale=0.5)
    priors = {name: LogNormalPrior(loc=np.log(100.0), scale=2.0) for name in spectrum.parameters}

    def build(observations, exact=True):
        keep = field_density.slab_applies
        if not exact:
            field_density.slab_applies = lambda post: False
        try:
            return FieldPosterior(grid, spectrum, observations, hyper_priors=priors, preconditioner="conditional",
                                  dense_modes=1024, dtype=tf.float32)
        finally:
            field_density.slab_applies = keep

    masked = Observations.create(data, mask=mask, noise_sigma=0.5)
    plain = Observations.create(data, noise_sigma=0.5)
    out = {"exact": build(masked), "diagonal": build(masked, exact=False), "no mask": build(plain)}
    assert out["exact"].slab is not None and out["diagonal"].slab is None
    return out


def _timers(n: int, calls: int, missing: float) -> tuple[dict, dict]:
    import tensorflow as tf

    rng = np.random.default_rng(2)
    v = tf.constant(rng.normal(size=(CHAINS, n, n, n)), tf.float32)
    eta = tf.constant(np.log(100.0) + 0.1 * rng.normal(size=(CHAINS, 16)), tf.float32)
    timers, compile_s = {}, {}
    for name, post in _posteriors(n, missing).items():
        @tf.function(jit_compile=True)
        def step(v, eta, post=post):
            with tf.GradientTape() as tape:
                tape.watch([v, eta])
                lp, signal = post.log_prob_and_signal(v, eta)
            return lp, tape.gradient(lp, [v, eta]), signal

        t0 = time.perf_counter()
        step(v, eta)[1][0].numpy()
        compile_s[name] = time.perf_counter() - t0

        def run(step=step):
            out = []
            for _ in range(calls):
                t0 = time.perf_counter()
                step(v, eta)[2].numpy()
                out.append(time.perf_counter() - t0)
            return float(np.median(out))
        timers[name] = run
    return timers, compile_s


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[32, 64])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=10, help="gradient calls per round")
    p.add_argument("--missing", type=float, default=0.25, help="share of the planes along the first axis masked")
    args = p.parse_args(argv)
    print(" size | missing planes |  exact ms | diagonal ms | no mask ms | exact/diagonal | exact compile s")
    for n in args.sizes:
        timers, compile_s = _timers(n, args.calls, args.missing)
        rounds = {name: [] for name in timers}
        for _ in range(args.rounds):
            for name, run in timers.items():
                rounds[name].append(run())
        med = {name: float(np.median(v)) * 1e3 for name, v in rounds.items()}
        print(f" {n:>3}^3 | {round(n * args.missing):>14} | {med['exact']:9.2f} | {med['diagonal']:11.2f} | "
              f"{med['no mask']:10.2f} | {med['exact'] / med['diagonal']:14.2f} | {compile_s['exact']:15.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
