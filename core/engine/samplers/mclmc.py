"""MCLMC: the unadjusted microcanonical Langevin sampler (the dynamics: ``core.engine.microcanonical``),
in the microcanonical family (``microcanonical_kernel``), tuned by
``core.engine.adaptation.mclmc_tuning``.

The kernel, BlackJAX's ``mcmc/mclmc.py`` in shape: ``init(position, logdensity_fn, seed)`` ->
``MclmcState``; ``build_kernel(logdensity_fn)`` -> step(seed, state, params) -> (state,
``MclmcInfo``), with ``MclmcParams`` (step size, L), every field (chains,) or a list of
(chains, ...) parts. A step's seed is split in two: the noise of each half refresh.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from core.engine import chain_seeds
from core.engine.adaptation.mclmc_tuning import DESIRED_ENERGY_VAR, HYPER_ENERGY_VAR, MclmcTuning
from core.engine.driver import DIVERGENCE_THRESHOLD
from core.engine.microcanonical import chunk_rng, mclmc_transition, normal_parts, unit_velocity, value_and_grad_fn
from core.engine.samplers.microcanonical_kernel import MicrocanonicalKernel

__all__ = ["MclmcState", "MclmcParams", "MclmcInfo", "init", "init_velocity", "build_kernel", "Mclmc"]

VELOCITY_STREAM = 104729     # the first velocity's seed: (seed, this)


class MclmcState(NamedTuple):
    position: list
    logdensity: tf.Tensor
    logdensity_grad: list
    velocity: list            # unit per chain over all parts
    aux: list                 # what the density computes beside log p at position (has_aux), else []


class MclmcParams(NamedTuple):
    step_size: tf.Tensor
    L: tf.Tensor              # the velocity's decoherence length


class MclmcInfo(NamedTuple):
    energy_change: tf.Tensor  # 0 where the step was undone
    ok: tf.Tensor             # False where it was undone (something not finite)


def init_velocity(position, seed: int) -> list:
    """The first unit velocity, drawn from fold (seed, VELOCITY_STREAM)."""
    return unit_velocity(normal_parts(tf.constant([seed, VELOCITY_STREAM], tf.int32), position))


def init(position, logdensity_fn, seed: int, has_aux: bool = False) -> MclmcState:
    lp, grads, aux = value_and_grad_fn(logdensity_fn, has_aux)(list(position))
    return MclmcState(list(position), lp, grads, init_velocity(position, seed), aux)


def build_kernel(logdensity_fn, has_aux: bool = False):
    """step(seed, state, params) -> (state, info): one MCLMC step (``mclmc_transition``)."""
    value_and_grad = value_and_grad_fn(logdensity_fn, has_aux)

    def step(seed, state: MclmcState, params: MclmcParams):
        seeds = chain_seeds.split(seed, 2)
        x, alg = state.position, chunk_rng()
        x2, u2, lp2, g2, aux2, energy, ok = mclmc_transition(
            value_and_grad, x, state.velocity, state.logdensity, state.logdensity_grad, params.step_size, params.L,
            normal_parts(seeds[0], x, alg), normal_parts(seeds[1], x, alg), state.aux)
        return MclmcState(x2, lp2, g2, u2, aux2), MclmcInfo(energy, ok)
    return step


class Mclmc(MicrocanonicalKernel):
    tuning_class = MclmcTuning

    def settings(self) -> dict:
        """The energy error aimed at: smaller where P(k) hyperparameters are sampled and the
        likelihood couples the modes (a mask, a noise map, counts, a model file's; not a slab
        mask under "conditional", exact there: ``FieldPosterior.decoupled``): each mode's share
        of the unadjusted sampler's bias then reaches the hyperparameters, which add it up over
        every mode (``HYPER_ENERGY_VAR``)."""
        model = self.d.model
        coupled = bool(getattr(model, "has_field", False) and model.param_names
                       and not model.posterior.decoupled)
        return {"energy_var": HYPER_ENERGY_VAR if coupled else DESIRED_ENERGY_VAR}

    def fresh_tuning(self, parts, seed: int) -> dict:
        # the velocity rides in the tuning state through the chunks and the checkpoint
        return {"velocity": init_velocity(parts, seed), **self.tuner.fresh()}

    build_kernel = staticmethod(build_kernel)

    @staticmethod
    def tuned_step(kernel, tuner, x, lp, g, tune, seed, step_index, aux=()):
        step, L = tune["step_size"], tune["L"]
        new, info = kernel(seed, MclmcState(list(x), lp, list(g), tune["velocity"], list(aux)), MclmcParams(step, L))
        energy, ok = info
        tune = tuner.update({**tune, "velocity": new.velocity}, step_index, energy, ok, new.position)
        diverging = tf.logical_or(~ok, tf.abs(energy) > DIVERGENCE_THRESHOLD)
        # recorded: NaN for a step undone (its energy was not finite; the tuning takes 0, as the
        # reference), so that the warmup watch tells a broken density from a narrow one
        recorded = tf.where(ok, energy, tf.fill(tf.shape(energy), tf.constant(np.nan, energy.dtype)))
        dtype = tuner.dtype
        stats = {"acceptance_rate": tf.cast(ok, dtype), "energy_error": tf.cast(recorded, dtype),
                 "diverging": diverging, "n_steps": tf.fill([tuner.chains], tf.constant(2, tf.int32)),
                 "step_size": tf.cast(step, dtype), "trajectory_length": tf.cast(L, dtype)}
        return new.position, new.logdensity, new.logdensity_grad, tune, stats, new.aux
