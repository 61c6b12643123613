"""The TensorFlow log-density of the integral model, for TFP's HMC kernels.

The model and the discretisation (cumulative trapezoid rule, ``refine`` steps per data
interval) are described in ``core.integral``, the priors and their unconstrained
coordinates in ``core.priors`` (TensorFlow twins: ``core.engine.prior_density``); that module also holds the numpy mirror ``log_density`` the
tests compare against, and the limits used below.

    log p(u) = sum_k log p_k(u_k)                                   (priors + Jacobians)
               - n/2 log(2 pi) - n log sigma - exp(log Q - 2 log sigma) / 2,
    Q = sum_i (y_i - c - T_i(A))^2,

where T_i(A) is the trapezoid integral at t_i and u is the unconstrained state in
``spec.sampled_names`` order (A, c, sigma; for sigma with a halfnormal or lognormal
prior the coordinate is log sigma, with the Jacobian term included; a uniform prior
uses a scaled logit). The gradient with respect to A is the exact gradient of this
discretised density (``core.integral.discretisation_report`` says how far its
posterior is from the converged one).

Numerical safety. The density is -inf, with a zero gradient, where
A * t_max > ``exponent_limit(spec, dtype)`` (exp(A t), the integral or its A-gradient
would overflow), where exp(u) of a log-transformed parameter would overflow, and where
Q / sigma^2 (or a halfnormal's x^2 / scale^2) passes ``quadratic_limit``. Each guard
is a double ``tf.where``: the unsafe input is replaced by a harmless value before the
risky op, and the result is selected afterwards, so no inf or NaN reaches a gradient.
log Q is computed as 2 log m + log sum (r_i / m)^2 with m = max |r_i| (held constant
in the gradient; the derivative of log Q does not depend on it), so large residuals
do not overflow the square. HMC rejects a proposal whose log-density is -inf.

Usage with TFP::

    ld = make_log_density(spec, tf.float64)
    kernel = tfp.mcmc.HamiltonianMonteCarlo(ld, step_size=..., num_leapfrog_steps=...)
    state = ld.unconstrain({"A": a0, "c": c0, "sigma": s0})      # [chains, d]
    ...
    values = ld.constrain(samples)      # {"A": ..., "c": ..., "sigma": ...}

``ld.bijectors`` (one per sampled parameter) map each unconstrained coordinate to its
parameter value: ``bijectors[k].forward(state[..., k])``, used by ``constrain`` to
report draws and by ``unconstrain`` to convert initial values. The density already
includes the log-Jacobians, so a kernel samples the unconstrained state directly (no
``TransformedTransitionKernel`` around it).
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import tensorflow as tf

from core import integral as im
from core.engine.prior_density import _neg_half_exp, default_limits, tf_prior
from core.log_density import LOG_2PI

__all__ = ["IntegralLogDensity", "make_log_density"]



class IntegralLogDensity:
    """Callable log-density of the integral model on the unconstrained state.

    Call with a tensor [..., d] (leading dims: chains or any batch) in
    ``unconstrained_names`` order, or a mapping {unconstrained name: tensor [...]};
    returns [...]. Works eagerly, in tf.function and under jit_compile=True.

    names: sampled parameters (subset of A, c, sigma, in that order).
    unconstrained_names: the coordinates ('A', 'c', 'log_sigma', 'logit_A', ...).
    bijectors: tfp bijectors mapping each coordinate to its parameter value.
    """

    def __init__(self, spec: im.IntegralModelSpec, dtype=tf.float64):
        dtype = tf.as_dtype(dtype)
        if dtype not in (tf.float32, tf.float64):
            raise ValueError(f"dtype: must be float32 or float64, got {dtype.name}")
        np_dtype = dtype.as_numpy_dtype
        im.check_overflow(spec, np_dtype)
        if not spec.sampled_names:
            raise ValueError("priors: every parameter is fixed; nothing to sample")
        self.spec = spec
        self.dtype = dtype
        self.names = spec.sampled_names
        self.unconstrained_names = spec.unconstrained_names
        self.dim = len(self.names)
        limits = default_limits(dtype)
        self._q_limit = limits["quadratic"]
        self._a_limit = im.exponent_limit(spec, np_dtype)
        # the closed-form log_prob(u) of each kind (core.engine.prior_density)
        self._priors = {k: tf_prior(spec.priors[k], dtype, limits) for k in self.names}
        self.bijectors = tuple(self._priors[k].bijector() for k in self.names)
        grid = im.segment_grid(spec.t, spec.f, spec.refine)
        self._s = tf.constant(grid.s, dtype)
        self._fw = tf.constant(grid.f * grid.w, dtype)  # f at the nodes times trapezoid weights
        self._leading_zero = grid.leading_zero
        self._y = tf.constant(spec.y, dtype)
        self._n = spec.y.size
        self._t_max = spec.t_max
        self._tiny = float(np.finfo(np_dtype).tiny)

    # ----------------------------------------------------------------- pieces

    def _as_state(self, state) -> tf.Tensor:
        if isinstance(state, Mapping):
            missing = [k for k in self.unconstrained_names if k not in state]
            if missing:
                raise ValueError(f"state: missing {missing}; expected keys "
                                 f"{list(self.unconstrained_names)}")
            parts = [tf.convert_to_tensor(state[k], self.dtype) for k in self.unconstrained_names]
            return tf.stack(parts, axis=-1)
        state = tf.convert_to_tensor(state, self.dtype)
        if state.shape.rank is not None and (state.shape.rank == 0
                                             or state.shape[-1] not in (None, self.dim)):
            raise ValueError(f"state: last axis must have length {self.dim} "
                             f"({', '.join(self.unconstrained_names)}), got shape {state.shape}")
        return state

    def integral(self, A) -> tf.Tensor:
        """Trapezoid integral T(t_i; A) at the data times: A [...] -> [..., n]."""
        A = tf.convert_to_tensor(A, self.dtype)
        g = tf.exp(A[..., None, None] * self._s)
        seg = tf.reduce_sum(g * self._fw, axis=-1)  # [..., segments]
        cum = tf.cumsum(seg, axis=-1)
        if self._leading_zero:
            cum = tf.concat([tf.zeros_like(cum[..., :1]), cum], axis=-1)
        return cum

    def constrain(self, state) -> dict:
        """Unconstrained state [..., d] (or mapping) -> {name: parameter value [...]}."""
        state = self._as_state(state)
        return {k: b.forward(state[..., i]) for i, (k, b) in enumerate(zip(self.names,
                                                                           self.bijectors))}

    def unconstrain(self, values: Mapping) -> tf.Tensor:
        """{name: parameter value} for each sampled parameter -> state [..., d]."""
        parts = [b.inverse(tf.convert_to_tensor(values[k], self.dtype))
                 for k, b in zip(self.names, self.bijectors)]
        return tf.stack(parts, axis=-1)

    # ----------------------------------------------------------------- density

    def __call__(self, state) -> tf.Tensor:
        state = self._as_state(state)
        dtype = self.dtype
        batch_zero = tf.zeros_like(state[..., 0])
        total = batch_zero
        ok = tf.ones_like(batch_zero, dtype=tf.bool)
        value, coord = {}, {}
        for i, k in enumerate(self.names):
            u = state[..., i]
            prior = self._priors[k]
            total = total + prior.log_prob(u)
            x, ok_k = prior.forward(u)
            ok = ok & ok_k
            value[k], coord[k] = x, u
        for k in im.PARAMETERS:
            fixed = self.spec.priors[k]
            if fixed.is_fixed:
                value[k] = batch_zero + tf.constant(fixed.value, dtype)
        ok = ok & (value["A"] * self._t_max <= self._a_limit)
        A = tf.where(ok, value["A"], batch_zero)
        sigma = self.spec.priors["sigma"]
        if sigma.is_fixed:
            log_sigma = batch_zero + math.log(sigma.value)
        else:
            log_sigma = self._priors["sigma"].log_forward(coord["sigma"])
        r = self._y - value["c"][..., None] - self.integral(A)
        m = tf.stop_gradient(tf.maximum(tf.reduce_max(tf.abs(r), axis=-1), self._tiny))
        inner = tf.reduce_sum(tf.square(r / m[..., None]), axis=-1)
        log_q = 2.0 * tf.math.log(m) + tf.math.log(tf.maximum(inner, self._tiny))
        quad = _neg_half_exp(log_q - 2.0 * log_sigma, self._q_limit)
        loglik = -0.5 * self._n * LOG_2PI - self._n * log_sigma + quad
        return tf.where(ok, total + loglik, tf.constant(-np.inf, dtype))


def make_log_density(spec: im.IntegralModelSpec, dtype=tf.float64) -> IntegralLogDensity:
    """The log-density of ``spec`` on the unconstrained state, in float32 or float64.

    Raises ValueError (from ``check_overflow``) when the prior for A reaches A values
    where exp(A t) overflows ``dtype``.
    """
    return IntegralLogDensity(spec, dtype)
