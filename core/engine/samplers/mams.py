"""MAMS: the Metropolis-adjusted microcanonical sampler (``core.engine.microcanonical``), in the
microcanonical family (``microcanonical_kernel``); its step size's dual averaging aims at
``sampler.target_accept``."""

from __future__ import annotations

from core.engine.microcanonical import MamsSampler
from core.engine.samplers.microcanonical_kernel import MicrocanonicalKernel

__all__ = ["Mams"]


class Mams(MicrocanonicalKernel):
    sampler_class = MamsSampler

    def settings(self) -> dict:
        return {"target_accept": self.d.sampler.target_accept}
