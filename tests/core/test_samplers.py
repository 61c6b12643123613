"""The sampler registry (core/samplers.py): every entry's kernel exists with the driver's
interface, the config accepts exactly the registered names, and each entry's figures are those
the estimates use."""

from __future__ import annotations

import importlib

import pytest

from core.config import schema
from core.run import resources
from core.samplers import ALGORITHMS, SAMPLERS, sampler_info

KERNEL_METHODS = ("plan", "fresh", "start", "field_now", "finish", "chunk_runner", "after_rescale",
                  "at_boundary", "checkpoint", "restore", "relocated")


def test_the_config_takes_exactly_the_registered_samplers():
    assert schema.ALGORITHMS == ALGORITHMS == tuple(SAMPLERS)
    with pytest.raises(ValueError, match="'hmc', 'hmc_jittered', 'nuts', 'mclmc', 'mams'"):
        sampler_info("chees")


@pytest.mark.parametrize("name", ALGORITHMS)
def test_every_entry_names_a_kernel_with_the_drivers_interface(name):
    """The "module:Class" path resolves to a class with every method the driver calls."""
    info = SAMPLERS[name]
    assert info.name == name and info.label
    module, cls = info.kernel.split(":")
    kernel = getattr(importlib.import_module(module), cls)
    for method in KERNEL_METHODS:
        assert callable(getattr(kernel, method, None)), (name, method)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_each_entrys_figures_are_the_estimates(name):
    info = SAMPLERS[name]
    est = resources.estimate_run((64, 64, 64), chains=2, algorithm=name, num_leapfrog_steps=7)
    # gradients a step: HMC's L, NUTS's least, MCLMC's 2, MAMS's mean of 2 integration steps of 2
    # (8 with P(k) sampled: the engine's runs record that mean, tests/core/engine/test_microcanonical.py)
    expected = {"hmc": (7, 7), "hmc_jittered": (7, 7), "nuts": (1, 1), "mclmc": (2, 2), "mams": (4, 16)}[name]
    assert est.gradients_per_step == expected[0]
    hyper = resources.estimate_run((64, 64, 64), chains=2, algorithm=name, num_leapfrog_steps=7, hyper_sampled=True)
    assert hyper.gradients_per_step == expected[1]
    assert hyper.run_seconds == est.run_seconds * expected[1] / expected[0]
    # sampler.interweave: its move's gradient, where P(k) is sampled only
    moved = resources.estimate_run((64, 64, 64), chains=2, algorithm=name, num_leapfrog_steps=7, hyper_sampled=True,
                                   interweave=True)
    assert moved.gradients_per_step == expected[1] + 1
    assert resources.estimate_run((64, 64, 64), chains=2, algorithm=name, num_leapfrog_steps=7,
                                  interweave=True).gradients_per_step == expected[0]
    assert resources.program_bytes(name) == info.program_bytes
    assert info.gradients_text in est.describe()
    if not est.unrolled:
        assert est.xla_working_set == (info.buffers_per_chain * 2 + info.shared_buffers) * 64**3 * 4
