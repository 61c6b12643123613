"""Configs that name a model file: ``model.kind = "python"`` and ``likelihood.kind = "python"``,
with ``[parameters]``; parsed without executing the file, written back the same, refused with
the key when wrong."""

from __future__ import annotations

import pytest

from core.config import ConfigError, dump_config, new_config, parse_config, uses_model_file

SCALAR = """
[model]
kind = "python"
file = "my_model.py"
dtype = "float64"
[data]
path = "series.csv"
[parameters]
A = { dist = "normal", loc = 0.0, scale = 0.5 }
variance = 0.25
"""

FIELD = """
[model]
kind = "field"
[data]
path = "counts.npz"
mask = "mask"
noise_map = "noise"
[likelihood]
kind = "python"
file = "lik.py"
[parameters]
b1 = { dist = "normal", loc = 1.0, scale = 0.5 }
[sampler]
preconditioner = "diagonal"
"""


@pytest.mark.parametrize("text, setting, file", [(SCALAR, "model.file", "my_model.py"), (FIELD, "likelihood.file", "lik.py")])
def test_model_file_configs_round_trip_and_name_their_file(tmp_path, text, setting, file):
    config = parse_config(text, base_dir=tmp_path)
    assert uses_model_file(config) and config.model_file == tmp_path / file
    assert parse_config(dump_config(config), base_dir=tmp_path) == config
    assert not (tmp_path / file).exists()          # parsing never reads (or runs) the model file


def test_a_new_python_config_samples_with_nuts_and_the_adapted_diagonal():
    sampler = new_config("python").sampler
    assert (sampler.algorithm, sampler.preconditioner) == ("nuts", "diagonal")


@pytest.mark.parametrize("text, key, words", [
    (SCALAR.replace('file = "my_model.py"\n', ""), "model.file", "missing: the Python file that defines log_likelihood"),
    (SCALAR.replace("my_model.py", "my_model.txt"), "model.file", "accepted: .py"),
    (SCALAR + "[prior]\nA = 1.0\n", "prior", "applies only to model.kind = 'field' or 'integral'"),
    (SCALAR.replace("series.csv", "series.h5"), "data.path", "accepted: .csv, .npz"),
    (SCALAR.replace("variance = 0.25", "variance = { dist = \"gamma\" }"), "parameters.variance", "gamma"),
    (SCALAR.replace("variance = 0.25", "\"2x\" = 1.0"), "parameters.2x", "not a Python identifier"),
    (FIELD.replace('preconditioner = "diagonal"', 'preconditioner = "conditional"'), "sampler.preconditioner",
     "use 'diagonal'"),
    (FIELD.replace('noise_map = "noise"', "noise_sigma = 0.3"), "data.noise_sigma", "writes its noise"),
    (FIELD.replace('file = "lik.py"', 'file = "lik.py"\nsmoothing_scale = 1.0'), "likelihood.smoothing_scale",
     "writes its likelihood"),
    (FIELD.replace('kind = "python"\nfile = "lik.py"', 'kind = "gaussian"'), "parameters",
     "applies only to a model file's parameters"),
    (FIELD.replace('kind = "field"', 'kind = "field"\nfile = "x.py"'), "model.file", "likelihood.file"),
])
def test_wrong_model_file_settings_are_refused_with_their_key(text, key, words):
    with pytest.raises(ConfigError) as err:
        parse_config(text)
    assert err.value.key == key and words in str(err.value), str(err.value)
