"""Benchmark: HMC gradient evaluations per second on the 64^3 Gaussian field posterior.

Same model everywhere: whitened Fourier modes, Gaussian likelihood (uniform noise, a
mask), fixed P(k), float32, HMC with 10 leapfrog steps. Measured side by side in one run:

  density    value + gradient of the log-density alone, one jitted call (1 and 4 chains)
  bare       the engine's HMC step (core.engine.hmc, unrolled) and its dual-averaging update
             (frozen as after warmup) in one XLA while loop, nothing recorded: the floor
  tfp        the same with TFP's stock HamiltonianMonteCarlo (its while-loop integrator)
  engine     Fieldscope's engine on the same config: chunks, every statistic, field
             moments, thinned draws and their P(k), store writes, checkpoints, events

Gradient evaluations per second count every chain: chains * steps * leapfrog / seconds.
The engine's overhead is (engine time / bare time) - 1 for the same number of sampling
steps. Prints medians over repeats and the ratios. Usage:
python bench/hmc.py [--size 64] [--steps 200] [--repeats 3] [--chains 1 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import cases  # noqa: E402  (bench/cases.py)
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402

from core.config import parse_config  # noqa: E402
from core.demo import DEMO_SPECTRUM  # noqa: E402
from core.engine import hmc  # noqa: E402
from core.engine.adaptation.dual_averaging import DualAveragingState, dual_averaging_step, fresh_dual_averaging  # noqa: E402
from core.engine.engine import Engine  # noqa: E402
from core.engine.models import build_model  # noqa: E402

LEAPFROG = 10



def median_time(call, repeats: int) -> float:
    """Median wall time of ``repeats`` calls of ``call``, after one that compiles."""
    call()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def write_case(directory: Path, n: int) -> None:
    cases.write_data(directory, n)


def config_for(directory: Path, chains: int, warmup: int, samples: int):
    text = cases.config_text(
        DEMO_SPECTRUM["index"], field={"parameterisation": "whitened", "dtype": "float32"},
        sampler={"algorithm": "hmc", "num_warmup": warmup, "num_samples": samples,
                 "num_leapfrog_steps": LEAPFROG, "step_size": 0.05, "chains": chains, "seed": 1,
                 "thin": 10, "chunk_size": 50})
    return parse_config(text, base_dir=directory), text


def time_density(directory, chains, repeats):
    config, _ = config_for(directory, chains, 10, 10)
    model = build_model(config)
    state = model.initial_state(chains, 0)
    fn = tf.function(lambda *p: tfp.math.value_and_gradient(model.target_log_prob_fn, list(p)),
                     jit_compile=True)
    return median_time(lambda: fn(*state)[0].numpy(), repeats * 20)


def time_bare(directory, chains, steps, repeats, kernel_cls):
    """The kernel after warmup in one sample_chain call: the floor."""
    config, _ = config_for(directory, chains, 10, steps)
    model = build_model(config)
    state = model.initial_state(chains, 0)
    step = [tf.fill([chains] + [1] * (len(p.shape) - 1), tf.constant(0.05, tf.float32)) for p in state]
    kernel = tfp.mcmc.DualAveragingStepSizeAdaptation(
        kernel_cls(model.target_log_prob_fn, step, LEAPFROG), num_adaptation_steps=0)

    @tf.function(jit_compile=True)
    def chain(state):
        return tfp.mcmc.sample_chain(steps, state, kernel=kernel, trace_fn=None, seed=[1, 2])

    return median_time(lambda: chain(state)[0].numpy(), repeats)


def time_bare_step(directory, chains, steps, repeats):
    """The engine's HMC step with its dual-averaging update, after warmup, in one compiled loop."""
    config, _ = config_for(directory, chains, 10, steps)
    model = build_model(config)
    target = model.target_log_prob_fn
    state = model.initial_state(chains, 0)
    step = [tf.fill([chains] + [1] * (len(p.shape) - 1), tf.constant(0.05, tf.float32)) for p in state]
    kernel = hmc.build_kernel(target, hmc.leapfrog_proposal(target, LEAPFROG, LEAPFROG))
    adaptation = DualAveragingState(**fresh_dual_averaging(step, chains, tf.float32, da_step=0, num_adapt=0))
    accept = tf.constant(0.8, tf.float32)

    @tf.function(jit_compile=True)
    def chain(position):
        def body(i, s, da):
            moved, info = kernel(tf.random.experimental.stateless_fold_in(tf.constant([1, 2]), i), s, da.step_size)
            return i + 1, moved, dual_averaging_step(da, info.log_accept_ratio, accept, s.position)
        _, s, _ = tf.while_loop(lambda i, *_: i < steps, body, (tf.constant(0), hmc.init(position, target),
                                                               adaptation))
        return s.position

    return median_time(lambda: chain(state)[0].numpy(), repeats)


def time_engine(directory, chains, steps, repeats):
    """Wall time of the engine's sampling chunks (after a short warmup and compilation)."""
    results = []
    for r in range(repeats):
        config, text = config_for(directory, chains, 50, steps)
        marks = {}

        def emit(event):
            if event.get("type") == "chunk" and event["first_step"] + event["n_steps"] == 50:
                marks["start"] = time.perf_counter()

        run_dir = Path(tempfile.mkdtemp(dir=directory))
        Engine(config, text, run_dir, emit=emit).start()
        results.append(time.perf_counter() - marks["start"])
    return statistics.median(results)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chains", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    n = args.size
    print(f"TensorFlow {tf.__version__}, TFP {tfp.__version__}; CPU cores: {os.cpu_count()}; "
          f"{n}^3 Gaussian posterior, whitened modes, float32, HMC {LEAPFROG} leapfrog steps, "
          f"{args.steps} sampling steps per measurement, median of {args.repeats}")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        write_case(directory, n)
        print(f"{'chains':>6} | {'value+grad ms':>13} | {'tfp grad/s':>10} | {'bare grad/s':>11} | "
              f"{'engine grad/s':>13} | {'engine overhead':>15}")
        for chains in args.chains:
            dens = time_density(directory, chains, args.repeats)
            stock = time_bare(directory, chains, args.steps, args.repeats, tfp.mcmc.HamiltonianMonteCarlo)
            bare = time_bare_step(directory, chains, args.steps, args.repeats)
            eng = time_engine(directory, chains, args.steps, args.repeats)
            evals = chains * args.steps * LEAPFROG
            print(f"{chains:>6} | {1e3 * dens:13.2f} | {evals / stock:10.0f} | {evals / bare:11.0f} | "
                  f"{evals / eng:13.0f} | "
                  f"{100 * (eng / bare - 1):14.1f}%", flush=True)


if __name__ == "__main__":
    main()
