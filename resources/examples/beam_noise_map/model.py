"""A beam and a noise map written by hand: the instrument smooths the field with a Gaussian
beam of width R (in cells) and scales it by a gain, and each cell has its own noise sd.

    d_i ~ Normal(gain (B * field)_i, noise_i^2),   B = exp(-(k R)^2 / 2) in Fourier space

The beam is applied with tf.signal.rfft3d / irfft3d, differentiable inside a model file.
Data: ``python make_data.py`` writes sky.npz (arrays "data" and "noise").
"""
import numpy as np
import tensorflow as tf

PARAMETERS = {"gain": {"dist": "lognormal", "loc": 0.0, "scale": 0.3}, "R": 1.5}


def _beam(shape, R, dtype):
    k2 = sum(np.meshgrid(*[(2 * np.pi * np.fft.fftfreq(n))**2 for n in shape[:2]],
                         (2 * np.pi * np.fft.rfftfreq(shape[2]))**2, indexing="ij"))
    return tf.constant(np.exp(-0.5 * k2 * R**2), dtype)


def smooth(field, R):
    modes = tf.signal.rfft3d(field)
    beam = tf.cast(_beam(field.shape.as_list(), R, field.dtype), modes.dtype)
    return tf.signal.irfft3d(modes * beam, fft_length=field.shape)


def log_likelihood(field, params, data):
    model = params["gain"] * smooth(field, float(PARAMETERS["R"]))
    r = (data["data"] - model) / data["noise"]
    return -0.5 * tf.reduce_sum(r * r) - tf.reduce_sum(tf.math.log(data["noise"]))


def simulate(field, params, seed):
    noise = tf.ones_like(field) * 0.3
    model = params["gain"] * smooth(field, float(PARAMETERS["R"]))
    return {"data": model + noise * tf.random.stateless_normal(tf.shape(field), seed=seed, dtype=field.dtype),
            "noise": noise}
