"""A scientist's own model in a Python file (``core.engine.model_file``), against independent answers.

References: the built-in models' densities (a model file that writes the Gaussian likelihood or the
integral model by hand gives the same log-density up to a constant), the Wiener filter, the
integral model's quadrature posterior, a numpy quadrature of the second seed's posterior, finite
differences (check-model must flag a gradient scaled by N, of the wrong sign, missing, and NaN at a
prior draw, and pass correct models), and one clear line for each hostile file.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import tensorflow as tf

from core import integral as im
from core.config import config_from_dict, dump_config, parse_config
from core.engine.engine import Engine, EngineError
from core.engine.model_check import check_model
from core.engine.models import build_model
from core.io import save_series_csv
from core.reference.wiener import wiener_posterior
from core.run.input_files import InputsChanged
from core.store.diagnostics import ess_bulk
from core.store.run_store import RunReader, stored_run_config
from support.engine_cases import field_case_document, prior_mode_variance, run, write_field_case
from support.model_files import copy_example

GAUSSIAN = """
import tensorflow as tf
PARAMETERS = {"sigma": 0.5}

def log_likelihood(field, params, data):
    r = (data["data"] - field) / params["sigma"]
    return -0.5 * tf.reduce_sum(r * r * data.get("mask", 1.0))
"""


def _field_file_config(tmp_path, source: str, **overrides):
    """The field case of ``support.engine_cases`` with a model file's likelihood ``source``."""
    doc = field_case_document(**overrides)
    doc["data"].pop("noise_sigma")
    doc["likelihood"] = {"kind": "python", "file": "lik.py"}
    doc["sampler"].pop("adapt_mass_matrix")
    doc["sampler"]["preconditioner"] = "diagonal"
    (tmp_path / "lik.py").write_text(textwrap.dedent(source))
    config = config_from_dict(doc, base_dir=tmp_path)
    text = dump_config(config)
    (tmp_path / "file.toml").write_text(text)
    return config, text


def _states(model, n, seed):
    rng = np.random.default_rng(seed)
    return [tf.constant(rng.standard_normal([n, *p.shape[1:]]) * 0.3, model.dtype)
            for p in model.initial_state(n, 0)]


def test_a_hand_written_gaussian_likelihood_is_the_built_in_density_and_gives_the_wiener_posterior(tmp_path):
    config, text, data, grid, spectrum = write_field_case(tmp_path, dtype="float64", warmup=200, samples=500,
                                                          chains=4)
    file_config, file_text = _field_file_config(tmp_path, GAUSSIAN, dtype="float64", warmup=200, samples=500,
                                                chains=4)
    built_in, from_file = build_model(config), build_model(file_config)
    parts = _states(built_in, 5, seed=1)
    difference = np.asarray(built_in.target_log_prob_fn(*parts) - from_file.target_log_prob_fn(*parts))
    np.testing.assert_allclose(difference, difference[0], rtol=0, atol=1e-8 * abs(difference[0]))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(parts)
        a, b = built_in.target_log_prob_fn(*parts), from_file.target_log_prob_fn(*parts)
    np.testing.assert_allclose(tape.gradient(b, parts[0]), tape.gradient(a, parts[0]), rtol=1e-9, atol=1e-9)

    status, _ = run(file_config, file_text, tmp_path / "run")
    assert status == "finished"
    reader = RunReader(tmp_path / "run")
    mean, std, _ = reader.field_moments()
    exact = wiener_posterior(data.data, prior_mode_variance(grid, spectrum), 0.5)
    posterior_sd = float(np.mean(exact.std))
    assert np.sqrt(np.mean((mean - exact.mean) ** 2)) < 0.25 * posterior_sd
    assert np.mean(std) == pytest.approx(posterior_sd, rel=0.06)
    stored = reader.attrs["model_file"]          # what ran, kept with the run
    assert stored["text"] == (tmp_path / "lik.py").read_text() and len(stored["sha256"]) == 64


INTEGRAL = """
import tensorflow as tf
import numpy as np
PARAMETERS = {"A": {"dist": "normal", "loc": 0.0, "scale": 1.0},
              "c": {"dist": "normal", "loc": 0.0, "scale": 10.0}, "sigma": 0.5}
REFINE = 4

def log_likelihood(params, data):
    t, y = data["t"], data["y"]
    j = tf.range(REFINE + 1, dtype=t.dtype) / REFINE
    h = t[1:] - t[:-1]
    s = t[:-1, None] + h[:, None] * j[None, :]
    half = tf.constant([0.5], t.dtype)
    w = tf.concat([half, tf.ones(REFINE - 1, t.dtype), half], axis=0)
    segment = h / REFINE * tf.reduce_sum(tf.exp(params["A"] * s) * w, axis=1)
    integral = tf.concat([[tf.constant(0.0, t.dtype)], tf.cumsum(segment)], axis=0)
    r = y - params["c"] - integral
    n = tf.cast(tf.size(y), t.dtype)
    sigma = params["sigma"]
    return -0.5 * n * tf.math.log(2 * np.pi * sigma**2) - 0.5 * tf.reduce_sum(r * r) / sigma**2
"""


def test_an_integral_model_file_matches_the_built_in_model_and_its_quadrature_posterior(tmp_path):
    series = im.make_demo_series(5, n=40)
    save_series_csv(tmp_path / "series.csv", series.t, series.y)
    (tmp_path / "integral.py").write_text(INTEGRAL)
    sampler = ("[sampler]\nalgorithm = \"nuts\"\npreconditioner = \"diagonal\"\nnum_warmup = 300\n"
               "num_samples = 1000\nchains = 4\nseed = 9\nthin = 1\nchunk_size = 200\n")
    text = ("[model]\nkind = \"python\"\nfile = \"integral.py\"\ndtype = \"float64\"\n"
            "[data]\npath = \"series.csv\"\n" + sampler)
    built_in = parse_config("[model]\nkind = \"integral\"\n[data]\npath = \"series.csv\"\n[integral]\nrefine = 4\n"
                            "[prior]\nA = { dist = \"normal\", loc = 0.0, scale = 1.0 }\n"
                            "c = { dist = \"normal\", loc = 0.0, scale = 10.0 }\nsigma = 0.5\n", base_dir=tmp_path)
    config = parse_config(text, base_dir=tmp_path)
    a, b = build_model(built_in), build_model(config)
    u = tf.constant(np.random.default_rng(2).normal([0.3, 1.0], [0.05, 0.5], size=(6, 2)))
    np.testing.assert_allclose(b.target_log_prob_fn(u), a.target_log_prob_fn(u), rtol=1e-11)

    status, _ = run(config, text, tmp_path / "run")
    assert status == "finished"
    draws = RunReader(tmp_path / "run").param("A")
    exact = im.posterior_quadrature(im.IntegralModelSpec(series.t, series.y, refine=4, priors={
        "A": {"dist": "normal", "loc": 0.0, "scale": 1.0}, "c": {"dist": "normal", "loc": 0.0, "scale": 10.0},
        "sigma": 0.5}))
    assert abs(draws.mean() - exact.mean["A"]) < 4 * draws.std() / np.sqrt(ess_bulk(draws))
    assert draws.std() == pytest.approx(exact.sd["A"], rel=0.1)


def test_the_second_seed_code_pasted_runs_and_samples_its_posterior(tmp_path):
    path = copy_example("trapezoid_integral", tmp_path)
    text = path.read_text().replace("num_samples = 1000", "num_samples = 600")
    config = parse_config(text, base_dir=tmp_path)
    report = check_model(config)
    assert report.ok, report.problems
    assert any("float32" in note for note in report.notes)      # its linspace is float32: said so
    status, _ = run(config, text, tmp_path / "run")
    assert status == "finished"
    draws = RunReader(tmp_path / "run").param("A")
    # numpy quadrature of the same posterior: A ~ N(0, 0.5^2), the user's likelihood in float64
    y = np.loadtxt(tmp_path / "series.csv", skiprows=1)
    t = np.linspace(0.0, 10.0, 100)
    grid = np.linspace(0.09, 0.11, 4001)
    terms = np.exp(grid[:, None] * t[None, :])
    pred = np.cumsum(0.5 * (t[1] - t[0]) * (terms[:, :-1] + terms[:, 1:]), axis=1)
    log_p = -0.5 * (grid / 0.5) ** 2 - 0.5 * np.sum((y - pred) ** 2, axis=1) / 0.25
    weight = np.exp(log_p - log_p.max())
    weight /= weight.sum()
    mean = np.sum(weight * grid)
    sd = np.sqrt(np.sum(weight * (grid - mean) ** 2))
    assert abs(draws.mean() - mean) < 4 * draws.std() / np.sqrt(ess_bulk(draws))
    assert draws.std() == pytest.approx(sd, rel=0.12)

    # resume refuses the model file once it changed, naming it; the flag accepts it
    (tmp_path / "model.py").write_text((tmp_path / "model.py").read_text() + "\n# edited\n")
    stored, stored_text = stored_run_config(tmp_path / "run")
    with pytest.raises(InputsChanged, match=r"model\.py \(model\.file\) is not the file the run began with"):
        Engine(stored, stored_text, tmp_path / "run").resume(num_samples=700)


def _check(tmp_path, source: str, seconds: float = 120):
    config, _ = _field_file_config(tmp_path, source)
    return check_model(config, seconds=seconds)


def test_check_model_passes_a_correct_model_and_flags_the_first_seed_gradient(tmp_path):
    write_field_case(tmp_path, shape=(8, 8, 8))
    assert _check(tmp_path, GAUSSIAN).ok
    seed = """
    import tensorflow as tf
    @tf.custom_gradient
    def irfft3d(x):
        def grad_fn(dy):
            return tf.signal.rfft3d(dy)
        return tf.signal.irfft3d(x), grad_fn

    def log_likelihood(field, params, data):
        r = data["data"] - irfft3d(tf.signal.rfft3d(field))
        return -0.5 * tf.reduce_sum(r * r)
    """
    report = _check(tmp_path, seed)
    assert len(report.problems) == 1
    assert "with respect to the field" in report.problems[0] and "of the order of N = 512" in report.problems[0]


@pytest.mark.parametrize("body, expected", [
    ("return -0.5 * tf.reduce_sum(tf.square(wrong_sign(data['data'] - field)))", "the wrong sign"),
    ("return -0.5 * tf.reduce_sum(tf.square(data['data'] - tf.stop_gradient(field)))", "is missing"),
    ("return -0.5 * tf.reduce_sum(tf.square(data['data'] - field)) * params['b1'] ** 2 * 3 + "
     "scaled(params['b1'])", "with respect to b1 at"),
    ("return -0.5 * tf.reduce_sum(tf.square(data['data'] - field)) + tf.math.log(params['b1'] - 5.0)",
     "the log-likelihood of .*lik.py is nan"),
])
def test_check_model_flags_wrong_gradients_and_nan(tmp_path, body, expected):
    write_field_case(tmp_path, shape=(8, 8, 8))
    source = f"""
    import tensorflow as tf
    PARAMETERS = {{"b1": {{"dist": "normal", "loc": 0.0, "scale": 1.0}}}}

    @tf.custom_gradient
    def wrong_sign(x):
        return x, lambda dy: -dy

    @tf.custom_gradient
    def scaled(x):
        return x, lambda dy: 10.0 * dy

    def log_likelihood(field, params, data):
        {body}
    """
    import re

    report = _check(tmp_path, source)
    assert len(report.problems) == 1 and re.search(expected, report.problems[0]), report.problems


@pytest.mark.parametrize("source, expected", [
    ("def log_likelihood(field, params, data)\n    return 0.0\n", r"lik\.py:1: SyntaxError"),
    ("import no_such_module_anywhere\n", r"lik\.py:1: ModuleNotFoundError: No module named"),
    ("import tensorflow as tf\nPARAMETERS = {}\n", "defines no log_likelihood"),
    ("def log_likelihood(field, data):\n    return 0.0\n", "log_likelihood must take 3 arguments"),
    ("import tensorflow as tf\ndef log_likelihood(field, params, data):\n    return field\n",
     r"returned shape \(8, 8, 8\), not a scalar"),
    ("import tensorflow as tf\ndef log_likelihood(field, params, data):\n"
     "    return tf.constant(0.0, tf.float64)\n", "returned float64, the model runs in float32"),
    ("import sys\nsys.exit(3)\n", r"lik\.py:2: the model file called sys\.exit\(3\)"),
    ("def log_likelihood(field, params, data):\n    raise ValueError('bad bias')\n",
     r"lik\.py:2: ValueError: bad bias \(in log_likelihood\)"),
    ("PARAMETERS = {'b1': {'dist': 'gamma'}}\ndef log_likelihood(field, params, data):\n    return 0.0\n",
     r"PARAMETERS\['b1'\]"),
    ("import time\ntime.sleep(30)\n", r"lik\.py:2: the model file's code ran for more than 2 s"),
])
def test_hostile_model_files_end_in_one_line(tmp_path, source, expected):
    import re

    write_field_case(tmp_path, shape=(8, 8, 8))
    report = _check(tmp_path, source, seconds=2)
    assert len(report.problems) == 1 and "\n" not in report.problems[0]
    assert re.search(expected, report.problems[0]), report.problems


def test_a_run_refuses_a_wrong_gradient_before_it_starts(tmp_path):
    write_field_case(tmp_path, shape=(8, 8, 8))
    config, text = _field_file_config(tmp_path, """
    import tensorflow as tf
    @tf.custom_gradient
    def double(x):
        return x, lambda dy: 2.0 * dy

    def log_likelihood(field, params, data):
        return -0.5 * tf.reduce_sum(tf.square(data["data"] - double(field)))
    """)
    with pytest.raises(EngineError, match="the model file's check before the run failed: .*with respect to the field"):
        Engine(config, text, tmp_path / "run").start()


def test_simulate_gets_a_seed_numpy_and_tensorflow_both_take(tmp_path):
    from core.engine.calibrate import simulate_batch

    (tmp_path / "series.csv").write_text("y\n" + "".join(f"{v}\n" for v in np.linspace(0, 1, 5)))
    (tmp_path / "m.py").write_text(textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    PARAMETERS = {"mu": {"dist": "normal", "loc": 0.0, "scale": 1.0}}
    def log_likelihood(params, data):
        return -0.5 * tf.reduce_sum(tf.square(data["y"] - params["mu"]))
    def simulate(params, seed):
        return {"y": float(params["mu"]) + np.random.default_rng(seed).standard_normal(5)}
    """))
    config = parse_config('[model]\nkind = "python"\nfile = "m.py"\n[data]\npath = "series.csv"\n', base_dir=tmp_path)
    model = build_model(config)
    data, truth = simulate_batch(model, [0, 1, 2], seed=7)
    again, _ = simulate_batch(model, [2], seed=7)
    assert data["y"].shape == (3, 5) and truth[0].shape == (3, 1)
    np.testing.assert_array_equal(np.asarray(again["y"][0]), np.asarray(data["y"][2]))   # seeded by index
    assert not np.allclose(np.asarray(data["y"][0]), np.asarray(data["y"][1]))
