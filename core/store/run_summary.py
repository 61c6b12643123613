"""Diagnostics of a stored run: the table ``fieldscope summary`` prints and the GUI shows.

numpy only (reads the run store, computes with core.store.diagnostics). Rows: every sampled
parameter and the log-density, with mean, sd, quantiles, R-hat, bulk and tail ESS;
then the health of the chains (divergences, acceptance, step size, gradient evaluations
per effective sample) and, for field runs, the voxel ESS summary and the worst k-shell.

The diagnostics table (``RunSummary.table``, printed by ``fieldscope summary``, written by
``summary --csv`` and shown by the GUI's diagnostics panel) has one row per quantity
(each sampled parameter, then ``lp``) and scope: first ``pooled`` (all chains), then
``chain 0``, ``chain 1``, ... Definitions, all over the post-warmup draws only:

    r_hat, ess_bulk, ess_tail   core.store.diagnostics (rank-normalised split R-hat, bulk / tail
                                ESS). For one chain, R-hat compares the chain's two halves
                                (``split_single_chain=True``): a within-chain check of
                                stationarity; ESS is that chain's own.
    ess_bulk_per_second         ess_bulk / the wall time of the post-warmup chunks
                                (``timing.sampling_seconds``, recorded by the engine in the
                                store's root attributes; nan for stores without it). All
                                chains run together, so a chain's figure is its ESS over
                                the same time. The first chunk an engine process runs
                                includes the XLA compilation (seconds): for a run resumed
                                during sampling, or a very short one, ESS/s is understated.
    ess_bulk_per_gradient       ess_bulk / the gradient evaluations (leapfrog steps, the
                                ``n_steps`` statistic) of the post-warmup draws: summed
                                over all chains for ``pooled``, the chain's own otherwise.
    divergences                 divergent post-warmup transitions (total, or the chain's):
                                the ones that count
    warmup_divergences          divergent warmup transitions (total, or the chain's): expected
                                while the step size adapts (it starts too large on purpose),
                                they say nothing about the draws and never need attention
    acceptance                  mean acceptance rate of the post-warmup draws
    step_size                   the final (adapted) step size; ``pooled``: the mean over
                                the chains
    mean, sd, q5, q50, q95, mcse_mean   as ``core.store.diagnostics.ScalarSummary``

Values that need attention (``needs_attention``): R-hat > 1.01, a bulk or tail ESS
below 100, any post-warmup divergence.

Chains that do not sample (``chain_warnings``, the first lines of the summary and the last
of ``fieldscope run``): a chain whose post-warmup acceptance averages below
``LOW_ACCEPTANCE`` (0.05: it rejects nearly every proposal, as with a target acceptance of
1e-4 or a warmup of one step), or whose draws never change (every parameter and the
log-density the same in every post-warmup draw). Its draws are kept, but they are not
draws of the posterior, and a table of "0 divergences" would hide it. ``divergence_text`` is how every client words the
two divergence counts ("0 divergences (49 in warmup)").
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, fields

import numpy as np

from core.store import diagnostics as dg
from core.store.advice import advise
from core.store.run_store import RunReader

__all__ = [
    "RHAT_ATTENTION", "ESS_ATTENTION", "DiagnosticsRow", "TABLE_COLUMNS", "TEXT_COLUMNS",
    "format_cell", "needs_attention", "divergence_text", "ChainHealth", "RunSummary", "summarize_run",
    "LOW_ACCEPTANCE", "chain_warnings", "stored_chain_warnings"
]

#: R-hat above this, an ESS below ESS_ATTENTION or any divergence needs attention
RHAT_ATTENTION = 1.01
#: a chain whose mean post-warmup acceptance is below this does not sample (chain_warnings)
LOW_ACCEPTANCE = 0.05
#: post-warmup draws a chain needs before it is judged (fewer say little)
_JUDGED_DRAWS = 10
ESS_ATTENTION = 100.0


@dataclass(frozen=True)
class DiagnosticsRow:
    """One row of the diagnostics table: one quantity in one scope (see the module docstring)."""

    scope: str                      # "pooled" or "chain <c>"
    quantity: str                   # a parameter name or "lp"
    mean: float
    sd: float
    q5: float
    q50: float
    q95: float
    mcse_mean: float
    ess_bulk: float
    ess_tail: float
    r_hat: float
    ess_bulk_per_second: float
    ess_bulk_per_gradient: float
    divergences: int
    warmup_divergences: int
    acceptance: float
    step_size: float


#: the table's columns, in order (the CSV header)
TABLE_COLUMNS = tuple(f.name for f in fields(DiagnosticsRow))
#: the columns ``fieldscope summary`` prints (and the GUI shows), with their headers
TEXT_COLUMNS = (("scope", "scope"), ("quantity", "quantity"), ("mean", "mean"), ("sd", "sd"),
                ("r_hat", "R-hat"), ("ess_bulk", "ESS bulk"), ("ess_tail", "ESS tail"),
                ("ess_bulk_per_second", "ESS/s"), ("ess_bulk_per_gradient", "ESS/grad"),
                ("divergences", "div"), ("warmup_divergences", "warm div"), ("acceptance", "accept"),
                ("step_size", "step size"))


def format_cell(column: str, value) -> str:
    """How the summary prints one value of the table (the GUI shows the same text)."""
    if column in ("scope", "quantity"):
        return str(value)
    if column in ("divergences", "warmup_divergences"):
        return str(int(value))
    value = float(value)
    if math.isnan(value):
        return "nan"
    if column == "r_hat":
        return f"{value:.3f}"
    if column in ("ess_bulk", "ess_tail"):
        return f"{value:.0f}"
    if column == "acceptance":
        return f"{value:.3f}"
    if column in ("ess_bulk_per_second", "ess_bulk_per_gradient"):
        return f"{value:.3g}"
    return f"{value:.4g}"


def needs_attention(column: str, value) -> bool:
    """Whether a table value is a warning sign: R-hat > 1.01, an ESS < 100, post-warmup
    divergences > 0 (warmup divergences never are)."""
    if column == "r_hat":
        return bool(value > RHAT_ATTENTION)           # nan compares False
    if column in ("ess_bulk", "ess_tail"):
        return bool(value < ESS_ATTENTION)
    if column == "divergences":
        return int(value) > 0
    return False


def divergence_text(sampling: int, warmup: int) -> str:
    """The two divergence counts in words, the sampling ones first (they count):
    "0 divergences (49 in warmup)", "3 divergences", "1 divergence (2 in warmup)"."""
    sampling, warmup = int(sampling), int(warmup)
    text = f"{sampling} divergence{'' if sampling == 1 else 's'}"
    return text + (f" ({warmup} in warmup)" if warmup else "")


@dataclass
class ChainHealth:
    """One chain's post-warmup health and its own summaries (``rows``, one per quantity)."""

    chain: int
    rows: list                      # dg.ScalarSummary of this chain's draws alone
    divergences: int                # post-warmup
    acceptance: float
    step_size: float                # final step size
    gradient_evaluations: int       # post-warmup leapfrog steps
    warmup_divergences: int = 0


@dataclass
class RunSummary:
    status: str
    progress: dict
    rows: list                      # dg.ScalarSummary for parameters and lp
    divergences: int                # post-warmup, all chains
    acceptance: float
    step_size: list                 # final step size per chain
    gradient_evaluations: int       # warmup and post-warmup, all chains
    ess_min: float
    field: dict | None = None
    shells: dg.Diagnostics | None = None
    shell_k: np.ndarray | None = None       # centres of the k-shells of ``shells``
    chains: list | None = None              # ChainHealth per chain
    sampling_seconds: float = float("nan")  # wall time of the post-warmup chunks
    warmup_seconds: float = float("nan")
    sampling_gradient_evaluations: int = 0  # post-warmup, all chains
    warmup_divergences: int = 0             # all chains
    device: str = ""                        # where the last session computed ("" in older stores)
    warnings: list = None                   # chain_warnings: chains that do not sample
    advice: list = None                     # core.store.advice.Advice: what to try when red

    @property
    def gradients_per_effective_sample(self) -> float:
        return self.gradient_evaluations / self.ess_min if self.ess_min > 0 else float("nan")

    # -- the diagnostics table ------------------------------------------------------------

    def table(self) -> list[DiagnosticsRow]:
        """Rows pooled first, then chain by chain; quantities in ``rows`` order."""
        out = []
        seconds = self.sampling_seconds
        pooled_step = float(np.mean(self.step_size)) if self.step_size else float("nan")
        for row in self.rows:
            out.append(_table_row("pooled", row, seconds, self.sampling_gradient_evaluations,
                                  (self.divergences, self.warmup_divergences), self.acceptance,
                                  pooled_step))
        for ch in self.chains or []:
            for row in ch.rows:
                out.append(_table_row(f"chain {ch.chain}", row, seconds, ch.gradient_evaluations,
                                      (ch.divergences, ch.warmup_divergences), ch.acceptance,
                                      ch.step_size))
        return out

    def table_csv(self) -> str:
        """The table as CSV (``summary --csv``): header ``TABLE_COLUMNS``, floats at full
        precision (``repr``), nan as nan."""
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(TABLE_COLUMNS)
        for row in self.table():
            writer.writerow([getattr(row, c) if c in ("scope", "quantity", "divergences", "warmup_divergences")
                             else repr(float(getattr(row, c))) for c in TABLE_COLUMNS])
        return buf.getvalue()

    def table_text(self) -> str:
        """The table's ``TEXT_COLUMNS`` aligned (``format_cell``); names left, numbers right."""
        cells = [[header for _, header in TEXT_COLUMNS]]
        for row in self.table():
            cells.append([format_cell(c, getattr(row, c)) for c, _ in TEXT_COLUMNS])
        widths = [max(len(line[i]) for line in cells) for i in range(len(TEXT_COLUMNS))]
        lines = []
        for line in cells:
            parts = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))]
            lines.append("  ".join(parts).rstrip())
        return "\n".join(lines) + "\n"

    def text(self) -> str:
        p = self.progress
        lines = [f"status: {self.status}   warmup draws: {p.get('warmup_draws', 0)}   "
                 f"draws: {p.get('draws', 0)}   field draws: {p.get('field_draws', 0)}"]
        lines += [f"warning: {w}" for w in self.warnings or []]
        lines += [f"advice: {a.text}" + (f" ({settings_text(a.changes)})" if a.changes else "")
                  for a in self.advice or []]
        if self.rows:
            lines.append(dg.summary_table_text(self.rows))
        lines.append(f"{divergence_text(self.divergences, self.warmup_divergences)}"
                     f"{'; warmup ones are expected while the step size adapts' if self.warmup_divergences else ''}"
                     f"   mean acceptance: {self.acceptance:.3f}   "
                     f"step size per chain: {', '.join(f'{s:.4g}' for s in self.step_size)}")
        lines.append(f"gradient evaluations: {self.gradient_evaluations}   "
                     f"per effective sample (worst quantity): {self.gradients_per_effective_sample:.1f}")
        if math.isnan(self.sampling_seconds):
            lines.append("sampling time: not recorded in this store (ESS/s is nan)")
        else:
            lines.append(f"sampling time: {self.sampling_seconds:.3g} s post-warmup, "
                         f"{self.warmup_seconds:.3g} s warmup"
                         + (f" (on {self.device})" if self.device else ""))
        if self.rows:
            lines.append("per chain and pooled (post-warmup draws; chain R-hat compares its halves):")
            lines.append(self.table_text())
        if self.field:
            f = self.field
            lines.append(f"field: voxel bulk ESS min {f['ess_bulk_min']:.0f}, 5% {f['ess_bulk_p05']:.0f}, "
                         f"median {f['ess_bulk_median']:.0f}; max voxel R-hat {f['rhat_max']:.3f}")
        if self.shells:
            s = self.shells
            lines.append(f"P(k) shells: max R-hat {_nanmax(s.rhat):.3f}, "
                         f"min bulk ESS {_nanmin(s.ess_bulk):.0f}")
        return "\n".join(lines)


def _nanmax(a) -> float:
    a = np.asarray(a, float)
    return float(np.nanmax(a)) if np.isfinite(a).any() else float("nan")


def _nanmin(a) -> float:
    a = np.asarray(a, float)
    return float(np.nanmin(a)) if np.isfinite(a).any() else float("nan")


def _table_row(scope, row, seconds, gradients, divergences, acceptance, step_size) -> DiagnosticsRow:
    sampling_divergences, warmup_divergences = divergences
    return DiagnosticsRow(
        scope=scope, quantity=row.name, mean=row.mean, sd=row.sd, q5=row.q5, q50=row.q50, q95=row.q95,
        mcse_mean=row.mcse_mean, ess_bulk=row.ess_bulk, ess_tail=row.ess_tail, r_hat=row.rhat,
        ess_bulk_per_second=float(dg.ess_per_second(row.ess_bulk, seconds)),
        ess_bulk_per_gradient=float(dg.ess_per_gradient(row.ess_bulk, gradients)),
        divergences=int(sampling_divergences), warmup_divergences=int(warmup_divergences),
        acceptance=float(acceptance), step_size=float(step_size))


def _seconds(timing, key: str) -> float:
    try:
        value = float(timing[key])
    except (KeyError, TypeError, ValueError):
        return float("nan")
    return value if math.isfinite(value) and value >= 0 else float("nan")


def summarize_run(run_dir, field_draw_limit: int = 400, field_diagnostics: bool = True) -> RunSummary:
    """The summary of the run store in ``run_dir`` (also while another process writes it:
    only the draws its ``progress`` counts are read).

    ``field_diagnostics=False`` skips the voxel-wise ESS of the field draws (it reads up to
    ``field_draw_limit`` whole fields; the GUI's live panel leaves it out). The k-shell
    diagnostics of the stored P(k) draws are always computed (they are small).
    Raises ``core.store.run_store.RunStoreError`` when ``run_dir`` holds no readable store.
    """
    reader = RunReader(run_dir)
    progress = reader.progress
    draws = {name: reader.param(name) for name in reader.param_names}
    lp = reader.stat("lp")
    draws["lp"] = lp
    has_draws = lp.shape[1] > 0
    rows = dg.summarize(draws) if has_draws else []
    divergences = dg.count_divergences(reader.stat("diverging"), warmup=reader.stat("diverging", warmup=True))
    post_steps = reader.stat("n_steps")
    n_steps = np.concatenate([reader.stat("n_steps", warmup=True), post_steps], axis=1)
    acceptance = reader.stat("acceptance_rate")
    step = reader.stat("step_size")
    ess = [r.ess_bulk for r in rows] + [r.ess_tail for r in rows]
    ess_min = float(np.nanmin(ess)) if ess and np.isfinite(ess).any() else float("nan")
    chains = []
    if has_draws:
        for c in range(lp.shape[0]):
            one = {name: value[c:c + 1] for name, value in draws.items()}
            chains.append(ChainHealth(
                chain=c, rows=dg.summarize(one, split_single_chain=True),
                divergences=divergences.per_chain[c], acceptance=float(np.mean(acceptance[c])),
                step_size=float(step[c, -1]), gradient_evaluations=int(post_steps[c].sum()),
                warmup_divergences=divergences.warmup_per_chain[c] if divergences.warmup_per_chain else 0))
    timing = reader.attrs.get("timing") or {}
    summary = RunSummary(
        status=reader.status, progress=progress, rows=rows,
        divergences=divergences.total, warmup_divergences=divergences.warmup_total,
        acceptance=float(np.mean(acceptance)) if acceptance.size else float("nan"),
        step_size=[float(v) for v in step[:, -1]] if step.size else [],
        gradient_evaluations=int(n_steps.sum()), ess_min=ess_min, chains=chains,
        sampling_seconds=_seconds(timing, "sampling_seconds"),
        warmup_seconds=_seconds(timing, "warmup_seconds"),
        sampling_gradient_evaluations=int(post_steps.sum()),
        device=str(reader.attrs.get("device") or ""),
        warnings=chain_warnings(acceptance, draws))
    if reader.has_field and progress.get("field_draws", 0) >= 4:
        n = progress["field_draws"]
        if field_diagnostics:
            take = slice(max(0, n - field_draw_limit), n)
            summary.field = dg.field_ess_summary(reader.field_draws(draws=take))
        k, _, power = reader.powers()
        summary.shells = dg.shell_diagnostics(power)
        summary.shell_k = k
    summary.advice = advise(summary, _stored_config(reader), mask=_stored_mask(reader))
    return summary


def _stored_mask(reader):
    """A function that reads the run's stored mask (None from it where the store holds none)."""
    def read():
        try:
            return reader.observed("mask")
        except KeyError:
            return None
    return read if reader.has_field else None


def _stored_config(reader):
    """The run's config, or None when its stored text no longer parses (advice needs it)."""
    from core.config import ConfigError

    try:
        return reader.stored_config.parse()
    except (ConfigError, OSError, ValueError, KeyError):
        return None


def settings_text(changes: dict) -> str:
    """``{"sampler.num_warmup": 2000}`` -> 'set sampler.num_warmup = 2000' (TOML values)."""
    from core.config.writer import _toml_value

    return "set " + ", ".join(f"{key} = {_toml_value(value)}" for key, value in changes.items())


def _chains(indices) -> str:
    indices = [int(i) for i in indices]
    return ("chain " if len(indices) == 1 else "chains ") + ", ".join(map(str, indices))


def chain_warnings(acceptance: np.ndarray, draws: dict) -> list[str]:
    """One line per way the chains fail to sample (module docstring), from the post-warmup
    ``acceptance`` (chain, draw) and ``draws`` {name: (chain, draw)} (the parameters and lp).
    Empty when they sample, or with fewer than 10 post-warmup draws."""
    acceptance = np.asarray(acceptance, float)
    if acceptance.ndim != 2 or acceptance.shape[1] < _JUDGED_DRAWS:
        return []
    out = []
    with np.errstate(all="ignore"):
        per_chain = np.nanmean(acceptance, axis=1) if np.isfinite(acceptance).any() else None
    if per_chain is not None:
        low = np.flatnonzero(per_chain < LOW_ACCEPTANCE)
        if low.size:
            out.append(f"{_chains(low)} of {acceptance.shape[0]} accepted almost no proposal (mean acceptance "
                       f"{', '.join(f'{per_chain[c]:.3g}' for c in low)}, below {LOW_ACCEPTANCE}): "
                       "their draws are not draws of the posterior; check sampler.target_accept, "
                       "sampler.num_warmup and sampler.step_size and run again")
    values = [np.asarray(v, float) for v in draws.values() if np.asarray(v).ndim == 2]
    if values and values[0].shape[1] >= _JUDGED_DRAWS:
        frozen = [c for c in range(values[0].shape[0])
                  if all(np.all(v[c] == v[c, 0]) or not np.isfinite(v[c]).any() for v in values)]
        if frozen:
            out.append(f"{_chains(frozen)} never moved: every post-warmup draw equals the first; "
                       "the run does not sample the posterior")
    return out


def stored_chain_warnings(run_dir) -> list[str]:
    """``chain_warnings`` of the run store in ``run_dir`` (reads the post-warmup acceptance,
    parameters and lp only); RunStoreError when it cannot be read."""
    reader = RunReader(run_dir)
    draws = {name: reader.param(name) for name in reader.param_names}
    draws["lp"] = reader.stat("lp")
    return chain_warnings(reader.stat("acceptance_rate"), draws)
