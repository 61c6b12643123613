"""TensorFlow twins of the scalar prior kinds of ``core.priors`` (which defines them).

``TF_PRIOR_KINDS`` maps each sampled kind name of ``core.priors.PRIOR_KINDS`` to a class
built from the numpy prior object (its parameters are read from it, never restated).
A twin gives, in the kind's unconstrained coordinate u (the same map as the numpy
``forward`` / ``inverse`` / ``log_jacobian``):

    bijector()       the tfp bijector x = forward(u)
    distribution()   the tfp distribution of x (the prior itself)
    log_prob(u)      the closed form of log p(x(u)) + log |dx/du| (= numpy
                     ``unconstrained_logpdf``), guarded for HMC
    forward(u)       (x, ok): x and where it was computed (ok = False: overflow)
    log_forward(u)   log x, for positive kinds

Two densities of the same kind, on purpose. The integral model sums ``log_prob(u)``
(closed forms whose -inf regions and gradients are guarded, as its numpy mirror
``core.integral.log_density``). The field model's hyperparameters sum
``distribution().log_prob(bijector().forward(u)) + bijector().forward_log_det_jacobian(u)``
and draw their starting hyperparameters with ``distribution().sample``, as they always
have: the two are equal in exact arithmetic but not bit for bit (e.g. tfd.Uniform is -inf
where a float32 sigmoid reaches ``high``; the closed form is not), and the field's seeds
must keep giving the same draws. ``tests/core/engine/test_prior_density.py`` checks both
against the numpy registry for every kind.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from core.log_density import LOG_2PI, positive_exp_limit, quadratic_limit

tfb = tfp.bijectors
tfd = tfp.distributions

__all__ = ["TF_PRIOR_KINDS", "tf_prior", "default_limits"]



def _neg_half_exp(e, limit):
    """-exp(e) / 2 where e <= limit, else -inf; gradient-safe (double where)."""
    ok = e <= limit
    e_safe = tf.where(ok, e, tf.zeros_like(e))
    return tf.where(ok, -0.5 * tf.exp(e_safe), tf.constant(-np.inf, e.dtype))


def default_limits(dtype) -> dict[str, float]:
    """The overflow guards of ``dtype``: largest u exponentiated by a log coordinate and
    largest exponent of a quadratic form (``core.integral.quadrature``)."""
    np_dtype = tf.as_dtype(dtype).as_numpy_dtype
    return {"positive_exp": positive_exp_limit(np_dtype), "quadratic": quadratic_limit(np_dtype)}


class _Twin:
    def __init__(self, prior, dtype, limits=None):
        self.prior = prior
        self.dtype = tf.as_dtype(dtype)
        self.limits = default_limits(self.dtype) if limits is None else limits

    def _constant(self, name):
        return tf.constant(getattr(self.prior, name), self.dtype)


class _Normal(_Twin):
    def log_prob(self, u):
        z = (u - self._constant("loc")) / self._constant("scale")
        return -0.5 * z * z + (-math.log(self.prior.scale) - 0.5 * LOG_2PI)

    def forward(self, u):
        return u, tf.ones_like(u, dtype=tf.bool)

    def bijector(self):
        return tfb.Identity()

    def distribution(self):
        return tfd.Normal(self._constant("loc"), self._constant("scale"))


class _LogCoordinate(_Twin):
    """u = log x; exp(u) computed only up to the ``positive_exp`` limit."""

    def safe_u(self, u):
        ok = u <= self.limits["positive_exp"]
        return tf.where(ok, u, tf.zeros_like(u)), ok

    def forward(self, u):
        u_safe, ok = self.safe_u(u)
        return tf.exp(u_safe), ok

    def log_forward(self, u):
        return self.safe_u(u)[0]

    def bijector(self):
        return tfb.Exp()


class _LogNormal(_LogCoordinate):
    def log_prob(self, u):
        z = (u - self._constant("loc")) / self._constant("scale")
        return -0.5 * z * z + (-math.log(self.prior.scale) - 0.5 * LOG_2PI)

    def distribution(self):
        return tfd.LogNormal(self._constant("loc"), self._constant("scale"))


class _HalfNormal(_LogCoordinate):
    def log_prob(self, u):
        log_scale = math.log(self.prior.scale)
        const = math.log(2.0) - log_scale - 0.5 * LOG_2PI
        return const + _neg_half_exp(2.0 * (u - log_scale), self.limits["quadratic"]) + u

    def distribution(self):
        return tfd.HalfNormal(self._constant("scale"))


class _Uniform(_Twin):
    def log_prob(self, u):
        return -tf.math.softplus(u) - tf.math.softplus(-u)

    def forward(self, u):
        low, high = self.prior.low, self.prior.high
        return low + (high - low) * tf.math.sigmoid(u), tf.ones_like(u, dtype=tf.bool)

    def log_forward(self, u):
        low, high = self.prior.low, self.prior.high
        if low == 0.0:
            return math.log(high) - tf.math.softplus(-u)
        return tf.math.log(low + (high - low) * tf.math.sigmoid(u))

    def bijector(self):
        return tfb.Sigmoid(low=self._constant("low"), high=self._constant("high"))

    def distribution(self):
        return tfd.Uniform(self._constant("low"), self._constant("high"))


#: kind name (``core.priors.SAMPLED_KINDS``; a test checks they agree) -> TensorFlow twin.
TF_PRIOR_KINDS = {"normal": _Normal, "lognormal": _LogNormal, "halfnormal": _HalfNormal,
                  "uniform": _Uniform}


def tf_prior(prior, dtype, limits=None):
    """The TensorFlow twin of a sampled ``core.priors`` object."""
    return TF_PRIOR_KINDS[prior.dist](prior, dtype, limits)
