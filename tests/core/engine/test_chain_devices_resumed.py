"""Chains over devices (issue #34), continued from ``test_chain_devices.py``: a run of MAMS (2
chains, one on each of 2 logical CPU devices) stopped and resumed on the 2 devices equals one
straight through on one device, bit for bit; a calibration's batches (2 simulations x 2 chains)
spread over 2 devices give the ranks, posterior means and sds of one device. Made in a fresh
process (``tests/support/chain_devices_check.py resumed``, ~1.5 minutes alone, ~2.4 GiB), whose
CPU is split into devices before TensorFlow starts."""

from __future__ import annotations

import pytest

from support.chain_devices_check import check_same
from support.fresh_process import json_report


@pytest.fixture(scope="module")
def report():
    return json_report("chain_devices_check.py", "resumed", timeout=540)


def test_a_run_stopped_and_resumed_on_two_devices_is_one_straight_through_on_one(report):
    check_same(report["resumed"])


def test_a_calibrations_batches_over_two_devices_are_those_on_one(report):
    result = report["calibration"]
    assert result["batches"] == [2, 2] and result["quantities"] > 0
    assert result["ranks"] and result["means"] and result["sds"]
