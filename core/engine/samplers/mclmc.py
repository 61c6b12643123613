"""MCLMC: the unadjusted microcanonical Langevin sampler (``core.engine.microcanonical``), in the
microcanonical family (``microcanonical_kernel``)."""

from __future__ import annotations

from core.engine.microcanonical import DESIRED_ENERGY_VAR, HYPER_ENERGY_VAR, MclmcSampler
from core.engine.samplers.microcanonical_kernel import MicrocanonicalKernel

__all__ = ["Mclmc"]


class Mclmc(MicrocanonicalKernel):
    sampler_class = MclmcSampler

    def settings(self) -> dict:
        """The energy error aimed at: smaller where P(k) hyperparameters are sampled and the
        likelihood couples the modes (a mask, a noise map, counts, a model file's): each
        mode's share of the unadjusted sampler's bias then reaches the hyperparameters, which
        add it up over every mode (``HYPER_ENERGY_VAR``)."""
        model = self.d.model
        coupled = bool(getattr(model, "has_field", False) and model.param_names
                       and not model.posterior.modes_independent)
        return {"energy_var": HYPER_ENERGY_VAR if coupled else DESIRED_ENERGY_VAR}
