"""Each chain's random numbers are its own (``core.engine.chain_seeds``, issue #34): a step of
every kernel on a batch of chains with their seeds moves each chain exactly as the same step on
that chain alone with its seed, so chains split over devices draw what they draw together; and
HMC's step on one chain with its seed is TFP's HamiltonianMonteCarlo given that seed.

A row of a batch of 3 and the same row alone can round differently by an ulp (measured on these
3- and 2-element parts, eager and under XLA: the batch is vectorised, the single row not; 2e-15
after a log-density difference), so the chains are compared to 1e-12 here: a chain
that drew other numbers moves O(1) away. Whole runs split over devices, on the engine's grids,
are compared bit for bit in ``test_chain_devices.py``."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

from core.engine import chain_seeds, hmc, nuts
from core.engine.samplers import mams, mclmc
from core.engine.samplers.hmc_jittered import jittered_proposal

tfd = tfp.distributions
CHAINS = 3


def target(x, y):
    scales = tf.constant([[1.0, 0.3, 2.0]], tf.float64)
    return (tf.reduce_sum(tfd.Normal(tf.constant(0.5, tf.float64), scales).log_prob(x), axis=-1)
            + tf.reduce_sum(tfd.StudentT(tf.constant(4.0, tf.float64), 0.0, 1.0).log_prob(y), axis=-1))


rng = np.random.default_rng(3)
START = [tf.constant(rng.normal(size=(CHAINS, 3))), tf.constant(rng.normal(size=(CHAINS, 2)))]


def _rows(parts, a, b):
    return [p[a:b] for p in parts]


def hamiltonian_case(module, step, step_size):
    """HMC's or NUTS's step (``module``: core.engine.hmc / nuts) with a fixed step size."""
    return (lambda parts: module.init(parts, target),
            lambda seed, st, a, b: step(seed, type(st)(_rows(st.position, a, b), st.logdensity[a:b],
                                                       _rows(st.logdensity_grad, a, b)),
                                        [tf.fill([b - a, 1], tf.constant(step_size, tf.float64))] * 2))


def mclmc_case():
    step = mclmc.build_kernel(target)
    params = lambda n: mclmc.MclmcParams(tf.fill([n], tf.constant(0.5, tf.float64)),      # noqa: E731
                                         tf.fill([n], tf.constant(1.5, tf.float64)))
    return (lambda parts: mclmc.init(parts, target, seed=9),
            lambda seed, st, a, b: step(seed, mclmc.MclmcState(_rows(st.position, a, b), st.logdensity[a:b],
                                                              _rows(st.logdensity_grad, a, b),
                                                              _rows(st.velocity, a, b), []), params(b - a)))


def mams_case():
    step = mams.build_kernel(target)
    params = lambda n: mams.MamsParams(tf.fill([n], tf.constant(0.4, tf.float64)),        # noqa: E731
                                       tf.fill([n], tf.constant(2.0, tf.float64)))
    return (lambda parts: mams.init(parts, target),
            lambda seed, st, a, b: step(seed, mams.MamsState(_rows(st.position, a, b), st.logdensity[a:b],
                                                            _rows(st.logdensity_grad, a, b), []), params(b - a)))


CASES = {"hmc": lambda: hamiltonian_case(hmc, hmc.build_kernel(target, hmc.leapfrog_proposal(target, 4)), 0.3),
         "hmc_jittered": lambda: hamiltonian_case(hmc, hmc.build_kernel(target, jittered_proposal(target, 4)), 0.3),
         "nuts": lambda: hamiltonian_case(nuts, nuts.build_kernel(target), 0.4),
         "mclmc": mclmc_case, "mams": mams_case}


def _flat(tree):
    return [np.asarray(t) for t in tf.nest.flatten(tree)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_chain_draws_the_same_with_other_chains_or_alone(name):
    init, step = CASES[name]()
    if name in ("mclmc", "mams"):      # their noise on a CPU is Threefry's, which only XLA has
        step = tf.function(step, jit_compile=True, autograph=False)
    state = init(START)
    moved = 0
    for g in range(4):
        step_seed = tf.constant([11, g], tf.int32)
        together = step(chain_seeds.for_chains(step_seed, tf.range(CHAINS)), state, 0, CHAINS)
        for c in range(CHAINS):
            alone = step(chain_seeds.for_chains(step_seed, tf.constant([c])), state, c, c + 1)
            for a, b in zip(_flat(together), _flat(alone)):
                if a.ndim and a.shape[0] == CHAINS:
                    np.testing.assert_allclose(a[c:c + 1], b, rtol=1e-12, atol=1e-12)
                else:                     # what all chains share (HMC's number of leapfrog steps)
                    np.testing.assert_array_equal(a, b)
        moved += int(np.any(together[0].position[0].numpy() != state.position[0].numpy()))
        state = together[0]
    assert moved >= 3                     # the chains moved: the comparison is of real steps
    # the chains drew different numbers from their seeds (not one draw shared by all)
    first = state.position[0].numpy()
    assert len({tuple(row) for row in first}) == CHAINS


def test_hmc_on_one_chain_is_tfps_kernel_given_that_chains_seed():
    init, step = CASES["hmc"]()
    state = init(START)
    kernel = tfp.mcmc.HamiltonianMonteCarlo(target, [tf.fill([1, 1], tf.constant(0.3, tf.float64))] * 2, 4)
    seeds = chain_seeds.for_chains(tf.constant([11, 0], tf.int32), tf.range(CHAINS))
    ours, info = tf.function(step, jit_compile=True, autograph=False)(seeds, state, 0, CHAINS)

    @tf.function(jit_compile=True, autograph=False)
    def tfp_step(position, seed):
        return kernel.one_step(position, kernel.bootstrap_results(position), seed=seed)

    for c in range(CHAINS):
        theirs, results = tfp_step(_rows(state.position, c, c + 1), seeds.chains[c])
        for a, b in zip(ours.position, theirs):
            np.testing.assert_array_equal(a.numpy()[c:c + 1], b.numpy())
        np.testing.assert_array_equal(info.log_accept_ratio.numpy()[c:c + 1], results.log_accept_ratio.numpy())
