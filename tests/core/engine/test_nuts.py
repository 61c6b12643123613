"""The engine's NUTS (core.engine.nuts): exact on known posteriors, its U-turn checkpoints
those of the recursive algorithm, and the same step-size adaptation interface as TFP's."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf
import tensorflow_probability as tfp

from core.engine.nuts import IterativeNoUTurnSampler, _checkpoint_slots

tfd = tfp.distributions


@pytest.mark.parametrize("depth", [1, 2, 5, 9])
def test_checkpoints_check_every_aligned_subtree_the_recursive_algorithm_checks(depth):
    """Leaf n of a 2^depth-leaf subtree must be checked against the first leaf of every
    aligned sub-subtree it closes (sizes 2, 4, ... dividing n + 1), and against no other:
    the pairs the recursive NUTS checks. Even leaves store their momentum in slot hi."""
    stored = {}
    for n in range(2 ** depth):
        lo, hi = (int(v) for v in _checkpoint_slots(tf.constant(n, tf.int32)))
        if n % 2 == 0:
            stored[hi] = n
            continue
        checked = {stored[j] for j in range(lo, hi + 1)}
        expected = {n - 2 ** k + 1 for k in range(1, depth + 1) if (n + 1) % 2 ** k == 0}
        assert checked == expected, n
        assert 0 <= lo and hi < depth


def _correlated_gaussian(dim, seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(dim, dim))
    cov = a @ a.T / dim + np.diag(np.linspace(0.05, 2.0, dim))
    return rng.normal(size=dim), cov


def _draws(kernel, state, n, burn, seed):
    adapted = tfp.mcmc.DualAveragingStepSizeAdaptation(kernel, num_adaptation_steps=int(0.8 * burn))

    def go():
        return tfp.mcmc.sample_chain(
            n, state, kernel=adapted, num_burnin_steps=burn, seed=seed,
            trace_fn=lambda _, r: (r.inner_results.leapfrogs_taken, r.inner_results.has_divergence,
                                   r.inner_results.log_accept_ratio))
    return tf.function(go, jit_compile=True)()


def test_nuts_samples_a_correlated_gaussian_in_two_parts_exactly():
    dim, chains, n = 12, 8, 1500
    mu, cov = _correlated_gaussian(dim, 3)
    prec = tf.constant(np.linalg.inv(cov))

    def target(x, y):
        d = tf.concat([x, y[:, None]], axis=1) - mu
        return -0.5 * tf.einsum("ci,ij,cj->c", d, prec, d)

    step = [tf.fill([chains, 1], tf.constant(0.3, tf.float64)), tf.fill([chains], tf.constant(0.3, tf.float64))]
    kernel = IterativeNoUTurnSampler(target, step)
    (xs, ys), (leapfrogs, divergent, lar) = _draws(
        kernel, [tf.zeros([chains, dim - 1], tf.float64), tf.zeros([chains], tf.float64)], n, 300, [7, 1])
    draws = np.concatenate([xs.numpy(), ys.numpy()[..., None]], axis=-1)          # (n, chains, dim)
    assert not divergent.numpy().any()
    assert 0.65 < np.exp(np.minimum(lar.numpy(), 0)).mean() < 0.95                  # adapted to 0.75
    assert leapfrogs.numpy().mean() > 3                                              # trees, not single steps
    ess = tfp.mcmc.effective_sample_size(tf.constant(draws), cross_chain_dims=1).numpy()
    ess = np.minimum(ess, n * chains)
    z_mean = (draws.mean(axis=(0, 1)) - mu) / np.sqrt(np.diag(cov) / ess)
    assert np.all(np.abs(z_mean) < 4.0), z_mean
    second = (draws - mu) ** 2
    ess2 = np.minimum(tfp.mcmc.effective_sample_size(tf.constant(second), cross_chain_dims=1).numpy(), n * chains)
    z_var = (second.mean(axis=(0, 1)) - np.diag(cov)) / np.sqrt(2 * np.diag(cov) ** 2 / ess2)
    assert np.all(np.abs(z_var) < 4.0), z_var
    # the off-diagonal structure too: the sample covariance against the exact one
    sample_cov = np.cov(draws.reshape(-1, dim), rowvar=False)
    assert np.abs(sample_cov - cov).max() < 0.15 * np.abs(cov).max()


def test_nuts_samples_heavy_tails_exactly():
    """A Student-t (nu = 5) beside a normal: tail probabilities against scipy's."""
    chains, n = 8, 2500
    nu = 5.0

    def target(x, y):
        return (tf.reduce_sum(tfd.Normal(tf.constant(1.0, tf.float64), tf.constant([0.5, 3.0], tf.float64))
                              .log_prob(x), axis=-1)
                + tfd.StudentT(tf.constant(nu, tf.float64), 0.0, 1.0).log_prob(y))

    step = [tf.fill([chains, 1], tf.constant(0.5, tf.float64)), tf.fill([chains], tf.constant(0.5, tf.float64))]
    (xs, ys), _ = _draws(IterativeNoUTurnSampler(target, step),
                         [tf.zeros([chains, 2], tf.float64), tf.zeros([chains], tf.float64)], n, 300, [3, 9])
    y = ys.numpy()
    for threshold in (1.0, 2.5):
        indicator = (np.abs(y) > threshold).astype(np.float64)
        exact = 2 * scipy.stats.t.sf(threshold, nu)
        ess = min(float(tfp.mcmc.effective_sample_size(tf.constant(indicator), cross_chain_dims=1)), n * chains)
        assert abs(indicator.mean() - exact) < 4.0 * np.sqrt(exact * (1 - exact) / ess), threshold
    np.testing.assert_allclose(xs.numpy().std(axis=(0, 1)), [0.5, 3.0], rtol=0.08)


def test_nuts_stops_at_its_depth_and_reports_divergences():
    """A tiny step cannot U-turn within depth 3 (2^3 - 1 leapfrogs); an enormous one diverges."""
    def target(x):
        return -0.5 * tf.reduce_sum(x * x, axis=-1)

    state = tf.ones([4, 3], tf.float64)
    for step, depth in ((1e-3, 3), (50.0, 10)):
        kernel = IterativeNoUTurnSampler(target, tf.constant(step, tf.float64), max_tree_depth=depth)
        results = kernel.bootstrap_results(state)
        _, results = tf.function(lambda: kernel.one_step(state, results, seed=[1, 2]), jit_compile=True)()
        if step < 1:
            assert results.leapfrogs_taken.numpy().tolist() == [2 ** depth - 1] * 4
            assert results.reach_max_depth.numpy().all() and not results.has_divergence.numpy().any()
        else:
            assert results.has_divergence.numpy().all()
            assert (results.leapfrogs_taken.numpy() <= 2).all()


def test_nuts_is_reproducible_from_its_seed():
    def target(x):
        return -0.5 * tf.reduce_sum(x * x / tf.constant([0.1, 1.0, 4.0], tf.float64), axis=-1)

    kernel = IterativeNoUTurnSampler(target, tf.constant(0.4, tf.float64))
    state = tf.zeros([2, 3], tf.float64)
    results = kernel.bootstrap_results(state)
    step = tf.function(lambda s, r, seed: kernel.one_step(s, r, seed=seed), jit_compile=True)
    a, _ = step(state, results, tf.constant([5, 6]))
    b, _ = step(state, results, tf.constant([5, 6]))
    c, _ = step(state, results, tf.constant([5, 7]))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.allclose(a.numpy(), c.numpy())


def test_engine_nuts_field_run_matches_the_masked_wiener_posterior(tmp_path):
    """The engine with NUTS (diagonal mass) on a 16^3 field seen through a slab mask: the
    field moments against the conjugate-gradient Wiener filter."""
    from core.reference.wiener import wiener_posterior
    from core.store.run_store import RunReader
    from support.engine_cases import prior_mode_variance, run, write_field_case

    config, text, data, grid, spectrum = write_field_case(tmp_path, mask=True, algorithm="nuts", warmup=150,
                                                          samples=300, chains=2)
    status, _ = run(config, text, tmp_path / "run")
    assert status == "finished"
    reader = RunReader(tmp_path / "run")
    mean, std, count = reader.field_moments()
    assert count == 2 * 300
    exact = wiener_posterior(np.where(data.mask, data.data, 0.0), prior_mode_variance(grid, spectrum), 0.5,
                             mask=data.mask, std="sample", n_samples=64, rng=np.random.default_rng(0))
    assert exact.converged
    assert np.sqrt(np.mean((mean - exact.mean) ** 2)) < 0.25 * float(np.mean(exact.std))
    assert np.mean(std) == pytest.approx(float(np.mean(exact.std)), rel=0.08)
    assert reader.stat("n_steps").mean() > 3 and not reader.stat("diverging").any()


def test_engine_nuts_stop_and_resume_give_the_same_draws_as_one_run(tmp_path):
    from support.engine_cases import assert_same_run, run, stop_then_resume, write_field_case

    config, text, *_ = write_field_case(tmp_path, algorithm="nuts", warmup=40, samples=60, chunk=20,
                                        shape=(8, 8, 8))
    assert run(config, text, tmp_path / "straight")[0] == "finished"
    stopped = stop_then_resume(config, text, tmp_path / "resumed", lambda p: p["draws"] >= 20)
    assert 20 <= stopped["draws"] < 60
    assert_same_run(tmp_path / "straight", tmp_path / "resumed")
