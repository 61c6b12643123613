"""Diagnostics of a stored run: the table ``fieldscope summary`` prints and the GUI shows.

numpy only (reads the run store, computes with core.diagnostics). Rows: every sampled
parameter and the log-density, with mean, sd, quantiles, R-hat, bulk and tail ESS;
then the health of the chains (divergences, acceptance, step size, gradient evaluations
per effective sample) and, for field runs, the voxel ESS summary and the worst k-shell.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core import diagnostics as dg
from core.run_store import RunReader


@dataclass
class RunSummary:
    status: str
    progress: dict
    rows: list                      # dg.ScalarSummary for parameters and lp
    divergences: int
    acceptance: float
    step_size: list                 # final step size per chain
    gradient_evaluations: int
    ess_min: float
    field: dict | None = None
    shells: dg.Diagnostics | None = None

    @property
    def gradients_per_effective_sample(self) -> float:
        return self.gradient_evaluations / self.ess_min if self.ess_min > 0 else float("nan")

    def text(self) -> str:
        p = self.progress
        lines = [f"status: {self.status}   warmup draws: {p.get('warmup_draws', 0)}   "
                 f"draws: {p.get('draws', 0)}   field draws: {p.get('field_draws', 0)}"]
        if self.rows:
            lines.append(dg.summary_table_text(self.rows))
        lines.append(f"divergences: {self.divergences}   mean acceptance: {self.acceptance:.3f}   "
                     f"step size per chain: {', '.join(f'{s:.4g}' for s in self.step_size)}")
        lines.append(f"gradient evaluations: {self.gradient_evaluations}   "
                     f"per effective sample (worst quantity): {self.gradients_per_effective_sample:.1f}")
        if self.field:
            f = self.field
            lines.append(f"field: voxel bulk ESS min {f['ess_bulk_min']:.0f}, 5% {f['ess_bulk_p05']:.0f}, "
                         f"median {f['ess_bulk_median']:.0f}; max voxel R-hat {f['rhat_max']:.3f}")
        if self.shells:
            s = self.shells
            lines.append(f"P(k) shells: max R-hat {np.nanmax(s.rhat):.3f}, "
                         f"min bulk ESS {np.nanmin(s.ess_bulk):.0f}")
        return "\n".join(lines)


def summarize_run(run_dir, field_draw_limit: int = 400) -> RunSummary:
    reader = RunReader(run_dir)
    progress = reader.progress
    draws = {name: reader.param(name) for name in reader.param_names}
    lp = reader.stat("lp")
    draws["lp"] = lp
    rows = dg.summarize(draws) if lp.shape[1] else []
    diverging = reader.stat("diverging")
    n_steps = np.concatenate([reader.stat("n_steps", warmup=True), reader.stat("n_steps")], axis=1)
    acceptance = reader.stat("acceptance_rate")
    step = reader.stat("step_size")
    ess = [r.ess_bulk for r in rows] + [r.ess_tail for r in rows]
    ess_min = float(np.nanmin(ess)) if ess and np.isfinite(ess).any() else float("nan")
    summary = RunSummary(
        status=reader.status, progress=progress, rows=rows,
        divergences=int(diverging.sum()),
        acceptance=float(np.mean(acceptance)) if acceptance.size else float("nan"),
        step_size=[float(v) for v in step[:, -1]] if step.size else [],
        gradient_evaluations=int(n_steps.sum()), ess_min=ess_min)
    if reader.has_field and progress.get("field_draws", 0) >= 4:
        n = progress["field_draws"]
        take = slice(max(0, n - field_draw_limit), n)
        summary.field = dg.field_ess_summary(reader.field_draws(draws=take))
        _, _, power = reader.powers()
        summary.shells = dg.shell_diagnostics(power)
    return summary
