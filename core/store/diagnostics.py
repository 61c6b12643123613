"""MCMC convergence diagnostics: rank-normalised split R-hat, bulk and tail ESS, summaries.

The estimators are those of Vehtari, Gelman, Simpson, Carpenter & Buerkner (2021),
"Rank-normalization, folding, and localization: an improved R-hat for assessing
convergence of MCMC", Bayesian Analysis 16(2), as implemented by ArviZ 0.23
(``arviz.rhat(method="rank")``, ``arviz.ess(method="bulk" / "tail" / "mean")``,
``arviz.mcse(method="mean")``); the tests check agreement to 1e-10 relative.

Conventions
-----------
Draws. An array of shape (chain, draw) holds one scalar quantity; (chain, draw, *rest)
holds one quantity per trailing index (a field's voxels, P(k)'s shells) and every
function then returns an array of shape ``rest``. A 1-D array is one chain. For a
(chain, draw) input the functions return a Python float.

Split chains. Each chain of D draws is cut into its first and last n = D // 2 draws
(the middle draw of an odd D is dropped), giving M = 2 * chain sequences of n draws;
first halves of all chains come first, as in ArviZ. S = M * n.

Rank normalisation. With r the average rank (ties share the mean of their ranks) of
a draw among all S split draws,

    z = Phi^-1((r - 3/8) / (S - 2 * 3/8 + 1))          (Blom's offset)

R-hat. For M sequences of n draws with means m_j and variances s_j^2 (ddof 1),
W = mean_j s_j^2, B = n * var_j(m_j) (ddof 1) and

    R(y) = sqrt((B / W + n - 1) / n)

``rhat`` = max(R(z(x)), R(z(|x - median(x)|))): the bulk and the folded (tail) R-hat,
ranks and median over the split draws.

ESS. For M sequences of n draws with autocovariances acov_j(t) (FFT, biased, 1/n):
mean_var = mean_j acov_j(0) * n / (n - 1), var_plus = mean_var * (n - 1) / n +
var_j(m_j) (ddof 1), and rho(t) = 1 - (mean_var - mean_j acov_j(t)) / var_plus.
Geyer's initial positive sequence keeps the pairs P_k = rho(2k) + rho(2k + 1) while
P_k > 0 (at most up to lag n - 2), the initial monotone sequence replaces P_k by
min(P_0..P_k), and with the sum running over the kept pairs,

    tau = -1 + 2 * sum_k P_k + rho(2K)   (the first dropped even lag, if positive),
    ESS = S / max(tau, 1 / log10(S)).

``ess_bulk`` is the ESS of z(x), ``ess_tail`` the smaller ESS of the indicators
x <= q05 and x <= q95 (quantiles of all unsplit draws, R's type 7), ``ess_mean``
the ESS of x itself, all on split chains. ``mcse_mean`` = sd(x) / sqrt(ess_mean).

Edge cases (no exceptions, no warnings)
---------------------------------------
- fewer than 4 draws: every diagnostic is nan (as ArviZ).
- one chain: ESS works (split chains); R-hat is nan, as ArviZ, unless
  ``split_single_chain=True``, which compares the chain's two halves.
- a constant quantity: R-hat is nan (0 / 0, as ArviZ) and every ESS is S (ArviZ's
  convention: a sequence whose range is below 1e-15 counts as S independent draws).
- a quantity with any NaN or +-inf draw: every diagnostic is nan for that quantity.
  ArviZ agrees for NaN; for inf it ranks the infinities and returns finite numbers,
  but an infinite draw means the sampler blew up, and a rank-based "R-hat = 1.00"
  would hide it.
- float32 draws are ranked and folded in float32 (as ArviZ does); moments, FFTs and
  ``mcse_mean`` are computed in float64 (ArviZ takes the sd in float32).

Memory. Quantities are processed in blocks of voxels; each block's working arrays take
at most about ``128 * chain * draw`` bytes per voxel, and the block is sized so that they
stay within ``memory_budget`` bytes (default 128 MiB), whatever the number of voxels
(one voxel per block at the least, however many draws it has). A C-contiguous input is
read through a view (no copy), so (4 chains, 200 draws, 64^3) float32 draws (0.84 GB)
are diagnosed in about 1 GB in all (input, <= 128 MiB of work, 2 MiB per output). Other
layouts are copied one slab of the first trailing axis at a time (a (x, y, z) field:
whole x-planes).

This module is numpy/scipy only (the GUI process imports it; no TensorFlow, no Qt,
no ArviZ).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy import special

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "Diagnostics",
    "Divergences",
    "ScalarSummary",
    "convergence",
    "count_divergences",
    "ess_bulk",
    "ess_mean",
    "ess_per_gradient",
    "ess_per_second",
    "ess_tail",
    "field_ess_summary",
    "mcse_mean",
    "rhat",
    "shell_diagnostics",
    "summarize",
    "summary_csv",
    "summary_table_text",
]

DEFAULT_MEMORY_BUDGET = 128 * 2**20
"""Bytes of working memory a blocked computation may use beyond its input and output."""

MIN_DRAWS = 4
"""Fewer draws per chain than this give nan diagnostics (ArviZ's threshold)."""

# Working bytes per (voxel, chain, draw) sample in one block: the copied block, the split
# copy, the sort order and sorted values, z-scores, the folded copy, and the FFT buffers
# (complex, zero-padded to >= 2n). tracemalloc peaks: 40-100 (``convergence`` of float64
# draws the most); 128 leaves room for an FFT length up to ~1.25 * 2n.
_BYTES_PER_SAMPLE = 128

_BLOM = 3.0 / 8.0
_TAIL_PROBS = (0.05, 0.95)
_ALL = ("rhat", "ess_bulk", "ess_tail", "ess_mean", "mcse_mean")


class Diagnostics(NamedTuple):
    """R-hat, bulk and tail ESS of one or many quantities (floats or arrays of one shape)."""

    rhat: float | np.ndarray
    ess_bulk: float | np.ndarray
    ess_tail: float | np.ndarray


class Divergences(NamedTuple):
    """Divergent transitions of the post-warmup draws: the total, the count per chain and
    the fraction of all draws; then those of the warmup (when counted): expected while
    the step size adapts, they say nothing about the posterior draws."""

    total: int
    per_chain: tuple[int, ...]
    fraction: float
    warmup_total: int = 0
    warmup_per_chain: tuple[int, ...] = ()


@dataclass(frozen=True)
class ScalarSummary:
    """Posterior summary of one scalar quantity.

    ``sd`` has ddof 1; quantiles are numpy's linear (R's type 7) over all draws;
    ``mcse_mean`` is the Monte Carlo standard error of ``mean``; ``chain_means`` has
    one entry per chain. Diagnostics follow the module's conventions (nan when
    undefined).
    """

    name: str
    mean: float
    sd: float
    q5: float
    q50: float
    q95: float
    mcse_mean: float
    ess_bulk: float
    ess_tail: float
    rhat: float
    chain_means: tuple[float, ...]


# ----------------------------------------------------------------------------- public API


def rhat(x, *, split_single_chain: bool = False, memory_budget: int = DEFAULT_MEMORY_BUDGET):
    """Rank-normalised split R-hat: max of the bulk and the folded (tail) R-hat.

    ``x``: (chain, draw) or (chain, draw, *rest). Returns a float or an array of shape
    ``rest``; nan for fewer than 4 draws, fewer than 2 chains (unless
    ``split_single_chain``), constant or non-finite quantities.
    """
    return _compute(x, ("rhat",), memory_budget, split_single_chain)[0]


def ess_bulk(x, *, memory_budget: int = DEFAULT_MEMORY_BUDGET):
    """Bulk effective sample size: the split-chain ESS of the rank-normalised draws."""
    return _compute(x, ("ess_bulk",), memory_budget)[0]


def ess_tail(x, *, memory_budget: int = DEFAULT_MEMORY_BUDGET):
    """Tail effective sample size: min of the ESS of the 5% and 95% quantile indicators."""
    return _compute(x, ("ess_tail",), memory_budget)[0]


def ess_mean(x, *, memory_budget: int = DEFAULT_MEMORY_BUDGET):
    """Split-chain ESS of the draws themselves (the ESS of the posterior mean)."""
    return _compute(x, ("ess_mean",), memory_budget)[0]


def mcse_mean(x, *, memory_budget: int = DEFAULT_MEMORY_BUDGET):
    """Monte Carlo standard error of the posterior mean: sd (ddof 1) / sqrt(ess_mean)."""
    return _compute(x, ("mcse_mean",), memory_budget)[0]


def convergence(x, *, split_single_chain: bool = False,
                memory_budget: int = DEFAULT_MEMORY_BUDGET) -> Diagnostics:
    """R-hat, bulk ESS and tail ESS in one pass (the ranks are shared)."""
    return Diagnostics(*_compute(x, ("rhat", "ess_bulk", "ess_tail"), memory_budget,
                                 split_single_chain))


def summarize(draws: Mapping[str, object], *, split_single_chain: bool = False
              ) -> list[ScalarSummary]:
    """One ``ScalarSummary`` per scalar: ``draws`` maps names to (chain, draw) arrays.

    An array with trailing axes, (chain, draw, *rest), gives one row per element,
    named ``name[i,j]`` (ArviZ's style). Raises ``ValueError`` naming the key for an
    array that is not numeric or has fewer than 2 axes.
    """
    rows: list[ScalarSummary] = []
    for name, value in draws.items():
        arr = _validated(value, f"draws[{name!r}]")
        if arr.ndim < 2:
            raise ValueError(f"draws[{name!r}] has shape {arr.shape}; expected "
                             "(chain, draw) or (chain, draw, ...)")
        n_chain, n_draw = arr.shape[:2]
        rest = arr.shape[2:]
        flat = arr.reshape(n_chain, n_draw, math.prod(rest))
        diag = _compute(flat, ("rhat", "ess_bulk", "ess_tail", "mcse_mean"),
                        DEFAULT_MEMORY_BUDGET, split_single_chain)
        moments = _moments(flat)
        for v in range(flat.shape[2]):
            label = name if not rest else f"{name}[{','.join(map(str, np.unravel_index(v, rest)))}]"
            r, eb, et, mc = (float(d[v]) for d in diag)
            mean, sd, q5, q50, q95, chain_means = (m[v] for m in moments)
            rows.append(ScalarSummary(label, float(mean), float(sd), float(q5), float(q50),
                                      float(q95), mc, eb, et, r,
                                      tuple(float(c) for c in chain_means)))
    return rows


_COLUMNS = ("name", "mean", "sd", "5%", "50%", "95%", "mcse_mean", "ess_bulk", "ess_tail",
            "r_hat", "chain means")


def summary_table_text(rows: Sequence[ScalarSummary]) -> str:
    """An aligned plain-text table of ``rows`` (for ``fieldscope summary``).

    Values have 4 significant digits, ESS is rounded to whole draws, R-hat has 3
    decimals; names and chain means are left-aligned, numbers right-aligned.
    """
    def g(v):
        return f"{v:.4g}"

    def ess(v):
        return "nan" if np.isnan(v) else f"{v:.0f}"

    def r(v):
        return "nan" if np.isnan(v) else f"{v:.3f}"

    cells = [list(_COLUMNS)]
    for row in rows:
        cells.append([row.name, g(row.mean), g(row.sd), g(row.q5), g(row.q50), g(row.q95),
                      g(row.mcse_mean), ess(row.ess_bulk), ess(row.ess_tail), r(row.rhat),
                      " ".join(g(c) for c in row.chain_means)])
    widths = [max(len(line[i]) for line in cells) for i in range(len(_COLUMNS))]
    left = {0, len(_COLUMNS) - 1}
    lines = []
    for line in cells:
        parts = [c.ljust(w) if i in left else c.rjust(w)
                 for i, (c, w) in enumerate(zip(line, widths))]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines) + "\n"


def summary_csv(rows: Sequence[ScalarSummary]) -> str:
    """``rows`` as CSV text with a header; floats at full precision (``repr``), nan as nan.

    Columns: name, mean, sd, q5, q50, q95, mcse_mean, ess_bulk, ess_tail, r_hat, then
    chain_0_mean ... for the largest chain count (empty where a row has fewer chains).
    """
    n_chain = max((len(row.chain_means) for row in rows), default=0)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["name", "mean", "sd", "q5", "q50", "q95", "mcse_mean", "ess_bulk",
                     "ess_tail", "r_hat"] + [f"chain_{c}_mean" for c in range(n_chain)])
    for row in rows:
        values = [row.mean, row.sd, row.q5, row.q50, row.q95, row.mcse_mean, row.ess_bulk,
                  row.ess_tail, row.rhat]
        chains = [repr(float(c)) for c in row.chain_means]
        writer.writerow([row.name] + [repr(float(v)) for v in values]
                        + chains + [""] * (n_chain - len(chains)))
    return out.getvalue()


def field_ess_summary(field_draws, *, split_single_chain: bool = False,
                      memory_budget: int = DEFAULT_MEMORY_BUDGET) -> dict:
    """Voxel-wise bulk ESS and R-hat of field draws (chain, draw, *grid), reduced.

    Returns a dict: ``n_voxels``; ``ess_bulk_min``, ``ess_bulk_p05`` (5th percentile,
    linear), ``ess_bulk_median`` and ``ess_bulk_argmin`` (the grid index of the worst
    voxel, or None); ``rhat_max`` and ``rhat_argmax``; ``n_nan_ess`` and ``n_nan_rhat``,
    the voxels whose diagnostic is nan (non-finite draws; for R-hat also constant voxels,
    or every voxel of a single chain). The reductions ignore nan voxels; with none
    left they are nan. Blocked: see the module's note on memory.
    """
    arr = _validated(field_draws, "field_draws")
    if arr.ndim < 3:
        raise ValueError(f"field_draws has shape {arr.shape}; expected (chain, draw, *grid)")
    grid = arr.shape[2:]
    r, e = _compute(arr, ("rhat", "ess_bulk"), memory_budget, split_single_chain)
    r, e = np.asarray(r).ravel(), np.asarray(e).ravel()
    ok_e, ok_r = ~np.isnan(e), ~np.isnan(r)
    out = {"n_voxels": int(e.size), "n_nan_ess": int(e.size - ok_e.sum()),
           "n_nan_rhat": int(r.size - ok_r.sum())}
    if ok_e.any():
        good = e[ok_e]
        i_min = int(np.flatnonzero(ok_e)[np.argmin(good)])
        out.update(ess_bulk_min=float(good.min()),
                   ess_bulk_p05=float(np.percentile(good, 5)),
                   ess_bulk_median=float(np.median(good)),
                   ess_bulk_argmin=tuple(int(i) for i in np.unravel_index(i_min, grid)))
    else:
        out.update(ess_bulk_min=math.nan, ess_bulk_p05=math.nan, ess_bulk_median=math.nan,
                   ess_bulk_argmin=None)
    if ok_r.any():
        i_max = int(np.flatnonzero(ok_r)[np.argmax(r[ok_r])])
        out.update(rhat_max=float(r[i_max]),
                   rhat_argmax=tuple(int(i) for i in np.unravel_index(i_max, grid)))
    else:
        out.update(rhat_max=math.nan, rhat_argmax=None)
    return out


def shell_diagnostics(power_draws, *, split_single_chain: bool = False) -> Diagnostics:
    """R-hat, bulk and tail ESS per k-shell of P(k) draws of shape (chain, draw, n_shells).

    Each shell's power is a scalar per draw; the result holds three arrays of length
    n_shells.
    """
    arr = _validated(power_draws, "power_draws")
    if arr.ndim != 3:
        raise ValueError(f"power_draws has shape {arr.shape}; expected (chain, draw, n_shells)")
    return convergence(arr, split_single_chain=split_single_chain)


def ess_per_gradient(ess, n_gradient_evaluations):
    """ESS per gradient evaluation (nan when the count is not positive and finite)."""
    return _per(ess, n_gradient_evaluations)


def ess_per_second(ess, seconds):
    """ESS per second of sampling wall time (nan when the time is not positive and finite)."""
    return _per(ess, seconds)


def count_divergences(diverging, warmup=None) -> Divergences:
    """Count divergent transitions in a (chain, draw) (or (draw,)) array of flags of the
    post-warmup draws, and apart from them those of ``warmup`` (the warmup steps' flags,
    same chains; None: not counted, warmup_total 0 and warmup_per_chain ()).

    Any non-zero value (True, 1, also NaN) is a divergence. An empty array gives
    total 0 and fraction nan.
    """
    flags = _divergence_flags(diverging, "diverging")
    per_chain = tuple(int(c) for c in flags.sum(axis=1))
    total = int(sum(per_chain))
    fraction = total / flags.size if flags.size else math.nan
    if warmup is None:
        return Divergences(total, per_chain, fraction)
    warm = _divergence_flags(warmup, "warmup diverging")
    if warm.shape[0] != flags.shape[0] and warm.size and flags.size:
        raise ValueError(f"warmup diverging has {warm.shape[0]} chains, diverging {flags.shape[0]}")
    warm_per_chain = tuple(int(c) for c in warm.sum(axis=1))
    return Divergences(total, per_chain, fraction, int(sum(warm_per_chain)), warm_per_chain)


def _divergence_flags(diverging, what: str) -> np.ndarray:
    flags = np.asarray(diverging)
    if flags.ndim == 1:
        flags = flags[None, :]
    if flags.ndim != 2:
        raise ValueError(f"{what} has shape {flags.shape}; expected (chain, draw)")
    return flags != 0


# ----------------------------------------------------------------------------- blocking


def _validated(x, what: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{what} must hold real numbers; got dtype {arr.dtype}")
    if arr.dtype.kind != "f":
        arr = arr.astype(np.float64)
    elif arr.dtype.itemsize < 4:
        arr = arr.astype(np.float32)           # numpy's float16 median is float32 inside
    return arr


def _compute(x, wanted, memory_budget, split_single_chain=False):
    """Evaluate the ``wanted`` diagnostics block by block; floats for a (chain, draw) input."""
    arr = _validated(x, "draws")
    if arr.ndim < 2:
        arr = np.atleast_2d(arr)
    n_chain, n_draw = arr.shape[:2]
    rest = arr.shape[2:]
    n_vox = math.prod(rest)
    outs = {name: np.full(n_vox, np.nan) for name in wanted}
    if n_draw >= MIN_DRAWS and n_chain >= 1 and n_vox > 0:
        per_voxel = max(1, n_chain * n_draw * _BYTES_PER_SAMPLE)
        block = int(max(1, min(n_vox, memory_budget // per_voxel)))
        with np.errstate(all="ignore"):
            for v0, v1, chunk in _blocks(arr, block):
                # (chain, draw, Vb) -> (Vb, chain, draw): each voxel's draws contiguous.
                xb = np.ascontiguousarray(np.moveaxis(chunk, 2, 0))
                finite = np.isfinite(xb).all(axis=(1, 2))
                if not finite.all():
                    xb = xb[finite]
                if xb.shape[0] == 0:
                    continue
                results = _block_diagnostics(xb, wanted, split_single_chain)
                for name in wanted:
                    outs[name][v0:v1][finite] = results[name]
    if not rest:
        return tuple(float(outs[name][0]) for name in wanted)
    return tuple(outs[name].reshape(rest) for name in wanted)


def _blocks(arr, block):
    """Yield (v0, v1, (chain, draw, v1 - v0) array) over the flattened trailing axes."""
    n_chain, n_draw = arr.shape[:2]
    if arr.ndim == 2:
        yield 0, 1, arr[:, :, None]
        return
    if arr.flags.c_contiguous:
        flat = arr.reshape(n_chain, n_draw, -1)             # a view: no copy of the input
        for v0 in range(0, flat.shape[2], block):
            v1 = min(v0 + block, flat.shape[2])
            yield v0, v1, flat[:, :, v0:v1]
        return
    # Not contiguous: reshaping would copy everything, so copy slabs of the first trailing
    # axis (whole rows of the remaining ones), as many as fit in a block.
    row = math.prod(arr.shape[3:])
    rows = max(1, block // max(row, 1))
    for r0 in range(0, arr.shape[2], rows):
        r1 = min(r0 + rows, arr.shape[2])
        yield r0 * row, r1 * row, arr[:, :, r0:r1].reshape(n_chain, n_draw, -1)


# ----------------------------------------------------------------------------- kernels
# Every kernel works on a block of shape (Vb, chain, draw) with finite draws only, and
# returns one value per voxel. Draws keep their floating dtype where only their order
# matters (ranks, folding, quantile indicators), as ArviZ does.


def _block_diagnostics(xb, wanted, split_single_chain):
    n_vox, n_chain, n_draw = xb.shape
    out = {}
    split = _split_chains(xb)
    want_rhat = "rhat" in wanted and (n_chain >= 2 or split_single_chain)
    if "rhat" in wanted and not want_rhat:
        out["rhat"] = np.full(n_vox, np.nan)          # ArviZ wants 2 chains for R-hat
    if want_rhat or "ess_bulk" in wanted:
        z, ordered = _rank_normalise(split)           # shared by bulk ESS and bulk R-hat
        if "ess_bulk" in wanted:
            out["ess_bulk"] = _ess(z)
        if want_rhat:
            bulk = _rhat(z)
            del z
            folded = np.abs(split - _sorted_median(ordered)[:, None, None])
            del ordered
            tail = _rhat(_rank_normalise(folded)[0])
            # Python's max(bulk, tail), as ArviZ: bulk unless tail is larger (so a nan
            # tail gives the bulk value, a nan bulk gives nan).
            out["rhat"] = np.where(tail > bulk, tail, bulk)
    if "ess_tail" in wanted:
        out["ess_tail"] = _ess_tail(xb)
    if "ess_mean" in wanted or "mcse_mean" in wanted:
        em = _ess(split.astype(np.float64))
        if "ess_mean" in wanted:
            out["ess_mean"] = em
        if "mcse_mean" in wanted:
            sd = xb.reshape(n_vox, -1).astype(np.float64).std(axis=1, ddof=1)
            out["mcse_mean"] = sd / np.sqrt(em)
    return out


def _split_chains(a):
    """(V, C, D) -> (V, 2C, D // 2): first halves of all chains, then last halves."""
    half = a.shape[-1] // 2
    return np.concatenate((a[..., :half], a[..., a.shape[-1] - half:]), axis=1)


def _rank_normalise(a):
    """z = Phi^-1((r - 3/8) / (S - 3/4 + 1)), average ranks r over each voxel's S draws.

    Returns z (float64, the shape of ``a``) and each voxel's draws sorted, (V, S).
    """
    n_vox = a.shape[0]
    flat = a.reshape(n_vox, -1)
    size = flat.shape[1]
    # Ties get the mean rank of their group whatever their order, so any sort will do;
    # flat indices (row offset + order) are much faster than take/put_along_axis.
    order = np.argsort(flat, axis=1)
    order += (np.arange(n_vox) * size)[:, None]
    ordered = flat.ravel()[order]
    # Average ranks are half-integers 1, 1.5, ..., S: tabulate Phi^-1 once per block,
    # indexed by 2 r - 2 = (first + last) sorted position of the draw's tie group.
    ranks = np.arange(2 * size - 1) / 2.0 + 1.0
    table = special.ndtri((ranks - _BLOM) / (size - 2 * _BLOM + 1))
    rows, cols = np.nonzero(ordered[:, 1:] == ordered[:, :-1])
    z = np.empty(a.shape, dtype=np.float64)
    if rows.size == 0:
        z.ravel()[order] = np.broadcast_to(table[0::2], flat.shape)
        return z, ordered
    # Ties are few (folding pairs the two draws around the median) unless the draws are
    # discrete, so patch them sparsely: a run of equal neighbours p, p+1, ..., q in the
    # flattened sorted array is one tie group covering positions p..q+1.
    tied = rows * size + cols
    breaks = np.flatnonzero(np.diff(tied) != 1)
    run_first = tied[np.concatenate(([0], breaks + 1))]
    run_last = tied[np.concatenate((breaks, [tied.size - 1]))] + 1
    row_start = (run_first // size) * size
    twice = (run_first - row_start) + (run_last - row_start)
    counts = run_last - run_first + 1
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    z_sorted = np.empty(flat.shape, dtype=np.float64)
    z_sorted[:] = table[0::2]
    z_sorted.ravel()[np.repeat(run_first, counts) + offsets] = np.repeat(table[twice], counts)
    z.ravel()[order] = z_sorted
    return z, ordered


def _sorted_median(ordered):
    """np.median of each row of sorted draws, bit for bit (mean of the middle two)."""
    size = ordered.shape[1]
    mid = size // 2
    if size % 2:
        return ordered[:, mid]
    return (ordered[:, mid - 1] + ordered[:, mid]) / 2


def _rhat(a):
    """sqrt((B / W + n - 1) / n) for (V, M, n) float64 sequences."""
    n = a.shape[2]
    chain_mean = a.mean(axis=2)
    chain_var = a.var(axis=2, ddof=1)
    between = n * chain_mean.var(axis=1, ddof=1)
    within = chain_var.mean(axis=1)
    return np.sqrt((between / within + n - 1) / n)


def _fast_len(target: int) -> int:
    """Smallest 2^a 3^b 5^c >= target (scipy.fftpack.next_fast_len, as ArviZ pads)."""
    best = None
    p5 = 1
    while True:
        p35 = p5
        while True:
            p = p35
            while p < target:
                p *= 2
            best = p if best is None else min(best, p)
            if p35 >= target:
                break
            p35 *= 3
        if p5 >= target:
            break
        p5 *= 5
    return best


def _ess(a):
    """Split-chain ESS of (V, M, n) sequences (already split), Geyer's monotone sequence.

    Vectorised form of ArviZ's loop: P_k = rho(2k) + rho(2k + 1) for k = 0..K, K =
    (n - 3) // 2 the last pair the loop may reach; k_end = the first k with P_k <= 0
    (or K); tau = -1 + 2 * sum_{k < k_end} min(P_0..P_k) + extra, where extra =
    rho(2 k_end) if it is positive or the pair was kept (P = 0), else 0.
    """
    a = np.asarray(a, dtype=np.float64)
    n_vox, n_seq, n = a.shape
    size = n_seq * n
    constant = (a.max(axis=(1, 2)) - a.min(axis=(1, 2))) < np.finfo(float).resolution
    chain_mean = a.mean(axis=2)
    m = _fast_len(2 * n)
    spectrum = np.fft.rfft(a - chain_mean[:, :, None], n=m, axis=2)
    power = spectrum.real**2 + spectrum.imag**2
    del spectrum
    acov = np.fft.irfft(power, n=m, axis=2)[:, :, :n]
    del power
    acov /= n
    acov_mean = acov.mean(axis=1)                                      # (V, n)
    del acov
    mean_var = acov_mean[:, 0] * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n + chain_mean.var(axis=1, ddof=1)
    rho = 1.0 - (mean_var[:, None] - acov_mean) / var_plus[:, None]
    rho[:, 0] = 1.0
    k_last = max(0, (n - 3) // 2)
    pairs = rho[:, 0:2 * k_last + 2:2] + rho[:, 1:2 * k_last + 2:2]   # (V, K + 1)
    stop = ~(pairs > 0)
    k_end = np.where(stop.any(axis=1), np.argmax(stop, axis=1), k_last)
    monotone = np.minimum.accumulate(pairs, axis=1)
    kept = np.concatenate((np.zeros((n_vox, 1)), np.cumsum(monotone, axis=1)), axis=1)
    kept = np.take_along_axis(kept, k_end[:, None], axis=1)[:, 0]
    rows = np.arange(n_vox)
    even = rho[rows, 2 * k_end]
    pair_end = pairs[rows, k_end]
    extra = np.where((even > 0) | (pair_end >= 0), even, 0.0)
    tau = -1.0 + 2.0 * kept + extra
    tau = np.maximum(tau, 1.0 / np.log10(size))
    ess = size / tau
    ess[np.isnan(rho[:, 1])] = np.nan
    ess[constant] = size
    return ess


def _ess_tail(xb):
    """min(ESS(x <= q05), ESS(x <= q95)) with R's type-7 quantiles of all (unsplit) draws."""
    n_vox = xb.shape[0]
    flat = xb.reshape(n_vox, -1)
    n = flat.shape[1]
    # scipy.stats.mstats.mquantiles(alphap=1, betap=1), the formula ArviZ calls.
    positions = []
    for p in _TAIL_PROBS:
        aleph = n * p + (1 + p * (1.0 - 1 - 1))
        k = int(np.floor(np.clip(aleph, 1, n - 1)))
        gamma = float(np.clip(aleph - k, 0, 1))
        positions.append((k, gamma))
    kth = sorted({i for k, _ in positions for i in (k - 1, k)})
    part = np.partition(flat, kth, axis=1)
    ess = []
    for k, gamma in positions:
        q = ((1.0 - gamma) * part[:, k - 1].astype(np.float64)
             + gamma * part[:, k].astype(np.float64))
        indicator = (xb <= q[:, None, None]).astype(np.float64)
        ess.append(_ess(_split_chains(indicator)))
    low, high = ess
    return np.where(high < low, high, low)          # Python's min(low, high), as ArviZ


def _moments(flat):
    """Mean, sd (ddof 1), q5, q50, q95 and chain means per voxel of (C, D, V) draws."""
    n_chain, n_draw, n_vox = flat.shape
    nan = np.full(n_vox, np.nan)
    if n_chain * n_draw == 0:
        return nan, nan, nan, nan, nan, np.full((n_vox, n_chain), np.nan)
    with np.errstate(all="ignore"):
        x = flat.astype(np.float64)
        mean = x.mean(axis=(0, 1))
        sd = x.std(axis=(0, 1), ddof=1) if n_chain * n_draw > 1 else nan
        q5, q50, q95 = np.quantile(x.reshape(n_chain * n_draw, n_vox), [0.05, 0.5, 0.95],
                                   axis=0)
        chain_means = x.mean(axis=1).T
    return mean, sd, q5, q50, q95, chain_means


def _per(ess, amount):
    amount = float(amount)
    with np.errstate(all="ignore"):
        value = np.asarray(ess, dtype=np.float64) / amount
        if not (math.isfinite(amount) and amount > 0):
            value = np.full_like(value, np.nan)
    return float(value) if value.ndim == 0 else value
