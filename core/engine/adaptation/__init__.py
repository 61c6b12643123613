"""Adaptation: functions from a sampler's statistics to its parameters, apart from the kernels and
the driver that runs them (as BlackJAX's ``adaptation/``).

* ``welford``: running means and squared deviations of the state, each chain's, pooled over the
  chains of each posterior (a run's chains; each simulation's chains in a calibration batch)
  when the metric is set;
* ``mass_matrix``: the metric from those sums (Stan's regularisation; diagonal, or dense for the
  sampled hyperparameters), with the parts a preconditioner already scales held at 1;
* ``dual_averaging``: the step-size adaptation of HMC and NUTS, a state started from a step
  size and one update from each step's acceptance (``dual_averaging_step``: TensorFlow
  Probability's ``DualAveragingStepSizeAdaptation`` arithmetic), and Stan's form of the same
  rule for MAMS (``dual_averaging_update``);
* ``mclmc_tuning``, ``mams_tuning``: the staged tunings of MCLMC's step size and L and of
  MAMS's, their per-step updates from the kernel's statistics and their stage transitions
  between chunks, on what they share (``microcanonical_stages``: the stages, the chunk
  stops, the moments of z);
* ``step_search``: the initial step size, searched at a state.
"""

from core.engine.adaptation.dual_averaging import (
    DualAveragingState,
    dual_averaging_step,
    dual_averaging_update,
    fresh_dual_averaging,
)
from core.engine.adaptation.mass_matrix import adapted_scale
from core.engine.adaptation.welford import Welford, pooled, welford_fresh, welford_update

__all__ = ["Welford", "pooled", "welford_fresh", "welford_update", "adapted_scale", "fresh_dual_averaging",
           "DualAveragingState", "dual_averaging_step", "dual_averaging_update"]
