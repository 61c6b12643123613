"""The Fourier preconditioner (``core.field.preconditioner``, ``core.engine.field_density``)
against independent references.

References: the exact Wiener posterior by dense linear algebra (``core.reference.wiener``,
numpy/scipy, no TensorFlow), the model's own log-density Hessian taken by TensorFlow
autodiff and factorised densely, the Laplace integral (exact for a density quadratic in
the field) of the unpreconditioned model, and an engine run's per-voxel ESS.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from core.config import config_from_dict, dump_config
from core.engine.field_density import FieldPosterior
from core.field.grid import Grid
from core.field.observations import Observations
from core.field.power_spectrum import PowerLaw
from core.field.preconditioner import (
    DENSE_BLOCK_MIN_PRECISION,
    couples_modes,
    dense_block,
    fourier_scale,
    likelihood_mode_precision,
    mode_variance_full,
)
from core.field.synthetic import make_dataset, save_dataset
from core.reference.wiener import dense_posterior
from core.store.checkpoint import read_checkpoint
from core.store.run_store import RunReader
from support.engine_cases import (
    assert_eta_gradient_is_central_differences,
    field_case_document,
    prior_mode_variance,
    run,
    sampled_hyper_case,
)


def _basis(post: FieldPosterior):
    n = post.grid.n_cells
    return tf.reshape(tf.eye(n, dtype=post.dtype), (n, *post.grid.shape))


def _per_basis(eta, n):
    return None if eta is None else tf.broadcast_to(tf.reshape(eta, [1, -1]), (n, eta.shape[-1]))


def hessian(post: FieldPosterior, eta=None) -> np.ndarray:
    """-d^2 log p / d state^2, dense, from the model's TensorFlow gradients: the density is
    quadratic in the state (Gaussian likelihood), so column i is grad(0) - grad(e_i), all
    basis vectors e_i taken as one batch of chains."""
    n = post.grid.n_cells
    states = tf.concat([tf.zeros((1, *post.grid.shape), post.dtype), _basis(post)], axis=0)
    with tf.GradientTape() as tape:
        tape.watch(states)
        lp = post.log_prob(states, _per_basis(eta, n + 1))
    grads = tape.gradient(lp, states).numpy().reshape(n + 1, n)
    h = grads[0][None, :] - grads[1:]
    return 0.5 * (h + h.T)


def field_matrix(post: FieldPosterior, eta=None) -> np.ndarray:
    """A with field = A @ state (flattened), applying the map to basis vectors."""
    n = post.grid.n_cells
    return tf.reshape(post.field(_basis(post), _per_basis(eta, n)), (n, n)).numpy().T


def uniform_case(shape=(6, 5, 4), beam=None, seed=0):
    rng = np.random.default_rng(seed)
    grid = Grid(shape, (30.0, 26.0, 34.0))
    spectrum = PowerLaw(amplitude=2000.0, index=-2.0, k_pivot=0.2)
    obs = Observations.create(rng.normal(size=shape), noise_sigma=0.4, smoothing_scale=beam)
    return grid, spectrum, obs


@pytest.mark.parametrize("beam", [None, 2.5])
def test_fourier_preconditioned_posterior_is_white_for_uniform_noise(beam):
    grid, spectrum, obs = uniform_case(beam=beam)
    n = grid.n_cells
    identity = FieldPosterior(grid, spectrum, obs, dtype=tf.float64)
    fourier = FieldPosterior(grid, spectrum, obs, dtype=tf.float64, preconditioner="fourier")
    h_u, h_v = hessian(identity), hessian(fourier)
    cond_u, cond_v = np.linalg.cond(h_u), np.linalg.cond(h_v)
    print(f"\ncondition number of the posterior precision (beam {beam}): whitened {cond_u:.1f}, "
          f"fourier-preconditioned {cond_v:.6f}")
    assert cond_u > 20.0                       # the case is worth preconditioning
    np.testing.assert_allclose(h_v, np.eye(n), atol=1e-10)
    # independently: the covariance of x = A v with v ~ N(0, I) is core's dense Wiener posterior
    beam_half = None if beam is None else np.exp(-0.5 * (grid.k_magnitude_half() * beam) ** 2)
    exact = dense_posterior(obs.data, prior_mode_variance(grid, spectrum), 0.4, beam=beam_half)
    covariance = exact.covariance
    if beam is not None:     # the model's field is the smoothed one, B s: its covariance B C B
        eye = np.eye(n).reshape(n, *grid.shape)
        b = np.fft.irfftn(np.fft.rfftn(eye, axes=(1, 2, 3)) * beam_half, s=grid.shape, axes=(1, 2, 3))
        b = b.reshape(n, n)
        covariance = b @ covariance @ b.T
    a = field_matrix(fourier)
    np.testing.assert_allclose(a @ a.T, covariance, atol=1e-10 * np.abs(covariance).max())


def test_jacobi_mode_precision_is_the_exact_diagonal_with_a_mask_and_noise_map():
    """"jacobi" is the diagonal of the posterior precision in the whitened latent exactly;
    "mean" (the default) differs only by the term at twice the wavevector."""
    grid, spectrum, obs = _masked_case(2.0)
    h_u = hessian(FieldPosterior(grid, spectrum, obs, dtype=tf.float64))
    s = mode_variance_full(grid, spectrum).reshape(-1)
    for method in ("mean", "jacobi"):
        q = likelihood_mode_precision(grid, obs, method).reshape(-1)
        error = np.abs(1.0 + s * q - np.diag(h_u)).max()
        if method == "jacobi":
            assert error < 1e-10 * np.diag(h_u).max()
        else:
            assert 1e-3 < error < 0.5 * np.diag(h_u).max()
        post = FieldPosterior(grid, spectrum, obs, dtype=tf.float64, preconditioner="fourier",
                              precision_method=method)
        h_v = hessian(post)
        print(f"\nmasked: condition number whitened {np.linalg.cond(h_u):.1f}, fourier ({method}) "
              f"{np.linalg.cond(h_v):.1f}")
        assert np.linalg.cond(h_v) < np.linalg.cond(h_u)
        if method == "jacobi":
            np.testing.assert_allclose(np.diag(h_v), 1.0, atol=1e-10)


def _sampled_case(parameterisation, kind, dense_modes=0):
    return sampled_hyper_case(parameterisation, kind, dense_modes, "fourier")


@pytest.mark.parametrize("parameterisation,dense_modes", [("whitened", 0), ("raw_modes", 0), ("whitened", 12),
                                                          ("raw_modes", 12)])
def test_sampled_hyperparameters_change_of_variables_keeps_the_marginal(parameterisation, dense_modes):
    """For each eta the density is Gaussian in the field, so its Laplace integral over the
    field state is exact: log p(eta | d) up to a constant. The preconditioned model (state v,
    Jacobian sum log w(eta), and log |det T| of a dense block held at the reference spectrum)
    must integrate to the same function of eta as the plain one."""
    grid, spectrum, obs, plain, fourier = _sampled_case(parameterisation, "gaussian", dense_modes)
    assert (fourier.block is not None) == (dense_modes > 0)
    n = grid.n_cells

    def log_marginal(post, eta):
        eta_t = tf.constant(eta, tf.float64)
        h = hessian(post, eta_t)
        zero = tf.zeros((1, *grid.shape), tf.float64)
        with tf.GradientTape() as tape:
            tape.watch(zero)
            lp0 = post.log_prob(zero, eta_t[None])
        g = tape.gradient(lp0, zero).numpy().reshape(-1)
        mode = np.linalg.solve(h, g)                          # exact: the density is quadratic
        lp = float(post.log_prob(tf.constant(mode.reshape(1, *grid.shape)), eta_t[None])[0])
        return lp + 0.5 * n * math.log(2 * math.pi) - 0.5 * np.linalg.slogdet(h)[1]

    etas = [np.array([-2.3, math.log(250.0)]), np.array([-1.6, math.log(700.0)])]
    for eta in etas:
        a, b = log_marginal(plain, eta), log_marginal(fourier, eta)
        assert b == pytest.approx(a, abs=1e-8), (eta, a, b)
    # the Jacobian matters: without it the two would differ by sum log w, which moves with eta
    logw = [float(tf.reduce_sum(tf.math.log(fourier.scale(tf.constant(e[None]))))) for e in etas]
    assert abs(logw[0] - logw[1]) > 1.0


@pytest.mark.parametrize("parameterisation,kind,dense_modes", [
    ("whitened", "gaussian", 0), ("raw_modes", "gaussian", 0), ("whitened", "poisson_lognormal", 0),
    ("whitened", "gaussian", 12), ("whitened", "poisson_lognormal", 12)])
def test_sampled_scale_and_density_agree_with_the_fixed_model(parameterisation, kind, dense_modes):
    """w(eta) of the sampled model equals core.field.preconditioner's numpy scale at theta =
    b(eta); log p(v, eta) = log p_plain(u(v), eta) + log |det du/dv| with the determinant taken
    from the map v -> u on basis vectors (a dense block included); the gradient in eta matches
    central differences."""
    grid, spectrum, obs, plain, fourier = _sampled_case(parameterisation, kind, dense_modes)
    eta = tf.constant([[-2.4, math.log(300.0)], [-1.7, math.log(600.0)]], tf.float64)
    theta = fourier.hyperparameters(eta)
    v = tf.constant(np.random.default_rng(3).normal(size=(2, *grid.shape)), tf.float64)
    for c in range(2):
        at = PowerLaw(amplitude=float(theta["amplitude"][c]), index=float(theta["index"][c]), k_pivot=0.2)
        w = fourier_scale(grid, at, obs, parameterisation=parameterisation)
        np.testing.assert_allclose(fourier.scale(eta)[c].numpy(), w, rtol=1e-12)
    u = fourier.latent_of(v, eta)
    # |det du/dv| per chain from the map itself (linear in v): its matrix on basis vectors
    n = grid.n_cells
    log_det = [np.linalg.slogdet(tf.reshape(fourier.latent_of(_basis(fourier), _per_basis(eta[c], n)),
                                            (n, n)).numpy())[1] for c in range(2)]
    np.testing.assert_allclose(fourier.log_prob(v, eta).numpy(), plain.log_prob(u, eta).numpy() + log_det,
                               rtol=1e-12)
    assert_eta_gradient_is_central_differences(fourier, v, eta)


def _masked_case(beam, noise_map=True):
    rng = np.random.default_rng(1)
    shape = (6, 4, 5)
    grid = Grid(shape, (30.0, 26.0, 34.0))
    spectrum = PowerLaw(amplitude=400.0, index=-2.0, k_pivot=0.2)
    mask = np.ones(shape, bool)
    mask[:2] = False                                      # a slab
    obs = Observations.create(rng.normal(size=shape), mask=mask, smoothing_scale=beam,
                              noise_map=rng.uniform(0.3, 0.6, size=shape) if noise_map else None,
                              noise_sigma=None if noise_map else 0.5)
    return grid, spectrum, obs


@pytest.mark.parametrize("parameterisation,beam", [("whitened", None), ("whitened", 2.0), ("raw_modes", None),
                                                   ("raw_modes", 2.0)])
def test_dense_block_makes_the_low_k_posterior_precision_exactly_white(parameterisation, beam):
    """The model's own Hessian (TensorFlow autodiff) in the preconditioned state: the block's
    modes have exactly the identity precision among themselves (the block's mode couplings,
    built from one FFT of the voxel precision, are the model's); the block's modes are those
    with the largest S_k q_k; the state -> latent map inverts; the density is the plain
    model's at u plus log |det du/dv| of the map on basis vectors."""
    grid, spectrum, obs = _masked_case(beam)
    kw = dict(dtype=tf.float64, parameterisation=parameterisation)
    plain = FieldPosterior(grid, spectrum, obs, **kw)
    per_mode = FieldPosterior(grid, spectrum, obs, preconditioner="fourier", dense_modes=0, **kw)
    blocked = FieldPosterior(grid, spectrum, obs, preconditioner="fourier", dense_modes=20, **kw)
    assert per_mode.block is None and blocked.block.size == 20
    h = hessian(blocked)
    index = blocked.block.index
    np.testing.assert_allclose(h[np.ix_(index, index)], np.eye(index.size), atol=1e-10)
    s_q = (mode_variance_full(grid, spectrum) * likelihood_mode_precision(grid, obs)).reshape(-1)
    assert s_q[index].min() >= np.delete(s_q, index).max()
    cond = [np.linalg.cond(hessian(p)) for p in (plain, per_mode, blocked)]
    print(f"\n{parameterisation}, beam {beam}: condition number plain {cond[0]:.1f}, per mode {cond[1]:.2f}, "
          f"with the dense block {cond[2]:.2f}")
    assert cond[2] < 0.85 * cond[1]
    v = tf.constant(np.random.default_rng(4).normal(size=(2, *grid.shape)))
    u = blocked.latent_of(v)
    np.testing.assert_allclose(blocked.state_of(u).numpy(), v.numpy(), atol=1e-12)
    n = grid.n_cells
    log_det = np.linalg.slogdet(tf.reshape(blocked.latent_of(_basis(blocked)), (n, n)).numpy())[1]
    np.testing.assert_allclose(blocked.log_prob(v).numpy(), plain.log_prob(u).numpy() + log_det, rtol=1e-12)


def test_dense_block_only_where_the_likelihood_couples_modes():
    """Uniform noise without a mask: the per-mode scale is exact, no block; a mask alone or a
    noise map alone couple the modes; the block never takes more modes than asked or a mode
    whose S_k q_k is below the prior's precision."""
    grid, spectrum, _ = uniform_case()
    rng = np.random.default_rng(5)
    data = rng.normal(size=grid.shape)
    uniform = Observations.create(data, noise_sigma=0.4)
    assert not couples_modes(uniform) and dense_block(grid, spectrum, uniform, 50) is None
    mask = np.ones(grid.shape, bool)
    mask[0] = False
    for obs in (Observations.create(data, noise_sigma=0.4, mask=mask),
                Observations.create(data, noise_map=rng.uniform(0.3, 0.5, size=grid.shape))):
        assert couples_modes(obs)
        block = dense_block(grid, spectrum, obs, 7)
        assert block.size == 7 and np.all(np.diff(block.index) > 0)
        assert dense_block(grid, spectrum, obs, 0) is None
        s_q = (mode_variance_full(grid, spectrum) * likelihood_mode_precision(grid, obs)).reshape(-1)
        everything = dense_block(grid, spectrum, obs, grid.n_cells)
        assert everything.size == int(np.sum(s_q > DENSE_BLOCK_MIN_PRECISION)) < grid.n_cells


def test_initial_state_is_the_same_field_for_every_preconditioner():
    grid, spectrum, obs, plain, fourier = _sampled_case("whitened", "gaussian")
    a, b = plain.initial_state(3, 5), fourier.initial_state(3, 5)
    np.testing.assert_array_equal(a[1].numpy(), b[1].numpy())
    np.testing.assert_allclose(fourier.field(*b).numpy(), plain.field(*a).numpy(), atol=1e-12)
    assert np.abs(b[0].numpy() - a[0].numpy()).max() > 0.1      # the state itself is rescaled


def test_white_noise_parameterisation_is_refused():
    grid, spectrum, obs = uniform_case()
    with pytest.raises(ValueError, match="white_noise"):
        FieldPosterior(grid, spectrum, obs, parameterisation="white_noise", preconditioner="fourier")
    with pytest.raises(ValueError, match="diagonal"):
        FieldPosterior(grid, spectrum, obs, preconditioner="diagonal")


def test_fourier_run_adapts_the_sampled_hyperparameters_scale_and_holds_the_fields(tmp_path):
    """"fourier" scales the field itself; a sampled hyperparameter gets the adapted diagonal
    (the engine's window), else its posterior sd (here ~0.1 against the field's unit scale)
    would set the step size. After warmup the checkpoint's scale of the field is 1 and the
    index's is its posterior sd, within the spread of a short window."""
    shape = (8, 8, 8)
    grid = Grid(shape, 64.0)
    spectrum = PowerLaw(amplitude=300.0, index=-1.5, k_pivot=0.1)
    save_dataset(tmp_path / "data.npz", make_dataset(grid, spectrum, 0.5, mask="slab", mask_fraction=0.25, seed=11))
    doc = field_case_document(True, warmup=120, samples=200, chains=2, thin=10, chunk=40, mass=False,
                              index={"dist": "normal", "loc": -1.5, "scale": 0.5})
    doc["sampler"].pop("adapt_mass_matrix")
    doc["sampler"]["preconditioner"] = "fourier"
    config = config_from_dict(doc, base_dir=tmp_path)
    status, _ = run(config, dump_config(config), tmp_path / "run")
    assert status == "finished"
    arrays, _ = read_checkpoint(tmp_path / "run")
    np.testing.assert_array_equal(arrays["scale_0"], 1.0)
    index_scale = float(np.asarray(arrays["scale_1"]).reshape(-1)[0])
    draws = RunReader(tmp_path / "run").param("index")
    sd = float(np.std(draws))
    print(f"\nindex: adapted scale {index_scale:.4f}, posterior sd of the draws {sd:.4f} (prior 0.5)")
    assert 0.4 * sd < index_scale < 2.5 * sd
    assert index_scale < 0.5
