"""A run whose field is cut over devices (``field.shard``, issue #34 item 2), end to end through the
engine on 4 logical CPU devices: a 32^3 field under a slab mask, cut in 4 slabs, sampled by the
new config's sampler family (MCLMC), draws the exact Wiener posterior's mean and sd, stores each
draw's P(k) as ``core.field.power_estimator`` measures it, says where it ran, and no program the
driver traced leaves a part-sized op to TensorFlow's default device; a 16^3 field in 2 x 2 pencils
with its spectral index sampled (HMC, the diagonal adapted in warmup) stopped and resumed draws
what it draws straight through, and resumed on fewer devices than it ran on is refused by name.

The CPU is split into devices before TensorFlow starts, so the runs are made in fresh processes
(``tests/support/sharded_run_check.py``: ~1 minute each alone) and report as JSON."""

from __future__ import annotations

import pytest

from support.fresh_process import json_report


@pytest.fixture(scope="module")
def wiener():
    return json_report("sharded_run_check.py", "wiener", timeout=540)


@pytest.fixture(scope="module")
def resumed():
    return json_report("sharded_run_check.py", "resume", timeout=540)


def test_a_sharded_run_draws_the_exact_wiener_posterior(wiener):
    assert wiener["status"] == "finished"
    assert wiener["count"] == 2 * 1000 and wiener["cg converged"]
    # measured: rms z 0.063 (the Monte Carlo error of ~250 effective draws), max 0.41 of 32768
    assert wiener["rms z of the mean"] < 0.15, wiener
    assert wiener["max |z|"] < 1.0, wiener
    # the exact sd from 64 exact draws: ~9 % noise a voxel, ~0.1 % in the median
    assert wiener["median sd ratio"] == pytest.approx(1.0, abs=0.04), wiener


def test_a_sharded_run_stores_whole_draws_and_their_power_and_says_where_it_ran(wiener):
    assert wiener["stored draws"] == [2, 100, 32, 32, 32]
    assert wiener["power of a stored draw"] < 1e-4      # float32 draws; the estimator in float64
    assert "the field cut in slabs over 4 devices" in wiener["device"]


def test_no_part_sized_op_of_a_sharded_run_is_left_to_the_default_device(wiener):
    assert wiener["programs"], "the driver traced no program"
    assert all(ops == [] for ops in wiener["programs"].values()), wiener["programs"]


def test_a_sharded_run_stopped_and_resumed_draws_what_it_draws_straight_through(resumed):
    assert resumed["straight"] == "finished"
    assert resumed["resumed"] == ["stopped", "finished"]
    assert resumed["draws"] == 2 * 60
    assert resumed["params"] == ["index"]           # a sampled hyperparameter beside the parts
    assert resumed["differ"] == []
    assert "the field cut in pencils over 4 devices" in resumed["device"]


def test_a_sharded_run_resumed_on_other_devices_is_refused_by_name(resumed):
    message = resumed["on 2 devices"]
    assert "cut into 4 parts" in message and "over 2 devices cuts it into 2" in message, message
    assert "resume it with the devices it ran on" in message
