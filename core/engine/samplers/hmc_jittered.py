"""HMC with a jittered trajectory: each transition runs n leapfrog steps, n drawn uniformly from
1 .. 2L - 1 (mean L = ``sampler.num_leapfrog_steps``), with dual averaging of the step size
(``dual_averaging_kernel``).

A fixed trajectory length can return close to where it started for the modes whose period
divides it (Neal 2011, section 5.4, "randomising the number of leapfrog steps"; Mackenzie 1989):
on a Gaussian field the modes' periods spread over the posterior sd's range, and with the step
size fixed one L can be resonant for some of them. Drawing n afresh at every transition removes
the resonance at no cost on average; MAMS jitters its trajectory the same way
(``core.engine.microcanonical``). One n for all chains at a step (drawn from the step's seed), so
that the vectorised chains integrate together; it is detailed balance per n, so the chain keeps
the target exactly.

The leapfrog is a ``tf.while_loop`` of one step per iteration bounded by 2L - 1 (XLA reuses one
iteration's buffers: the memory does not grow with L). ``n_steps`` of each step's statistics is
the n it ran. Otherwise TFP's HMC: the same momenta, energy and Metropolis correction
(``core.engine.kernels.UncalibratedLoopedHMC``, whose transition this one follows).
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow_probability.python.internal import prefer_static as ps
from tensorflow_probability.python.internal import samplers
from tensorflow_probability.python.mcmc.internal import leapfrog_integrator as leapfrog_impl

from core.engine.kernels import LoopedHamiltonianMonteCarlo, UncalibratedLoopedHMC
from core.engine.samplers.hmc import Hmc

__all__ = ["HmcJittered", "JitteredHamiltonianMonteCarlo", "jittered_steps"]


def jittered_steps(seed, mean_steps: int):
    """n ~ uniform on 1 .. 2 mean_steps - 1 (int32 scalar) from a stateless seed."""
    span = 2 * int(mean_steps) - 1
    u = samplers.uniform([], seed=seed, dtype=tf.float32)
    return tf.minimum(1 + tf.cast(tf.floor(u * span), tf.int32), span)


def _seeds(seed, n_parts: int):
    """(the momenta's seeds, the jitter's seed) of a transition from its seed."""
    seeds = list(samplers.split_seed(seed, n=n_parts + 1))
    return seeds[:-1], seeds[-1]


class UncalibratedJitteredHMC(UncalibratedLoopedHMC):
    """The HMC proposal with n ~ U{1 .. 2L - 1} leapfrog steps (module docstring)."""

    def proposal(self, seed, state_parts):
        mean_steps = int(self.num_leapfrog_steps)
        momentum_seeds, jitter_seed = _seeds(seed, len(state_parts))
        momenta = [samplers.normal(shape=ps.shape(x), dtype=x.dtype.base_dtype, seed=part_seed)
                   for part_seed, x in zip(momentum_seeds, state_parts)]
        n = jittered_steps(jitter_seed, mean_steps)

        def integrate(step_sizes, momentum, state, target, grads):
            momentum, state, target, grads = leapfrog_impl.process_args(
                self.target_log_prob_fn, momentum, state, target, grads)
            half = [v + 0.5 * tf.cast(eps, v.dtype) * g for v, eps, g in zip(momentum, step_sizes, grads)]

            def one(i, half, state, target, grads):
                half, state, target, grads = leapfrog_impl._one_step(  # noqa: SLF001
                    self.target_log_prob_fn, step_sizes, lambda x: x, half, state, target, grads)
                return i + 1, half, state, target, grads

            _, half, state, target, grads = tf.while_loop(
                lambda i, *_: i < n, one, (tf.constant(0), half, state, target, grads),
                maximum_iterations=2 * mean_steps - 1)
            momentum = [v - 0.5 * tf.cast(eps, v.dtype) * g for v, eps, g in zip(half, step_sizes, grads)]
            return momentum, state, target, grads
        return momenta, integrate


class JitteredHamiltonianMonteCarlo(LoopedHamiltonianMonteCarlo):
    """``tfp.mcmc.HamiltonianMonteCarlo`` with the jittered trajectory (module docstring);
    ``num_leapfrog_steps`` is the mean L."""

    uncalibrated_kernel = UncalibratedJitteredHMC


class HmcJittered(Hmc):
    """Fieldscope's kernel: HMC's (``hmc.py``), with the jittered trajectory."""

    def inner(self, target_z, step_size):
        return JitteredHamiltonianMonteCarlo(target_z, step_size, self.d.sampler.num_leapfrog_steps)

    def transition(self, inner):
        lar, _, diverging = super().transition(inner)
        proposed = inner.proposed_results           # the n this transition ran, from its seed
        _, jitter_seed = _seeds(proposed.seed, len(proposed.initial_momentum))
        n = jittered_steps(jitter_seed, self.d.sampler.num_leapfrog_steps)
        return lar, tf.fill([self.d.chains], n), diverging
