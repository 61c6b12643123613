"""A run's chains spread over devices (``sampler.devices``, ``core.engine.driver.DeviceSplit``,
issue #34) draw what they draw on one device: on 2 logical CPU devices, which Fieldscope makes
itself from the CPU when a config asks for more devices than it has, every statistic, parameter,
field draw and P(k) of small runs (HMC, 4 chains; MCLMC with the diagonal and a sampled index, 3
chains, so that one device has a lone chain) equals the one-device run's bit for bit, the field
moments (summed per device, then added) to float32 round-off; each group of chains ran on its own
device; asking for more devices than the process has, once TensorFlow has started, is refused
naming both. (A device with one chain runs it twice: ``DeviceSplit``'s docstring says why; all
four kernels and the preconditioners were compared on 2-4 devices when it was written, and
docs/benchmarks.md records it.) A run stopped and resumed on devices, and calibration's batches:
``test_chain_devices_resumed.py``.

The device split must come before TensorFlow starts, so the runs are made in a fresh process
(``tests/support/chain_devices_check.py runs``, ~1 minute alone, ~1.9 GiB) that reports them as
JSON: each device keeps its own compiled programs (TensorFlow's XLA cache is per device)."""

from __future__ import annotations

import pytest

from support.chain_devices_check import check_same
from support.fresh_process import json_report


@pytest.fixture(scope="module")
def report():
    return json_report("chain_devices_check.py", "runs", timeout=540)


@pytest.mark.parametrize("run", ["field-hmc-fourier-fixed 4 chains on 2", "field-mclmc-diagonal-sampled 3 chains on 2"])
def test_chains_over_devices_draw_what_they_draw_on_one(report, run):
    result = report["runs"][run]
    check_same(result)
    devices = int(run.rsplit(" ", 1)[1])
    placed = [name.rsplit("/", 1)[-1] for name in result["placed"]]
    assert placed == [f"device:CPU:{i}" for i in range(devices)]


def test_more_devices_than_the_process_has_are_refused_by_name(report):
    assert "sampler.devices = 3" in report["three"]
    assert "2 CPU devices" in report["three"]
