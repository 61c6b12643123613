"""The field posterior with the field cut over devices (``core.engine.sharded_density``, issue #34
item 2) on 4 logical CPU devices: its log-density and its gradient (in the latent's parts and in
sampled hyperparameters) equal ``FieldPosterior``'s white-noise density on the whole grid to
float64 round-off, as slabs (4) and pencils (2 x 2), odd and even grids, with a mask, a noise
map, a beam, a field mean, a power law, a cutoff with its amplitude and index sampled, and band
powers; every part-sized op of the value and its gradient runs on its part's device
(``core.engine.placement``; TensorFlow's default would gather them on the first device); a
16^3 HMC run (``core.engine.hmc``, the leapfrog's own loop inside the run's) on the sharded
density, every part-sized op placed, draws the exact Wiener posterior's mean and sd; NUTS
(``core.engine.nuts``: loops in loops, buffers of its own) moves on it with every part-sized op
placed; the parameterisations whose latent is not cut as the field is are refused by name.

The device split must come before TensorFlow starts: the checks run in a fresh process
(``tests/support/sharded_density_check.py``, ~1 minute alone) and report as JSON."""

from __future__ import annotations

import pytest

from support.fresh_process import json_report

TOLERANCE = 1e-13          # float64: the measured errors are 0 to 4e-16


@pytest.fixture(scope="module")
def report():
    return json_report("sharded_density_check.py", timeout=540)


CASES = [f"{mesh} {grid} {model}" for mesh in ("slab", "pencil") for grid in ("odd 7x5x9", "even 8^3")
         for model in ("fixed power law, noise map, beam", "cutoff, index and amplitude sampled",
                       "band powers sampled")]


@pytest.mark.parametrize("case", CASES)
def test_the_sharded_density_and_its_gradient_are_the_whole_grids(report, case):
    result = report["density"][case]
    for check in ("log_prob", "latent gradient") + (("eta gradient",) if "sampled" in case else ()):
        assert result[check] < TOLERANCE, (case, check, result[check])
    assert result["unplaced grid ops"] == []


def test_hmc_on_the_sharded_density_draws_the_wiener_posterior(report):
    result = report["wiener"]
    assert result["draws"] == 1200 and 0.3 < result["acceptance"] < 0.95
    # 1200 draws of 4 chains: a voxel's mean is off by ~0.04 posterior sd (measured rms 0.040, max
    # 0.15 over 4096 voxels), its sd by ~5 % (5-95 %: 0.89-1.11); a wrong density or gradient is
    # off by O(1) (chains that never moved: rms 1.8, sd ratios 0.45-2.8)
    assert result["rms z of the mean"] < 0.1 and result["max |z|"] < 0.5
    assert 0.95 < result["median sd ratio"] < 1.05
    low, high = result["sd ratio 5-95 %"]
    assert 0.8 < low and high < 1.2
    assert result["unplaced grid ops"] == []


def test_nuts_on_the_sharded_density_keeps_every_part_on_its_device(report):
    assert report["nuts"]["moved"] > 0
    assert report["nuts"]["unplaced grid ops"] == []


def test_a_latent_not_cut_as_the_field_is_refused(report):
    for parameterisation in ("whitened", "raw_modes"):
        assert f"parameterisation '{parameterisation}'" in report["refused"][parameterisation]
        assert "white_noise" in report["refused"][parameterisation]
