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
the n it ran. Otherwise HMC's transition (``core.engine.hmc.build_kernel``, TFP's arithmetic):
the same momenta, energy and Metropolis correction; ``jittered_proposal`` is the proposal it
takes. ``JitteredHamiltonianMonteCarlo`` is the same as a TFP kernel (for tests).
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow_probability.python.internal import samplers
from tensorflow_probability.python.mcmc.internal import leapfrog_integrator as leapfrog_impl

from core.engine import chain_seeds, hmc, placement
from core.engine.kernels import LoopedHamiltonianMonteCarlo, UncalibratedLoopedHMC
from core.engine.samplers.hmc import Hmc

__all__ = ["HmcJittered", "JitteredHamiltonianMonteCarlo", "jittered_proposal", "jittered_steps"]


def jittered_steps(seed, mean_steps: int):
    """n ~ uniform on 1 .. 2 mean_steps - 1 (int32 scalar) from a stateless seed."""
    span = 2 * int(mean_steps) - 1
    u = samplers.uniform([], seed=seed, dtype=tf.float32)
    return tf.minimum(1 + tf.cast(tf.floor(u * span), tf.int32), span)


def _seeds(seed, n_parts: int):
    """(the momenta's seeds, the jitter's seed) of a transition from its seed: the jitter's is
    the one every chain shares (``chain_seeds.common``)."""
    seeds = chain_seeds.split(seed, n_parts + 1)
    return seeds[:-1], chain_seeds.common(seeds[-1])


def jittered_proposal(logdensity_fn, mean_steps: int):
    """HMC's proposal (``core.engine.hmc``) with n ~ U{1 .. 2L - 1} leapfrog steps, L =
    ``mean_steps``: the momenta's seeds and the jitter's split from the proposal seed."""
    mean_steps = int(mean_steps)

    def proposal(seed, state_parts):
        momentum_seeds, jitter_seed = _seeds(seed, len(state_parts))
        momenta = [chain_seeds.normal(part_seed, x) for part_seed, x in zip(momentum_seeds, state_parts)]
        n = jittered_steps(jitter_seed, mean_steps)

        def integrate(step_sizes, momentum, state, target, grads):
            momentum, state, target, grads = leapfrog_impl.process_args(
                logdensity_fn, momentum, state, target, grads)
            half = [v + 0.5 * tf.cast(eps, v.dtype) * g for v, eps, g in zip(momentum, step_sizes, grads)]

            def one(i, half, state, target, grads):
                half, state, target, grads = leapfrog_impl._one_step(  # noqa: SLF001
                    logdensity_fn, step_sizes, lambda x: x, half, state, target, grads)
                return i + 1, half, state, target, grads

            _, half, state, target, grads = placement.while_loop(
                lambda i, *_: i < n, one, (tf.constant(0), half, state, target, grads),
                maximum_iterations=2 * mean_steps - 1)
            momentum = [v - 0.5 * tf.cast(eps, v.dtype) * g for v, eps, g in zip(half, step_sizes, grads)]
            return momentum, state, target, grads
        return momenta, integrate, n
    return proposal


class UncalibratedJitteredHMC(UncalibratedLoopedHMC):
    """The HMC proposal with n ~ U{1 .. 2L - 1} leapfrog steps (``jittered_proposal``)."""

    def proposal(self, seed, state_parts):
        momenta, integrate, _ = jittered_proposal(self.target_log_prob_fn, self.num_leapfrog_steps)(
            seed, state_parts)
        return momenta, integrate


class JitteredHamiltonianMonteCarlo(LoopedHamiltonianMonteCarlo):
    """``tfp.mcmc.HamiltonianMonteCarlo`` with the jittered trajectory (module docstring);
    ``num_leapfrog_steps`` is the mean L."""

    uncalibrated_kernel = UncalibratedJitteredHMC


class HmcJittered(Hmc):
    """Fieldscope's kernel: HMC's (``hmc.py``), with the jittered trajectory; ``n_steps`` is the
    n each transition ran (``Hmc.transition``: its info's ``num_integration_steps``)."""

    def kernel(self, target_z):
        return hmc.build_kernel(target_z, jittered_proposal(target_z, self.d.sampler.num_leapfrog_steps))
