"""HMC: ``sampler.num_leapfrog_steps`` leapfrog steps a transition (``core.engine.hmc``), with dual
averaging (``dual_averaging_kernel``). Small runs unroll the leapfrog loop (faster on a CPU, its
memory small: ``core.run.engine_limits.unrolls``); larger ones loop over it, so that XLA reuses
one iteration's buffers and the memory does not grow with the trajectory (issue #13,
``core.engine.hmc.looped_leapfrog``)."""

from __future__ import annotations

import tensorflow as tf

from core.engine import hmc
from core.engine.driver import DIVERGENCE_THRESHOLD
from core.engine.samplers.dual_averaging_kernel import DualAveragingKernel
from core.run.engine_limits import LEAPFROG_STEPS_PER_ITERATION, unrolls

__all__ = ["Hmc"]


class Hmc(DualAveragingKernel):
    State = hmc.HMCState

    def kernel(self, target_z):
        s, model = self.d.sampler, self.d.model
        n_values = model.grid.n_cells if model.has_field else 1
        steps = s.num_leapfrog_steps
        per_iteration = (steps if unrolls(steps, s.chains, n_values, self.d.dtype.size)
                         else LEAPFROG_STEPS_PER_ITERATION)
        return hmc.build_kernel(target_z, hmc.leapfrog_proposal(target_z, steps, per_iteration))

    def search_settings(self):
        s = self.d.sampler
        return s.num_leapfrog_steps, s.target_accept      # its own trajectory, its own target

    def transition(self, info):
        lar = info.log_accept_ratio
        n_leap = tf.fill([self.d.chains], info.num_integration_steps)
        diverging = tf.logical_or(~tf.math.is_finite(lar), -lar > DIVERGENCE_THRESHOLD)
        return lar, n_leap, diverging
