"""MAMS's tuning of its step size eps and trajectory length L (BlackJAX's
``adjusted_mclmc_find_L_and_step_size`` with its defaults), in thirds of ``num_warmup``:

1. dual averaging of the step size (``dual_averaging.dual_averaging_update``: t0 = 10,
   gamma = 0.05, kappa = 0.75, towards ``sampler.target_accept``; the MAMS paper recommends
   0.9) with L = n eps_0 held and eps <= L / 1.1;
2. eps held while the variances of z are gathered; at the end eps = the dual average, scaled by
   clamp(1.3 sqrt(sum var) / L, 0, 2), the diagonal set (with ``adapt_mass_matrix``), and
   L = n eps;
3. dual averaging again with L = n eps kept, and at the end of warmup eps = the dual average,
   L = n eps.

n, the mean number of integration steps a trajectory, is the reference's
target_num_integration_steps = 2 (``core.samplers.MAMS_STEPS_PER_L``), and 8 where the model
samples parameters beside a field (P(k) hyperparameters: ``MAMS_HYPER_STEPS_PER_L``, chosen by
``Mams.settings``): a trajectory of 2 steps with a fresh velocity each moves a hyperparameter by
about its width given the field, and under a mask that is a fraction of its posterior width, so
it moved as a random walk (bench/hyper_efficiency.py slab2 at seed 1: R-hat 1.044, bulk ESS 42;
with 8 steps 1.002, 1391).

``MamsTuning.update`` runs inside the chunk after each step of the kernel
(``core.engine.samplers.mams``), ``at_boundary`` between chunks.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from core.engine.adaptation.dual_averaging import dual_averaging_update
from core.engine.adaptation.microcanonical_stages import StagedTuning, Stages, tuning_scalars, variances
from core.samplers import MAMS_STEPS_PER_L

__all__ = ["MamsTuning"]

MAMS_TUNING_FACTOR = 1.3
MAMS_AVG_FLOOR = 1.1


class MamsTuning(StagedTuning):
    """MAMS's staged tuning (module docstring); ``target_accept`` is the dual averaging's target,
    ``steps_per_L`` the mean number of integration steps a trajectory (n)."""

    def __init__(self, *args, target_accept: float, steps_per_L: float = MAMS_STEPS_PER_L, **kwargs):
        super().__init__(*args, **kwargs)
        self.target_accept = float(target_accept)
        self.steps_per_L = float(steps_per_L)

    @staticmethod
    def stage_points(w: int, diagonal: bool) -> Stages:
        b1, b2 = round(w / 3), round(2 * w / 3)
        return Stages(w, b1, b2, w)

    @staticmethod
    def _da_fresh(step):
        step = tf.convert_to_tensor(step, tf.float64)
        return {"log_step": tf.math.log(step), "log_avg": tf.zeros_like(step),
                "da_t": tf.ones_like(step), "avg_error": tf.zeros_like(step), "mu": tf.math.log(10.0 * step)}

    def fresh(self):
        """The tuning state at step 0."""
        step = tuning_scalars(self.chains, self.initial_step)
        return {"step_size": step, "L": self.steps_per_L * step, **self._da_fresh(step), **self.moments_fresh()}

    def update(self, tune, step_index, accept_prob, position, moved):
        """The tuning state after step ``step_index`` of the kernel, which ran with tune's step
        size and L: its acceptance probability, the state it ended in (z) and whether that is
        finite (``moved``, float64 0 / 1). In the compiled chunk."""
        st = self.stages
        step, L = tune["step_size"], tune["L"]

        def dual_average(fix_L):
            t = tune["da_t"]
            log_x, avg_error, log_avg = dual_averaging_update(t, tune["avg_error"], tune["log_step"], tune["log_avg"],
                                                              tune["mu"], accept_prob, self.target_accept)
            new_step = tf.clip_by_value(tf.exp(log_x), 1e-5, L / MAMS_AVG_FLOOR)
            new_L = L if fix_L else L * new_step / step
            return {**tune, "log_step": tf.math.log(new_step), "log_avg": log_avg, "da_t": t + 1.0,
                    "avg_error": avg_error, "step_size": new_step, "L": new_L}

        pass1 = step_index < st.b1
        pass2 = tf.logical_and(step_index >= st.b2, step_index < st.warmup)
        tune = tf.cond(pass1, lambda: dual_average(True), lambda: dict(tune))
        tune = tf.cond(pass2, lambda: dual_average(False), lambda: dict(tune))
        return self.with_stage2_moments(tune, step_index, position, moved * tune["step_size"])

    def at_boundary(self, step: int, tune: dict) -> dict:
        """The stage transitions (between chunks): stage 2's end and warmup's."""
        st = self.stages
        tune = dict(tune)
        if step == st.b2 and st.b1 > 0:
            eps = np.exp(np.asarray(tune["log_avg"]))
            L = np.asarray(tune["L"])
            if st.b2 - st.b1 >= 2:
                var = variances(tune)
                total = sum(v.reshape(self.chains, -1).sum(axis=1) for v in var)
                change = np.clip(MAMS_TUNING_FACTOR * np.sqrt(total) / L, 1e-3, 2.0)
                eps = eps * change
            eps = np.maximum(eps, 1e-5)
            step = tf.constant(eps, tf.float64)
            tune.update(step_size=step, L=self.steps_per_L * step, **self._da_fresh(step))
        elif step == st.warmup and st.warmup - st.b2 > 0:
            step = tf.constant(np.exp(np.asarray(tune["log_avg"])), tf.float64)
            tune.update(step_size=step, L=self.steps_per_L * step)
        return tune
