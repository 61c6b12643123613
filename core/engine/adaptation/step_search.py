"""The initial step-size search: where dual averaging starts, found at the chain's own state.

Dual averaging (``tfp.mcmc.DualAveragingStepSizeAdaptation``) converges from any start, but
from a poor one it spends its first tens of steps getting there: from too large a step every
trajectory diverges (the demo's 9-15 divergences in its first 40 steps), from too small a one
NUTS builds trees of the maximum depth. Stan and BlackJAX (``find_reasonable_step_size``)
first search for a reasonable step size at the initial state, as Hoffman & Gelman (2014,
algorithm 4) propose, and start dual averaging there, with its shrinkage target
mu = log(10 eps0). So does Fieldscope, per chain, in one XLA-compiled loop over all chains:

    eps = first_guess (``sampler.step_size``)
    repeat: draw a momentum p ~ N(0, I); integrate ``num_leapfrog_steps`` leapfrog steps of
            size eps from (q, p); a = min(1, exp(-dH)) (0 when the energy is not finite);
            if a > threshold: eps *= 2 else eps /= 2
    until the side of the threshold changes; return the end of that last bracket [eps/2, eps]
            that was accepted (doubling: the step before; halving: the last one), as Stan does
            when halving: just beyond the crossing a stiff posterior's acceptance falls off a
            cliff (the leapfrog's stability limit of its narrowest direction)

Each chain stops on its own crossing (a chain that has crossed keeps its value while the others
go on). The engine searches with the kernel's own trajectory for HMC (``num_leapfrog_steps``
steps, threshold = ``target_accept``: the step whose acceptance dual averaging aims at) and with
one leapfrog step and threshold 0.8 for NUTS, as Stan does (a full NUTS tree at a tiny step costs
up to 1023 gradients). The momenta come from stateless seeds, so the search is reproducible.

A chain that does not cross within ``MAX_HALVINGS`` halvings (no step accepted, e.g. a
log-density that is NaN everywhere but at the start), or whose halved step no longer moves the
state at all (below its floating-point resolution: "accepted" for no reason), gets
``first_guess`` back, and dual
averaging and ``core.engine.warmup.WarmupWatch`` diagnose it as before; one that does not cross
within ``MAX_DOUBLINGS`` doublings (a flat density) keeps the largest step tried.

The target is a function of the state parts, each (chains, ...), returning (chains,)
log-densities; the mass matrix is the identity in those coordinates (the engine passes its
rescaled target p(scale * z), in which the adapted mass is the identity).
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_probability as tfp

from core.engine import placement

__all__ = ["find_initial_step_size", "MAX_DOUBLINGS", "MAX_HALVINGS", "NUTS_SEARCH_ACCEPT"]

MAX_DOUBLINGS = 30     # 2^30 ~ 1e9 x the first guess, at most
MAX_HALVINGS = 40      # 2^-40 ~ 1e-12 x the first guess: below WarmupWatch's STEP_COLLAPSE (1e-8)
NUTS_SEARCH_ACCEPT = 0.8   # Stan's threshold for the one-leapfrog-step search


def _per_chain(v, part):
    """(chains,) -> broadcastable against a part of shape (chains, ...)."""
    return tf.reshape(v, tf.concat([tf.shape(v), tf.ones([tf.rank(part) - 1], tf.int32)], 0))


def _sum_per_chain(x):
    return tf.reduce_sum(tf.reshape(x, [tf.shape(x)[0], -1]), axis=1)


def _log_accept(target, state, tlp, grads, eps, seed, num_leapfrog_steps):
    """log min(1, exp(-dH)) per chain of one trajectory of ``num_leapfrog_steps`` leapfrog steps
    of size eps (chains,) from ``state`` with a fresh N(0, I) momentum; -inf where not finite."""
    momentum = [tf.random.stateless_normal(tf.shape(q), tf.random.experimental.stateless_fold_in(seed, i),
                                           dtype=q.dtype) for i, q in enumerate(state)]
    kinetic0 = tf.add_n([_sum_per_chain(p * p) for p in momentum]) / 2
    half = [_per_chain(eps, q) / 2 for q in state]

    def leapfrog(i, q, p, lp, g):
        p = [pi + h * gi for pi, h, gi in zip(p, half, g)]
        q = [qi + 2 * h * pi for qi, h, pi in zip(q, half, p)]
        lp, g = tfp.math.value_and_gradient(lambda *x: target(*x), q)
        p = [pi + h * gi for pi, h, gi in zip(p, half, g)]
        return i + 1, q, p, lp, list(g)

    _, q, p, lp, _ = placement.while_loop(
        lambda i, *rest: i < num_leapfrog_steps, leapfrog,
        (tf.constant(0), list(state), momentum, tlp, list(grads)))
    kinetic = tf.add_n([_sum_per_chain(pi * pi) for pi in p]) / 2
    log_ratio = (lp - kinetic) - (tlp - kinetic0)
    moved = tf.reduce_any(tf.stack([_sum_per_chain(tf.cast(qe != q0, tf.int32)) > 0
                                    for qe, q0 in zip(q, state)]), axis=0)
    return tf.where(tf.math.is_finite(log_ratio), tf.minimum(log_ratio, 0.0),
                    tf.constant(-float("inf"), log_ratio.dtype)), moved


def find_initial_step_size(target, state, tlp, grads, first_guess, seed, *, num_leapfrog_steps: int,
                           threshold: float):
    """Per-chain step sizes (chains,) at which a ``num_leapfrog_steps``-step trajectory from
    ``state`` is accepted with probability ``threshold`` (see the module docstring).

    ``state``/``grads``: lists of parts (chains, ...), ``tlp`` (chains,) the log-density there,
    ``first_guess`` a scalar or (chains,) tensor, ``seed`` a stateless seed (2,) int32: the
    momentum of search iteration i is drawn from fold_in(seed, i). Traceable (the engine
    compiles it with XLA); returns (step sizes, iterations used)."""
    dtype = tlp.dtype
    chains = tf.shape(tlp)[0]
    eps0 = tf.broadcast_to(tf.cast(first_guess, dtype), [chains])
    log_threshold = tf.math.log(tf.constant(threshold, dtype))
    limit = MAX_DOUBLINGS + MAX_HALVINGS + 1

    def body(i, eps, direction, result, done):
        log_a, moved = _log_accept(target, state, tlp, grads, eps,
                                   tf.random.experimental.stateless_fold_in(seed, i), num_leapfrog_steps)
        new_direction = tf.where(log_a > log_threshold, 1, -1)
        # a step below the state's floating-point resolution moves nothing and is "accepted":
        # no evidence of a good step (it happens only after halving from rejections)
        stalled = tf.logical_and(~moved, new_direction > 0)
        crossed = tf.logical_and(direction != 0, new_direction != direction)
        finish = tf.logical_and(~done, crossed)
        # the crossing lies between this step and the one before (a factor 2 apart): keep the
        # one on the accepted side (just above it, acceptance often falls off a cliff)
        passed = tf.where(direction > 0, eps / 2, eps)
        finish = tf.logical_and(finish, ~stalled)
        result = tf.where(finish, passed, result)
        done = tf.logical_or(done, finish)
        ratio = eps / eps0
        give_up_low = tf.logical_or(tf.logical_and(new_direction < 0, ratio <= 2.0 ** -MAX_HALVINGS), stalled)
        give_up_high = tf.logical_and(new_direction > 0, ratio >= 2.0 ** MAX_DOUBLINGS)
        result = tf.where(~done & give_up_low, eps0, tf.where(~done & give_up_high, eps, result))
        done = done | give_up_low | give_up_high
        eps = tf.where(done, eps, eps * tf.where(new_direction > 0, tf.constant(2.0, dtype),
                                                 tf.constant(0.5, dtype)))
        direction = tf.where(done, direction, new_direction)
        return i + 1, eps, direction, result, done

    n, _, _, result, _ = placement.while_loop(
        lambda i, eps, direction, result, done: ~tf.reduce_all(done), body,
        (tf.constant(0), eps0, tf.zeros([chains], tf.int32), eps0, tf.zeros([chains], tf.bool)),
        maximum_iterations=limit)
    return result, n
