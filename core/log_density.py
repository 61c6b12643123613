"""The numerical conventions every numpy log-density shares, defined once.

``LOG_2PI`` is log(2 pi), the normalisation of a Gaussian: log N(x; m, s) =
-(x - m)^2 / (2 s^2) - log s - LOG_2PI / 2.

Float limits. A log-density that exponentiates (a halfnormal's x^2 / scale^2 = exp(2 (u -
log scale)), a Gaussian quadratic form computed in log space, a log-transformed prior's
x = exp(u)) evaluates the exponential only below a limit of its dtype and gives -inf
beyond it, so that nothing overflows to inf or NaN:

    log_max(dtype)             log(max float): 88.72 (float32), 709.78 (float64)
    quadratic_limit(dtype)     log_max - log 16: the largest log of a quadratic form exponentiated
    positive_exp_limit(dtype)  log_max - 1: the largest unconstrained u with x = exp(u) computed

``neg_half_exp(e, limit)`` is -exp(e) / 2 where e <= limit, else -inf. The TensorFlow twins
(``core.engine.prior_density``, ``core.engine.integral_density``) use the same limits.

Use: ``from core.log_density import LOG_2PI, quadratic_limit``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["LOG_2PI", "log_max", "quadratic_limit", "positive_exp_limit", "neg_half_exp"]

#: log(2 pi): the Gaussian normalisation constant
LOG_2PI = math.log(2.0 * math.pi)


def log_max(dtype) -> float:
    """log of the largest finite float32 or float64 (ValueError for any other dtype)."""
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype: must be float32 or float64, got {dtype}")
    return float(np.log(np.finfo(dtype).max))


def quadratic_limit(dtype=np.float64) -> float:
    """Largest log(sum r^2 / sigma^2) (or log(x^2 / scale^2)) that is exponentiated."""
    return log_max(dtype) - math.log(16.0)


def positive_exp_limit(dtype=np.float64) -> float:
    """Largest unconstrained u for which x = exp(u) is computed (log-transformed priors)."""
    return log_max(dtype) - 1.0


def neg_half_exp(e, limit: float):
    """-exp(e) / 2 where e <= limit, else -inf (the TensorFlow twin is gradient-safe)."""
    e = np.asarray(e, dtype=np.float64)
    ok = e <= limit
    return np.where(ok, -0.5 * np.exp(np.where(ok, e, 0.0)), -np.inf)
