"""Cost of one gradient and of one MCLMC step: Fieldscope (TensorFlow XLA) against JAX / BlackJAX.

The posterior of ``bench/sampler_efficiency.py`` (no mask, whitened latent, float32, 2 chains
vectorised), at each grid size, measured in one process, the implementations interleaved round by
round so that they see the same load:

* ``tf grad``: the model's log-density and gradient (``core.engine.field_density`` as the engine
  builds it, ``tfp.math.value_and_gradient`` under ``tf.function(jit_compile=True)``), 2 chains;
* ``jax grad``: ``bench/sampler_efficiency._JaxDensity`` under ``jax.jit(jax.vmap(value_and_grad))``;
* ``tf bare mclmc``: ``core.engine.microcanonical.mclmc_transition`` alone in a compiled
  ``tf.while_loop`` of ``--steps`` steps (no statistics, no moments);
* ``tf engine mclmc``: the engine's own compiled chunk (``Driver.run_chunk``, MCLMC + diagonal,
  post-warmup steps: statistics, running float64 field moments, one field-buffer write per chunk);
* ``jax mclmc``: BlackJAX's MCLMC kernel (isokinetic McLachlan, diagonal inverse mass) in a jitted
  ``lax.scan`` of ``--steps`` steps, with the field's running sum and sum of squares as the
  benchmark's peer chunk accumulates them (``jax bare mclmc``: without them).

* ``normal``: one standard-normal grid of both chains in a compiled loop, TensorFlow's default
  generator (Philox under XLA), the engine's (``microcanonical.chunk_rng()``, Threefry on a CPU) and JAX's.

Per-step times are per MCLMC step for both chains (2 gradient evaluations each). Usage:
``nice python bench/gradient_cost.py [--sizes 32 64] [--rounds 7] [--steps 50]``
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

CHAINS = 2


def _timed(fn, calls: int) -> float:
    """Median seconds of ``calls`` calls of ``fn`` (which blocks until its result is ready)."""
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


def _setup(n: int, folder: Path, steps: int):
    import jax
    import jax.numpy as jnp
    import tensorflow as tf
    import tensorflow_probability as tfp

    import bench.sampler_efficiency as se
    from core.engine import microcanonical as mc
    from core.engine.driver import Driver, schedule_for
    from core.engine.models import build_model
    from core.field.grid import Grid

    case = se.CASES["nomask"]
    amplitude = se.write_cases(folder, n)["amplitude"]
    warm = 20
    sampler = {"algorithm": "mclmc", "preconditioner": "diagonal", "chains": CHAINS, "seed": 3,
               "num_warmup": warm, "num_samples": steps, "chunk_size": steps, "thin": steps}
    config, text = se._dump(se.case_document(case, amplitude, sampler), folder)
    model = build_model(config)
    driver = Driver(model, config.sampler, schedule_for(config))
    st = driver.fresh_state()
    target = model.target_log_prob_fn
    x0 = st["state"][0]

    lp_grad = tf.function(lambda p: tfp.math.value_and_gradient(target, [p]), jit_compile=True)
    lp_grad(x0)[0].numpy()

    def tf_grad():
        lp, g = lp_grad(x0)
        g[0].numpy()

    driver.run_chunk(st, warm, steps)["state"][0].numpy()

    def tf_engine():
        driver.run_chunk(st, warm, steps)["state"][0].numpy()

    step0 = tf.fill([CHAINS], tf.constant(0.05 * math.sqrt(n**3), tf.float32))
    L0 = tf.fill([CHAINS], tf.constant(math.sqrt(n**3), tf.float32))
    vg = mc.value_and_grad_fn(target)

    @tf.function(jit_compile=True)
    def bare(x, lp, g, u):
        def body(t, x, u, lp, g):
            seeds = tf.random.experimental.stateless_split(tf.stack([t, 11]), 2)
            noise = [mc.normal_parts(seeds[i], x, mc.chunk_rng()) for i in range(2)]
            x, u, lp, g, _, _, _ = mc.mclmc_transition(vg, x, u, lp, g, step0, L0, *noise)
            return t + 1, x, u, lp, g
        return tf.while_loop(lambda t, *r: t < steps, body, (tf.constant(0), x, u, lp, g))[1]

    def noise_loop(alg):
        # ``steps`` standard-normal grids of both chains, each from its own folded seed, summed
        @tf.function(jit_compile=True)
        def draw(x):
            def body(t, acc):
                seed = tf.random.experimental.stateless_fold_in(tf.constant([5, 6]), t)
                return t + 1, acc + tf.random.stateless_normal(tf.shape(x), seed, dtype=x.dtype, alg=alg)
            return tf.while_loop(lambda t, a: t < steps, body, (tf.constant(0), tf.zeros_like(x)))[1]
        draw(x0).numpy()
        return lambda: draw(x0).numpy()

    noise = {"tf normal default": noise_loop("auto_select"), "tf normal threefry": noise_loop(mc.chunk_rng())}

    u0 = mc.unit_velocity([tf.random.stateless_normal(tf.shape(x0), [1, 2])])
    bare_args = ([x0], st["tlp"], st["grads"], u0)
    bare(*bare_args)[0].numpy()

    def tf_bare():
        bare(*bare_args)[0].numpy()

    # JAX: the benchmark's density and BlackJAX's kernel
    import blackjax
    from blackjax.mcmc.integrators import isokinetic_mclachlan

    grid = Grid((n, n, n), se.BOX)
    k = grid.k_magnitude_half()
    data = np.load(folder / "nomask.npz")["data"]
    arrays = {"data": data, "inv_sigma": np.full(data.shape, 1.0 / se.NOISE),
              "lik_const": np.array(-data.size * (math.log(se.NOISE) + 0.5 * math.log(2 * math.pi))),
              "log_k_ratio": np.log(np.where(k > 0, k, 1.0) / se.K_PIVOT), "nonzero": (k > 0).astype(float),
              "log_norm": np.array(math.log(amplitude * grid.n_cells**2 / grid.volume)),
              "index": np.array(se.INDEX), "sampled": np.array(False),
              "prior_loc": np.array(0.0), "prior_scale": np.array(1.0)}
    density = se._JaxDensity(arrays)
    pos = (jnp.asarray(x0.numpy()),)
    jvg = jax.jit(jax.vmap(jax.value_and_grad(density)))
    jax.block_until_ready(jvg(pos))

    def jax_grad():
        jax.block_until_ready(jvg(pos))

    kernel = blackjax.mcmc.mclmc.build_kernel(integrator=isokinetic_mclachlan)
    imm = jnp.ones((CHAINS, n**3), jnp.float32)   # over the ravelled position
    L = jnp.full((CHAINS,), math.sqrt(n**3), jnp.float32)
    eps = jnp.full((CHAINS,), 0.05 * math.sqrt(n**3), jnp.float32)
    keys = jax.random.split(jax.random.PRNGKey(0), CHAINS)
    state = jax.vmap(lambda p, key: blackjax.mcmc.mclmc.init(p, density, key))(pos, keys)

    def make(moments):
        def run(key, state, imm, L, eps):
            def body(carry, key):
                state, s1, s2 = carry
                state, _ = kernel(key, state, density, imm, L, eps)
                if moments:
                    x = density.field(state.position)
                    s1, s2 = s1 + x, s2 + x * x
                return (state, s1, s2), None
            z = jnp.zeros(density.shape, jnp.float32)
            (state, s1, s2), _ = jax.lax.scan(body, (state, z, z), jax.random.split(key, steps))
            return state, s1, s2
        return jax.jit(jax.vmap(run))

    @jax.jit
    def jax_noise(key):
        def body(acc, k):
            return acc + jax.random.normal(k, pos[0].shape, jnp.float32), None
        return jax.lax.scan(body, jnp.zeros(pos[0].shape, jnp.float32), jax.random.split(key, steps))[0]

    jax.block_until_ready(jax_noise(keys[0]))
    fns = {**noise, "jax normal": lambda: jax.block_until_ready(jax_noise(keys[0]))}
    for name, moments in (("jax mclmc", True), ("jax bare mclmc", False)):
        f = make(moments)
        jax.block_until_ready(f(keys, state, imm, L, eps))
        fns[name] = (lambda f=f: jax.block_until_ready(f(keys, state, imm, L, eps)))
    return {"tf grad": tf_grad, "jax grad": jax_grad, "tf bare mclmc": tf_bare,
            "tf engine mclmc": tf_engine, "jax bare mclmc": fns["jax bare mclmc"],
            "jax mclmc": fns["jax mclmc"], **{k: fns[k] for k in ("tf normal default", "tf normal threefry",
                                                                   "jax normal")}}


def mc_rng() -> str:
    from core.engine.microcanonical import chunk_rng
    return chunk_rng()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[32, 64])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=50, help="MCLMC steps per timed call")
    p.add_argument("--calls", type=int, default=20, help="gradient calls per round")
    args = p.parse_args(argv)
    import jax
    import tensorflow as tf

    print(f"TensorFlow {tf.__version__}, JAX {jax.__version__}; CPU cores: {os.cpu_count()}; "
          f"{CHAINS} chains, float32, no mask, median over {args.rounds} interleaved rounds")
    print(f"{'size':>5} | {'tf grad ms':>10} | {'jax grad ms':>11} | {'tf/jax':>6} | "
          f"{'tf bare step':>12} | {'tf engine step':>14} | {'jax bare step':>13} | {'jax step':>8} | "
          f"{'engine/jax':>10} | {'bare/jax bare':>13} | {'engine overhead':>15}")
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            fns = _setup(n, Path(tmp), args.steps)
            times = {name: [] for name in fns}
            for _ in range(args.rounds):
                for name, fn in fns.items():
                    if name.endswith("grad"):
                        times[name].append(_timed(fn, args.calls) * 1e3)
                    else:
                        times[name].append(_timed(fn, 3) * 1e3 / args.steps)
            med = {name: float(np.median(v)) for name, v in times.items()}
            print(f"{n:>4}^3 | {med['tf grad']:>10.3f} | {med['jax grad']:>11.3f} | "
                  f"{med['tf grad'] / med['jax grad']:>6.2f} | {med['tf bare mclmc']:>12.3f} | "
                  f"{med['tf engine mclmc']:>14.3f} | {med['jax bare mclmc']:>13.3f} | {med['jax mclmc']:>8.3f} | "
                  f"{med['tf engine mclmc'] / med['jax mclmc']:>10.2f} | "
                  f"{med['tf bare mclmc'] / med['jax bare mclmc']:>13.2f} | "
                  f"{med['tf engine mclmc'] / med['tf bare mclmc'] - 1:>14.1%}", flush=True)
            print(f"       one standard-normal grid of both chains (ms): tf default (Philox) "
                  f"{med['tf normal default']:.3f}, tf {mc_rng()} (the engine's) {med['tf normal threefry']:.3f}, "
                  f"jax {med['jax normal']:.3f}")
            spread = {name: (min(v), max(v)) for name, v in times.items()}
            print("       min-max: " + ", ".join(f"{k} {a:.3f}-{b:.3f}" for k, (a, b) in spread.items()))


if __name__ == "__main__":
    main()
