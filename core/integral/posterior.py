"""The numpy reference posterior of the integral model by quadrature on an adaptive grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from core.integral.quadrature import exact_integral, trapezoid_integral
from core.integral.spec import IntegralModelSpec, check_overflow, exponent_limit
from core.log_density import LOG_2PI, quadratic_limit

__all__ = ['QuadraturePosterior', 'posterior_quadrature']

@dataclass(frozen=True)
class QuadraturePosterior:
    """Posterior moments from grid quadrature.

    refine: trapezoid steps per interval, or None for the exact integral.
    mean, sd: {name: value} for each sampled parameter (constrained values).
    log_evidence: log of the integral of prior x likelihood (all constants included).
    box: {name: (lo, hi)} of the grid in unconstrained coordinates (reusable via ``box=``).
    grid: {name: unconstrained nodes}; weights: normalised posterior mass per node,
        shape (len(grid['A']) or 1, len(grid['sigma']) or 1).
    """

    refine: int | None
    mean: dict
    sd: dict
    log_evidence: float
    box: dict
    grid: dict
    weights: np.ndarray


class _GridTarget:
    """log p(u_A, u_sigma) on a tensor grid, with c fixed or integrated out analytically."""

    def __init__(self, spec: IntegralModelSpec, refine: int | None):
        self.spec = spec
        self.refine = refine
        c = spec.priors["c"]
        if c.dist not in ("fixed", "normal"):
            raise ValueError(f"priors['c']: posterior_quadrature integrates c out "
                             f"analytically and needs c fixed or with a normal prior, "
                             f"got {c.dist}")

    def integral(self, A: np.ndarray) -> np.ndarray:
        s = self.spec
        if self.refine is None:
            return exact_integral(s.t, A, s.f)
        return trapezoid_integral(s.t, A, s.f, self.refine)

    def axis_values(self, name: str, u: np.ndarray | None):
        """(value or log value, prior log-density) along one axis."""
        prior = self.spec.priors[name]
        if prior.is_fixed:
            v = prior.value if name == "A" else math.log(prior.value)
            return np.array([v]), np.zeros(1)
        lp = prior.unconstrained_logpdf(u, quadratic_limit(np.float64))
        if name == "A":
            return prior.forward(u), lp
        return prior.log_forward(u), lp

    def __call__(self, uA, uS, with_c: bool = False):
        spec = self.spec
        n = spec.y.size
        A, lpA = self.axis_values("A", uA)
        log_s, lpS = self.axis_values("sigma", uS)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            r0 = spec.y - self.integral(A)  # (nA, n)
            s2 = np.exp(2.0 * log_s)[None, :]
            c = spec.priors["c"]
            if c.is_fixed:
                S = np.sum((r0 - c.value) ** 2, axis=-1)[:, None]
                ll = -0.5 * n * LOG_2PI - n * log_s[None, :] - 0.5 * S / s2
                extra = None
            else:
                m0, v0 = c.loc, c.scale ** 2
                rbar = np.mean(r0, axis=-1)[:, None]
                SS = np.sum((r0 - rbar) ** 2, axis=-1)[:, None]
                tau2 = s2 / n + v0
                ll = (-0.5 * (n - 1) * (LOG_2PI + 2.0 * log_s[None, :]) - 0.5 * math.log(n)
                      - 0.5 * np.log(2.0 * math.pi * tau2)
                      - 0.5 * SS / s2 - 0.5 * (rbar - m0) ** 2 / tau2)
                prec = n / s2 + 1.0 / v0
                extra = ((n * rbar / s2 + m0 / v0) / prec, 1.0 / prec)
            lp = lpA[:, None] + lpS[None, :] + ll
        lp = np.where(np.isnan(lp), -np.inf, lp)
        if with_c:
            return lp, A, np.exp(log_s), extra
        return lp


def _axis(prior, u_grid):
    return None if prior.is_fixed else u_grid


def _trapezoid_weights(x: np.ndarray | None) -> np.ndarray:
    if x is None or x.size == 1:
        return np.ones(1)
    w = np.full(x.size, x[1] - x[0])
    w[0] = w[-1] = 0.5 * (x[1] - x[0])
    return w


def _find_box(target: _GridTarget, ranges: list, drop: float, n_coarse=(4001, 401),
              n_scan=401, min_inside=100, max_iter=200) -> list:
    """Zoom from a coarse scan of the prior range to the region lp > max - drop."""

    def evaluate(grids):
        return target(grids[0], grids[1])

    grids = [None if r is None else np.linspace(r[0], r[1], n) for r, n in zip(ranges, n_coarse)]
    lp = evaluate(grids)
    if not np.isfinite(lp).any():
        raise ValueError("posterior density is zero on the whole prior range; check the "
                         "data and priors")
    k = np.unravel_index(np.argmax(lp), lp.shape)
    coarse, coarse_lp = grids, lp
    box = []
    for axis, g in enumerate(grids):
        box.append(None if g is None else (g[max(k[axis] - 1, 0)], g[min(k[axis] + 1, g.size - 1)]))
    for _ in range(max_iter):
        grids = [None if b is None else np.linspace(b[0], b[1], n_scan) for b in box]
        lp = evaluate(grids)
        inside = lp > np.max(lp) - drop
        done = True
        for axis, g in enumerate(grids):
            if g is None:
                continue
            idx = np.flatnonzero(inside.any(axis=1 - axis))
            i0, i1 = idx[0], idx[-1]
            lo, hi = box[axis]
            width = hi - lo
            r_lo, r_hi = ranges[axis]
            new_lo = max(r_lo, lo - width) if (i0 == 0 and lo > r_lo) else lo
            new_hi = min(r_hi, hi + width) if (i1 == g.size - 1 and hi < r_hi) else hi
            if (new_lo, new_hi) != (lo, hi):
                box[axis] = (new_lo, new_hi)
                done = False
            elif i1 - i0 + 1 < min_inside:
                new = (g[max(i0 - 1, 0)], g[min(i1 + 1, g.size - 1)])
                if new[1] - new[0] <= 1e-13 * max(1.0, abs(new[0]), abs(new[1])):
                    raise ValueError("posterior too narrow to resolve on a float64 grid")
                box[axis] = new
                done = False
        if done:
            _check_single_mode(coarse, coarse_lp, box, np.max(lp), drop)
            return box
    raise ValueError("could not bracket the posterior (grid search did not converge)")


def _check_single_mode(coarse, coarse_lp, box, peak, drop):
    outside = np.zeros(coarse_lp.shape, dtype=bool)
    for axis, g in enumerate(coarse):
        if g is None:
            continue
        lo, hi = box[axis]
        out_axis = (g < lo) | (g > hi)
        outside |= out_axis[:, None] if axis == 0 else out_axis[None, :]
    if np.any(coarse_lp[outside] > peak - 0.75 * drop):
        raise ValueError("posterior looks multimodal (a second region of high density "
                         "outside the located peak); grid quadrature assumes one mode")



def posterior_quadrature(spec: IntegralModelSpec, refine: int | None = None, *,
                         exact: bool = False, box: Mapping | None = None,
                         n_final: int = 601, drop: float = 40.0) -> QuadraturePosterior:
    """Posterior mean and sd of the sampled parameters by grid quadrature.

    refine: trapezoid steps per interval (default ``spec.refine``); exact=True uses the
    exact integral instead (the converged posterior). A is integrated over its
    unconstrained coordinate, sigma (when sampled) over its own (2D grid); c (fixed or
    normal prior) is integrated out analytically: given A and sigma, with r_i = y_i - I_i,
    rbar = mean(r), SS = sum (r_i - rbar)^2, prior c ~ N(m0, s0^2), tau^2 = sigma^2/n + s0^2,

        log integral p(y | A, c, sigma) p(c) dc = -(n-1)/2 log(2 pi sigma^2) - log(n)/2
            - log(2 pi tau^2)/2 - SS / (2 sigma^2) - (rbar - m0)^2 / (2 tau^2),

    and c | A, sigma, y ~ N(mu, 1/P), P = n/sigma^2 + 1/s0^2, mu = (n rbar/sigma^2 + m0/s0^2)/P,
    whose moments are averaged over the grid. ``box`` reuses a previous result's box
    (checked: if the density is not negligible at its edges the box is searched again).
    """
    if exact and refine is not None:
        raise ValueError("refine: give either refine or exact=True, not both")
    r = None if exact else (spec.refine if refine is None else int(refine))
    if r is not None and r < 1:
        raise ValueError(f"refine: must be >= 1, got {r!r}")
    check_overflow(spec, np.float64)
    target = _GridTarget(spec, r)
    ranges = []
    for name in ("A", "sigma"):
        prior = spec.priors[name]
        if prior.is_fixed:
            ranges.append(None)
            continue
        lo, hi = prior.unconstrained_range()
        if name == "A":  # stay where the float64 density is computed
            a_max = 0.999 * exponent_limit(spec, np.float64) / spec.t_max
            if prior.transform == "identity":
                hi = min(hi, a_max)
            elif prior.transform == "log":
                hi = min(hi, math.log(a_max)) if a_max > 0 else hi
        ranges.append((lo, hi))
    found = None
    if box is not None:
        found = [None if ranges[i] is None else tuple(box[name])
                 for i, name in enumerate(("A", "sigma"))]
    for attempt in range(2):
        if found is None:
            found = _find_box(target, ranges, drop)
        grids = [None if b is None else np.linspace(b[0], b[1], n_final) for b in found]
        lp, A, sigma, c_moments = target(grids[0], grids[1], with_c=True)
        peak = np.max(lp)
        edge_ok = True
        for axis, g in enumerate(grids):
            if g is None:
                continue
            prof = np.max(lp, axis=1 - axis)
            at_range = (found[axis][0] <= ranges[axis][0], found[axis][1] >= ranges[axis][1])
            if (prof[0] > peak - 0.75 * drop and not at_range[0]) or \
               (prof[-1] > peak - 0.75 * drop and not at_range[1]):
                edge_ok = False
        if edge_ok:
            break
        found = None
    else:
        raise ValueError("could not place the quadrature grid around the posterior")
    w = _trapezoid_weights(grids[0])[:, None] * _trapezoid_weights(grids[1])[None, :]
    mass = w * np.exp(lp - peak)
    Z = np.sum(mass)
    P = mass / Z
    mean, sd = {}, {}

    def moments(x):
        m = float(np.sum(P * x))
        v = float(np.sum(P * (x - m) ** 2))
        return m, math.sqrt(max(v, 0.0))

    if grids[0] is not None:
        mean["A"], sd["A"] = moments(np.broadcast_to(A[:, None], P.shape))
    if c_moments is not None:
        mu, var = c_moments
        m = float(np.sum(P * mu))
        v = float(np.sum(P * (var + (mu - m) ** 2)))
        mean["c"], sd["c"] = m, math.sqrt(max(v, 0.0))
    if grids[1] is not None:
        mean["sigma"], sd["sigma"] = moments(np.broadcast_to(sigma[None, :], P.shape))
    names = ("A", "sigma")
    return QuadraturePosterior(
        refine=r, mean=mean, sd=sd, log_evidence=float(peak + math.log(Z)),
        box={names[i]: tuple(map(float, b)) for i, b in enumerate(found) if b is not None},
        grid={names[i]: g for i, g in enumerate(grids) if g is not None},
        weights=P)


# --------------------------------------------------------------------------- report


