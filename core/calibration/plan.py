"""The plan of a calibration: how many simulations, in which batches, with which seeds and draws.

A calibration runs ``simulations`` simulations in batches of ``batch_size`` (the last batch
is filled up with extra simulations, whose results are dropped). A batch is one compiled
program whose chains are the batch's simulations times the config's chains: chain
``s * chains + c`` is chain c of the batch's s-th simulation.

Seeds. Simulation i's truth and data come from the seed pair (config seed, i) alone, and
batch b's sampler (start, momenta, accept tests) from (config seed, b): so the same plan
gives the same ranks whether it ran straight through or was stopped and resumed at a batch
boundary. The plan (simulations, draws, batch size) is stored with the results and a
resume must use the same one.

Draws. Each simulation keeps M = ``draws`` post-warmup draws, ``draws / chains`` per chain,
thinned evenly from the config's ``num_samples`` (every ``thin``-th), so that they are
close to independent (ranks of autocorrelated draws are not uniform even for an exact
sampler: Talts et al. 2018, section 5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["PlanError", "CalibrationPlan", "make_plan", "plan_for_config", "quantity_names", "fixed_voxels",
           "check_simulate_with", "MAX_SIMULATIONS", "MAX_DRAWS", "BATCH_ELEMENTS"]

MAX_SIMULATIONS = 100_000
MAX_DRAWS = 10_000
#: grid cells times chains a default batch holds at most (its state is a few such tensors)
BATCH_ELEMENTS = 1 << 22


class PlanError(ValueError):
    """A calibration setting that cannot work; the message names the option."""


@dataclass(frozen=True)
class CalibrationPlan:
    simulations: int
    draws: int              # M per simulation, all chains together
    chains: int
    batch_size: int         # simulations per batch
    num_samples: int        # post-warmup steps per chain
    seed: int

    @property
    def draws_per_chain(self) -> int:
        return self.draws // self.chains

    @property
    def thin(self) -> int:
        return self.num_samples // self.draws_per_chain

    @property
    def batches(self) -> int:
        return math.ceil(self.simulations / self.batch_size)

    def batch(self, b: int) -> range:
        """The simulations batch ``b`` runs (the last one's extra ones included)."""
        return range(b * self.batch_size, (b + 1) * self.batch_size)

    def kept(self, b: int) -> int:
        """How many of batch ``b``'s simulations are part of the plan."""
        return max(0, min(self.batch_size, self.simulations - b * self.batch_size))

    def as_attrs(self) -> dict:
        return {"simulations": self.simulations, "draws_per_simulation": self.draws,
                "chains": self.chains, "batch_size": self.batch_size, "thin": self.thin,
                "num_samples": self.num_samples, "seed": self.seed}


def make_plan(*, simulations: int, draws: int | None, chains: int, num_samples: int, seed: int,
              n_cells: int = 1, batch_size: int | None = None) -> CalibrationPlan:
    """Check the settings and fill in the defaults: ``draws`` the largest multiple of
    ``chains`` up to 100 that ``num_samples`` can give, ``batch_size`` about a tenth of the
    simulations, within ``BATCH_ELEMENTS``."""
    if not 1 <= simulations <= MAX_SIMULATIONS:
        raise PlanError(f"--simulations: {simulations} must be between 1 and {MAX_SIMULATIONS}")
    if draws is None:
        per_chain = max(1, min(100 // chains, num_samples))
        draws = per_chain * chains
    if not 1 <= draws <= MAX_DRAWS:
        raise PlanError(f"--draws: {draws} must be between 1 and {MAX_DRAWS}")
    if draws % chains:
        raise PlanError(f"--draws: {draws} is not a multiple of sampler.chains = {chains} "
                        "(each chain gives the same number of draws)")
    if draws // chains > num_samples:
        raise PlanError(f"--draws: {draws} draws need {draws // chains} post-warmup draws per chain, "
                        f"more than sampler.num_samples = {num_samples}")
    if batch_size is None:
        fit = max(1, BATCH_ELEMENTS // max(1, n_cells * chains))
        batch_size = max(1, min(fit, math.ceil(simulations / 10)))
        batch_size = math.ceil(simulations / math.ceil(simulations / batch_size))   # even batches
    if not 1 <= batch_size <= simulations:
        raise PlanError(f"--batch: {batch_size} must be between 1 and --simulations ({simulations})")
    return CalibrationPlan(simulations=simulations, draws=draws, chains=chains, batch_size=batch_size,
                           num_samples=num_samples, seed=seed)


def fixed_voxels(shape, mask=None) -> list[tuple[int, int, int]]:
    """A few voxels whose values are test quantities: a corner, the centre, an off-centre
    voxel and, with a mask, the first masked voxel (where only the prior informs)."""
    n0, n1, n2 = shape
    out = [(0, 0, 0), (n0 // 2, n1 // 2, n2 // 2), (n0 // 4, (3 * n1) // 4, n2 // 2)]
    if mask is not None and not np.all(mask):
        out.append(tuple(int(i) for i in np.argwhere(~np.asarray(mask, bool))[0]))
    unique = []
    for v in out:
        if v not in unique:
            unique.append(v)
    return unique


def quantity_names(param_names, n_shells: int = 0, voxels=()) -> list[str]:
    """Every test quantity, in the order ranks are stored: the sampled parameters, ``loglik``,
    ``power_k00``... (one per k-shell), ``voxel_i_j_k``."""
    return ([*param_names, "loglik"] + [f"power_k{i:02d}" for i in range(n_shells)]
            + [f"voxel_{i}_{j}_{k}" for i, j, k in voxels])


def plan_for_config(config, *, simulations: int, draws: int | None = None,
                    batch_size: int | None = None) -> CalibrationPlan:
    """``make_plan`` for a run config: its chains, num_samples and seed; the grid's size from
    the data file's header (nothing is loaded; a file that cannot be read leaves the default
    batch size to the grid-free rule, and the model's loading reports the file)."""
    n_cells = 1
    if config.model.kind == "field":
        from core import io as loaders

        try:
            shape = loaders.array_info(config.data_path, config.data.key).shape
            n_cells = int(np.prod(shape)) if shape else 1
        except loaders.LoadError:
            pass
    s = config.sampler
    return make_plan(simulations=simulations, draws=draws, chains=s.chains, num_samples=s.num_samples,
                     seed=s.seed, n_cells=n_cells, batch_size=batch_size)


def _sampled_hyperparameters(config) -> list[str] | None:
    """The P(k) hyperparameters a field config samples, in the model's order; None where that
    is not known without building the model (another kind, a model file)."""
    if config.model.kind != "field" or config.model.file or getattr(config.likelihood, "kind", "") == "python":
        return None
    from core.field.power_spectrum import hyperparameter_priors

    return [name for name, prior in hyperparameter_priors(config.prior).items() if not prior.is_fixed]


def check_simulate_with(config, simulate, path: str) -> None:
    """Refuse (PlanError naming ``path``, the --simulate-with config) a simulating config that
    cannot calibrate ``config`` as far as the configs tell, before TensorFlow loads: another
    model kind, or other sampled P(k) hyperparameters (the engine checks the rest once the
    models are built). Nothing to check without one (``simulate`` None)."""
    if simulate is None:
        return
    where = f"{path} (--simulate-with)"
    if simulate.model.kind != config.model.kind:
        raise PlanError(f"{where}: simulates the {simulate.model.kind} model, the config samples the "
                        f"{config.model.kind} model")
    mine, theirs = _sampled_hyperparameters(config), _sampled_hyperparameters(simulate)
    if mine is not None and theirs is not None and mine != theirs:
        def sampled(names):
            return ", ".join(names) if names else "no parameter (every one is fixed)"
        raise PlanError(f"{where}: its prior samples {sampled(theirs)}, but the calibrated config's samples "
                        f"{sampled(mine)}; both must sample the same parameters (each simulation's true "
                        "values are compared with their posterior)")
