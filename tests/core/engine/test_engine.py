"""The sampling engine and the run store against exact answers and crash scenarios.

References: the Wiener filter (closed form, and conjugate gradients with a mask), a
brute-force quadrature of the integral model's posterior, an uninterrupted run (for
resume after a stop; after kill -9 and Ctrl-C: test_engine_signals.py), and xarray reading
the store.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from core import integral as im
from core.config import parse_config
from core.engine.engine import Engine, EngineError
from core.io import save_series_csv
from core.reference.wiener import wiener_posterior
from core.run.engine_limits import unrolls
from core.store.run_store import RunReader, stored_run_config
from support.engine_cases import assert_same_run, prior_mode_variance, run, stop_then_resume, write_field_case


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


@pytest.mark.parametrize("leapfrog", [10, 40])
def test_stop_and_resume_give_the_same_draws_as_one_run(tmp_path, leapfrog):
    # L = 10: the unrolled leapfrog; L = 40: the while loop (core.run.engine_limits.unrolls)
    assert unrolls(leapfrog, 2, 8**3, 4) == (leapfrog == 10)
    config, text, *_ = write_field_case(tmp_path, warmup=60, samples=90, chunk=20, shape=(8, 8, 8),
                                        leapfrog=leapfrog)
    status, _ = run(config, text, tmp_path / "straight")
    assert status == "finished"

    stopped = stop_then_resume(config, text, tmp_path / "resumed", lambda p: p["draws"] >= 40)
    assert 40 <= stopped["draws"] < 90
    assert_same_run(tmp_path / "straight", tmp_path / "resumed")


def test_extending_a_finished_run_equals_a_longer_run(tmp_path):
    config, text, *_ = write_field_case(tmp_path, warmup=40, samples=80, chunk=30, shape=(8, 8, 8))
    run(config, text, tmp_path / "long")
    short_cfg, short_text, *_ = write_field_case(tmp_path, warmup=40, samples=50, chunk=30, shape=(8, 8, 8))
    run(short_cfg, short_text, tmp_path / "short")
    cfg, txt = stored_run_config(tmp_path / "short")
    assert Engine(cfg, txt, tmp_path / "short").resume(num_samples=80) == "finished"
    ra, rb = RunReader(tmp_path / "long"), RunReader(tmp_path / "short")
    np.testing.assert_array_equal(ra.stat("lp"), rb.stat("lp"))
    np.testing.assert_array_equal(ra.param("index") if ra.param_names else ra.stat("grad_norm"),
                                  rb.param("index") if rb.param_names else rb.stat("grad_norm"))


def test_resume_refuses_a_finished_run_and_a_damaged_checkpoint(tmp_path):
    config, text, *_ = write_field_case(tmp_path, warmup=10, samples=10, shape=(8, 8, 8))
    run(config, text, tmp_path / "run")
    cfg, txt = stored_run_config(tmp_path / "run")
    with pytest.raises(EngineError, match="already finished"):
        Engine(cfg, txt, tmp_path / "run").resume()
    with pytest.raises(EngineError, match="would not add any"):
        Engine(cfg, txt, tmp_path / "run").resume(num_samples=5)
    with np.load(tmp_path / "run" / "checkpoint.npz") as data:
        kept = {k: data[k] for k in data.files if k != "state_0"}
    np.savez(tmp_path / "run" / "checkpoint.npz", **kept)
    with pytest.raises(EngineError, match="incomplete or damaged"):
        Engine(cfg, txt, tmp_path / "run").resume(num_samples=20)


def test_a_checkpoint_with_the_older_pooled_adaptation_sums_resumes(tmp_path):
    """Checkpoints from before issue #34 hold the diagonal's Welford sums pooled over the chains,
    (1, ...) a part; each chain takes them (``core.engine.checkpoint``) and the run finishes."""
    from core.engine.engine import Control

    config, text, *_ = write_field_case(tmp_path, warmup=60, samples=20, chunk=20, shape=(8, 8, 8))
    assert config.sampler.preconditioner == "diagonal"
    control = Control()

    def emit(event):          # stop after the first chunk: inside the window [9, 45)
        if event.get("type") == "chunk":
            control.stop = True

    assert Engine(config, text, tmp_path / "run", emit=emit, control=control).start() == "stopped"
    path = tmp_path / "run" / "checkpoint.npz"
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    assert arrays["mass_mean_0"].shape == (2, 8, 8, 8) and float(arrays["mass_count"]) == 11.0
    for key in ("mass_mean_0", "mass_m2_0"):
        arrays[key] = arrays[key].mean(axis=0, keepdims=True)           # the older layout
    np.savez(path, **arrays)
    cfg, txt = stored_run_config(tmp_path / "run")
    assert Engine(cfg, txt, tmp_path / "run").resume() == "finished"
    reader = RunReader(tmp_path / "run")
    assert reader.stat("lp").shape == (2, 20) and np.all(np.isfinite(reader.stat("lp")))


def test_seed_reproducibility(tmp_path):
    config, text, *_ = write_field_case(tmp_path, warmup=20, samples=30, shape=(8, 8, 8))
    run(config, text, tmp_path / "a")
    run(config, text, tmp_path / "b")
    assert_same_run(tmp_path / "a", tmp_path / "b")
    other, other_text, *_ = write_field_case(tmp_path, warmup=20, samples=30, shape=(8, 8, 8), seed=4)
    run(other, other_text, tmp_path / "c")
    assert not np.array_equal(RunReader(tmp_path / "a").stat("lp"), RunReader(tmp_path / "c").stat("lp"))


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
