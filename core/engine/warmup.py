"""Warmup that cannot succeed, recognised early: ``WarmupWatch`` and its thresholds.

numpy only (it reads the statistics the engine copied out of a chunk); the engine
(``core.engine.engine``) feeds it every warmup chunk and ends the run with its message,
after storing the chunk that shows the problem.
"""

from __future__ import annotations

import numpy as np

__all__ = ["WarmupWatch", "STALL_CHUNKS", "STEP_COLLAPSE", "ACCEPT_FLOOR", "STALL_MIN_STEPS",
           "NAN_DOMINATED"]

STALL_CHUNKS = 3                # warmup chunks in a row with all-NaN log-density before giving up
STEP_COLLAPSE = 1e-8            # warmup ends when a step size falls below this x the initial,
ACCEPT_FLOOR = 1e-3             # or every chain's acceptance stays below this for STALL_CHUNKS
STALL_MIN_STEPS = 30            #   chunks and at least this many steps (see WarmupWatch)
NAN_DOMINATED = 0.9             # share of non-finite proposals that makes NaN the diagnosis


_CHECKS = ("check the priors (a prior amplitude or index far from the data's, a "
           "hyperparameter prior allowing impossible values), the data scale against the "
           "noise level (data.noise_sigma / noise_map in the data's units; a noise far "
           "below the data's scatter makes the posterior needle-thin), and the start "
           "(sampler.step_size, the data's NaN / masked voxels)")


class WarmupWatch:
    """Ends a warmup that cannot succeed with a diagnosis, instead of an endless run.

    Fed the statistics of each warmup chunk (``update``: name -> (chains, n) arrays of
    lp, acceptance_rate, step_size, energy_error), it returns a message when

    * the log-density was NaN or infinite at every step, or every proposal was (energy
      error not finite), for STALL_CHUNKS chunks in a row;
    * a chain's step size fell below STEP_COLLAPSE x the initial step size (dual
      averaging shrinks the step without bound when no proposal is ever accepted; with
      NUTS a tiny step makes each draw take the maximum 1023 leapfrog steps); the engine
      gives the initial step per chain as the larger of ``sampler.step_size`` and the step
      its initial search (``core.engine.adaptation.step_search``) found, so a search that had to go
      down that far is a collapse as well;
    * every chain's acceptance stayed below ACCEPT_FLOOR for STALL_CHUNKS chunks in a row
      and at least STALL_MIN_STEPS steps.

    When at least NAN_DOMINATED of the proposals seen had a non-finite log-density, the
    message says the density is NaN / infinite (a broken model or data) rather than that
    the posterior is too narrow. Messages name what to check: priors, data scale, start.
    """

    def __init__(self, initial_step_size):
        # a number, or one per chain (the engine: the larger of sampler.step_size and the step
        # its initial search found, so that a search gone down by STEP_COLLAPSE counts too)
        self.initial = np.asarray(initial_step_size, float)
        self.nan_chunks = 0
        self.stuck_chunks = 0
        self.stuck_steps = 0
        self.proposals = 0
        self.nonfinite = 0

    def update(self, stats: dict, first_step: int) -> str | None:
        lp = np.asarray(stats["lp"])
        accept = np.asarray(stats["acceptance_rate"])
        step = np.asarray(stats["step_size"])
        energy = np.asarray(stats["energy_error"])
        n = lp.shape[-1]
        if n == 0:
            return None
        bad = ~np.isfinite(energy)
        self.proposals += bad.size
        self.nonfinite += int(bad.sum())
        nan_share = self.nonfinite / max(self.proposals, 1)
        steps = f"steps {first_step}-{first_step + n - 1}"
        if not np.isfinite(lp).any() or bad.all():
            self.nan_chunks += 1
            if self.nan_chunks >= STALL_CHUNKS:
                return ("warmup stopped: the log-density was NaN or infinite at every step "
                        f"and every proposal of {STALL_CHUNKS} chunks in a row (up to {steps}); "
                        "the model or the data are broken: " + _CHECKS)
        else:
            self.nan_chunks = 0
        finite_step = np.where(np.isfinite(step), step, 0.0)
        initial = np.broadcast_to(self.initial.reshape(-1, 1) if self.initial.ndim else self.initial,
                                  finite_step.shape)
        relative = finite_step / initial
        if relative.min() < STEP_COLLAPSE:
            chain, index = np.unravel_index(int(np.argmin(relative)), finite_step.shape)
            where = (f"chain {int(chain)}'s step size fell to {finite_step[chain, index]:.3g} at step "
                     f"{first_step + int(index)}, below {STEP_COLLAPSE:g} x the initial "
                     f"{initial[chain, index]:g}")
            if nan_share >= NAN_DOMINATED:
                return (f"warmup stopped: the log-density was NaN or infinite at "
                        f"{100 * nan_share:.0f}% of the proposals, and {where} trying to avoid "
                        "them; the model or the data are broken: " + _CHECKS)
            return (f"warmup stopped: {where} ({100 * nan_share:.0f}% of the proposals had a "
                    "NaN or infinite log-density): the posterior is far narrower than the "
                    "sampler can move in: " + _CHECKS)
        if (accept < ACCEPT_FLOOR).all():
            self.stuck_chunks += 1
            self.stuck_steps += n
            if self.stuck_chunks >= STALL_CHUNKS and self.stuck_steps >= STALL_MIN_STEPS:
                cause = ("the log-density was NaN or infinite at most proposals"
                         if nan_share >= NAN_DOMINATED else "no proposal is accepted")
                return (f"warmup stopped: every chain's acceptance stayed below "
                        f"{ACCEPT_FLOOR:g} for {self.stuck_steps} steps ({self.stuck_chunks} "
                        f"chunks, up to {steps}); {cause}: " + _CHECKS)
        else:
            self.stuck_chunks = self.stuck_steps = 0
        return None


