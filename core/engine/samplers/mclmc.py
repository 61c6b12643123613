"""MCLMC: the unadjusted microcanonical Langevin sampler (``core.engine.microcanonical``), in the
microcanonical family (``microcanonical_kernel``)."""

from __future__ import annotations

from core.engine.microcanonical import MclmcSampler
from core.engine.samplers.microcanonical_kernel import MicrocanonicalKernel

__all__ = ["Mclmc"]


class Mclmc(MicrocanonicalKernel):
    sampler_class = MclmcSampler
