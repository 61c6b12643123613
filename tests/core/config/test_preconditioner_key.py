"""``sampler.preconditioner``: its choices, the older ``adapt_mass_matrix`` spelling, the
combinations refused, and the writer's round trip."""

import pytest

from core import config as C
from core.config import ConfigError

FIELD = """
[model]
kind = "field"
[data]
path = "data.npz"
"""
INTEGRAL = """
[model]
kind = "integral"
[data]
path = "series.csv"
"""


def sampler(text: str, head: str = FIELD) -> C.SamplerSection:
    return C.parse_config(head + "[sampler]\n" + text).sampler


def test_choices_and_default():
    assert C.default_config().sampler.preconditioner == "identity"
    for name in C.PRECONDITIONERS:
        s = sampler(f'preconditioner = "{name}"\n')
        assert s.preconditioner == name
        assert s.adapt_mass_matrix == (name == "diagonal")
    with pytest.raises(ConfigError, match=r"sampler.preconditioner: .*did you mean 'fourier'") as err:
        sampler('preconditioner = "fourrier"\n')
    assert err.value.key == "sampler.preconditioner"


@pytest.mark.parametrize("alias,expected", [("true", "diagonal"), ("false", "identity")])
def test_adapt_mass_matrix_is_read_as_its_preconditioner(alias, expected):
    assert sampler(f"adapt_mass_matrix = {alias}\n").preconditioner == expected


@pytest.mark.parametrize("alias,name", [("true", "diagonal"), ("false", "identity"), ("false", "fourier")])
def test_both_keys_that_agree_are_accepted(alias, name):
    assert sampler(f'adapt_mass_matrix = {alias}\npreconditioner = "{name}"\n').preconditioner == name


@pytest.mark.parametrize("alias,name", [("true", "fourier"), ("true", "identity"), ("false", "diagonal")])
def test_both_keys_that_contradict_are_refused_naming_both(alias, name):
    with pytest.raises(ConfigError) as err:
        sampler(f'adapt_mass_matrix = {alias}\npreconditioner = "{name}"\n')
    assert err.value.key == "sampler.preconditioner"
    message = str(err.value)
    assert f"sampler.preconditioner: '{name}' contradicts sampler.adapt_mass_matrix = {alias}" in message
    with pytest.raises(ConfigError, match="sampler.adapt_mass_matrix: must be true or false"):
        sampler('adapt_mass_matrix = 1\npreconditioner = "diagonal"\n')


def test_fourier_needs_a_latent_indexed_by_wavevector_and_the_field_model():
    for parameterisation in C.FOURIER_PARAMETERISATIONS:
        cfg = C.parse_config(FIELD + f'[field]\nparameterisation = "{parameterisation}"\n'
                             '[sampler]\npreconditioner = "fourier"\n')
        assert cfg.sampler.preconditioner == "fourier"
    with pytest.raises(ConfigError, match="'fourier' needs field.parameterisation = 'whitened' or "
                                          "'raw_modes', not 'white_noise'") as err:
        C.parse_config(FIELD + '[field]\nparameterisation = "white_noise"\n[sampler]\npreconditioner = "fourier"\n')
    assert err.value.key == "sampler.preconditioner"
    with pytest.raises(ConfigError, match="'fourier' applies only to model.kind = 'field'") as err:
        sampler('preconditioner = "fourier"\n', INTEGRAL)
    assert err.value.key == "sampler.preconditioner"
    assert sampler('preconditioner = "diagonal"\n', INTEGRAL).preconditioner == "diagonal"
    with pytest.raises(ConfigError, match="'conditional' needs field.parameterisation = 'whitened' or "
                                          "'raw_modes', not 'white_noise'"):
        C.parse_config(FIELD + '[field]\nparameterisation = "white_noise"\n[sampler]\npreconditioner = "conditional"\n')
    with pytest.raises(ConfigError, match="'conditional' applies only to model.kind = 'field'"):
        sampler('preconditioner = "conditional"\n', INTEGRAL)


@pytest.mark.parametrize("text", ['preconditioner = "fourier"\n', "adapt_mass_matrix = true\n",
                                  'preconditioner = "identity"\n'])
def test_writer_round_trip_writes_the_preconditioner_key(text):
    cfg = C.parse_config(FIELD + "[sampler]\n" + text, source="run.toml")
    dumped = C.dump_config(cfg)
    assert f'preconditioner = "{cfg.sampler.preconditioner}"  # identity | diagonal | fourier' in dumped
    assert "adapt_mass_matrix" not in dumped
    assert C.parse_config(dumped) == cfg
    assert C.config_to_dict(cfg)["sampler"]["preconditioner"] == cfg.sampler.preconditioner
