"""Run in a fresh process (the device split must come before TensorFlow starts): the sharded field
posterior of ``core.engine.sharded_density`` on 4 logical CPU devices against
``FieldPosterior`` on the whole grid (float64), and a sharded HMC run against the exact Wiener
posterior. Prints one JSON object; used by tests/core/engine/test_sharded_density.py."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.logical_devices import DEVICES, rel  # noqa: E402  (first: it splits the CPU before TensorFlow starts)

# isort: split

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from core.engine import hmc, nuts, placement, sharded_fft  # noqa: E402
from core.engine.field_density import FieldPosterior  # noqa: E402
from core.engine.sharded_density import ShardedFieldPosterior  # noqa: E402
from core.engine.sharded_fft import ShardMesh  # noqa: E402
from core.field.grid import Grid  # noqa: E402
from core.field.observations import Observations  # noqa: E402
from core.field.power_spectrum import BandPowers, PowerLaw, PowerLawCutoff, band_edges  # noqa: E402
from core.priors import LogNormalPrior, NormalPrior  # noqa: E402
from core.reference.wiener import wiener_posterior  # noqa: E402


def _observations(grid, rng, *, noise_map: bool, beam):
    data = rng.normal(size=grid.shape)
    mask = np.ones(grid.shape, bool)
    mask[: max(1, grid.shape[0] // 4)] = False                       # a slab of x planes unobserved
    noise = rng.uniform(0.3, 0.8, size=grid.shape) if noise_map else None
    return Observations.create(data, mask=mask, noise_sigma=None if noise_map else 0.5, noise_map=noise,
                               smoothing_scale=beam, field_mean=0.2)


def _models(grid, rng):
    """(label, FieldPosterior, number of hyperparameters) of the cases compared."""
    edges = band_edges(grid.k_magnitude_full(), 4)
    bands = BandPowers(tuple(edges), (3.0, 2.0, 1.5, 1.0), random_walk_scale=0.5)
    return [
        ("fixed power law, noise map, beam", FieldPosterior(
            grid, PowerLaw(amplitude=30.0, index=-1.5, k_pivot=0.2),
            _observations(grid, rng, noise_map=True, beam=1.5),
            parameterisation="white_noise", dtype=tf.float64), 0),
        ("cutoff, index and amplitude sampled", FieldPosterior(
            grid, PowerLawCutoff(amplitude=30.0, index=-1.0, k_pivot=0.2, cutoff_scale=1.0),
            _observations(grid, rng, noise_map=False, beam=None),
            hyper_priors={"amplitude": LogNormalPrior(3.0, 1.0), "index": NormalPrior(-1.0, 0.5)},
            parameterisation="white_noise", dtype=tf.float64), 2),
        ("band powers sampled", FieldPosterior(
            grid, bands, _observations(grid, rng, noise_map=False, beam=None),
            hyper_priors=dict.fromkeys(bands.parameters, LogNormalPrior(1.0, 1.0)),
            parameterisation="white_noise", dtype=tf.float64), 4),
    ]


def density_cases() -> dict:
    out = {}
    for label, shape in (("odd 7x5x9", (7, 5, 9)), ("even 8^3", (8, 8, 8))):
        grid = Grid(shape, (14.0, 10.0, 18.0) if shape[0] == 7 else 16.0)
        rng = np.random.default_rng(3)
        for name, whole, n_hyper in _models(grid, rng):
            latent = tf.constant(rng.normal(size=(2, *shape)))
            eta = tf.constant(rng.normal(0.5, 0.3, size=(2, n_hyper))) if n_hyper else None
            state = [latent] + ([eta] if n_hyper else [])

            def whole_lp(*s, whole=whole):
                return whole.log_prob(*s)
            lp_ref, grads_ref, _ = _value_and_grads(whole_lp, state)
            for mesh_name, mesh in (("slab", ShardMesh.slabs(DEVICES, shape)),
                                    ("pencil", ShardMesh.pencils(DEVICES, shape, 2, 2))):
                sharded = ShardedFieldPosterior(whole, mesh)
                sharded_state = sharded_fft.shard(latent, mesh) + ([eta] if n_hyper else [])
                cells = min(int(np.prod(p.shape[1:])) for p in sharded_state[:len(mesh.devices)])
                lp, grads, unplaced = _value_and_grads(sharded.log_prob, sharded_state, cells)
                latent_grad = sharded_fft.gather(grads[:len(mesh.devices)], mesh)
                result = {"log_prob": rel(lp, lp_ref), "latent gradient": rel(latent_grad, grads_ref[0]),
                          "unplaced grid ops": unplaced}
                if n_hyper:
                    result["eta gradient"] = rel(grads[-1], grads_ref[-1])
                out[f"{mesh_name} {label} {name}"] = result
    return out


_CONTROL_FLOW = ("While", "StatelessWhile", "If", "StatelessIf")


def unplaced_grid_ops(graph, part_cells: int) -> list[str]:
    """The op types, in ``graph`` and every function it calls (loop bodies, branches), that make
    part-sized values (``part_cells`` elements or more) no one placed and something uses: they
    would run on the default device. Loops and conditionals are calls of those functions and
    are not counted themselves (their outputs are followed through to where their bodies made
    them); where TensorFlow puts the switches it lowers them to is not checked here."""
    found, seen = set(), set()

    def walk(g):
        used = {t.op.name for op in g.get_operations() for t in op.inputs}
        for op in g.get_operations():
            if (not op.device and op.outputs and op.outputs[0].shape.is_fully_defined()
                    and op.outputs[0].shape.num_elements() >= part_cells and op.name in used
                    and op.type not in ("Placeholder", "NoOp", *_CONTROL_FLOW)):
                found.add(op.type)
        for name, function in getattr(g, "_functions", {}).items():
            if name not in seen and hasattr(function, "graph"):
                seen.add(name)
                walk(function.graph)
    walk(graph)
    return sorted(found)


def _value_and_grads(fn, state, part_cells=None):
    """log p, its gradient, and with ``part_cells`` the ``unplaced_grid_ops`` of the traced function."""
    f = tf.function(lambda *state: placement.value_and_gradient(fn, *state))
    lp, grads = f(*state)
    unplaced = None if part_cells is None else unplaced_grid_ops(f.get_concrete_function(*state).graph, part_cells)
    return lp.numpy(), grads, unplaced


def wiener_run(steps: int = 400, burn: int = 100, chains: int = 4, leapfrog: int = 8, step_size: float = 0.3) -> dict:
    """HMC (``core.engine.hmc``, a jittered step) on the sharded density of a 16^3 field under a slab
    mask, slabs over the 4 devices; each part's running sums of x and x^2 kept on its device;
    the mean and sd against the exact Wiener posterior (``core.reference.wiener``)."""
    shape, box = (16, 16, 16), 64.0
    grid = Grid(shape, box)
    rng = np.random.default_rng(7)
    spectrum = PowerLaw(amplitude=200.0, index=-1.5, k_pivot=0.1)
    s_half = np.where(grid.k_magnitude_half() > 0,
                      spectrum.evaluate(np.maximum(grid.k_magnitude_half(), 1e-12)) * grid.n_cells**2 / grid.volume, 0.0)
    truth = np.fft.irfftn(np.sqrt(s_half / 2) * (rng.normal(size=s_half.shape) + 1j * rng.normal(size=s_half.shape)),
                          s=shape, axes=(0, 1, 2))
    # the latent's posterior precision is about 1 + S_k / (N sigma^2) per mode: at most 10 here, so
    # that a step of 0.3 is stable and 8 of them cross a unit-scale direction
    sigma = float(np.sqrt(np.max(s_half) / grid.n_cells / 9.0))
    mask = np.ones(shape, bool)
    mask[:4] = False
    data = np.where(mask, truth + sigma * rng.normal(size=shape), np.nan)
    obs = Observations.create(data, mask=mask, noise_sigma=sigma)
    whole = FieldPosterior(grid, spectrum, obs, parameterisation="white_noise", dtype=tf.float64)
    mesh = ShardMesh.slabs(DEVICES, shape)
    sharded = ShardedFieldPosterior(whole, mesh)
    target = sharded.log_prob
    step = hmc.build_kernel(target, hmc.leapfrog_proposal(target, leapfrog))      # looped: a loop in the loop
    start = sharded_fft.shard(tf.constant(rng.normal(size=(chains, *shape))), mesh)
    step_sizes = [tf.constant(step_size, tf.float64)] * len(start)

    @tf.function
    def run(position):
        with placement.placed_by_inputs():
            state = hmc.init(placement.pinned(position, mesh.devices), target)
            zeros = []
            for p, device in zip(position, mesh.devices):
                with tf.device(device):
                    zeros.append(tf.zeros(p.shape[1:], tf.float64))
            loop_vars = (tf.constant(0), state, zeros, list(zeros), tf.constant(0.0, tf.float64))
            devices = placement.devices_of(loop_vars)

            def body(*loop_vars):
                t, state, sums, squares, accepted = placement.pinned(loop_vars, devices)
                # the step jittered (0.7-1.3 x): a fixed trajectory length resonates with some modes
                jitter = 0.7 + 0.6 * tf.random.stateless_uniform([], tf.stack([12, t]), dtype=tf.float64)
                state, info = step(tf.stack([11, t]), state, [eps * jitter for eps in step_sizes])
                x = sharded.field(state.position)

                def accumulate():       # a conditional over every part, as the driver's mass window
                    return ([s + tf.reduce_sum(xk, axis=0) for s, xk in zip(sums, x)],
                            [s + tf.reduce_sum(xk**2, axis=0) for s, xk in zip(squares, x)])
                sums, squares = tf.cond(t >= burn, accumulate, lambda: (list(sums), list(squares)))
                return t + 1, state, sums, squares, accepted + tf.reduce_sum(tf.cast(info.is_accepted, tf.float64))

            _, state, sums, squares, accepted = tf.while_loop(lambda t, *_: t < steps, body, loop_vars)
            return state, sums, squares, accepted

    t0 = time.perf_counter()
    state, sums, squares, accepted = run(start)
    seconds = time.perf_counter() - t0
    unplaced = unplaced_grid_ops(run.get_concrete_function(start).graph, int(np.prod(start[0].shape[1:])))
    n = (steps - burn) * chains
    mean = sharded_fft.gather(sums, mesh).numpy() / n
    sd = np.sqrt(np.maximum(sharded_fft.gather(squares, mesh).numpy() / n - mean**2, 0.0))
    exact = wiener_posterior(np.where(mask, data, 0.0), s_half, sigma, mask=mask, std="exact")
    z = (mean - exact.mean) / exact.std
    ratio = sd / exact.std
    return {"rms z of the mean": float(np.sqrt(np.mean(z**2))), "max |z|": float(np.max(np.abs(z))),
            "median sd ratio": float(np.median(ratio)), "sd ratio 5-95 %": [float(q) for q in np.percentile(ratio, [5, 95])],
            "acceptance": float(accepted.numpy() / (steps * chains)), "seconds": seconds, "draws": n,
            "unplaced grid ops": unplaced}


def nuts_census(steps: int = 5) -> dict:
    """The engine's NUTS (``core.engine.nuts``: loops within loops, conditionals) on the sharded
    density of a 12^3 field as pencils: ``unplaced_grid_ops`` of a few steps, and that they moved.
    (Parts of 12^3, not 8^3: TensorFlow writes a captured constant of at most 128 values into a
    function as a constant of its own, which no one places; a bigger one it captures.)"""
    grid = Grid((12, 12, 12), 24.0)
    rng = np.random.default_rng(5)
    whole = FieldPosterior(grid, PowerLaw(amplitude=30.0, index=-1.5, k_pivot=0.2),
                           _observations(grid, rng, noise_map=False, beam=None),
                           parameterisation="white_noise", dtype=tf.float64)
    mesh = ShardMesh.pencils(DEVICES, grid.shape, 2, 2)
    target = ShardedFieldPosterior(whole, mesh).log_prob
    step = nuts.build_kernel(target, max_tree_depth=4)
    start = sharded_fft.shard(tf.constant(rng.normal(size=(2, *grid.shape))), mesh)

    @tf.function
    def run(position):
        with placement.placed_by_inputs():
            state = nuts.init(placement.pinned(position, mesh.devices), target)
            step_sizes = [tf.constant(0.2, tf.float64)] * len(position)
            for t in range(steps):
                state, info = step(tf.constant([3, t]), state, step_sizes)
            return state.position

    moved = float(tf.add_n([tf.reduce_sum(tf.abs(a - b)) for a, b in zip(run(start), start)]).numpy())
    cells = min(int(np.prod(p.shape[1:])) for p in start)
    return {"moved": moved, "unplaced grid ops": unplaced_grid_ops(run.get_concrete_function(start).graph, cells)}


def refused() -> dict:
    grid = Grid((8, 8, 8), 16.0)
    obs = Observations.create(np.zeros(grid.shape), noise_sigma=1.0)
    out = {}
    for parameterisation in ("whitened", "raw_modes"):
        whole = FieldPosterior(grid, PowerLaw(amplitude=1.0, index=-1.0, k_pivot=0.2), obs,
                               parameterisation=parameterisation, dtype=tf.float64)
        try:
            ShardedFieldPosterior(whole, ShardMesh.slabs(DEVICES, grid.shape))
            out[parameterisation] = "accepted"
        except ValueError as err:
            out[parameterisation] = str(err)
    return out


def main() -> None:
    json.dump({"devices": DEVICES, "density": density_cases(), "refused": refused(), "wiener": wiener_run(),
               "nuts": nuts_census()}, sys.stdout)


if __name__ == "__main__":
    main()
