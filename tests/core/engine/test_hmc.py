"""The pure HMC step (core.engine.hmc) and the dual-averaging update
(core.engine.adaptation.dual_averaging.dual_averaging_step) against TFP's kernels: from the same
seeds, TFP's HamiltonianMonteCarlo (and the engine's NUTS) inside TFP's
DualAveragingStepSizeAdaptation draw the same states, acceptance and step sizes, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from core.engine import hmc, nuts
from core.engine.adaptation.dual_averaging import DualAveragingState, dual_averaging_step, fresh_dual_averaging
from core.engine.kernels import LoopedHamiltonianMonteCarlo

tfd = tfp.distributions
CHAINS, STEPS, ADAPT = 3, 30, 20
TARGET = tf.constant(0.7, tf.float64)       # as the engine gives it (a Python 0.7 is float32 in TFP's)


def target(x, y):
    scales = tf.constant([[1.0, 0.3, 2.0]], tf.float64)
    return (tf.reduce_sum(tfd.Normal(tf.constant(0.5, tf.float64), scales).log_prob(x), axis=-1)
            + tf.reduce_sum(tfd.StudentT(tf.constant(4.0, tf.float64), 0.0, 1.0).log_prob(y), axis=-1))


START = [tf.zeros([CHAINS, 3], tf.float64), tf.ones([CHAINS, 2], tf.float64)]
STEP = [tf.fill([CHAINS, 1], tf.constant(0.4, tf.float64)), tf.fill([CHAINS, 1], tf.constant(0.4, tf.float64))]
SEEDS = [tf.constant([4, i], tf.int32) for i in range(STEPS)]


def tfp_run(kernel, seeds=SEEDS):
    """TFP's step-size adaptation around ``kernel``: (positions, step sizes, log acceptance ratios)."""
    adapted = tfp.mcmc.DualAveragingStepSizeAdaptation(kernel, num_adaptation_steps=ADAPT, target_accept_prob=TARGET)
    state, results = START, adapted.bootstrap_results(START)
    out = []
    for seed in seeds:
        state, results = adapted.one_step(state, results, seed=seed)
        out.append((state, results.new_step_size, results.inner_results.log_accept_ratio))
    return out


def our_run(step, init, seeds=SEEDS):
    """The same with the pure step and ``dual_averaging_step``."""
    da = fresh_dual_averaging(STEP, CHAINS, tf.float64, da_step=0, num_adapt=ADAPT)
    da["shrink"] = [float(np.log(10.0)) + tf.math.log(v) for v in STEP]     # as TFP's bootstrap
    adaptation, state = DualAveragingState(**da), init(START, target)
    out = []
    for seed in seeds:
        before = state.position
        state, info = step(seed, state, adaptation.step_size)
        adaptation = dual_averaging_step(adaptation, info.log_accept_ratio, TARGET, before)
        out.append((state.position, adaptation.step_size, info.log_accept_ratio))
    return out


def assert_same(ours, theirs):
    for (q, eps, lar), (q_ref, eps_ref, lar_ref) in zip(ours, theirs):
        for a, b in zip(list(q) + list(eps) + [lar], list(q_ref) + list(eps_ref) + [lar_ref]):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("steps_per_iteration", [1, 2, 5])
def test_hmc_step_with_dual_averaging_is_tfps_hmc_in_its_step_size_adaptation(steps_per_iteration):
    step = hmc.build_kernel(target, hmc.leapfrog_proposal(target, 5, steps_per_iteration))
    ours = our_run(step, hmc.init)
    assert_same(ours, tfp_run(tfp.mcmc.HamiltonianMonteCarlo(target, STEP, 5)))
    assert np.unique(np.stack([q[0].numpy()[0, 0] for q, _, _ in ours])).size > STEPS // 2     # it moved
    steps = np.stack([eps[0].numpy()[:, 0] for _, eps, _ in ours])
    assert np.all(steps[ADAPT:] == steps[ADAPT - 1])                  # held after adaptation
    assert np.unique(steps[:ADAPT, 0]).size == ADAPT                   # adapted before, every step


def test_hmc_step_is_the_looped_tfp_kernel_under_xla():
    # 6 steps, not 30: the Python loop unrolls into one XLA program, whose compile time grows with it
    step, seeds = hmc.build_kernel(target, hmc.leapfrog_proposal(target, 5, 2)), SEEDS[:6]
    ours = tf.function(lambda: our_run(step, hmc.init, seeds), jit_compile=True)()
    theirs = tf.function(lambda: tfp_run(LoopedHamiltonianMonteCarlo(target, STEP, 5, steps_per_iteration=2), seeds),
                         jit_compile=True)()
    assert len(ours) == 6
    assert_same(ours, theirs)


def test_nuts_step_with_dual_averaging_is_the_tfp_kernel_in_tfps_step_size_adaptation():
    ours = our_run(nuts.build_kernel(target, max_tree_depth=4), nuts.init)
    assert_same(ours, tfp_run(nuts.IterativeNoUTurnSampler(target, STEP, max_tree_depth=4)))
