"""NUTS: the no-U-turn sampler of ``core.engine.nuts`` (its memory bounded by the tree depth),
with dual averaging (``dual_averaging_kernel``); its initial step is searched with one leapfrog
step towards an acceptance of 0.8, as Stan does."""

from __future__ import annotations

import tensorflow as tf

from core.engine.nuts import IterativeNoUTurnSampler
from core.engine.samplers.dual_averaging_kernel import DualAveragingKernel
from core.engine.step_search import NUTS_SEARCH_ACCEPT

__all__ = ["Nuts"]


class Nuts(DualAveragingKernel):
    def inner(self, target_z, step_size):
        return IterativeNoUTurnSampler(target_z, step_size)

    def search_settings(self):
        return 1, NUTS_SEARCH_ACCEPT

    def accepted(self, inner):
        return inner.target_log_prob, inner.grads_target_log_prob

    def with_accepted(self, inner, tlp, grads):
        return inner._replace(target_log_prob=tlp, grads_target_log_prob=grads)

    def transition(self, inner):
        return inner.log_accept_ratio, tf.cast(inner.leapfrogs_taken, tf.int32), inner.has_divergence
