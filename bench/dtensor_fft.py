"""Measurement (issue #34, item 2: "measure DTensor first"): what TensorFlow's DTensor does with
the field's 3-D FFTs when the grid is sharded over a device mesh.

On D logical CPU devices (``tf.config.set_logical_device_configuration``, as on a GPU machine's
devices), for a slab mesh (x over D devices) and a pencil mesh (x, y over a x b = D), and grids
of even, odd and non-cubic shape, each op is run eagerly and in a tf.function on a DTensor
sharded that way, against numpy on the whole grid:

  fft3d (complex)     tf.signal.fft3d: DTensor's SPMD expansion (transposes + all-to-all)
  rfft3d / irfft3d    the transforms the field model uses (its half-spectrum, N/2+1 values)
  grad fft3d          a tf.GradientTape through fft3d of the sharded input

and prints, per case, "ok" with the maximum error and the output's sharding, or the error
TensorFlow gives. Then the time of fft3d on the sharded DTensor against rfft3d + irfft3d on one
device (the field's FFT pair), median of 7.

Usage: python bench/dtensor_fft.py [--devices 4] [--sizes 16 15 16x12x8] [--timing 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.experimental import dtensor  # noqa: E402


def _shape(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.split("x")]
    return tuple(parts * 3) if len(parts) == 1 else tuple(parts)


def _meshes(devices: int):
    names = [f"CPU:{i}" for i in range(devices)]
    out = {"slab": (dtensor.create_mesh([("x", devices)], devices=names), ["x", dtensor.UNSHARDED, dtensor.UNSHARDED])}
    a = int(np.sqrt(devices))
    while devices % a:
        a -= 1
    if a > 1:
        out["pencil"] = (dtensor.create_mesh([("x", a), ("y", devices // a)], devices=names),
                         ["x", "y", dtensor.UNSHARDED])
    return out


def _sharded(array, mesh, specs):
    d = dtensor.copy_to_mesh(tf.constant(array), dtensor.Layout.replicated(mesh, array.ndim))
    return dtensor.relayout(d, dtensor.Layout(specs, mesh))


def _gather(value, mesh):
    return np.asarray(dtensor.relayout(value, dtensor.Layout.replicated(mesh, len(value.shape))))


def _cases(a):
    c = np.fft.rfftn(a).astype(np.complex64)
    ops = {
        "fft3d": (lambda x: tf.signal.fft3d(x), a.astype(np.complex64), np.fft.fftn(a)),
        "rfft3d": (lambda x: tf.signal.rfft3d(x), a, np.fft.rfftn(a)),
        "irfft3d": (lambda x: tf.signal.irfft3d(x, fft_length=a.shape), c, a),
    }
    return ops


def _grad_fft3d(x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(tf.math.real(tf.signal.fft3d(x)) ** 2)
    return tape.gradient(y, x)


def probe(devices: int, sizes) -> None:
    for mesh_name, (mesh, specs) in _meshes(devices).items():
        for size in sizes:
            shape = _shape(size)
            a = np.random.default_rng(0).normal(size=shape).astype(np.float32)
            ops = _cases(a)
            ops["grad fft3d"] = (_grad_fft3d, a.astype(np.complex64), None)   # against the unsharded gradient
            for name, (fn, x, ref) in ops.items():
                for mode in ("eager", "function"):
                    f = fn if mode == "eager" else tf.function(fn)
                    try:
                        out = f(_sharded(x, mesh, specs))
                        layout = dtensor.fetch_layout(out).sharding_specs
                        got = _gather(out, mesh)
                        if ref is None:          # the gradient: against the same op unsharded
                            ref = np.asarray(_grad_fft3d(tf.constant(x)))
                        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
                        result = f"ok, relative error {err:.1e}, output sharded {layout}"
                    except Exception as exc:      # what DTensor says, first line
                        result = f"FAILS: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:160]}"
                    print(f"{mesh_name:6s} {'x'.join(map(str, shape)):9s} {name:10s} {mode:8s} {result}")


def timing(devices: int, n: int, repeats: int = 7) -> None:
    mesh, specs = _meshes(devices)["slab"]
    a = np.random.default_rng(1).normal(size=(n, n, n)).astype(np.float32)
    sharded = _sharded(a.astype(np.complex64), mesh, specs)
    local = tf.constant(a)
    dist = tf.function(lambda x: tf.signal.fft3d(x))
    pair = tf.function(lambda x: tf.signal.irfft3d(tf.signal.rfft3d(x), fft_length=[n, n, n]), jit_compile=True)

    def median(f, x):
        f(x)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = f(x)
            _ = out.numpy() if not dtensor.is_dtensor(out) else _gather(out, mesh)[0, 0, 0]
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    t_dist, t_pair = median(dist, sharded), median(pair, local)
    print(f"{n}^3: DTensor fft3d on a {devices}-device slab mesh {t_dist * 1e3:.1f} ms (median of {repeats}); "
          f"rfft3d + irfft3d on one device {t_pair * 1e3:.1f} ms; ratio {t_dist / t_pair:.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--sizes", nargs="+", default=["16", "15", "16x12x8"])
    p.add_argument("--timing", type=int, default=64)
    args = p.parse_args()
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices)
    print(f"TensorFlow {tf.__version__}, {args.devices} logical CPU devices")
    probe(args.devices, args.sizes)
    if args.timing:
        timing(args.devices, args.timing)


if __name__ == "__main__":
    main()
