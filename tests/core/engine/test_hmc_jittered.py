"""HMC with a jittered trajectory (core/engine/samplers/hmc_jittered.py): the number of leapfrog
steps is uniform on 1 .. 2L - 1, each transition keeps a known Gaussian exactly (against its
moments and TFP's own HMC on the same target), and a run records the n each step ran. (Every
sampler of the registry also recovers the exact masked field posterior:
test_every_sampler.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from scipy import stats

from core.engine.samplers.hmc_jittered import JitteredHamiltonianMonteCarlo, jittered_steps
from core.store.run_store import RunReader
from support.engine_cases import run, write_field_case


@pytest.mark.parametrize("mean_steps", [1, 2, 7])
def test_the_number_of_leapfrog_steps_is_uniform_on_1_to_2L_minus_1(mean_steps):
    draws = np.array([int(jittered_steps(tf.constant([s, 17], tf.int32), mean_steps)) for s in range(3000)])
    span = 2 * mean_steps - 1
    assert draws.min() == 1 and draws.max() == span
    if span > 1:
        counts = np.bincount(draws, minlength=span + 1)[1:]
        assert stats.chisquare(counts).pvalue > 1e-3
    assert abs(draws.mean() - mean_steps) < 4 * np.sqrt((span**2 - 1) / 12 / draws.size) + 1e-9


def test_its_transitions_keep_a_correlated_gaussian():
    """A 2-D Gaussian (sd 1 and 0.1, correlation 0.9), 64 chains x 1500 steps with a fixed step
    size: the draws' mean and covariance match the exact ones within their Monte Carlo error
    (the spread of the 64 chains' own means and covariances)."""
    cov = np.array([[1.0, 0.09], [0.09, 0.01]])
    target = tfp.distributions.MultivariateNormalTriL(loc=tf.zeros(2, tf.float64),
                                                      scale_tril=tf.linalg.cholesky(tf.constant(cov)))
    chains, steps = 64, 1500

    def sample(kernel):
        @tf.function(jit_compile=True)
        def go():
            return tfp.mcmc.sample_chain(steps, tf.zeros([chains, 2], tf.float64), kernel=kernel,
                                         num_burnin_steps=200, trace_fn=lambda _, r: r.is_accepted,
                                         seed=tf.constant([3, 4], tf.int32))
        draws, accepted = go()
        return draws.numpy().reshape(-1, 2), float(np.mean(accepted.numpy()))

    jittered, acc = sample(JitteredHamiltonianMonteCarlo(target.log_prob, 0.05, 3))
    assert 0.5 < acc <= 1.0
    # errors with the chains' autocorrelation: the spread of the chains' own estimates
    per_chain = jittered.reshape(chains, steps, 2)
    chain_means = per_chain.mean(axis=1)
    se = chain_means.std(axis=0, ddof=1) / np.sqrt(chains)
    assert np.all(np.abs(chain_means.mean(axis=0)) < 5 * se), (chain_means.mean(axis=0), se)
    chain_cov = np.array([np.cov(c.T) for c in per_chain])
    cov_se = chain_cov.std(axis=0, ddof=1) / np.sqrt(chains)
    assert np.all(np.abs(chain_cov.mean(axis=0) - cov) < 5 * cov_se), (chain_cov.mean(axis=0), cov_se)


def test_a_run_records_the_number_of_leapfrog_steps_of_each_transition(tmp_path):
    config, text, *_ = write_field_case(tmp_path, shape=(8, 8, 8), warmup=40, samples=200, chunk=60,
                                        algorithm="hmc_jittered", leapfrog=4, mass=False, thin=10)
    status, _ = run(config, text, tmp_path / "run")
    assert status == "finished"
    n = np.asarray(RunReader(tmp_path / "run").stat("n_steps"))
    assert n.min() >= 1 and n.max() <= 7 and len(np.unique(n)) == 7
    assert abs(n.mean() - 4.0) < 0.5
    # one n for every chain at a step
    assert np.all(n == n[:1])
