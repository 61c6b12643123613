"""The looped and unrolled HMC kernels are TFP's HMC: same draws for the same seeds."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from core.engine.kernels import LoopedHamiltonianMonteCarlo, UnrolledHamiltonianMonteCarlo

tfd = tfp.distributions


def target(x, y):
    scales = tf.constant([[1.0, 0.3, 2.0]], tf.float64)
    return (tf.reduce_sum(tfd.Normal(tf.constant(0.5, tf.float64), scales).log_prob(x), axis=-1)
            + tf.reduce_sum(tfd.StudentT(tf.constant(4.0, tf.float64), 0.0, 1.0).log_prob(y), axis=-1))


KERNELS = {"unrolled": UnrolledHamiltonianMonteCarlo,
           # 5 steps: a while loop of 2 iterations of 2 steps, and one straight step
           "loop2": lambda t, s, n: LoopedHamiltonianMonteCarlo(t, s, n, steps_per_iteration=2)}


@pytest.mark.parametrize("jit,name", [(False, "unrolled"), (True, "unrolled"), (True, "loop2")])
def test_kernel_reproduces_tfp_hmc_with_step_size_adaptation(jit, name):
    state = [tf.zeros([3, 3], tf.float64), tf.ones([3, 2], tf.float64)]
    step = [tf.fill([3, 1], tf.constant(0.4, tf.float64)), tf.fill([3, 1], tf.constant(0.4, tf.float64))]

    def sample(kernel_cls):
        kernel = tfp.mcmc.DualAveragingStepSizeAdaptation(kernel_cls(target, step, 5), num_adaptation_steps=30)

        def go():
            return tfp.mcmc.sample_chain(60, state, kernel=kernel, seed=[4, 2],
                                         trace_fn=lambda _, r: (r.new_step_size, r.inner_results.log_accept_ratio))
        return tf.function(go, jit_compile=True)() if jit else go()

    (ours, (our_steps, our_lar)) = sample(KERNELS[name])
    (theirs, (their_steps, their_lar)) = sample(tfp.mcmc.HamiltonianMonteCarlo)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(our_lar.numpy(), their_lar.numpy(), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(our_steps[0].numpy(), their_steps[0].numpy(), rtol=1e-9)
    assert np.unique(ours[0].numpy()[:, 0, 0]).size > 30     # it moved


def test_unrolled_kernel_samples_a_known_posterior():
    def normal(x):
        return tf.reduce_sum(tfd.Normal(tf.constant([1.0, -2.0], tf.float64),
                                        tf.constant([0.5, 3.0], tf.float64)).log_prob(x), axis=-1)

    kernel = UnrolledHamiltonianMonteCarlo(normal, [tf.constant(0.4, tf.float64)], 8)
    draws = tf.function(lambda: tfp.mcmc.sample_chain(4000, [tf.zeros([8, 2], tf.float64)], kernel=kernel,
                                                      num_burnin_steps=200, seed=[1, 1], trace_fn=None),
                        jit_compile=True)()[0].numpy().reshape(-1, 2)
    np.testing.assert_allclose(draws.mean(axis=0), [1.0, -2.0], atol=0.12)
    np.testing.assert_allclose(draws.std(axis=0), [0.5, 3.0], rtol=0.08)


def test_num_leapfrog_steps_must_be_a_python_int():
    with pytest.raises(ValueError, match="positive Python int"):
        UnrolledHamiltonianMonteCarlo(target, 0.1, tf.constant(3))
    with pytest.raises(ValueError, match="num_leapfrog_steps must be a positive Python int"):
        LoopedHamiltonianMonteCarlo(target, 0.1, 0)
    with pytest.raises(ValueError, match="steps_per_iteration must be a positive Python int"):
        LoopedHamiltonianMonteCarlo(target, 0.1, 4, steps_per_iteration=0)


def test_step_size_adaptation_keeps_the_steps_per_iteration():
    """TFP's adaptation rebuilds its inner kernel from ``parameters``: k must survive it (it was 1)."""
    for kernel, k in [(LoopedHamiltonianMonteCarlo(target, 0.1, 5, steps_per_iteration=2), 2),
                      (UnrolledHamiltonianMonteCarlo(target, 0.1, 5), 5)]:
        adapted = tfp.mcmc.DualAveragingStepSizeAdaptation(kernel, num_adaptation_steps=3)
        assert adapted.inner_kernel.steps_per_iteration == k
