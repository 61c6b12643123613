"""The composite path: real FFTs that TensorFlow can already differentiate on its own.

Hermitian completion of the half-spectrum followed by the complex ``tf.signal.ifft3d``
(and ``fft3d`` of the real input, cut to the stored half, for the forward transform).
TensorFlow registers gradients for FFT3D/IFFT3D, slicing, reversing and ``tf.math.real``,
so this path needs no custom gradient. It is slower (full complex transforms, twice
the memory) and serves as an independent reference for ``core.engine.fft`` in the tests and
the benchmark. Same conventions as ``core.engine.fft``: only the Hermitian part of the
self-conjugate planes of a half-spectrum counts (the real part of the complex inverse
of the completion).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

__all__ = ["hermitian_completion", "composite_irfft3d", "composite_rfft3d"]


def hermitian_completion(spectrum: tf.Tensor, n_last: int) -> tf.Tensor:
    """Full spectrum Z[..., n0, n1, n_last] from the half-spectrum X[..., n0, n1, n_last//2+1].

    Z[k] = X[k] for stored k; Z[k0, k1, kz] = conj(X[-k0, -k1, n_last - kz]) otherwise.
    """
    m = n_last // 2 + 1
    missing = n_last - m  # number of modes not stored along the last axis
    if missing == 0:
        return spectrum
    # kz = m .. n_last-1 come from n_last - kz = n_last-m .. 1, i.e. X[..., 1:missing+1] reversed
    twins = tf.reverse(spectrum[..., 1:missing + 1], axis=[-1])
    # k0, k1 -> -k0, -k1 (mod n) as gathers of index arrays, not tf.roll: TensorFlow's
    # vectorisation (pfor) rolls the wrong axis for a negative one (core.engine.fft.mirror_modes)
    for axis in (-3, -2):
        n = twins.shape[axis]
        twins = tf.gather(twins, (-np.arange(n)) % n, axis=axis)
    return tf.concat([spectrum, tf.math.conj(twins)], axis=-1)


def composite_irfft3d(spectrum: tf.Tensor, fft_length) -> tf.Tensor:
    """Inverse real 3D FFT as Re(ifft3d(hermitian_completion(X))); input at exact size."""
    full = hermitian_completion(spectrum, int(fft_length[-1]))
    return tf.math.real(tf.signal.ifft3d(full))


def composite_rfft3d(x: tf.Tensor) -> tf.Tensor:
    """Real 3D FFT as fft3d(x + 0i) cut to the stored half of the last axis."""
    m = x.shape[-1] // 2 + 1
    return tf.signal.fft3d(tf.complex(x, tf.zeros_like(x)))[..., :m]
