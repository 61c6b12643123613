"""The second seed question's model, as its user wrote it: a target whose likelihood holds a
trapezoid-rule cumulative integral, y(t) = int_0^t exp(A s) f(s) ds, written in TensorFlow.

Its gradient with respect to A is exact for this discretisation (100 nodes on [0, 10]);
``fieldscope check-model config.toml`` compares it with finite differences. The user's code
computes in float32 (tf.linspace(0., 10., 100) is float32), so the config keeps the default
dtype. Data: ``python make_data.py`` writes series.csv (a column y of 99 values).
"""
import numpy as np
import tensorflow as tf
import tensorflow.math as tfm

PI = np.pi
PARAMETERS = {"A": {"dist": "normal", "loc": 0.0, "scale": 0.5}, "variance": 0.25}


def log_likelihood(params, data):
    A, variance = params["A"], params["variance"]
    observed_data = data["y"]
    # integrate e^At * f[t] with respect to t between 0 and t, for all t
    t = tf.linspace(0., 10., 100)
    f = tf.ones(100)
    delta = t[1]-t[0]
    sum_term = tfm.multiply(tfm.exp(A*t), f)
    integrals = 0.5*delta*tfm.cumsum(sum_term[:-1] + sum_term[1:], axis=0)
    pred = integrals
    sq_diff = tfm.square(observed_data - pred)
    sq_diff = tf.reduce_sum(sq_diff, axis=0)
    log_lik = -0.5*tfm.log(2*PI*variance) - 0.5*sq_diff/variance
    return log_lik


def simulate(params, seed):
    """Data drawn from the model at ``params`` (calibration), as the likelihood reads them."""
    t = tf.linspace(0., 10., 100)
    delta = t[1] - t[0]
    sum_term = tfm.exp(params["A"] * t)
    pred = 0.5 * delta * tfm.cumsum(sum_term[:-1] + sum_term[1:], axis=0)
    noise = tf.random.stateless_normal([99], seed=seed, dtype=pred.dtype)
    return {"y": pred + tf.sqrt(params["variance"]) * noise}
