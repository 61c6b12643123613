"""The centred move between transitions (``core.engine.interweaving``, ``sampler.interweave``).

References: p(eta | z) computed in numpy from the spectrum's own P(k) (``PowerSpectrum.evaluate``),
the priors' densities in the unconstrained coordinate (``core.priors``) and the band powers'
random walk (``BandPowers.log_random_walk_prior``), on a fine grid of eta (quadrature) for the
draws; the exact posterior of the hyperparameters with the field integrated out
(``core.reference.hyper_posterior``) for a run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from core.engine.field_density import FieldPosterior
from core.engine.interweaving import Interweaving
from core.field.grid import Grid
from core.field.observations import Observations
from core.field.power_spectrum import BandPowers, PowerLawCutoff
from core.priors import LogNormalPrior, NormalPrior

SHAPE = (8, 6, 7)
BOX = (40.0, 30.0, 36.0)


def _posterior(case: str, preconditioner: str = "conditional"):
    """(posterior, spectrum, priors) on a masked grid (the state's map is then not trivial)."""
    rng = np.random.default_rng(3)
    grid = Grid(SHAPE, BOX)
    mask = np.ones(SHAPE, bool)
    mask[:2] = False
    obs = Observations.create(rng.normal(size=SHAPE), mask=mask, noise_sigma=0.5)
    if case == "index":
        spectrum = PowerLawCutoff(amplitude=300.0, index=-1.5, k_pivot=0.2, cutoff_scale=1.0)
        priors = {"index": NormalPrior(loc=-1.5, scale=0.5)}
    elif case == "index_amplitude":
        spectrum = PowerLawCutoff(amplitude=300.0, index=-1.5, k_pivot=0.2, cutoff_scale=1.0)
        priors = {"index": NormalPrior(loc=-1.5, scale=0.5), "amplitude": LogNormalPrior(loc=math.log(300.0), scale=1.0)}
    else:
        k = grid.k_magnitude_full()
        edges = (k[k > 0].min() * 0.99, 0.4, k.max() * 1.01)
        spectrum = BandPowers(edges=edges, powers=(200.0, 50.0), random_walk_scale=0.7)
        priors = {name: LogNormalPrior(loc=math.log(100.0), scale=1.5) for name in spectrum.parameters}
    post = FieldPosterior(grid, spectrum, obs, hyper_priors=priors, dtype=tf.float64, preconditioner=preconditioner,
                          dense_modes=4 if preconditioner != "identity" else 0)
    return post, spectrum, priors


def _numpy_log_conditional(post, spectrum, priors, eta, z):
    """log p(eta | z) + const for each row of ``eta`` (rows, n_hyper), independently of the move's code."""
    k = post.grid.k_magnitude_full()
    nonzero = k > 0
    norm = post.grid.n_cells**2 / post.grid.volume
    eta = np.atleast_2d(eta)
    theta = {name: priors[name].forward(eta[:, i])[:, None] for i, name in enumerate(priors)}
    s = spectrum.evaluate(k[nonzero][None, :], **theta) * norm
    lp = np.sum(-0.5 * (np.log(2 * math.pi * s) + z[nonzero][None, :] ** 2 / s), axis=1)
    lp += sum(priors[name].unconstrained_logpdf(eta[:, i]) for i, name in enumerate(priors))
    if isinstance(spectrum, BandPowers):
        lp += spectrum.log_random_walk_prior(np.log(np.concatenate([theta[n] for n in spectrum.parameters], axis=1)))
    return lp


def _z_draw(post, spectrum, priors, seed):
    """Modes z_k ~ N(0, S_k) at a spectrum off the priors' medians, and that spectrum's eta."""
    rng = np.random.default_rng(seed)
    eta = np.array([priors[n].unconstrained_median() + 0.3 * (i + 1) for i, n in enumerate(priors)])
    k = post.grid.k_magnitude_full()
    theta = {n: priors[n].forward(eta[i]) for i, n in enumerate(priors)}
    s = spectrum.evaluate(k, **theta) * post.grid.n_cells**2 / post.grid.volume
    return np.where(k > 0, np.sqrt(s) * rng.normal(size=k.shape), rng.normal()), eta


@pytest.mark.parametrize("case", ["index", "index_amplitude", "bands"])
def test_the_conditional_is_the_prior_times_each_modes_normal(case):
    post, spectrum, priors = _posterior(case)
    z, eta_true = _z_draw(post, spectrum, priors, seed=1)
    move = Interweaving(post)
    q = move.shell_sums(tf.constant(z[None]))
    rng = np.random.default_rng(2)
    etas = eta_true + 0.4 * rng.normal(size=(5, len(priors)))
    got = move.log_conditional(tf.constant(etas), tf.repeat(q, 5, axis=0)).numpy()
    want = _numpy_log_conditional(post, spectrum, priors, etas, z)
    np.testing.assert_allclose(got - got[0], want - want[0], rtol=1e-9, atol=1e-7)


def _state_for(post, z, eta):
    """The state parts whose modes are z at each row of eta (u = z / sqrt(S(eta)))."""
    move = Interweaving(post)
    eta = tf.constant(eta)
    u = tf.constant(z[None]) / move.sqrt_s(eta, tf.float64)
    return [post.state_of(u, eta), eta]


def _conditional_on_a_grid(post, spectrum, priors, z, centre):
    """p(eta | z) on a grid of eta fitted to its support (a coarse pass, then a fine one):
    (the axes, the normalised probabilities of their cells)."""
    d = len(priors)
    lo, hi = centre - 3.0, centre + 3.0
    for n in ((201, 2001) if d == 1 else (61, 301)):
        axes = [np.linspace(lo[i], hi[i], n) for i in range(d)]
        mesh = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, d)
        lp = _numpy_log_conditional(post, spectrum, priors, mesh, z).reshape((n,) * d)
        p = np.exp(lp - lp.max())
        p /= p.sum()
        for i in range(d):
            marginal = p.sum(axis=tuple(j for j in range(d) if j != i))
            kept = np.flatnonzero(marginal > 1e-12 * marginal.max())
            step = axes[i][1] - axes[i][0]
            lo[i], hi[i] = axes[i][kept[0]] - step, axes[i][kept[-1]] + step
    return axes, p


def _marginal_cdf(axes, p, column):
    """The CDF of eta[column] at the grid's points (the midpoint rule: each cell's mass centred on it)."""
    marginal = p.sum(axis=tuple(j for j in range(p.ndim) if j != column))
    return axes[column], np.cumsum(marginal) - 0.5 * marginal


@pytest.mark.parametrize("case, preconditioner", [("index", "conditional"), ("bands", "fourier"),
                                                  ("index", "identity")])
def test_the_move_keeps_the_exact_conditional_and_the_modes(case, preconditioner):
    """Chains started from exact draws of p(eta | z) (quadrature, inverse CDF) are still drawn
    from it after the move (Kolmogorov-Smirnov per hyperparameter, 3000 chains), the modes z are
    held to rounding, and chains started 2 prior sds off reach the same distribution in 4 moves."""
    post, spectrum, priors = _posterior(case, preconditioner)
    z, eta_true = _z_draw(post, spectrum, priors, seed=4)
    move = Interweaving(post)
    chains, rng = 3000, np.random.default_rng(5)
    axes, p = _conditional_on_a_grid(post, spectrum, priors, z, eta_true.copy())
    cdfs = [_marginal_cdf(axes, p, c) for c in range(len(priors))]
    mesh = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(priors))
    cell = np.array([a[1] - a[0] for a in axes])
    start = mesh[rng.choice(len(mesh), size=chains, p=p.reshape(-1))] + cell * (rng.uniform(size=(chains, len(priors))) - 0.5)
    parts = _state_for(post, z, start)
    step = tf.function(move.move, autograph=False)         # one graph for the five moves
    (state, eta), acceptance = step(parts, tf.constant([7, 11], tf.int32))
    z_after = post.latent_of(state, eta) * move.sqrt_s(eta, tf.float64)  
    np.testing.assert_allclose(z_after.numpy(), np.broadcast_to(z, z_after.shape), rtol=1e-9, atol=1e-9)
    assert float(tf.reduce_mean(acceptance)) > 0.8
    far = _state_for(post, z, np.tile(eta_true + 2 * np.array([priors[n].scale for n in priors]), (chains, 1)))
    for i in range(4):
        far, _ = step(far, tf.constant([13, i], tf.int32))
    for sample in (eta.numpy(), far[1].numpy()):
        for c, (x, cdf) in enumerate(cdfs):
            p = stats.kstest(sample[:, c], lambda v, x=x, cdf=cdf: np.interp(v, x, cdf)).pvalue
            assert p > 1e-3, (c, p)


def test_a_run_with_mams_and_the_move_samples_the_exact_index_posterior(tmp_path):
    """The engine with MAMS, "conditional" and ``interweave = true`` on a well-measured field
    (noise 0.05 of a unit-variance field, 16^3, no mask): the index's R-hat < 1.01, bulk ESS >=
    400 from 2 x 400 draws, its mean within 4 Monte-Carlo errors of the exact posterior's, its
    sd within 10 %; each draw's gradients count the move's one."""
    from core.config import parse_config
    from core.store.run_store import RunReader
    from support.engine_cases import assert_index_is_exact, run, write_field_case

    prior = {"dist": "normal", "loc": -1.5, "scale": 0.5}
    _, text, *_ = write_field_case(tmp_path, shape=(16, 16, 16), sigma=0.05, index=prior, algorithm="mams",
                                   mass=False, warmup=300, samples=400, chunk=100, thin=20)
    text = text.replace('preconditioner = "identity"', 'preconditioner = "conditional"').replace('interweave = false', 'interweave = true')
    config = parse_config(text, base_dir=tmp_path)
    assert config.sampler.interweave
    assert run(config, text, tmp_path / "run")[0] == "finished"
    assert_index_is_exact(tmp_path / "run", config)
    n_steps = RunReader(tmp_path / "run").stat("n_steps")
    assert np.all(n_steps % 2 == 1)       # MAMS: 2 a McLachlan step, and the move's one


def test_the_move_is_where_it_applies():
    """Only a whitened latent with sampled hyperparameters gets it; the setting is a boolean."""
    post, *_ = _posterior("index", "identity")
    fixed = FieldPosterior(post.grid, post.spectrum, post.observations, dtype=tf.float64)
    with pytest.raises(ValueError, match="sampled P\\(k\\) hyperparameters and the whitened latent"):
        Interweaving(fixed)
    raw = FieldPosterior(post.grid, post.spectrum, post.observations, hyper_priors={"index": NormalPrior(loc=-1.5, scale=0.5)},
                         parameterisation="raw_modes", dtype=tf.float64)
    with pytest.raises(ValueError, match="whitened"):
        Interweaving(raw)


@pytest.mark.parametrize("algorithm", ["hmc", "mams"])
def test_the_chunk_carries_the_log_density_and_gradient_of_the_moved_state(tmp_path, algorithm):
    """After a chunk with the move, the log-density and gradient the kernel carries (its next
    step starts from them) are those of the state it ends at, both families (float64, a mask,
    "conditional" with its dense block); each step's n_steps counts the move's gradient."""
    import dataclasses

    from core.engine import driver as drv
    from core.engine.adaptation.metric import grad_to_x, to_x
    from core.engine.models import build_model
    from support.engine_cases import write_field_case

    prior = {"dist": "normal", "loc": -1.5, "scale": 0.5}
    config, *_ = write_field_case(tmp_path, shape=(8, 8, 8), mask=True, index=prior, dtype="float64",
                                  algorithm=algorithm, mass=False, leapfrog=3, warmup=20, samples=10, chunk=6)
    sampler = dataclasses.replace(config.sampler, preconditioner="conditional", interweave=True)
    config = dataclasses.replace(config, sampler=sampler)
    model = build_model(config)
    assert model.interweaving is not None
    d = drv.Driver(model, config.sampler, drv.schedule_for(config), hyper_metric=True)
    st = d.fresh_state()
    before = [p.numpy() for p in st["state"]]
    out = d.run_chunk(st, 0, 6)
    assert not np.allclose(out["state"][1].numpy(), before[1])       # the spectrum moved
    x = to_x(st["scale"], out["state"])
    lp, grads = d._value_and_gradient(x, None)                         # noqa: SLF001
    np.testing.assert_allclose(out["tlp"].numpy(), lp.numpy(), rtol=1e-10)
    for got, want in zip(grad_to_x(st["scale"], out["grads"]), grads):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-8, atol=1e-10)
    n_steps = out["traces"]["n_steps"].numpy()      # HMC: 3 leapfrog steps; MAMS: 2 a McLachlan step
    assert np.all(n_steps == 4) if algorithm == "hmc" else np.all(n_steps % 2 == 1)


def test_a_model_files_parameters_stay_where_they_are(tmp_path):
    """A field model whose likelihood is a model file's, with a parameter of its own sampled after
    the P(k) index in eta: the move changes the index, holds the file's parameter and the field
    (so the file's likelihood), and its state's log-density is finite."""
    import textwrap

    from core.config import config_from_dict
    from core.engine.models import build_model
    from support.engine_cases import field_case_document, write_field_case

    write_field_case(tmp_path, shape=(8, 8, 8))
    doc = field_case_document(index={"dist": "normal", "loc": -1.5, "scale": 0.5}, dtype="float64")
    doc["data"].pop("noise_sigma")
    doc["likelihood"] = {"kind": "python", "file": "lik.py"}
    doc["sampler"].pop("adapt_mass_matrix")
    doc["sampler"].update(preconditioner="diagonal", interweave=True)
    (tmp_path / "lik.py").write_text(textwrap.dedent("""
        import tensorflow as tf
        PARAMETERS = {"b1": {"dist": "normal", "loc": 1.0, "scale": 0.2}}

        def log_likelihood(field, params, data):
            r = (data["data"] - params["b1"] * field) / 0.5
            return -0.5 * tf.reduce_sum(r * r)
    """))
    config = config_from_dict(doc, base_dir=tmp_path)
    model = build_model(config)
    assert model.interweaving is not None and model.param_names == ["index", "b1"]
    parts = model.initial_state(3, 1)
    (state, eta), _ = model.interweave(parts, tf.constant([2, 3], tf.int32))
    np.testing.assert_array_equal(eta[:, 1].numpy(), parts[1][:, 1].numpy())
    assert not np.allclose(eta[:, 0].numpy(), parts[1][:, 0].numpy())
    np.testing.assert_allclose(model.field([state, eta]).numpy(), model.field(parts).numpy(), rtol=1e-9, atol=1e-9)
    assert np.all(np.isfinite(model.target_log_prob_fn(state, eta).numpy()))
