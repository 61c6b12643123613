"""The No-U-Turn sampler with memory bounded by its tree depth (issue #13), as pure functions
shaped as BlackJAX's (``blackjax/mcmc/nuts.py``):

    state = init(position, logdensity_fn)                      # NUTSState
    step = build_kernel(logdensity_fn)
    state, info = step(seed, state, step_size)                 # NUTSState, NUTSInfo

for an identity mass matrix (the engine preconditions by a change of variables, x = scale * z)
and every chain vectorised (``position`` a list of parts with the chains first, ``step_size``
one tensor per part broadcastable against it; ``seed`` each chain's seeds,
``core.engine.chain_seeds``, or one stateless seed for the batch). ``IterativeNoUTurnSampler`` is the same step as a
TFP transition kernel (``one_step(state, results, seed)``, results in a named tuple with TFP's
NUTS fields), for tests and for code that composes TFP kernels.

The algorithm is BlackJAX's iterative NUTS (``blackjax/mcmc/proposal.py``, ``trajectory.py``,
``termination.py``; NumPyro's iterative U-turn check):

- multinomial sampling: within a subtree each new leaf replaces the subtree's proposal with
  probability w_leaf / W_subtree (w = exp(H0 - H)); a finished subtree's proposal replaces the
  trajectory's with probability min(1, W_subtree / W_trajectory) (biased progressive sampling);
- the trajectory doubles in a random direction until the generalised U-turn criterion holds
  (Betancourt 2017: with rho the momentum sum of a (sub)trajectory and p_a, p_b its end
  momenta, it turns when p_a . (rho - (p_a + p_b) / 2) <= 0 or p_b . (...) <= 0), for the
  whole trajectory after each doubling and, leaf by leaf, for every sub-subtree of the subtree
  being built: leaf n of a subtree is checked against the checkpoints (momentum and running
  momentum sum, kept at even leaves) of the subtrees it closes, slots popcount(n >> 1) - t + 1
  .. popcount(n >> 1) with t the trailing ones of n; a turning or diverging subtree (energy
  error above ``max_energy_diff``) is rejected and ends the trajectory;
- the acceptance statistic for step-size adaptation is the mean over the new leaves of
  min(1, exp(H0 - H)) (its log is ``log_accept_ratio``).

Why not TFP's ``NoUTurnSampler``: under XLA it kept about 312 grid-sized buffers per chain at
the default depth 10 (120 at depth 2: docs/benchmarks.md), 20 GiB a chain at 256^3. Here the
grid-sized state is the two trajectory ends (position, momentum, gradient), the proposal and
the subtree's proposal (position, gradient), two momentum sums and the 2 * ``max_tree_depth``
checkpoints; every loop is a ``tf.while_loop`` whose buffers XLA reuses.
"""

from __future__ import annotations

import collections
from typing import Callable, NamedTuple

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from tensorflow_probability.python.internal import samplers
from tensorflow_probability.python.mcmc.internal import util as mcmc_util

from core.engine import chain_seeds, placement

__all__ = ["NUTSState", "NUTSInfo", "init", "build_kernel", "IterativeNoUTurnSampler", "NUTSResults",
           "MAX_TREE_DEPTH", "MAX_ENERGY_DIFF"]

#: TFP's and Stan's defaults: at most 2^10 - 1 leapfrog steps a transition, and a leaf whose
#: energy error exceeds 1000 is a divergence.
MAX_TREE_DEPTH = 10
MAX_ENERGY_DIFF = 1000.0

NUTSResults = collections.namedtuple("NUTSResults", [
    "target_log_prob", "grads_target_log_prob", "step_size", "log_accept_ratio", "leapfrogs_taken",
    "is_accepted", "reach_max_depth", "has_divergence", "energy", "seed"])


def _column(mask, x):
    """``mask`` (chains,) reshaped to broadcast against ``x`` (chains, ...)."""
    return tf.reshape(mask, [-1] + [1] * (x.shape.rank - 1))


def _pick(mask, a, b):
    """Per chain: ``a`` where ``mask``, else ``b``, for two like structures of tensors with
    the chains first (a point, a proposal, a list of parts)."""
    return tf.nest.map_structure(lambda x, y: tf.where(_column(mask, x), x, y), a, b)


def _dot(a, b):
    """Per chain: sum over every part's cells of a * b -> (chains,)."""
    total = 0.0
    for ai, bi in zip(a, b):
        total += tf.reduce_sum(ai * bi, axis=list(range(1, ai.shape.rank)))
    return total


def _is_turning(p_a, p_b, rho):
    """The generalised U-turn criterion (identity mass) for a (sub)trajectory with end momenta
    ``p_a``, ``p_b`` and momentum sum ``rho``: symmetric in the two ends."""
    centred = [r - 0.5 * (a + b) for r, a, b in zip(rho, p_a, p_b)]
    return (_dot(p_a, centred) <= 0.0) | (_dot(p_b, centred) <= 0.0)


def _checkpoint_slots(n):
    """The checkpoint slots leaf ``n`` (an int32 scalar, 0-based within its subtree) writes
    (even n: slot ``hi``) or checks (odd n: slots lo..hi): hi = popcount(n >> 1),
    lo = hi - (trailing ones of n) + 1 (NumPyro's ``_leaf_idx_to_ckpt_idxs``)."""
    hi = tf.cast(tf.raw_ops.PopulationCount(x=tf.bitwise.right_shift(n, 1)), tf.int32)
    trailing = tf.cast(tf.raw_ops.PopulationCount(
        x=tf.bitwise.bitwise_and(tf.bitwise.bitwise_xor(n, n + 1), n)), tf.int32)
    return hi - trailing + 1, hi


class NUTSState(NamedTuple):
    """A chain's point: the position (parts, chains first), its log-density (chains,) and the
    log-density's gradient (one per part)."""

    position: list
    logdensity: tf.Tensor
    logdensity_grad: list


class NUTSInfo(NamedTuple):
    """What a transition did, per chain: log of the mean acceptance min(1, exp(H0 - H)) over
    the trajectory's new leaves (step-size adaptation's statistic), the leapfrog steps taken,
    whether the proposal moved, whether the tree reached ``max_tree_depth`` still extending, a
    divergence, and the proposal's energy H."""

    log_accept_ratio: tf.Tensor
    leapfrogs_taken: tf.Tensor
    is_accepted: tf.Tensor
    reach_max_depth: tf.Tensor
    has_divergence: tf.Tensor
    energy: tf.Tensor


def _value_and_grads(logdensity_fn, parts):
    lp, grads = mcmc_util.maybe_call_fn_and_grads(logdensity_fn, list(parts))
    return lp, list(grads)


def init(position, logdensity_fn) -> NUTSState:
    """The state at ``position``: its log-density and gradient computed."""
    parts = [tf.convert_to_tensor(x) for x in position]
    logdensity, grads = _value_and_grads(logdensity_fn, parts)
    return NUTSState(parts, logdensity, grads)


def build_kernel(logdensity_fn, max_tree_depth: int = MAX_TREE_DEPTH,
                 max_energy_diff: float = MAX_ENERGY_DIFF) -> Callable:
    """``step(seed, state, step_size) -> (NUTSState, NUTSInfo)``: one NUTS transition (module
    docstring); ``step_size`` a tensor or one per state part, broadcastable against each part."""
    if not isinstance(max_tree_depth, int) or max_tree_depth < 1:
        raise ValueError(f"max_tree_depth must be a positive Python int, got {max_tree_depth!r}")
    max_energy_diff = float(max_energy_diff)

    def step(seed, state: NUTSState, step_size):
        q0 = [tf.convert_to_tensor(x) for x in state.position]
        lp0, g0 = state.logdensity, list(state.logdensity_grad)
        dtype = lp0.dtype
        steps = list(step_size) if mcmc_util.is_list_like(step_size) else [step_size]
        steps = steps * len(q0) if len(steps) == 1 else steps
        steps = [tf.cast(s, dtype) for s in steps]
        chains = lp0.shape[0]               # static: the engine's chains
        depth_max = max_tree_depth

        if not isinstance(seed, chain_seeds.ChainSeeds):
            seed = samplers.sanitize_seed(seed)
        momentum_seed, direction_seed, leaf_seed, merge_seed = chain_seeds.split(seed, 4)
        p0 = [chain_seeds.normal(s, x) for x, s in zip(q0, chain_seeds.split(momentum_seed, len(q0)))]
        h0 = -lp0 + 0.5 * _dot(p0, p0)

        def leapfrog(q, p, g, eps):
            half = [pi + 0.5 * e * gi for pi, e, gi in zip(p, eps, g)]
            q = [qi + e * hi for qi, e, hi in zip(q, eps, half)]
            lp, g = _value_and_grads(logdensity_fn, q)
            p = [hi + 0.5 * e * gi for hi, e, gi in zip(half, eps, g)]
            return q, p, g, lp

        # a point of the trajectory: (position parts, momentum parts, gradient parts, log p);
        # a proposal: (position parts, gradient parts, log p, H)
        def subtree(d, end, eps, active, ckpt_p, ckpt_rho):
            """2^d leaves from the trajectory's ``end`` with signed steps ``eps`` for the
            ``active`` chains -> the new end, the subtree's proposal, log weight and
            momentum sum, whether it stopped (turning or diverging) and, of the leaves,
            how many and their summed acceptance."""
            q, p, g, lp = end
            zero = tf.zeros([chains], dtype)
            carry = dict(
                i=tf.constant(0), end=end, proposal=(q, g, lp, zero),
                log_w=tf.fill([chains], tf.constant(-np.inf, dtype)),
                rho=[placement.zeros_like(x) for x in p], live=active,
                diverged=tf.zeros([chains], tf.bool), turned=tf.zeros([chains], tf.bool),
                n=tf.zeros([chains], tf.int32), accept=zero, ckpt_p=ckpt_p, ckpt_rho=ckpt_rho)
            leaf_seed_d = chain_seeds.fold_in(leaf_seed, d)

            def body(c):
                i = c["i"]
                q, p, g, lp = leapfrog(*c["end"][:3], eps)
                h = -lp + 0.5 * _dot(p, p)
                error = h - h0
                error = tf.where(tf.math.is_nan(error), tf.constant(np.inf, dtype), error)
                live = c["live"]
                diverging = live & (error > max_energy_diff)
                log_w = tf.where(live, tf.math.reduce_logsumexp(tf.stack([c["log_w"], -error]), 0),
                                 c["log_w"])
                u = chain_seeds.uniform(chain_seeds.fold_in(leaf_seed_d, i), chains, dtype)
                take = live & (tf.math.log(u) < -error - log_w)
                rho = [r + x for r, x in zip(c["rho"], p)]
                lo, hi = _checkpoint_slots(i)

                # even leaves write slot hi (odd ones rewrite it unchanged: no tf.cond,
                # whose branches would copy the checkpoints); odd ones check lo..hi
                even = tf.equal(i % 2, 0)
                ckpt_p = [tf.tensor_scatter_nd_update(k, [[hi]], tf.where(even, x, k[hi])[None])
                          for k, x in zip(c["ckpt_p"], p)]
                ckpt_rho = [tf.tensor_scatter_nd_update(k, [[hi]], tf.where(even, x, k[hi])[None])
                            for k, x in zip(c["ckpt_rho"], rho)]

                def turn_body(j, turning):
                    pj = [k[j] for k in ckpt_p]
                    rho_j = [r - k[j] + x for r, k, x in zip(rho, ckpt_rho, pj)]
                    return j - 1, turning | _is_turning(pj, p, rho_j)

                lo = tf.where(even, hi + 1, lo)
                _, turning = placement.while_loop(lambda j, t: j >= lo, turn_body, (hi, tf.zeros([chains], tf.bool)))
                turning = live & ~diverging & turning
                return dict(
                    i=i + 1, end=(q, p, g, lp), proposal=_pick(take, (q, g, lp, h), c["proposal"]),
                    log_w=log_w, rho=rho, live=live & ~diverging & ~turning,
                    diverged=c["diverged"] | diverging, turned=c["turned"] | turning,
                    n=c["n"] + tf.cast(live, tf.int32),
                    accept=c["accept"] + tf.where(live, tf.exp(tf.minimum(-error, 0.0)), 0.0),
                    ckpt_p=ckpt_p, ckpt_rho=ckpt_rho)

            size = tf.bitwise.left_shift(1, d)
            c = placement.while_loop(lambda c: (c["i"] < size) & tf.reduce_any(c["live"]),
                                     lambda c: (body(c),), (carry,))[0]
            return c

        def doubling(c):
            d = c["depth"]
            u = chain_seeds.uniform(chain_seeds.fold_in(direction_seed, d), chains, dtype)
            right = u < 0.5
            # the end last extended becomes the trajectory's `right` or left end
            swap = c["end_right"] != right
            end, other = _pick(swap, c["other"], c["end"]), _pick(swap, c["end"], c["other"])
            sign = tf.where(right, tf.constant(1.0, dtype), tf.constant(-1.0, dtype))
            eps = [e * _column(sign, x) for e, x in zip(steps, q0)]
            active = c["active"]
            s = subtree(d, end, eps, active, c["ckpt_p"], c["ckpt_rho"])
            done = active & ~(s["diverged"] | s["turned"])          # a subtree accepted whole
            u_merge = chain_seeds.uniform(chain_seeds.fold_in(merge_seed, d), chains, dtype)
            take = done & (tf.math.log(u_merge) < s["log_w"] - c["log_w"])
            rho = _pick(done, [r + x for r, x in zip(c["rho"], s["rho"])], c["rho"])
            turning = _is_turning(s["end"][1], other[1], rho)
            return dict(
                depth=d + 1, end_right=right, end=s["end"], other=other,
                proposal=_pick(take, s["proposal"], c["proposal"]),
                log_w=tf.where(done, tf.math.reduce_logsumexp(tf.stack([c["log_w"], s["log_w"]]), 0),
                               c["log_w"]),
                rho=rho, active=done & ~turning, accepted=c["accepted"] | take,
                diverged=c["diverged"] | s["diverged"], n=c["n"] + s["n"], accept=c["accept"] + s["accept"],
                ckpt_p=s["ckpt_p"], ckpt_rho=s["ckpt_rho"])

        start = (q0, p0, g0, lp0)
        init = dict(
            depth=tf.constant(0), end_right=tf.ones([chains], tf.bool), end=start, other=start,
            proposal=(q0, g0, lp0, h0), log_w=tf.zeros([chains], dtype), rho=p0,
            active=tf.ones([chains], tf.bool), accepted=tf.zeros([chains], tf.bool),
            diverged=tf.zeros([chains], tf.bool), n=tf.zeros([chains], tf.int32),
            accept=tf.zeros([chains], dtype),
            ckpt_p=[placement.zeros([depth_max] + x.shape.as_list(), dtype, x) for x in q0],
            ckpt_rho=[placement.zeros([depth_max] + x.shape.as_list(), dtype, x) for x in q0])
        out = placement.while_loop(lambda c: (c["depth"] < depth_max) & tf.reduce_any(c["active"]),
                                   lambda c: (doubling(c),), (init,))[0]
        prop_q, prop_g, prop_lp, prop_h = out["proposal"]
        n = tf.maximum(out["n"], 1)
        info = NUTSInfo(log_accept_ratio=tf.math.log(out["accept"] / tf.cast(n, dtype)), leapfrogs_taken=out["n"],
                        is_accepted=out["accepted"], reach_max_depth=out["active"],
                        has_divergence=out["diverged"], energy=prop_h)
        return NUTSState(prop_q, prop_lp, prop_g), info
    return step


class IterativeNoUTurnSampler(tfp.mcmc.TransitionKernel):
    """NUTS (multinomial, generalised U-turn) with memory O(``max_tree_depth``) grid-sized
    buffers per chain; ``step_size``: a tensor or one per state part, broadcastable against
    each part (the engine's are (chains, 1, ...))."""

    def __init__(self, target_log_prob_fn, step_size, max_tree_depth: int = MAX_TREE_DEPTH,
                 max_energy_diff: float = MAX_ENERGY_DIFF, name=None):
        if not isinstance(max_tree_depth, int) or max_tree_depth < 1:
            raise ValueError(f"max_tree_depth must be a positive Python int, got {max_tree_depth!r}")
        self._parameters = dict(target_log_prob_fn=target_log_prob_fn, step_size=step_size,
                                max_tree_depth=max_tree_depth, max_energy_diff=float(max_energy_diff),
                                name=name or "iterative_nuts")

    @property
    def target_log_prob_fn(self):
        return self._parameters["target_log_prob_fn"]

    @property
    def step_size(self):
        return self._parameters["step_size"]

    @property
    def max_tree_depth(self) -> int:
        return self._parameters["max_tree_depth"]

    @property
    def max_energy_diff(self) -> float:
        return self._parameters["max_energy_diff"]

    @property
    def name(self):
        return self._parameters["name"]

    @property
    def parameters(self):
        return self._parameters

    @property
    def is_calibrated(self) -> bool:
        return True

    def bootstrap_results(self, init_state):
        parts = list(init_state) if mcmc_util.is_list_like(init_state) else [init_state]
        lp, grads = _value_and_grads(self.target_log_prob_fn, parts)
        steps = self.step_size if mcmc_util.is_list_like(self.step_size) else [self.step_size]
        return NUTSResults(
            target_log_prob=lp, grads_target_log_prob=grads,
            step_size=[tf.convert_to_tensor(s, lp.dtype) for s in steps],
            log_accept_ratio=tf.zeros_like(lp), leapfrogs_taken=tf.zeros_like(lp, tf.int32),
            is_accepted=tf.zeros_like(lp, tf.bool), reach_max_depth=tf.zeros_like(lp, tf.bool),
            has_divergence=tf.zeros_like(lp, tf.bool), energy=-lp, seed=samplers.zeros_seed())

    def one_step(self, current_state, previous_kernel_results, seed=None):
        with tf.name_scope(self.name + ".one_step"):
            listed = mcmc_util.is_list_like(current_state)
            prev = previous_kernel_results
            seed = samplers.sanitize_seed(seed)
            step = build_kernel(self.target_log_prob_fn, self.max_tree_depth, self.max_energy_diff)
            state, info = step(seed, NUTSState(list(current_state) if listed else [current_state],
                                               prev.target_log_prob, list(prev.grads_target_log_prob)),
                               list(prev.step_size))
            results = NUTSResults(target_log_prob=state.logdensity, grads_target_log_prob=state.logdensity_grad,
                                  step_size=prev.step_size, seed=seed, **info._asdict())
            return (state.position if listed else state.position[0]), results
