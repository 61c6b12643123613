"""Vectorised derivatives (TensorFlow's pfor) through core.engine.fft and its users.

``GradientTape.jacobian`` and ``batch_jacobian`` vectorise by default (pfor), and so does
``tf.vectorized_map``: each op of the traced function is rewritten for an added leading
batch axis. TensorFlow's rewrite of ``tf.roll`` rolls ``axis + 1``, the wrong axis for a
negative one, so Hessians through the old ``tf.roll``-based index -k were wrong while the
unvectorised (``experimental_use_pfor=False``) ones were right. ``core.engine.fft``
builds -k with ``mirror_modes``, which gives ``tf.roll`` non-negative axes only; these
tests hold the vectorised
derivatives to the unvectorised ones, to central finite differences of the gradient,
and (for the field posterior) to its dense Hessian. The explicit Hermitian projection
that the inverse transforms use on a GPU is forced on CPU too (``projection``), since
that is where fft.py itself used the roll.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from core.engine import fft
from core.engine.fft_composite import composite_irfft3d, hermitian_completion
from core.engine.field_density import FieldPosterior
from core.field.grid import Grid
from core.field.observations import Observations
from core.field.power_spectrum import PowerLaw

# (transform family, grid shape): ranks 1-4, even and odd last (halved) lengths
CASES = [
    ("3d", (3, 4, 5)), ("3d", (2, 3, 4)),
    ("nd", (7,)), ("nd", (6,)), ("nd", (3, 4)), ("nd", (2, 3, 4)),
    ("nd", (2, 3, 2, 3)), ("nd", (2, 2, 3, 2)),
]


@pytest.fixture(params=[False, True], ids=["kernel", "projection"])
def projection(request, monkeypatch):
    """The inverse transforms' two code paths: the CPU kernel alone, or the GPU's projection."""
    monkeypatch.setattr(fft, "_PROJECT_PLANES", request.param)
    return request.param


def half(shape):
    return (*shape[:-1], shape[-1] // 2 + 1)


def transforms(family, shape):
    """(forward, inverse) for the family: rfft3d/irfft3d, or rfftnd/irfftnd over all axes."""
    if family == "3d":
        return fft.rfft3d, lambda s: fft.irfft3d(s, fft_length=shape)
    return fft.rfftnd, lambda s: fft.irfftnd(s, fft_length=shape)


def round_trip_loss(family, shape, dtype, seed=0):
    """A real loss of one real vector z through both transforms, nonlinear at each step.

    z holds Re and Im of a half-spectrum (not Hermitian on the self-conjugate planes), so
    the second derivative runs through both VJPs and both of their VJPs.
    """
    forward, inverse = transforms(family, shape)
    r = np.random.default_rng(seed)
    w = tf.constant(r.normal(size=shape), dtype)
    c = tf.constant(r.uniform(0.5, 1.5, size=half(shape)), dtype)
    size = int(np.prod(half(shape)))

    def loss(z):
        spectrum = tf.complex(tf.reshape(z[:size], half(shape)), tf.reshape(z[size:], half(shape)))
        x = inverse(spectrum)
        return tf.reduce_sum(w * tf.sin(3.0 * x)) + tf.reduce_sum(c * tf.abs(forward(x * x)) ** 2)

    z = tf.constant(r.normal(size=2 * size), dtype)
    return loss, z


def gradient(loss, z):
    with tf.GradientTape() as tape:
        tape.watch(z)
        value = loss(z)
    return tape.gradient(value, z)


def hessian(loss, z, use_pfor=True):
    """The full Hessian by tape.jacobian: vectorised (its default) or one gradient per row."""
    with tf.GradientTape(persistent=not use_pfor) as outer:
        outer.watch(z)
        g = gradient(loss, z)
    return outer.jacobian(g, z, experimental_use_pfor=use_pfor)


def hessian_times(loss, z, direction):
    """H v unvectorised: the gradient of <grad L, v> (reverse over reverse, no pfor)."""
    v = tf.constant(direction, z.dtype)
    with tf.GradientTape() as outer:
        outer.watch(z)
        g_dot_v = tf.reduce_sum(gradient(loss, z) * v)
    return outer.gradient(g_dot_v, z).numpy()


def finite_difference_hessian_times(loss, z, direction, eps=1e-5):
    """H v as the central difference of the gradient along v."""
    return (gradient(loss, z + eps * direction) - gradient(loss, z - eps * direction)).numpy() / (2 * eps)


@pytest.mark.parametrize("family,shape", CASES, ids=[f"{f}-{'x'.join(map(str, s))}" for f, s in CASES])
def test_vectorised_hessian_equals_unvectorised_and_finite_differences(family, shape, projection):
    loss, z = round_trip_loss(family, shape, tf.float64)
    vectorised = hessian(loss, z).numpy()
    direction = np.random.default_rng(1).normal(size=z.shape)
    unvectorised = hessian_times(loss, z, direction)
    scale = np.abs(unvectorised).max()
    np.testing.assert_allclose(vectorised @ direction, unvectorised, atol=1e-12 * scale)
    np.testing.assert_allclose(vectorised @ direction, finite_difference_hessian_times(loss, z, direction),
                               atol=1e-6 * scale)
    np.testing.assert_allclose(vectorised, vectorised.T, atol=1e-12 * np.abs(vectorised).max())
    # float32: the same Hessian to single precision
    loss32, z32 = round_trip_loss(family, shape, tf.float32)
    np.testing.assert_allclose(hessian(loss32, z32).numpy() @ direction, unvectorised, atol=2e-4 * scale)


def test_vectorised_hessian_by_rows_is_the_unvectorised_one(projection):
    """The whole matrix once, against tape.jacobian(experimental_use_pfor=False)."""
    loss, z = round_trip_loss("nd", (2, 2, 3, 2), tf.float64, seed=7)
    looped = hessian(loss, z, use_pfor=False).numpy()
    np.testing.assert_allclose(hessian(loss, z).numpy(), looped, atol=1e-12 * np.abs(looped).max())


@pytest.mark.parametrize("jit", [False, True], ids=["function", "jit"])
def test_vectorised_hessian_in_tf_function_and_under_xla(jit, projection):
    loss, z = round_trip_loss("3d", (3, 4, 5), tf.float64, seed=2)
    direction = np.random.default_rng(2).normal(size=z.shape)
    got = tf.function(lambda v: hessian(loss, v), jit_compile=jit)(z).numpy() @ direction
    want = hessian_times(loss, z, direction)
    np.testing.assert_allclose(got, want, atol=1e-11 * np.abs(want).max())


def test_batch_jacobian_and_vectorized_map_equal_per_item_derivatives(projection):
    loss, z = round_trip_loss("3d", (3, 4, 5), tf.float64, seed=3)
    batch = tf.stack([z, 0.5 * z[::-1]])
    with tf.GradientTape() as outer:
        outer.watch(batch)
        with tf.GradientTape() as inner:
            inner.watch(batch)
            values = tf.stack([loss(batch[i]) for i in range(2)])
        grads = inner.gradient(values, batch)
    batched = outer.batch_jacobian(grads, batch).numpy()

    def value_and_gradient(v):
        with tf.GradientTape() as tape:
            tape.watch(v)
            value = loss(v)
        return value, tape.gradient(value, v)

    mapped_values, mapped_grads = tf.vectorized_map(value_and_gradient, batch)
    direction = np.random.default_rng(3).normal(size=z.shape)
    for i in range(2):
        value, grad = value_and_gradient(batch[i])
        np.testing.assert_allclose(mapped_values[i].numpy(), value.numpy(), rtol=1e-12)
        np.testing.assert_allclose(mapped_grads[i].numpy(), grad.numpy(), atol=1e-12 * np.abs(grad).max())
        want = hessian_times(loss, batch[i], direction)
        np.testing.assert_allclose(batched[i] @ direction, want, atol=1e-12 * np.abs(want).max())


def test_vectorized_map_of_non_hermitian_inverse_and_projection(projection):
    """vectorized_map of irfft3d and of its GPU projection equals the per-item values."""
    shape = (4, 3, 6)
    r = np.random.default_rng(4)
    spectra = tf.constant(r.normal(size=(3, *half(shape))) + 1j * r.normal(size=(3, *half(shape))))
    mapped = tf.vectorized_map(lambda s: fft.irfft3d(s, fft_length=shape), spectra).numpy()
    planes = tf.vectorized_map(lambda s: fft._hermitian_part_on_planes(s, shape), spectra).numpy()
    for i in range(3):
        np.testing.assert_allclose(mapped[i], fft.irfft3d(spectra[i], fft_length=shape).numpy(), atol=1e-14)
        np.testing.assert_allclose(planes[i], fft._hermitian_part_on_planes(spectra[i], shape).numpy(),
                                   atol=1e-15)


def test_mirror_modes_is_the_negated_index_also_when_vectorised():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5)
    want = x[:, (-np.arange(3)) % 3][:, :, (-np.arange(4)) % 4][..., (-np.arange(5)) % 5]
    np.testing.assert_array_equal(fft.mirror_modes(tf.constant(x), [-3, -2, -1]).numpy(), want)
    np.testing.assert_array_equal(fft.mirror_modes(tf.constant(x), [1, 2, 3]).numpy(), want)
    mapped = tf.vectorized_map(lambda t: fft.mirror_modes(t, [-3, -2, -1]), tf.constant(x))
    np.testing.assert_array_equal(mapped.numpy(), want)


def test_composite_reference_under_vectorized_map():
    shape = (4, 3, 6)
    r = np.random.default_rng(5)
    spectra = tf.constant(r.normal(size=(3, *half(shape))) + 1j * r.normal(size=(3, *half(shape))))
    completed = tf.vectorized_map(lambda s: hermitian_completion(s, shape[-1]), spectra).numpy()
    mapped = tf.vectorized_map(lambda s: composite_irfft3d(s, shape), spectra).numpy()
    for i in range(3):
        np.testing.assert_allclose(completed[i], hermitian_completion(spectra[i], shape[-1]).numpy(), atol=0)
        np.testing.assert_allclose(mapped[i], fft.irfft3d(spectra[i], fft_length=shape).numpy(), atol=1e-14)


@pytest.mark.parametrize("parameterisation", ["whitened", "raw_modes"])
def test_field_posterior_hessian_by_tape_jacobian_is_the_dense_one(parameterisation):
    """The reported case: at 6x4x5 tape.jacobian's Hessian of log p(latent | data) was off
    by up to 0.56. Gaussian likelihood, so the Hessian is exactly -(P + A^T diag(1/sigma^2) A),
    A the latent-to-field matrix and P the latent's prior precision."""
    shape, sigma = (6, 4, 5), 0.8
    r = np.random.default_rng(6)
    grid = Grid(shape, (40.0, 36.0, 44.0))
    spectrum = PowerLaw(amplitude=200.0, index=-1.2, k_pivot=0.2)
    obs = Observations.create(r.normal(size=shape), noise_sigma=sigma, field_mean=0.3)
    post = FieldPosterior(grid, spectrum, obs, parameterisation=parameterisation, dtype=tf.float64)
    latent = tf.constant(r.normal(size=shape))
    # A: field = A latent, by the map applied to the basis vectors
    basis = tf.reshape(tf.eye(grid.n_cells, dtype=tf.float64), (grid.n_cells, *shape))
    a = tf.reshape(post.field(basis), (grid.n_cells, grid.n_cells)).numpy().T
    if parameterisation == "whitened":
        prior_precision = np.eye(grid.n_cells)
    else:  # v[k] ~ N(0, S_k), S_k = P(|k|) N^2 / V; the DC entry an inert N(0, 1)
        k = grid.k_magnitude_full().reshape(-1)
        s = np.where(k > 0, spectrum.evaluate(np.where(k > 0, k, 1.0)) * grid.n_cells**2 / grid.volume, 1.0)
        prior_precision = np.diag(1.0 / s)
    dense = -(prior_precision + a.T @ a / sigma**2)
    got = hessian(post.log_prob, latent).numpy().reshape(grid.n_cells, grid.n_cells)
    np.testing.assert_allclose(got, dense, atol=1e-10 * np.abs(dense).max())
