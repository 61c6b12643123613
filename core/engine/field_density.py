"""The field posterior in TensorFlow: parameterisations, hyperparameters, likelihoods.

Conventions are those of ``core.field.grid`` (read its docstring): a DFT mode of the field
has prior variance S_k = P(|k|) N^2 / V, S_0 = 0 (the field's mean is not part of the
random field; a fixed ``field_mean`` is added before the likelihood).

Field parameterisations (all give the same prior on the field; the latent always
has the grid shape (n0, n1, n2), with any leading batch (chain) axes):

whitened (default)
    u ~ Normal(0, I) indexed by the full-grid wavevector k. The half-spectrum is

        X[k] = sqrt(S_k) * ((1 + i)/2 u[k] + (1 - i)/2 u[-k])      (k in the half grid)

    i.e. for each pair (k, -k) of distinct modes Re X = sqrt(S/2) (u[k]+u[-k])/sqrt 2
    and Im X = sqrt(S/2) (u[k]-u[-k])/sqrt 2: a fixed 45 degree rotation of two
    independent standard normals into the real and imaginary parts, so Re and Im are
    independent with variance S/2 each; on self-conjugate modes (k = -k) X = sqrt(S) u[k]
    is real. Every entry of u is used exactly once, the map onto Hermitian spectra is
    a bijection, and the field is x = irfft3d(X): one inverse FFT per density, one
    forward FFT per gradient; the prior is the identity (ideal for HMC). The entry u[0]
    multiplies S_0 = 0: an inert N(0, 1) coordinate.
white_noise
    u ~ Normal(0, I) in real space, X = rfft3d(u) * sqrt(S_k / N), x = irfft3d(X): no
    Hermitian bookkeeping, two FFTs per density.
raw_modes
    v indexed like u with v[k] ~ Normal(0, S_k), X = (1 + i)/2 v[k] + (1 - i)/2 v[-k]: the
    modes themselves, as the seed question sampled them. The prior precision is
    diag(1/S_k), badly conditioned (its condition number is max S / min S), which is why
    whitening matters. With sampled hyperparameters the prior carries the
    normalisation -1/2 sum log(2 pi S_k(theta)). v[0] is inert with a N(0, 1) prior.

Hyperparameters of P(k) (amplitude, index, cutoff_scale) are fixed or sampled. A
sampled one is represented by an unconstrained eta with theta = b(eta), b the map of its
prior's kind (``core.priors``; TensorFlow twin in ``core.engine.prior_density``); the
density of eta is the tfp prior of theta plus log |d theta / d eta|. Band powers
(``core.field.power_spectrum.BandPowers``): one hyperparameter P_b per bin (lognormal, so
eta_b = log P_b), log P(k) gathered from the bins by each mode's bin index, and the family's
random-walk prior sum_b log N(eta_{b+1} - eta_b; 0, tau) added to the hyperparameters' prior
(the TensorFlow twin of ``BandPowers.log_random_walk_prior``).

Likelihoods (``core.field.observations``): Gaussian with per-voxel noise and a mask, or
Poisson counts with lambda = nbar exp(x); an optional Gaussian smoothing
exp(-(k R)^2 / 2) multiplies X before the inverse FFT (free in every parameterisation).

Preconditioner "fourier" (``sampler.preconditioner``; whitened and raw_modes). In the whitened
latent, mode k of the posterior has precision about 1 + S_k q_k, q_k = B_k^2 c / N the data's
precision per unit of prior variance (``core.field.preconditioner``: exact for uniform noise
and no mask, where it is 1 + S_k B_k^2 / N_k with N_k = N sigma^2; with a mask and a noise
map c is the observed fraction times the mean 1/sigma^2, which is the exact diagonal of the
posterior precision but for a term at twice the wavevector; Poisson counts take the rate at
the prior mean of the field). The state the kernel sees is then v, with the latent

    u = w(eta) * v,   w = (1 + S_k(eta) q_k)^-1/2     (raw_modes: w = (1/S_k + q_k)^-1/2)

per element (k = 0: w = 1), so that v has about unit posterior scale in every mode, and the
density of the state is

    log p(v, eta) = log p_u(w(eta) v, eta) + sum_k log w_k(eta)

(the Jacobian term matters only when hyperparameters are sampled: w follows the spectrum as
it moves). With ``dense_modes`` > 0 and a likelihood that couples modes (a mask, a noise map),
the ``dense_modes`` modes with the largest S_k q_k instead get the exact block of the posterior
precision among themselves (``core.field.preconditioner.dense_block``): u_L = T v_L with T a
constant m x m matrix (T^T P_LL T = I at the reference spectrum), the per-mode w everywhere
else, and log |det T| joins the Jacobian.

Preconditioner "conditional": the same scale (and block), and each mode centred on its
posterior mean given the current hyperparameters,

    u = m(eta) + w(eta) * v,   m = w^2 * b(eta),   b = grad_u log L at u = 0

(the data's linear term in the latent: b = sqrt(S_k(eta)) * g for whitened, with g the
gradient of the log-likelihood at the prior's mean field taken through the unit-spectrum map,
computed once; b = g for raw_modes). The Jacobian is the fourier one (m does not depend on v).
With uniform noise, no mask and a Gaussian likelihood this is the exact conditional posterior
of every mode: v given eta is N(0, I) whatever eta is, the density factorises as
p(eta | d) N(v; 0, I), and the hyperparameters move as if the field were marginalised out. In
the whitened fourier state, by contrast, a mode measured with signal-to-noise r sits at
u ~ sqrt(S) d / (S + N) and a change of the amplitude must move it with the data held fixed:
the high-S/N modes pin the hyperparameters (``bench/hyper_coupling.py`` measures it). With a
mask or a noise map, m is the diagonal (Jacobi) estimate of the conditional mean, still an
exact change of variables; for Poisson counts it is one such step from the prior's mean field.
Under a mask the Jacobi estimate is poor (0.40 of the exact mean's norm off on
``bench/hyper_efficiency.py``'s slab2 case: it leaves the masked region empty and the observed
one short), and the state then carries the part it misses, which pulls on the hyperparameters.
So with a Gaussian likelihood that couples the modes, sampled hyperparameters and the whitened
latent, g is replaced once, at set-up, by the g_ref with which the centre is the exact
conditional mean at the hyperparameters' prior medians eta_0 (preconditioned conjugate
gradients on (I + D H D) m = D g, D = sqrt(S(eta_0)), H the data's precision through the
unit-spectrum map: ``CENTRE_CG_STEPS``, ``CENTRE_CG_TOLERANCE``): m(eta) = w(eta)^2 sqrt(S(eta))
g_ref is exact at eta_0 and follows eta as the Jacobi estimate does, at no cost a gradient (m is
still a function of eta alone, the Jacobian unchanged). A calibration batch computes g (or g_ref)
for each simulation's data (``centre_terms``, ``FieldModel.calibration_data``). Measured (docs/benchmarks.md, seed 42):
slab2's hyperparameter ESS 305 / 325 -> 1033 / 993 in a new config's run (over seeds 42, 43, 1:
305-396 -> 159-1033, one seed lower: that seed's was one chain's step size, mended in MCLMC's
tuning, after which 662-1342); with the priors' medians one prior sd off the truth, R-hat 1.59 -> 1.000.
Where the mask misses whole planes along one axis (a slab) and the noise has one level, the
centre and the scale are instead the exact conditional's, column by column of the 2-D Hartley
transform over the other axes (``core.engine.slab_conditional``, ``self.slab``): the density is
then exactly p(eta | d) N(v; 0, I) as without a mask (``decoupled``), whatever eta is; the dense
block is not built. Measured (docs/benchmarks.md, "The slab's exact conditional"): 16 band powers
under a 25 % slab, MCLMC R-hat 1.20-1.43 before, <= 1.002 and 250-307 ESS per 1000 gradients after.
The dense block's modes are centred the same way: T T^T b_L, their exact conditional mean at
the reference spectrum, does not follow eta (it grows as sqrt(S(eta)) where the true mean
shrinks), and measured with a slab mask it stopped the amplitude from mixing at all (R-hat
1.03 -> 10^16 on ``bench/hyper_efficiency.py``'s slab2 case).

Every public method below takes the state (v with "fourier" or "conditional", u without);
``latent_of`` maps it to u. Any kernel gets the preconditioning this way, as a change of
variables inside the model.

All log-densities are normalised (they include the 2 pi and sigma terms), so they
can be compared with dense multivariate-normal densities.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from core.config import FOURIER_PARAMETERISATIONS, PARAMETERISATIONS, PER_MODE_PRECONDITIONERS
from core.engine import fft
from core.engine.prior_density import tf_prior
from core.engine.slab_conditional import SlabConditional
from core.engine.slab_conditional import applies as slab_applies
from core.field.grid import Grid
from core.field.observations import Observations
from core.field.power_spectrum import BandPowers, PowerLaw, PowerLawCutoff, PowerSpectrum
from core.field.preconditioner import MODE_PRECISION_METHODS, dense_block, fourier_scale, likelihood_mode_precision
from core.log_density import LOG_2PI
from core.priors import Prior, SampledPrior

__all__ = ["mirror", "hermitian_from_real", "SampledHyper", "FieldPosterior", "MODEL_PRECONDITIONERS"]

tfb = tfp.bijectors
tfd = tfp.distributions

_POSITIVE = {"amplitude", "cutoff_scale"}
#: The preconditioners the model applies itself ("diagonal" is the engine's adapted mass matrix).
MODEL_PRECONDITIONERS = ("identity", *PER_MODE_PRECONDITIONERS)
#: "conditional"'s reference centre (module docstring): at most this many conjugate-gradient
#: steps at set-up, stopping where the preconditioned residual falls below the tolerance (relative)
CENTRE_CG_STEPS = 200
CENTRE_CG_TOLERANCE = 1e-6


def mirror(u: tf.Tensor) -> tf.Tensor:
    """u[-k] over the trailing three axes (indices taken modulo the axis lengths)."""
    return fft.mirror_modes(u, [-3, -2, -1])  # not tf.roll on negative axes: wrong under pfor


def _half_and_mirrored_half(u: tf.Tensor, m: int):
    """u[k] and u[-k] for k on the half grid (last axis 0 .. m-1)."""
    n2 = u.shape[-1]
    neg_last = tf.concat([u[..., 0:1], tf.reverse(u[..., n2 - m + 1:], axis=[-1])], axis=-1) \
        if m > 1 else u[..., 0:1]
    neg = fft.mirror_modes(neg_last, [-3, -2])
    return u[..., :m], neg


def hermitian_from_real(u: tf.Tensor, m: int, scale=None) -> tf.Tensor:
    """X[k] = scale_k ((1 + i)/2 u[k] + (1 - i)/2 u[-k]) on the half grid (see module doc)."""
    half, neg = _half_and_mirrored_half(u, m)
    re = 0.5 * (half + neg)
    im = 0.5 * (half - neg)
    if scale is not None:
        re, im = re * scale, im * scale
    return tf.complex(re, im)


@dataclass(frozen=True)
class SampledHyper:
    """A sampled hyperparameter: its name and ``core.priors`` object; the map eta -> theta
    and the prior of theta are the kind's TensorFlow twin (``core.engine.prior_density``)."""

    name: str
    prior: SampledPrior

    def bijector(self, dtype=tf.float32) -> tfb.Bijector:
        return tf_prior(self.prior, dtype).bijector()

    def distribution(self, dtype) -> tfd.Distribution:
        return tf_prior(self.prior, dtype).distribution()

    def initial_unconstrained(self) -> float:
        """A central value of eta: the prior median's coordinate."""
        return self.prior.unconstrained_median()


class FieldPosterior:
    """Log-density of the field latent (and sampled P(k) hyperparameters) given data.

    The state is a list: ``[latent]`` or ``[latent, eta]``, with latent of shape
    (chains, n0, n1, n2) and eta of shape (chains, n_hyper). ``log_prob`` works in
    ``tf.function(jit_compile=True)`` and with TFP kernels; gradients are exact
    (core.engine.fft). ``dtype`` is tf.float32 or tf.float64. With ``preconditioner =
    "fourier"`` or ``"conditional"`` the latent part of the state is v (module docstring); ``precision_method``
    chooses how the mask and noise map enter it (``core.field.preconditioner``), ``dense_modes``
    how many low-k modes get the dense block (0: none; module docstring).
    """

    def __init__(self, grid: Grid, spectrum: PowerSpectrum, observations: Observations, *,
                 hyper_priors: dict[str, Prior] | None = None,
                 parameterisation: str = "whitened", dtype=tf.float32,
                 preconditioner: str = "identity", precision_method: str = "mean",
                 dense_modes: int = 0):
        if parameterisation not in PARAMETERISATIONS:
            raise ValueError(f"parameterisation {parameterisation!r} is not known "
                             f"(known: {', '.join(PARAMETERISATIONS)})")
        if preconditioner not in MODEL_PRECONDITIONERS:
            raise ValueError(f"preconditioner {preconditioner!r} is not one the model applies "
                             f"(known: {', '.join(MODEL_PRECONDITIONERS)})")
        if preconditioner in PER_MODE_PRECONDITIONERS and parameterisation not in FOURIER_PARAMETERISATIONS:
            raise ValueError(f"the {preconditioner} preconditioner needs parameterisation "
                             f"{' or '.join(FOURIER_PARAMETERISATIONS)}, not {parameterisation!r} "
                             "(its latent is in real space: a per-mode scale is not per element)")
        if precision_method not in MODE_PRECISION_METHODS:
            raise ValueError(f"precision_method {precision_method!r} is not known "
                             f"(known: {', '.join(MODE_PRECISION_METHODS)})")
        if tuple(observations.data.shape) != grid.shape:
            raise ValueError(f"data shape {observations.data.shape} does not match grid shape {grid.shape}")
        if dtype not in (tf.float32, tf.float64):
            raise ValueError(f"dtype must be float32 or float64, got {dtype}")
        self.grid = grid
        self.spectrum = spectrum
        self.observations = observations
        self.parameterisation = parameterisation
        self.preconditioner = preconditioner
        self.per_mode = preconditioner in PER_MODE_PRECONDITIONERS
        self.centred = preconditioner == "conditional"
        self.precision_method = precision_method
        self.dense_modes = int(dense_modes)
        self.dtype = dtype
        self.cdtype = tf.complex64 if dtype == tf.float32 else tf.complex128
        self.sampled = self._sampled_hypers(spectrum, hyper_priors or {})
        self._build_constants()

    # -- set-up ---------------------------------------------------------------

    @staticmethod
    def _sampled_hypers(spectrum, hyper_priors) -> list[SampledHyper]:
        sampled = []
        for name, prior in hyper_priors.items():
            if name not in spectrum.parameters:
                raise ValueError(f"prior: {name!r} is not a hyperparameter of {type(spectrum).__name__} "
                                 f"(it has: {', '.join(spectrum.parameters) or 'none'})")
            if prior.is_fixed:
                continue
            if isinstance(spectrum, BandPowers) and prior.dist != "lognormal":
                raise ValueError(f"prior of {name!r}: band powers take dist = \"lognormal\" (log P is "
                                 f"the sampled coordinate), not {prior.dist!r}")
            if name in _POSITIVE:
                if prior.dist == "normal":
                    raise ValueError(f"prior of {name!r}: must be positive; use dist = \"lognormal\" "
                                     "or \"uniform\" with low > 0")
                if prior.dist == "uniform" and prior.low < 0:
                    raise ValueError(f"prior of {name!r}: must be positive; uniform low = {prior.low} < 0")
            sampled.append(SampledHyper(name, prior))
        return sampled

    def _build_constants(self):
        g, obs, rd = self.grid, self.observations, self.dtype
        n0, n1, n2 = g.shape
        self.m = n2 // 2 + 1
        k_half = g.k_magnitude_half()
        nonzero = k_half > 0
        self._norm = g.n_cells**2 / g.volume                      # S_k = P(k) N^2 / V
        self._dc_mask_half = tf.constant(nonzero.astype(np.float64), rd)
        safe_k = np.where(nonzero, k_half, 1.0)
        spec = self.spectrum
        if isinstance(spec, (PowerLaw, PowerLawCutoff)):
            self._log_k_ratio = tf.constant(np.log(safe_k / spec.k_pivot), rd)
            self._k2 = tf.constant(safe_k**2, rd)
        if isinstance(spec, BandPowers):     # each mode's bin (k = 0: bin 0, masked by S_0 = 0)
            self._bin_half = tf.constant(np.maximum(spec.bin_index(k_half), 0).astype(np.int32))
        fixed_s = self._mode_variance_numpy(k_half)
        self._fixed_sqrt_s = tf.constant(np.sqrt(fixed_s), rd) if not self.sampled else None
        if self.parameterisation == "raw_modes" or self.per_mode:
            k_full = g.k_magnitude_full()
            self._k_full_nonzero = tf.constant((k_full > 0).astype(np.float64), rd)
            self._dc_full = tf.constant((k_full == 0).astype(np.float64), rd)
            self._log_k_ratio_full = (tf.constant(np.log(np.where(k_full > 0, k_full, 1.0) / spec.k_pivot), rd)
                                      if isinstance(spec, (PowerLaw, PowerLawCutoff)) else None)
            self._k2_full = tf.constant(np.where(k_full > 0, k_full, 1.0)**2, rd)
            if isinstance(spec, BandPowers):
                self._bin_full = tf.constant(np.maximum(spec.bin_index(k_full), 0).astype(np.int32))
            self._fixed_s_full = tf.constant(
                np.where(k_full > 0, self._mode_variance_numpy(k_full), 1.0), rd) if not self.sampled else None
        self.block = None
        slab = self.per_mode and slab_applies(self)      # the exact conditional replaces the block
        if self.per_mode:
            self._mode_precision = tf.constant(likelihood_mode_precision(g, obs, self.precision_method), rd)
            if not slab:
                self.block = dense_block(g, spec, obs, self.dense_modes, parameterisation=self.parameterisation)
            outside = np.ones(g.n_cells)
            if self.block is not None:
                outside[self.block.index] = 0.0
                self._block_index = tf.constant(self.block.index, tf.int32)
                self._block_factor_t = tf.constant(self.block.factor.T, rd)     # rows: v_L @ T^T
                self._block_inverse_t = tf.constant(self.block.inverse.T, rd)
                self._block_log_det = tf.constant(self.block.log_det, rd)
                self._outside_block = tf.constant(outside.reshape(g.shape), rd)
            if not self.sampled:
                w = fourier_scale(g, spec, obs, parameterisation=self.parameterisation,
                                  method=self.precision_method)
                self._fixed_scale = tf.constant(w, rd)
                log_w = np.log(w).reshape(-1) * outside
                log_det = np.sum(log_w) + (self.block.log_det if self.block is not None else 0.0)
                self._fixed_log_scale_sum = tf.constant(log_det, rd)
        beam = None
        if obs.smoothing_scale is not None:
            beam = np.exp(-0.5 * (k_half * obs.smoothing_scale)**2)
        self._beam = None if beam is None else tf.constant(beam, rd)
        mask = obs.mask
        # a Gaussian likelihood, every voxel observed, one noise level: diagonal in Fourier space,
        # the modes independent given P(k) (and "conditional" exactly p(eta | d) N(v; 0, I))
        self.modes_independent = obs.kind == "gaussian" and bool(mask.all()) and obs.uniform_noise is not None
        # grid-sized constants are device memory on a GPU (#13): the Gaussian likelihood's
        # mask is inside its 1 / sigma (0 where masked), a scalar when the noise is uniform
        # and nothing is masked; the Poisson one needs the mask itself; a model file's likelihood
        # holds its own data (core.engine.python_models)
        self._mask = tf.constant(mask.astype(np.float64), rd) if obs.kind == "poisson_lognormal" else None
        self._data = None if obs.kind == "python" else tf.constant(obs.data, rd)
        self._field_mean = obs.field_mean
        if obs.kind == "python":     # a model file's likelihood (core.engine.python_models)
            self._lik_const = None
        elif obs.kind == "gaussian":
            sigma = obs.uniform_noise
            inv = 1.0 / sigma if mask.all() and sigma is not None else np.where(mask, 1.0 / obs.noise, 0.0)
            self._inv_sigma = tf.constant(inv, rd)
            self._lik_const = float(-np.sum(np.log(obs.noise[mask])) - 0.5 * mask.sum() * LOG_2PI)
        else:
            from scipy.special import gammaln
            counts = obs.data[mask]
            self._log_nbar = math.log(obs.mean_count)
            self._nbar = obs.mean_count
            self._lik_const = float(-np.sum(gammaln(counts + 1.0)))
        self.centre_reference = None
        # "conditional" under a slab mask: exact, column by column (core.engine.slab_conditional)
        self.slab = SlabConditional(self) if slab else None
        # the state's field part is N(0, I) given eta, whatever eta: no mode pulls on the spectrum
        self.decoupled = self.modes_independent or self.slab is not None
        self._data_gradient = self._centre_term() if self.centred else None

    def _mode_variance_numpy(self, k):
        """S_k = P(k) N^2 / V with the fixed hyperparameter values (0 at k = 0)."""
        p = self.spectrum.evaluate(k)
        return np.where(k > 0, p * self._norm, 0.0)

    # -- hyperparameters ------------------------------------------------------

    @property
    def hyper_names(self) -> list[str]:
        return [h.name for h in self.sampled]

    def hyperparameters(self, eta: tf.Tensor) -> dict[str, tf.Tensor]:
        """Constrained values theta = b(eta), each of shape eta.shape[:-1]."""
        return {h.name: h.bijector(self.dtype).forward(eta[..., i]) for i, h in enumerate(self.sampled)}

    def _hyper_log_prior(self, eta):
        total = 0.0
        for i, h in enumerate(self.sampled):
            e = eta[..., i]
            b = h.bijector(self.dtype)
            theta = b.forward(e)
            total += h.distribution(self.dtype).log_prob(theta) + b.forward_log_det_jacobian(e, event_ndims=0)
        return total + self._random_walk_log_prior(eta)

    def _random_walk_log_prior(self, eta):
        """Band powers' smoothness prior: sum_b log N(eta_{b+1} - eta_b; 0, tau), eta_b = log P_b
        (``BandPowers.log_random_walk_prior``); 0 for the other families or without a walk."""
        spec = self.spectrum
        if not isinstance(spec, BandPowers) or spec.random_walk_scale is None or not self.sampled:
            return 0.0
        tau = spec.random_walk_scale
        log_bins = self._band_log_powers(eta)
        step = (log_bins[..., 1:] - log_bins[..., :-1]) / tau
        per_step = -0.5 * step * step - (math.log(tau) + 0.5 * LOG_2PI)
        return tf.reduce_sum(per_step, axis=-1)

    def _band_log_powers(self, eta):
        """Band powers: log P_b per bin, (..., n_bins): eta_b where sampled (lognormal: eta = log P),
        the spectrum's own power where fixed."""
        spec, column = self.spectrum, {h.name: i for i, h in enumerate(self.sampled)}
        return tf.stack([eta[..., column[name]] if name in column
                         else tf.fill(tf.shape(eta)[:-1], tf.constant(math.log(value), self.dtype))
                         for name, value in zip(spec.parameters, spec.powers)], axis=-1)

    def _log_power_with(self, theta, log_k_ratio, k2, bins=None, eta=None):
        """log P(k; theta) for the analytic families, broadcasting theta over chains; band
        powers gather log P_b (from ``eta``) by each mode's bin (``bins``)."""
        spec = self.spectrum
        if isinstance(spec, BandPowers):
            log_bins = self._band_log_powers(eta)            # (chains, n_bins)
            return tf.gather(log_bins, bins, axis=-1)       # (chains, n0, n1, m)
        def value(name):
            if name in theta:
                return tf.reshape(theta[name], [-1, 1, 1, 1])
            return tf.constant(getattr(spec, name), self.dtype)
        logp = tf.math.log(value("amplitude")) + value("index") * log_k_ratio
        if isinstance(spec, PowerLawCutoff):
            logp -= k2 * value("cutoff_scale")**2
        return logp

    def _sqrt_mode_variance(self, eta):
        """sqrt(S_k) on the half grid; shape (n0, n1, m) or (chains, n0, n1, m)."""
        if not self.sampled:
            return self._fixed_sqrt_s
        theta = self.hyperparameters(eta)
        log_s = self._log_power_with(theta, getattr(self, "_log_k_ratio", None), getattr(self, "_k2", None),
                                     getattr(self, "_bin_half", None), eta) + math.log(self._norm)
        return tf.exp(0.5 * log_s) * self._dc_mask_half

    def _log_mode_variance_full(self, eta):
        """log S_k on the full grid with sampled hyperparameters; 0 at the inert k = 0 entry."""
        theta = self.hyperparameters(eta)
        log_s = self._log_power_with(theta, self._log_k_ratio_full, self._k2_full,
                                     getattr(self, "_bin_full", None), eta) + math.log(self._norm)
        return log_s * self._k_full_nonzero

    # -- the preconditioner ---------------------------------------------------

    def _log_scale(self, eta):
        """log w on the full grid (module docstring), (chains, n0, n1, n2) when sampled."""
        if not self.sampled:
            return tf.math.log(self._fixed_scale)
        log_s = self._log_mode_variance_full(eta)
        s_q = tf.exp(log_s) * self._k_full_nonzero * self._mode_precision
        if self.parameterisation == "whitened":
            return -0.5 * tf.math.log1p(s_q)
        return (0.5 * log_s - 0.5 * tf.math.log1p(s_q)) * self._k_full_nonzero

    def scale(self, eta=None) -> tf.Tensor:
        """w: the latent is w * state (ones without a per-mode preconditioner)."""
        if not self.per_mode:
            return tf.ones(self.grid.shape, self.dtype)
        return self._fixed_scale if not self.sampled else tf.exp(self._log_scale(eta))

    def _centre_term(self) -> tf.Tensor:
        """What "conditional"'s centre is built from for this posterior's data: g, or g_ref where
        a Gaussian likelihood couples the modes under sampled hyperparameters (module docstring);
        under a slab mask the exact conditional's transform of the data (``SlabConditional.data_term``)."""
        if self.slab is not None:
            return self.slab.data_term(self._data[None])
        g = self._linear_term()
        if (self.sampled and self.parameterisation == "whitened" and self.observations.kind == "gaussian"
                and not self.modes_independent):
            g = self._reference_linear_term(g)
        return g

    def centre_terms(self, data) -> tf.Tensor:
        """``_centre_term`` for each row of ``data`` (a leading axis: a calibration batch's
        simulations), so that each is centred on its own data as a run on it would be."""
        if self.slab is not None:
            return self.slab.data_term(data)
        rows = []
        for row in tf.unstack(tf.convert_to_tensor(data, self.dtype)):
            other = copy.copy(self)
            other._data = row
            rows.append(other._centre_term())
        return tf.stack(rows)

    def _linear_term(self) -> tf.Tensor:
        """g: the gradient of the log-likelihood at the prior's mean field through the map of
        the latent with a unit spectrum (whitened; raw_modes: the map itself), grid-shaped, 0
        at k = 0. The map is linear, so it is the same at every latent."""
        zero = tf.zeros((1, *self.grid.shape), self.dtype)
        with tf.GradientTape() as tape:
            tape.watch(zero)
            log_l = self.log_likelihood_of_signal(self._unit_field(zero) + self._field_mean)
        return tf.constant(tape.gradient(log_l, zero)[0].numpy())

    def unit_map(self, latent) -> tf.Tensor:
        """J u: the whitened latent's field with a unit spectrum at every k, k = 0 included, and
        no beam (sqrt(N) J is orthogonal)."""
        return fft.irfft3d(hermitian_from_real(latent, self.m), fft_length=self.grid.shape)

    def _unit_field(self, latent) -> tf.Tensor:
        """The field of a latent through the map with a unit spectrum (whitened; raw_modes: the
        map itself), the beam applied: linear in the latent."""
        if self.parameterisation == "whitened":
            x_spec = hermitian_from_real(latent, self.m, self._dc_mask_half)
        else:
            x_spec = hermitian_from_real(latent * self._k_full_nonzero, self.m)
        if self._beam is not None:
            x_spec = x_spec * tf.cast(self._beam, self.cdtype)
        return fft.irfft3d(x_spec, fft_length=self.grid.shape)

    def centre(self, eta=None, scale=None) -> tf.Tensor:
        """m: the latent is m + w * state ("conditional"; zeros otherwise): m = w^2 b, the
        mode's posterior mean given eta in the diagonal approximation (module docstring)."""
        if not self.centred:
            return tf.zeros(self.grid.shape, self.dtype)
        w = self.scale(eta) if scale is None else scale
        b = self._data_gradient
        if self.parameterisation == "whitened":
            sqrt_s = (tf.sqrt(self._fixed_s_full) if not self.sampled
                      else tf.exp(0.5 * self._log_mode_variance_full(eta)))
            b = b * sqrt_s * self._k_full_nonzero
        return w * w * b

    def _data_precision_unit(self, y) -> tf.Tensor:
        """H y: the Gaussian likelihood's precision through the whitened map with a unit
        spectrum (``_unit_field``), for grid-shaped y with leading axes."""
        with tf.GradientTape() as tape:
            tape.watch(y)
            quadratic = 0.5 * tf.reduce_sum((self._unit_field(y) * self._inv_sigma)**2)
        return tape.gradient(quadratic, y)

    def _reference_linear_term(self, g) -> tf.Tensor:
        """g_ref of the module docstring: g rescaled mode by mode so that ``centre`` at the
        prior medians eta_0 is the exact conditional mean there (conjugate gradients on
        (I + D H D) m = D g, D = sqrt(S(eta_0)), preconditioned by w(eta_0)^2, from w^2 D g).
        ``centre_reference`` keeps (steps, relative residual) of the solve."""
        eta0 = tf.constant([[h.initial_unconstrained() for h in self.sampled]], self.dtype)
        precond = tf.square(self.scale(eta0))
        d = tf.exp(0.5 * self._log_mode_variance_full(eta0)) * self._k_full_nonzero
        b = d * g

        def apply(p):
            return p + d * self._data_precision_unit(d * p)

        def dot(x, y):
            return tf.reduce_sum(tf.cast(x, tf.float64) * tf.cast(y, tf.float64))

        x = precond * b
        r = b - apply(x)
        z = precond * r
        p, rz = z, dot(r, z)
        rz0 = max(float(dot(b, precond * b)), 1e-300)
        steps = 0
        while steps < CENTRE_CG_STEPS and float(rz) > CENTRE_CG_TOLERANCE**2 * rz0:
            ap = apply(p)
            alpha = tf.cast(rz / dot(p, ap), self.dtype)
            x, r = x + alpha * p, r - alpha * ap
            z = precond * r
            rz_new = dot(r, z)
            p = z + tf.cast(rz_new / rz, self.dtype) * p
            rz, steps = rz_new, steps + 1
        self.centre_reference = (steps, math.sqrt(float(rz) / rz0))
        denominator = (precond * d)[0]
        usable = denominator > np.finfo(self.dtype.as_numpy_dtype).tiny * 1e6
        return tf.constant(tf.where(usable, x[0] / tf.where(usable, denominator, 1.0), g).numpy())

    def latent_of(self, state, eta=None) -> tf.Tensor:
        """The latent u (the parameterisation's) of a state's field part."""
        if not self.per_mode:
            return state
        if self.slab is not None:
            return self.slab.latent(state, eta, self._data_gradient)
        w = self.scale(eta)
        latent = self._with_block(state * w, state, self._block_factor_t if self.block else None)
        return latent + self.centre(eta, w) if self.centred else latent

    def state_of(self, latent, eta=None) -> tf.Tensor:
        """The state's field part for a latent u: v = (u - m) / w (v_L = L^T (u - m)_L in the block)."""
        if not self.per_mode:
            return latent
        if self.slab is not None:
            return self.slab.state(latent, eta, self._data_gradient)
        w = self.scale(eta)
        if self.centred:
            latent = latent - self.centre(eta, w)
        return self._with_block(latent / w, latent, self._block_inverse_t if self.block else None)

    def _with_block(self, scaled, source, matrix_t):
        """``scaled`` with its dense-block entries replaced by ``matrix`` times ``source``'s
        (the block's entries of the trailing grid axes, any leading axes)."""
        if matrix_t is None:
            return scaled
        n = self.grid.n_cells
        flat_source = tf.reshape(source, [-1, n])
        values = tf.matmul(tf.gather(flat_source, self._block_index, axis=1), matrix_t)    # (B, m)
        rows = tf.shape(values)[0]
        m = self.block.size
        where = tf.stack([tf.repeat(tf.range(rows), m), tf.tile(self._block_index, [rows])], axis=1)
        flat = tf.tensor_scatter_nd_update(tf.reshape(scaled, [-1, n]), where, tf.reshape(values, [-1]))
        return tf.reshape(flat, tf.shape(scaled))

    def _log_jacobian(self, eta):
        """log |du/dv|: sum_k log w_k(eta) over the modes outside the dense block, plus log |det T|.

        Summed in float64: the sum is large (about -2 per well-measured mode) and an
        XLA-compiled float32 reduction of it errs by tenths at 32^3 (measured: up to 0.4),
        which an exact sampler's acceptance test sees as energy error at any step size."""
        if not self.sampled:
            return self._fixed_log_scale_sum
        log_w = self._log_scale(eta)
        if self.block is not None:
            log_w = log_w * self._outside_block
        total = tf.reduce_sum(tf.cast(log_w, tf.float64), axis=[-3, -2, -1])
        if self.block is not None:
            total += tf.cast(self._block_log_det, tf.float64)
        return tf.cast(total, self.dtype)

    # -- the field ------------------------------------------------------------

    def _spectrum_of(self, latent, eta):
        if self.parameterisation == "whitened":
            x_spec = hermitian_from_real(latent, self.m, self._sqrt_mode_variance(eta))
        elif self.parameterisation == "white_noise":
            scale = self._sqrt_mode_variance(eta) / math.sqrt(self.grid.n_cells)
            x_spec = fft.rfft3d(latent) * tf.cast(scale, self.cdtype)
        else:
            x_spec = hermitian_from_real(latent * self._k_full_nonzero, self.m)
        if self._beam is not None:
            x_spec = x_spec * tf.cast(self._beam, self.cdtype)
        return x_spec

    def field(self, latent, eta=None) -> tf.Tensor:
        """The field x (without the fixed mean) for a state."""
        return fft.irfft3d(self._spectrum_of(self.latent_of(latent, eta), eta), fft_length=self.grid.shape)

    def signal(self, latent, eta=None) -> tf.Tensor:
        """The noiseless model of the data: smoothed field plus the fixed mean."""
        return self.field(latent, eta) + self._field_mean

    # -- densities ------------------------------------------------------------

    def log_prior(self, latent, eta=None) -> tf.Tensor:
        """log p(state, eta): the latent's prior (with the preconditioner's Jacobian) and the
        hyperparameters'."""
        if self.slab is not None:
            return self.slab.log_prior(latent, eta, self._data_gradient) + self._hyper_log_prior(eta)
        n = self.grid.n_cells
        state, latent = latent, self.latent_of(latent, eta)
        if self.parameterisation in ("whitened", "white_noise"):
            lp = -0.5 * tf.reduce_sum(latent**2, axis=[-3, -2, -1]) - 0.5 * n * LOG_2PI
        else:
            if self.sampled:
                log_s = self._log_mode_variance_full(eta)  # log 1 = 0 for the inert DC entry
            else:
                log_s = tf.math.log(self._fixed_s_full)
            lp = tf.reduce_sum(-0.5 * latent**2 * tf.exp(-log_s) - 0.5 * log_s, axis=[-3, -2, -1]) \
                - 0.5 * n * LOG_2PI
        if self.per_mode:
            lp += tf.broadcast_to(self._log_jacobian(eta), tf.shape(state)[:-3])
        if self.sampled:
            lp += self._hyper_log_prior(eta)
        return lp

    def log_likelihood_of_signal(self, signal) -> tf.Tensor:
        if self.observations.kind == "gaussian":
            r = (self._data - signal) * self._inv_sigma
            return -0.5 * tf.reduce_sum(r**2, axis=[-3, -2, -1]) + self._lik_const
        log_rate = signal + self._log_nbar
        terms = self._data * log_rate - tf.exp(log_rate)
        return tf.reduce_sum(terms * self._mask, axis=[-3, -2, -1]) + self._lik_const

    def log_prob(self, latent, eta=None) -> tf.Tensor:
        """log p(latent, eta, data): normalised joint density, shape = batch shape."""
        return self.log_prob_and_signal(latent, eta)[0]

    def log_prob_and_signal(self, latent, eta=None):
        """(log p(latent, eta, data), the signal its likelihood was computed on: ``signal``)."""
        if self.slab is not None:
            lp, signal = self.slab.log_density(latent, eta, self._data_gradient, with_signal=True)
            return lp + self._hyper_log_prior(eta), signal
        signal = self.signal(latent, eta)
        return self.log_prior(latent, eta) + self.log_likelihood_of_signal(signal), signal

    def target_log_prob_fn(self):
        """A function of the state parts, as TFP kernels take it."""
        if self.sampled:
            return lambda latent, eta: self.log_prob(latent, eta)
        return lambda latent: self.log_prob(latent)

    # -- prior draws and initial states ----------------------------------------

    def draw_prior(self, chains: int, seed) -> list[tf.Tensor]:
        """State parts drawn from the prior (hyperparameters too), stateless-seeded."""
        parts = self._draw_prior_latent(chains, seed)
        if not self.per_mode:
            return parts
        return [self.state_of(*parts), *parts[1:]]

    def _draw_prior_latent(self, chains: int, seed) -> list[tf.Tensor]:
        """[u] or [u, eta] drawn from the prior: the latent u, not the state."""
        seeds = tf.random.split(tf.convert_to_tensor(seed, tf.int32) if not isinstance(seed, int)
                                else tf.constant([seed, 0], tf.int32), 2)
        eta = None
        if self.sampled:
            draws = []
            hseeds = tf.random.split(seeds[1], len(self.sampled))
            for i, h in enumerate(self.sampled):
                theta = h.distribution(self.dtype).sample(chains, seed=hseeds[i])
                draws.append(h.bijector(self.dtype).inverse(theta))
            eta = tf.stack(draws, axis=-1)
        shape = (chains, *self.grid.shape)
        latent = tf.random.stateless_normal(shape, seed=seeds[0], dtype=self.dtype)
        if self.parameterisation == "raw_modes":
            if self.sampled:
                latent = latent * tf.exp(0.5 * self._log_mode_variance_full(eta))
            else:
                latent = latent * tf.sqrt(self._fixed_s_full)
        return [latent] if eta is None else [latent, eta]

    def initial_state(self, chains: int, seed, jitter: float = 0.1) -> list[tf.Tensor]:
        """A starting point near the prior's centre: small random latents, central hyperparameters.

        With the fourier preconditioner the latent u is the same as without, and the state is
        v = u / w at the starting eta: a seed starts "identity", "diagonal" and "fourier" at
        the same field. "conditional" starts at the same small state v instead, which is near
        the field's posterior mean given the starting eta (u = m + w v)."""
        parts = self._draw_prior_latent(chains, seed)
        latent = parts[0] * jitter
        eta = None
        if self.sampled:
            centre = tf.constant([h.initial_unconstrained() for h in self.sampled], self.dtype)
            eta = centre + jitter * (parts[1] - tf.reduce_mean(parts[1], axis=0))
        state = latent if self.centred else self.state_of(latent, eta)
        return [state] if eta is None else [state, eta]
