"""Microcanonical samplers in TensorFlow: MCLMC (unadjusted) and MAMS (Metropolis-adjusted).

Both move the state x with a unit velocity u (|u| = 1 over all the state's parts of a chain
together, d coordinates) under isokinetic ("energy sampling") dynamics, integrated with the
McLachlan minimal-norm splitting B(b1) A(1/2) B(1 - 2 b1) A(1/2) B(b1), b1 = 0.19318...:

    A(a):  x <- x + a eps u
    B(b):  with g = grad log p(x), e = g / |g|, delta = b eps |g| / (d - 1), zeta = exp(-delta),
           u <- normalise(e (1 - zeta) (1 + zeta + (u.e) (1 - zeta)) + 2 zeta u)
           kinetic energy change += (delta - log 2 + log(s+ (1 - zeta^2) + 2 zeta^2)) (d - 1),
           s+ = |u + e|^2 / 2 (u before the update)

(Steeg & Galstyan's ESH update, as BlackJAX's ``esh_dynamics_momentum_update_one_step``). One
step costs two gradient evaluations: the gradient at the step's start is the last one of the
step before. The energy error of a step is kinetic change - log p(x') + log p(x).

MCLMC (Robnik et al. 2023; BlackJAX ``mcmc/mclmc.py``): each step is a half partial refresh of
the velocity, one integrator step, a half partial refresh,
    u <- normalise(u + nu z),  z ~ N(0, I),  nu = sqrt((exp(eps / L) - 1) / d)
(BlackJAX's ``partially_refresh_momentum`` with step eps / 2: the velocity decoheres over a
length L; the older c1 = exp(-eps / L) form is the same to first order). Nothing is accepted or
rejected; a step whose state, velocity, log-density or energy is not finite is undone (the old
state kept, a fresh unit velocity drawn, energy error 0), and in warmup the step size is capped
at 0.8 x the one that failed (the reference's ``handle_nans``).

MAMS (Robnik et al. 2025; BlackJAX ``adjusted_mclmc_dynamic.py`` with its
``make_random_trajectory_length_fn(True)`` and ``adjusted_mclmc_find_L_and_step_size``'s
defaults): each step draws a fresh unit velocity, integrates n steps (no refresh inside: the
reference's L_proposal_factor = inf), n = max(1, ceil(U rescale(L / eps))) with U ~ U(0, 1) so
that E[n] = L / eps (the trajectory-length jitter; one U per step for all chains, so that the
vectorised chains integrate together), and accepts with probability min(1, exp(-energy error)).
It costs 2 n gradient evaluations.

Everything is vectorised over chains (leading axis C of every part). This module is the
dynamics only: the kernels, BlackJAX-shaped (``init`` / ``build_kernel``: a pure step from a
named state and parameters), are ``core.engine.samplers.mclmc`` and ``.mams``; their staged
tunings ``core.engine.adaptation.mclmc_tuning`` and ``.mams_tuning``.
"""

from __future__ import annotations

import math

import tensorflow as tf
import tensorflow_probability as tfp

from core.engine import chain_seeds, placement
from core.engine.devices import memory_kind

__all__ = ["B1", "chain_dot", "n_dims", "per_chain", "unit_velocity", "partial_refresh", "esh_velocity_update",
           "isokinetic_mclachlan", "mclmc_transition", "mams_trajectory_steps", "all_finite", "select",
           "normal_parts", "value_and_grad_fn", "chunk_rng"]

B1 = 0.1931833275037836            # McLachlan's minimal-norm coefficient
_NORM_TOL = 1e-13


# ----------------------------------------------------------------------------- the dynamics

def per_chain(v, part):
    """(C,) -> (C, 1, ..., 1) against ``part``."""
    return tf.reshape(tf.cast(v, part.dtype), [-1] + [1] * (len(part.shape) - 1))


def chain_dot(a, b):
    """Per-chain inner product of two lists of parts: (C,)."""
    return tf.add_n([tf.reduce_sum(tf.reshape(x * y, [tf.shape(x)[0], -1]), axis=1) for x, y in zip(a, b)])


def n_dims(parts) -> int:
    """Coordinates per chain of a list of (C, ...) parts."""
    return int(sum(math.prod(p.shape[1:]) for p in parts))


def _normalise(parts, tol=_NORM_TOL):
    norm = tf.sqrt(chain_dot(parts, parts))
    safe = tf.where(norm > tol, norm, tf.ones_like(norm))
    return [p / per_chain(safe, p) for p in parts], norm


def unit_velocity(noise):
    """Unit vectors (per chain, over all parts) from standard normal ``noise`` parts."""
    return _normalise(noise)[0]


def partial_refresh(u, noise, step, L, dim: int):
    """u <- normalise(u + nu z), nu = sqrt((exp(2 step / L) - 1) / d); unchanged where L is
    infinite (BlackJAX ``partially_refresh_momentum``; MCLMC calls it with step = eps / 2)."""
    nu = tf.sqrt((tf.exp(2.0 * step / L) - 1.0) / dim)
    fresh = _normalise([ui + per_chain(nu, ui) * zi for ui, zi in zip(u, noise)])[0]
    keep = tf.math.is_inf(L)
    return [tf.where(per_chain(keep, ui) > 0, ui, fi) for ui, fi in zip(u, fresh)]


def esh_velocity_update(u, g, step, dim: int):
    """One B(step) update of the unit velocity under gradient ``g`` (module docstring):
    (new u, kinetic energy change (C,))."""
    e, g_norm = _normalise(g)
    ue = chain_dot(u, e)
    delta = step * tf.cast(g_norm, step.dtype) / (dim - 1)
    zeta = tf.exp(-delta)
    zc = tf.cast(zeta, u[0].dtype)
    a = (1 - zc) * (1 + zc + tf.cast(ue, zc.dtype) * (1 - zc))
    raw = [ei * per_chain(a, ei) + 2.0 * per_chain(zc, ui) * ui for ui, ei in zip(u, e)]
    new_u = _normalise(raw)[0]
    # |u| = |e| = 1, so s+ = |u + e|^2 / 2 = 1 + u.e: from the projection already taken, not
    # from two more passes over the grid (BlackJAX's form, log(1 + u.e + (1 - u.e) zeta^2))
    ue = tf.cast(ue, zeta.dtype)
    kinetic = (delta - math.log(2.0) + tf.math.log(1.0 + ue + (1.0 - ue) * zeta * zeta)) * (dim - 1)
    return new_u, kinetic


def isokinetic_mclachlan(value_and_grad, x, u, g, step, dim: int):
    """One McLachlan step of the isokinetic dynamics from (x, u) with gradient g at x:
    (x', u', log p(x'), g', aux', kinetic energy change). ``step`` (C,) in the tuning dtype;
    ``value_and_grad(x)`` -> (log p, gradient parts, aux parts), aux' those at x'."""
    u, k1 = esh_velocity_update(u, g, step * B1, dim)
    half = [per_chain(0.5 * step, xi) for xi in x]
    x = [xi + hi * ui for xi, hi, ui in zip(x, half, u)]
    lp, g, _ = value_and_grad(x)
    u, k2 = esh_velocity_update(u, g, step * (1.0 - 2.0 * B1), dim)
    x = [xi + hi * ui for xi, hi, ui in zip(x, half, u)]
    lp, g, aux = value_and_grad(x)
    u, k3 = esh_velocity_update(u, g, step * B1, dim)
    return x, u, lp, g, aux, k1 + k2 + k3


def all_finite(parts):
    return tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(tf.reshape(p, [tf.shape(p)[0], -1])), axis=1)
                                   for p in parts]), axis=0)


def select(ok, new, old):
    return [tf.where(per_chain(ok, n) > 0, n, o) for n, o in zip(new, old)]


def mclmc_transition(value_and_grad, x, u, lp, g, step, L, noise_1, noise_2, aux=()):
    """One MCLMC step with its noise given (standard normal parts): refresh(eps / 2),
    McLachlan step, refresh(eps / 2), undone when anything is not finite.

    Returns x, u, lp, g, aux, energy change (C,, tuning dtype), ok (C,) bool: False where the
    step was undone (old x, lp, g, aux; a fresh unit velocity from ``noise_2``, whose refresh
    of the discarded velocity is discarded with it, so that no third grid of noise is drawn
    for a rare event; energy change 0). ``aux``: what ``value_and_grad`` computes beside the
    gradient at x (the engine's field: the density computes it anyway), for the new x."""
    dim = n_dims(x)
    u1 = partial_refresh(u, noise_1, 0.5 * step, L, dim)
    x2, u2, lp2, g2, aux2, kinetic = isokinetic_mclachlan(value_and_grad, x, u1, g, step, dim)
    u2 = partial_refresh(u2, noise_2, 0.5 * step, L, dim)
    energy = kinetic - tf.cast(lp2, kinetic.dtype) + tf.cast(lp, kinetic.dtype)
    ok = (all_finite(x2) & all_finite(u2) & tf.math.is_finite(lp2) & tf.math.is_finite(kinetic)
          & tf.math.is_finite(energy))
    x_out = select(ok, x2, x)
    u_out = select(ok, u2, unit_velocity(noise_2))
    g_out = select(ok, g2, g)
    aux_out = select(ok, aux2, aux)
    lp_out = tf.where(ok, lp2, lp)
    return x_out, u_out, lp_out, g_out, aux_out, tf.where(ok, energy, tf.zeros_like(energy)), ok


def _rescale(mu):
    """s such that round(U(0, 1) s + 0.5) has mean mu (BlackJAX ``adjusted_mclmc.rescale``)."""
    k = tf.floor(2.0 * mu - 1.0)
    return k + k * (mu - 0.5 * (k + 1.0)) / (k + 1.0 - mu)


def mams_trajectory_steps(uniform, avg):
    """The reference's random trajectory length: max(1, ceil(U rescale(avg))), int32."""
    return tf.cast(tf.maximum(tf.math.ceil(uniform * _rescale(avg)), 1.0), tf.int32)


#: the counter-based generator of the velocity noise in the compiled chunks on a CPU: Threefry,
#: which XLA generates at least 4x faster there than the default (Philox; bench/gradient_cost.py's
#: ``normal`` line); it exists only under XLA, so an eager draw (``fresh``) keeps the default
CHUNK_RNG = "threefry"


def chunk_rng() -> str:
    """The generator of the chunks' velocity noise: CHUNK_RNG where the engine computes on a CPU
    (``core.engine.devices.memory_kind``), TensorFlow's default on a GPU (no GPU has measured
    either generator yet) and in a sharded field's programs, which XLA does not compile
    (``placement.in_program``)."""
    return CHUNK_RNG if memory_kind() == "cpu" and not placement.in_program() else "auto_select"


def normal_parts(seed, like, alg: str = "auto_select"):
    """Standard normals shaped as each part of ``like``: from each chain's own seed where
    ``seed`` is a ``ChainSeeds`` (``core.engine.chain_seeds``), else one draw over the batch."""
    if isinstance(seed, chain_seeds.ChainSeeds):
        return [chain_seeds.normal(s, p, alg=alg) for s, p in zip(chain_seeds.split(seed, len(like)), like)]
    seeds = tf.random.experimental.stateless_split(seed, len(like))
    return [tf.random.stateless_normal(tf.shape(p), seeds[i], dtype=p.dtype, alg=alg) for i, p in enumerate(like)]


def value_and_grad_fn(target, has_aux: bool = False):
    """x -> (log p, gradient parts, aux parts) of ``target(*x)``; with ``has_aux`` the target
    returns (log p, aux parts), else log p alone (aux: [])."""
    def f(x):
        if has_aux:
            (lp, aux), g = tfp.math.value_and_gradient(lambda *q: target(*q), list(x), has_aux=True)
            return lp, list(g), list(aux)
        lp, g = tfp.math.value_and_gradient(lambda *q: target(*q), list(x))
        return lp, list(g), []
    return f
