"""Simulation-based calibration of a model file's model (its ``simulate``): the second seed's
scalar model and a 12^3 field with a hand-written Gaussian likelihood give uniform ranks; a model
file without ``simulate`` is refused with one line that says what to add."""

from __future__ import annotations

import numpy as np
import pytest

from core.calibration import CalibrationReader, PlanError
from core.config import config_from_dict, dump_config
from core.engine.calibrate import Calibrator
from support.model_files import copy_example

SIMULATIONS, DRAWS, BATCH = 40, 20, 20

LIKELIHOOD = """
import tensorflow as tf
PARAMETERS = {"sigma": 0.5}

def log_likelihood(field, params, data):
    r = (data["data"] - field) / params["sigma"]
    return -0.5 * tf.reduce_sum(r * r)
"""
SIMULATE = """
def simulate(field, params, seed):
    return {"data": field + params["sigma"] * tf.random.stateless_normal(tf.shape(field), seed=seed,
                                                                         dtype=field.dtype)}
"""


def _calibrate(folder, doc, out="cal"):
    config = config_from_dict(doc, base_dir=folder)
    text = dump_config(config)
    Calibrator(config, text, folder / out, simulations=SIMULATIONS, draws=DRAWS, batch_size=BATCH).run()
    return CalibrationReader(folder / out)


def _field_document():
    return {"model": {"kind": "field"}, "data": {"path": "data.npy"}, "grid": {"box_size": 48.0},
            "prior": {"kind": "power_law", "k_pivot": 0.1, "amplitude": 300.0,
                      "index": {"dist": "normal", "loc": -1.5, "scale": 0.3}},
            "likelihood": {"kind": "python", "file": "lik.py"},
            "sampler": {"algorithm": "hmc", "preconditioner": "diagonal", "num_warmup": 100, "num_samples": 100,
                        "num_leapfrog_steps": 10, "step_size": 0.1, "chains": 2, "seed": 4, "thin": 1}}


def test_a_field_model_file_with_simulate_calibrates_at_12_cubed(tmp_path):
    np.save(tmp_path / "data.npy", np.zeros((12, 12, 12)))      # its shape; the values are simulated
    (tmp_path / "lik.py").write_text(LIKELIHOOD + SIMULATE)
    reader = _calibrate(tmp_path, _field_document())
    verdict = reader.verdict()
    assert reader.quantities[:2] == ["index", "loglik"] and reader.has_field
    assert verdict.passed, verdict.table()
    assert min(r.pvalue for r in verdict.results) > 0.001, verdict.table()
    # the same settings resume it, unless the model file changed
    config = config_from_dict(_field_document(), base_dir=tmp_path)
    again = Calibrator(config, dump_config(config), tmp_path / "cal", simulations=SIMULATIONS, draws=DRAWS,
                       batch_size=BATCH)
    assert again.existing() is not None
    (tmp_path / "lik.py").write_text(LIKELIHOOD + SIMULATE + "\n# edited\n")
    with pytest.raises(PlanError, match="the model file"):
        again.existing()


def test_the_second_seed_model_calibrates(tmp_path):
    path = copy_example("trapezoid_integral", tmp_path)
    # the file's prior A ~ N(0, 0.5) reaches exp(10 A) ~ 1e6 where float32 (the user's dtype)
    # cannot resolve the data's noise; the config narrows it ([parameters] overrides PARAMETERS)
    doc = {"model": {"kind": "python", "file": "model.py"}, "data": {"path": "series.csv"},
           "parameters": {"A": {"dist": "normal", "loc": 0.1, "scale": 0.03}},
           "sampler": {"algorithm": "hmc", "preconditioner": "diagonal", "num_warmup": 150, "num_samples": 100,
                       "num_leapfrog_steps": 8, "step_size": 0.01, "chains": 2, "seed": 2, "thin": 1}}
    assert path.exists()
    reader = _calibrate(tmp_path, doc)
    verdict = reader.verdict()
    assert reader.quantities == ["A", "loglik"]
    assert verdict.passed, verdict.table()


def test_a_model_file_without_simulate_cannot_be_calibrated(tmp_path):
    np.save(tmp_path / "data.npy", np.zeros((4, 4, 4)))
    (tmp_path / "lik.py").write_text(LIKELIHOOD)
    with pytest.raises(PlanError, match=r"lik\.py: defines no simulate; .*add def simulate\(field, params, seed\)"):
        _calibrate(tmp_path, _field_document())


def test_a_config_with_a_sharded_field_is_refused_by_calibration_by_name(tmp_path):
    from support.engine_cases import field_case_document, write_field_case

    write_field_case(tmp_path)
    document = field_case_document()
    document["field"].update(parameterisation="white_noise", shard="slab")
    document["sampler"]["devices"] = 2
    config = config_from_dict(document, base_dir=tmp_path)
    calibrator = Calibrator(config, dump_config(config), tmp_path / "cal", simulations=4, draws=DRAWS, batch_size=2)
    with pytest.raises(PlanError, match=r"field.shard = 'slab': calibration runs batches of whole fields"):
        calibrator.run()
    assert not (tmp_path / "cal").exists() or not any((tmp_path / "cal").iterdir())
