"""Simulation-based calibration with other likelihoods, models and samplers
(``core.engine.calibrate``): the Poisson likelihood and the integral model calibrate, MCLMC and
MAMS calibrate and refuse a model of one coordinate, and a batch of one simulation draws what
``fieldscope run`` draws (issue #29). The cases of ``test_calibrate.py`` (``support.
calibration_cases``), in a file of their own so that the two files run side by side.
"""

from __future__ import annotations

import numpy as np
import pytest

from core.engine.engine import EngineError
from core.field.grid import Grid
from core.integral.series import make_demo_series
from core.io.series import save_series_csv
from support.calibration_cases import DRAWS, calibrate, field_document, write_config, write_slab_field


@pytest.fixture(scope="module")
def field_case(tmp_path_factory):
    return write_slab_field(tmp_path_factory.mktemp("field"))


def test_poisson_likelihood_calibrates(tmp_path):
    grid = Grid((4, 4, 4), 32.0)
    counts = np.random.default_rng(0).poisson(5.0, grid.shape)
    np.savez(tmp_path / "counts.npz", data=counts)
    # (a calibrated pipeline fails the verdict's 5 % family test once in twenty. Measured: seeds
    # 3 and 4 fail voxel_2_2_2 at 40 simulations (p = 0.0056, 0.0031 against Holm's 0.0063), with
    # every voxel's ranks uniform together (4.7 % of the 64 below p = 0.05, coverage 0.52 / 0.90);
    # seed 3 passes at 100 simulations (voxel_2_2_2 p = 0.05); seeds 5, 6, 7 pass at 40, no
    # quantity below p = 0.05)
    doc = field_document(likelihood={"kind": "poisson_lognormal", "mean_count": 5.0}, sampler={"seed": 5})
    doc["data"] = {"path": "counts.npz"}
    _, reader = calibrate(tmp_path, doc, "poisson")
    verdict = reader.verdict()
    assert verdict.passed, verdict.table()
    assert reader.ranks().max() == DRAWS and reader.ranks().min() == 0


def test_integral_model_calibrates(tmp_path):
    series = make_demo_series(seed=0, n=20, t_max=5.0, A=0.1, c=0.0, sigma=0.5)
    save_series_csv(tmp_path / "series.csv", series.t, series.y)
    doc = {"model": {"kind": "integral"}, "data": {"path": "series.csv"}, "integral": {"refine": 4},
           "prior": {"A": {"dist": "normal", "loc": 0.0, "scale": 0.2}, "c": {"dist": "normal", "loc": 0.0, "scale": 1.0},
                     "sigma": {"dist": "halfnormal", "scale": 1.0}},
           "sampler": {"algorithm": "hmc", "num_warmup": 200, "num_samples": 100, "num_leapfrog_steps": 8,
                       "step_size": 0.05, "adapt_mass_matrix": True, "chains": 2, "seed": 1, "thin": 1}}
    _, reader = calibrate(tmp_path, doc, "integral")
    verdict = reader.verdict()
    assert reader.quantities == ["A", "c", "sigma", "loglik"]
    assert verdict.passed, verdict.table()
    assert not reader.has_field


@pytest.mark.parametrize("algorithm,preconditioner", [("mclmc", "conditional"), ("mams", "conditional")])
def test_microcanonical_samplers_calibrate(field_case, algorithm, preconditioner):
    # S x C = 40 chains of one compiled program; their tuning per chain, as the engine's. MCLMC
    # with "conditional" is a new config's sampler: each simulation centred on its own data;
    # MAMS with it is what New from data writes for this case (the index sampled, a slab mask),
    # with its trajectories of 8 integration steps (core.samplers.MAMS_HYPER_STEPS_PER_L).
    # 100 simulations, not 40: the second assertion (no quantity below p = 0.01, stricter than
    # the verdict's Holm test) fails by chance for 1 - 0.99^9 = 8.6 % of seeds, and at 40
    # simulations it did for 3 of seeds 10-29 (MCLMC, Threefry velocity noise; 2 of 20 with
    # Philox), seed 3 among them (0.0099, voxel_0_0_0) and not at 100 (min p 0.11)
    doc = field_document(sampler={"algorithm": algorithm, "preconditioner": preconditioner, "num_warmup": 150,
                                  "num_samples": 100, "target_accept": 0.9})
    status, reader = calibrate(field_case, doc, algorithm, simulations=100)
    verdict = reader.verdict()
    assert status == "finished" and reader.simulations_done == 100
    assert verdict.passed, verdict.table()
    assert min(r.pvalue for r in verdict.results) > 0.01, verdict.table()
    assert reader.ranks().min() == 0 and reader.ranks().max() == DRAWS
    assert reader.divergences().sum() == 0


def test_microcanonical_sampler_of_one_coordinate_is_refused_before_the_store(tmp_path):
    series = make_demo_series(seed=0, n=20, t_max=5.0, A=0.1, c=0.0, sigma=0.5)
    save_series_csv(tmp_path / "series.csv", series.t, series.y)
    doc = {"model": {"kind": "integral"}, "data": {"path": "series.csv"}, "integral": {"refine": 4},
           "prior": {"A": {"dist": "normal", "loc": 0.0, "scale": 0.2}, "c": 0.0, "sigma": 0.5},
           "sampler": {"algorithm": "mclmc", "num_warmup": 100, "num_samples": 100, "chains": 2, "seed": 1}}
    with pytest.raises(EngineError, match="mclmc.*at least 2 coordinates.*has 1"):
        calibrate(tmp_path, doc, "one")
    assert not (tmp_path / "one" / "calibration.zarr").exists()


@pytest.mark.parametrize("algorithm,preconditioner", [("hmc", "fourier"), ("mclmc", "conditional"),
                                                      ("nuts", "diagonal")])
def test_a_batch_of_one_simulation_draws_what_fieldscope_run_draws(field_case, tmp_path, algorithm, preconditioner):
    """Calibration runs the engine's driver (issue #29): simulation 0's batch of one, and a run of the
    same config on that simulation's data with the batch's sampler seed, draw the same states bit for
    bit (the sampled index of every kept draw), and the same field (its P(k)). With "fourier" and the
    index sampled the engine keeps the field's scale at 1 when it sets the diagonal; calibration's own
    loop had rescaled the field as well, and sampled another chain than any run. With "conditional"
    (the slab mask: the centre's reference solve) each simulation is centred on its own data, as
    the run is on the file it loads; it had kept the centre of the config's data."""
    from core.calibration import plan_for_config
    from core.engine.calibrate import _Program, batch_sampler_seed, simulate_batch
    from core.engine.engine import Engine
    from core.engine.models import build_model
    from core.store.run_store import RunReader

    doc = field_document(sampler={"algorithm": algorithm, "preconditioner": preconditioner, "num_warmup": 60,
                                  "num_samples": 40, "num_leapfrog_steps": 5, "chunk_size": 25})
    config, _ = write_config(field_case, f"one-{algorithm}.toml", doc)
    plan = plan_for_config(config, simulations=1, draws=20, batch_size=1)
    model = build_model(config)
    program = _Program(config, model, plan)
    data, truth = simulate_batch(model, [0], plan.seed)
    _, truth_field = program.truth_quantities(model, data, truth)
    seed = batch_sampler_seed(plan.seed, 0)
    keep_buf, _, _, _ = program.sample(data, truth_field, seed)
    kept = np.asarray(keep_buf, np.float64)                    # (draws per chain, chains, Q)

    mask = np.asarray(model.observations.mask)
    np.savez(tmp_path / "simulated.npz", data=np.asarray(data[0]), mask=mask)
    run_doc = field_document(data={"path": "simulated.npz"},
                             sampler={**doc["sampler"], "seed": seed, "thin": 1})
    run_config, run_text = write_config(tmp_path, "run.toml", run_doc)
    assert Engine(run_config, run_text, tmp_path / "run").start() == "finished"
    reader = RunReader(tmp_path / "run")
    steps = np.arange(plan.thin - 1, config.sampler.num_samples, plan.thin)[:plan.draws_per_chain]
    index = reader.param("index")[:, steps]                   # (chains, draws)
    np.testing.assert_array_equal(kept[:, :, program.names.index("index")].T, index)
    _, _, powers = reader.powers()
    power_k = [i for i, name in enumerate(program.names) if name.startswith("power_k")]
    np.testing.assert_allclose(kept[:, :, power_k].transpose(1, 0, 2), powers[:, steps], rtol=1e-5)
