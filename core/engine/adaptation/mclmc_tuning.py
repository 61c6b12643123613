"""MCLMC's tuning of its step size eps and decoherence length L (BlackJAX's
``mclmc_find_L_and_step_size``), its three stages spread over the run's ``num_warmup`` steps in
the reference's proportions 0.1 : 0.1 (+ 0.1 / 3 with a diagonal) : 0.1:

1. step size from the energy error: with xi = dE^2 / (d * 5e-4) + 1e-8 (5e-4 the desired energy
   variance per dimension; 5e-5 with sampled P(k) hyperparameters under a likelihood that couples
   the modes, ``HYPER_ENERGY_VAR``) and weight w = exp(-(log xi / 9)^2 / 2), the running sums
   X <- r X + w xi / eps^6 and T <- r T + w (r = 149 / 151: about 150 effective steps) give
   eps = (X / T)^(-1/6), capped below 0.8 x the last step size whose step was undone
   (Var E ~ eps^6; the reference's ``handle_nans``);
2. as 1, and the step-size-weighted running mean and mean square of z give the variance of
   each coordinate; at the stage's end L = sqrt(sum of the variances). With
   ``adapt_mass_matrix`` the driver's diagonal takes the variances instead (its change of
   variables x = s z over this stage's window), L = sqrt(d) in z, and the step size is re-tuned
   (fresh sums) for a third as many steps;
3. the step size and L held, L <- 0.4 eps tau, with tau = (steps) / ESS the integrated
   autocorrelation time. The reference measures tau on every coordinate and averages; here a
   cheap proxy stands in for it: tau of ``N_PROJECTIONS`` random projections of the
   standardised z (Gaussian weights, one set per run), recorded each step (a few numbers per
   chain instead of every draw), ESS by ``core.store.diagnostics.ess_mean``. For independent
   coordinates the autocorrelation of such a projection is the weight-averaged one of the
   coordinates, so its tau estimates the mean tau the reference takes.
   Beyond the reference: stage 3 also records each chain's energy errors, and at its end
   every chain takes the step size that the energy errors of the chains that ran it stably
   (within 4x the target energy variance, nothing undone) measure for the target, pooled
   over them and no larger than the largest they ran, and their mean L; with none stable, the step
   sizes are shrunk (``MclmcTuning.checked_and_shared``). Only chains of one posterior share:
   a calibration batch's simulations each keep their own (``chains_per_posterior``).

The initial step size is ``sampler.step_size`` x sqrt(d), the initial L sqrt(d), the
reference's. ``MclmcTuning.update`` runs inside the chunk after each step of the kernel
(``core.engine.samplers.mclmc``), ``at_boundary`` between chunks.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from core.engine import placement
from core.engine.adaptation.microcanonical_stages import StagedTuning, Stages, tuning_scalars, variances

__all__ = ["DESIRED_ENERGY_VAR", "HYPER_ENERGY_VAR", "N_PROJECTIONS", "MclmcTuning"]

DESIRED_ENERGY_VAR = 5e-4          # energy error variance per dimension MCLMC's step size aims at ...
#: ... with sampled P(k) hyperparameters and modes the likelihood couples (``Mclmc.settings``):
#: an unadjusted sampler's variances are off by a share that falls with the step size, and a
#: hyperparameter coupled to many modes adds up that share over all of them (measured,
#: bench/hyper_efficiency.py slab2: 0.26 of its sd at 5e-4, 0.13 at 1e-4, at the same ESS;
#: without a mask the bias stays <= 0.05 sd at 5e-4 and 1e-4 costs 30-60 % of the ESS). With the
#: stage-3 step pooled over the chains (``pooled_step_size``), slab2 over seeds 1 / 42 / 43:
#: 1e-4 gave ESS 525-1007, R-hat up to 1.016, 0.32-0.49 sd off; 5e-5 ESS 662-1342, R-hat <=
#: 1.008, 0.24-0.37 sd off
HYPER_ENERGY_VAR = 5e-5
TRUST_IN_ESTIMATE = 1.5
NUM_EFFECTIVE_SAMPLES = 150        # memory of the step-size predictor
L_FACTOR = 0.4                     # L = L_FACTOR eps tau (stage 3)
N_PROJECTIONS = 4                  # random projections whose ESS stands in for every coordinate's
STABLE_ENERGY_FACTOR = 4.0         # stage 3: a chain whose energy variance is within this x the target is stable
CHI2_1_MEDIAN = 0.4549364231195724  # median of a chi-square with 1 degree of freedom


class MclmcTuning(StagedTuning):
    """MCLMC's staged tuning (module docstring); ``energy_var`` the energy error variance per
    dimension aimed at."""

    READ_ONLY_KEYS = ("proj_inv_sd",)     # set between chunks (end of stage 2), read in stage 3
    STEP_RECORDS = ("proj_buf", "energy_buf")

    def __init__(self, *args, energy_var: float = DESIRED_ENERGY_VAR, **kwargs):
        super().__init__(*args, **kwargs)
        self.energy_var = float(energy_var)

    def uses_moments(self) -> bool:
        return not self.diagonal          # with the diagonal the driver's window takes the variances

    @staticmethod
    def stage_points(w: int, diagonal: bool) -> Stages:
        if diagonal:
            b1, b2, b3 = round(0.3 * w), round(0.6 * w), round(0.7 * w)
        else:
            b1, b2 = round(w / 3), round(2 * w / 3)
            b3 = b2
        return Stages(w, b1, b2, b3)

    def fresh(self):
        """The tuning state at step 0."""
        return {"step_size": tuning_scalars(self.chains, self.initial_step),
                "L": tuning_scalars(self.chains, math.sqrt(self.dim)),
                "time": tuning_scalars(self.chains, 0.0),
                "x_average": tuning_scalars(self.chains, 0.0),
                "step_max": tuning_scalars(self.chains, np.inf),
                **self.moments_fresh(),
                "proj_inv_sd": [tf.ones(s, self.dtype) for s in self.part_shapes],
                "proj_buf": tf.zeros([self._stage3_steps(), self.chains, N_PROJECTIONS], tf.float64),
                **self._energy_watch_fresh()}

    def _stage3_steps(self) -> int:
        return max(self.stages.warmup - self.stages.b3, 1)

    def _energy_watch_fresh(self):
        return {"energy_buf": tf.zeros([self._stage3_steps(), self.chains], tf.float64)}

    def complete(self, tune: dict) -> dict:
        """A tuning state restored from a checkpoint of an older version, with the stage-3
        energy record it lacks (zeros: the stage's steps before the resume count as exact)."""
        return {**self._energy_watch_fresh(), **tune}

    def update(self, tune, step_index, energy, ok, position):
        """The tuning state after step ``step_index`` of the kernel, which ran with
        tune's step size and L: its energy change and ``ok`` (False where it was undone), the
        new ``position`` (z). In the compiled chunk."""
        st = self.stages
        step = tune["step_size"]

        def predict():
            # the reference's predictor (mclmc_adaptation.make_L_step_size_adaptation)
            step_max = tf.where(ok, tune["step_max"], 0.8 * step)
            xi = tf.square(energy) / (self.dim * self.energy_var) + 1e-8
            weight = tf.exp(-0.5 * tf.square(tf.math.log(xi) / (6.0 * TRUST_IN_ESTIMATE)))
            decay = (NUM_EFFECTIVE_SAMPLES - 1.0) / (NUM_EFFECTIVE_SAMPLES + 1.0)
            x_average = decay * tune["x_average"] + weight * (xi / tf.pow(step, 6.0))
            time = decay * tune["time"] + weight
            new_step = tf.minimum(tf.pow(x_average / time, -1.0 / 6.0), step_max)
            # no estimate yet (every weight underflowed): keep the step, capped
            new_step = tf.where((time > 0) & tf.math.is_finite(new_step), new_step, tf.minimum(step, step_max))
            return {**tune, "step_size": new_step, "step_max": step_max, "x_average": x_average, "time": time}

        tune = tf.cond(step_index < st.b3, predict, lambda: dict(tune))
        tune = self.with_stage2_moments(tune, step_index, position, tf.cast(ok, tf.float64) * tune["step_size"])
        in_stage3 = tf.logical_and(step_index >= st.b3, step_index < st.warmup)

        def record():
            # the same N_PROJECTIONS weight vectors at every step (a fixed seed), drawn where
            # they are used rather than held: (P, n) numbers per part, for 0.3 of warmup only
            pseed = tf.constant([7907, 613], tf.int32)
            row = 0.0
            for i, (xi, si) in enumerate(zip(position, tune["proj_inv_sd"])):
                n = math.prod(self.part_shapes[i])
                with placement.on_device_of(xi):       # a sharded field's part: where it is
                    w = tf.random.stateless_normal([N_PROJECTIONS, n], tf.random.experimental.stateless_fold_in(
                        pseed, i), dtype=self.dtype) * tf.reshape(si, [1, n])
                    # a product and a sum, not a matmul: a chain's projection must not depend on
                    # the batch (XLA's dot of one chain rounds unlike its dot of several)
                    projected = tf.reduce_sum(tf.reshape(xi, [self.chains, 1, n]) * w[None], axis=-1)
                row = row + projected
            row = tf.cast(row, tf.float64)
            buf = tf.tensor_scatter_nd_update(tune["proj_buf"], [[step_index - st.b3]], row[None])
            e = tf.where(ok, tf.cast(energy, tf.float64), tf.constant(np.nan, tf.float64))
            ebuf = tf.tensor_scatter_nd_update(tune["energy_buf"], [[step_index - st.b3]], e[None])
            return {**tune, "proj_buf": buf, "energy_buf": ebuf}

        if "proj_inv_sd" in tune:      # not in stage 2's chunks, which end before stage 3
            tune = tf.cond(in_stage3, record, lambda: dict(tune))
        return tune

    def at_boundary(self, step: int, tune: dict) -> dict:
        """The stage transitions that need a whole stage (between chunks, after the driver's
        own mass-matrix change at ``mass_window``'s end)."""
        st = self.stages
        tune = dict(tune)
        if step == st.b2 and st.b2 - st.b1 >= 2:
            if self.mass_window() is not None:
                # the driver's diagonal took the variances: z has unit variance, L = sqrt(d)
                tune["L"] = tuning_scalars(self.chains, math.sqrt(self.dim))
                for key, value in (("time", 0.0), ("x_average", 0.0), ("step_max", np.inf)):
                    tune[key] = tuning_scalars(self.chains, value)
            else:
                var = variances(tune)
                total = sum(v.reshape(self.chains, -1).sum(axis=1) for v in var)
                tune["L"] = tf.constant(np.where(total > 0, np.sqrt(total), np.asarray(tune["L"])), tf.float64)
                pooled = [v.mean(axis=0) for v in var]
                tune["proj_inv_sd"] = [tf.constant(np.where(p > 0, 1.0 / np.sqrt(np.where(p > 0, p, 1.0)), 1.0),
                                                   self.dtype) for p in pooled]
        if step == st.warmup and st.warmup - st.b3 >= 2:
            from core.store.diagnostics import ess_mean

            buf = np.asarray(tune["proj_buf"])        # (n3, C, P)
            n3 = buf.shape[0]
            L = np.asarray(tune["L"]).copy()
            eps = np.asarray(tune["step_size"])
            for c in range(self.chains):
                ess = np.asarray(ess_mean(buf[:, c, :][None]), dtype=float)
                tau = n3 / ess
                finite = np.isfinite(tau) & (ess > 0)
                if finite.any():
                    L[c] = L_FACTOR * eps[c] * float(np.mean(tau[finite]))
            tune["step_size"], tune["L"] = (tf.constant(v, tf.float64) for v in self.shared_by_posterior(
                eps, L, np.asarray(tune["energy_buf"])))
        return tune

    def shared_by_posterior(self, eps, L, energy):
        """``checked_and_shared`` for each group of ``chains_per_posterior`` consecutive chains:
        (eps, L) arrays (C,)."""
        k = self.chains_per_posterior
        shared = [self.checked_and_shared(eps[i:i + k], L[i:i + k], energy[:, i:i + k])
                  for i in range(0, self.chains, k)]
        return tuple(np.concatenate(v) for v in zip(*shared))

    def checked_and_shared(self, eps, L, energy):
        """The sampling phase's step size and L of chains that sample one posterior, shared by
        them, from stage 3's (``eps``, ``L``: (k,)) and its energy errors (``energy``: (steps,
        k), NaN where a step was undone).

        A step size can come out of the short re-tune after the diagonal past the integrator's
        stability edge, where the energy error variance jumps by orders of magnitude (measured
        on the field demo: eps 168.7 gave 1.8e-2 per dimension, eps 160.6 1.6e-4, the target
        5e-4), and the reference keeps it for the whole run: that chain's variances came out
        10-20 % high and its lp 2 sd from the other chain's. A chain is stable here when none
        of its stage-3 steps was undone and its energy variance per dimension is at most
        ``STABLE_ENERGY_FACTOR`` x the target; every chain takes the step size the stable ones'
        energy errors measured for the target (``pooled_step_size``: no larger than the
        largest a stable chain ran) and their mean L. With none
        stable, each step size is scaled by (target / robust variance)^(1/6) (the predictor's
        Var ~ eps^6; the variance from the median of the squared errors, since past the edge
        a few steps' errors dominate their mean), and by 0.8 more where a step was undone,
        and the smallest is taken. One step size for all: an unadjusted sampler's bias depends
        on it, and R-hat should compare the chains' mixing, not their biases."""
        eps = np.asarray(eps, dtype=float).copy()
        L = np.asarray(L, dtype=float)
        e2 = np.square(np.asarray(energy, dtype=float))
        done = ~np.isnan(e2)
        undone = ~done.all(axis=0)
        n_done = done.sum(axis=0)
        var = np.where(n_done > 0, np.where(done, e2, 0.0).sum(axis=0) / np.maximum(n_done, 1), np.inf) / self.dim
        stable = ~undone & (var <= STABLE_ENERGY_FACTOR * self.energy_var)
        if stable.any():
            shared_eps, chosen = self.pooled_step_size(eps[stable], var[stable]), stable
        else:
            with np.errstate(invalid="ignore", divide="ignore"):
                robust = np.nanmedian(e2, axis=0) / CHI2_1_MEDIAN / self.dim
                factor = np.where(np.isfinite(robust) & (robust > 0),
                                  np.minimum(1.0, (self.energy_var / robust) ** (1.0 / 6.0)), 0.5)
            eps = eps * factor * np.where(undone, 0.8, 1.0)
            shared_eps, chosen = eps.min(), np.ones(eps.shape, bool)
        finite_L = L[chosen & np.isfinite(L)]
        shared_L = float(finite_L.mean()) if finite_L.size else float(np.mean(L))
        return np.full(eps.shape, shared_eps), np.full(eps.shape, shared_L)

    def pooled_step_size(self, eps, var):
        """The step size the stable chains' stage 3 measured for the target energy variance:
        each chain's variance per dimension ``var`` at its step size ``eps`` brought to a common
        step by Var ~ eps^6 (the predictor's law) and averaged over the chains, so that a chain
        whose short re-tune stopped far below the target (measured: slab2, seed 1, eps 79 at
        0.009 x the target beside eps 172 at 1.2 x) no longer sets everyone's step; never above
        the largest step size a stable chain ran (past it the stability edge may lie)."""
        top = float(eps.max())
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            at_top = var * (top / eps) ** 6
        at_top = at_top[np.isfinite(at_top)]     # a chain at a vanishing step tells nothing at the top
        if not at_top.size or not float(np.mean(at_top)) > 0.0:
            return top
        at_top = float(np.mean(at_top))
        return min(top, top * (self.energy_var / at_top) ** (1.0 / 6.0))
