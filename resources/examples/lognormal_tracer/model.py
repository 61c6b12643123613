"""A log-normal tracer with linear bias and Poisson counts: galaxies counted in each cell of
a grid, their mean number nbar exp(b1 delta) for the Gaussian field delta that Fieldscope
samples, b1 the linear bias (sampled with it).

    n_i ~ Poisson(nbar exp(b1 delta_i))   (observed cells only: data["mask"])

Data: ``python make_data.py`` writes counts.npz (arrays "data" and "mask").
"""
import tensorflow as tf

PARAMETERS = {"b1": {"dist": "normal", "loc": 1.0, "scale": 0.5}, "nbar": 2.0}


def log_likelihood(field, params, data):
    log_rate = tf.math.log(params["nbar"]) + params["b1"] * field
    counts = data["data"]
    terms = counts * log_rate - tf.exp(log_rate) - tf.math.lgamma(counts + 1.0)
    return tf.reduce_sum(terms * data["mask"])


def simulate(field, params, seed):
    """Counts drawn from the model (calibration); every cell observed."""
    rate = params["nbar"] * tf.exp(params["b1"] * field)
    counts = tf.random.stateless_poisson(tf.shape(field), seed=seed, lam=rate, dtype=field.dtype)
    return {"data": counts, "mask": tf.ones_like(field)}
