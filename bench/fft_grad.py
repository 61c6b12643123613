"""Benchmark: forward + VJP of core.engine.fft's irfft3d and rfft3d against two baselines.

For each size (32^3, 64^3, 128^3), dtype (float32, float64) and execution mode (eager,
tf.function, tf.function(jit_compile=True)) it times, side by side and interleaved
round by round so that all three see the same machine state:

  ours       the loss through core.engine.fft with tf.GradientTape
  hand       the same loss and its exact gradient written by hand with plain
             tf.signal FFTs and no gradient machinery (the floor: one FFT each way)
  composite  the loss through Hermitian completion + complex ifft3d / fft3d, which
             TensorFlow differentiates by itself

Losses (realistic for field inference):
  irfft3d:  L(X) = 0.5 sum (irfft3d(X) - D)^2        dL/dX = (w/N) rfft3d(x - D)
  rfft3d:   L(x) = 0.5 sum W (Re X^2 + Im X^2),       dL/dx = N irfft3d(W X / w)
            X = rfft3d(x) (written with real/imag so that the loss's own autodiff is W X,
            exactly what the hand-written gradient computes)

Prints medians and min-max in milliseconds, the ratios of medians ours/hand and
composite/ours, and ours/hand of the minima (the least disturbed runs on a shared machine).
Never fails for being slow. Usage: python bench/fft_grad.py [--sizes 32 64 128]
[--repeats 9] [--modes eager function jit] [--dtypes float32 float64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from core.engine import fft  # noqa: E402
from core.engine.fft_composite import composite_irfft3d, composite_rfft3d  # noqa: E402


def irfft_cases(n, rdtype):
    cdtype = tf.complex64 if rdtype == tf.float32 else tf.complex128
    shape = (n, n, n)
    rng = np.random.default_rng(0)
    data = tf.constant(rng.normal(size=shape), rdtype)
    spectrum = tf.cast(tf.signal.rfft3d(tf.constant(rng.normal(size=shape), rdtype)), cdtype)
    scale = tf.constant(fft.half_spectrum_weights(n) / n**3, cdtype)

    def ours(s):
        with tf.GradientTape() as tape:
            tape.watch(s)
            loss = 0.5 * tf.reduce_sum(tf.square(fft.irfft3d(s) - data))
        return loss, tape.gradient(loss, s)

    def hand(s):
        residual = tf.signal.irfft3d(s) - data
        return 0.5 * tf.reduce_sum(tf.square(residual)), tf.signal.rfft3d(residual) * scale

    def composite(s):
        with tf.GradientTape() as tape:
            tape.watch(s)
            loss = 0.5 * tf.reduce_sum(tf.square(composite_irfft3d(s, shape) - data))
        return loss, tape.gradient(loss, s)

    return spectrum, {"ours": ours, "hand": hand, "composite": composite}


def rfft_cases(n, rdtype):
    cdtype = tf.complex64 if rdtype == tf.float32 else tf.complex128
    shape = (n, n, n)
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=shape), rdtype)
    weights = tf.constant(rng.uniform(0.5, 2.0, size=(n, n, n // 2 + 1)), rdtype)
    back_scale = tf.constant(n**3 / fft.half_spectrum_weights(n), cdtype)

    def ours(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            spectrum = fft.rfft3d(v)
            loss = 0.5 * tf.reduce_sum(weights * (tf.math.real(spectrum)**2 + tf.math.imag(spectrum)**2))
        return loss, tape.gradient(loss, v)

    def hand(v):
        spectrum = tf.signal.rfft3d(v)
        loss = 0.5 * tf.reduce_sum(weights * (tf.math.real(spectrum)**2 + tf.math.imag(spectrum)**2))
        return loss, tf.signal.irfft3d(tf.cast(weights, cdtype) * spectrum * back_scale)

    def composite(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            spectrum = composite_rfft3d(v)
            loss = 0.5 * tf.reduce_sum(weights * (tf.math.real(spectrum)**2 + tf.math.imag(spectrum)**2))
        return loss, tape.gradient(loss, v)

    return x, {"ours": ours, "hand": hand, "composite": composite}


def compile_mode(fn, mode):
    if mode == "eager":
        return fn
    return tf.function(fn, jit_compile=(mode == "jit"))


def time_interleaved(arg, fns, repeats):
    """Median/min/max seconds per call; implementations alternate within each round."""
    for fn in fns.values():  # trace, compile, warm caches
        fn(arg)[0].numpy()
        fn(arg)[0].numpy()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            loss, grad = fn(arg)
            loss.numpy()
            samples[name].append(time.perf_counter() - start)
            del grad
    return {name: (statistics.median(s), min(s), max(s)) for name, s in samples.items()}


def check_agreement(arg, fns):
    """The three implementations compute the same gradient (a benchmark of wrong code is moot)."""
    grads = {name: fn(arg)[1].numpy() for name, fn in fns.items()}
    ref = grads["hand"]
    return max(float(np.abs(g - ref).max() / np.abs(ref).max()) for g in grads.values())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--modes", nargs="+", default=["eager", "function", "jit"])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    args = parser.parse_args()

    devices = [d.name for d in tf.config.list_logical_devices()]
    print(f"TensorFlow {tf.__version__}; CPU cores: {os.cpu_count()}; devices: {', '.join(devices)}")
    print(f"repeats per cell: {args.repeats} (interleaved); times in ms; "
          "ratios are of medians")
    header = (f"{'op':8} {'size':>5} {'dtype':8} {'mode':9} | {'ours median (min-max)':>24} | "
              f"{'hand median (min-max)':>24} | {'composite median (min-max)':>26} | "
              f"{'ours/hand':>9} | {'comp/ours':>9} | {'min ratio':>9} | {'grad agree':>10}")
    print(header)
    print("-" * len(header))
    for op_name, builder in (("irfft3d", irfft_cases), ("rfft3d", rfft_cases)):
        for n in args.sizes:
            for dtype_name in args.dtypes:
                rdtype = getattr(tf, dtype_name)
                arg, fns = builder(n, rdtype)
                for mode in args.modes:
                    compiled = {name: compile_mode(fn, mode) for name, fn in fns.items()}
                    agree = check_agreement(arg, compiled)
                    stats = time_interleaved(arg, compiled, args.repeats)

                    def cell(name, width=24):
                        med, lo, hi = (1e3 * v for v in stats[name])
                        return f"{med:8.2f} ({lo:6.2f}-{hi:7.2f})".rjust(width)

                    ratio = stats["ours"][0] / stats["hand"][0]
                    speedup = stats["composite"][0] / stats["ours"][0]
                    ratio_min = stats["ours"][1] / stats["hand"][1]
                    print(f"{op_name:8} {n:>4}^3 {dtype_name:8} {mode:9} | {cell('ours')} | "
                          f"{cell('hand')} | {cell('composite', 26)} | {ratio:9.2f} | "
                          f"{speedup:9.2f} | {ratio_min:9.2f} | {agree:10.1e}", flush=True)


if __name__ == "__main__":
    main()
