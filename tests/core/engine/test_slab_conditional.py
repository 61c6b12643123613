"""The exact conditional under a slab mask (``core.engine.slab_conditional``).

References: the same posterior's whitened density without a preconditioner ("identity"), at the
latent the map gives, plus the log-determinant of the map's Jacobian from automatic
differentiation of the whole map (a dense matrix); the exact marginal likelihood of the data
with the field integrated out (``core.reference.hyper_posterior.GaussianMarginal``, numpy, its
own slab formula); the exact index posterior by quadrature for a run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from core.engine.field_density import FieldPosterior
from core.field.grid import Grid
from core.field.observations import Observations
from core.field.power_spectrum import BandPowers, PowerLawCutoff
from core.priors import LogNormalPrior, NormalPrior
from core.reference.hyper_posterior import GaussianMarginal

SHAPE = (8, 6, 7)          # n_a even and odd, a non-cubic box
BOX = (40.0, 30.0, 36.0)


def _case(axis: int, family: str = "index_amplitude", missing=(1, 2), **obs_kw):
    """(slab posterior, identity posterior, spectrum, priors) with the planes ``missing`` of
    ``axis`` unobserved."""
    rng = np.random.default_rng(5 + axis)
    grid = Grid(SHAPE, BOX)
    mask = np.ones(SHAPE, bool)
    index = [slice(None)] * 3
    index[axis] = list(missing)
    mask[tuple(index)] = False
    data = rng.normal(size=SHAPE)
    data[~mask] = np.nan                          # what a loader hands over where it masks
    obs = Observations.create(data, mask=mask, noise_sigma=0.6, field_mean=0.3, **obs_kw)
    if family == "index_amplitude":
        spectrum = PowerLawCutoff(amplitude=300.0, index=-1.5, k_pivot=0.2, cutoff_scale=1.0)
        priors = {"index": NormalPrior(loc=-1.5, scale=0.5), "amplitude": LogNormalPrior(loc=math.log(300.0), scale=1.0)}
    else:
        k = grid.k_magnitude_full()
        edges = (k[k > 0].min() * 0.99, 0.3, 0.6, k.max() * 1.01)
        spectrum = BandPowers(edges=edges, powers=(200.0, 50.0, 10.0), random_walk_scale=0.7)
        priors = {name: LogNormalPrior(loc=math.log(100.0), scale=1.5) for name in spectrum.parameters}
    kw = dict(hyper_priors=priors, dtype=tf.float64)
    return (FieldPosterior(grid, spectrum, obs, preconditioner="conditional", **kw),
            FieldPosterior(grid, spectrum, obs, preconditioner="identity", **kw), spectrum, priors)


def _eta(priors, chains=3):
    shift = np.array([[0.0], [0.4], [-0.7]])[:chains]
    return tf.constant(np.array([[p.unconstrained_median() for p in priors.values()]]) + shift * np.arange(1, len(priors) + 1))


@pytest.mark.parametrize("axis,missing", [(0, (1, 2)), (1, (1, 2)), (2, (1, 2)), (0, (0, 1, 2, 4, 5, 6, 7))])
def test_the_density_is_the_whitened_one_through_the_map_with_its_jacobian(axis, missing):
    post, plain, _, priors = _case(axis, missing=missing)
    assert post.slab is not None and post.slab.axis == axis and post.decoupled
    rng = np.random.default_rng(1)
    v = tf.constant(rng.normal(size=(3, *SHAPE)))
    eta = _eta(priors)
    with tf.GradientTape() as tape:
        tape.watch(v)
        u = post.latent_of(v, eta)
    jacobian = tf.reshape(tape.batch_jacobian(u, v), (3, post.grid.n_cells, post.grid.n_cells))
    log_det = tf.linalg.slogdet(jacobian)[1]
    np.testing.assert_allclose(post.log_prob(v, eta), plain.log_prob(u, eta) + log_det, rtol=0, atol=1e-9)
    np.testing.assert_allclose(post.state_of(u, eta), v, atol=1e-12)
    lp, signal = post.log_prob_and_signal(v, eta)
    np.testing.assert_allclose(signal, plain.signal(u, eta), atol=1e-12)
    # the two shares the model check shows add up to the density
    np.testing.assert_allclose(post.log_prior(v, eta) + post.log_likelihood_of_signal(signal), lp, atol=1e-9)


@pytest.mark.parametrize("axis,family,missing", [(0, "index_amplitude", (1, 2)), (2, "bands", (0, 3, 4)),
                                                  (1, "bands", (5,)), (0, "bands", (1, 2, 3, 4, 5, 6, 7))])
def test_the_density_is_the_exact_marginal_times_a_standard_normal(axis, family, missing):
    """log p(v, eta) = log N(v; 0, I) + log p(d | eta) + log p(eta) for any v: the gradient in v
    is -v, and eta's is the marginal likelihood's (numpy's own slab formula, with the beam)."""
    post, _, spectrum, priors = _case(axis, family, missing, smoothing_scale=3.0)
    rng = np.random.default_rng(2)
    v = tf.constant(rng.normal(size=(3, *SHAPE)))
    eta = _eta(priors)
    with tf.GradientTape() as tape:
        tape.watch(v)
        lp = post.log_prob(v, eta)
    np.testing.assert_allclose(tape.gradient(lp, v), -v.numpy(), atol=1e-12)
    marginal = GaussianMarginal(post.grid, post.observations)
    assert marginal.axis == axis
    k = np.asarray(marginal.k)
    theta = {name: priors[name].forward(eta.numpy()[:, i]).reshape(-1, *[1] * k.ndim) for i, name in enumerate(priors)}
    expected = marginal.log_likelihood(spectrum.evaluate(k[None], **theta))
    rest = (lp + 0.5 * tf.reduce_sum(v * v, axis=[1, 2, 3]) + 0.5 * post.grid.n_cells * math.log(2 * math.pi)
            - post._hyper_log_prior(eta))
    np.testing.assert_allclose(rest, expected, rtol=0, atol=1e-8)


@pytest.mark.parametrize("r", [1, 4, 5, 11, 33])
def test_the_factor_by_halves_equals_lapacks(r):
    """``_cholesky_inverse`` and ``_lower_inverse`` (by halves, unrolled leaves) against numpy's
    LAPACK values, and their gradients against TensorFlow's own Cholesky and triangular solve
    (along symmetric perturbations: the factor reads the lower triangle, TensorFlow's gradient is
    symmetrised)."""
    from core.engine.slab_conditional import _cholesky_inverse, _lower_inverse
    rng = np.random.default_rng(r)
    g = rng.normal(size=(2, 3, r, 2 * r)) / math.sqrt(2 * r)
    m = tf.constant(g @ np.swapaxes(g, -1, -2) + 0.05 * np.eye(r))
    probe = tf.constant(rng.normal(size=(2, 3, r, r)))

    def losses(mine: bool):
        with tf.GradientTape() as tape:
            tape.watch(m)
            if mine:
                lower, inverse = _cholesky_inverse(m)
                plus = _lower_inverse(lower + tf.eye(r, dtype=tf.float64))
            else:
                lower = tf.linalg.cholesky(m)
                eye = tf.broadcast_to(tf.eye(r, dtype=tf.float64), m.shape)
                inverse = tf.linalg.triangular_solve(lower, eye)
                plus = tf.linalg.triangular_solve(lower + tf.eye(r, dtype=tf.float64), eye)
            loss = tf.reduce_sum(probe * (lower + inverse + 0.5 * plus))
        return lower, inverse, plus, tape.gradient(loss, m)

    lower, inverse, plus, grad = losses(True)
    expected = np.linalg.cholesky(m.numpy())
    np.testing.assert_allclose(lower, expected, atol=1e-12)
    np.testing.assert_allclose(inverse, np.linalg.inv(expected), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(plus, np.linalg.inv(expected + np.eye(r)), atol=1e-12)
    def symmetric(g):                   # the gradients along symmetric perturbations of m
        return 0.5 * (g + np.swapaxes(g, -1, -2))

    np.testing.assert_allclose(symmetric(grad), symmetric(losses(False)[3].numpy()), rtol=1e-8, atol=1e-8)


def test_float32_agrees_with_float64():
    post, _, spectrum, priors = _case(1)
    post32 = FieldPosterior(post.grid, spectrum, post.observations, hyper_priors=priors, dtype=tf.float32,
                            preconditioner="conditional")
    v = np.random.default_rng(3).normal(size=(3, *SHAPE))
    eta = _eta(priors)
    lp32, signal32 = post32.log_prob_and_signal(tf.constant(v, tf.float32), tf.cast(eta, tf.float32))
    lp, signal = post.log_prob_and_signal(tf.constant(v), eta)
    np.testing.assert_allclose(lp32, lp, rtol=1e-6)
    assert signal32.dtype == tf.float32           # the field, an output, in the state's precision
    np.testing.assert_allclose(signal32, signal, atol=1e-5 * float(tf.reduce_max(tf.abs(signal))))


def test_where_it_applies():
    """Only "conditional" with the whitened latent, sampled P(k), a Gaussian likelihood with one
    noise level and whole planes missing; every other posterior keeps its own preconditioner."""
    post, _, spectrum, priors = _case(0)
    grid, obs = post.grid, post.observations
    # the run's estimate lays out the columns as the engine does (its factors' memory)
    from core.run.resources import SLAB_FACTOR_MATRICES, slab_factor_bytes
    assert slab_factor_bytes(SHAPE, (0, 2), 1, BOX) == SLAB_FACTOR_MATRICES * post.slab.n_rows * 2**2 * 8
    assert not FieldPosterior(grid, spectrum, obs, preconditioner="fourier", hyper_priors=priors).slab
    assert not FieldPosterior(grid, spectrum, obs, preconditioner="conditional").slab        # P(k) fixed
    cube = np.ones(SHAPE, bool)
    cube[2:4, 2:4, 2:4] = False
    other = Observations.create(obs.data, mask=cube, noise_sigma=0.6)
    diagonal = FieldPosterior(grid, spectrum, other, preconditioner="conditional", hyper_priors=priors)
    assert diagonal.slab is None and not diagonal.decoupled
    noise_map = Observations.create(np.nan_to_num(obs.data), mask=obs.mask, noise_map=np.linspace(0.4, 0.8, SHAPE[2]) * np.ones(SHAPE))
    assert FieldPosterior(grid, spectrum, noise_map, preconditioner="conditional", hyper_priors=priors).slab is None
    # the rule itself (numpy: the config's advice reads it too), up to MAX_SLAB_MISSING_PLANES planes
    from core.field.observations import MAX_SLAB_MISSING_PLANES, slab_decouples
    planes = np.ones((MAX_SLAB_MISSING_PLANES + 4, 2, 3), bool)
    planes[2:2 + MAX_SLAB_MISSING_PLANES] = False
    assert slab_decouples(planes, "gaussian", True)
    assert not slab_decouples(planes, "poisson_lognormal", True) and not slab_decouples(planes, "gaussian", False)
    planes[1] = False
    assert not slab_decouples(planes, "gaussian", True)                     # one plane too many
    assert not slab_decouples(np.ones((4, 4, 4), bool), "gaussian", True)   # nothing masked


def test_a_calibration_batch_is_centred_on_each_simulations_data():
    """``calibration_data``'s per-simulation terms give each chain the density of a posterior
    built on its own data."""
    from core.engine.models import FieldModel

    post, _, spectrum, priors = _case(2)
    rng = np.random.default_rng(4)
    sims = rng.normal(size=(3, *SHAPE))
    terms = post.centre_terms(tf.constant(sims))
    batch = FieldModel.with_data.__get__(_Holder(post))((tf.constant(sims), terms)).posterior
    v = tf.constant(rng.normal(size=(3, *SHAPE)))
    eta = _eta(priors)
    got = batch.log_prob(v, eta)
    for i in range(3):
        own = Observations.create(sims[i], mask=post.observations.mask, noise_sigma=0.6, field_mean=0.3)
        alone = FieldPosterior(post.grid, spectrum, own, hyper_priors=priors, dtype=tf.float64,
                               preconditioner="conditional")
        np.testing.assert_allclose(got[i], alone.log_prob(v[i:i + 1], eta[i:i + 1])[0], rtol=1e-12)


class _Holder:
    """What ``FieldModel.with_data`` reads of a model: its posterior."""

    def __init__(self, posterior):
        self.posterior = posterior


def test_a_run_with_the_default_sampler_samples_the_exact_index_posterior(tmp_path):
    """The engine with a new config's sampler (MCLMC) and "conditional" on a slab-masked field
    (25 % of the planes, 16^3): the index's R-hat < 1.01, bulk ESS >= 400, mean and sd those of
    the exact posterior (before, the diagonal centre left MCLMC 0.2-0.4 sd off under a mask)."""
    from core.config import parse_config
    from support.engine_cases import assert_index_is_exact, run, write_field_case

    prior = {"dist": "normal", "loc": -1.5, "scale": 0.5}
    _, text, *_ = write_field_case(tmp_path, shape=(16, 16, 16), mask=True, sigma=0.1, index=prior,
                                   algorithm="mclmc", mass=False, warmup=300, samples=600, chunk=150, thin=20)
    text = text.replace('preconditioner = "identity"', 'preconditioner = "conditional"')
    config = parse_config(text, base_dir=tmp_path)
    assert run(config, text, tmp_path / "run")[0] == "finished"
    assert_index_is_exact(tmp_path / "run", config)
