"""An exponential-integral regression model and its discretisation, in numpy/scipy.

Modules: ``quadrature`` (closed forms, the trapezoid rule), ``spec`` (a run's data,
discretisation and priors; predictive mean; overflow guard; numpy log-density; the float
limits are ``core.log_density``'s),
``posterior`` (the quadrature reference posterior), ``report`` (discretisation error),
``series`` (the demo series; series files are ``core.io.series``'s).

The GUI process imports this package (specs, data files, the numpy reference posterior),
so it uses numpy and scipy only and never imports TensorFlow. The TensorFlow
log-density of the same model lives in ``core.engine.integral_density``.

Model
-----
Data y_i at times t_0 < t_1 < ... < t_{n-1} (t_0 >= 0; the integral starts at s = 0):

    y_i = c + I(t_i; A) + e_i,        e_i ~ Normal(0, sigma^2) independently,
    I(t; A) = integral_0^t exp(A s) f(s) ds.

f is either the constant 1 or a column of the data file sampled at the data times.
A sampled f is interpolated linearly between data times, and held at its first value,
f(s) = f(t_0), on 0 <= s < t_0 (so a file need not start at t = 0).

Discretisation (what the density actually computes). The interval [0, t_{n-1}] is cut
into segments at the data times, [0, t_0] (only when t_0 > 0), [t_0, t_1], ...,
[t_{n-2}, t_{n-1}], and each segment [a, b] into ``refine`` equal steps h = (b - a) / r.
On each segment the trapezoid rule with g(s) = exp(A s) f(s),

    T[a, b] = h * (g(s_0) / 2 + g(s_1) + ... + g(s_{r-1}) + g(s_r) / 2),   s_k = a + k h,

and I(t_i) is the cumulative sum of the segment values up to t_i (I(0) = 0). This is
the cumulative trapezoid rule on the refined grid (a user's
``0.5 * dt * cumsum(g[:-1] + g[1:])`` is refine = 1), and the data times are grid nodes,
so the piecewise-linear f has its kinks at nodes and the global error is O(h^2):

    T - I = (h^2 / 12) * sum over segments of (g'(b) - g'(a)) + O(h^4).

Gradients of the discretised density with respect to A are the exact gradients of
the discretised model; how far its posterior sits from the converged (h -> 0) one is
what ``discretisation_report`` measures.

Exact integrals (the h -> 0 limit). With phi1(z) = (exp(z) - 1) / z = expm1(z) / z and
phi2(z) = (exp(z) - 1 - z) / z^2 (both evaluated by their Taylor series for |z| < 1/2,
so nothing divides 0 by 0 near A = 0):

    constant f:          I(t) = t * phi1(A t)                   (= expm1(A t) / A)
    piecewise-linear f:  integral_a^b exp(A s) f(s) ds
                           = exp(A a) * D * (f(b) phi1(A D) - (f(b) - f(a)) phi2(A D)),  D = b - a.

Parameters, priors, unconstrained coordinates
---------------------------------------------
A, c and sigma are each fixed (a number) or sampled with a prior given as a mapping,
e.g. ``{"dist": "normal", "loc": 0, "scale": 1}``. The prior kinds, and the
unconstrained coordinate u a sampler moves in for each, are those of ``core.priors``
(its docstring has the table; ``PRIOR_KINDS`` defines each kind once); the density in u is
i.e. log p(u) = log p_x(x(u)) + log |dx/du| (the Jacobian term). sigma needs a prior
on positive values (halfnormal, lognormal, or uniform with low >= 0); for sigma the
unconstrained coordinate of the halfnormal and lognormal priors is log sigma. The
sampled parameters are ordered A, c, sigma (``IntegralModelSpec.sampled_names``).

Overflow
--------
exp(A t) overflows at A t > log(max float) (88.72 in float32, 709.78 in float64), and
the integral and its A-gradient are t_max and t_max^2 times larger. The density is
computed only where

    A * t_max <= exponent_limit = log(max float) - log 4 - 2 log(1 + t_max) - log(1 + F),

F = max |f| (1 for constant f); elsewhere it is -inf (an HMC proposal there is rejected)
with a zero gradient. Before a run ``check_overflow`` computes the largest A the prior
gives non-negligible mass (``Prior.upper_bound``: normal loc + 10 scale, lognormal
exp(loc + 10 scale), halfnormal 10 scale, uniform high; a fixed A is its value) and
raises ValueError when that A times t_max passes the limit for the run's dtype.
The Gaussian quadratic form sum r_i^2 / sigma^2 is computed in log space and treated
the same way (-inf beyond log(max float) - log 16).

Brute-force posterior
---------------------
``posterior_quadrature`` integrates the discretised (or exact) posterior on a grid:
over A (in its unconstrained coordinate) and, when sigma is sampled, over its
unconstrained coordinate too (a 2D tensor-product grid). A sampled c must have a normal
prior; it enters linearly and is integrated out analytically (Gaussian integral). The
grid is found automatically (coarse scan of the prior range, then zoom until the
region within ``drop`` = 40 log-units of the maximum holds >= 100 grid points along
each axis); the trapezoid rule then converges spectrally because the integrand is
smooth and negligible at the grid ends. The posterior is assumed unimodal; a second
mode found by the coarse scan raises ValueError.
"""

from __future__ import annotations

from core.integral.posterior import QuadraturePosterior, posterior_quadrature
from core.integral.quadrature import (
    SegmentGrid,
    closed_form_integral,
    closed_form_mean,
    exact_integral,
    expm1_ratio,
    phi2,
    segment_grid,
    trapezoid_integral,
)
from core.integral.report import DiscretisationReport, discretisation_report
from core.integral.series import DEMO_PARAMETERS, make_demo_series
from core.integral.spec import (
    PARAMETERS,
    IntegralModelSpec,
    check_overflow,
    exponent_limit,
    log_density,
    predictive_mean,
    spec_from_config,
)
from core.log_density import positive_exp_limit, quadratic_limit

__all__ = [
    "QuadraturePosterior",
    "posterior_quadrature",
    "expm1_ratio",
    "phi2",
    "closed_form_integral",
    "closed_form_mean",
    "segment_grid",
    "SegmentGrid",
    "trapezoid_integral",
    "exact_integral",
    "predictive_mean",
    "quadratic_limit",
    "positive_exp_limit",
    "DiscretisationReport",
    "discretisation_report",
    "DEMO_PARAMETERS",
    "make_demo_series",
    "PARAMETERS",
    "IntegralModelSpec",
    "exponent_limit",
    "check_overflow",
    "log_density",
    "spec_from_config",
]
