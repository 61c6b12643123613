"""bench/sampler_efficiency.py's measures and exact references, checked without running a sampler.

n_eff is fed the moments of independent exact posterior draws (core.reference.wiener), whose
n_eff is their number; the index's likelihood is checked against the dense Gaussian density.
numpy only: no TensorFlow, no JAX.
"""

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from core.config import config_from_dict
from core.field.grid import Grid
from core.field.synthetic import load_dataset
from core.reference.wiener import dense_posterior, posterior_samples

# loaded from its file: bench/ on sys.path would put its scripts' names (hmc, scale, ...) there
_SPEC = importlib.util.spec_from_file_location(
    "sampler_efficiency", Path(__file__).resolve().parents[2] / "bench" / "sampler_efficiency.py")
se = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = se       # dataclasses look their module up
_SPEC.loader.exec_module(se)

N = 12


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cases")
    return folder, se.write_cases(folder, N)["amplitude"]


def _draw_moments(case_name, folder, amplitude, n_draws, seed):
    dataset = load_dataset(folder / f"{case_name}.npz")
    grid = Grid(dataset.data.shape, se.BOX)
    mask = None if dataset.mask.all() else dataset.mask
    draws = posterior_samples(dataset.data, se._mode_variance(grid, amplitude, se.INDEX), se.NOISE, mask=mask,
                              n_samples=n_draws, rng=seed).samples
    return draws.mean(axis=0), draws.std(axis=0, ddof=1), grid


def test_the_signal_has_unit_variance_and_the_slab_masks_a_quarter(cases):
    folder, amplitude = cases
    grid = Grid((N, N, N), se.BOX)
    k = grid.k_magnitude_full()
    assert np.sum(amplitude * (k[k > 0] / se.K_PIVOT) ** se.INDEX) / grid.volume == pytest.approx(1.0)
    assert 1 - load_dataset(folder / "slab.npz").mask.mean() == pytest.approx(se.SLAB_FRACTION, abs=1 / N)


@pytest.mark.parametrize("case_name, n_draws", [("nomask", 40), ("slab", 40), ("sphere", 40)])
def test_n_eff_of_independent_exact_draws_is_their_number(cases, case_name, n_draws):
    folder, amplitude = cases
    reference = se.exact_reference(se.CASES[case_name], folder, amplitude, draws=100)
    mean, std, grid = _draw_moments(case_name, folder, amplitude, n_draws, seed=7)
    eff = se.field_efficiency(mean, std, reference, grid)
    # mean(z^2) over ~10^3 weakly correlated voxels: a few per cent; the MC reference adds ~1 %
    assert eff["n_eff"] == pytest.approx(n_draws, rel=0.15)
    assert eff["z_rms"] == pytest.approx(1 / math.sqrt(eff["n_eff"]))
    assert eff["std_ratio"] == pytest.approx(1.0, abs=0.05)
    # every shell: 1 / mean of |F(e)_k|^2 / V_k over its modes (a chi^2 of 2 per mode pair)
    counts = np.bincount(grid.shell_index_half(grid.shell_edges())[grid.k_magnitude_half() > 0],
                         weights=grid.multiplicity_half()[grid.k_magnitude_half() > 0])
    counts = counts[counts > 0]
    for n_modes, value in zip(counts, eff["shell_n_eff"]):
        if n_modes >= 200:
            assert value == pytest.approx(n_draws, rel=0.3)
    pooled = len(eff["shell_n_eff"]) / np.sum(1 / np.asarray(eff["shell_n_eff"]))
    assert pooled == pytest.approx(n_draws, rel=0.2)


def test_a_biased_mean_has_a_small_n_eff(cases):
    folder, amplitude = cases
    reference = se.exact_reference(se.CASES["nomask"], folder, amplitude, draws=200)
    mean, std, grid = _draw_moments("nomask", folder, amplitude, 400, seed=8)
    eff = se.field_efficiency(mean + 0.2 * reference.std, std, reference, grid)
    assert eff["n_eff"] == pytest.approx(1 / (0.2**2 + 1 / 400), rel=0.15)


def test_the_index_likelihood_is_the_dense_gaussian_density():
    grid = Grid((4, 4, 4), se.BOX)
    amplitude = se.unit_variance_amplitude(grid)
    data = np.random.default_rng(3).standard_normal(grid.shape)
    data -= data.mean()
    indices = np.array([-2.5, -1.2])
    dense = []
    for index in indices:
        prior = dense_posterior(data, se._mode_variance(grid, amplitude, index), se.NOISE).prior_covariance
        cov = prior + se.NOISE**2 * np.eye(grid.n_cells)
        sign, logdet = np.linalg.slogdet(cov)
        d = data.reshape(-1)
        dense.append(-0.5 * (d @ np.linalg.solve(cov, d) + logdet))
    ours = se.index_log_likelihood(np.fft.rfftn(data), grid, amplitude, indices)
    # equal up to a constant (the k = 0 mode and the 2 pi terms do not depend on the index)
    assert ours[0] - ours[1] == pytest.approx(dense[0] - dense[1], rel=1e-9)


def test_the_index_reference_is_a_proper_mixture(cases):
    folder, amplitude = cases
    reference = se.exact_reference(se.CASES["index"], folder, amplitude, draws=2)
    index_mean, index_std = reference.index
    assert abs(index_mean - se.INDEX) < 5 * index_std < 0.5      # the data were drawn at -2
    fixed = se.exact_reference(se.CASES["nomask"], folder, amplitude, draws=2)
    # the index is known to a few per cent: the mixture is close to the posterior at index -2
    assert np.median(reference.std / fixed.std) == pytest.approx(1.0, abs=0.05)
    assert np.max(np.abs(reference.mean - fixed.mean)) < 0.5 * np.min(fixed.std)
    assert np.all(reference.mode_var[fixed.mode_var > 0] > 0)


def test_n_eff_of_exact_draws_with_the_index_sampled_under_the_slab_is_their_number(cases):
    """slab_index's reference (the index's exact posterior under the mask, the field's mixture
    over 5 Gauss-Hermite nodes of it) fed the moments of 60 independent draws made apart from it (the first of two per call):
    each an index drawn from a normal with the exact mean and sd, then an exact Wiener draw
    under the mask given that index."""
    folder, amplitude = cases
    reference = se.exact_reference(se.CASES["slab_index"], folder, amplitude, draws=300)
    centre, spread = reference.index
    assert abs(centre - se.INDEX) < 5 * spread < 0.5
    dataset = load_dataset(folder / "slab.npz")
    grid = Grid(dataset.data.shape, se.BOX)
    rng = np.random.default_rng(21)
    draws = np.stack([posterior_samples(dataset.data, se._mode_variance(grid, amplitude, centre + spread * rng.normal()),
                                        se.NOISE, mask=dataset.mask, n_samples=2, rng=int(rng.integers(2**31)),
                                        tol=1e-10).samples[0] for _ in range(60)])
    eff = se.field_efficiency(draws.mean(axis=0), draws.std(axis=0, ddof=1), reference, grid)
    assert eff["n_eff"] == pytest.approx(60, rel=0.15)
    assert eff["std_ratio"] == pytest.approx(1.0, abs=0.05)
    pooled = len(eff["shell_n_eff"]) / np.sum(1 / np.asarray(eff["shell_n_eff"]))
    assert pooled == pytest.approx(60, rel=0.2)


def test_every_combination_makes_a_valid_config(cases, tmp_path):
    folder, amplitude = cases
    combos = se.fieldscope_combinations()
    labels = [label for label, _ in combos]
    assert {"hmc/identity", "hmc/diagonal", "nuts/identity"} <= set(labels)
    for case in se.CASES.values():
        for label, settings in combos:
            config = config_from_dict(se.case_document(case, amplitude, {**settings, "chains": 2}), folder)
            assert config.sampler.algorithm == settings["algorithm"]
            assert isinstance(config.prior.index, float) != case.sampled_index


def test_the_microcanonical_warmup_is_the_peers_tuning_steps_unless_told_otherwise():
    class Args:
        num_warmup, microcanonical_warmup = None, "peer"

    args = Args()
    config_default = se.warmup_steps("hmc", args, 24000)
    assert se.warmup_steps("mclmc", args, 24000) == se.warmup_steps("mams", args, 24000) == 4000
    assert se.warmup_steps("nuts", args, 24000) == config_default            # HMC / NUTS: the config's
    args.num_warmup = 700
    assert se.warmup_steps("hmc", args, 24000) == 700 and se.warmup_steps("mclmc", args, 24000) == 4000
    args.microcanonical_warmup = "config"
    assert se.warmup_steps("mclmc", args, 24000) == 700
    args.microcanonical_warmup = "1234"
    assert se.warmup_steps("mams", args, 24000) == 1234
    for bad in ("many", "-3"):
        args.microcanonical_warmup = bad
        with pytest.raises(SystemExit, match="--microcanonical-warmup"):
            se.warmup_steps("mclmc", args, 24000)


def test_the_chunks_are_as_long_as_the_peers_of_their_kind_unless_told_otherwise():
    class Args:
        chunk_size = "peer"

    args = Args()
    assert se.chunk_steps("mclmc", args) == se.chunk_steps("mams", args) == se.PEER_CHUNK_STEPS["mclmc"] == 250
    assert se.chunk_steps("hmc", args) == se.chunk_steps("nuts", args) == se.PEER_CHUNK_STEPS["nuts"] == 25
    args.chunk_size = "config"
    assert se.chunk_steps("mclmc", args) == 25                 # the schema's default
    args.chunk_size = "40"
    assert se.chunk_steps("nuts", args) == 40
    for bad in ("long", "0"):
        args.chunk_size = bad
        with pytest.raises(SystemExit, match="--chunk-size"):
            se.chunk_steps("mclmc", args)


@pytest.mark.skipif(importlib.util.find_spec("blackjax") is None, reason="BlackJAX is not installed (the bench extra)")
@pytest.mark.parametrize("num_steps", [12000, 50, 7])
def test_the_peer_tuning_steps_are_those_blackjax_reports(num_steps):
    """BlackJAX's own count (in a process of its own: JAX and TensorFlow never share one)."""
    import subprocess

    code = f"""
import jax, jax.numpy as jnp, blackjax
from blackjax.mcmc.integrators import isokinetic_mclachlan
logdensity = lambda x: -0.5 * jnp.sum(x * x)
kernel = blackjax.mcmc.mclmc.build_kernel(integrator=isokinetic_mclachlan)
state = blackjax.mcmc.mclmc.init(jnp.ones(3), logdensity, jax.random.PRNGKey(0))
_, _, n = blackjax.mclmc_find_L_and_step_size(mclmc_kernel=kernel, num_steps={num_steps}, state=state,
    rng_key=jax.random.PRNGKey(1), logdensity_fn=logdensity, diagonal_preconditioning=True)
print(int(n))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) == se.peer_mclmc_tuning_steps(num_steps)


def test_a_run_that_did_not_sample_the_posterior_is_named_not_compared():
    def row(label, n_eff, per_1000, per_s, std_ratio, per_1000_warm=0.0):
        return {"label": label, "n_eff": n_eff, "per_1000": per_1000, "per_s": per_s, "std_ratio": std_ratio,
                "per_1000_warm": per_1000_warm}

    good = [row("mclmc/diagonal", 2585.0, 53.8, 35.9, 0.999), row("mclmc/fourier", 135.0, 2.8, 1.7, 0.994)]
    collapsed = row("blackjax/mclmc", 0.0, 0.0, 0.0, 2181704.651)     # the 32^3 index case's peer
    lines = se.comparison_lines([*good, collapsed])
    assert lines[0].startswith("blackjax/mclmc did not sample this posterior (median std / exact 2.18e+06)")
    assert lines[1:] == ["no peer sampled this posterior: no ratio"]
    good[0]["per_1000_warm"] = 49.7
    lines = se.comparison_lines([*good, row("blackjax/mclmc", 4801.0, 100.0, 89.2, 1.001, 75.0)])
    assert lines == ["best Fieldscope / best peer, n_eff per 1000 gradients: mclmc/diagonal 53.8 / "
                     "blackjax/mclmc 100.0 = 0.54",
                     "best Fieldscope / best peer, n_eff per 1000 gradients, warmup counted: mclmc/diagonal 49.7 / "
                     "blackjax/mclmc 75.0 = 0.66",
                     "best Fieldscope / best peer, n_eff per second: mclmc/diagonal 35.9 / blackjax/mclmc 89.2 = 0.40"]
    assert se.did_not_sample(row("x", 10.0, 1.0, 1.0, float("nan"))) and not se.did_not_sample(good[0])
    assert se.did_not_sample(row("x", 0.2, 1.0, 1.0, 1.0)) == "n_eff 0.2"
