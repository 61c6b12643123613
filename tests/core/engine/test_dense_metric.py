"""The dense metric of sampled hyperparameters (``core.engine.adaptation.metric``, ``welford``'s
dense sums, ``mass_matrix.adapted_scale``): the change of variables against dense linear algebra
and the chain rule, the covariance against numpy's, and a run with an amplitude and an index
sampled (correlated -0.9 and more in the exact posterior) that adapts their covariance, samples
the exact posterior and resumes draw for draw."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from core.engine.adaptation import Welford, adapted_scale, pooled, welford_fresh, welford_update
from core.engine.adaptation.metric import grad_to_x, grad_to_z, marginal_sd, rescaled, to_x, to_z


def _factor(rng, chains, d):
    a = rng.normal(size=(chains, d, d))
    return np.linalg.cholesky(a @ np.swapaxes(a, 1, 2) + d * np.eye(d))


def test_the_change_of_variables_is_x_equal_L_z_with_its_chain_rule():
    rng = np.random.default_rng(0)
    L = _factor(rng, 2, 3)
    s0 = rng.uniform(0.5, 2.0, size=(2, 4))
    scale = [tf.constant(s0), tf.constant(L)]
    z = [tf.constant(rng.normal(size=(2, 4))), tf.constant(rng.normal(size=(2, 3)))]
    x = to_x(scale, z)
    np.testing.assert_allclose(x[0].numpy(), s0 * z[0].numpy())
    np.testing.assert_allclose(x[1].numpy(), np.einsum("cij,cj->ci", L, z[1].numpy()), rtol=1e-13)
    back = to_z(scale, x)
    for a, b in zip(back, z):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(marginal_sd(scale[1], z[1]).numpy(), np.sqrt(np.einsum("cij,cij->ci", L, L)))

    # a quadratic log-density: its gradient in z by autodiff equals grad_to_z of the one in x
    A = rng.normal(size=(3, 3))
    A = A @ A.T + np.eye(3)

    def logp_x(parts):
        return -0.5 * tf.reduce_sum(parts[0] ** 3) - 0.5 * tf.einsum("ci,ij,cj->", parts[1], A, parts[1])

    with tf.GradientTape() as tape:
        tape.watch(z)
        lz = logp_x(to_x(scale, z))
    gz = tape.gradient(lz, z)
    with tf.GradientTape() as tape:
        tape.watch(x)
        lx = logp_x(x)
    gx = tape.gradient(lx, x)
    for a, b in zip(grad_to_z(scale, gx), gz):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    for a, b in zip(grad_to_x(scale, gz), gx):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)

    # a new metric (diagonal -> dense): the same x, and the gradient of the same density in z'
    new = [tf.constant(s0 * 1.5), tf.constant(_factor(rng, 2, 3))]
    diag_old = [scale[0], tf.constant(rng.uniform(0.5, 2.0, size=(2, 3)))]
    z_new, g_new = rescaled(diag_old, new, z, grad_to_z(diag_old, gx))
    for a, b in zip(to_x(new, z_new), to_x(diag_old, z)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-13)
    for a, b in zip(g_new, grad_to_z(new, gx)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-11)


def test_the_dense_sums_are_numpys_covariance_and_their_diagonal_the_diagonals():
    """Each chain's sums are the sample covariance of its draws (np.cov), the diagonal of the
    dense sums equals the diagonal sums', and pooled over groups of 2 chains they are the
    sample covariance of the group's draws together (np.cov of both chains' 400 draws)."""
    rng = np.random.default_rng(1)
    draws = rng.normal(size=(200, 4, 3)) @ np.array([[1.0, 0.8, 0.0], [0.0, 0.6, 0.3], [0.0, 0.0, 0.2]])
    draws[:, 1] += 0.3            # chains with different means: the pooled sums count the spread
    like = [tf.zeros((4, 3), tf.float64)]
    dense = welford_fresh(like, tf.float64, dense=(0,))
    diag = welford_fresh(like, tf.float64)
    for x in draws:
        dense = welford_update(dense, [tf.constant(x)])
        diag = welford_update(diag, [tf.constant(x)])
    assert dense.m2[0].shape == (4, 3, 3)
    np.testing.assert_allclose(np.diagonal(dense.m2[0].numpy(), axis1=1, axis2=2), diag.m2[0].numpy(),
                               rtol=1e-12)
    for c in range(4):
        np.testing.assert_allclose(dense.m2[0].numpy()[c] / 199.0, np.cov(draws[:, c].T), rtol=1e-10)
    n, means, m2 = pooled(dense, 2)
    assert n == 400.0
    for g in range(2):
        together = draws[:, 2 * g:2 * g + 2].reshape(-1, 3)
        np.testing.assert_allclose(means[0].numpy()[g], together.mean(axis=0), rtol=1e-12)
        np.testing.assert_allclose(m2[0].numpy()[g] / (n - 1), np.cov(together.T), rtol=1e-10)
    # the factor: L L^T is Stan's regularised covariance, repeated over each group's chains
    scale = adapted_scale(Welford(dense.count, dense.mean, dense.m2), 4, groups=2)
    for c in range(4):
        cov = np.cov(draws[:, 2 * (c // 2):2 * (c // 2) + 2].reshape(-1, 3).T)
        want = (n / (n + 5)) * cov + 1e-3 * (5 / (n + 5)) * np.eye(3)
        L = scale[0].numpy()[c]
        np.testing.assert_allclose(L @ L.T, want, rtol=1e-10)
        assert np.allclose(L, np.tril(L))


def _two_hyperparameter_case(tmp_path, mask=False, **overrides):
    """12^3 float64 field, noise 0.1, amplitude (lognormal) and index (normal) sampled with
    "conditional" and MCLMC (a new config's sampler): (config, text)."""
    from core.config import config_from_dict, dump_config
    from support.engine_cases import field_case_document, write_field_case

    settings = {**dict(shape=(12, 12, 12), sigma=0.1, dtype="float64", algorithm="mclmc", mass=False, warmup=300,
                       samples=600, chunk=100, thin=20), **overrides}
    write_field_case(tmp_path, mask=mask, **settings)
    settings.pop("shape")
    doc = field_case_document(mask, **settings)
    doc["prior"]["amplitude"] = {"dist": "lognormal", "loc": math.log(300.0), "scale": 1.0}
    doc["prior"]["index"] = {"dist": "normal", "loc": -1.5, "scale": 0.5}
    doc["sampler"]["preconditioner"] = "conditional"
    config = config_from_dict(doc, base_dir=tmp_path)
    return config, dump_config(config)


def test_two_sampled_hyperparameters_get_their_covariance_and_the_exact_posterior(tmp_path):
    """The driver starts the pair with their curvature's diagonal as a triangular factor,
    sets their window covariance's factor at the window's end (the correlation within 0.1 of the
    exact one, about -0.95), and the run's draws match the exact posterior (the field integrated
    out: ``hyper_posterior``): means within 4 Monte-Carlo errors, sd within 15 %, correlation
    within 0.05; R-hat < 1.01."""
    from core.engine.driver import Driver, hyper_metric, schedule_for
    from core.engine.models import build_model
    from core.reference.hyper_posterior import hyper_posterior_for_config
    from core.store.run_store import RunReader
    from core.store.run_summary import summarize_run
    from support.engine_cases import run

    config, text = _two_hyperparameter_case(tmp_path)
    exact = hyper_posterior_for_config(config)
    assert exact.names == ("amplitude", "index")
    rho = exact.eta_corr[0, 1]
    assert rho < -0.9

    driver = Driver(build_model(config), config.sampler, schedule_for(config), hyper_metric=hyper_metric(config))
    st = driver.fresh_state()
    start = st["scale"][1].numpy()
    assert start.shape == (2, 2, 2) and np.all(start[:, 0, 1] == 0) and np.all(start[:, 1, 0] == 0)
    for first, n in driver.schedule.boundaries(0):
        if first >= driver.schedule.mass_end:
            break
        driver.advance(st, driver.run_chunk(st, first, n), first, n)
        x_end = to_x(st["scale"], st["state"])
        driver.at_boundary(st)
    for a, b in zip(to_x(st["scale"], st["state"]), x_end):       # the rescale keeps x
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)
    L = st["scale"][1].numpy()
    cov = L @ np.swapaxes(L, 1, 2)
    window_rho = cov[:, 0, 1] / np.sqrt(cov[:, 0, 0] * cov[:, 1, 1])
    print(f"\nexact correlation {rho:.3f}, the window's {window_rho}")
    np.testing.assert_allclose(window_rho, rho, atol=0.1)

    assert run(config, text, tmp_path / "run")[0] == "finished"
    reader = RunReader(tmp_path / "run")
    summary = summarize_run(tmp_path / "run")
    draws = {name: reader.param(name, False).reshape(-1) for name in exact.names}
    for name in exact.names:
        row = next(r for r in summary.rows if r.name == name)
        print(f"{name}: {row.mean:.5g} +- {row.sd:.4g} (R-hat {row.rhat:.4f}, ESS {row.ess_bulk:.0f}); "
              f"exact {exact.mean[name]:.5g} +- {exact.sd[name]:.4g}")
        assert row.rhat < 1.01
        assert abs(row.mean - exact.mean[name]) < 4 * exact.sd[name] / math.sqrt(row.ess_bulk)
        assert row.sd == pytest.approx(exact.sd[name], rel=0.15)
    sampled_rho = np.corrcoef(np.log(draws["amplitude"]), draws["index"])[0, 1]
    print(f"correlation of the draws {sampled_rho:.3f}")
    assert sampled_rho == pytest.approx(rho, abs=0.05)


def test_a_run_with_a_dense_metric_stopped_and_resumed_draws_the_same(tmp_path):
    """Stopped inside the covariance's window (the dense sums in the checkpoint), resumed,
    stopped again after it (the factor), resumed to the end: every draw equals a run
    straight through."""
    from core.engine.driver import schedule_for
    from core.engine.engine import Control, Engine
    from core.store.run_store import stored_run_config
    from support.engine_cases import assert_same_run, run

    config, text = _two_hyperparameter_case(tmp_path, warmup=200, samples=100, chunk=25)
    window = schedule_for(config)
    assert window.mass_start < 100 < window.mass_end < 200
    assert run(config, text, tmp_path / "straight")[0] == "finished"
    run_dir, stops = tmp_path / "stopped", []
    for when in (lambda p: p["warmup_draws"] >= 100, lambda p: p["draws"] >= 25, None):
        control = Control()

        def emit(event, when=when, control=control):
            if when is not None and event.get("type") == "chunk" and when(event["progress"]):
                control.stop = True
        engine = (Engine(config, text, run_dir, emit=emit, control=control) if not stops else
                  Engine(*stored_run_config(run_dir), run_dir, emit=emit, control=control))
        stops.append(engine.resume() if stops else engine.start())
    assert stops == ["stopped", "stopped", "finished"]
    assert_same_run(run_dir, tmp_path / "straight")


def test_a_runaway_window_covariance_shrinks_to_the_curvatures_marginal_sd_keeping_its_correlation(tmp_path):
    """Without a mask, at the window's end a coordinate whose window sd is above RUNAWAY_SCALE x
    the marginal sd of the inverse curvature H^-1 (the exact posterior's there; not the
    diagonal's conditional sd, 5x smaller at correlation -0.98) has its row of the factor
    shrunk to it; the window's correlation is kept. The window's sums are set by hand: its
    covariance the curvature's times 10^2 and 1.5^2, pooled over the chains."""
    from core.engine import driver as drv
    from core.engine.models import build_model

    config, _ = _two_hyperparameter_case(tmp_path)
    model = build_model(config)
    assert model.posterior.modes_independent
    for factor in (10.0, 1.5):
        d = drv.Driver(model, config.sampler, drv.schedule_for(config), hyper_metric=True)
        st = d.fresh_state()
        x = to_x(st["scale"], st["state"])
        curvature = d._curvature_scale(x, None, dense=True).numpy()
        c_cov = curvature @ np.swapaxes(curvature, 1, 2)
        count, mean, m2 = st["mass_acc"]
        steps, chains = 1000.0, int(x[1].shape[0])
        n = steps * chains                     # the draws pooled (every chain's sums: mean 0, m2 its share)
        window = factor**2 * c_cov.mean(axis=0)
        share = np.broadcast_to((n - 1) / chains * window, (chains, 2, 2))
        st["mass_acc"] = (tf.constant(steps, count.dtype), mean, [m2[0] + steps, tf.constant(share)])
        st["step"] = d.schedule.mass_end
        d._rescale_at_mass_end(st, None)
        L = st["scale"][1].numpy()
        cov = L @ np.swapaxes(L, 1, 2)
        sd, c_sd = np.sqrt(np.diagonal(cov, axis1=1, axis2=2)), np.sqrt(np.diagonal(c_cov, axis1=1, axis2=2))
        rho = cov[:, 0, 1] / (sd[:, 0] * sd[:, 1])
        stan = (n / (n + 5)) * window + 1e-3 * (5 / (n + 5)) * np.eye(2)      # adapted_scale's
        want_rho = stan[0, 1] / np.sqrt(stan[0, 0] * stan[1, 1])
        np.testing.assert_allclose(rho, want_rho, rtol=1e-6)
        assert want_rho < -0.9
        if factor > drv.RUNAWAY_SCALE:
            np.testing.assert_allclose(sd, c_sd, rtol=1e-6)
        else:
            np.testing.assert_allclose(sd, np.broadcast_to(np.sqrt(np.diagonal(stan)), sd.shape), rtol=1e-9)
