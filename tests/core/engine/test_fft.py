"""Tests of core.engine.fft against independent references.

References: numpy.fft (forward values, padding/cropping semantics), an explicit
Hermitian completion written here in numpy (non-Hermitian inputs), central finite
differences in float64, adjoint (dot-product) identities, and the composite path
(Hermitian completion + complex ifft3d) that TensorFlow differentiates on its own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.engine import fft
from core.engine.fft_composite import composite_irfft3d, composite_rfft3d

SHAPES = [(4, 4, 4), (5, 6, 7), (3, 5, 2), (4, 6, 9), (2, 3, 1), (6, 4, 8)]
DTYPES = [(np.float64, np.complex128), (np.float32, np.complex64)]


def rng(seed=0):
    return np.random.default_rng(seed)


def half_shape(shape):
    return (*shape[:-1], shape[-1] // 2 + 1)


def random_complex(r, shape):
    return r.normal(size=shape) + 1j * r.normal(size=shape)


def numpy_completion_irfft(spectrum, shape):
    """Re(ifftn(Z)) with Z the Hermitian completion, written independently of core.engine.fft."""
    n0, n1, n2 = shape
    m = n2 // 2 + 1
    full = np.zeros(spectrum.shape[:-3] + shape, complex)
    full[..., :m] = spectrum
    for kz in range(m, n2):
        for k0 in range(n0):
            for k1 in range(n1):
                full[..., k0, k1, kz] = np.conj(spectrum[..., (-k0) % n0, (-k1) % n1, n2 - kz])
    return np.real(np.fft.ifftn(full, axes=(-3, -2, -1)))


def tape_grad(fn, arg):
    with tf.GradientTape() as tape:
        tape.watch(arg)
        loss = fn(arg)
    return tape.gradient(loss, arg)


def directional(fn, arg, direction, eps):
    """Central difference of a real loss along a (complex or real) direction."""
    return (fn(arg + eps * direction).numpy() - fn(arg - eps * direction).numpy()) / (2 * eps)


def real_inner(a, b):
    """The real inner product Re(sum conj(a) b) under which dL/dz = dL/da + i dL/db."""
    return float(np.real(np.sum(np.conj(np.asarray(a)) * np.asarray(b))))


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("rdtype,cdtype", DTYPES)
def test_forward_values_match_numpy(shape, rdtype, cdtype):
    r = rng(1)
    x = r.normal(size=(2, *shape)).astype(rdtype)
    spectrum = np.fft.rfftn(x, axes=(-3, -2, -1))
    got = fft.rfft3d(tf.constant(x))
    assert got.dtype == tf.as_dtype(cdtype)
    tol = 1e-12 if rdtype == np.float64 else 2e-5
    scale = np.abs(spectrum).max()
    np.testing.assert_allclose(got.numpy(), spectrum, atol=tol * scale)
    back = fft.irfft3d(tf.constant(spectrum.astype(cdtype)), fft_length=shape)
    assert back.dtype == tf.as_dtype(rdtype)
    np.testing.assert_allclose(back.numpy(), x, atol=tol * 10)


@pytest.mark.parametrize("shape", SHAPES)
def test_inverse_of_non_hermitian_half_spectrum_is_the_hermitian_part(shape):
    r = rng(2)
    spectrum = random_complex(r, (2, *half_shape(shape)))
    expected = numpy_completion_irfft(spectrum, shape)
    got = fft.irfft3d(tf.constant(spectrum), fft_length=shape).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-13)
    # the explicit projection used where the kernel does not ignore the anti-Hermitian part
    projected = fft._hermitian_part_on_planes(tf.constant(spectrum), shape)
    np.testing.assert_allclose(tf.signal.irfft3d(projected, fft_length=shape).numpy(), expected,
                               atol=1e-13)


def test_projection_path_gives_same_values_and_gradients(monkeypatch):
    """The GPU code path (explicit Hermitian projection) agrees with the CPU kernel."""
    r = rng(3)
    shape = (4, 5, 6)
    spectrum = tf.constant(random_complex(r, half_shape(shape)))
    weights = tf.constant(r.normal(size=shape))

    def loss(s):
        return tf.reduce_sum(tf.sin(fft.irfft3d(s, fft_length=shape)) * weights)

    plain_value, plain_grad = loss(spectrum), tape_grad(loss, spectrum)
    monkeypatch.setattr(fft, "_PROJECT_PLANES", True)
    np.testing.assert_allclose(loss(spectrum).numpy(), plain_value.numpy(), rtol=1e-13)
    np.testing.assert_allclose(tape_grad(loss, spectrum).numpy(), plain_grad.numpy(), atol=1e-13)


@pytest.mark.parametrize("fft_length", [(3, 7, 5), (6, 6, 6), (4, 6, 8), (2, 2, 3), (5, 9, 12)])
def test_fft_length_pads_and_crops_like_tf_signal(fft_length):
    r = rng(4)
    x = r.normal(size=(2, 4, 6, 8))
    np.testing.assert_allclose(fft.rfft3d(tf.constant(x), fft_length=fft_length).numpy(),
                               tf.signal.rfft3d(tf.constant(x), fft_length=fft_length).numpy(),
                               atol=1e-12)
    spectrum = tf.constant(np.fft.rfftn(x, axes=(-3, -2, -1)))
    np.testing.assert_allclose(fft.irfft3d(spectrum, fft_length=fft_length).numpy(),
                               tf.signal.irfft3d(spectrum, fft_length=fft_length).numpy(),
                               atol=1e-12)
    # and numpy agrees on the padding convention (zeros at the end, cut at the end)
    np.testing.assert_allclose(fft.irfft3d(spectrum, fft_length=fft_length).numpy(),
                               np.fft.irfftn(spectrum.numpy(), s=fft_length, axes=(-3, -2, -1)),
                               atol=1e-12)


def test_default_fft_length_of_inverse_is_even():
    r = rng(5)
    spectrum = tf.constant(random_complex(r, (4, 4, 5)))
    assert fft.irfft3d(spectrum).shape == (4, 4, 8)
    np.testing.assert_allclose(fft.irfft3d(spectrum).numpy(), tf.signal.irfft3d(spectrum).numpy(),
                               atol=1e-12)


@pytest.mark.parametrize("axes", [[0, 1, 2, 3], [1, 3], [3, 1], [0, 2, 3], [2], [-1, -3], [1, 2, 3]])
@pytest.mark.parametrize("norm", [None, "backward", "forward", "ortho"])
def test_nd_values_match_numpy(axes, norm):
    r = rng(6)
    x = r.normal(size=(3, 4, 5, 6))
    np_norm = norm or "backward"
    expected = np.fft.rfftn(x, axes=axes, norm=np_norm)
    got = fft.rfftnd(tf.constant(x), axes=axes, norm=norm).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-12)
    lengths = [x.shape[a] for a in axes]
    back = fft.irfftnd(tf.constant(expected), fft_length=lengths, axes=axes, norm=norm).numpy()
    np.testing.assert_allclose(back, x, atol=1e-12)


def test_nd_defaults_transform_all_axes():
    r = rng(7)
    x = r.normal(size=(3, 4, 6))
    np.testing.assert_allclose(fft.rfftnd(tf.constant(x)).numpy(), np.fft.rfftn(x), atol=1e-12)
    spectrum = np.fft.rfftn(x)
    np.testing.assert_allclose(fft.irfftnd(tf.constant(spectrum)).numpy(), x, atol=1e-12)


def test_nd_with_fft_length_on_non_trailing_axes():
    r = rng(8)
    x = r.normal(size=(2, 4, 6, 8))
    got = fft.rfftnd(tf.constant(x), fft_length=[5, 6], axes=[1, 3]).numpy()
    np.testing.assert_allclose(got, np.fft.rfftn(x, s=(5, 6), axes=(1, 3)), atol=1e-12)
    spectrum = np.fft.rfftn(x, axes=(1, 3))
    got = fft.irfftnd(tf.constant(spectrum), fft_length=[3, 9], axes=[1, 3]).numpy()
    np.testing.assert_allclose(got, np.fft.irfftn(spectrum, s=(3, 9), axes=(1, 3)), atol=1e-12)


def test_nd_non_hermitian_inverse_uses_hermitian_part():
    r = rng(9)
    shape = (3, 4, 5, 6)
    spectrum = random_complex(r, half_shape(shape))
    got = fft.irfftnd(tf.constant(spectrum), fft_length=shape).numpy()
    # numpy's pocketfft c2r ignores the anti-Hermitian part in the same way; cross-check
    # against the projection written out in numpy on the 4-D half spectrum
    full = np.zeros(shape, complex)
    m = shape[-1] // 2 + 1
    full[..., :m] = spectrum
    idx = np.indices(shape[:-1])
    for kz in range(m, shape[-1]):
        neg = tuple((-i) % n for i, n in zip(idx, shape[:-1]))
        full[..., kz] = np.conj(spectrum[..., shape[-1] - kz][neg])
    np.testing.assert_allclose(got, np.real(np.fft.ifftn(full)), atol=1e-13)


# --------------------------------------------------------------------------- the seed example


def test_seed_example_gradient_is_one_at_dc_and_zero_elsewhere():
    modes = tf.signal.rfft3d(tf.random.stateless_normal((64, 64, 64), seed=[1, 2]))
    grad = tape_grad(lambda m: tf.reduce_sum(fft.irfft3d(m)), modes).numpy()
    assert grad[0, 0, 0] == pytest.approx(1.0, abs=1e-6)
    grad.ravel()[0] = 0
    assert np.abs(grad).max() < 1e-6


def test_naive_custom_gradient_of_the_seed_is_off_by_n():
    """The backward pass rfft3d(dy) of the seed question gives N = 64^3 at the DC mode."""

    @tf.custom_gradient
    def naive_irfft3d(x):
        return tf.signal.irfft3d(x), lambda dy: tf.signal.rfft3d(dy)

    modes = tf.signal.rfft3d(tf.random.stateless_normal((64, 64, 64), seed=[1, 2]))
    grad = tape_grad(lambda m: tf.reduce_sum(naive_irfft3d(m)), modes).numpy()
    assert grad[0, 0, 0].real == pytest.approx(262144.0)


# --------------------------------------------------------------------------- first derivatives


def self_conjugate_pair_direction(shape, imag):
    """A direction that moves X[k] and X[-k] together on the k_z = 0 plane."""
    direction = np.zeros(half_shape(shape), complex)
    k0, k1 = 1, 2 % shape[1]
    value = 1j if imag else 1.0
    direction[k0, k1, 0] += value
    direction[(-k0) % shape[0], (-k1) % shape[1], 0] += value
    return direction


@pytest.mark.parametrize("shape", [(4, 6, 8), (5, 6, 7), (3, 5, 2), (4, 4, 1)])
def test_irfft3d_gradient_matches_finite_differences(shape):
    r = rng(10)
    weights = tf.constant(r.normal(size=shape))

    def loss(s):
        return tf.reduce_sum(tf.sin(fft.irfft3d(s, fft_length=shape)) * weights)

    spectrum = tf.constant(random_complex(r, half_shape(shape)))
    grad = tape_grad(loss, spectrum).numpy()
    directions = [
        r.normal(size=half_shape(shape)).astype(complex),          # real parts
        1j * r.normal(size=half_shape(shape)),                     # imaginary parts
        self_conjugate_pair_direction(shape, imag=False),          # +-k pair, kz = 0, real
        self_conjugate_pair_direction(shape, imag=True),           # +-k pair, kz = 0, imag
        np.eye(1, int(np.prod(half_shape(shape))), 0).reshape(half_shape(shape)) * 1j,  # Im(DC)
    ]
    if shape[-1] % 2 == 0:  # the Nyquist plane
        nyq = np.zeros(half_shape(shape), complex)
        nyq[1, 0, -1] = 1.0 + 0.5j
        directions.append(nyq)
    for direction in directions:
        fd = directional(loss, spectrum, tf.constant(direction), 1e-6)
        assert real_inner(grad, direction) == pytest.approx(fd, abs=1e-8, rel=1e-7)


@pytest.mark.parametrize("shape", [(4, 6, 8), (5, 6, 7), (3, 5, 2), (2, 2, 1)])
def test_rfft3d_gradient_matches_finite_differences(shape):
    r = rng(11)
    weights = tf.constant(r.normal(size=half_shape(shape)))
    phases = tf.constant(random_complex(r, half_shape(shape)))

    def loss(x):
        spectrum = fft.rfft3d(x)
        return tf.reduce_sum(weights * tf.abs(spectrum) ** 2) + tf.reduce_sum(
            tf.math.real(spectrum * phases))

    x = tf.constant(r.normal(size=shape))
    grad = tape_grad(loss, x).numpy()
    for _ in range(3):
        direction = r.normal(size=shape)
        fd = directional(loss, x, tf.constant(direction), 1e-6)
        assert float(np.sum(grad * direction)) == pytest.approx(fd, rel=1e-7)


@pytest.mark.parametrize("shape", [(4, 6, 8), (5, 6, 7), (3, 5, 2)])
@pytest.mark.parametrize("rdtype,cdtype", DTYPES)
def test_adjoint_identities(shape, rdtype, cdtype):
    """<irfft(V), y> = <V, J^T y> and <rfft(v), Y> = <v, J^T Y> for the autodiff VJPs."""
    r = rng(12)
    y = tf.constant(r.normal(size=shape).astype(rdtype))
    v_spec = tf.constant(random_complex(r, half_shape(shape)).astype(cdtype))
    vjp = tape_grad(lambda s: tf.reduce_sum(fft.irfft3d(s, fft_length=shape) * y), v_spec)
    lhs = float(np.sum(fft.irfft3d(v_spec, fft_length=shape).numpy() * y.numpy()))
    tol = 1e-12 if rdtype == np.float64 else 1e-4
    assert real_inner(v_spec.numpy(), vjp.numpy()) == pytest.approx(lhs, rel=tol, abs=tol)

    big_y = tf.constant(random_complex(r, half_shape(shape)).astype(cdtype))
    v = tf.constant(r.normal(size=shape).astype(rdtype))
    vjp = tape_grad(
        lambda x: tf.reduce_sum(tf.math.real(tf.math.conj(big_y) * fft.rfft3d(x))), v)
    lhs = real_inner(big_y.numpy(), fft.rfft3d(v).numpy())
    assert float(np.sum(v.numpy() * vjp.numpy())) == pytest.approx(lhs, rel=tol, abs=tol)


@pytest.mark.parametrize("shape", [(4, 6, 8), (5, 6, 7), (3, 5, 2), (6, 4, 9)])
def test_gradients_agree_with_composite_path(shape):
    r = rng(13)
    weights = tf.constant(r.normal(size=shape))
    spectrum = tf.constant(random_complex(r, half_shape(shape)))
    ours = tape_grad(lambda s: tf.reduce_sum(tf.cos(fft.irfft3d(s, fft_length=shape)) * weights),
                     spectrum)
    theirs = tape_grad(lambda s: tf.reduce_sum(tf.cos(composite_irfft3d(s, shape)) * weights),
                       spectrum)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=1e-13)

    cweights = tf.constant(random_complex(r, half_shape(shape)))
    x = tf.constant(r.normal(size=shape))
    ours = tape_grad(lambda v: tf.reduce_sum(tf.abs(fft.rfft3d(v) * cweights) ** 2), x)
    theirs = tape_grad(lambda v: tf.reduce_sum(tf.abs(composite_rfft3d(v) * cweights) ** 2), x)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-11,
                               atol=1e-11 * np.abs(theirs.numpy()).max())


def test_float32_gradient_matches_float64():
    r = rng(14)
    shape = (8, 6, 10)
    spectrum = random_complex(r, half_shape(shape))
    weights = r.normal(size=shape)

    def grad(cdtype, rdtype):
        w = tf.constant(weights.astype(rdtype))
        return tape_grad(lambda s: tf.reduce_sum(tf.sin(fft.irfft3d(s, fft_length=shape)) * w),
                         tf.constant(spectrum.astype(cdtype))).numpy()

    g64, g32 = grad(np.complex128, np.float64), grad(np.complex64, np.float32)
    assert g32.dtype == np.complex64
    np.testing.assert_allclose(g32, g64, atol=2e-6 * np.abs(g64).max())


# --------------------------------------------------------------------------- second order


def test_hessian_vector_products_match_finite_differences_and_composite():
    r = rng(15)
    shape = (4, 5, 6)
    spectrum = tf.constant(random_complex(r, half_shape(shape)))
    direction = tf.constant(random_complex(r, half_shape(shape)))

    def grad_of(inverse):
        def g(s):
            with tf.GradientTape() as inner:
                inner.watch(s)
                loss = tf.reduce_sum(inverse(s) ** 4) / 4
            return inner.gradient(loss, s)
        return g

    def hvp(inverse):
        with tf.GradientTape() as outer:
            outer.watch(spectrum)
            g = grad_of(inverse)(spectrum)
            # directional derivative of the gradient along `direction`, via <g, v>
            inner_product = tf.math.real(tf.reduce_sum(tf.math.conj(g) * direction))
        return outer.gradient(inner_product, spectrum)

    ours = hvp(lambda s: fft.irfft3d(s, fft_length=shape))
    theirs = hvp(lambda s: composite_irfft3d(s, shape))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=1e-11 * np.abs(theirs.numpy()).max())
    # H is symmetric: <H v, u> = directional derivative of <grad, u> along v
    u = random_complex(r, half_shape(shape))
    g_plus = grad_of(lambda s: fft.irfft3d(s, fft_length=shape))(spectrum + 1e-6 * direction)
    g_minus = grad_of(lambda s: fft.irfft3d(s, fft_length=shape))(spectrum - 1e-6 * direction)
    fd = real_inner((g_plus - g_minus).numpy() / 2e-6, u)
    assert real_inner(ours.numpy(), u) == pytest.approx(fd, rel=1e-6)


def test_second_derivative_of_rfft3d_through_nonlinear_loss():
    r = rng(16)
    shape = (4, 6, 5)
    x = tf.constant(r.normal(size=shape))
    v = r.normal(size=shape)

    def grad_fn(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.abs(fft.rfft3d(x)) ** 4)
        return tape.gradient(loss, x)

    with tf.GradientTape() as tape:
        tape.watch(x)
        g_dot_v = tf.reduce_sum(grad_fn(x) * v)
    hv = tape.gradient(g_dot_v, x).numpy()
    fd = (grad_fn(x + 1e-6 * v).numpy() - grad_fn(x - 1e-6 * v).numpy()) / 2e-6
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())


# --------------------------------------------------------------------------- graph modes and batch


@pytest.mark.parametrize("mode", ["function", "jit"])
@pytest.mark.parametrize("shape", [(4, 6, 8), (5, 6, 7)])
def test_tf_function_and_jit_match_eager(mode, shape):
    r = rng(17)
    spectrum = tf.constant(random_complex(r, (3, *half_shape(shape))))
    weights = tf.constant(r.normal(size=(3, *shape)))

    def value_and_grads(s):
        with tf.GradientTape() as tape:
            tape.watch(s)
            x = fft.irfft3d(s, fft_length=shape)
            loss = tf.reduce_sum(tf.sin(x) * weights) + tf.reduce_sum(tf.abs(fft.rfft3d(x)) ** 2)
        return loss, tape.gradient(loss, s)

    compiled = tf.function(value_and_grads, jit_compile=(mode == "jit"))
    eager_loss, eager_grad = value_and_grads(spectrum)
    loss, grad = compiled(spectrum)
    np.testing.assert_allclose(loss.numpy(), eager_loss.numpy(), rtol=1e-12)
    np.testing.assert_allclose(grad.numpy(), eager_grad.numpy(), atol=1e-10 * np.abs(eager_grad.numpy()).max())


def test_jit_hessian_vector_product_runs():
    r = rng(18)
    shape = (4, 4, 6)
    spectrum = tf.constant(random_complex(r, half_shape(shape)))
    direction = tf.constant(random_complex(r, half_shape(shape)))

    def hvp(s):
        with tf.GradientTape() as outer:
            outer.watch(s)
            with tf.GradientTape() as inner:
                inner.watch(s)
                loss = tf.reduce_sum(fft.irfft3d(s) ** 3)
            g = inner.gradient(loss, s)
            gv = tf.math.real(tf.reduce_sum(tf.math.conj(g) * direction))
        return outer.gradient(gv, s)

    np.testing.assert_allclose(tf.function(hvp, jit_compile=True)(spectrum).numpy(),
                               hvp(spectrum).numpy(), atol=1e-10)


def test_batch_dimensions_are_independent():
    r = rng(19)
    shape = (4, 5, 6)
    batch = random_complex(r, (2, 3, *half_shape(shape)))
    weights = r.normal(size=(2, 3, *shape))

    def loss(s, w):
        return tf.reduce_sum(tf.sin(fft.irfft3d(s, fft_length=shape)) * w)

    grad = tape_grad(lambda s: loss(s, tf.constant(weights)), tf.constant(batch)).numpy()
    for i in range(2):
        for j in range(3):
            single = tape_grad(lambda s: loss(s, tf.constant(weights[i, j])),
                               tf.constant(batch[i, j])).numpy()
            np.testing.assert_allclose(grad[i, j], single, atol=1e-14)


def test_dynamic_batch_dimension_in_tf_function():
    shape = (4, 4, 6)
    f = tf.function(lambda x: fft.irfft3d(fft.rfft3d(x)),
                    input_signature=[tf.TensorSpec([None, *shape], tf.float32)])
    x = tf.random.stateless_normal((5, *shape), seed=[3, 4])
    np.testing.assert_allclose(f(x).numpy(), x.numpy(), atol=1e-5)


def test_gradient_through_fft_length_padding_and_cropping():
    r = rng(20)
    x = tf.constant(r.normal(size=(4, 6, 8)))
    spectrum = tf.constant(np.fft.rfftn(x.numpy()))
    for fft_length in [(3, 7, 5), (5, 5, 12)]:
        weights = tf.constant(r.normal(size=fft_length))
        loss = lambda s: tf.reduce_sum(tf.sin(fft.irfft3d(s, fft_length=fft_length)) * weights)
        grad = tape_grad(loss, spectrum).numpy()
        direction = random_complex(r, spectrum.shape)
        fd = directional(loss, spectrum, tf.constant(direction), 1e-6)
        assert real_inner(grad, direction) == pytest.approx(fd, rel=1e-7, abs=1e-9)

        cw = tf.constant(random_complex(r, half_shape(fft_length)))
        loss = lambda v: tf.reduce_sum(tf.abs(fft.rfft3d(v, fft_length=fft_length) * cw) ** 2)
        grad = tape_grad(loss, x).numpy()
        direction = r.normal(size=x.shape)
        fd = directional(loss, x, tf.constant(direction), 1e-6)
        assert float(np.sum(grad * direction)) == pytest.approx(fd, rel=1e-7)


@pytest.mark.parametrize("axes", [[1, 3], [3, 1], [0, 1, 2, 3], [2]])
def test_nd_gradients_match_finite_differences(axes):
    r = rng(21)
    x = tf.constant(r.normal(size=(3, 4, 5, 6)))
    spectrum = fft.rfftnd(x, axes=axes)
    lengths = [x.shape[a] for a in axes]
    weights = tf.constant(r.normal(size=x.shape))
    loss = lambda s: tf.reduce_sum(tf.sin(fft.irfftnd(s, fft_length=lengths, axes=axes)) * weights)
    grad = tape_grad(loss, spectrum).numpy()
    direction = random_complex(r, spectrum.shape)
    fd = directional(loss, spectrum, tf.constant(direction), 1e-6)
    assert real_inner(grad, direction) == pytest.approx(fd, rel=1e-7, abs=1e-9)

    cw = tf.constant(random_complex(r, spectrum.shape))
    loss = lambda v: tf.reduce_sum(tf.abs(fft.rfftnd(v, axes=axes, norm="ortho") * cw) ** 2)
    grad = tape_grad(loss, x).numpy()
    direction = r.normal(size=x.shape)
    fd = directional(loss, x, tf.constant(direction), 1e-6)
    assert float(np.sum(grad * direction)) == pytest.approx(fd, rel=1e-7)


# --------------------------------------------------------------------------- property-based


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.tuples(st.integers(1, 7), st.integers(1, 7), st.integers(1, 9)),
    batch=st.lists(st.integers(1, 3), max_size=2),
    resize=st.lists(st.integers(-2, 3), min_size=3, max_size=3),
    seed=st.integers(0, 2**31 - 1),
)
def test_property_values_and_adjoint(shape, batch, resize, seed):
    """Random shapes, batches and fft_lengths: values as numpy, VJPs adjoint to the maps."""
    r = rng(seed)
    fft_length = tuple(max(1, n + d) for n, d in zip(shape, resize))
    x = r.normal(size=(*batch, *shape))
    axes = (-3, -2, -1)
    spectrum = fft.rfft3d(tf.constant(x), fft_length=fft_length)
    np.testing.assert_allclose(spectrum.numpy(), np.fft.rfftn(x, s=fft_length, axes=axes),
                               atol=1e-10 * max(1.0, np.abs(x).sum()))
    half = random_complex(r, (*batch, *half_shape(shape)))
    out = fft.irfft3d(tf.constant(half), fft_length=fft_length)
    assert out.shape == (*batch, *fft_length)
    # irfft adjoint identity, with cropping/padding of the half spectrum inside
    y = r.normal(size=out.shape)
    vjp = tape_grad(lambda s: tf.reduce_sum(fft.irfft3d(s, fft_length=fft_length) * y),
                    tf.constant(half)).numpy()
    assert vjp.shape == half.shape
    assert real_inner(half, vjp) == pytest.approx(float(np.sum(out.numpy() * y)), rel=1e-9, abs=1e-9)
    # rfft adjoint identity
    big_y = random_complex(r, spectrum.shape)
    vjp = tape_grad(lambda v: tf.reduce_sum(tf.math.real(np.conj(big_y) * fft.rfft3d(v, fft_length=fft_length))),
                    tf.constant(x)).numpy()
    assert float(np.sum(x * vjp)) == pytest.approx(real_inner(big_y, spectrum.numpy()), rel=1e-9, abs=1e-9)


# --------------------------------------------------------------------------- raw-op gradients


def test_register_gradients_in_a_fresh_process():
    """Before: TensorFlow has no gradient for IRFFT3D. After: tf.signal.* are differentiable."""
    code = textwrap.dedent("""
        import numpy as np, tensorflow as tf
        from core.engine import fft
        modes = tf.signal.rfft3d(tf.random.stateless_normal((8, 6, 10), seed=[1, 1], dtype=tf.float64))
        try:
            with tf.GradientTape() as t:
                t.watch(modes)
                loss = tf.reduce_sum(tf.signal.irfft3d(modes))
            t.gradient(loss, modes)
            print("BEFORE: has gradient")
        except LookupError as err:
            print("BEFORE: LookupError")
        print("FIRST", sorted(fft.register_gradients().items()))
        print("SECOND", sorted(fft.register_gradients().items()))
        w = tf.random.stateless_normal((8, 6, 10), seed=[2, 2], dtype=tf.float64)
        def grads(inverse, forward):
            with tf.GradientTape(persistent=True) as t:
                t.watch(modes)
                x = inverse(modes)
                loss = tf.reduce_sum(tf.sin(x) * w) + tf.reduce_sum(tf.abs(forward(x)) ** 2)
            return t.gradient(loss, modes).numpy()
        a = grads(tf.signal.irfft3d, tf.signal.rfft3d)
        b = grads(fft.irfft3d, fft.rfft3d)
        print("DIFF", float(np.abs(a - b).max()), float(np.abs(b).max()))
        # raw op with an input larger than fft_length (the kernel crops)
        big = tf.constant(np.random.default_rng(0).normal(size=(9, 8, 7)) + 0j)
        with tf.GradientTape() as t:
            t.watch(big)
            y = tf.raw_ops.IRFFT3D(input=big, fft_length=[8, 6, 10], Treal=tf.float64)
            loss = tf.reduce_sum(y * w)
        g = t.gradient(loss, big).numpy()
        ref = np.zeros(big.shape, complex)
        with tf.GradientTape() as t:
            small = tf.constant(big.numpy()[:8, :6, :6])
            t.watch(small)
            loss = tf.reduce_sum(fft.irfft3d(small, fft_length=[8, 6, 10]) * w)
        ref[:8, :6, :6] = t.gradient(loss, small).numpy()
        print("CROP", float(np.abs(g - ref).max()))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines["BEFORE:"] == "LookupError"
    assert all(state == "registered" for _, state in eval(lines["FIRST"]))
    assert all(state == "ours" for _, state in eval(lines["SECOND"]))
    diff, scale = map(float, lines["DIFF"].split())
    assert diff <= 1e-12 * scale
    assert float(lines["CROP"]) < 1e-12


def test_register_gradients_keeps_an_existing_gradient(monkeypatch):
    """An op that already has a gradient (here FFT3D, TensorFlow's own) is left alone."""
    def never_called(op, grad):  # pragma: no cover - must not be registered
        raise AssertionError("replaced an existing gradient")

    monkeypatch.setattr(fft, "_OP_GRADIENTS", {"FFT3D": never_called})
    assert fft.register_gradients() == {"FFT3D": "kept"}
    z = tf.constant(random_complex(rng(22), (3, 4, 5)))
    grad = tape_grad(lambda v: tf.reduce_sum(tf.math.real(tf.signal.fft3d(v))), z)
    assert np.all(np.isfinite(grad.numpy()))


def test_nd_op_gradient_functions_in_graph_mode():
    """RFFTND/IRFFTND have no CPU kernel; their gradient functions are checked on the graph op.

    The op is built (never run: a v1 session prunes it away) and the registered gradient
    function is called on it with an upstream gradient of unknown static shape, as in
    backprop, where TensorFlow's shape function for these ops claims a wrong shape.
    """
    r = rng(23)
    x = r.normal(size=(3, 4, 6))
    cw = random_complex(r, (3, 4, 4))
    spectrum = random_complex(r, (3, 4, 4))
    w = r.normal(size=(3, 4, 6))
    graph = tf.Graph()
    with graph.as_default():
        v = tf.constant(x)
        up_c = tf.compat.v1.placeholder(tf.complex128, shape=None)
        y = tf.raw_ops.RFFTND(input=v, fft_length=[4, 6], axes=[1, 2], Tcomplex=tf.complex128)
        dx = fft._OP_GRADIENTS["RFFTND"](y.op, up_c)[0]
        s = tf.constant(spectrum)
        up_r = tf.compat.v1.placeholder(tf.float64, shape=None)
        z = tf.raw_ops.IRFFTND(input=s, fft_length=[4, 6], axes=[1, 2], Treal=tf.float64)
        ds = fft._OP_GRADIENTS["IRFFTND"](z.op, up_r)[0]
        assert dx.shape == (3, 4, 6) and ds.shape == (3, 4, 4)
    # keep only what the gradients need: the forward ops must not be among it
    needed = tf.compat.v1.graph_util.extract_sub_graph(graph.as_graph_def(), [dx.op.name, ds.op.name])
    assert not {node.op for node in needed.node} & {"RFFTND", "IRFFTND"}
    pruned = tf.Graph()
    with pruned.as_default():
        tf.compat.v1.import_graph_def(needed, name="")
        with tf.compat.v1.Session(graph=pruned) as session:
            got_dx, got_ds = session.run([dx.name, ds.name], feed_dict={up_c.name: cw, up_r.name: w})

    ours = tape_grad(lambda t: tf.reduce_sum(tf.math.real(tf.math.conj(cw) * fft.rfftnd(t, axes=[1, 2]))),
                     tf.constant(x))
    np.testing.assert_allclose(got_dx, ours.numpy(), atol=1e-12)
    ours = tape_grad(lambda t: tf.reduce_sum(fft.irfftnd(t, fft_length=[4, 6], axes=[1, 2]) * w),
                     tf.constant(spectrum))
    np.testing.assert_allclose(got_ds, ours.numpy(), atol=1e-12)


# --------------------------------------------------------------------------- graph mode, unknown cotangents


@pytest.fixture
def registered():
    """The raw-op gradients, registered in this process (idempotent, as `fieldscope check` does)."""
    fft.register_gradients()


def vjp_with_unknown_cotangent(forward, x_spec, dy_dtype):
    """The VJP of ``forward`` traced with a cotangent of unknown shape, rank included.

    That is what TensorFlow feeds in graph mode (``tf.test.compute_gradient``'s
    placeholder, a caller's ``output_gradients`` of unknown shape).
    """

    @tf.function(input_signature=[x_spec, tf.TensorSpec(None, dy_dtype)])
    def vjp(x, dy):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = forward(x)
        return tape.gradient(y, x, output_gradients=dy)

    return vjp.get_concrete_function()


def eager_vjp(forward, x, dy):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = forward(x)
    return tape.gradient(y, x, output_gradients=dy).numpy()


# (name, transform under test, its eager reference in core.engine.fft, input shape, output shape);
# the forward transforms take real input, the inverse ones complex
UNKNOWN_COTANGENT_CASES = [
    ("tf.signal.rfft3d", tf.signal.rfft3d, fft.rfft3d, (2, 3, 4), (2, 3, 3)),
    ("tf.signal.irfft3d", lambda s: tf.signal.irfft3d(s, fft_length=[2, 3, 5]),
     lambda s: fft.irfft3d(s, fft_length=[2, 3, 5]), (2, 3, 3), (2, 3, 5)),
    ("rfft3d", fft.rfft3d, fft.rfft3d, (2, 2, 3, 5), (2, 2, 3, 3)),
    ("irfft3d", fft.irfft3d, fft.irfft3d, (2, 2, 3, 3), (2, 2, 3, 4)),
    ("rfftnd-4-axes", fft.rfftnd, fft.rfftnd, (2, 3, 2, 5), (2, 3, 2, 3)),
    ("irfftnd-4-axes", lambda s: fft.irfftnd(s, fft_length=[2, 3, 2, 5]),
     lambda s: fft.irfftnd(s, fft_length=[2, 3, 2, 5]), (2, 3, 2, 3), (2, 3, 2, 5)),
    ("rfftnd-4-of-5-axes", lambda x: fft.rfftnd(x, axes=[1, 2, 3, 4]),
     lambda x: fft.rfftnd(x, axes=[1, 2, 3, 4]), (2, 2, 3, 2, 4), (2, 2, 3, 2, 3)),
]


@pytest.mark.parametrize("name, transform, reference, in_shape, out_shape", UNKNOWN_COTANGENT_CASES,
                         ids=[case[0] for case in UNKNOWN_COTANGENT_CASES])
def test_gradient_with_unknown_shape_cotangent_in_tf_function(registered, name, transform, reference,
                                                             in_shape, out_shape):
    """Regression: the gradients read the cotangent's rank (TypeError: 'NoneType' ... integer).

    The gradient traced with a cotangent of unknown shape equals the eager one.
    """
    r = rng(24)
    forward = not name.split(".")[-1].startswith("irfft")
    x_dtype, dy_dtype = (tf.float64, tf.complex128) if forward else (tf.complex128, tf.float64)
    vjp = vjp_with_unknown_cotangent(transform, tf.TensorSpec(in_shape, x_dtype), dy_dtype)
    x = r.normal(size=in_shape) if forward else random_complex(r, in_shape)
    dy = random_complex(r, out_shape) if forward else r.normal(size=out_shape)
    got = vjp(tf.constant(x), tf.constant(dy)).numpy()
    np.testing.assert_allclose(got, eager_vjp(reference, tf.constant(x), tf.constant(dy)), atol=1e-12)


def rfftnd_vjp_traced(shape, **kwargs):
    """The VJP of tf.signal.rfftnd traced in a graph, with a cotangent of unknown shape, pruned.

    RFFTND has no CPU kernel, and a tf.function runs every op it holds; the VJP needs
    only the op's inputs, so the traced graph is pruned to it (tf.compat.v1.wrap_function).
    """

    def vjp(t, cotangent):
        with tf.GradientTape() as tape:
            tape.watch(t)
            y = tf.signal.rfftnd(t, **kwargs)
        return tape.gradient(y, t, output_gradients=cotangent)

    traced = tf.compat.v1.wrap_function(vjp, [tf.TensorSpec(shape, tf.float64), tf.TensorSpec(None, tf.complex128)])
    return traced.prune(feeds=traced.inputs, fetches=traced.outputs[0])


def test_tf_signal_rfftnd_gradient_without_fft_length_in_graph_mode(registered):
    """Regression: tf.signal.rfftnd passes shape(x)[-r:] as fft_length, static but not a Const."""
    r = rng(25)
    shape = (3, 4, 6)
    x = tf.constant(r.normal(size=shape))
    dy = tf.constant(random_complex(r, (3, 4, 4)))
    pruned = rfftnd_vjp_traced(shape)
    assert "RFFTND" not in {op.type for op in pruned.graph.get_operations()}
    np.testing.assert_allclose(pruned(x, dy).numpy(), eager_vjp(fft.rfftnd, x, dy), atol=1e-12)


def test_tf_signal_rfftnd_gradient_with_axes_but_no_fft_length_names_the_mismatch(registered):
    """With axes but no fft_length, tf.signal.rfftnd passes the whole shape: refused, not guessed."""
    with pytest.raises(ValueError, match=r"fft_length \[3, 4, 6\] needs one entry per axis in \[1, 2\]"):
        rfftnd_vjp_traced((3, 4, 6), axes=[1, 2])
    pruned = rfftnd_vjp_traced((3, 4, 6), axes=[1, 2], fft_length=[4, 6])
    r = rng(25)
    x, dy = tf.constant(r.normal(size=(3, 4, 6))), tf.constant(random_complex(r, (3, 4, 4)))
    np.testing.assert_allclose(pruned(x, dy).numpy(), eager_vjp(lambda t: fft.rfftnd(t, axes=[1, 2]), x, dy),
                               atol=1e-12)


def graph_mode_jacobians(transform, x):
    """tf.test.compute_gradient in a graph: the cotangent is a placeholder of unknown shape."""
    with tf.Graph().as_default(), tf.compat.v1.Session():
        return tf.test.compute_gradient(transform, [x])


JACOBIAN_SHAPES = [(6,), (5,), (3, 4), (3, 5), (2, 3, 4), (2, 2, 5), (2, 3, 2, 4), (2, 2, 2, 3)]


@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("shape", JACOBIAN_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_nd_jacobians_match_numerical_ones(mode, shape):
    """Theoretical vs numerical Jacobian (float64) of rfftnd and irfftnd at ranks 1-4."""
    r = rng(26)
    compute = graph_mode_jacobians if mode == "graph" else lambda f, x: tf.test.compute_gradient(f, [x])
    x = r.normal(size=shape)
    spectrum = random_complex(r, half_shape(shape))
    for transform, arg in [(fft.rfftnd, x), (lambda s: fft.irfftnd(s, fft_length=shape), spectrum)]:
        (theoretical,), (numerical,) = compute(transform, arg)
        np.testing.assert_allclose(theoretical, numerical, atol=1e-8 * np.abs(numerical).max())


@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("shape", [(2, 3, 4), (3, 2, 5)], ids=["2x3x4", "3x2x5"])
def test_3d_jacobians_match_numerical_ones(registered, mode, shape):
    """Theoretical vs numerical Jacobian (float64) of rfft3d/irfft3d, ours and tf.signal's."""
    r = rng(27)
    compute = graph_mode_jacobians if mode == "graph" else lambda f, x: tf.test.compute_gradient(f, [x])
    x = r.normal(size=shape)
    spectrum = random_complex(r, half_shape(shape))
    for transform, arg in [(fft.rfft3d, x), (tf.signal.rfft3d, x),
                           (lambda s: fft.irfft3d(s, fft_length=shape), spectrum),
                           (lambda s: tf.signal.irfft3d(s, fft_length=shape), spectrum)]:
        (theoretical,), (numerical,) = compute(transform, arg)
        np.testing.assert_allclose(theoretical, numerical, atol=1e-8 * np.abs(numerical).max())


# --------------------------------------------------------------------------- malformed input


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: fft.rfft3d(tf.zeros((4, 0, 4))), "length 0"),
        (lambda: fft.irfft3d(tf.zeros((4, 4, 0), tf.complex64), fft_length=[4, 4, 4]), "length 0"),
        (lambda: fft.irfft3d(tf.zeros((4, 4, 1), tf.complex64)), "cannot infer"),
        (lambda: fft.rfft3d(tf.zeros((2, 4, 4, 4)), fft_length=[4, 4, 0]), "positive"),
        (lambda: fft.rfft3d(tf.zeros((4, 4, 4)), fft_length=[4, 4]), "3 entries"),
        (lambda: fft.irfft3d(tf.zeros((4, 4, 3), tf.complex64), fft_length=[4, 4, -2]), "positive"),
        (lambda: fft.rfft3d(tf.zeros((4, 4))), "rank >= 3"),
        (lambda: fft.rfft3d(tf.zeros((4, 4, 4), tf.int32)), "int32"),
        (lambda: fft.rfft3d(tf.zeros((4, 4, 4), tf.complex64)), "complex64"),
        (lambda: fft.irfft3d(tf.zeros((4, 4, 4))), "needs a complex input"),
        (lambda: fft.rfft3d(tf.zeros((4, 4, 4), tf.float16)), "float16"),
        (lambda: fft.rfftnd(tf.zeros((4, 4)), axes=[0, 2]), "out of range"),
        (lambda: fft.rfftnd(tf.zeros((4, 4)), axes=[0, -2]), "repeat"),
        (lambda: fft.rfftnd(tf.zeros((4, 4)), axes=[]), "empty"),
        (lambda: fft.rfftnd(tf.zeros((4, 4)), norm="unitary"), "norm"),
        (lambda: fft.rfftnd(tf.zeros((4, 4)), fft_length=[4]), "2 entries"),
        (lambda: fft.rfft3d(tf.zeros((4, 4, 4)), fft_length=[4.5, 4, 4]), "integers"),
        (lambda: fft.rfft3d("not a tensor"), "tensor|needs a real"),
    ],
)
def test_malformed_input_raises_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("transform", [fft.rfft3d, fft.rfftnd], ids=["rfft3d", "rfftnd"])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_numpy_complex_input_to_a_real_transform_raises_value_error(transform, dtype):
    """Regression: a numpy complex array was cast to real, with only numpy's ComplexWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old path: a ComplexWarning, then a real transform
        with pytest.raises(ValueError, match=f"needs a real floating-point input.*got dtype {np.dtype(dtype).name}"):
            transform(np.ones((2, 3, 4), dtype))


def test_unknown_transform_sizes_in_graph_raise_value_error():
    f = tf.function(fft.rfft3d, input_signature=[tf.TensorSpec([4, None, 4], tf.float32)])
    with pytest.raises(ValueError, match="known when the graph is built"):
        f.get_concrete_function()


# --------------------------------------------------------------------------- architecture


def test_importing_core_loads_no_qt():
    code = ("import sys, core, core.engine.fft, core.engine.fft_composite; "
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('PySide6', 'PyQt5', 'PyQt6', 'pyqtgraph', 'vispy', 'qtpy')]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_importing_core_package_does_not_load_tensorflow():
    code = "import sys, core; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False"
