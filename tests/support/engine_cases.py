"""Small engine runs the engine, fault and process tests share: a field case written to disk
(a Gaussian random field through the synthetic pipeline, and its config), a run, and an
exact comparison of two run stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.config import config_from_dict, dump_config
from core.engine.engine import Control, Engine
from core.field.grid import Grid
from core.field.power_spectrum import PowerLaw
from core.field.synthetic import make_dataset, save_dataset
from core.store.run_store import RunReader, stored_run_config

DEFAULTS = dict(sigma=0.5, box=64.0, amplitude=300.0, index=-1.5, dtype="float32",
                algorithm="hmc", warmup=150, samples=300, leapfrog=10, mass=True, chains=2, seed=3,
                thin=5, chunk=25)


def field_case_document(mask: bool = False, **overrides) -> dict:
    """The config of a field case as nested dicts (``core.config``'s layout): ``DEFAULTS``
    updated with ``overrides`` (``index`` a number, or a prior table such as
    ``{"dist": "normal", "loc": -1.5, "scale": 0.3}``); ``mask``: the data file's "mask"
    array is used."""
    v = {**DEFAULTS, **overrides}
    data = {"path": "data.npz", "noise_sigma": v["sigma"]}
    if mask:
        data["mask"] = "mask"
    return {
        "model": {"kind": "field"},
        "data": data,
        "grid": {"box_size": v["box"]},
        "prior": {"kind": "power_law", "k_pivot": 0.1, "amplitude": v["amplitude"],
                  "index": v["index"]},
        "field": {"dtype": v["dtype"]},
        "sampler": {"algorithm": v["algorithm"], "num_warmup": v["warmup"],
                    "num_samples": v["samples"], "num_leapfrog_steps": v["leapfrog"],
                    "step_size": 0.1, "adapt_mass_matrix": v["mass"], "chains": v["chains"],
                    "seed": v["seed"], "thin": v["thin"], "chunk_size": v["chunk"]},
    }


def write_field_case(tmp_path: Path, shape=(16, 16, 16), mask=False, **overrides):
    """Data (tmp_path/data.npz) and config (tmp_path/run.toml, written by core.config's
    writer) of a small field run: (config, its TOML text, dataset, grid, spectrum)."""
    values = {**DEFAULTS, **overrides}
    grid = Grid(shape, values["box"])
    spectrum = PowerLaw(amplitude=values["amplitude"], index=-1.5, k_pivot=0.1)
    dataset = make_dataset(grid, spectrum, values["sigma"], mask="slab" if mask else "none",
                           mask_fraction=0.25, seed=11)
    save_dataset(tmp_path / "data.npz", dataset)
    config = config_from_dict(field_case_document(mask, **overrides), base_dir=tmp_path)
    text = dump_config(config)
    (tmp_path / "run.toml").write_text(text)
    return config, text, dataset, grid, spectrum


def run(config, text, run_dir, **kwargs):
    events = []
    engine = Engine(config, text, run_dir, emit=events.append, **kwargs)
    status = engine.start()
    return status, events


def stop_then_resume(config, text, run_dir, stop_when) -> dict:
    """Start a run in ``run_dir``, stop it after the first chunk whose progress satisfies
    ``stop_when(progress)``, then resume it from its stored config to the end -> the
    progress it had stopped at."""
    control = Control()

    def emit(event):
        if event.get("type") == "chunk" and stop_when(event["progress"]):
            control.stop = True

    assert Engine(config, text, run_dir, emit=emit, control=control).start() == "stopped"
    stopped = RunReader(run_dir)
    assert stopped.status == "stopped"
    progress = dict(stopped.progress)
    config2, text2 = stored_run_config(run_dir)
    assert Engine(config2, text2, run_dir).resume() == "finished"
    return progress


def prior_mode_variance(grid, spectrum):
    k = grid.k_magnitude_half()
    return np.where(k > 0, spectrum.evaluate(np.where(k > 0, k, 1.0)) * grid.n_cells**2 / grid.volume, 0.0)




def assert_same_run(a, b):
    ra, rb = RunReader(a), RunReader(b)
    assert ra.progress == {**rb.progress, "chunks": ra.progress["chunks"]}
    for warmup in (True, False):
        for name in ("lp", "step_size", "grad_norm", "acceptance_rate", "diverging"):
            np.testing.assert_array_equal(ra.stat(name, warmup), rb.stat(name, warmup))
        for name in ra.param_names:
            np.testing.assert_array_equal(ra.param(name, warmup), rb.param(name, warmup))
    if ra.has_field:
        np.testing.assert_array_equal(ra.field_draws(), rb.field_draws())
        np.testing.assert_array_equal(ra.field_moments()[0], rb.field_moments()[0])




def assert_eta_gradient_is_central_differences(posterior, v, eta, step: float = 1e-5) -> None:
    """The gradient of ``posterior.log_prob(v, eta)`` in eta (every chain, every hyperparameter)
    equals central differences of the density (float64 models)."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        tape.watch(eta)
        lp = tf.reduce_sum(posterior.log_prob(v, eta))
    grad = tape.gradient(lp, eta).numpy()
    for i in range(eta.shape[-1]):
        shift = np.zeros(eta.shape)
        shift[:, i] = step
        fd = (posterior.log_prob(v, eta + shift).numpy() - posterior.log_prob(v, eta - shift).numpy()) / (2 * step)
        np.testing.assert_allclose(grad[:, i], fd, rtol=1e-6, atol=1e-6)


def sampled_hyper_case(parameterisation, kind, dense_modes, preconditioner, data_scale=1.0):
    """A 4^3 float64 field model with index and amplitude sampled, a 25 % random mask, and a
    noise map and smoothing (``kind`` "gaussian") or counts ("poisson_lognormal"):
    (grid, spectrum, observations, the plain model, the model with ``preconditioner``)."""
    import math

    import tensorflow as tf

    from core.engine.field_density import FieldPosterior
    from core.field.observations import Observations
    from core.priors import LogNormalPrior, NormalPrior

    rng = np.random.default_rng(2)
    shape = (4, 4, 4)
    grid = Grid(shape, (30.0, 26.0, 34.0))
    spectrum = PowerLaw(amplitude=400.0, index=-2.0, k_pivot=0.2)
    mask = rng.random(shape) > 0.25
    if kind == "gaussian":
        obs = Observations.create(rng.normal(size=shape) * data_scale, mask=mask,
                                  noise_map=rng.uniform(0.3, 0.6, size=shape), smoothing_scale=2.0)
    else:
        obs = Observations.create(rng.poisson(3.0, size=shape).astype(float), kind="poisson_lognormal",
                                  mask=mask, mean_count=3.0, field_mean=-0.2)
    priors = {"index": NormalPrior(loc=-2.0, scale=0.3), "amplitude": LogNormalPrior(loc=math.log(400.0), scale=0.3)}
    kw = dict(hyper_priors=priors, parameterisation=parameterisation, dtype=tf.float64)
    return (grid, spectrum, obs, FieldPosterior(grid, spectrum, obs, **kw),
            FieldPosterior(grid, spectrum, obs, preconditioner=preconditioner, dense_modes=dense_modes, **kw))


def assert_index_is_exact(run_dir: Path, config):
    """The run's sampled index against the exact posterior (``core.reference.hyper_posterior``:
    the field integrated out): R-hat < 1.01, bulk ESS >= 400, the mean within 4 Monte-Carlo
    errors, the sd within 10 % -> the run's summary."""
    import math

    import pytest

    from core.reference.hyper_posterior import hyper_posterior_for_config
    from core.store.run_summary import summarize_run

    summary = summarize_run(run_dir)
    row = next(r for r in summary.rows if r.name == "index")
    exact = hyper_posterior_for_config(config)
    print(f"\nindex {row.mean:.5f} +- {row.sd:.5f} (R-hat {row.rhat:.4f}, ESS {row.ess_bulk:.0f}); exact "
          f"{exact.mean['index']:.5f} +- {exact.sd['index']:.5f}")
    assert row.rhat < 1.01 and row.ess_bulk >= 400
    assert abs(row.mean - exact.mean["index"]) < 4 * exact.sd["index"] / math.sqrt(row.ess_bulk)
    assert row.sd == pytest.approx(exact.sd["index"], rel=0.1)
    return summary
