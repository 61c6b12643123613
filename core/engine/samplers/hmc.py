"""HMC: ``sampler.num_leapfrog_steps`` leapfrog steps a transition, with dual averaging
(``dual_averaging_kernel``). Small runs unroll the leapfrog loop (faster on a CPU, its memory
small: ``core.run.engine_limits.unrolls``); larger ones loop over it, so that XLA reuses one
iteration's buffers and the memory does not grow with the trajectory (issue #13,
``core.engine.kernels``)."""

from __future__ import annotations

import tensorflow as tf

from core.engine.driver import DIVERGENCE_THRESHOLD
from core.engine.kernels import LoopedHamiltonianMonteCarlo, UnrolledHamiltonianMonteCarlo
from core.engine.samplers.dual_averaging_kernel import DualAveragingKernel
from core.run.engine_limits import LEAPFROG_STEPS_PER_ITERATION, unrolls

__all__ = ["Hmc"]


class Hmc(DualAveragingKernel):
    def inner(self, target_z, step_size):
        s, model = self.d.sampler, self.d.model
        n_values = model.grid.n_cells if model.has_field else 1
        if unrolls(s.num_leapfrog_steps, s.chains, n_values, self.d.dtype.size):
            return UnrolledHamiltonianMonteCarlo(target_z, step_size, s.num_leapfrog_steps)
        return LoopedHamiltonianMonteCarlo(target_z, step_size, s.num_leapfrog_steps,
                                           steps_per_iteration=LEAPFROG_STEPS_PER_ITERATION)

    def search_settings(self):
        s = self.d.sampler
        return s.num_leapfrog_steps, s.target_accept      # its own trajectory, its own target

    def accepted(self, inner):
        return inner.accepted_results.target_log_prob, inner.accepted_results.grads_target_log_prob

    def with_accepted(self, inner, tlp, grads):
        return inner._replace(accepted_results=inner.accepted_results._replace(
            target_log_prob=tlp, grads_target_log_prob=grads))

    def transition(self, inner):
        lar = inner.log_accept_ratio
        n_leap = tf.fill([self.d.chains], tf.constant(self.d.sampler.num_leapfrog_steps, tf.int32))
        diverging = tf.logical_or(~tf.math.is_finite(lar), -lar > DIVERGENCE_THRESHOLD)
        return lar, n_leap, diverging
