"""TFP's Hamiltonian Monte Carlo with the leapfrog loop under our control.

``LoopedHamiltonianMonteCarlo`` is ``tfp.mcmc.HamiltonianMonteCarlo`` (same arguments,
same kernel results, same random numbers, same draws up to floating-point rounding)
whose leapfrog integrator is a ``tf.while_loop`` of ``steps_per_iteration`` straight-line
steps per iteration (``looped_leapfrog``). XLA reuses one iteration's buffers for the
next, so the kernel's memory does not grow with ``num_leapfrog_steps``: the engine uses
it for every L (``core.run.engine_limits.LEAPFROG_STEPS_PER_ITERATION``).

``UnrolledHamiltonianMonteCarlo`` is the same with every step straight-line (k = L), the
engine's kernel for L <= 64 before issue #13: XLA kept about 24 grid-sized buffers per
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
from tensorflow_probability.python.mcmc.internal import leapfrog_integrator as leapfrog_impl
from tensorflow_probability.python.mcmc.internal import util as mcmc_util

__all__ = ["LoopedHamiltonianMonteCarlo", "UnrolledHamiltonianMonteCarlo", "UncalibratedLoopedHMC",
           "looped_leapfrog", "unrolled_leapfrog"]


def looped_leapfrog(target_fn, step_sizes, num_steps: int, momentum_parts, state_parts, target,
                    target_grad_parts, steps_per_iteration: int = 1):
    """``num_steps`` leapfrog steps (TFP's algorithm): a ``tf.while_loop`` of
    num_steps // k iterations of k = ``steps_per_iteration`` straight-line steps, then the
    num_steps % k others straight. XLA reuses one iteration's buffers, so the memory grows
    with k, not with ``num_steps``; k >= num_steps is the fully unrolled integrator."""
    momentum_parts, state_parts, target, target_grad_parts = leapfrog_impl.process_args(
        target_fn, momentum_parts, state_parts, target, target_grad_parts)
    k = max(1, min(int(steps_per_iteration), int(num_steps)))

    def steps(n, half, state_parts, target, target_grad_parts):
        for _ in range(n):
            half, state_parts, target, target_grad_parts = leapfrog_impl._one_step(  # noqa: SLF001
                target_fn, step_sizes, lambda x: x, half, state_parts, target, target_grad_parts)
        return half, state_parts, target, target_grad_parts

    half = [v + 0.5 * tf.cast(eps, v.dtype) * g
            for v, eps, g in zip(momentum_parts, step_sizes, target_grad_parts)]
    iterations, rest = divmod(int(num_steps), k)
    carry = (half, state_parts, target, target_grad_parts)
    if iterations > 1:
        _, *carry = tf.while_loop(
            lambda i, *_: i < iterations,
            lambda i, *args: (i + 1, *steps(k, *args)),
            (tf.constant(0), *carry))
    elif iterations == 1:
        carry = steps(k, *carry)
    half, state_parts, target, target_grad_parts = steps(rest, *carry)
    momentum = [v - 0.5 * tf.cast(eps, v.dtype) * g
                for v, eps, g in zip(half, step_sizes, target_grad_parts)]
    return momentum, state_parts, target, target_grad_parts


def unrolled_leapfrog(target_fn, step_sizes, num_steps: int, momentum_parts, state_parts, target,
                      target_grad_parts):
    """``num_steps`` leapfrog steps as straight-line code (TFP's algorithm, no while loop)."""
    return looped_leapfrog(target_fn, step_sizes, num_steps, momentum_parts, state_parts, target,
                           target_grad_parts, steps_per_iteration=num_steps)


class UncalibratedLoopedHMC(tfp.mcmc.UncalibratedHamiltonianMonteCarlo):
    """TFP's UncalibratedHamiltonianMonteCarlo.one_step with ``looped_leapfrog``; a subclass may
    draw its momenta and integrate otherwise (``proposal``)."""

    def __init__(self, *args, steps_per_iteration: int = 1, **kwargs):
        super().__init__(*args, **kwargs)
        self._steps_per_iteration = int(steps_per_iteration)

    def proposal(self, seed, state_parts):
        """(the momenta drawn from ``seed``, the integrator: (step sizes, momenta, state, target,
        gradient) -> the same after the trajectory): ``num_leapfrog_steps`` looped steps."""
        seeds = list(samplers.split_seed(seed, n=len(state_parts)))
        momenta = [samplers.normal(shape=ps.shape(x), dtype=x.dtype.base_dtype, seed=part_seed)
                   for part_seed, x in zip(seeds, state_parts)]

        def integrate(step_sizes, *args):
            return looped_leapfrog(self.target_log_prob_fn, step_sizes, int(self.num_leapfrog_steps), *args,
                                   steps_per_iteration=self._steps_per_iteration)
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
        self._parameters = self._impl.inner_kernel.parameters.copy()

    @property
    def steps_per_iteration(self) -> int:
        return self._impl.inner_kernel._steps_per_iteration  # noqa: SLF001


class UnrolledHamiltonianMonteCarlo(LoopedHamiltonianMonteCarlo):
    """``tfp.mcmc.HamiltonianMonteCarlo`` with the leapfrog loop fully unrolled: XLA keeps
    every step's buffers (memory grows with ``num_leapfrog_steps``)."""

    def __init__(self, target_log_prob_fn, step_size, num_leapfrog_steps: int, **kwargs):
        if not isinstance(num_leapfrog_steps, int) or num_leapfrog_steps < 1:
            raise ValueError(f"num_leapfrog_steps must be a positive Python int, got {num_leapfrog_steps!r}")
        super().__init__(target_log_prob_fn, step_size, num_leapfrog_steps,
                         steps_per_iteration=num_leapfrog_steps, **kwargs)
