"""Microcanonical samplers in TensorFlow: MCLMC (unadjusted) and MAMS (Metropolis-adjusted).

Both move the state x with a unit velocity u (|u| = 1 over all the state's parts of a chain
together, d coordinates) under isokinetic ("energy sampling") dynamics, integrated with the
McLachlan minimal-norm splitting B(b1) A(1/2) B(1 - 2 b1) A(1/2) B(b1), b1 = 0.19318...:

    A(a):  x <- x + a eps u
    B(b):  with g = grad log p(x), e = g / |g|, delta = b eps |g| / (d - 1), zeta = exp(-delta),
           u <- normalise(e (1 - zeta) (1 + zeta + (u.e) (1 - zeta)) + 2 zeta u)
           kinetic energy change += (delta - log 2 + log(s+ (1 - zeta^2) + 2 zeta^2)) (d - 1),
           s+ = |u + e|^2 / 2 (u before the update)

(Steeg & Galstyan's ESH update, as BlackJAX's ``esh_dynamics_momentum_update_one_step``). One
step costs two gradient evaluations: the gradient at the step's start is the last one of the
step before. The energy error of a step is kinetic change - log p(x') + log p(x).

MCLMC (Robnik et al. 2023; BlackJAX ``mcmc/mclmc.py``): each step is a half partial refresh of
the velocity, one integrator step, a half partial refresh,
    u <- normalise(u + nu z),  z ~ N(0, I),  nu = sqrt((exp(eps / L) - 1) / d)
(BlackJAX's ``partially_refresh_momentum`` with step eps / 2: the velocity decoheres over a
length L; the older c1 = exp(-eps / L) form is the same to first order). Nothing is accepted or
rejected; a step whose state, velocity, log-density or energy is not finite is undone (the old
state kept, a fresh unit velocity drawn, energy error 0), and in warmup the step size is capped
at 0.8 x the one that failed (the reference's ``handle_nans``).

MCLMC warmup (BlackJAX's ``mclmc_find_L_and_step_size``, its three stages spread over the run's
``num_warmup`` steps in the reference's proportions 0.1 : 0.1 (+ 0.1 / 3 with a diagonal) : 0.1):

1. step size from the energy error: with xi = dE^2 / (d * 5e-4) + 1e-8 (5e-4 the desired energy
   variance per dimension; 1e-4 with sampled P(k) hyperparameters under a likelihood that couples
   the modes, ``HYPER_ENERGY_VAR``) and weight w = exp(-(log xi / 9)^2 / 2), the running sums
   X <- r X + w xi / eps^6 and T <- r T + w (r = 149 / 151: about 150 effective steps) give
   eps = (X / T)^(-1/6), capped below the last step size that failed (Var E ~ eps^6);
2. as 1, and the step-size-weighted running mean and mean square of z give the variance of
   each coordinate; at the stage's end L = sqrt(sum of the variances). With
   ``adapt_mass_matrix`` the engine's diagonal takes the variances instead (its change of
   variables x = s z over this stage's window, ``core.engine.engine``), L = sqrt(d) in z, and
   the step size is re-tuned (fresh sums) for a third as many steps;
3. the step size and L held, L <- 0.4 eps tau, with tau = (steps) / ESS the integrated
   autocorrelation time. The reference measures tau on every coordinate and averages; here a
   cheap proxy stands in for it: tau of ``N_PROJECTIONS`` random projections of the
   standardised z (Gaussian weights, one set per run), recorded each step (a few numbers per
   chain instead of every draw), ESS by ``core.store.diagnostics.ess_mean``. For independent
   coordinates the autocorrelation of such a projection is the weight-averaged one of the
   coordinates, so its tau estimates the mean tau the reference takes.
   Beyond the reference: stage 3 also records each chain's energy errors, and at its end
   every chain takes the smallest step size among the chains that ran it stably (within 4x
   the target energy variance, nothing undone) and their mean L; with none stable, the step
   sizes are shrunk (``MclmcSampler.checked_and_shared``). Only chains of one posterior share:
   a calibration batch's simulations each keep their own (``chains_per_posterior``).

MAMS (Robnik et al. 2025; BlackJAX ``adjusted_mclmc_dynamic.py`` with its
``make_random_trajectory_length_fn(True)`` and ``adjusted_mclmc_find_L_and_step_size``'s
defaults): each step draws a fresh unit velocity, integrates n steps (no refresh inside: the
reference's L_proposal_factor = inf), n = max(1, ceil(U rescale(L / eps))) with U ~ U(0, 1) so
that E[n] = L / eps (the trajectory-length jitter; one U per step for all chains, so that the
vectorised chains integrate together), and accepts with probability min(1, exp(-energy error)).
It costs 2 n gradient evaluations. Warmup, in thirds of ``num_warmup``: dual averaging of the
step size (Hoffman & Gelman, t0 = 10, gamma = 0.05, kappa = 0.75, as BlackJAX's, towards
``sampler.target_accept``; the MAMS paper recommends 0.9) with L = 2 eps_0 held and eps <= L / 1.1;
then eps held while the variances of z are gathered; at the end eps = the dual average, scaled
by clamp(1.3 sqrt(sum var) / L, 0, 2), the diagonal set (with ``adapt_mass_matrix``), and L =
2 eps; then dual averaging again with L = 2 eps kept (the reference's
target_num_integration_steps = 2), and at the end of warmup eps = the dual average, L = 2 eps.

Everything is vectorised over chains (leading axis C of every part): each chain has its own
step size and L during warmup (MCLMC's chains of one posterior share them for sampling). The
tuning state is a dict of tensors (lists of tensors per state part) that the engine passes
into and out of each compiled chunk and checkpoints as it is; the stage
transitions that need a whole stage's figures (L, the ESS, the dual average's end) run
between chunks (``at_boundary``), at steps where the engine ends a chunk (``stops``).
Its grid-sized arrays go to the device only in the chunks that use them (``chunk_keys``, issue
#13): stage 3's projection scales as a read-only input (not returned, so not copied), and the
moments of z (two float64 arrays a chain) not at all where unused (MCLMC with a diagonal), and
on large runs only in stage 2, whose chunks then have a program of their own
(``core.run.engine_limits.stage2_apart``); the engine keeps the rest on the host and
``one_step`` skips what its chunk was not given.
The initial step size is ``sampler.step_size`` x sqrt(d): the config's step size is a move
per coordinate, as for HMC (the unit velocity spreads eps over d coordinates); the initial L
is sqrt(d), the reference's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from core.engine.adaptation.dual_averaging import dual_averaging_update
from core.engine.devices import memory_kind

__all__ = ["B1", "DESIRED_ENERGY_VAR", "HYPER_ENERGY_VAR", "N_PROJECTIONS", "MclmcSampler", "MamsSampler",
           "chain_dot", "n_dims", "unit_velocity", "partial_refresh", "esh_velocity_update",
           "isokinetic_mclachlan", "mclmc_transition", "mams_trajectory_steps"]

B1 = 0.1931833275037836            # McLachlan's minimal-norm coefficient
DESIRED_ENERGY_VAR = 5e-4          # energy error variance per dimension MCLMC's step size aims at ...
#: ... with sampled P(k) hyperparameters and modes the likelihood couples (``Mclmc.settings``):
#: an unadjusted sampler's variances are off by a share that falls with the step size, and a
#: hyperparameter coupled to many modes adds up that share over all of them (measured,
#: bench/hyper_efficiency.py slab2: 0.26 of its sd at 5e-4, 0.13 at 1e-4, at the same ESS;
#: without a mask the bias stays <= 0.05 sd at 5e-4 and 1e-4 costs 30-60 % of the ESS)
HYPER_ENERGY_VAR = 1e-4
TRUST_IN_ESTIMATE = 1.5
NUM_EFFECTIVE_SAMPLES = 150        # memory of the step-size predictor
L_FACTOR = 0.4                     # L = L_FACTOR eps tau (stage 3)
N_PROJECTIONS = 4                  # random projections whose ESS stands in for every coordinate's
STABLE_ENERGY_FACTOR = 4.0         # stage 3: a chain whose energy variance is within this x the target is stable
CHI2_1_MEDIAN = 0.4549364231195724  # median of a chi-square with 1 degree of freedom
MAMS_STEPS_PER_L = 2.0             # the reference's target_num_integration_steps
MAMS_TUNING_FACTOR = 1.3
MAMS_AVG_FLOOR = 1.1
_NORM_TOL = 1e-13


# ----------------------------------------------------------------------------- the dynamics

def _per_chain(v, part):
    """(C,) -> (C, 1, ..., 1) against ``part``."""
    return tf.reshape(tf.cast(v, part.dtype), [-1] + [1] * (len(part.shape) - 1))


def chain_dot(a, b):
    """Per-chain inner product of two lists of parts: (C,)."""
    return tf.add_n([tf.reduce_sum(tf.reshape(x * y, [tf.shape(x)[0], -1]), axis=1) for x, y in zip(a, b)])


def n_dims(parts) -> int:
    """Coordinates per chain of a list of (C, ...) parts."""
    return int(sum(math.prod(p.shape[1:]) for p in parts))


def _normalise(parts, tol=_NORM_TOL):
    norm = tf.sqrt(chain_dot(parts, parts))
    safe = tf.where(norm > tol, norm, tf.ones_like(norm))
    return [p / _per_chain(safe, p) for p in parts], norm


def unit_velocity(noise):
    """Unit vectors (per chain, over all parts) from standard normal ``noise`` parts."""
    return _normalise(noise)[0]


def partial_refresh(u, noise, step, L, dim: int):
    """u <- normalise(u + nu z), nu = sqrt((exp(2 step / L) - 1) / d); unchanged where L is
    infinite (BlackJAX ``partially_refresh_momentum``; MCLMC calls it with step = eps / 2)."""
    nu = tf.sqrt((tf.exp(2.0 * step / L) - 1.0) / dim)
    fresh = _normalise([ui + _per_chain(nu, ui) * zi for ui, zi in zip(u, noise)])[0]
    keep = tf.math.is_inf(L)
    return [tf.where(_per_chain(keep, ui) > 0, ui, fi) for ui, fi in zip(u, fresh)]


def esh_velocity_update(u, g, step, dim: int):
    """One B(step) update of the unit velocity under gradient ``g`` (module docstring):
    (new u, kinetic energy change (C,))."""
    e, g_norm = _normalise(g)
    ue = chain_dot(u, e)
    delta = step * tf.cast(g_norm, step.dtype) / (dim - 1)
    zeta = tf.exp(-delta)
    zc = tf.cast(zeta, u[0].dtype)
    a = (1 - zc) * (1 + zc + tf.cast(ue, zc.dtype) * (1 - zc))
    raw = [ei * _per_chain(a, ei) + 2.0 * _per_chain(zc, ui) * ui for ui, ei in zip(u, e)]
    new_u = _normalise(raw)[0]
    # |u| = |e| = 1, so s+ = |u + e|^2 / 2 = 1 + u.e: from the projection already taken, not
    # from two more passes over the grid (BlackJAX's form, log(1 + u.e + (1 - u.e) zeta^2))
    ue = tf.cast(ue, zeta.dtype)
    kinetic = (delta - math.log(2.0) + tf.math.log(1.0 + ue + (1.0 - ue) * zeta * zeta)) * (dim - 1)
    return new_u, kinetic


def isokinetic_mclachlan(value_and_grad, x, u, g, step, dim: int):
    """One McLachlan step of the isokinetic dynamics from (x, u) with gradient g at x:
    (x', u', log p(x'), g', aux', kinetic energy change). ``step`` (C,) in the tuning dtype;
    ``value_and_grad(x)`` -> (log p, gradient parts, aux parts), aux' those at x'."""
    u, k1 = esh_velocity_update(u, g, step * B1, dim)
    half = [_per_chain(0.5 * step, xi) for xi in x]
    x = [xi + hi * ui for xi, hi, ui in zip(x, half, u)]
    lp, g, _ = value_and_grad(x)
    u, k2 = esh_velocity_update(u, g, step * (1.0 - 2.0 * B1), dim)
    x = [xi + hi * ui for xi, hi, ui in zip(x, half, u)]
    lp, g, aux = value_and_grad(x)
    u, k3 = esh_velocity_update(u, g, step * B1, dim)
    return x, u, lp, g, aux, k1 + k2 + k3


def _all_finite(parts):
    return tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(tf.reshape(p, [tf.shape(p)[0], -1])), axis=1)
                                   for p in parts]), axis=0)


def _select(ok, new, old):
    return [tf.where(_per_chain(ok, n) > 0, n, o) for n, o in zip(new, old)]


def mclmc_transition(value_and_grad, x, u, lp, g, step, L, noise_1, noise_2, aux=()):
    """One MCLMC step with its noise given (standard normal parts): refresh(eps / 2),
    McLachlan step, refresh(eps / 2), undone when anything is not finite.

    Returns x, u, lp, g, aux, energy change (C,, tuning dtype), ok (C,) bool: False where the
    step was undone (old x, lp, g, aux; a fresh unit velocity from ``noise_2``, whose refresh
    of the discarded velocity is discarded with it, so that no third grid of noise is drawn
    for a rare event; energy change 0). ``aux``: what ``value_and_grad`` computes beside the
    gradient at x (the engine's field: the density computes it anyway), for the new x."""
    dim = n_dims(x)
    u1 = partial_refresh(u, noise_1, 0.5 * step, L, dim)
    x2, u2, lp2, g2, aux2, kinetic = isokinetic_mclachlan(value_and_grad, x, u1, g, step, dim)
    u2 = partial_refresh(u2, noise_2, 0.5 * step, L, dim)
    energy = kinetic - tf.cast(lp2, kinetic.dtype) + tf.cast(lp, kinetic.dtype)
    ok = (_all_finite(x2) & _all_finite(u2) & tf.math.is_finite(lp2) & tf.math.is_finite(kinetic)
          & tf.math.is_finite(energy))
    x_out = _select(ok, x2, x)
    u_out = _select(ok, u2, unit_velocity(noise_2))
    g_out = _select(ok, g2, g)
    aux_out = _select(ok, aux2, aux)
    lp_out = tf.where(ok, lp2, lp)
    return x_out, u_out, lp_out, g_out, aux_out, tf.where(ok, energy, tf.zeros_like(energy)), ok


def _rescale(mu):
    """s such that round(U(0, 1) s + 0.5) has mean mu (BlackJAX ``adjusted_mclmc.rescale``)."""
    k = tf.floor(2.0 * mu - 1.0)
    return k + k * (mu - 0.5 * (k + 1.0)) / (k + 1.0 - mu)


def mams_trajectory_steps(uniform, avg):
    """The reference's random trajectory length: max(1, ceil(U rescale(avg))), int32."""
    return tf.cast(tf.maximum(tf.math.ceil(uniform * _rescale(avg)), 1.0), tf.int32)


#: the counter-based generator of the velocity noise in the compiled chunks on a CPU: Threefry,
#: which XLA generates at least 4x faster there than the default (Philox; bench/gradient_cost.py's
#: ``normal`` line); it exists only under XLA, so an eager draw (``fresh``) keeps the default
CHUNK_RNG = "threefry"


def chunk_rng() -> str:
    """The generator of the chunks' velocity noise: CHUNK_RNG where the engine computes on a CPU
    (``core.engine.devices.memory_kind``), TensorFlow's default on a GPU (no GPU has measured
    either generator yet)."""
    return CHUNK_RNG if memory_kind() == "cpu" else "auto_select"


def _normal_parts(seed, like, alg: str = "auto_select"):
    seeds = tf.random.experimental.stateless_split(seed, len(like))
    return [tf.random.stateless_normal(tf.shape(p), seeds[i], dtype=p.dtype, alg=alg) for i, p in enumerate(like)]


def _value_and_grad(target, has_aux: bool = False):
    """x -> (log p, gradient parts, aux parts) of ``target(*x)``; with ``has_aux`` the target
    returns (log p, aux parts), else log p alone (aux: [])."""
    def f(x):
        if has_aux:
            (lp, aux), g = tfp.math.value_and_gradient(lambda *q: target(*q), list(x), has_aux=True)
            return lp, list(g), list(aux)
        lp, g = tfp.math.value_and_gradient(lambda *q: target(*q), list(x))
        return lp, list(g), []
    return f


# ----------------------------------------------------------------------------- stages

@dataclass(frozen=True)
class _Stages:
    warmup: int
    b1: int       # end of stage 1
    b2: int       # end of stage 2 (variances gathered over [b1, b2))
    b3: int       # end of the step-size tuning (MCLMC: after the re-tune with a diagonal)


def _tuning_scalars(chains, value):
    return tf.fill([chains], tf.constant(value, tf.float64))


def _moment_update(tune, z, weight):
    """Step-size-weighted running mean of z and z^2 per chain (BlackJAX's
    ``incremental_value_update``): tune's mom_w, mom_x, mom_xx."""
    w_old = tune["mom_w"]
    w_new = w_old + weight
    safe = tf.where(w_new > 0, w_new, tf.ones_like(w_new))
    mx, mxx = [], []
    for zi, ax, axx in zip(z, tune["mom_x"], tune["mom_xx"]):
        z64 = tf.cast(zi, tf.float64)
        wo, wn, wt = _per_chain(w_old, z64), _per_chain(safe, z64), _per_chain(weight, z64)
        mx.append((wo * ax + wt * z64) / wn)
        mxx.append((wo * axx + wt * z64 * z64) / wn)
    return {**tune, "mom_w": w_new, "mom_x": mx, "mom_xx": mxx}


def _variances(tune):
    """Per-chain variances of z from the weighted moments: list of (C, ...) float64 arrays."""
    return [np.maximum(np.asarray(b) - np.asarray(a) ** 2, 0.0) for a, b in zip(tune["mom_x"], tune["mom_xx"])]


class _Microcanonical:
    """What MCLMC and MAMS share: the engine's interface (``fresh``, ``one_step``,
    ``at_boundary``, ``stops``, ``mass_window``)."""

    def __init__(self, target, parts_like, chains: int, dtype, num_warmup: int, diagonal: bool,
                 initial_step_per_coordinate: float, divergence_threshold: float = 1000.0,
                 chains_per_posterior: int | None = None, has_aux: bool = False):
        # ``has_aux``: ``target`` returns (log p, aux parts) and ``one_step`` carries the aux
        # of the current state (the engine's field, which the density computes anyway)
        self.target = target
        self.value_and_grad = _value_and_grad(target, has_aux)
        # consecutive chains that sample one posterior (None: all; calibration's batch: each
        # simulation's chains), which MCLMC's sampling step size is shared by
        self.chains_per_posterior = int(chains_per_posterior or chains)
        if chains % self.chains_per_posterior:
            raise ValueError(f"{chains} chains are not groups of {self.chains_per_posterior}")
        self.divergence_threshold = float(divergence_threshold)
        self.chains = chains
        self.dtype = dtype
        self.dim = n_dims(parts_like)
        if self.dim < 2:
            raise ValueError("the microcanonical samplers need at least 2 coordinates")
        self.part_shapes = [tuple(p.shape[1:]) for p in parts_like]
        self.num_warmup = int(num_warmup)
        self.diagonal = bool(diagonal)
        self.initial_step = float(initial_step_per_coordinate) * math.sqrt(self.dim)
        self.stages = self.stage_points(self.num_warmup, self.diagonal)

    @classmethod
    def plan(cls, num_warmup: int, diagonal: bool):
        """(the diagonal-mass window (first step, end) or None, the steps where a chunk must
        end so that ``at_boundary`` runs there)."""
        st = cls.stage_points(int(num_warmup), bool(diagonal))
        window = (st.b1, st.b2) if diagonal and st.b2 - st.b1 >= 2 else None
        return window, tuple(sorted({s for s in (st.b2, st.warmup) if 0 < s}))

    def mass_window(self):
        return self.plan(self.num_warmup, self.diagonal)[0]

    def complete(self, tune: dict) -> dict:
        """A tuning state restored from a checkpoint, with any keys a later version added."""
        return dict(tune)

    def stops(self) -> tuple[int, ...]:
        return self.plan(self.num_warmup, self.diagonal)[1]

    #: the moments of z gathered in stage 2 (float64, the grid's size a chain)
    MOMENT_KEYS = ("mom_x", "mom_xx")
    #: tuning arrays a chunk reads but never writes (set between chunks)
    READ_ONLY_KEYS: tuple[str, ...] = ()

    def uses_moments(self) -> bool:
        """Whether stage 2 gathers the moments of z (``_moment_update``)."""
        return True

    def in_stage2(self, first: int, n: int) -> bool:
        """Whether the chunk of steps [first, first + n) overlaps stage 2 (a chunk never
        straddles its end, one of the ``stops``, so such a chunk ends in warmup)."""
        return first < self.stages.b2 and first + n > self.stages.b1

    def chunk_keys(self, stage2: bool | None) -> tuple[frozenset, frozenset]:
        """(held, read_only): the tuning keys a chunk program does not take (the engine keeps
        them on the host) and those it takes but does not return (a value returned unchanged
        is still a copy). ``stage2`` None: the one program of a run whose stage 2 has none of
        its own (it carries the moments throughout, if they are used); True / False: the
        program of the chunks that overlap stage 2 (the moments) or of the others (without
        them: they change in stage 2 only, and are read between chunks, at its end)."""
        moments = self.uses_moments() and stage2 is not False
        held = set() if moments else set(self.MOMENT_KEYS)
        read_only = set(self.READ_ONLY_KEYS)
        if stage2:                 # stage 2's chunks end before stage 3, which reads them
            held |= read_only
            read_only = set()
        return frozenset(held), frozenset(read_only)

    def _moments_fresh(self):
        return {"mom_w": _tuning_scalars(self.chains, 0.0),
                "mom_x": [tf.zeros([self.chains, *s], tf.float64) for s in self.part_shapes],
                "mom_xx": [tf.zeros([self.chains, *s], tf.float64) for s in self.part_shapes]}


class MclmcSampler(_Microcanonical):
    """Unadjusted MCLMC with the reference's tuning (module docstring)."""

    name = "mclmc"
    READ_ONLY_KEYS = ("proj_inv_sd",)     # set between chunks (end of stage 2), read in stage 3

    def __init__(self, *args, energy_var: float = DESIRED_ENERGY_VAR, **kwargs):
        super().__init__(*args, **kwargs)
        self.energy_var = float(energy_var)   # the energy error variance per dimension aimed at

    def uses_moments(self) -> bool:
        return not self.diagonal          # with the diagonal the engine's window takes the variances

    @staticmethod
    def stage_points(w: int, diagonal: bool) -> _Stages:
        if diagonal:
            b1, b2, b3 = round(0.3 * w), round(0.6 * w), round(0.7 * w)
        else:
            b1, b2 = round(w / 3), round(2 * w / 3)
            b3 = b2
        return _Stages(w, b1, b2, b3)

    def fresh(self, parts, seed: int):
        """The tuning state at step 0 (velocity drawn from ``seed``)."""
        noise = _normal_parts(tf.constant([seed, 104729], tf.int32), parts)
        return {"velocity": unit_velocity(noise),
                "step_size": _tuning_scalars(self.chains, self.initial_step),
                "L": _tuning_scalars(self.chains, math.sqrt(self.dim)),
                "time": _tuning_scalars(self.chains, 0.0),
                "x_average": _tuning_scalars(self.chains, 0.0),
                "step_max": _tuning_scalars(self.chains, np.inf),
                **self._moments_fresh(),
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

    def one_step(self, x, lp, g, tune, seed, step_index, aux=()):
        """One MCLMC step and its warmup tuning, in the compiled chunk. Returns x, lp, g, tune,
        the step's statistics (``core.run.messages.STAT_NAMES`` less lp and grad_norm) and the
        aux parts at the new x (``has_aux``; else [])."""
        st = self.stages
        seeds = tf.random.experimental.stateless_split(seed, 2)
        step, L = tune["step_size"], tune["L"]
        alg = chunk_rng()
        x2, u2, lp2, g2, aux2, energy, ok = mclmc_transition(
            self.value_and_grad, x, tune["velocity"], lp, g, step, L,
            _normal_parts(seeds[0], x, alg), _normal_parts(seeds[1], x, alg), aux)
        tune = {**tune, "velocity": u2}
        tuning = step_index < st.b3

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

        tune = tf.cond(tuning, predict, lambda: dict(tune))
        if "mom_x" in tune:      # a stage-2 chunk's (chunk_keys)
            in_stage2 = tf.logical_and(step_index >= st.b1, step_index < st.b2)
            tune = tf.cond(in_stage2, lambda: _moment_update(tune, x2, tf.cast(ok, tf.float64) * tune["step_size"]),
                           lambda: dict(tune))
        in_stage3 = tf.logical_and(step_index >= st.b3, step_index < st.warmup)

        def record():
            # the same N_PROJECTIONS weight vectors at every step (a fixed seed), drawn where
            # they are used rather than held: (P, n) numbers per part, for 0.3 of warmup only
            pseed = tf.constant([7907, 613], tf.int32)
            row = 0.0
            for i, (xi, si) in enumerate(zip(x2, tune["proj_inv_sd"])):
                n = math.prod(self.part_shapes[i])
                w = tf.random.stateless_normal([N_PROJECTIONS, n], tf.random.experimental.stateless_fold_in(pseed, i),
                                               dtype=self.dtype) * tf.reshape(si, [1, n])
                row = row + tf.matmul(tf.reshape(xi, [self.chains, n]), w, transpose_b=True)
            row = tf.cast(row, tf.float64)
            buf = tf.tensor_scatter_nd_update(tune["proj_buf"], [[step_index - st.b3]], row[None])
            e = tf.where(ok, tf.cast(energy, tf.float64), tf.constant(np.nan, tf.float64))
            ebuf = tf.tensor_scatter_nd_update(tune["energy_buf"], [[step_index - st.b3]], e[None])
            return {**tune, "proj_buf": buf, "energy_buf": ebuf}

        if "proj_inv_sd" in tune:      # not in stage 2's chunks, which end before stage 3
            tune = tf.cond(in_stage3, record, lambda: dict(tune))
        diverging = tf.logical_or(~ok, tf.abs(energy) > self.divergence_threshold)
        # recorded: NaN for a step undone (its energy was not finite; the tuning takes 0, as the
        # reference), so that the warmup watch tells a broken density from a narrow one
        recorded = tf.where(ok, energy, tf.fill(tf.shape(energy), tf.constant(np.nan, energy.dtype)))
        stats = {"acceptance_rate": tf.cast(ok, self.dtype), "energy_error": tf.cast(recorded, self.dtype),
                 "diverging": diverging, "n_steps": tf.fill([self.chains], tf.constant(2, tf.int32)),
                 "step_size": tf.cast(step, self.dtype), "trajectory_length": tf.cast(L, self.dtype)}
        return x2, lp2, g2, tune, stats, aux2

    def at_boundary(self, step: int, tune: dict) -> dict:
        """The stage transitions that need a whole stage (between chunks, after the engine's
        own mass-matrix change at ``mass_window``'s end)."""
        st = self.stages
        tune = dict(tune)
        if step == st.b2 and st.b2 - st.b1 >= 2:
            if self.mass_window() is not None:
                # the engine's diagonal took the variances: z has unit variance, L = sqrt(d)
                tune["L"] = _tuning_scalars(self.chains, math.sqrt(self.dim))
                for key, value in (("time", 0.0), ("x_average", 0.0), ("step_max", np.inf)):
                    tune[key] = _tuning_scalars(self.chains, value)
            else:
                var = _variances(tune)
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
        ``STABLE_ENERGY_FACTOR`` x the target; every chain takes the smallest step size among
        the stable ones (one that ran stage 3 without trouble) and their mean L. With none
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
            shared_eps, chosen = eps[stable].min(), stable
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


class MamsSampler(_Microcanonical):
    """Metropolis-adjusted microcanonical sampler with the reference's tuning (module
    docstring); ``target_accept`` is the dual averaging's target."""

    name = "mams"

    def __init__(self, *args, target_accept: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.target_accept = float(target_accept)

    @staticmethod
    def stage_points(w: int, diagonal: bool) -> _Stages:
        b1, b2 = round(w / 3), round(2 * w / 3)
        return _Stages(w, b1, b2, w)

    def _da_fresh(self, step):
        step = tf.convert_to_tensor(step, tf.float64)
        return {"log_step": tf.math.log(step), "log_avg": tf.zeros_like(step),
                "da_t": tf.ones_like(step), "avg_error": tf.zeros_like(step), "mu": tf.math.log(10.0 * step)}

    def fresh(self, parts, seed: int):
        step = _tuning_scalars(self.chains, self.initial_step)
        return {"step_size": step, "L": MAMS_STEPS_PER_L * step, **self._da_fresh(step),
                **self._moments_fresh()}

    def one_step(self, x, lp, g, tune, seed, step_index, aux=()):
        st = self.stages
        seeds = tf.random.experimental.stateless_split(seed, 4)
        step, L = tune["step_size"], tune["L"]
        vg = self.value_and_grad
        u = unit_velocity(_normal_parts(seeds[0], x, chunk_rng()))
        uniform = tf.random.stateless_uniform([], seeds[1], dtype=tf.float64)
        n = mams_trajectory_steps(uniform, L / step)          # (C,)
        dim = self.dim

        def body(i, xt, ut, lpt, gt, at, kin):
            x2, u2, lp2, g2, a2, k = isokinetic_mclachlan(vg, xt, ut, gt, step, dim)
            active = i < n
            return (i + 1, _select(active, x2, xt), _select(active, u2, ut), tf.where(active, lp2, lpt),
                    _select(active, g2, gt), _select(active, a2, at), tf.where(active, kin + k, kin))

        _, xe, _, lpe, ge, ae, kin = tf.while_loop(
            lambda i, *_: i < tf.reduce_max(n), body,
            (tf.constant(0, tf.int32), list(x), u, lp, list(g), list(aux), tf.zeros([self.chains], tf.float64)))
        delta = tf.cast(lpe, tf.float64) - tf.cast(lp, tf.float64) - kin      # log acceptance ratio
        finite = tf.math.is_finite(delta) & _all_finite(xe)
        delta = tf.where(finite, delta, tf.fill(tf.shape(delta), tf.constant(-np.inf, tf.float64)))
        p_accept = tf.minimum(tf.exp(delta), 1.0)
        accept = tf.random.stateless_uniform([self.chains], seeds[2], dtype=tf.float64) < p_accept
        x_out, g_out, aux_out = _select(accept, xe, x), _select(accept, ge, g), _select(accept, ae, aux)
        lp_out = tf.where(accept, lpe, lp)

        def dual_average(fix_L):
            t = tune["da_t"]
            log_x, avg_error, log_avg = dual_averaging_update(t, tune["avg_error"], tune["log_step"], tune["log_avg"],
                                                              tune["mu"], p_accept, self.target_accept)
            new_step = tf.clip_by_value(tf.exp(log_x), 1e-5, L / MAMS_AVG_FLOOR)
            new_L = L if fix_L else L * new_step / step
            return {**tune, "log_step": tf.math.log(new_step), "log_avg": log_avg, "da_t": t + 1.0,
                    "avg_error": avg_error, "step_size": new_step, "L": new_L}

        pass1 = step_index < st.b1
        pass2 = tf.logical_and(step_index >= st.b2, step_index < st.warmup)
        tune = tf.cond(pass1, lambda: dual_average(True), lambda: dict(tune))
        tune = tf.cond(pass2, lambda: dual_average(False), lambda: dict(tune))
        if "mom_x" in tune:      # a stage-2 chunk's (chunk_keys)
            in_stage2 = tf.logical_and(step_index >= st.b1, step_index < st.b2)
            moved = tf.cast(_all_finite(x_out), tf.float64)
            tune = tf.cond(in_stage2, lambda: _moment_update(tune, x_out, moved * tune["step_size"]),
                           lambda: dict(tune))
        diverging = ~finite | (-delta > self.divergence_threshold)
        stats = {"acceptance_rate": tf.cast(p_accept, self.dtype),
                 "energy_error": tf.cast(-delta, self.dtype), "diverging": diverging,
                 "n_steps": 2 * n, "step_size": tf.cast(step, self.dtype),
                 "trajectory_length": tf.cast(tf.cast(n, tf.float64) * step, self.dtype)}
        return x_out, lp_out, g_out, tune, stats, aux_out

    def at_boundary(self, step: int, tune: dict) -> dict:
        st = self.stages
        tune = dict(tune)
        if step == st.b2 and st.b1 > 0:
            eps = np.exp(np.asarray(tune["log_avg"]))
            L = np.asarray(tune["L"])
            if st.b2 - st.b1 >= 2:
                var = _variances(tune)
                total = sum(v.reshape(self.chains, -1).sum(axis=1) for v in var)
                change = np.clip(MAMS_TUNING_FACTOR * np.sqrt(total) / L, 1e-3, 2.0)
                eps = eps * change
            eps = np.maximum(eps, 1e-5)
            step = tf.constant(eps, tf.float64)
            tune.update(step_size=step, L=MAMS_STEPS_PER_L * step, **self._da_fresh(step))
        elif step == st.warmup and st.warmup - st.b2 > 0:
            step = tf.constant(np.exp(np.asarray(tune["log_avg"])), tf.float64)
            tune.update(step_size=step, L=MAMS_STEPS_PER_L * step)
        return tune
