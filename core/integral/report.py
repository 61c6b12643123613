"""How far the discretised model is from the converged one: ``discretisation_report``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.integral.posterior import posterior_quadrature
from core.integral.spec import IntegralModelSpec

__all__ = ['DiscretisationReport', 'discretisation_report']

@dataclass(frozen=True)
class DiscretisationReport:
    """How far the discretised posterior of A is from the converged one.

    mean_r/sd_r at ``refine`` = r, mean_2r/sd_2r at 2r, mean_exact/sd_exact with the
    exact integral (h -> 0). For an O(h^2) rule the bias b(r) = mean_r - mean_exact
    scales as 1/r^2, so b(r)/b(2r) ~ 4 and the Richardson extrapolation
    (4 mean_2r - mean_r) / 3 removes the leading term; mean_r - richardson_mean
    = 4 (mean_r - mean_2r) / 3 estimates b(r) without the exact posterior.
    """

    refine: int
    mean_r: float
    sd_r: float
    mean_2r: float
    sd_2r: float
    mean_exact: float
    sd_exact: float
    reference: str = "exact integral"

    @property
    def richardson_mean(self) -> float:
        return (4.0 * self.mean_2r - self.mean_r) / 3.0

    @property
    def bias_r(self) -> float:
        return self.mean_r - self.mean_exact

    @property
    def bias_2r(self) -> float:
        return self.mean_2r - self.mean_exact

    @property
    def bias_r_in_sd(self) -> float:
        return self.bias_r / self.sd_exact

    @property
    def bias_2r_in_sd(self) -> float:
        return self.bias_2r / self.sd_exact

    @property
    def bias_ratio(self) -> float:
        """b(r) / b(2r), ~4 for the O(h^2) trapezoid rule (nan when b(2r) = 0)."""
        return self.bias_r / self.bias_2r if self.bias_2r != 0 else math.nan

    @property
    def richardson_bias_r(self) -> float:
        return self.mean_r - self.richardson_mean

    @property
    def observed_order(self) -> float:
        return math.log2(abs(self.bias_ratio)) if self.bias_ratio == self.bias_ratio \
            and self.bias_ratio != 0 else math.nan

    def refine_for(self, tolerance_sd: float = 0.1) -> int:
        """Smallest refine whose predicted |bias| (b(r) (r/r')^2) is below tolerance_sd sd."""
        b = abs(self.bias_r_in_sd)
        if b <= tolerance_sd:
            return self.refine
        return int(math.ceil(self.refine * math.sqrt(b / tolerance_sd)))

    def format(self) -> str:
        r = self.refine
        b = self.bias_r_in_sd
        verdict = ("negligible (< 0.1 posterior sd)" if abs(b) < 0.1 else
                   "noticeable (0.1 to 0.5 posterior sd)" if abs(b) < 0.5 else
                   "large (> 0.5 posterior sd)")
        lines = [
            f"Discretisation of integral_0^t exp(A s) f(s) ds (cumulative trapezoid, "
            f"refine = {r} steps per data interval)",
            f"  {'posterior of A':<30}{'mean':>20}{'sd':>14}",
            f"  {f'refine {r}':<30}{self.mean_r:>20.12g}{self.sd_r:>14.6g}",
            f"  {f'refine {2 * r}':<30}{self.mean_2r:>20.12g}{self.sd_2r:>14.6g}",
            f"  {f'Richardson (4 m{2 * r} - m{r})/3':<30}{self.richardson_mean:>20.12g}",
            f"  {self.reference + ' (h -> 0)':<30}{self.mean_exact:>20.12g}{self.sd_exact:>14.6g}",
            f"  bias of the mean at refine {r}: {self.bias_r:+.3g} = {b:+.3g} posterior sd "
            f"(Richardson estimate {self.richardson_bias_r:+.3g})",
            f"  bias at refine {2 * r}: {self.bias_2r:+.3g} = {self.bias_2r_in_sd:+.3g} sd; "
            f"ratio {self.bias_ratio:.3g} (about 4 for an O(h^2) rule)",
            f"  sd at refine {r} differs from the converged sd by "
            f"{(self.sd_r - self.sd_exact) / self.sd_exact:+.2e} (relative)",
            f"  verdict: {verdict}; gradients through the trapezoid rule are exact for the "
            f"discretised model",
        ]
        if abs(b) >= 0.1:
            lines.append(f"  refine >= {self.refine_for(0.1)} keeps the bias below 0.1 sd")
        return "\n".join(lines)


def discretisation_report(spec: IntegralModelSpec, refine: int | None = None) -> DiscretisationReport:
    """Posterior mean/sd of A at refine r and 2r and with the exact integral.

    The exact integral is the closed form t * phi1(A t) for constant f and the
    segment-wise exact integral of exp(A s) times the piecewise-linear f otherwise, so
    the reference is the true h -> 0 limit in both cases. The three quadratures share
    one grid (the posteriors differ by far less than their width; each is checked).
    """
    if spec.priors["A"].is_fixed:
        raise ValueError("priors['A']: A is fixed; the discretisation report needs a prior for A")
    r = spec.refine if refine is None else int(refine)
    if r < 1:
        raise ValueError(f"refine: must be >= 1, got {r!r}")
    post_r = posterior_quadrature(spec, r)
    post_2r = posterior_quadrature(spec, 2 * r, box=post_r.box)
    post_x = posterior_quadrature(spec, exact=True, box=post_r.box)
    return DiscretisationReport(
        refine=r, mean_r=post_r.mean["A"], sd_r=post_r.sd["A"],
        mean_2r=post_2r.mean["A"], sd_2r=post_2r.sd["A"],
        mean_exact=post_x.mean["A"], sd_exact=post_x.sd["A"],
        reference="closed form" if spec.f is None else "exact piecewise-linear f")


# --------------------------------------------------------------------------- data files


