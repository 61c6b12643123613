"""BlackJAX peers of bench/sampler_efficiency.py, in a process of their own (JAX and TensorFlow
never share one): ``python bench/blackjax_peers.py SPEC.json``.

The spec (written by ``sampler_efficiency.run_peers``) names per case an input file
(``sampler_efficiency.peer_inputs``: the data, the whitened map's constants, the starting points
and Fieldscope's log-density and gradient at six check points), the peers, the budget of
post-warmup gradients per chain, NUTS's warmup steps and the seed; beside them the peers' chunk
steps, MCLMC's gradients per step and the density check's tolerances. For each case the
log-density written here in JAX (``JaxDensity``) is first checked against Fieldscope's
(``check_density``); a case that differs gets no peer run. Then BlackJAX NUTS with
``window_adaptation`` (``peer_nuts``) and BlackJAX MCLMC tuned by ``mclmc_find_L_and_step_size``
with diagonal preconditioning (``peer_mclmc``), each chain adapted on its own, in compiled chunks
that sum the field's moments. The results go to the spec's ``out`` (an .npz with a JSON ``meta``).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["JaxDensity", "checkpoint_arrays", "check_density", "peer_nuts", "peer_mclmc", "main"]


class JaxDensity:
    """The engine's whitened-latent log-density in JAX (``core.engine.field_density``'s formulas,
    written again from its docstring: X[k] = sqrt(S_k)((1 + i)/2 u[k] + (1 - i)/2 u[-k]) on the
    half grid, x = irfftn(X), a normalised Gaussian prior, and a Gaussian likelihood (a noise sd
    per voxel, 0 where masked) or Poisson counts of rate nbar exp(x)). One chain; the position
    is (u,) or (u, eta), eta the sampled hyperparameters (``hyper_names``, Fieldscope's order):
    the index n and the log amplitude log A of

        S_k = (n_cells^2 / V) A (k / k_p)^n exp(log_shape_k)      (log_shape: a fixed cutoff, or 0)

    or, for band powers (the inputs have ``bin_half``), the log powers eta_b = log P_b of

        S_k = (n_cells^2 / V) P_{b(k)}      (b(k): the mode's bin, ``BandPowers.bin_index``)

    each with a normal prior in that coordinate (a lognormal amplitude or band power is a normal
    in its log, the Jacobian included); band powers add the random walk of their family,
    sum_b log N(log P_{b+1} - log P_b; 0, tau) over every bin, fixed ones at their own power
    (``field_density._random_walk_log_prior``; tau = ``random_walk_scale``, 0 for none)."""

    def __init__(self, arrays):
        import jax.numpy as jnp

        f32 = jnp.float32
        self.data = jnp.asarray(arrays["data"], f32)
        self.inv_sigma = jnp.asarray(arrays["inv_sigma"], f32)
        self.lik_const = float(arrays["lik_const"])
        self.poisson = "log_nbar" in arrays        # Poisson counts, rate nbar exp(x), where the mask is 1
        if self.poisson:
            self.log_nbar = float(arrays["log_nbar"])
            self.mask = jnp.asarray(arrays["mask"], f32)
        self.log_k_ratio = jnp.asarray(arrays["log_k_ratio"], f32)
        self.log_shape = jnp.asarray(arrays["log_shape"], f32)
        self.nonzero = jnp.asarray(arrays["nonzero"], f32)
        self.log_norm = float(arrays["log_norm"])            # log(n_cells^2 / V), + log A where A is fixed
        self.names = [str(name) for name in arrays["hyper_names"]]
        self.bands = "bin_half" in arrays          # band powers: each half-grid mode's bin (0 at k = 0)
        if self.bands:
            self.bins = jnp.asarray(arrays["bin_half"], jnp.int32)
            self.band_names = [str(name) for name in arrays["band_names"]]
            self.band_log_powers = [float(v) for v in arrays["band_log_powers"]]     # a fixed bin's own
            self.walk = float(arrays["random_walk_scale"])
        known = set(self.band_names) if self.bands else {"index", "amplitude"}
        unknown = set(self.names) - known
        if unknown:
            raise ValueError(f"the JAX density samples {sorted(known)} only, not {sorted(unknown)}")
        self.sampled = bool(self.names)
        self.loc = [float(v) for v in arrays["hyper_loc"]]
        self.scale = [float(v) for v in arrays["hyper_scale"]]
        self.fixed_index = float(arrays["index"])
        self.shape = tuple(self.data.shape)
        self.fixed_sqrt_s = None if self.sampled else self.sqrt_s(None)

    def log_bins(self, eta):
        """Band powers: log P_b of every bin, sampled (eta) or fixed."""
        import jax.numpy as jnp

        return jnp.stack([eta[self.names.index(name)] if name in self.names else jnp.float32(value)
                          for name, value in zip(self.band_names, self.band_log_powers)])

    def sqrt_s(self, eta):
        import jax.numpy as jnp

        if self.bands:
            return jnp.exp(0.5 * (self.log_norm + self.log_bins(eta)[self.bins])) * self.nonzero
        index = eta[self.names.index("index")] if "index" in self.names else self.fixed_index
        log_a = eta[self.names.index("amplitude")] if "amplitude" in self.names else 0.0
        return jnp.exp(0.5 * (self.log_norm + log_a + index * self.log_k_ratio + self.log_shape)) * self.nonzero

    def field(self, position):
        import jax.numpy as jnp

        u = position[0]
        sqrt_s = self.sqrt_s(position[1]) if self.sampled else self.fixed_sqrt_s
        m = self.shape[2] // 2 + 1
        mirrored = jnp.roll(jnp.flip(u, axis=(0, 1, 2)), 1, axis=(0, 1, 2))[..., :m]
        half = u[..., :m]
        spectrum = jax_complex(0.5 * sqrt_s * (half + mirrored), 0.5 * sqrt_s * (half - mirrored))
        return jnp.fft.irfftn(spectrum, s=self.shape)

    def __call__(self, position):
        import jax.numpy as jnp

        u = position[0]
        n = u.size
        lp = -0.5 * jnp.sum(u * u) - 0.5 * n * math.log(2 * math.pi)
        for i, (loc, scale) in enumerate(zip(self.loc, self.scale)):
            z = (position[1][i] - loc) / scale
            lp = lp - 0.5 * z * z - math.log(scale) - 0.5 * math.log(2 * math.pi)
        if self.bands and self.walk > 0 and self.sampled:
            step = jnp.diff(self.log_bins(position[1])) / self.walk
            lp = lp + jnp.sum(-0.5 * step * step) - step.size * (math.log(self.walk) + 0.5 * math.log(2 * math.pi))
        if self.poisson:
            log_rate = self.field(position) + self.log_nbar
            return lp + jnp.sum((self.data * log_rate - jnp.exp(log_rate)) * self.mask) + self.lik_const
        r = (self.data - self.field(position)) * self.inv_sigma
        return lp - 0.5 * jnp.sum(r * r) + self.lik_const


def checkpoint_arrays(checks: dict) -> dict:
    """Fieldscope's figures at the check points (``sampler_efficiency.density_checkpoints``) as the peers' inputs name them (start_i, value_j,
    point_j_i, grad_j_i)."""
    arrays = {f"start_{i}": part for i, part in enumerate(checks["start"])}
    for j, (parts, value, grads) in enumerate(zip(checks["points"], checks["values"], checks["grads"])):
        arrays[f"value_{j}"] = value
        for i, (p, g) in enumerate(zip(parts, grads)):
            arrays[f"point_{j}_{i}"], arrays[f"grad_{j}_{i}"] = p, g
    return arrays


def jax_complex(re, im):
    import jax.lax

    return jax.lax.complex(re, im)


def check_density(density, arrays, n_parts, rtol) -> str:
    """None when the JAX log-density and gradient equal Fieldscope's at every check point (float32
    tolerance), else what differs."""
    import jax
    import jax.numpy as jnp

    value_and_grad = jax.jit(jax.vmap(jax.value_and_grad(density)))
    worst_value = worst_grad = 0.0
    for j in range(3):
        parts = tuple(jnp.asarray(arrays[f"point_{j}_{i}"], jnp.float32) for i in range(n_parts))
        value, grads = value_and_grad(parts)
        ref = arrays[f"value_{j}"].astype(np.float64)
        worst_value = max(worst_value, float(np.max(np.abs(np.asarray(value, np.float64) - ref) / np.abs(ref))))
        for i in range(n_parts):
            g, g_ref = np.asarray(grads[i], np.float64), arrays[f"grad_{j}_{i}"].astype(np.float64)
            for c in range(g.shape[0]):
                worst_grad = max(worst_grad, float(np.linalg.norm(g[c] - g_ref[c]) / np.linalg.norm(g_ref[c])))
    density_rtol, gradient_rtol = rtol
    if worst_value > density_rtol or worst_grad > gradient_rtol:
        return (f"the JAX log-density differs from Fieldscope's: value {worst_value:.1e} relative "
                f"(tolerance {density_rtol:.0e}), gradient {worst_grad:.1e} (tolerance {gradient_rtol:.0e})")
    return f"agrees: value {worst_value:.1e}, gradient {worst_grad:.1e} relative"


def _moment_chunk(density, step_fn, n_steps, sampled):
    """A jitted scan of ``n_steps`` steps of one chain accumulating the field's sum and sum of
    squares (float32 within a chunk, float64 on the host), gradients, divergences, the sampled
    hyperparameters."""
    import jax
    import jax.numpy as jnp

    def run(key, state, params):
        def body(carry, key):
            state, total, total_sq = carry
            state, grads, diverged = step_fn(key, state, params)
            x = density.field(state.position)
            hyper = state.position[1] if sampled else jnp.zeros(0, jnp.float32)
            return (state, total + x, total_sq + x * x), (grads, diverged, hyper)

        zeros = jnp.zeros(density.shape, jnp.float32)
        (state, total, total_sq), (grads, diverged, hyper) = jax.lax.scan(
            body, (state, zeros, zeros), jax.random.split(key, n_steps))
        return state, total, total_sq, jnp.sum(grads), jnp.sum(diverged), hyper

    return jax.jit(jax.vmap(run))


def _sample(density, chunk_fn, keys, state, params, budget, sampled):
    """Chunks until the mean over chains of the gradient evaluations reaches ``budget``."""
    import jax

    total = np.zeros(density.shape)
    total_sq = np.zeros(density.shape)
    grads = np.zeros(keys.shape[0])
    count, divergences, hyper = 0, 0, []
    t0 = time.perf_counter()
    while grads.mean() < budget:
        split = jax.vmap(jax.random.split)(keys)
        keys, chunk_keys = split[:, 0], split[:, 1]
        state, s1, s2, g, d, h = chunk_fn(chunk_keys, state, params)
        total += np.asarray(s1, np.float64).sum(axis=0)
        total_sq += np.asarray(s2, np.float64).sum(axis=0)
        grads += np.asarray(g)
        divergences += int(np.asarray(d).sum())
        count += h.shape[0] * h.shape[1]
        if sampled:
            hyper.append(np.asarray(h, np.float64))
    seconds = time.perf_counter() - t0
    mean = total / count
    std = np.sqrt(np.maximum(total_sq / count - mean**2, 0.0) * count / (count - 1))
    out = {"mean": mean, "std": std, "grads": int(grads.sum()), "seconds": seconds,
           "divergences": divergences}
    if sampled:       # (chains, draws, hyperparameters), and the index's alone
        out["hyper_chain"] = np.concatenate(hyper, axis=1)
        if "index" in density.names:
            out["index_chain"] = out["hyper_chain"][..., density.names.index("index")]
    return out


def peer_nuts(density, start, num_warmup, budget, seed, chunk_steps):
    import blackjax
    import jax

    chains = start[0].shape[0]
    warmup = blackjax.window_adaptation(blackjax.nuts, density)

    def adapt(key, position):
        (state, params), info = warmup.run(key, position, num_steps=num_warmup)
        return state, params, info.info.num_integration_steps.sum()

    t0 = time.perf_counter()
    keys = jax.random.split(jax.random.PRNGKey(seed), chains + 1)
    state, params, warm_grads = jax.jit(jax.vmap(adapt))(keys[1:], start)
    jax.block_until_ready(state)
    kernel = blackjax.nuts.build_kernel()

    def step(key, state, params):
        state, info = kernel(key, state, density, params["step_size"], params["inverse_mass_matrix"])
        return state, info.num_integration_steps, info.is_divergent

    chunk_fn = _moment_chunk(density, step, chunk_steps, density.sampled)
    sample_keys = jax.random.split(keys[0], chains)
    chunk_fn = chunk_fn.lower(sample_keys, state, params).compile()
    warmup_seconds = time.perf_counter() - t0
    out = _sample(density, chunk_fn, sample_keys, state, params, budget, density.sampled)
    out.update(warmup_grads=int(np.asarray(warm_grads).sum()), warmup_seconds=warmup_seconds,
               settings=f"window_adaptation, {num_warmup} steps, target 0.8, diagonal mass")
    return out


def peer_mclmc(density, start, budget, seed, chunk_steps, gradients_per_step):
    import blackjax
    import jax
    from blackjax.mcmc.integrators import isokinetic_mclachlan

    chains = start[0].shape[0]
    num_steps = budget // gradients_per_step
    kernel = blackjax.mcmc.mclmc.build_kernel(integrator=isokinetic_mclachlan)
    tuning_steps = {}

    def tune(key, position):
        init_key, tune_key = jax.random.split(key)
        state = blackjax.mcmc.mclmc.init(position, density, init_key)
        state, params, n_tune = blackjax.mclmc_find_L_and_step_size(
            mclmc_kernel=kernel, num_steps=num_steps, state=state, rng_key=tune_key,
            logdensity_fn=density, diagonal_preconditioning=True)
        tuning_steps["n"] = int(n_tune)      # a Python int, known when traced
        return state, params

    t0 = time.perf_counter()
    keys = jax.random.split(jax.random.PRNGKey(seed + 1), chains + 1)
    state, params = jax.jit(jax.vmap(tune))(keys[1:], start)
    jax.block_until_ready(state)

    def step(key, state, params):
        state, info = kernel(key, state, density, params.inverse_mass_matrix, params.L, params.step_size)
        return state, gradients_per_step, ~info.nonans

    chunk_fn = _moment_chunk(density, step, chunk_steps, density.sampled)
    sample_keys = jax.random.split(keys[0], chains)
    chunk_fn = chunk_fn.lower(sample_keys, state, params).compile()
    warmup_seconds = time.perf_counter() - t0
    out = _sample(density, chunk_fn, sample_keys, state, params, budget, density.sampled)
    L, eps = np.asarray(params.L), np.asarray(params.step_size)
    out.update(warmup_grads=int(chains * tuning_steps["n"] * gradients_per_step),
               warmup_seconds=warmup_seconds,
               settings=f"find_L_and_step_size (diagonal), L {np.round(L, 2).tolist()}, "
                        f"step {np.round(eps, 3).tolist()}")
    return out


def main(spec_path: str) -> None:
    """For each case of the spec, the density check, then BlackJAX NUTS and MCLMC."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp

    spec = json.loads(Path(spec_path).read_text())
    meta, arrays_out = {}, {}
    for case in spec["cases"]:
        with np.load(case["inputs"], allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
        n_parts = 2 if len(arrays["hyper_names"]) else 1
        density = JaxDensity(arrays)
        start = tuple(jnp.asarray(arrays[f"start_{i}"], jnp.float32) for i in range(n_parts))
        check = check_density(density, arrays, n_parts, spec["rtol"])
        results = {"check": {"text": check}}
        if not check.startswith("agrees"):
            results["check"]["refused"] = True
        else:
            for peer in case["peers"]:
                t0 = time.perf_counter()
                if peer == "blackjax/nuts":
                    res = peer_nuts(density, start, case["num_warmup"], case["budget"], case["seed"],
                                    spec["chunk_steps"]["nuts"])
                else:
                    res = peer_mclmc(density, start, case["budget"], case["seed"], spec["chunk_steps"]["mclmc"],
                                     spec["mclmc_gradients_per_step"])
                res["wall"] = time.perf_counter() - t0
                for key in ("mean", "std", "index_chain", "hyper_chain"):
                    if key in res:
                        arrays_out[f"{case['name']}:{peer}:{key}"] = res.pop(key)
                results[peer] = res
                print(f"[peers] {case['name']} {peer}: {res['wall']:.0f} s", file=sys.stderr, flush=True)
        meta[case["name"]] = results
    versions = f"JAX {jax.__version__}, BlackJAX {__import__('blackjax').__version__}"
    for results in meta.values():
        results["check"]["versions"] = versions
    np.savez(spec["out"], meta=np.array(json.dumps(meta)), **arrays_out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python bench/blackjax_peers.py SPEC.json (written by bench/sampler_efficiency.py)")
    main(sys.argv[1])
