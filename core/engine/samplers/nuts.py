"""NUTS: the no-U-turn sampler of ``core.engine.nuts`` (its memory bounded by the tree depth),
with dual averaging (``dual_averaging_kernel``); its initial step is searched with one leapfrog
step towards an acceptance of 0.8, as Stan does."""

from __future__ import annotations

import tensorflow as tf

from core.engine import nuts
from core.engine.adaptation.step_search import NUTS_SEARCH_ACCEPT
from core.engine.samplers.dual_averaging_kernel import DualAveragingKernel

__all__ = ["Nuts"]


class Nuts(DualAveragingKernel):
    State = nuts.NUTSState

    def kernel(self, target_z):
        return nuts.build_kernel(target_z)

    def search_settings(self):
        return 1, NUTS_SEARCH_ACCEPT

    def transition(self, info):
        return info.log_accept_ratio, tf.cast(info.leapfrogs_taken, tf.int32), info.has_divergence
