"""Run in a fresh process (the device split must come before TensorFlow starts): the sharded
FFTs of ``core.engine.sharded_fft`` on 4 logical CPU devices against ``core.engine.fft`` on the
whole grid, float64. Prints one JSON object: case -> {check: max relative error, or a list of
device names}; used by tests/core/engine/test_sharded_fft.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.logical_devices import DEVICES, rel  # noqa: E402  (first: it splits the CPU before TensorFlow starts)

# isort: split

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from core.engine import fft, sharded_fft  # noqa: E402
from core.engine.sharded_fft import ShardMesh  # noqa: E402


def check(mesh: ShardMesh, batch: int, seed: int) -> dict:
    shape = mesh.shape
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.normal(size=(batch, *shape)))
    half = (batch, shape[0], shape[1], shape[2] // 2 + 1)
    spec = tf.constant(rng.normal(size=half) + 1j * rng.normal(size=half))
    weights = tf.constant(rng.uniform(0.5, 2.0, size=half))       # a nonlinear loss's weights
    out = {}

    @tf.function
    def forward(x, spec):
        return (sharded_fft.gather(sharded_fft.rfft3d(sharded_fft.shard(x, mesh), mesh), mesh, spectrum=True),
                sharded_fft.gather(sharded_fft.irfft3d(sharded_fft.shard(spec, mesh, spectrum=True), mesh), mesh))

    got_f, got_i = forward(x, spec)
    out["rfft3d"] = rel(got_f, fft.rfft3d(x))
    out["irfft3d"] = rel(got_i, fft.irfft3d(spec, fft_length=shape))
    out["rfft3d devices"] = [p.device for p in sharded_fft.rfft3d(sharded_fft.shard(x, mesh), mesh)]
    # the first device's view (its memory by XLA's account): its parts have the first device's
    # shapes, through each transform and its gradient
    view = mesh.device_view()
    real = [sharded_fft.rfft3d(sharded_fft.shard(x, mesh), mesh)[0],
            sharded_fft.irfft3d(sharded_fft.shard(spec, mesh, spectrum=True), mesh)[0]]
    with tf.GradientTape(persistent=True) as tape:
        vx, vs = sharded_fft.shard(x, view), sharded_fft.shard(spec, view, spectrum=True)
        tape.watch(vx + vs)
        seen = [sharded_fft.rfft3d(vx, view)[0], sharded_fft.irfft3d(vs, view)[0]]
        losses = [tf.reduce_sum(tf.abs(t)) for t in seen]
    grads = [tape.gradient(losses[0], vx[0]), tape.gradient(losses[1], vs[0])]
    out["device view"] = {"parts": [list(t.shape) for t in seen], "sharded": [list(t.shape) for t in real],
                          "gradients": [list(g.shape) for g in grads],
                          "inputs": [list(vx[0].shape), list(vs[0].shape)]}

    def loss_r(x, sharded):          # nonlinear in x: sum w |X|^2 + sum sin(x)
        X = (sharded_fft.gather(sharded_fft.rfft3d(sharded_fft.shard(x, mesh), mesh), mesh, spectrum=True)
             if sharded else fft.rfft3d(x))
        return tf.reduce_sum(weights * tf.math.real(X * tf.math.conj(X))) + tf.reduce_sum(tf.sin(x))

    def loss_i(s, sharded):
        y = (sharded_fft.gather(sharded_fft.irfft3d(sharded_fft.shard(s, mesh, spectrum=True), mesh), mesh) if sharded
             else fft.irfft3d(s, fft_length=shape))
        return tf.reduce_sum(tf.sin(3.0 * y))

    v = tf.constant(rng.normal(size=x.shape))
    u = tf.constant(rng.normal(size=half) + 1j * rng.normal(size=half))
    for name, loss, at, direction in (("rfft3d", loss_r, x, v), ("irfft3d", loss_i, spec, u)):
        results = {}
        for sharded in (False, True):
            @tf.function
            def grads(at, direction, sharded=sharded, loss=loss):
                with tf.GradientTape() as outer:
                    outer.watch(at)
                    with tf.GradientTape() as inner:
                        inner.watch(at)
                        value = loss(at, sharded)
                    g = inner.gradient(value, at)
                    gv = tf.reduce_sum(tf.math.real(tf.math.conj(g) * direction)) if g.dtype.is_complex \
                        else tf.reduce_sum(g * direction)
                return g, outer.gradient(gv, at)
            results[sharded] = grads(at, direction)
        out[f"{name} vjp"] = rel(results[True][0], results[False][0])
        out[f"{name} hvp"] = rel(results[True][1], results[False][1])
    return out


def main() -> None:
    cases = {}
    for label, shape in (("even 16^3", (16, 16, 16)), ("odd 15^3", (15, 15, 15)), ("non-cubic 12x10x6", (12, 10, 6)),
                         ("uneven 7x5x9", (7, 5, 9))):
        cases[f"slab {label}"] = check(ShardMesh.slabs(DEVICES, shape), batch=2, seed=1)
        cases[f"pencil {label}"] = check(ShardMesh.pencils(DEVICES, shape, 2, 2), batch=1, seed=2)
    errors = {}
    for shape, make in (((3, 8, 8), lambda s: ShardMesh.slabs(DEVICES, s)),
                        ((8, 8, 4), lambda s: ShardMesh.pencils(DEVICES, s, 1, 4))):
        try:
            make(shape)
            errors[str(shape)] = "accepted"
        except ValueError as err:
            errors[str(shape)] = str(err)
    json.dump({"devices": DEVICES, "cases": cases, "refused": errors}, sys.stdout)


if __name__ == "__main__":
    main()
