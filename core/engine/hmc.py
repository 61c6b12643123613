"""Hamiltonian Monte Carlo as pure functions, shaped as BlackJAX's (``blackjax/mcmc/hmc.py``):

    state = init(position, logdensity_fn)                      # HMCState
    step = build_kernel(logdensity_fn, leapfrog_proposal(logdensity_fn, num_steps))
    state, info = step(seed, state, step_size)                 # HMCState, HMCInfo

``position`` is a list of state parts with the chains first, ``step_size`` one tensor per part
broadcastable against it (the engine's are (chains, 1, ...)), ``seed`` each chain's seeds
(``core.engine.chain_seeds.ChainSeeds``: a chain draws from its own) or a stateless seed. The
step is ``tfp.mcmc.HamiltonianMonteCarlo.one_step``'s arithmetic and random numbers (TFP 0.25:
MetropolisHastings over UncalibratedHamiltonianMonteCarlo, written out with TFP's own helpers),
so a chain draws what TFP's kernel given that chain's seed draws bit for bit: the seed split into a proposal seed and an
acceptance seed, momenta p ~ N(0, 1) from the proposal seed, the trajectory, then

    log r = log p(q') - log p(q) + (|p|^2 - |p'|^2) / 2      (-inf where not finite)
    accept  where  log u < log r,  u ~ U[0, 1) from the acceptance seed.

A proposal says how the momenta are drawn and how long the trajectory is:
``proposal(seed, position) -> (momenta, integrate, num_steps)``, with ``integrate(step_sizes,
momenta, position, logdensity, grads)`` the same after the trajectory (``leapfrog_proposal``: L
steps; HMC with a jittered L: ``core.engine.samplers.hmc_jittered``).

The leapfrog is ``looped_leapfrog``: a ``tf.while_loop`` of k straight-line steps per iteration,
so that XLA reuses one iteration's buffers and the memory does not grow with L (issue #13;
``core.run.engine_limits.LEAPFROG_STEPS_PER_ITERATION``); k = L unrolls it (small runs:
``core.run.engine_limits.unrolls``). TFP's kernel classes with this integrator, for benchmarks
and tests, are in ``core.engine.kernels``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import tensorflow as tf
from tensorflow_probability.python.internal import prefer_static as ps
from tensorflow_probability.python.internal import samplers
from tensorflow_probability.python.mcmc import hmc as tfp_hmc
from tensorflow_probability.python.mcmc.internal import leapfrog_integrator as leapfrog_impl
from tensorflow_probability.python.mcmc.internal import util as mcmc_util

from core.engine import chain_seeds, placement

__all__ = ["HMCState", "HMCInfo", "init", "build_kernel", "leapfrog_proposal", "looped_leapfrog",
           "unrolled_leapfrog"]


class HMCState(NamedTuple):
    """A chain's point: the position (parts, chains first), its log-density (chains,) and the
    log-density's gradient (one per part)."""

    position: list
    logdensity: tf.Tensor
    logdensity_grad: list


class HMCInfo(NamedTuple):
    """What a transition did, per chain: the log acceptance ratio log r (-inf where not
    finite), whether it accepted, and the leapfrog steps of its trajectory (an int32 scalar:
    every chain integrates the same number)."""

    log_accept_ratio: tf.Tensor
    is_accepted: tf.Tensor
    num_integration_steps: tf.Tensor


def init(position, logdensity_fn) -> HMCState:
    """The state at ``position``: its log-density and gradient computed."""
    parts = list(position)
    logdensity, grads = mcmc_util.maybe_call_fn_and_grads(logdensity_fn, parts)
    return HMCState(parts, logdensity, list(grads))


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
        _, *carry = placement.while_loop(
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


def leapfrog_proposal(logdensity_fn, num_steps: int, steps_per_iteration: int = 1) -> Callable:
    """HMC's proposal: momenta ~ N(0, 1), one seed per part split from the proposal seed (as
    TFP's), and ``num_steps`` leapfrog steps (``looped_leapfrog``)."""
    num_steps = int(num_steps)

    def proposal(seed, position):
        momenta = [chain_seeds.normal(part_seed, x)
                   for part_seed, x in zip(chain_seeds.split(seed, len(position)), position)]

        def integrate(step_sizes, *args):
            return looped_leapfrog(logdensity_fn, step_sizes, num_steps, *args,
                                   steps_per_iteration=steps_per_iteration)
        return momenta, integrate, tf.constant(num_steps, tf.int32)
    return proposal


def build_kernel(logdensity_fn, proposal) -> Callable:
    """``step(seed, state, step_size) -> (HMCState, HMCInfo)``: one HMC transition with the
    trajectory of ``proposal`` (module docstring)."""

    def step(seed, state: HMCState, step_size):
        if not isinstance(seed, chain_seeds.ChainSeeds):
            seed = samplers.sanitize_seed(seed)
        proposal_seed, acceptance_seed = chain_seeds.split(seed, 2)     # MetropolisHastings'
        (position, step_sizes, logdensity, grads) = tfp_hmc._prepare_args(  # noqa: SLF001
            logdensity_fn, list(state.position), step_size, state.logdensity, list(state.logdensity_grad),
            maybe_expand=True)
        momenta, integrate, num_steps = proposal(proposal_seed, position)
        next_momenta, next_position, next_logdensity, next_grads = integrate(
            step_sizes, momenta, position, logdensity, grads)
        correction = tfp_hmc._compute_log_acceptance_correction(  # noqa: SLF001
            momenta, next_momenta, ps.rank(logdensity))
        log_accept_ratio = mcmc_util.safe_sum([next_logdensity, -state.logdensity, correction])
        log_uniform = tf.math.log(chain_seeds.uniform(acceptance_seed, next_logdensity.shape[0],
                                                      next_logdensity.dtype.base_dtype))
        is_accepted = log_uniform < log_accept_ratio
        chosen = mcmc_util.choose(is_accepted, HMCState(next_position, next_logdensity, next_grads),
                                  HMCState(list(state.position), state.logdensity, list(state.logdensity_grad)))
        return HMCState(*chosen), HMCInfo(log_accept_ratio, is_accepted, num_steps)
    return step
