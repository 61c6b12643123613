"""The sampling engine and the run store against exact answers and crash scenarios.

References: the Wiener filter (closed form, and conjugate gradients with a mask), a
brute-force quadrature of the integral model's posterior, and xarray reading the store. A stop
and resume against an uninterrupted run: test_engine_resume.py (after kill -9 and Ctrl-C:
test_engine_signals.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from core import integral as im
from core.config import parse_config
from core.engine.engine import EngineError
from core.io import save_series_csv
from core.reference.wiener import wiener_posterior
from core.store.run_store import RunReader
from support.engine_cases import prior_mode_variance, run, write_field_case


def test_gaussian_field_matches_the_wiener_filter(tmp_path):
    config, text, data, grid, spectrum = write_field_case(tmp_path, warmup=200, samples=600, chains=4)
    status, events = run(config, text, tmp_path / "run")
    assert status == "finished"
    reader = RunReader(tmp_path / "run")
    mean, std, count = reader.field_moments()
    assert count == 4 * 600
    exact = wiener_posterior(data.data, prior_mode_variance(grid, spectrum), 0.5)
    assert exact.mean_method == "closed_form"
    rms_diff = np.sqrt(np.mean((mean - exact.mean) ** 2))
    posterior_sd = float(np.mean(exact.std))
    assert rms_diff < 0.25 * posterior_sd, (rms_diff, posterior_sd)
    assert np.mean(std) == pytest.approx(posterior_sd, rel=0.05)
    # the stored P(k) of each field draw equals core's estimator on that draw
    from core.field.power_estimator import measure_power
    k, counts, power = reader.powers()
    draw = reader.field_draws(chain=0, draws=slice(-1, None))[0]
    np.testing.assert_allclose(power[0, -1], measure_power(draw.astype(np.float64), grid).power, rtol=1e-4)


def test_masked_field_mean_matches_conjugate_gradient_wiener(tmp_path):
    config, text, data, grid, spectrum = write_field_case(tmp_path, mask=True, warmup=200, samples=600,
                                                          chains=4, leapfrog=15)
    status, _ = run(config, text, tmp_path / "run")
    assert status == "finished"
    mean, std, _ = RunReader(tmp_path / "run").field_moments()
    exact = wiener_posterior(np.where(data.mask, data.data, 0.0), prior_mode_variance(grid, spectrum), 0.5,
                             mask=data.mask, std="sample", n_samples=64, rng=np.random.default_rng(0))
    assert exact.mean_method == "cg" and exact.converged
    rms_diff = np.sqrt(np.mean((mean - exact.mean) ** 2))
    assert rms_diff < 0.25 * float(np.mean(exact.std)), rms_diff
    assert np.mean(std) == pytest.approx(float(np.mean(exact.std)), rel=0.08)


@pytest.mark.parametrize("algorithm", ["hmc", "nuts"])
def test_integral_model_posterior_matches_quadrature(tmp_path, algorithm):
    series = im.make_demo_series(5, n=40)
    save_series_csv(tmp_path / "series.csv", series.t, series.y)
    text = """\
[model]
kind = "integral"
[data]
path = "series.csv"
[integral]
refine = 4
[prior]
A = { dist = "normal", loc = 0.0, scale = 1.0 }
c = { dist = "normal", loc = 0.0, scale = 10.0 }
sigma = 0.5
[sampler]
algorithm = "{algorithm}"
num_warmup = 300
num_samples = 1500
num_leapfrog_steps = 8
step_size = 0.01
adapt_mass_matrix = true
chains = 4
seed = 9
thin = 1
chunk_size = 200
""".replace("{algorithm}", algorithm)
    config = parse_config(text, base_dir=tmp_path)
    status, _ = run(config, text, tmp_path / "run")
    assert status == "finished"
    reader = RunReader(tmp_path / "run")
    draws = reader.param("A")
    if algorithm == "nuts":   # NUTS chooses its own trajectory lengths
        assert len(np.unique(reader.stat("n_steps"))) > 1
    spec = im.IntegralModelSpec(series.t, series.y, refine=4,
                                priors={"A": {"dist": "normal", "loc": 0.0, "scale": 1.0},
                                        "c": {"dist": "normal", "loc": 0.0, "scale": 10.0}, "sigma": 0.5})
    exact = im.posterior_quadrature(spec)
    from core.store.diagnostics import ess_bulk
    mc_error = draws.std() / np.sqrt(ess_bulk(draws))
    assert abs(draws.mean() - exact.mean["A"]) < 4 * mc_error
    assert draws.std() == pytest.approx(exact.sd["A"], rel=0.1)


def test_divergences_are_recorded_and_rejected(tmp_path):
    """A low target acceptance drives dual averaging to steps beyond the leapfrog's stability
    limit, where trajectories blow up (from a huge first guess, which the initial search brings
    down first): recorded, rejected, no crash."""
    config, text, *_ = write_field_case(tmp_path, warmup=30, samples=20, shape=(8, 8, 8), mass=False)
    text = text.replace("step_size = 0.1", "step_size = 80.0").replace("target_accept = 0.75",
                                                                       "target_accept = 0.05")
    assert "target_accept = 0.05" in text
    config = parse_config(text, base_dir=tmp_path)
    status, _ = run(config, text, tmp_path / "run")
    assert status == "finished"
    reader = RunReader(tmp_path / "run")
    diverging = reader.stat("diverging", warmup=True)
    assert diverging[:, 1:].any(axis=1).all()
    lp = reader.stat("lp", warmup=True)
    assert np.isfinite(lp).all()
    stayed = lp[:, 1:] == lp[:, :-1]                          # the chain stayed where it was
    assert stayed[diverging[:, 1:]].all()
    assert (reader.stat("acceptance_rate", warmup=True)[diverging] == 0).all()


def test_non_finite_initial_density_is_a_clear_error(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "counts.npz", data=rng.poisson(2.0, size=(8, 8, 8)).astype(float))
    text = """\
[model]
kind = "field"
[data]
path = "counts.npz"
noise_sigma = 1.0
[grid]
box_size = 10.0
[likelihood]
kind = "poisson_lognormal"
mean_count = 1e308
[prior]
kind = "power_law"
amplitude = 1.0
index = -1.0
[field]
dtype = "float64"
[sampler]
num_warmup = 10
num_samples = 10
"""
    # (in float32 the config itself refuses 1e308: tests/core/config/test_limits.py)
    text = text.replace("noise_sigma = 1.0\n", "")
    config = parse_config(text, base_dir=tmp_path)
    with pytest.raises(EngineError, match="not finite at the initial state") as err:
        run(config, text, tmp_path / "run")
    assert "likelihood" in str(err.value)      # the term that is not finite is named


def test_store_opens_with_xarray(tmp_path):
    import xarray as xr

    config, text, *_ = write_field_case(tmp_path, warmup=20, samples=30, shape=(8, 8, 8),
                                        index={"dist": "normal", "loc": -1.5, "scale": 0.3})
    run(config, text, tmp_path / "run")
    tree = xr.open_datatree(tmp_path / "run" / "run.zarr", engine="zarr")
    assert tree["posterior"].dataset["index"].shape == (2, 30)
    assert tree["sample_stats"].dataset["diverging"].dtype == bool
    assert tree["sample_stats"].dataset["n_steps"].dtype.kind == "i"
    assert tree["posterior_field"].dataset["field"].shape == (2, 6, 8, 8, 8)
    np.testing.assert_array_equal(tree["posterior_field"].dataset["field_draw"].values, np.arange(0, 30, 5))
    assert tree.attrs["status"] == "finished" and "[sampler]" in tree.attrs["config"]


def test_every_event_of_a_run_is_as_core_run_messages_defines_it(tmp_path):
    from core.run import messages

    config, text, *_ = write_field_case(tmp_path, shape=(8, 8, 8), warmup=20, samples=30,
                                        chunk=10, chains=2)
    status, events = run(config, text, tmp_path / "run")
    assert status == "finished"
    for event in events:
        messages.check_event(event)
    statuses = [e["status"] for e in events if e["type"] == "status"]
    assert statuses[:3] == ["loading", "compiling", "warmup"] and statuses[-1] == "finished"
    assert "estimate" in events[0] and "progress" in events[-1]
    # where it computes, in the compiling event and the store (no GPU here: the CPU's threads)
    device = events[1]["device"]
    assert device.startswith("GPU: ") if tf.config.list_physical_devices("GPU") else \
        device.startswith("CPU (") and device.endswith(" threads)")
    assert RunReader(tmp_path / "run").attrs["device"] == device
    from core.store.run_summary import summarize_run
    assert f"warmup (on {device})" in summarize_run(tmp_path / "run").text()
    chunks = [e for e in events if e["type"] == "chunk"]
    assert chunks[0]["stats"]["lp"].shape == (2, chunks[0]["n_steps"])
    # the first chunk compiled its program: no rate (an ETA from it read hours); the last has one
    assert chunks[0]["steps_per_second"] == 0.0 and chunks[-1]["steps_per_second"] > 0.0
    assert chunks[-1]["latest_field"].shape == (2, 8, 8, 8)
    assert chunks[-1]["moments"][0].shape == (8, 8, 8)
    assert chunks[-1]["progress"] == {"warmup_draws": 20, "draws": 30, "field_draws": 6,
                                      "chunks": len(chunks)}


def test_field_moments_equal_the_moments_of_every_draw_with_a_large_field_mean(tmp_path):
    """Every post-warmup draw kept (thin 1): the stored mean and std (the chunk's float32 sums of
    x - field_mean folded into float64 totals, Engine._fold_moments) equal numpy's float64 ones
    of the stored draws, with a field mean 200x the posterior sd (its squares dominate x^2)."""
    from core.config import config_from_dict, dump_config
    from support.engine_cases import field_case_document

    write_field_case(tmp_path, shape=(8, 8, 8))
    with np.load(tmp_path / "data.npz") as f:
        arrays = dict(f)
    arrays["data"] = arrays["data"] + 60.0
    np.savez(tmp_path / "data.npz", **arrays)
    doc = field_case_document(shape=(8, 8, 8), warmup=20, samples=45, chunk=16, thin=1, leapfrog=4)
    doc["likelihood"] = {"kind": "gaussian", "field_mean": 60.0}
    config = config_from_dict(doc, base_dir=tmp_path)
    status, _ = run(config, dump_config(config), tmp_path / "run")
    assert status == "finished"
    reader = RunReader(tmp_path / "run")
    draws = reader.field_draws().astype(np.float64)           # (chains, 45, 8, 8, 8)
    mean, std, count = reader.field_moments()
    assert count == draws.shape[0] * draws.shape[1] == 90
    flat = draws.reshape(-1, *draws.shape[2:])
    assert abs(float(flat.mean()) - 60.0) < 1.0 and float(flat.std(axis=0).mean()) < 0.3
    np.testing.assert_allclose(mean, flat.mean(axis=0), rtol=0, atol=2e-5)
    np.testing.assert_allclose(std, flat.std(axis=0, ddof=1), rtol=2e-4)
