"""A run's chains spread over devices (``sampler.devices``, ``core.engine.driver.DeviceSplit``,
issue #34) draw what they draw on one device: on 4 logical CPU devices, which Fieldscope makes
itself from the CPU when a config asks for more devices than it has, every statistic, parameter,
field draw and P(k) of small runs (HMC, a chain a device; MCLMC with the diagonal and a sampled
index, 3 chains on 2 devices) equals the one-device run's bit for bit, the field moments (summed per
device, then added) to float32 round-off; each group of chains ran on its own device; a run of
MAMS stopped and resumed on 2 devices equals one straight through on one; a calibration's batches
(2 simulations x 2 chains) over 2 devices give the ranks, means and sds of one; asking for more
devices than the process has, once TensorFlow has started, is refused naming both. (A device
with one chain runs it twice: ``DeviceSplit``'s docstring says why; all four kernels and the
preconditioners were compared on 2-4 devices when it was written.)

The device split must come before TensorFlow starts, so the runs are made in a fresh process
(``tests/support/chain_devices_check.py``) that reports them as JSON. It peaks at ~3.7 GiB: each
device keeps its own compiled programs for as long as the process lives (TensorFlow's XLA cache
is per device), so every run adds them again."""

from __future__ import annotations

import pytest

from support.fresh_process import json_report


@pytest.fixture(scope="module")
def report():
    return json_report("chain_devices_check.py", timeout=540)


def _check_same(result):
    assert result["arrays"] >= 19 and result["draws"] > 0      # 18 statistics, draws, P(k)[, params]
    assert result["differ"] == []
    if "moments" in result:
        assert result["moments"] < 1e-5
        assert result["moment counts"][0] == result["moment counts"][1] > 0


@pytest.mark.parametrize("run", ["field-hmc-fourier-fixed 4 chains on 4", "field-mclmc-diagonal-sampled 3 chains on 2"])
def test_chains_over_devices_draw_what_they_draw_on_one(report, run):
    result = report["runs"][run]
    _check_same(result)
    devices = int(run.rsplit(" ", 1)[1])
    placed = [name.rsplit("/", 1)[-1] for name in result["placed"]]
    assert placed == [f"device:CPU:{i}" for i in range(devices)]


def test_a_run_stopped_and_resumed_on_two_devices_is_one_straight_through_on_one(report):
    _check_same(report["resumed"])


def test_a_calibrations_batches_over_two_devices_are_those_on_one(report):
    result = report["calibration"]
    assert result["batches"] == [2, 2] and result["quantities"] > 0
    assert result["ranks"] and result["means"] and result["sds"]


def test_more_devices_than_the_process_has_are_refused_by_name(report):
    assert "sampler.devices = 5" in report["five"]
    assert "4 CPU devices" in report["five"]
