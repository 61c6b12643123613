"""Benchmark (issue #34): the sharded 3-D real FFTs (``core.engine.sharded_fft``) against the
unsharded ones on the same cores: time of one gradient of the field's FFT pair, the VJP of
x -> sum(w * irfft3d(rfft3d(x))^2) (forward + backward: 4 transforms), median of ``--repeats``.

Columns: ``whole (XLA)`` core.engine.fft jitted on one device (what the engine runs today),
``whole`` the same in a tf.function without XLA, then the slab and pencil meshes over
``--devices`` logical CPU devices (tf.function; TensorFlow runs the devices' parts in parallel
and copies the exchanged parts between them). Ratios are against ``whole (XLA)``. Logical
devices share this machine's cores, so this measures the decomposition's overhead (extra
transposes, copies, smaller transforms), not a real mesh's communication.

Usage: python bench/sharded_fft.py [--devices 4] [--sizes 64 128] [--repeats 7] [--dtype float32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 128])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = p.parse_args()
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices)
    from core.engine import fft, sharded_fft
    from core.engine.sharded_fft import ShardMesh

    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    a = int(np.sqrt(args.devices))
    while args.devices % a:
        a -= 1
    print(f"TensorFlow {tf.__version__}, {args.devices} logical CPU devices on {os.cpu_count()} cores, {args.dtype}; "
          f"ms per gradient of the FFT pair, median of {args.repeats}")
    print(f"{'grid':>6} | {'whole (XLA)':>11} {'whole':>8} | {'slab':>8} {'ratio':>6} | {'pencil':>8} {'ratio':>6}")
    for n in args.sizes:
        shape = (n, n, n)
        x = tf.constant(np.random.default_rng(0).normal(size=(1, *shape)), args.dtype)
        w = tf.constant(np.random.default_rng(1).uniform(0.5, 2, size=(1, *shape)), args.dtype)

        def whole(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = fft.irfft3d(fft.rfft3d(x), fft_length=shape)
                loss = tf.reduce_sum(w * y * y)
            return tape.gradient(loss, x)

        def sharded(mesh):
            def grad(x):
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    parts = sharded_fft.irfft3d(sharded_fft.rfft3d(sharded_fft.shard(x, mesh), mesh), mesh)
                    weights = sharded_fft.shard(w, mesh)
                    loss = tf.add_n([tf.reduce_sum(wp * yp * yp) for wp, yp in zip(weights, parts)])
                return tape.gradient(loss, x)
            return tf.function(grad)

        programs = {"xla": tf.function(whole, jit_compile=True), "whole": tf.function(whole),
                    "slab": sharded(ShardMesh.slabs(devices, shape))}
        if a > 1:
            programs["pencil"] = sharded(ShardMesh.pencils(devices, shape, a, args.devices // a))
        times = {name: [] for name in programs}
        for name, f in programs.items():
            f(x).numpy()                                  # compile
        for _ in range(args.repeats):                     # interleaved: the same load for each
            for name, f in programs.items():
                t0 = time.perf_counter()
                f(x).numpy()
                times[name].append(time.perf_counter() - t0)
        ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
        pencil = (f"{ms['pencil']:8.1f} {ms['pencil'] / ms['xla']:6.2f}" if "pencil" in ms else f"{'-':>8} {'-':>6}")
        print(f"{n:>5}^3 | {ms['xla']:11.1f} {ms['whole']:8.1f} | {ms['slab']:8.1f} {ms['slab'] / ms['xla']:6.2f} | {pencil}")


if __name__ == "__main__":
    main()
