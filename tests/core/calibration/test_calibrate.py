"""Simulation-based calibration end to end (``core.engine.calibrate``): a correct configuration
passes, each deliberate mis-specification fails naming the quantity, a stopped calibration
resumes to the same ranks, the command line prints the table (other likelihoods, models and
samplers: ``test_calibrate_samplers.py``; the cases: ``support.calibration_cases``).

Sized for CI: 4^3 grids, 40 simulations of 20 draws. The field cases share one compiled
program (they differ only in how the data are simulated, or in the warmup, which are inputs
of the program).
"""

from __future__ import annotations

import numpy as np
import pytest

from app import cli
from core.calibration import CalibrationReader
from core.engine.calibrate import Calibrator
from core.engine.engine import Control
from support.calibration_cases import (
    BATCH,
    DRAWS,
    SIMULATIONS,
    calibrate,
    field_document,
    write_config,
    write_slab_field,
)


@pytest.fixture(scope="module")
def field_case(tmp_path_factory):
    return write_slab_field(tmp_path_factory.mktemp("field"))


@pytest.fixture(scope="module")
def correct(field_case):
    return calibrate(field_case, field_document(), "correct")[1]


def test_a_correct_configuration_passes(correct):
    verdict = correct.verdict()
    assert correct.quantities == ["index", "loglik", "power_k00", "power_k01", "power_k02", "voxel_0_0_0",
                                  "voxel_2_2_2", "voxel_1_3_2", "voxel_1_0_0"]
    assert correct.simulations_done == SIMULATIONS and correct.status == "finished"
    assert verdict.passed, verdict.table()
    assert min(r.pvalue for r in verdict.results) > 0.01, verdict.table()
    # the 90 % intervals cover about 90 % of the truths (binomial sd at n = 40: 0.05)
    cover90 = np.array([r.coverage[1] for r in verdict.results])
    assert np.all(np.abs(cover90 - 0.9) < 0.16), verdict.table()
    # ranks use the whole range (a stuck sampler piles them at 0 or M)
    assert correct.ranks().min() == 0 and correct.ranks().max() == DRAWS
    voxel = correct.voxel_ranks()
    assert voxel.shape == (SIMULATIONS, 4, 4, 4)
    # the rank of a fixed voxel is the same count as its voxel_rank
    assert np.array_equal(voxel[:, 2, 2, 2], correct.ranks()[:, correct.quantities.index("voxel_2_2_2")])


def test_noise_level_mis_specified_fails_on_the_log_likelihood(field_case):
    # data with twice the noise sd the model assumes: the truth fits its data worse than every draw
    _, reader = calibrate(field_case, field_document(), "noisy",
                          simulate_doc=field_document(data={"noise_sigma": 1.0}))
    verdict = reader.verdict()
    assert "loglik" in verdict.failed, verdict.table()
    assert np.mean(reader.ranks()[:, reader.quantities.index("loglik")] == 0) > 0.9


def test_wrong_prior_centre_fails_on_the_parameter(field_case):
    _, reader = calibrate(field_case, field_document(), "prior",
                          simulate_doc=field_document(prior={"index": {"dist": "normal", "loc": -0.5, "scale": 0.3}}))
    verdict = reader.verdict()
    assert "index" in verdict.failed, verdict.table()
    # the truths lie above the posterior pulled towards the model's centre
    assert np.mean(reader.ranks()[:, 0]) > 0.75 * DRAWS


def test_too_short_warmup_fails(field_case):
    # one warmup step and one leapfrog step a transition: the chains take their 20 draws in their
    # first 20 short moves from their start near the prior's centre (a tenth of a prior draw), and
    # their P(k) stays far below the truths'. Most steps are accepted, so nothing but calibration
    # shows it.
    _, reader = calibrate(field_case, field_document(sampler={"num_warmup": 1, "num_leapfrog_steps": 1,
                                                              "num_samples": 20}), "short")
    verdict = reader.verdict()
    assert not verdict.passed
    assert any(name.startswith("power_k") for name in verdict.failed), verdict.table()
    assert np.mean(reader.ranks()[:, reader.quantities.index("power_k01")] == DRAWS) > 0.9


def test_interrupt_and_resume_give_the_same_ranks(field_case, correct):
    control = Control()

    def stop_after_first(info):
        control.stop = True

    status, reader = calibrate(field_case, field_document(), "resumed", control=control, on_batch=stop_after_first)
    assert status == "stopped" and reader.status == "stopped"
    assert reader.simulations_done == BATCH
    status, reader = calibrate(field_case, field_document(), "resumed")
    assert status == "finished"
    assert np.array_equal(reader.ranks(), correct.ranks())
    assert np.array_equal(reader.voxel_ranks(), correct.voxel_ranks())
    assert np.array_equal(reader.simulation_index(), np.arange(SIMULATIONS))


def test_another_number_of_simulations_shares_the_program_and_keeps_every_row(field_case, correct):
    config, text = write_config(field_case, "more.toml", field_document())
    Calibrator(config, text, field_case / "more", simulations=50, draws=DRAWS, batch_size=BATCH).run()
    reader = CalibrationReader(field_case / "more")
    assert reader.simulations_done == 50 and len(reader.ranks()) == 50      # 3 batches, the last cut to 10
    assert np.array_equal(reader.simulation_index(), np.arange(50))
    assert np.array_equal(reader.ranks()[:SIMULATIONS], correct.ranks())    # seeds per simulation and batch


def test_cli_calibrate_prints_the_table_and_fails_a_mis_specification(field_case, capsys):
    write_config(field_case, "cli.toml", field_document())
    write_config(field_case, "cli-noisy.toml", field_document(data={"noise_sigma": 1.0}))
    status = cli.main(["calibrate", str(field_case / "cli.toml"), "--simulations", str(SIMULATIONS),
                       "--out", str(field_case / "cli"), "--draws", str(DRAWS), "--batch", str(BATCH),
                       "--simulate-with", str(field_case / "cli-noisy.toml")])
    out = capsys.readouterr()
    assert status == 1
    # twice the noise: the truth fits its data worse than every draw, and the model puts the
    # excess variance into the field, so its P(k) and index fail too
    verdict_line = out.out.splitlines()[-1]
    assert verdict_line.startswith("FAIL: ") and "loglik (p < 1e-15)" in verdict_line
    assert "quantity" in out.out.splitlines()[0] and "cover 90%" in out.out
    assert "calibrate: batch 2/2, 40/40 simulations" in out.err


