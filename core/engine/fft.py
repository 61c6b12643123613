"""Differentiable real FFTs for TensorFlow: ``rfft3d``, ``irfft3d``, ``rfftnd``, ``irfftnd``.

TensorFlow (2.21) registers no gradient for the RFFT3D, IRFFT3D, RFFTND and IRFFTND
ops, and its RFFTND/IRFFTND have no CPU or XLA kernel at all. The functions here have
the signatures, defaults and results of their ``tf.signal`` namesakes, run on CPU and
GPU, eagerly, in ``tf.function`` and under ``tf.function(jit_compile=True)``, and are
differentiable in both directions to any order (each backward pass is built from the
other differentiable transform, so Hessian-vector products work).

Conventions
-----------
For transform lengths n = (n_1, ..., n_r), N = n_1 * ... * n_r, and the last
transformed axis halved to m = n_r // 2 + 1 stored modes:

    forward  X[k] = sum_j x[j] exp(-2 pi i k.j / n)           (unnormalised, numpy's rfftn)
    inverse  x[j] = (1/N) Re sum_{k in full grid} Z[k] exp(+2 pi i k.j / n)

where Z is the half-spectrum X completed by Hermitian symmetry: Z[k] = X[k] for the
stored modes (0 <= k_r < m) and Z[k] = conj(X[-k]) for the others.

Half-spectra that are not Hermitian. The stored modes on the self-conjugate planes
(k_r = 0, and k_r = n_r / 2 when n_r is even) contain both k and -k, so an arbitrary
complex array need not be a valid half-spectrum there. The inverse transform is
*defined* by the formula above: only the Hermitian part (Z[k] + conj Z[-k]) / 2 of
those planes counts, and the anti-Hermitian part (including the imaginary parts of
the DC and Nyquist modes) is ignored. CPU FFT libraries (and XLA on CPU) compute
exactly this; cuFFT does not promise to, so on a machine with a GPU the planes are
projected onto their Hermitian part explicitly before the kernel runs. The gradient
below is the exact gradient of this definition everywhere.

Complex-gradient convention. As for TensorFlow's own FFT gradients: for a real loss
L of a complex tensor z = a + i b the gradient is dL/da + i dL/db. With that
convention the vector-Jacobian products are

    irfft:  dL/dX[k] = (w[k_r] / N) * rfft(dL/dx)[k]
    rfft:   dL/dx    = N * irfft(dL/dX / w)

with w = 1 on the self-conjugate planes and w = 2 on every other stored mode (whose
conjugate twin is not stored, so a change there moves two modes of the full
spectrum). Forgetting the 1/N and the w is what makes the naive backward pass
``rfft3d(dy)`` return N = 262144 at the DC mode of a 64^3 grid where the true
derivative of sum(irfft3d(X)) is 1.

Padding and cropping with ``fft_length`` follow ``tf.signal`` (and numpy): along each
transformed axis the input is cut to the length, or padded with zeros at the end;
for the inverse transforms the last axis is cut or padded to n_r // 2 + 1.

Restrictions: the rank of the input and the sizes of the transformed axes must be
known when the graph is built (batch dimensions may be dynamic); ``fft_length`` and
``axes`` must be constants or static shapes (``tf.shape(x)[-r:]`` with x's shape
static, as ``tf.signal.rfftnd`` passes by default). Cotangents need not be known: in
graph mode (``tf.function``, ``tf.test.compute_gradient``) the gradients accept a
cotangent of unknown shape, rank included, and assert the forward result's shape
on it. Invalid input (a numpy complex array for a real transform included) raises
``ValueError`` before any TensorFlow kernel runs, because TensorFlow's FFT kernels
abort the whole process on zero-length transforms.

Vectorised derivatives. ``GradientTape.jacobian``/``batch_jacobian`` (with their default
``experimental_use_pfor=True``) and ``tf.vectorized_map`` rewrite every op for an added
leading batch axis. Everything here works on the trailing (or explicitly listed) axes
with sizes taken from the unbatched shapes, which that rewrite preserves; the one op
whose rewrite is wrong for negative axes, ``tf.roll``, is only given non-negative ones
(``mirror_modes``, the index -k). So vectorised Jacobians and Hessians equal the
unvectorised ones, eagerly, in ``tf.function`` and under XLA.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import tensor_util

__all__ = [
    "rfft3d",
    "irfft3d",
    "rfftnd",
    "irfftnd",
    "register_gradients",
    "half_spectrum_weights",
    "mirror_modes",
    "complex_fft_axes",
]

_REAL_TO_COMPLEX = {tf.float32: tf.complex64, tf.float64: tf.complex128}
_COMPLEX_TO_REAL = {tf.complex64: tf.float32, tf.complex128: tf.float64}
_NORMS = ("backward", "forward", "ortho")


# ---------------------------------------------------------------------------
# Small pure helpers
# ---------------------------------------------------------------------------


def half_spectrum_weights(n_last: int) -> np.ndarray:
    """Multiplicity w of each stored mode along a halved axis of length ``n_last``.

    w = 1 for k = 0 and, when ``n_last`` is even, for k = n_last / 2 (self-conjugate
    planes: their twin is stored too); w = 2 for every other stored k (its twin
    -k is not stored). Length n_last // 2 + 1.
    """
    m = n_last // 2 + 1
    w = np.full(m, 2.0)
    w[0] = 1.0
    if n_last % 2 == 0:
        w[-1] = 1.0
    return w


def mirror_modes(t: tf.Tensor, axes: Sequence[int]) -> tf.Tensor:
    """``t`` at the negated wavevector: t[-k] (index -k mod n) along each axis in ``axes``.

    Along an axis of length n the entries k = 0, 1, ..., n-1 become 0, n-1, ..., 1:
    reversed, then rolled by one. ``axes`` may be negative; they are made non-negative
    against the static rank before they reach ``tf.roll``, because TensorFlow's
    vectorisation (pfor, behind ``tf.vectorized_map`` and the default
    ``GradientTape.jacobian``/``batch_jacobian``) rewrites ``tf.roll(t, shift, axis)`` as a
    roll over ``axis + 1`` of the batched tensor: right for a non-negative axis, the axis
    after the intended one for a negative axis (its rewrites of reverse, split, concat
    and gather do check the sign). A Hessian built by ``tape.jacobian`` through such a
    roll was wrong (entries off by up to 0.56 for the whitened field posterior at
    6x4x5, whose diagonal is about -1.3) while the unvectorised one was right.
    """
    rank = t.shape.rank
    if rank is None:
        raise ValueError("mirror_modes: the rank of the input must be known when the graph is built")
    axes = [a % rank for a in axes]
    if not axes:
        return t
    return tf.roll(tf.reverse(t, axis=axes), shift=[1] * len(axes), axis=axes)


def _hermitian_part_on_planes(spectrum: tf.Tensor, lengths: Sequence[int]) -> tf.Tensor:
    """Replace the self-conjugate planes of a half-spectrum by their Hermitian part.

    The transformed axes are the trailing ``len(lengths)`` axes of ``spectrum``, the
    last one halved. On a plane P (fixed k_r) the Hermitian part is
    (P[k] + conj(P[-k])) / 2 over the other transformed axes.
    """
    rank = len(lengths)
    n_last = lengths[-1]
    m = n_last // 2 + 1
    plane_axes = list(range(-rank, -1))  # the non-halved transformed axes

    def hermitian_part(plane):
        return 0.5 * (plane + tf.math.conj(mirror_modes(plane, plane_axes)))

    first = hermitian_part(spectrum[..., 0:1])
    if n_last % 2 == 1:
        if m == 1:
            return first
        return tf.concat([first, spectrum[..., 1:]], axis=-1)
    last = hermitian_part(spectrum[..., m - 1:m])
    return tf.concat([first, spectrum[..., 1:m - 1], last], axis=-1)


_PROJECT_PLANES: bool | None = None


def _kernel_needs_projection() -> bool:
    """True when a GPU is visible, whose cuFFT does not ignore the anti-Hermitian part."""
    global _PROJECT_PLANES
    if _PROJECT_PLANES is None:
        _PROJECT_PLANES = bool(tf.config.list_logical_devices("GPU"))
    return _PROJECT_PLANES


def _with_static_shape(t: tf.Tensor, shape: tf.TensorShape) -> tf.Tensor:
    """``t`` with what ``shape`` knows of its static shape (rank included) added.

    Cotangents in graph mode can have an unknown static shape, even an unknown rank
    (``tf.test.compute_gradient``'s placeholder, a caller's ``output_gradients``),
    while the VJPs below need the rank and the transformed sizes. The shape of the
    forward result is known, so it is asserted on the cotangent (a run-time check in
    graph mode; nothing is added when ``t`` already knows as much, as in eager mode).
    """
    merged = t.shape.merge_with(shape)
    if merged == t.shape:  # TensorShape equality: same rank (or both unknown), same dims
        return t
    return tf.ensure_shape(t, merged)


def _static_int_vector(t: tf.Tensor) -> np.ndarray | None:
    """The value of a 1-D integer tensor when the graph is built, or None.

    Beyond ``tf.get_static_value`` (constants and simple folds), this evaluates shape
    expressions such as ``tf.shape(x)[-r:]`` (what ``tf.signal.rfftnd`` passes as its
    default ``fft_length``) when the shape they read is static.
    """
    value = tf.get_static_value(t)
    if value is not None:
        return np.asarray(value)
    if t.shape.rank != 1 or not t.dtype.is_integer:
        return None
    try:
        as_shape = tensor_util.constant_value_as_shape(t)
    except (TypeError, ValueError):
        return None
    if not as_shape.is_fully_defined():
        return None
    return np.asarray(as_shape.as_list(), dtype=t.dtype.as_numpy_dtype)


# ---------------------------------------------------------------------------
# Kernels on the trailing axes (exact sizes; no gradient machinery)
# ---------------------------------------------------------------------------


def complex_fft_axes(t: tf.Tensor, axes: Sequence[int], inverse: bool) -> tf.Tensor:
    """Complex (I)FFT of ``t`` over the listed axes (any order, any count), unnormalised forward
    and 1/N inverse as tf.signal's (differentiable: TensorFlow's own FFT gradients)."""
    rank = t.shape.rank
    axes = sorted(a % rank for a in axes)
    ops = ({1: tf.signal.ifft, 2: tf.signal.ifft2d, 3: tf.signal.ifft3d} if inverse else
           {1: tf.signal.fft, 2: tf.signal.fft2d, 3: tf.signal.fft3d})
    # Separable: transform groups of up to three axes, each group moved to the end.
    for start in range(0, len(axes), 3):
        group = axes[start:start + 3]
        others = [i for i in range(rank) if i not in group]
        perm = others + group
        if perm == list(range(rank)):
            t = ops[len(group)](t)
        else:
            t = tf.transpose(ops[len(group)](tf.transpose(t, perm)), list(np.argsort(perm)))
    return t


def _rfft_kernel(x: tf.Tensor, lengths: Sequence[int]) -> tf.Tensor:
    """Unnormalised real-to-complex FFT over the trailing ``len(lengths)`` axes."""
    rank = len(lengths)
    cdtype = _REAL_TO_COMPLEX[x.dtype]
    trailing = min(rank, 3)
    fft_length = tf.constant(lengths[-trailing:], tf.int32)
    raw = {1: tf.raw_ops.RFFT, 2: tf.raw_ops.RFFT2D, 3: tf.raw_ops.RFFT3D}[trailing]
    out = raw(input=x, fft_length=fft_length, Tcomplex=cdtype)
    if rank > 3:
        out = complex_fft_axes(out, list(range(-rank, -3)), inverse=False)
    return out


def _irfft_kernel(spectrum: tf.Tensor, lengths: Sequence[int]) -> tf.Tensor:
    """Complex-to-real inverse FFT (1/N normalised) over the trailing axes.

    Implements the documented definition for any half-spectrum (see module docstring).
    """
    rank = len(lengths)
    rdtype = _COMPLEX_TO_REAL[spectrum.dtype]
    if _kernel_needs_projection():
        spectrum = _hermitian_part_on_planes(spectrum, lengths)
    if rank > 3:
        spectrum = complex_fft_axes(spectrum, list(range(-rank, -3)), inverse=True)
    trailing = min(rank, 3)
    fft_length = tf.constant(lengths[-trailing:], tf.int32)
    raw = {1: tf.raw_ops.IRFFT, 2: tf.raw_ops.IRFFT2D, 3: tf.raw_ops.IRFFT3D}[trailing]
    return raw(input=spectrum, fft_length=fft_length, Treal=rdtype)


# ---------------------------------------------------------------------------
# The differentiable transforms on trailing axes, and their VJPs
# ---------------------------------------------------------------------------


def _irfft_vjp(dy: tf.Tensor, lengths: Sequence[int], cdtype: tf.DType) -> tf.Tensor:
    """dL/dX = (w / N) rfft(dL/dx): the VJP of the inverse transform."""
    scale = half_spectrum_weights(lengths[-1]) / math.prod(lengths)
    return _rfft_trailing(dy, lengths) * tf.constant(scale, dtype=cdtype)


def _rfft_vjp(dspectrum: tf.Tensor, lengths: Sequence[int]) -> tf.Tensor:
    """dL/dx = N irfft(dL/dX / w): the VJP of the forward transform."""
    scale = math.prod(lengths) / half_spectrum_weights(lengths[-1])
    return _irfft_trailing(dspectrum * tf.constant(scale, dtype=dspectrum.dtype), lengths)


def _rfft_trailing(x: tf.Tensor, lengths: Sequence[int]) -> tf.Tensor:
    lengths = tuple(int(n) for n in lengths)

    @tf.custom_gradient
    def _rfft_fwd(x):
        spectrum = _rfft_kernel(x, lengths)

        def _rfft_bwd(dspectrum):
            return _rfft_vjp(_with_static_shape(dspectrum, spectrum.shape), lengths)

        return spectrum, _rfft_bwd

    return _rfft_fwd(x)


def _irfft_trailing(spectrum: tf.Tensor, lengths: Sequence[int]) -> tf.Tensor:
    lengths = tuple(int(n) for n in lengths)
    cdtype = spectrum.dtype

    @tf.custom_gradient
    def _irfft_fwd(spectrum):
        y = _irfft_kernel(spectrum, lengths)

        def _irfft_bwd(dy):
            return _irfft_vjp(_with_static_shape(dy, y.shape), lengths, cdtype)

        return y, _irfft_bwd

    return _irfft_fwd(spectrum)


# ---------------------------------------------------------------------------
# Validation, axes, padding and cropping
# ---------------------------------------------------------------------------


def _to_tensor(value, preferred, what: str) -> tf.Tensor:
    numpy_dtype = getattr(value, "dtype", None) if not tf.is_tensor(value) else None
    if preferred.is_floating and getattr(numpy_dtype, "kind", None) == "c":
        # tf.convert_to_tensor would cast to the preferred real dtype, dropping the
        # imaginary part with only numpy's ComplexWarning
        raise ValueError(f"{what} needs a real floating-point input (float32 or float64); "
                         f"got dtype {np.dtype(numpy_dtype).name}")
    try:
        return tf.convert_to_tensor(value, dtype_hint=preferred)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what}: input cannot be converted to a tensor: {err}") from None


def _check_dtype(t: tf.Tensor, allowed, what: str, kind: str) -> None:
    if t.dtype not in allowed:
        names = " or ".join(d.name for d in allowed)
        raise ValueError(f"{what} needs a {kind} input ({names}); got dtype {t.dtype.name}")


def _normalise_axes(rank: int, axes, what: str) -> list[int]:
    if axes is None:
        return list(range(rank))
    static = _static_int_vector(axes) if tf.is_tensor(axes) else axes
    if static is None:
        raise ValueError(f"{what}: axes must be known when the graph is built")
    try:
        raw = [int(a) for a in np.atleast_1d(np.asarray(static)).tolist()]
    except (TypeError, ValueError):
        raise ValueError(f"{what}: axes must be integers; got {static!r}") from None
    if not raw:
        raise ValueError(f"{what}: axes is empty; give at least one axis")
    out = []
    for a in raw:
        if not -rank <= a < rank:
            raise ValueError(f"{what}: axis {a} is out of range for an input of rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise ValueError(f"{what}: axes {raw} repeat an axis")
    return out


def _static_sizes(t: tf.Tensor, axes: Sequence[int], what: str) -> list[int]:
    sizes = [t.shape[a] for a in axes]
    if any(s is None for s in sizes):
        raise ValueError(
            f"{what}: the sizes of the transformed axes must be known when the graph is built; "
            f"input shape is {t.shape}")
    for a, s in zip(axes, sizes):
        if s == 0:
            raise ValueError(f"{what}: input axis {a} has length 0 (shape {t.shape}); "
                             "an FFT needs at least one point per transformed axis")
    return [int(s) for s in sizes]


def _parse_fft_length(fft_length, count: int, what: str) -> list[int] | None:
    if fft_length is None:
        return None
    static = _static_int_vector(fft_length) if tf.is_tensor(fft_length) else fft_length
    if static is None:
        raise ValueError(f"{what}: fft_length must be known when the graph is built")
    try:
        arr = np.asarray(static)
        if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and np.all(arr == np.round(arr))):
            raise TypeError
        values = [int(v) for v in np.atleast_1d(arr).tolist()]
    except (TypeError, ValueError):
        raise ValueError(f"{what}: fft_length must be a list of {count} integers; got {static!r}") from None
    if arr.ndim != 1 or len(values) != count:
        raise ValueError(f"{what}: fft_length must have {count} entries, one per transformed axis; "
                         f"got {static!r}")
    bad = [v for v in values if v <= 0]
    if bad:
        raise ValueError(f"{what}: fft_length entries must be positive; got {values}")
    return values


def _fit(t: tf.Tensor, axes: Sequence[int], sizes: Sequence[int]) -> tf.Tensor:
    """Crop or zero-pad ``t`` at the end of each axis in ``axes`` to ``sizes``."""
    rank = t.shape.rank
    crop = [slice(None)] * rank
    pad = [[0, 0] for _ in range(rank)]
    need_crop = need_pad = False
    for a, n in zip(axes, sizes):
        have = t.shape[a]
        if have > n:
            crop[a] = slice(0, n)
            need_crop = True
        elif have < n:
            pad[a][1] = n - have
            need_pad = True
    if need_crop:
        t = t[tuple(crop)]
    if need_pad:
        t = tf.pad(t, pad)
    return t


def _move_to_end(t: tf.Tensor, axes: Sequence[int]):
    """Transpose so that ``axes`` (in that order) become the trailing axes."""
    rank = t.shape.rank
    perm = [i for i in range(rank) if i not in axes] + list(axes)
    if perm == list(range(rank)):
        return t, None
    return tf.transpose(t, perm), list(np.argsort(perm))


def _move_back(t: tf.Tensor, inverse_perm):
    return t if inverse_perm is None else tf.transpose(t, inverse_perm)


def _norm_scale(norm, n_total: int, what: str) -> float:
    if norm is None:
        norm = "backward"
    if norm not in _NORMS:
        raise ValueError(f"{what}: norm must be one of {_NORMS}; got {norm!r}")
    return {"backward": 1.0, "forward": 1.0 / n_total, "ortho": 1.0 / math.sqrt(n_total)}[norm]


# ---------------------------------------------------------------------------
# Public transforms
# ---------------------------------------------------------------------------


def _rfft_general(input_tensor, fft_length, axes, norm, what, fixed_rank=None):
    x = _to_tensor(input_tensor, tf.float32, what)
    _check_dtype(x, (tf.float32, tf.float64), what, "real floating-point")
    if x.shape.rank is None:
        raise ValueError(f"{what}: the rank of the input must be known")
    if fixed_rank is not None:
        if x.shape.rank < fixed_rank:
            raise ValueError(f"{what} needs an input of rank >= {fixed_rank}; got shape {x.shape}")
        axes = list(range(x.shape.rank - fixed_rank, x.shape.rank))
    else:
        axes = _normalise_axes(x.shape.rank, axes, what)
    sizes = _static_sizes(x, axes, what)
    lengths = _parse_fft_length(fft_length, len(axes), what) or sizes
    scale = _norm_scale(norm, math.prod(lengths), what)
    x = _fit(x, axes, lengths)
    moved, back = _move_to_end(x, axes)
    out = _rfft_trailing(moved, lengths)
    if scale != 1.0:
        out = out * tf.constant(scale, out.dtype)
    return _move_back(out, back)


def _irfft_general(input_tensor, fft_length, axes, norm, what, fixed_rank=None):
    spectrum = _to_tensor(input_tensor, tf.complex64, what)
    _check_dtype(spectrum, (tf.complex64, tf.complex128), what, "complex")
    if spectrum.shape.rank is None:
        raise ValueError(f"{what}: the rank of the input must be known")
    if fixed_rank is not None:
        if spectrum.shape.rank < fixed_rank:
            raise ValueError(f"{what} needs an input of rank >= {fixed_rank}; got shape {spectrum.shape}")
        axes = list(range(spectrum.shape.rank - fixed_rank, spectrum.shape.rank))
    else:
        axes = _normalise_axes(spectrum.shape.rank, axes, what)
    sizes = _static_sizes(spectrum, axes, what)
    lengths = _parse_fft_length(fft_length, len(axes), what)
    if lengths is None:
        lengths = sizes[:-1] + [2 * (sizes[-1] - 1)]
        if lengths[-1] <= 0:
            raise ValueError(
                f"{what}: cannot infer the output length from a last axis of {sizes[-1]} stored mode(s) "
                f"(shape {spectrum.shape}); pass fft_length")
    scale = 1.0 / _norm_scale(norm, math.prod(lengths), what)
    spectrum = _fit(spectrum, axes, lengths[:-1] + [lengths[-1] // 2 + 1])
    moved, back = _move_to_end(spectrum, axes)
    if scale != 1.0:
        moved = moved * tf.constant(scale, moved.dtype)
    return _move_back(_irfft_trailing(moved, lengths), back)


def rfft3d(input_tensor, fft_length=None, name=None):
    """Differentiable 3D real FFT over the inner-most three axes (as ``tf.signal.rfft3d``).

    Args:
      input_tensor: float32 or float64 tensor of rank >= 3; leading axes are batch.
      fft_length: three positive ints; the input is cropped or zero-padded at the end
        of each inner axis to these lengths. Default: the inner shape.
      name: name scope.

    Returns:
      complex64/complex128 tensor ``[..., n0, n1, n2 // 2 + 1]``,
      X[k] = sum_j x[j] exp(-2 pi i k.j / n). Gradient (complex convention
      dL/dRe + i dL/dIm): dL/dx = N irfft3d(dL/dX / w), see the module docstring.
    """
    with tf.name_scope(name or "rfft3d"):
        return _rfft_general(input_tensor, fft_length, None, None, "rfft3d", fixed_rank=3)


def irfft3d(input_tensor, fft_length=None, name=None):
    """Differentiable 3D inverse real FFT over the inner-most three axes (as ``tf.signal.irfft3d``).

    Args:
      input_tensor: complex64 or complex128 half-spectrum ``[..., n0, n1, m]``.
      fft_length: output lengths (n0, n1, n2); the input is cropped or zero-padded to
        (n0, n1, n2 // 2 + 1). Default: (n0, n1, 2 (m - 1)); pass it for odd n2.
      name: name scope.

    Returns:
      real tensor ``[..., n0, n1, n2]``, x[j] = (1/N) Re sum_k Z[k] exp(+2 pi i k.j / n)
      with Z the Hermitian completion: only the Hermitian part of the self-conjugate
      planes counts. Gradient (complex convention dL/dRe + i dL/dIm):
      dL/dX = (w / N) rfft3d(dL/dx), w = 1 on the self-conjugate planes, 2 elsewhere.
    """
    with tf.name_scope(name or "irfft3d"):
        return _irfft_general(input_tensor, fft_length, None, None, "irfft3d", fixed_rank=3)


def rfftnd(input_tensor, fft_length=None, axes=None, norm=None, name=None):
    """Differentiable N-D real FFT over ``axes`` (as ``tf.signal.rfftnd``, also on CPU and XLA).

    Args:
      input_tensor: float32 or float64 tensor.
      fft_length: one positive length per axis in ``axes``; crop or zero-pad at the end.
        Default: the input's sizes along ``axes``.
      axes: the transformed axes; the last one is halved to n // 2 + 1. Default: all axes.
      norm: "backward" (default: unnormalised forward), "forward" (1/N) or "ortho" (1/sqrt N).
      name: name scope.

    Gradient convention and formulas as in the module docstring.
    """
    with tf.name_scope(name or "rfftnd"):
        return _rfft_general(input_tensor, fft_length, axes, norm, "rfftnd")


def irfftnd(input_tensor, fft_length=None, axes=None, norm=None, name=None):
    """Differentiable N-D inverse real FFT over ``axes`` (as ``tf.signal.irfftnd``, also on CPU and XLA).

    Args:
      input_tensor: complex64 or complex128 half-spectrum, halved along ``axes[-1]``.
      fft_length: output length per axis; the input is cropped or zero-padded to them
        (the last to n // 2 + 1). Default: input sizes, the last 2 (m - 1).
      axes: the transformed axes. Default: all axes.
      norm: "backward" (default: 1/N on the inverse), "forward" (none) or "ortho" (1/sqrt N).
      name: name scope.

    Only the Hermitian part of the self-conjugate planes counts (module docstring).
    """
    with tf.name_scope(name or "irfftnd"):
        return _irfft_general(input_tensor, fft_length, axes, norm, "irfftnd")


# ---------------------------------------------------------------------------
# Gradients for the raw TensorFlow ops
# ---------------------------------------------------------------------------


def _static_op_input(op, index: int, what: str) -> list[int]:
    value = _static_int_vector(op.inputs[index])
    if value is None:
        raise ValueError(f"gradient of {op.type}: {what} must be known when the graph is built "
                         f"(a constant, or the static shape of a tensor); got {op.inputs[index]}")
    return [int(v) for v in np.atleast_1d(value)]


def _op_input_rank(op) -> int:
    rank = op.inputs[0].shape.rank
    if rank is None:
        raise ValueError(f"gradient of {op.type}: the rank of its input must be known when the graph is built")
    return rank


def _op_input_sizes(op, axes: Sequence[int]) -> list[int]:
    """The op input's sizes along ``axes``, which the gradient is cropped or padded back to."""
    sizes = [op.inputs[0].shape[a] for a in axes]
    if any(n is None for n in sizes):
        raise ValueError(f"gradient of {op.type}: the sizes of the transformed axes of its input must be "
                         f"known when the graph is built; input shape is {op.inputs[0].shape}")
    return sizes


def _op_rfft_grad(op, grad, axes: list[int]):
    lengths = _static_op_input(op, 1, "fft_length")
    moved, back = _move_to_end(grad, axes)
    dx = _move_back(_rfft_vjp(moved, lengths), back)
    # The kernel crops an input longer than fft_length: those entries get no gradient.
    return _fit(dx, axes, _op_input_sizes(op, axes))


def _op_irfft_grad(op, grad, axes: list[int]):
    lengths = _static_op_input(op, 1, "fft_length")
    moved, back = _move_to_end(grad, axes)
    dspectrum = _move_back(_irfft_vjp(moved, lengths, op.inputs[0].dtype), back)
    return _fit(dspectrum, axes, _op_input_sizes(op, axes))


def _rfft3d_op_grad(op, grad):
    rank = _op_input_rank(op)
    # The 3-D ops' shape function is right: give an unknown-shape cotangent the output's shape.
    grad = _with_static_shape(grad, op.outputs[0].shape)
    return [_op_rfft_grad(op, grad, [rank - 3, rank - 2, rank - 1]), None]


def _irfft3d_op_grad(op, grad):
    rank = _op_input_rank(op)
    grad = _with_static_shape(grad, op.outputs[0].shape)
    return [_op_irfft_grad(op, grad, [rank - 3, rank - 2, rank - 1]), None]


def _with_true_shape(grad, op, axes, sizes):
    """The upstream gradient with the static shape the ND op really produces.

    TensorFlow's shape function for RFFTND/IRFFTND claims the output has the input's
    shape (in graph mode), so the static shape of ``grad`` can be wrong; the values
    at run time have the true shape. Drop the claimed shape and set the true one.
    """
    true_shape = op.inputs[0].shape.as_list()
    for a, n in zip(axes, sizes):
        true_shape[a] = n
    if grad.shape.rank is not None and grad.shape.as_list() == true_shape:
        return grad
    loose = tf.raw_ops.PlaceholderWithDefault(input=grad, shape=tf.TensorShape([None] * len(true_shape)))
    return tf.ensure_shape(loose, true_shape)


def _nd_op_axes_and_lengths(op) -> tuple[list[int], list[int]]:
    """The static ``axes`` and ``fft_length`` of an RFFTND/IRFFTND op, one length per axis."""
    rank = _op_input_rank(op)
    axes = [a % rank for a in _static_op_input(op, 2, "axes")]
    lengths = _static_op_input(op, 1, "fft_length")
    if len(lengths) != len(axes):
        # tf.signal.rfftnd(x, axes=...) without fft_length passes the whole shape of x
        raise ValueError(f"gradient of {op.type}: fft_length {lengths} needs one entry per axis in {axes}; "
                         "pass fft_length explicitly")
    return axes, lengths


def _rfftnd_op_grad(op, grad):
    axes, lengths = _nd_op_axes_and_lengths(op)
    grad = _with_true_shape(grad, op, axes, lengths[:-1] + [lengths[-1] // 2 + 1])
    return [_op_rfft_grad(op, grad, axes), None, None]


def _irfftnd_op_grad(op, grad):
    axes, lengths = _nd_op_axes_and_lengths(op)
    grad = _with_true_shape(grad, op, axes, lengths)
    return [_op_irfft_grad(op, grad, axes), None, None]


_OP_GRADIENTS = {
    "RFFT3D": _rfft3d_op_grad,
    "IRFFT3D": _irfft3d_op_grad,
    "RFFTND": _rfftnd_op_grad,
    "IRFFTND": _irfftnd_op_grad,
}
_registered_by_us: set[str] = set()


def register_gradients() -> dict[str, str]:
    """Register gradients for TensorFlow's RFFT3D, IRFFT3D, RFFTND and IRFFTND ops.

    After this call plain ``tf.signal.irfft3d`` (and friends) are differentiable, with
    the gradients documented in this module. Idempotent. An op that already has a
    gradient (one TensorFlow itself registers in a future release, or any other) is
    left alone.

    Returns:
      op name -> "registered" (now), "ours" (an earlier call), or "kept" (it already
      had a gradient that is not ours).
    """
    status = {}
    for op_type, fn in _OP_GRADIENTS.items():
        if op_type in _registered_by_us:
            status[op_type] = "ours"
            continue
        try:
            tf.RegisterGradient(op_type)(fn)
        except KeyError:  # the registry refuses a second gradient for an op
            status[op_type] = "kept"
        else:
            _registered_by_us.add(op_type)
            status[op_type] = "registered"
    return status
