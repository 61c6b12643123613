"""Benchmark (issue #34): the sharded 3-D real FFTs (``core.engine.sharded_fft``) and the field
posterior on a sharded field (``core.engine.sharded_density``) against the unsharded ones on the
same cores: time of one gradient, median of ``--repeats``. ``--what fft``: the field's FFT pair,
the VJP of x -> sum(w * irfft3d(rfft3d(x))^2) (forward + backward: 4 transforms), 1 chain;
``--what density``: log p and its gradient of ``FieldPosterior``'s white-noise density (a
power law, noise 0.5, a 25 % slab of x planes masked; 4 transforms) with ``--chains`` chains,
the sharded one under ``core.engine.placement``'s scope, as a sampler would call it.

Columns: ``whole (XLA)`` core.engine.fft jitted on one device (what the engine runs today),
``whole`` the same in a tf.function without XLA, then the slab and pencil meshes over
``--devices`` logical CPU devices (tf.function; TensorFlow runs the devices' parts in parallel
and copies the exchanged parts between them). Ratios are against ``whole (XLA)``. Logical
devices share this machine's cores, so this measures the decomposition's overhead (extra
transposes, copies, smaller transforms), not a real mesh's communication.

Usage: python bench/sharded_fft.py [--what fft density] [--devices 4] [--sizes 64 128] [--repeats 7]
       [--dtype float32] [--chains 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def _fft_programs(shape, dtype, meshes, chains) -> dict:
    """name -> (the gradient program of the FFT pair, its arguments): the whole grid's, jitted and
    not, and each mesh's."""
    from core.engine import fft, sharded_fft

    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(chains, *shape)), dtype)
    w = tf.constant(rng.uniform(0.5, 2, size=(chains, *shape)), dtype)

    def grad_of(transform):
        def grad(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = transform(x)
            return tape.gradient(loss, x)
        return grad

    def whole(x):
        y = fft.irfft3d(fft.rfft3d(x), fft_length=shape)
        return tf.reduce_sum(w * y * y)

    def on(mesh):
        def loss(x):
            parts = sharded_fft.irfft3d(sharded_fft.rfft3d(sharded_fft.shard(x, mesh), mesh), mesh)
            return tf.add_n([tf.reduce_sum(wp * yp * yp) for wp, yp in zip(sharded_fft.shard(w, mesh), parts)])
        return loss

    programs = {"xla": (tf.function(grad_of(whole), jit_compile=True), [x]), "whole": (tf.function(grad_of(whole)), [x])}
    programs.update({name: (tf.function(grad_of(on(mesh))), [x]) for name, mesh in meshes.items()})
    return programs


def _density_programs(shape, dtype, meshes, chains) -> dict:
    """The same for log p and its gradient of the white-noise field posterior (module docstring);
    a mesh's state is the latent's parts, on their devices."""
    from core.engine import placement, sharded_fft
    from core.engine.field_density import FieldPosterior
    from core.engine.sharded_density import ShardedFieldPosterior
    from core.field.grid import Grid
    from core.field.observations import Observations
    from core.field.power_spectrum import PowerLaw

    rng = np.random.default_rng(0)
    grid = Grid(shape, 2.0 * shape[0])
    mask = np.ones(shape, bool)
    mask[: shape[0] // 4] = False
    obs = Observations.create(rng.normal(size=shape), mask=mask, noise_sigma=0.5)
    whole = FieldPosterior(grid, PowerLaw(amplitude=30.0, index=-1.5, k_pivot=0.2), obs,
                           parameterisation="white_noise", dtype=dtype)
    u = tf.constant(rng.normal(size=(chains, *shape)), dtype)

    def value_and_grad(log_prob):
        return lambda *state: placement.value_and_gradient(log_prob, *state)

    programs = {"xla": (tf.function(value_and_grad(whole.log_prob), jit_compile=True), [u]),
                "whole": (tf.function(value_and_grad(whole.log_prob)), [u])}
    for name, mesh in meshes.items():
        programs[name] = (tf.function(value_and_grad(ShardedFieldPosterior(whole, mesh).log_prob)),
                          sharded_fft.shard(u, mesh))
    return programs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--what", nargs="+", default=["fft", "density"], choices=["fft", "density"])
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 128])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--chains", type=int, default=1)
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = p.parse_args()
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices)
    from core.engine.sharded_fft import ShardMesh

    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    dtype = tf.as_dtype(args.dtype)
    a = int(np.sqrt(args.devices))
    while args.devices % a:
        a -= 1
    print(f"TensorFlow {tf.__version__}, {args.devices} logical CPU devices on {os.cpu_count()} cores, {args.dtype}, "
          f"{args.chains} chain(s); ms per gradient, median of {args.repeats}")
    print(f"{'what':>7} {'grid':>6} | {'whole (XLA)':>11} {'whole':>8} | {'slab':>8} {'ratio':>6} | {'pencil':>8} {'ratio':>6}")
    for what in args.what:
        for n in args.sizes:
            shape = (n, n, n)
            meshes = {"slab": ShardMesh.slabs(devices, shape)}
            if a > 1:
                meshes["pencil"] = ShardMesh.pencils(devices, shape, a, args.devices // a)
            make = _fft_programs if what == "fft" else _density_programs
            programs = make(shape, dtype, meshes, args.chains)
            times = {name: [] for name in programs}
            for f, inputs in programs.values():
                tf.nest.map_structure(lambda t: t.numpy(), f(*inputs))        # compile
            for _ in range(args.repeats):                     # interleaved: the same load for each
                for name, (f, inputs) in programs.items():
                    t0 = time.perf_counter()
                    tf.nest.map_structure(lambda t: t.numpy(), f(*inputs))
                    times[name].append(time.perf_counter() - t0)
            ms = {name: 1e3 * statistics.median(t) for name, t in times.items()}
            pencil = (f"{ms['pencil']:8.1f} {ms['pencil'] / ms['xla']:6.2f}" if "pencil" in ms else f"{'-':>8} {'-':>6}")
            print(f"{what:>7} {n:>5}^3 | {ms['xla']:11.1f} {ms['whole']:8.1f} | {ms['slab']:8.1f} "
                  f"{ms['slab'] / ms['xla']:6.2f} | {pencil}", flush=True)


if __name__ == "__main__":
    main()
