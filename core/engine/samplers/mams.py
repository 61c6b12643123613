"""MAMS: the Metropolis-adjusted microcanonical sampler (the dynamics: ``core.engine.microcanonical``),
in the microcanonical family (``microcanonical_kernel``), tuned by
``core.engine.adaptation.mams_tuning`` (its step size's dual averaging aims at
``sampler.target_accept``).

The kernel, BlackJAX's ``adjusted_mclmc_dynamic.py`` in shape: ``init(position, logdensity_fn)``
-> ``MamsState``; ``build_kernel(logdensity_fn)`` -> step(seed, state, params) -> (state,
``MamsInfo``), with ``MamsParams`` (step size, L). A step's seed is split in four: the velocity,
the trajectory length's uniform (one for all chains), the acceptance, one unused.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from core.engine import chain_seeds, placement
from core.engine.adaptation.mams_tuning import MamsTuning
from core.engine.driver import DIVERGENCE_THRESHOLD
from core.engine.microcanonical import (
    all_finite,
    chunk_rng,
    isokinetic_mclachlan,
    mams_trajectory_steps,
    n_dims,
    normal_parts,
    select,
    unit_velocity,
    value_and_grad_fn,
)
from core.engine.samplers.microcanonical_kernel import MicrocanonicalKernel
from core.samplers import sampler_info

__all__ = ["MamsState", "MamsParams", "MamsInfo", "init", "build_kernel", "Mams"]


class MamsState(NamedTuple):
    position: list
    logdensity: tf.Tensor
    logdensity_grad: list
    aux: list                 # what the density computes beside log p at position (has_aux), else []


class MamsParams(NamedTuple):
    step_size: tf.Tensor
    L: tf.Tensor              # the mean trajectory length


class MamsInfo(NamedTuple):
    acceptance_rate: tf.Tensor          # min(1, exp(log_accept_ratio))
    log_accept_ratio: tf.Tensor         # -inf where the end of the trajectory is not finite
    finite: tf.Tensor
    num_integration_steps: tf.Tensor    # (chains,) int32


def init(position, logdensity_fn, has_aux: bool = False) -> MamsState:
    lp, grads, aux = value_and_grad_fn(logdensity_fn, has_aux)(list(position))
    return MamsState(list(position), lp, grads, aux)


def build_kernel(logdensity_fn, has_aux: bool = False):
    """step(seed, state, params) -> (state, info): a fresh unit velocity, n isokinetic steps
    (n random with mean L / eps), accepted with probability min(1, exp(-energy error))."""
    value_and_grad = value_and_grad_fn(logdensity_fn, has_aux)

    def step(seed, state: MamsState, params: MamsParams):
        x, lp, g, aux = state
        step, L = params
        chains, dim = int(lp.shape[0]), n_dims(x)
        seeds = chain_seeds.split(seed, 4)
        u = unit_velocity(normal_parts(seeds[0], x, chunk_rng()))
        uniform = tf.random.stateless_uniform([], chain_seeds.common(seeds[1]), dtype=tf.float64)   # shared
        n = mams_trajectory_steps(uniform, L / step)          # (C,)

        def body(i, xt, ut, lpt, gt, at, kin):
            x2, u2, lp2, g2, a2, k = isokinetic_mclachlan(value_and_grad, xt, ut, gt, step, dim)
            active = i < n
            return (i + 1, select(active, x2, xt), select(active, u2, ut), tf.where(active, lp2, lpt),
                    select(active, g2, gt), select(active, a2, at), tf.where(active, kin + k, kin))

        _, xe, _, lpe, ge, ae, kin = placement.while_loop(
            lambda i, *_: i < tf.reduce_max(n), body,
            (tf.constant(0, tf.int32), list(x), u, lp, list(g), list(aux), tf.zeros([chains], tf.float64)))
        delta = tf.cast(lpe, tf.float64) - tf.cast(lp, tf.float64) - kin      # log acceptance ratio
        finite = tf.math.is_finite(delta) & all_finite(xe)
        delta = tf.where(finite, delta, tf.fill(tf.shape(delta), tf.constant(-np.inf, tf.float64)))
        p_accept = tf.minimum(tf.exp(delta), 1.0)
        accept = chain_seeds.uniform(seeds[2], chains, tf.float64) < p_accept
        new = MamsState(select(accept, xe, x), tf.where(accept, lpe, lp), select(accept, ge, g), select(accept, ae, aux))
        return new, MamsInfo(p_accept, delta, finite, n)
    return step


class Mams(MicrocanonicalKernel):
    tuning_class = MamsTuning

    def settings(self) -> dict:
        """The acceptance aimed at, and the trajectory's mean number of integration steps: longer
        where the model samples parameters beside a field, its P(k) hyperparameters
        (``core.samplers.MAMS_HYPER_STEPS_PER_L``)."""
        model = self.d.model
        hyper = bool(getattr(model, "has_field", False) and model.param_names)
        return {"target_accept": self.d.sampler.target_accept,
                "steps_per_L": sampler_info("mams").trajectory_steps[hyper]}

    build_kernel = staticmethod(build_kernel)

    @staticmethod
    def tuned_step(kernel, tuner, x, lp, g, tune, seed, step_index, aux=()):
        step = tune["step_size"]
        new, info = kernel(seed, MamsState(list(x), lp, list(g), list(aux)), MamsParams(step, tune["L"]))
        moved = tf.cast(all_finite(new.position), tf.float64)
        tune = tuner.update(tune, step_index, info.acceptance_rate, new.position, moved)
        n, dtype = info.num_integration_steps, tuner.dtype
        stats = {"acceptance_rate": tf.cast(info.acceptance_rate, dtype),
                 "energy_error": tf.cast(-info.log_accept_ratio, dtype),
                 "diverging": ~info.finite | (-info.log_accept_ratio > DIVERGENCE_THRESHOLD),
                 "n_steps": 2 * n, "step_size": tf.cast(step, dtype),
                 "trajectory_length": tf.cast(tf.cast(n, tf.float64) * step, dtype)}
        return new.position, new.logdensity, new.logdensity_grad, tune, stats, new.aux
