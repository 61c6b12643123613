"""What to try when a run's diagnostics are red (and where a bias no diagnostic shows is
likely): one sentence each, and the config change that applies it (``fieldscope summary`` prints them; the Diagnostics view offers each change as a
button that sets it in the window's config).

``advise(summary, config)`` reads a ``core.store.run_summary.RunSummary`` and the run's
``core.config.RunConfig`` and returns ``Advice`` items, most important first, at most one per rule:

slow hyperparameters   a sampled P(k) hyperparameter with R-hat > 1.01 or bulk ESS below
                       ``ESS_TARGET`` while the field is not sampled with the "conditional"
                       preconditioner: in the whitened latent (and with "fourier") the field's
                       well-measured modes pin the spectrum, which then moves only as fast as
                       every such mode can follow (``bench/hyper_coupling.py`` measures it);
                       "conditional" centres each mode on its posterior given P(k)
                       (``core.engine.field_density``) and the hyperparameters move freely
                       (``bench/hyper_efficiency.py``). Change: sampler.preconditioner.
slow hyperparameters,  the same with "conditional", ``sampler.interweave`` off, the whitened
interweaving off       latent and a sampler with an accept step (the move needs one): the
                       centred move after each transition (``core.engine.interweaving``) draws
                       the spectrum given the field's modes, fastest where the data pin them.
                       Change: sampler.interweave = true.
chains disagree        otherwise, any R-hat > 1.01 (a parameter or lp): the warmup ended before
                       the chains found the same region. Change: sampler.num_warmup doubled.
few effective draws    otherwise, a bulk ESS below ``ESS_TARGET`` with the chains agreeing:
                       more draws of the same sampler. Change: sampler.num_samples scaled to
                       reach ``ESS_TARGET`` (at most ``core.config.limits.MAX_DRAWS``).
divergences            post-warmup divergences with a sampler that has a target acceptance
                       (HMC, NUTS, MAMS): a smaller step. Change: sampler.target_accept raised.
unadjusted bias        green or red: an unadjusted sampler (MCLMC) with P(k) hyperparameters
                       sampled and modes the data couple (a mask, a noise map, a likelihood
                       other than Gaussian; not a slab mask, whole planes missing, with the
                       conditional preconditioner, which is exact there:
                       ``core.field.observations.slab_decouples``, the run's stored mask read
                       for it): each mode's share of its bias adds up in the
                       hyperparameters, which no R-hat or ESS shows (bench/hyper_efficiency.py:
                       0.24-0.37 sd off under a 25 % slab, three seeds; MAMS 0.00-0.03), and
                       there its chains can disagree (band powers under the slab: R-hat
                       1.20-1.43; MAMS <= 1.004): after the other rules' advice where the
                       hyperparameters are green, before it where they are red (but after
                       "slow hyperparameters": MAMS too is pinned without the centring). Change:
                       sampler.algorithm = "mams" (what File > New from data writes there,
                       ``core.config.schema.COUPLED_HYPER_SAMPLER``). ``unadjusted_bias``:
                       the rule alone, which the Sampler panel shows before a run.

A run still in warmup, or with fewer than ``MIN_DRAWS`` post-warmup draws a chain, gets none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from core.config.limits import MAX_DRAWS
from core.config.schema import COUPLED_HYPER_SAMPLER, FOURIER_PARAMETERISATIONS
from core.field.observations import slab_decouples
from core.samplers import SAMPLERS

__all__ = ["Advice", "advise", "coupling", "unadjusted_bias", "ESS_TARGET", "RHAT_LIMIT", "MIN_DRAWS"]

#: R-hat above this: the chains disagree (as ``run_summary.needs_attention``)
RHAT_LIMIT = 1.01
#: the bulk ESS a run should reach for its means and intervals to be trusted
ESS_TARGET = 400
#: post-warmup draws a chain needs before any advice is given
MIN_DRAWS = 50


@dataclass(frozen=True)
class Advice:
    """``text``: what is wrong, why it may be, what to try; ``changes``: config key -> value
    that applies it ({} when there is nothing to set); ``action``: the change in words."""

    text: str
    changes: dict = field(default_factory=dict)
    action: str = ""


def _fmt(rows, key) -> str:
    return ", ".join(f"{r.name} {getattr(r, key):.3g}" for r in rows)


def advise(summary, config, mask=None) -> list[Advice]:
    """The advice for a run (module docstring); ``config`` is the run's ``RunConfig`` (or None:
    only what needs no config), ``mask`` a function that reads the run's stored mask (None: not
    known; read only where a rule needs it)."""
    if not summary.rows or int(summary.progress.get("draws", 0)) < MIN_DRAWS:    # draws a chain
        return []
    sampler = config.sampler if config is not None else None
    out = []
    hyper = set(_sampled_hyper_names(config)) if config is not None else set()
    slow = [r for r in summary.rows if r.name in hyper and (_bad_rhat(r) or r.ess_bulk < ESS_TARGET)]
    conditional_advised = bool(slow) and sampler.preconditioner != "conditional" \
        and config.field.parameterisation in FOURIER_PARAMETERISATIONS
    if conditional_advised:
        out.append(Advice(
            f"the P(k) hyperparameters move slowly (R-hat {_fmt(slow, 'rhat')}; bulk ESS "
            f"{_fmt(slow, 'ess_bulk')}): with sampler.preconditioner = {sampler.preconditioner!r} the "
            "field's well-measured modes pin the spectrum. The \"conditional\" preconditioner centres "
            "each mode on its posterior given P(k), so that the spectrum moves freely",
            {"sampler.preconditioner": "conditional"}, "use the conditional preconditioner"))
    info = SAMPLERS.get(sampler.algorithm) if sampler is not None else None
    interweave_advised = bool(slow) and not conditional_advised and not sampler.interweave \
        and config.field.parameterisation == "whitened" and info is not None and info.adjusted
    if interweave_advised:
        out.append(Advice(
            f"the P(k) hyperparameters move slowly (R-hat {_fmt(slow, 'rhat')}; bulk ESS "
            f"{_fmt(slow, 'ess_bulk')}): where the data pin the field's modes, the spectrum moves "
            "only as far as they let it. Interweaving draws the spectrum again given the modes "
            "after each transition, which is fastest exactly there (measured: up to 1.6x the "
            "effective draws per gradient, each draw taking up to 1.5x as long)",
            {"sampler.interweave": True}, "turn interweaving on"))
    disagree = [r for r in summary.rows if _bad_rhat(r)]
    if disagree and not out and sampler is not None:
        warmup = min(2 * sampler.num_warmup, MAX_DRAWS)
        out.append(Advice(
            f"the chains disagree (R-hat {_fmt(disagree, 'rhat')}): the warmup of {sampler.num_warmup} "
            "steps ended before they reached the same region; a longer warmup may let them",
            {"sampler.num_warmup": warmup}, f"warm up for {warmup} steps"))
    few = [r for r in summary.rows if 0 < r.ess_bulk < ESS_TARGET]
    if few and not out and sampler is not None:
        worst = min(r.ess_bulk for r in few)
        samples = min(MAX_DRAWS, int(math.ceil(sampler.num_samples * 1.2 * ESS_TARGET / worst / 100.0)) * 100)
        if samples > sampler.num_samples:
            out.append(Advice(
                f"few effective draws (bulk ESS {_fmt(few, 'ess_bulk')}, below {ESS_TARGET}): the chains "
                f"agree but move slowly; about {samples} draws should give {ESS_TARGET}",
                {"sampler.num_samples": samples}, f"draw {samples} samples"))
    if summary.divergences > 0 and info is not None and info.target_accept:
        target = round(min(0.99, max(0.9, sampler.target_accept + 0.1)), 2)
        if target > sampler.target_accept:
            out.append(Advice(
                f"{summary.divergences} divergent transition(s) after warmup: the step is too long "
                "where the posterior curves sharply, so that part of it is missed; a higher target "
                "acceptance gives a smaller step",
                {"sampler.target_accept": target}, f"target acceptance {target}"))
    if hyper and sampler is not None:
        data = config.data
        slab = (mask is not None and data.mask is not None and sampler.preconditioner == "conditional"
                and config.field.parameterisation == "whitened"
                and slab_decouples(mask(), config.likelihood.kind, data.noise_map is None))
        bias = unadjusted_bias(sampler.algorithm, coupling(data.mask is not None, data.noise_map is not None,
                                                           config.likelihood.kind, slab), [r.name for r in slow])
        if bias is not None:       # first where P(k) is red (after the conditional preconditioner's,
            # without which MAMS is pinned too), else last
            out.insert(conditional_advised + interweave_advised if slow else len(out), bias)
    return out


def coupling(mask: bool, noise_map: bool, likelihood_kind: str, slab: bool = False) -> list[str]:
    """What in a field config couples the Fourier modes given P(k): its mask, its noise map, a
    likelihood other than Gaussian ([] for none). NaN voxels of the data, masked when the data
    load, are not in the config (File > New from data reads them). ``slab``: the mask misses
    whole planes and the conditional preconditioner is exact there
    (``core.field.observations.slab_decouples``), so it couples nothing for the sampler."""
    return [what for what, there in (("mask", mask and not slab), ("noise map", noise_map),
                                     (f"{likelihood_kind} likelihood", likelihood_kind != "gaussian"))
            if there]


def unadjusted_bias(algorithm: str, coupled_by: list[str], red: list[str] = ()) -> Advice | None:
    """The "unadjusted bias" rule (module docstring) for a sampler that samples P(k)
    hyperparameters with the field through data whose ``coupled_by`` (``coupling``) couple the
    modes; None where it does not apply (an adjusted sampler, or nothing couples them). ``red``:
    the hyperparameters whose R-hat or ESS a run found red (their chains can disagree there:
    band powers under a 25 % slab gave MCLMC R-hat 1.20-1.43, MAMS <= 1.004 with the same
    warmup). The summary gives it after a run, the Sampler panel before one."""
    info = SAMPLERS.get(algorithm)
    if info is None or info.adjusted or not coupled_by:
        return None
    name = info.label.split(' (')[0]
    seen = (f"; {', '.join(red)}: red here, as {name}'s chains can settle on different answers there "
            "(16 band powers under a 25 % slab: R-hat 1.20-1.43; MAMS 1.000-1.004 with the same warmup)"
            if red else ", which R-hat and ESS cannot show")
    return Advice(
        f"{name} has no accept step: with P(k) sampled and the data's "
        f"{' and '.join(coupled_by)} coupling the Fourier modes, each mode's share of its small bias "
        f"adds up in the hyperparameters{seen} (under a 25 % slab with the preconditioner's "
        "diagonal centre 0.24-0.37 of their posterior sd off the exact answer; MAMS, its "
        "Metropolis-adjusted form, 0.00-0.03, at about 1/6 the ESS per gradient)",
        {f"sampler.{key}": value for key, value in COUPLED_HYPER_SAMPLER.items()}, "use MAMS")


def _bad_rhat(row) -> bool:
    return math.isfinite(row.rhat) and row.rhat > RHAT_LIMIT


def _sampled_hyper_names(config) -> list[str]:
    """The sampled P(k) hyperparameters whose mixing the conditional preconditioner helps (a
    model file's likelihood has no per-mode width it could use: none there)."""
    if config.model.kind != "field" or config.likelihood.kind == "python":
        return []
    from core.field.power_spectrum import sampled_hyperparameter_names

    return sampled_hyperparameter_names(config.prior)
