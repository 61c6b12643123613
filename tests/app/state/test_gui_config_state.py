"""The config state behind the panels: plain Python, no Qt (napari's model tests)."""

from __future__ import annotations

import pytest

from app.state.config_state import ConfigState, parse_number, state_key_of
from core.config import ConfigError, config_from_dict, load_config
from core.demo import write_demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return write_demo(tmp_path_factory.mktemp("demo"))


def test_a_config_file_round_trips_through_the_state(demo, tmp_path):
    state = ConfigState.from_file(demo["field_config"])
    assert state.validate() == {} and not state.modified and state.ignored == []
    assert state["prior.index.sampled"] and state["prior.index.loc"] == -1.5
    assert state["data.noise"] == "sigma" and state["data.mask"] == "mask"
    out = state.save(demo["field_config"].parent / "copy.toml")
    assert load_config(out) == load_config(demo["field_config"])
    integral = ConfigState.from_file(demo["integral_config"])
    assert integral.validate() == {}
    assert integral.config() == load_config(demo["integral_config"])


def test_a_new_config_has_mclmc_with_conditional_and_a_file_without_a_sampler_hmc_with_identity(tmp_path):
    state = ConfigState()
    assert (state["sampler.algorithm"], state["sampler.preconditioner"],
            state["sampler.num_warmup"]) == ("mclmc", "conditional", 1000)
    state.load_text('[model]\nkind = "field"\n[data]\npath = "data.npz"\n', base_dir=tmp_path)
    assert (state["sampler.algorithm"], state["sampler.preconditioner"],
            state["sampler.num_warmup"]) == ("hmc", "identity", 200)


def test_callbacks_fire_on_change_only_and_once_per_batch(demo):
    state = ConfigState.from_file(demo["field_config"])
    seen, batches = [], []
    state.connect("sampler.chains", seen.append)
    state.connect_any(batches.append)
    state["sampler.chains"] = 2          # unchanged: no callback
    state["sampler.chains"] = 4
    with state.batch():
        state["sampler.seed"] = 1
        state["sampler.thin"] = 3
    assert seen == [4]
    assert batches == [{"sampler.chains"}, {"sampler.seed", "sampler.thin"}]
    assert state.modified


def test_every_bad_key_is_reported_with_a_message_naming_it(demo):
    state = ConfigState.from_file(demo["field_config"])
    state["sampler.num_warmup"] = parse_number("-1")
    state["sampler.step_size"] = parse_number("fast")
    state["prior.index.scale"] = -0.3
    state["grid.box_size"] = [100.0, -2.0, 100.0]
    errors = state.validate()
    assert set(errors) == {"sampler.num_warmup", "sampler.step_size", "prior.index",
                           "grid.box_size"}
    for key, message in errors.items():
        assert message.startswith(key), message
    assert "'fast'" in errors["sampler.step_size"] or '"fast"' in errors["sampler.step_size"]
    with pytest.raises(ConfigError, match="sampler.num_warmup"):
        state.to_toml()


def test_files_are_checked_by_their_headers(demo, tmp_path):
    state = ConfigState.from_file(demo["field_config"])
    state["data.key"] = "nothing"
    assert "has no array 'nothing'" in state.validate()["data.key"]
    state["data.key"] = "data"
    state["data.mask"] = "masque"
    assert "data.mask" in state.validate()
    state["data.mask"] = "mask"
    state["data.path"] = "missing.npz"
    assert "no such file" in state.validate()["data.path"]
    (tmp_path / "broken.npz").write_bytes(b"this is not a zip archive at all")
    state["data.path"] = str(tmp_path / "broken.npz")
    assert "broken.npz" in state.validate()["data.path"]
    state["data.path"] = "demo_field.npz"
    assert state.validate() == {} and state.data_shape() == (32, 32, 32)


def test_hyperparameters_keep_both_halves_when_toggled(demo):
    state = ConfigState.from_file(demo["field_config"])
    state.set_sampled("index", False)        # fixed at the prior's centre
    assert state.hyper_value("index") == -1.5
    state["prior.index.value"] = -1.2
    state.set_sampled("index", True)
    assert state.hyper_value("index") == {"dist": "normal", "loc": -1.5, "scale": 0.3}
    state.set_sampled("index", False)
    assert state.hyper_value("index") == -1.2
    state.set_sampled("amplitude", True)     # centred on the fixed value; scale to give
    assert state.hyper_value("amplitude") == {"dist": "normal", "loc": 2000.0}
    assert "missing ['scale']" in state.validate()["prior.amplitude"]
    state["prior.amplitude.dist"] = "lognormal"
    state["prior.amplitude.loc"] = 7.6
    state["prior.amplitude.scale"] = 0.5
    assert state.validate() == {}


def test_only_the_keys_that_apply_are_written(demo):
    state = ConfigState.from_file(demo["field_config"])
    state["likelihood.kind"] = "poisson_lognormal"
    doc = state.document()
    assert "noise_sigma" not in doc["data"] and doc["likelihood"]["mean_count"] == 1.0
    state["likelihood.kind"] = "gaussian"
    state["data.noise"] = "map"
    state["data.noise_map"] = "noise"
    assert state.document()["data"]["noise_map"] == "noise"
    assert state.validate() == {}
    state["prior.kind"] = "power_law"
    assert "cutoff_scale" not in state.document()["prior"]
    state["prior.kind"] = "power_law_cutoff"       # the value was kept
    assert state.document()["prior"]["cutoff_scale"] == 4.0


def test_a_file_with_bad_values_loads_and_says_what_is_wrong(tmp_path, demo):
    text = demo["field_config"].read_text().replace("chains = 2", "chains = 0")
    text = text.replace("[sampler]", "[sampler]\nturbo = true")
    path = demo["field_config"].parent / "bad.toml"
    path.write_text(text)
    state = ConfigState.from_file(path)
    assert state.ignored == ["sampler.turbo"]
    assert set(state.validate()) == {"sampler.chains"}
    (tmp_path / "syntax.toml").write_text("[sampler\nchains = 2\n")
    with pytest.raises(ConfigError, match="syntax.toml: TOML syntax error"):
        ConfigState.from_file(tmp_path / "syntax.toml")


def test_saving_elsewhere_keeps_the_data_reachable(demo, tmp_path):
    state = ConfigState.from_file(demo["field_config"])
    target = tmp_path / "elsewhere" / "run.toml"
    target.parent.mkdir()
    state.save(target)
    assert load_config(target).data_path == demo["field_data"]
    state.save(demo["field_config"].parent / "back.toml")
    assert state["data.path"] == "demo_field.npz"


def _error_of(document) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config_from_dict(document)
    return info.value


def test_state_key_of_an_error_is_its_config_key_cut_to_table_and_name():
    field = {"model": {"kind": "field"}, "data": {"path": "d.npz"}}
    integral = {"model": {"kind": "integral"}, "data": {"path": "s.csv"}}
    cases = [
        ({**field, "grid": {"box_size": [1.0, -2.0, 3.0]}}, "grid.box_size"),
        ({**integral, "prior": {"A": {"dist": [1]}}}, "prior.A"),
        ({**field, "data": {"path": "d.npz", "noise_sigma": 1.0},
          "likelihood": {"kind": "poisson_lognormal"}}, "data.noise_sigma"),
        ({"model": {"kind": "field"}}, "data.path"),
        ({**field, "sampler": 3}, "config"),              # a whole table
        ({**field, "extra": {}}, "config"),               # an unknown table
        ([1, 2], "config"),                               # the whole document
    ]
    for document, key in cases:
        error = _error_of(document)
        assert state_key_of(error) == key, str(error)
    assert state_key_of(ConfigError("prior.index.scale", "must be > 0")) == "prior.index"
    assert state_key_of(ConfigError(None, "TOML syntax error: ...")) == "config"


def test_each_bad_key_lands_on_its_own_message(demo):
    """Bad values in several tables at once: each is reported under its own key, with the
    message core.config words for that key alone."""
    state = ConfigState.from_file(demo["field_config"])
    bad = {"sampler.chains": 0, "sampler.target_accept": 1.5, "grid.unit": 3,
           "likelihood.smoothing_scale": -1.0, "field.dtype": "float16",
           "data.noise_sigma": 0.0, "prior.k_pivot": 0.0, "grid.box_size": [1.0, 2.0]}
    state.update(bad)
    state.set_sampled("amplitude", True)
    state["prior.amplitude.dist"] = "gamma"
    errors = state.validate()
    assert set(errors) == set(bad) | {"prior.amplitude"}
    for key, message in errors.items():
        assert message.startswith(key), message
        alone = ConfigState.from_file(demo["field_config"])
        if key == "prior.amplitude":
            alone.set_sampled("amplitude", True)
            alone["prior.amplitude.dist"] = "gamma"
        else:
            alone[key] = bad[key]
        assert alone.validate() == {key: message}
    integral = ConfigState.from_file(demo["integral_config"])
    integral.update({"integral.refine": 0, "prior.sigma.sampled": False,
                     "prior.sigma.value": -1.0, "prior.A.sampled": True,
                     "prior.A.dist": "normal", "prior.A.scale": "wide"})
    errors = integral.validate()
    assert set(errors) == {"integral.refine", "prior.sigma", "prior.A"}
    assert errors["prior.sigma"] == "prior.sigma: the noise sd must be > 0, got -1.0"
    assert errors["integral.refine"].startswith("integral.refine: must be a positive integer")
    # the message names the sub-key (core.priors keys errors down to the parameter); the
    # panel that shows it is the one of prior.A
    assert errors["prior.A"] == "prior.A.scale: must be a finite number, got 'wide'"


@pytest.mark.parametrize("sampler, expected", [
    ("adapt_mass_matrix = true", "diagonal"), ("adapt_mass_matrix = false", "identity"),
    ('adapt_mass_matrix = false\npreconditioner = "fourier"', "fourier")])
def test_the_older_adapt_mass_matrix_is_read_as_the_preconditioner(tmp_path, sampler, expected):
    """A config written before sampler.preconditioner keeps its adapted mass matrix in the window
    (the GUI listed the key as ignored and ran with none)."""
    text = f'[model]\nkind = "field"\n[data]\npath = "data.npz"\n[sampler]\n{sampler}\n'
    state = ConfigState()
    state.load_text(text, base_dir=tmp_path)
    assert state["sampler.preconditioner"] == expected and state.ignored == []
    assert load_config_text_preconditioner(text, tmp_path) == expected


def load_config_text_preconditioner(text, base_dir):
    from core.config import parse_config
    return parse_config(text, base_dir=base_dir).sampler.preconditioner


def test_a_band_powers_config_round_trips_without_losing_its_bins(demo, tmp_path):
    """No panel edits band powers' settings yet (#30): the state carries them through, so a
    band-powers config opened, edited and saved keeps its bins, their prior and the random walk,
    and nothing is reported as left out."""
    text = demo["field_config"].read_text()
    start = text.index("[prior]")
    end = text.index("[", start + 1)
    path = demo["field_config"].parent / "bands.toml"
    path.write_text(text[:start] + '[prior]\nkind = "band_powers"\nedges = [0.02, 0.05, 0.1, 0.2, 0.4]\n'
                    'band_power = {dist = "lognormal", loc = 7.0, scale = 1.5}\nrandom_walk_scale = 0.7\n\n'
                    + text[end:])
    before = load_config(path)
    state = ConfigState.from_file(path)
    assert state.ignored == [] and state.validate() == {}
    state.set("sampler.num_warmup", 12)
    saved = load_config(state.save(tmp_path / "saved.toml"))
    assert saved.prior == before.prior and saved.sampler.num_warmup == 12
