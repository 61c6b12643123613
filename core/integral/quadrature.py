"""The integral I(t; A) = integral_0^t exp(A s) f(s) ds: closed forms (phi functions, stable near
A = 0), the exact piecewise-linear integral and the refined trapezoid rule the model uses.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

__all__ = [
    "expm1_ratio", "phi2", "closed_form_integral", "closed_form_mean", "segment_grid",
    "SegmentGrid", "trapezoid_integral", "exact_integral",
]

_SERIES_RADIUS = 0.5
_SERIES_TERMS = 22  # 0.5^22 / 23! ~ 1e-29: far below float64 resolution on |z| < 1/2.



# --------------------------------------------------------------------------- phi functions


def _series(z: np.ndarray, first_factorial: int) -> np.ndarray:
    """sum_{k>=0} z^k / (k + first_factorial)!  by Horner, in z's dtype."""
    coeffs = [1.0 / math.factorial(k + first_factorial) for k in range(_SERIES_TERMS)]
    out = np.full_like(z, coeffs[-1])
    for a in reversed(coeffs[:-1]):
        out = out * z + z.dtype.type(a)
    return out


def _as_float_array(z) -> np.ndarray:
    z = np.asarray(z)
    if not np.issubdtype(z.dtype, np.floating):
        z = z.astype(np.float64)
    return z


def expm1_ratio(z) -> np.ndarray:
    """phi1(z) = (exp(z) - 1) / z = expm1(z) / z, with phi1(0) = 1.

    Taylor series 1 + z/2 + z^2/6 + ... for |z| < 1/2 (no 0/0, full precision near 0),
    expm1(z) / z elsewhere. Keeps the floating dtype of z (float32 stays float32).
    """
    z = _as_float_array(z)
    out = np.empty_like(z)
    small = np.abs(z) < _SERIES_RADIUS
    out[small] = _series(z[small], 1)
    big = ~small
    with np.errstate(over="ignore"):
        out[big] = np.expm1(z[big]) / z[big]
    return out


def phi2(z) -> np.ndarray:
    """phi2(z) = (exp(z) - 1 - z) / z^2, with phi2(0) = 1/2 (series for |z| < 1/2).

    integral_0^1 v exp(z v) dv = phi1(z) - phi2(z): the weight of the slope of f in the
    exact integral of exp(A s) times a linear f.
    """
    z = _as_float_array(z)
    out = np.empty_like(z)
    small = np.abs(z) < _SERIES_RADIUS
    out[small] = _series(z[small], 2)
    big = ~small
    with np.errstate(over="ignore", invalid="ignore"):
        zb = z[big]
        out[big] = (np.expm1(zb) - zb) / (zb * zb)
    return out


def closed_form_integral(t, A) -> np.ndarray:
    """integral_0^t exp(A s) ds = expm1(A t) / A = t * phi1(A t)  (= t at A = 0).

    Broadcasts t against A; float32 inputs give a float32 result.
    """
    t = _as_float_array(t)
    A = _as_float_array(A)
    z = A * t
    return t * expm1_ratio(z)


def closed_form_mean(t, A, c) -> np.ndarray:
    """y(t) = c + expm1(A t) / A: the model mean for constant f (t * phi1(A t) form)."""
    return closed_form_integral(t, A) + c


# --------------------------------------------------------------------------- discretisation


class SegmentGrid(NamedTuple):
    """The refined grid of the cumulative trapezoid rule, segment by segment.

    s, f, w: arrays (n_segments, refine + 1) of nodes, f at the nodes, and trapezoid
    weights h * (1/2, 1, ..., 1, 1/2); the integral over segment j is sum_k w[j,k] g(s[j,k]).
    leading_zero: True when t_0 == 0, so I(t_0) = 0 and the cumulative sum of the
    segment values gives I(t_1), ..., I(t_{n-1}); when t_0 > 0 the first segment is
    [0, t_0] and the cumulative sum gives I(t_0), ..., I(t_{n-1}).
    """

    s: np.ndarray
    f: np.ndarray
    w: np.ndarray
    leading_zero: bool


def segment_grid(t, f=None, refine: int = 8) -> SegmentGrid:
    """Build the refined grid: ``refine`` equal steps on each data interval and on [0, t_0].

    f (values at the data times, or None for f = 1) is interpolated linearly on the
    nodes and held at f(t_0) on [0, t_0).
    """
    t = np.asarray(t, dtype=np.float64)
    refine = int(refine)
    leading_zero = bool(t[0] == 0.0)
    knots = t if leading_zero else np.concatenate([[0.0], t])
    a, b = knots[:-1], knots[1:]
    frac = np.arange(refine + 1) / refine
    s = a[:, None] + (b - a)[:, None] * frac
    s[:, -1] = b  # exact right ends, so the data times are nodes to the last bit
    unit = np.ones(refine + 1)
    unit[0] = unit[-1] = 0.5
    w = ((b - a) / refine)[:, None] * unit
    if f is None:
        fs = np.ones_like(s)
    else:
        fs = np.interp(s, t, np.asarray(f, dtype=np.float64))  # constant below t_0
    return SegmentGrid(s, fs, w, leading_zero)


def _chunks(n_items: int, per_item: int, budget: int = 4_000_000):
    step = max(1, budget // max(per_item, 1))
    for start in range(0, n_items, step):
        yield slice(start, min(n_items, start + step))


def trapezoid_integral(t, A, f=None, refine: int = 8) -> np.ndarray:
    """I(t_i) by the cumulative trapezoid rule with ``refine`` steps per segment.

    A: array of any shape; returns shape A.shape + (n,), float64. Nothing divides by A,
    so A = 0 needs no special case.
    """
    grid = segment_grid(t, f, refine)
    A = np.asarray(A, dtype=np.float64)
    flat = A.reshape(-1)
    n = len(np.asarray(t))
    out = np.empty((flat.size, n))
    with np.errstate(over="ignore", invalid="ignore"):
        for sl in _chunks(flat.size, grid.s.size):
            g = np.exp(flat[sl, None, None] * grid.s) * grid.f
            seg = np.sum(g * grid.w, axis=-1)
            cum = np.cumsum(seg, axis=-1)
            if grid.leading_zero:
                out[sl, 0] = 0.0
                out[sl, 1:] = cum
            else:
                out[sl] = cum
    return out.reshape(A.shape + (n,))


def exact_integral(t, A, f=None) -> np.ndarray:
    """I(t_i) exactly (the h -> 0 limit of the trapezoid rule); shape A.shape + (n,).

    Constant f: t * phi1(A t). Piecewise-linear f: segment by segment,
    exp(A a) * D * (f(b) phi1(A D) - (f(b) - f(a)) phi2(A D)), cumulatively summed.
    """
    t = np.asarray(t, dtype=np.float64)
    A = np.asarray(A, dtype=np.float64)
    if f is None:
        return closed_form_integral(t, A[..., None])
    f = np.asarray(f, dtype=np.float64)
    leading_zero = t[0] == 0.0
    knots = t if leading_zero else np.concatenate([[0.0], t])
    fk = f if leading_zero else np.concatenate([[f[0]], f])
    a, d = knots[:-1], np.diff(knots)
    fa, fb = fk[:-1], fk[1:]
    z = A[..., None] * d
    with np.errstate(over="ignore", invalid="ignore"):
        seg = np.exp(A[..., None] * a) * d * (fb * expm1_ratio(z) - (fb - fa) * phi2(z))
    cum = np.cumsum(seg, axis=-1)
    if leading_zero:
        cum = np.concatenate([np.zeros(A.shape + (1,)), cum], axis=-1)
    return cum
