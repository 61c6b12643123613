"""TFP's Hamiltonian Monte Carlo kernel classes with the leapfrog loop under our control, for the
benchmarks (bench/hmc.py, bench/scale.py) and the tests that compare with TFP's own kernel. The
engine runs HMC as pure functions (``core.engine.hmc``: ``init`` and ``step``, with the same
integrator and the same arithmetic); these classes are its proposal inside TFP's kernel
interface (``one_step(state, results, seed)``).

``LoopedHamiltonianMonteCarlo`` is ``tfp.mcmc.HamiltonianMonteCarlo`` (same arguments,
same kernel results, same random numbers, same draws up to floating-point rounding)
whose leapfrog integrator is a ``tf.while_loop`` of ``steps_per_iteration`` straight-line
steps per iteration (``core.engine.hmc.looped_leapfrog``). XLA reuses one iteration's buffers
for the next, so the kernel's memory does not grow with ``num_leapfrog_steps``.

``UnrolledHamiltonianMonteCarlo`` is the same with every step straight-line (k = L), the
engine's integrator for L <= 64 before issue #13: XLA kept about 24 grid-sized buffers per
chain per step (5.6 GiB at 128^3 with 2 chains and L = 10, where the looped kernel needs
a few hundred MiB of grid-sized buffers); on a quiet machine it was 8 % faster with one
chain at 64^3 and no faster with four. Kept for bench/hmc.py and bench/scale.py, which
measure the two side by side (docs/benchmarks.md).

It relies on TFP 0.25's internal layout (``HamiltonianMonteCarlo._impl`` and the hmc
module's helpers); tests/core/engine/test_hmc_kernel.py checks both against TFP's kernel.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_probability as tfp
from tensorflow_probability.python.internal import prefer_static as ps
from tensorflow_probability.python.internal import samplers
from tensorflow_probability.python.mcmc import hmc as tfp_hmc
from tensorflow_probability.python.mcmc import metropolis_hastings
from tensorflow_probability.python.mcmc.internal import util as mcmc_util

from core.engine.hmc import leapfrog_proposal, looped_leapfrog, unrolled_leapfrog

__all__ = ["LoopedHamiltonianMonteCarlo", "UnrolledHamiltonianMonteCarlo", "UncalibratedLoopedHMC",
           "looped_leapfrog", "unrolled_leapfrog"]


class UncalibratedLoopedHMC(tfp.mcmc.UncalibratedHamiltonianMonteCarlo):
    """TFP's UncalibratedHamiltonianMonteCarlo.one_step with ``looped_leapfrog``; a subclass may
    draw its momenta and integrate otherwise (``proposal``)."""

    def __init__(self, *args, steps_per_iteration: int = 1, **kwargs):
        super().__init__(*args, **kwargs)
        self._steps_per_iteration = int(steps_per_iteration)

    def proposal(self, seed, state_parts):
        """(the momenta drawn from ``seed``, the integrator: (step sizes, momenta, state, target,
        gradient) -> the same after the trajectory): ``core.engine.hmc.leapfrog_proposal``."""
        momenta, integrate, _ = leapfrog_proposal(self.target_log_prob_fn, int(self.num_leapfrog_steps),
                                                  self._steps_per_iteration)(seed, state_parts)
        return momenta, integrate

    def one_step(self, current_state, previous_kernel_results, seed=None):
        with tf.name_scope(mcmc_util.make_name(self.name, "hmc", "one_step")):
            if self._store_parameters_in_results:
                step_size = previous_kernel_results.step_size
            else:
                step_size = self.step_size
            (current_state_parts, step_sizes, current_target_log_prob,
             current_grad_parts) = tfp_hmc._prepare_args(  # noqa: SLF001
                self.target_log_prob_fn, current_state, step_size,
                previous_kernel_results.target_log_prob, previous_kernel_results.grads_target_log_prob,
                maybe_expand=True, state_gradients_are_stopped=self.state_gradients_are_stopped)
            seed = samplers.sanitize_seed(seed)
            current_momentum_parts, integrate = self.proposal(seed, current_state_parts)
            (next_momentum_parts, next_state_parts, next_target_log_prob,
             next_grad_parts) = integrate(step_sizes, current_momentum_parts, current_state_parts,
                                          current_target_log_prob, current_grad_parts)
            if self.state_gradients_are_stopped:
                next_state_parts = [tf.stop_gradient(x) for x in next_state_parts]
            independent_chain_ndims = ps.rank(current_target_log_prob)
            new_results = previous_kernel_results._replace(
                log_acceptance_correction=tfp_hmc._compute_log_acceptance_correction(  # noqa: SLF001
                    current_momentum_parts, next_momentum_parts, independent_chain_ndims),
                target_log_prob=next_target_log_prob,
                grads_target_log_prob=next_grad_parts,
                initial_momentum=current_momentum_parts,
                final_momentum=next_momentum_parts,
                seed=seed)
            state = next_state_parts if mcmc_util.is_list_like(current_state) else next_state_parts[0]
            return state, new_results


class LoopedHamiltonianMonteCarlo(tfp.mcmc.HamiltonianMonteCarlo):
    """``tfp.mcmc.HamiltonianMonteCarlo`` whose leapfrog loop runs ``steps_per_iteration``
    straight-line steps per iteration (``looped_leapfrog``; a Python int of steps). Its proposal
    is ``uncalibrated_kernel`` (a subclass may give another with the same arguments)."""

    uncalibrated_kernel = UncalibratedLoopedHMC

    def __init__(self, target_log_prob_fn, step_size, num_leapfrog_steps: int,
                 steps_per_iteration: int = 1, state_gradients_are_stopped=False,
                 store_parameters_in_results=False, experimental_shard_axis_names=None, name=None):
        if experimental_shard_axis_names is not None:
            raise NotImplementedError("sharded chains are not supported by this kernel")
        if not isinstance(num_leapfrog_steps, int) or num_leapfrog_steps < 1:
            raise ValueError(f"num_leapfrog_steps must be a positive Python int, got {num_leapfrog_steps!r}")
        if not isinstance(steps_per_iteration, int) or steps_per_iteration < 1:
            raise ValueError(f"steps_per_iteration must be a positive Python int, got {steps_per_iteration!r}")
        super().__init__(target_log_prob_fn, step_size, num_leapfrog_steps,
                         state_gradients_are_stopped=state_gradients_are_stopped,
                         store_parameters_in_results=store_parameters_in_results, name=name)
        self._impl = metropolis_hastings.MetropolisHastings(
            inner_kernel=self.uncalibrated_kernel(
                target_log_prob_fn=target_log_prob_fn, step_size=step_size,
                num_leapfrog_steps=num_leapfrog_steps,
                state_gradients_are_stopped=state_gradients_are_stopped,
                store_parameters_in_results=store_parameters_in_results,
                name=name or "hmc_kernel", steps_per_iteration=steps_per_iteration))
        # with steps_per_iteration: TFP's step-size adaptation rebuilds its inner kernel from
        # ``parameters`` (enable_store_parameters_in_results), which otherwise ran k = 1
        self._parameters = {**self._impl.inner_kernel.parameters, "steps_per_iteration": steps_per_iteration}

    @property
    def steps_per_iteration(self) -> int:
        return self._impl.inner_kernel._steps_per_iteration  # noqa: SLF001


class UnrolledHamiltonianMonteCarlo(LoopedHamiltonianMonteCarlo):
    """``tfp.mcmc.HamiltonianMonteCarlo`` with the leapfrog loop fully unrolled: XLA keeps
    every step's buffers (memory grows with ``num_leapfrog_steps``)."""

    def __init__(self, target_log_prob_fn, step_size, num_leapfrog_steps: int, **kwargs):
        if not isinstance(num_leapfrog_steps, int) or num_leapfrog_steps < 1:
            raise ValueError(f"num_leapfrog_steps must be a positive Python int, got {num_leapfrog_steps!r}")
        kwargs.pop("steps_per_iteration", None)         # always L (rebuilt from ``parameters``)
        super().__init__(target_log_prob_fn, step_size, num_leapfrog_steps,
                         steps_per_iteration=num_leapfrog_steps, **kwargs)
