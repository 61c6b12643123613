"""MCLMC and MAMS (core.engine.microcanonical) against BlackJAX and against exact answers.

References: BlackJAX's isokinetic McLachlan integrator and MCLMC kernel on the same inputs and the
same noise (float64, a correlated Gaussian in two state parts); a Gaussian's exact mean and std
(tolerances from the measured ESS); the engine's runs against the exact Wiener posterior of a
tiny field, and against an uninterrupted run (resume).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from core.engine import microcanonical as mc
from core.engine.adaptation.mclmc_tuning import DESIRED_ENERGY_VAR, HYPER_ENERGY_VAR, MclmcTuning
from core.engine.adaptation.microcanonical_stages import StagedTuning
from core.engine.samplers import mclmc as mclmc_kernel
from core.samplers import MAMS_HYPER_STEPS_PER_L, MAMS_STEPS_PER_L

SHAPES = [(3,), (2, 2)]      # two state parts, 7 coordinates per chain


def _precision(seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(7, 7))
    return a @ a.T / 7 + np.diag(np.linspace(0.5, 4.0, 7))


def _tf_target(precision):
    p = tf.constant(precision, tf.float64)

    def target(a, b):
        x = tf.concat([tf.reshape(a, [tf.shape(a)[0], -1]), tf.reshape(b, [tf.shape(b)[0], -1])], axis=1)
        return -0.5 * tf.einsum("ci,ij,cj->c", x, p, x)
    return target


#: x -> (log p, gradient, aux) as the samplers evaluate the density
_value_and_grad = mc.value_and_grad_fn


def _split(flat):
    return [flat[:3].reshape(3), flat[3:].reshape(2, 2)]


def test_one_integrator_step_and_one_mclmc_step_equal_blackjax():
    pytest.importorskip("blackjax")
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from blackjax.mcmc import integrators, mclmc
    from jax.flatten_util import ravel_pytree

    precision = _precision()
    pj = jnp.asarray(precision)

    def logdensity(position):
        x, _ = ravel_pytree(position)
        return -0.5 * x @ pj @ x

    rng = np.random.default_rng(1)
    x0 = rng.normal(size=7)
    u0 = rng.normal(size=7)
    u0 /= np.linalg.norm(u0)
    position = [jnp.asarray(p) for p in _split(x0)]
    state = integrators.IntegratorState(position, [jnp.asarray(p) for p in _split(u0)],
                                        *jax.value_and_grad(logdensity)(position))
    step, L = 0.7, 2.3

    target = _tf_target(precision)
    vg = _value_and_grad(target)
    x_tf = [tf.constant(p[None]) for p in _split(x0)]
    u_tf = [tf.constant(p[None]) for p in _split(u0)]
    lp_tf, g_tf, _ = vg(x_tf)
    eps = tf.constant([step], tf.float64)

    # the deterministic integrator step
    bj_state, bj_kinetic = integrators.isokinetic_mclachlan(logdensity)(state, step)
    x1, u1, lp1, g1, _, kinetic = mc.isokinetic_mclachlan(vg, x_tf, u_tf, g_tf, eps, 7)
    for ours, theirs in ((x1, bj_state.position), (u1, bj_state.momentum), (g1, bj_state.logdensity_grad)):
        for o, t in zip(ours, theirs):
            np.testing.assert_allclose(o.numpy()[0], np.asarray(t), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lp1.numpy()[0], float(bj_state.logdensity), rtol=1e-12)
    np.testing.assert_allclose(kinetic.numpy()[0], float(bj_kinetic), rtol=1e-10, atol=1e-12)

    # a whole MCLMC step with BlackJAX's noise: its key splits, as mclmc.build_kernel draws them
    key = jax.random.key(3)
    kernel_key, _, _ = jax.random.split(key, 3)
    key1, key2 = jax.random.split(kernel_key)
    noise = [[tf.constant(p[None]) for p in _split(np.asarray(jax.random.normal(k, (7,), jnp.float64)))]
             for k in (key1, key2)]
    bj_next, bj_info = mclmc.build_kernel()(key, state, logdensity, 1.0, L, step)
    x2, u2, lp2, g2, _, energy, ok = mc.mclmc_transition(
        vg, x_tf, u_tf, lp_tf, g_tf, eps, tf.constant([L], tf.float64), noise[0], noise[1])
    assert bool(ok.numpy()[0]) and bool(bj_info.nonans)
    for ours, theirs in ((x2, bj_next.position), (u2, bj_next.momentum)):
        for o, t in zip(ours, theirs):
            np.testing.assert_allclose(o.numpy()[0], np.asarray(t), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(energy.numpy()[0], float(bj_info.energy_change), rtol=1e-9, atol=1e-12)


def test_a_non_finite_step_is_undone_with_a_fresh_velocity():
    def target(a, b):   # log-density -inf beyond |x| > 1.5 for the first coordinate
        x0 = a[:, 0]
        return tf.where(tf.abs(x0) < 1.5, -0.5 * tf.reduce_sum(a * a, 1) - 0.5 * tf.reduce_sum(b * b, [1, 2]),
                        tf.constant(-np.inf, tf.float64))
    vg = _value_and_grad(target)
    x = [tf.constant([[1.4, 0.0, 0.0], [0.0, 0.0, 0.0]], tf.float64), tf.zeros([2, 2, 2], tf.float64)]
    u = [tf.constant([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], tf.float64), tf.zeros([2, 2, 2], tf.float64)]
    lp, g, _ = vg(x)
    zero = [tf.zeros_like(p) for p in x]
    reset = [tf.ones_like(p) for p in x]
    x2, u2, lp2, g2, _, energy, ok = mc.mclmc_transition(vg, x, u, lp, g, tf.constant([1.0, 1.0], tf.float64),
                                                          tf.constant([np.inf, np.inf], tf.float64), zero, reset)
    assert ok.numpy().tolist() == [False, True]
    np.testing.assert_array_equal(x2[0].numpy()[0], x[0].numpy()[0])          # chain 0 stayed
    assert energy.numpy()[0] == 0.0 and np.isfinite(lp2.numpy()).all()
    np.testing.assert_allclose(u2[0].numpy()[0], np.full(3, 1 / np.sqrt(7)))   # the fresh velocity
    assert x2[0].numpy()[1, 0] == pytest.approx(1.0)                          # chain 1 moved by eps



def test_the_aux_of_the_density_follows_the_state_and_an_undone_step_keeps_the_old_one():
    """``has_aux``: what the density computes beside log p (the engine's field) comes out for
    the new state, equal to a fresh evaluation there, and an undone step keeps the old one."""
    def target(a):   # log-density -inf beyond |x| > 1.5 for the first coordinate; aux: 3 x
        lp = tf.where(tf.abs(a[:, 0]) < 1.5, -0.5 * tf.reduce_sum(a * a, 1), tf.constant(-np.inf, tf.float64))
        return lp, [3.0 * a]
    vg = _value_and_grad(target, has_aux=True)
    x = [tf.constant([[1.4, 0.0, 0.0], [0.0, 0.2, 0.0]], tf.float64)]
    u = [tf.constant([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], tf.float64)]
    lp, g, aux = vg(x)
    np.testing.assert_array_equal(aux[0].numpy(), 3.0 * x[0].numpy())
    zero = [tf.zeros_like(x[0])]
    x2, _, lp2, _, aux2, _, ok = mc.mclmc_transition(vg, x, u, lp, g, tf.constant([1.0, 1.0], tf.float64),
                                                      tf.constant([np.inf, np.inf], tf.float64), zero, zero, aux)
    assert ok.numpy().tolist() == [False, True]
    np.testing.assert_array_equal(aux2[0].numpy()[0], aux[0].numpy()[0])          # undone: the old aux
    np.testing.assert_array_equal(aux2[0].numpy()[1], vg(x2)[2][0].numpy()[1])    # moved: the new one
    assert not np.array_equal(aux2[0].numpy()[1], aux[0].numpy()[1])
    np.testing.assert_array_equal(lp2.numpy(), vg(x2)[0].numpy())


def _drive(tuner, target, parts, warmup, samples, seed=5):
    """The driver's loop in miniature: the kernel's steps and the tuning's updates
    (``Mclmc.tuned_step``), the stage transitions between them, the draws."""
    state = mclmc_kernel.init(parts, target, seed)
    kernel = mclmc_kernel.build_kernel(target)
    lp, g = state.logdensity, state.logdensity_grad
    tune = {"velocity": state.velocity, **tuner.fresh()}
    base = tf.constant([seed, 11], tf.int32)

    @tf.function(jit_compile=True)    # as the engine: the velocity noise is Threefry, an XLA generator
    def steps(x, lp, g, tune, first, n):
        def body(t, x, lp, g, tune, draws):
            i = first + t
            x, lp, g, tune, _, _ = mclmc_kernel.Mclmc.tuned_step(
                kernel, tuner, x, lp, g, tune, tf.random.experimental.stateless_fold_in(base, i), i)
            return t + 1, x, lp, g, tune, draws.write(t, tf.concat([tf.reshape(p, [tuner.chains, -1]) for p in x], 1))
        out = tf.while_loop(lambda t, *_: t < n, body,
                            (0, list(x), lp, list(g), tune, tf.TensorArray(tf.float64, size=n)))
        return out[1], out[2], out[3], out[4], out[5].stack()

    stops = sorted(set(tuner.stops()) | {warmup + samples})
    x, g0, kept, start = list(parts), g, [], 0
    for stop in stops:
        x, lp, g0, tune, draws = steps(x, lp, g0, tune, tf.constant(start), tf.constant(stop - start))
        if stop > warmup:
            kept.append(draws.numpy()[max(0, warmup - start):])
        tune = tuner.at_boundary(stop, tune)
        start = stop
    return np.concatenate(kept, axis=0), tune


def test_mclmc_recovers_a_correlated_gaussian():
    from core.store.diagnostics import ess_mean

    precision = _precision()
    cov = np.linalg.inv(precision)
    chains = 4
    parts = [tf.constant(np.random.default_rng(2).normal(size=(chains, *s))) for s in SHAPES]
    tuner = MclmcTuning(parts, chains, tf.float64, 300, False, 0.25)
    draws, tune = _drive(tuner, _tf_target(precision), parts, 300, 2000)   # (n, C, 7)
    per_chain = draws.transpose(1, 0, 2)
    ess = np.asarray(ess_mean(per_chain))
    assert ess.min() > 200, ess
    sd = np.sqrt(np.diag(cov))
    z = per_chain.mean(axis=(0, 1)) / (sd / np.sqrt(ess))
    assert np.all(np.abs(z) < 4.5), z
    # the std: its Monte Carlo error is about sd / sqrt(2 ess); MCLMC's bias at 5e-4 is ~1 %
    np.testing.assert_allclose(per_chain.std(axis=(0, 1)), sd, rtol=4.5 / np.sqrt(2 * ess.min()) + 0.02)
    np.testing.assert_allclose(np.cov(per_chain.reshape(-1, 7).T), cov, atol=0.15 * sd.max() ** 2)
    assert np.all(np.isfinite(tune["L"].numpy())) and np.all(tune["step_size"].numpy() > 0)


def test_mclmc_sampling_step_is_one_stable_step_size_for_every_chain():
    """Stage 3's check (MclmcTuning.checked_and_shared) on energy errors of known variance: a
    chain past the stability edge does not count; the stable chains' variances, brought to a
    common step size by Var ~ eps^6 and pooled, give the step for the target, never above the
    largest stable one (a chain whose step stopped far below the target no longer sets
    everyone's); with no chain stable the step sizes shrink by (target / variance)^(1/6), the
    variance read robustly (a few huge errors do not set it); an undone step (NaN) makes a
    chain unstable."""
    rng = np.random.default_rng(5)
    chains, n = 3, 4000
    parts = [tf.zeros((chains, 3), tf.float64), tf.zeros((chains, 2, 2), tf.float64)]
    tuner = MclmcTuning(parts, chains, tf.float64, 100, False, 0.25)
    dim = tuner.dim

    def errors(*var_per_dim):
        return np.stack([rng.normal(0.0, np.sqrt(v * dim), n) for v in var_per_dim], axis=1)

    def measured(e):
        return np.mean(np.square(e), axis=0) / dim

    eps, L = np.array([1.0, 1.1, 1.2]), np.array([10.0, 20.0, 90.0])
    # chain 2 at 200x the target: the stable two under the target at the larger step: 1.1 for all,
    # and their mean L
    got_eps, got_L = tuner.checked_and_shared(eps, L, errors(3e-4, 4e-4, 0.1))
    np.testing.assert_array_equal(got_eps, [1.1, 1.1, 1.1])
    np.testing.assert_array_equal(got_L, [15.0, 15.0, 15.0])
    # slab2's seed 1: one chain at 1.2 x the target, the other at 0.009 x with half its step size:
    # the pooled law puts the target just under the first's step, not at the second's
    e = errors(1.2 * DESIRED_ENERGY_VAR, 0.009 * DESIRED_ENERGY_VAR, 0.1)
    got_eps, _ = tuner.checked_and_shared(np.array([1.0, 0.46, 1.2]), L, e)
    var = measured(e)[:2]
    expected = (DESIRED_ENERGY_VAR / np.mean(var * (1.0 / np.array([1.0, 0.46])) ** 6)) ** (1 / 6)
    np.testing.assert_allclose(got_eps, expected, rtol=1e-12)
    assert 0.95 < expected < 1.0
    # a stable chain at a vanishing step (its eps^6 law overflows) leaves the others' measure
    assert tuner.pooled_step_size(np.array([1.0, 1e-80]), np.array([DESIRED_ENERGY_VAR, 1e-10])) == 1.0
    # no chain stable: each shrinks to where the eps^6 law puts the target, the smallest is taken
    e = errors(2e-2, 1e-2, 5e-2)
    e[:20, 1] *= 100.0                       # a burst: 0.5 % of the steps, 10^4 x the variance
    got_eps, _ = tuner.checked_and_shared(eps, L, e)
    expected = min(eps * (DESIRED_ENERGY_VAR / np.array([2e-2, 1e-2, 5e-2])) ** (1 / 6))
    np.testing.assert_allclose(got_eps, expected, rtol=0.02)
    # an undone step: chain 0 is not stable, chain 1 is
    e = errors(1e-4, 1e-4, 1e-4)
    e[7, 0] = np.nan
    e[:, 2] *= 100.0
    got_eps, got_L = tuner.checked_and_shared(eps, L, e)
    np.testing.assert_array_equal(got_eps, [1.1, 1.1, 1.1])
    np.testing.assert_array_equal(got_L, [20.0, 20.0, 20.0])
    # calibration's batch: each simulation's chains (here 2 of 4) share, not the whole batch
    parts4 = [tf.zeros((4, 3), tf.float64), tf.zeros((4, 2, 2), tf.float64)]
    batch = MclmcTuning(parts4, 4, tf.float64, 100, False, 0.25,
                            chains_per_posterior=2)
    got_eps, got_L = batch.shared_by_posterior(np.array([1.0, 1.2, 3.0, 2.5]), np.array([10.0, 30.0, 5.0, 7.0]),
                                               errors(1e-4, 1e-4, 1e-4, 1e-4))
    np.testing.assert_array_equal(got_eps, [1.2, 1.2, 3.0, 3.0])
    np.testing.assert_array_equal(got_L, [20.0, 20.0, 6.0, 6.0])
    with pytest.raises(ValueError, match="groups of 3"):
        MclmcTuning(parts4, 4, tf.float64, 100, False, 0.25, chains_per_posterior=3)


@pytest.mark.parametrize("algorithm, mass", [("mclmc", True), ("mams", False)])
def test_engine_run_matches_the_wiener_posterior_and_resumes_bit_identically(tmp_path, algorithm, mass):
    """A tiny field posterior (8^3, hyperparameters fixed) against its exact Wiener answer, and a
    run stopped mid-warmup (in the middle of a tuning stage) and resumed against the straight run."""
    from core.reference.wiener import wiener_posterior
    from core.store.diagnostics import field_ess_summary
    from core.store.run_store import RunReader
    from support.engine_cases import assert_same_run, prior_mode_variance, run, stop_then_resume, write_field_case

    config, text, data, grid, spectrum = write_field_case(
        tmp_path, shape=(8, 8, 8), warmup=150, samples=400, chunk=40, algorithm=algorithm, mass=mass, thin=2)
    status, _ = run(config, text, tmp_path / "straight")
    assert status == "finished"
    reader = RunReader(tmp_path / "straight")
    n_steps = reader.stat("n_steps")
    if algorithm == "mclmc":
        assert (n_steps == 2).all() and (reader.stat("acceptance_rate") == 1).all()
    else:   # 2 gradients per integration step, about L / eps = 2 of them a step
        assert set(np.unique(n_steps)) <= {2, 4, 6} and 3.5 < n_steps.mean() < 4.5
        assert 0.6 < reader.stat("acceptance_rate").mean() < 0.98
    assert not reader.stat("diverging").any()
    length, step = reader.stat("trajectory_length"), reader.stat("step_size")
    assert np.isfinite(length).all() and (length > 0).all() and (step > 0).all()
    assert (step == step[:, :1]).all() and (np.std(reader.stat("step_size", warmup=True), axis=1) > 0).all()
    if algorithm == "mclmc":      # one step size and L for every chain in sampling
        assert (step == step[0, 0]).all() and (length == length[0, 0]).all()

    # the summary's ESS per gradient evaluation counts n_steps: 2 a step for MCLMC, 2 n for MAMS
    from core.store.run_summary import summarize_run
    summary = summarize_run(tmp_path / "straight", field_diagnostics=False)
    assert summary.sampling_gradient_evaluations == n_steps.sum()
    lp_row = next(r for r in summary.table() if r.scope == "pooled" and r.quantity == "lp")
    assert lp_row.ess_bulk_per_gradient == pytest.approx(lp_row.ess_bulk / n_steps.sum())

    mean, std, count = reader.field_moments()
    assert count == 2 * 400
    exact = wiener_posterior(data.data, prior_mode_variance(grid, spectrum), 0.5)
    z = (mean - exact.mean) / exact.std
    # z's RMS over the voxels is about 1 / sqrt(n_eff) (its relative spread over 512 voxels
    # ~6 %); the ESS of the stored draws (every 2nd) is at most the n_eff of all the draws
    ess = field_ess_summary(reader.field_draws())["ess_bulk_median"]
    assert np.sqrt(np.mean(z**2)) < 1.5 / np.sqrt(ess), (np.sqrt(np.mean(z**2)), ess)
    assert abs(float(np.median(std / exact.std)) - 1.0) < 0.025   # MCLMC's bias included

    stopped = stop_then_resume(config, text, tmp_path / "resumed", lambda p: p["warmup_draws"] >= 110)
    assert 110 <= stopped["warmup_draws"] < 150
    assert_same_run(tmp_path / "straight", tmp_path / "resumed")
    resumed = RunReader(tmp_path / "resumed")
    for name in ("energy_error", "trajectory_length", "n_steps"):
        for warmup in (True, False):
            np.testing.assert_array_equal(reader.stat(name, warmup), resumed.stat(name, warmup))


def test_the_warmup_watch_ends_an_mclmc_warmup_whose_density_is_nan_away_from_the_start(tmp_path, monkeypatch):
    """Every MCLMC step is undone (NaN energy recorded, nothing taken): the watch ends the run
    with the NaN diagnosis, as it does for HMC (tests/core/test_faults.py)."""
    from core.engine import engine as engine_mod
    from core.engine.engine import Engine, EngineError
    from core.engine.warmup import STALL_CHUNKS
    from core.store.run_store import RunReader
    from support.engine_cases import write_field_case

    config, text, *_ = write_field_case(tmp_path, shape=(8, 8, 8), warmup=500, samples=10, chunk=20,
                                        mass=False, algorithm="mclmc")
    real = engine_mod.build_model

    def nan_away_from_start(c, **kw):
        model = real(c, **kw)
        x0 = tf.constant(np.asarray(model.initial_state(c.sampler.chains, c.sampler.seed)[0]), model.dtype)
        f, f_field = model.target_log_prob_fn, model.target_log_prob_and_field

        def nan_away(parts, lp):
            same = tf.reduce_all(tf.reshape(tf.equal(parts[0], x0), [tf.shape(parts[0])[0], -1]), axis=1)
            return tf.where(same, lp, tf.constant(np.nan, lp.dtype))

        class Wrapped:
            def __getattr__(self, name):
                return getattr(model, name)

            @property
            def target_log_prob_fn(self):
                return lambda *parts: nan_away(parts, f(*parts))

            @property
            def target_log_prob_and_field(self):     # the engine's MCLMC chunk evaluates this one
                def target(*parts):
                    lp, field = f_field(*parts)
                    return nan_away(parts, lp), field
                return target
        return Wrapped()

    monkeypatch.setattr(engine_mod, "build_model", nan_away_from_start)
    with pytest.raises(EngineError) as info:
        Engine(config, text, tmp_path / "run").start()
    message = str(info.value)
    assert "NaN or infinite" in message and "broken" in message and "step_size" in message
    reader = RunReader(tmp_path / "run")
    assert reader.status == "failed" and reader.progress["draws"] == 0
    assert reader.progress["chunks"] == STALL_CHUNKS        # ended as soon as it could be told
    assert (reader.stat("acceptance_rate", warmup=True) == 0).all()
    assert np.isnan(reader.stat("energy_error", warmup=True)).all()


@pytest.mark.parametrize("algorithm", ["mclmc", "mams"])
def test_stage_2_in_a_program_of_its_own_gives_the_same_run_bit_for_bit(tmp_path, monkeypatch, algorithm):
    """Large runs give the chunks of warmup stage 2 a program of their own that carries the
    moments of z, and the other chunks one without them (``core.run.engine_limits.stage2_apart``,
    issue #13). Forced on a small case (whose default is one program carrying them throughout):
    the same statistics, draws, field moments and final tuning state (moments included), bit for
    bit, and each kind of program was used (a chunk straddling stage 2's start included)."""
    import core.engine.samplers.microcanonical_kernel as kernel_mod
    from core.run.engine_limits import stage2_apart
    from core.store.checkpoint import read_checkpoint
    from support.engine_cases import assert_same_run, run, write_field_case

    config, text, *_ = write_field_case(tmp_path, shape=(8, 8, 8), warmup=60, samples=40, chunk=15,
                                        algorithm=algorithm, mass=False, thin=5)
    assert not stage2_apart(2, 8**3)
    seen, original = {}, StagedTuning.chunk_keys
    tag = ["one"]

    def spy(self, stage2):
        seen.setdefault(tag[0], set()).add(stage2)
        return original(self, stage2)

    monkeypatch.setattr(StagedTuning, "chunk_keys", spy)
    assert run(config, text, tmp_path / "one")[0] == "finished"
    tag[0] = "apart"
    monkeypatch.setattr(kernel_mod, "stage2_apart", lambda chains, n_values: True)
    assert run(config, text, tmp_path / "apart")[0] == "finished"
    assert seen == {"one": {None}, "apart": {False, True}}
    assert_same_run(tmp_path / "one", tmp_path / "apart")
    one, apart = read_checkpoint(tmp_path / "one")[0], read_checkpoint(tmp_path / "apart")[0]
    assert sorted(one) == sorted(apart) and "tune_mom_x_0" in one
    assert np.abs(one["tune_mom_x_0"]).sum() > 0            # stage 2 gathered them
    for key in one:
        np.testing.assert_array_equal(one[key], apart[key], err_msg=key)


@pytest.mark.parametrize("algorithm", ["mclmc", "mams"])
def test_the_chunk_records_the_field_of_each_state_from_the_density_without_a_transform(tmp_path, algorithm):
    """The microcanonical chunk takes each step's field from the density's own evaluation
    (``FieldModel.target_log_prob_and_field``): every kept draw (thin 1) is the field of the
    state that step ended at. Checked against ``model.field`` of the chunk's end state and of
    a one-step chunk from the same start, and the chunk's moment sums against its draws."""
    from core.engine.driver import Driver, hyper_metric, schedule_for
    from core.engine.models import build_model
    from support.engine_cases import write_field_case

    config, text, *_ = write_field_case(tmp_path, shape=(8, 8, 8), warmup=20, samples=6, chunk=6, thin=1,
                                        mass=False, algorithm=algorithm)
    model = build_model(config)
    driver = Driver(model, config.sampler, schedule_for(config), hyper_metric=hyper_metric(config))
    st = driver.fresh_state()
    first = 20          # post-warmup steps: each one kept
    out = driver.run_chunk(st, first, 6)
    state = out["state"]
    field_buf, _, n_fields, moments = out["observed"]
    assert int(n_fields) == 6

    def field_of(parts):
        return model.field([si * zi for si, zi in zip(st["scale"], parts)]).numpy()

    draws = field_buf.numpy()[:6]
    np.testing.assert_allclose(draws[-1], field_of(state), rtol=1e-5, atol=1e-5)
    one = driver.run_chunk(st, first, 1)
    np.testing.assert_array_equal(one["observed"][0].numpy()[0], draws[0])     # the same first step
    np.testing.assert_allclose(draws[0], field_of(one["state"]), rtol=1e-5, atol=1e-5)
    assert not np.allclose(draws[0], draws[-1])                     # the chain moved
    count, total, total_sq = (np.asarray(m, np.float64) for m in moments)
    dev = draws.astype(np.float64) - float(model.observations.field_mean)
    assert count == 6 * 2
    np.testing.assert_allclose(total, dev.sum(axis=(0, 1)), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(total_sq, (dev**2).sum(axis=(0, 1)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mask, index, coupled", [(True, {"dist": "normal", "loc": -1.5, "scale": 0.3}, True),
                                                  (False, {"dist": "normal", "loc": -1.5, "scale": 0.3}, False),
                                                  (True, -1.5, False)])
def test_mclmc_aims_lower_where_sampled_hyperparameters_meet_modes_the_likelihood_couples(tmp_path, mask, index,
                                                                                         coupled):
    """HYPER_ENERGY_VAR with P(k) sampled under a mask (bench/hyper_efficiency.py slab2: 0.26 -> 0.13
    of a hyperparameter's sd at the same ESS); the reference's 5e-4 without a mask (the modes
    independent given P(k)) or with P(k) fixed."""
    from core.engine.driver import Driver, hyper_metric, schedule_for
    from core.engine.models import build_model
    from support.engine_cases import write_field_case

    config, *_ = write_field_case(tmp_path, shape=(8, 8, 8), mask=mask, index=index, warmup=100, samples=10,
                                  chunk=10, thin=1, mass=False, algorithm="mclmc")
    model = build_model(config)
    assert model.posterior.modes_independent == (not mask)
    driver = Driver(model, config.sampler, schedule_for(config), hyper_metric=hyper_metric(config))
    assert driver.kernel.tuner.energy_var == (HYPER_ENERGY_VAR if coupled else DESIRED_ENERGY_VAR)


@pytest.mark.parametrize("index, steps", [({"dist": "normal", "loc": -1.5, "scale": 0.3}, MAMS_HYPER_STEPS_PER_L),
                                          (-1.5, MAMS_STEPS_PER_L)])
def test_mams_trajectories_are_longer_where_p_k_hyperparameters_are_sampled(tmp_path, index, steps):
    """MAMS_HYPER_STEPS_PER_L integration steps a trajectory with P(k) sampled (bench/
    hyper_efficiency.py slab2, seed 1: 2 steps gave R-hat 1.044 and bulk ESS 42 for the
    hyperparameters, 8 steps 1.002 and 1391), the reference's 2 with P(k) fixed: the tuning
    keeps L / eps at it through every stage, and the recorded trajectories have that mean."""
    from core.engine.driver import Driver, hyper_metric, schedule_for
    from core.engine.models import build_model
    from core.store.run_store import RunReader
    from support.engine_cases import run, write_field_case

    config, text, *_ = write_field_case(tmp_path, shape=(8, 8, 8), mask=True, index=index, warmup=90, samples=300,
                                        chunk=30, thin=10, mass=False, algorithm="mams")
    driver = Driver(build_model(config), config.sampler, schedule_for(config), hyper_metric=hyper_metric(config))
    assert driver.kernel.tuner.steps_per_L == steps
    assert run(config, text, tmp_path / "run")[0] == "finished"
    reader = RunReader(tmp_path / "run")
    for warmup in (True, False):
        step = reader.stat("step_size", warmup=warmup)
        n = reader.stat("trajectory_length", warmup=warmup) / step      # integration steps a draw
        np.testing.assert_allclose(n, np.round(n), atol=1e-3)
        np.testing.assert_array_equal(reader.stat("n_steps", warmup=warmup), 2 * np.round(n))
    # the mean of the random number of steps is L / eps: the 300 draws' steps (one number for
    # every chain a draw) are uniform on 1..15 (8) or 1..3 (2), their mean's sd 3.1 % / 2.4 %;
    # the run's estimate (the Grid panel's, the engine's time check) counts that mean
    assert abs(n.mean() / steps - 1.0) < 0.12, n.mean()
    from core.run.resources import estimate_for_config
    assert estimate_for_config(config, (8, 8, 8)).gradients_per_step == 2 * steps
