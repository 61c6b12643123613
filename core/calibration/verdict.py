"""The verdict of a calibration: which test quantities' ranks are not uniform.

Each quantity's ranks get the p-value of uniformity of ``core.calibration.bands`` (its ECDF
leaves the 95 % simultaneous band exactly when p < 0.05). A calibration checks many
quantities at once (every sampled parameter, the log-likelihood, every k-shell, a few
voxels), and a calibrated pipeline would leave one of twenty 95 % bands by chance: the
verdict therefore holds the family to 5 % (Holm's step-down: the j-th smallest of Q
p-values fails when it and every smaller one is below 0.05 / (Q - j + 1)). Quantities
outside their own 95 % band but not failed that way are listed as "outside by chance".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from core.calibration.bands import uniformity_pvalue
from core.calibration.ranks import LEVELS, coverage, expected_coverage

__all__ = ["ALPHA", "QuantityResult", "Verdict", "format_p", "judge"]

#: the level of every band and of the family of quantities
ALPHA = 0.05


def format_p(p: float) -> str:
    """A p-value for people: two digits, and "< 1e-15" below what float64 resolves here."""
    return "< 1e-15" if p < 1e-15 else f"{p:.2g}"


@dataclass(frozen=True)
class QuantityResult:
    """One quantity: its p-value of uniformity and the coverage at each of ``LEVELS``."""

    name: str
    pvalue: float
    coverage: tuple[float, ...]
    outside_band: bool          # p < ALPHA: its ECDF leaves the 95 % band
    failed: bool                # Holm: not uniform, with the whole family held to ALPHA


def _p_text(p: float) -> str:
    text = format_p(p)
    return text if text.startswith("<") else f"= {text}"


@dataclass(frozen=True)
class Verdict:
    simulations: int
    draws: int
    results: list[QuantityResult]
    levels: tuple[float, ...] = LEVELS
    expected: tuple[float, ...] = field(default=())

    @property
    def failed(self) -> list[str]:
        return [r.name for r in self.results if r.failed]

    @property
    def by_chance(self) -> list[str]:
        return [r.name for r in self.results if r.outside_band and not r.failed]

    @property
    def passed(self) -> bool:
        return not self.failed

    def line(self) -> str:
        """One line: PASS or FAIL and the quantities that decide it."""
        q = len(self.results)
        if not self.results or not self.simulations:
            return "no simulations finished yet"
        if self.failed:
            worst = sorted((r for r in self.results if r.failed), key=lambda r: r.pvalue)
            names = ", ".join(f"{r.name} (p {_p_text(r.pvalue)})" for r in worst)
            text = f"FAIL: {names} outside {'its' if len(worst) == 1 else 'their'} 95 % band"
        else:
            smallest = min(self.results, key=lambda r: r.pvalue)
            text = (f"PASS: the ranks of all {q} quantities are uniform (smallest p "
                    f"{_p_text(smallest.pvalue)}, {smallest.name})")
        if self.by_chance:
            n = len(self.by_chance)
            text += (f"; {', '.join(self.by_chance)} outside {'its' if n == 1 else 'their'} own 95 % "
                     f"band, as chance allows among {q} quantities")
        return text + f" [{self.simulations} simulations, {self.draws} draws each]"

    def table(self) -> str:
        """The quantities with their p-value and coverage against the expected coverage."""
        width = max([8] + [len(r.name) for r in self.results])
        head = f"{'quantity':<{width}}  {'p-value':>8}  " + "  ".join(
            f"{f'cover {int(100 * lv)}%':>9}" for lv in self.levels)
        rows = [head]
        for r in self.results:
            mark = "  FAIL" if r.failed else ("  outside band (chance)" if r.outside_band else "")
            rows.append(f"{r.name:<{width}}  {format_p(r.pvalue):>8}  "
                        + "  ".join(f"{c:>9.3f}" for c in r.coverage) + mark)
        rows.append(f"{'expected':<{width}}  {'':>8}  " + "  ".join(f"{e:>9.3f}" for e in self.expected))
        return "\n".join(rows)


def judge(ranks, names, draws: int, levels=LEVELS) -> Verdict:
    """The verdict for ``ranks`` (simulations, quantities) of ranks in {0..``draws``}."""
    ranks = np.asarray(ranks).reshape(-1, len(names))
    pvalues = np.array([uniformity_pvalue(ranks[:, j], draws) for j in range(len(names))])
    cover = coverage(ranks, draws, levels) if len(ranks) else np.full((len(levels), len(names)), np.nan)
    failed = np.zeros(len(names), bool)
    for j, idx in enumerate(np.argsort(pvalues, kind="stable")):   # Holm's step-down
        if pvalues[idx] >= ALPHA / (len(names) - j):
            break
        failed[idx] = True
    results = [QuantityResult(name, float(pvalues[j]), tuple(float(c) for c in cover[:, j]),
                              bool(pvalues[j] < ALPHA), bool(failed[j])) for j, name in enumerate(names)]
    return Verdict(simulations=len(ranks), draws=draws, results=results, levels=tuple(levels),
                   expected=tuple(expected_coverage(draws, lv) for lv in levels))
