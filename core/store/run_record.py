"""What a run records, defined once: the per-step sample statistics (names and dtypes), the
progress counters and the statuses a run store records.

numpy only. The run store (``core.store.run_store``) writes and checks these; the engine's
messages (``core.run.messages``, which re-exports them) carry them to the clients under the
same names. Use: ``from core.store.run_record import STAT_NAMES, new_progress``.
"""

from typing import TypedDict

import numpy as np

__all__ = ["STAT_NAMES", "STAT_DTYPES", "zero_stats", "PROGRESS_KEYS", "Progress", "new_progress",
           "STORE_STATUSES", "LIVE_STATUSES"]

#: the per-step sample statistics, in the store's order (chunk events, the run store,
#: the GUI's RunState); each is (chains, n). For every algorithm: ``n_steps`` the gradient
#: evaluations the step cost (HMC / NUTS: leapfrog steps; MCLMC: 2, its McLachlan step reusing
#: the last gradient; MAMS: 2 per integration step); ``energy_error`` the change of the
#: total energy over the step (MCLMC: kinetic change - log p(x') + log p(x), NaN for a step
#: undone because it was not finite; its square over the dimension is what MCLMC's warmup tunes to 5e-4);
#: ``acceptance_rate`` the Metropolis acceptance probability min(1, exp(-energy_error)) (HMC,
#: NUTS, MAMS), and for unadjusted MCLMC, which accepts every step, 1 for a step taken and 0
#: for a step undone because its state or energy was not finite; ``diverging`` a non-finite
#: step or an energy error beyond ``core.engine.engine.DIVERGENCE_THRESHOLD`` (MCLMC: in
#: absolute value); ``step_size`` the step the transition used (MCLMC / MAMS: the length of
#: one integration step of the unit velocity, over all coordinates together);
#: ``trajectory_length`` HMC / NUTS / MAMS: step size x integration steps of the trajectory,
#: MCLMC: L, the velocity's decoherence length.
STAT_NAMES = ("lp", "acceptance_rate", "step_size", "energy_error", "diverging", "n_steps",
              "grad_norm", "trajectory_length")
#: dtype of each statistic that is not a float (floats are the model's dtype on the
#: wire and float64 in the store)
STAT_DTYPES = {"diverging": np.dtype(np.bool_), "n_steps": np.dtype(np.int32)}


def zero_stats(chains: int, n: int, float_dtype=np.float64) -> dict[str, np.ndarray]:
    """Every statistic of ``n`` steps of ``chains`` chains, all zero (no divergence), each of
    (chains, n) in its dtype (``STAT_DTYPES``, else ``float_dtype``): the statistics of a chunk
    written where they do not matter (tests and benchmarks that fill a store or an event)."""
    return {name: np.zeros((chains, n), STAT_DTYPES.get(name, float_dtype)) for name in STAT_NAMES}

#: a run's progress counters (per chain): warmup draws, post-warmup draws, kept field
#: draws, chunks published
PROGRESS_KEYS = ("warmup_draws", "draws", "field_draws", "chunks")

#: the statuses a run store records
STORE_STATUSES = ("created", "running", "paused", "stopped", "finished", "failed")
#: store statuses of a run whose writer may still be appending
LIVE_STATUSES = ("created", "running", "paused")


class Progress(TypedDict):
    warmup_draws: int
    draws: int
    field_draws: int
    chunks: int


def new_progress() -> Progress:
    """The progress of a run that has drawn nothing."""
    return Progress(warmup_draws=0, draws=0, field_draws=0, chunks=0)
