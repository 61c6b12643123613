"""A run whose log-density is not finite where the chains start is refused with the term
that is not finite (a hyperparameter's value or prior, the field prior, the field, the
likelihood), its value and what to check; a grid too small to sample is refused before the
model loads."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.config import config_from_dict
from core.engine.engine import Engine, EngineError
from core.engine.models import FieldModel, nonfinite_report
from core.io import LoadError
from core.run.resources import ResourceError
from support.engine_cases import field_case_document, write_field_case

SMALL = dict(warmup=5, samples=5, chunk=5)


def test_a_nonfinite_initial_log_density_names_the_term_and_its_value(tmp_path):
    # float64 holds noise_sigma = 1e-154 (1/sigma^2 = 1e308), not the residuals' sum: the
    # engine refuses the start, naming the likelihood and what to check
    (tmp_path / "b").mkdir()
    config, text, *_ = write_field_case(tmp_path / "b", shape=(8, 8, 8), sigma=1e-154,
                                        dtype="float64", **SMALL)
    with pytest.raises(EngineError) as info:
        Engine(config, text, tmp_path / "b" / "run").start()
    assert str(info.value).startswith("the log-density is not finite at the initial state: the "
                                      "likelihood is -inf (chain 0 of 2); check data.noise_sigma")
    # a lognormal amplitude with scale 1e6: the chains start a tenth of a scale apart in
    # log-amplitude, and exp(3e4) overflows float32. (Compiled, XLA may fold log(exp(eta))
    # and find the density finite; the report evaluates each term eagerly.)
    (tmp_path / "a").mkdir()
    write_field_case(tmp_path / "a", shape=(8, 8, 8), **SMALL)             # the data
    wide = {"dist": "lognormal", "loc": math.log(300.0), "scale": 1e6}
    model = FieldModel(config_from_dict(field_case_document(amplitude=wide, **SMALL),
                                        tmp_path / "a"))
    parts = model.initial_state(2, 3)
    assert not np.all(np.isfinite(model.target_log_prob_fn(*parts).numpy()))
    message = nonfinite_report(model, parts)
    assert message.startswith("the log-density is not finite at the initial state: the value of "
                              "prior.amplitude is inf (chain 1 of 2); check prior.amplitude's "
                              "prior (its scale)")


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 2, 2), (2, 8, 8)])
def test_a_grid_too_small_to_sample_is_refused(tmp_path, shape):
    config, text, *_ = write_field_case(tmp_path, shape=(8, 8, 8), **SMALL)
    np.savez(tmp_path / "data.npz", data=np.random.default_rng(0).normal(size=shape))
    with pytest.raises(ResourceError) as info:
        Engine(config, text, tmp_path / "run").start()
    grid = " x ".join(map(str, shape))
    assert str(info.value).startswith(f"{tmp_path / 'data.npz'}: the grid {grid} is too small to "
                                      "sample: every axis needs at least 3 cells")
    assert not (tmp_path / "run").exists()
    with pytest.raises(LoadError, match="every axis needs at least 3 cells"):
        FieldModel(config)        # the model refuses it too (where the preflight cannot tell)
