"""From a run config to a model the engine can sample: the field model or the integral model.

TensorFlow is imported here (the engine process only). A model adapter gives the engine
everything it needs in one shape:

    initial_state(chains, seed)  list of state parts, each (chains, ...); with
                                 ``sampler.preconditioner = "fourier"`` the field part is the
                                 preconditioned v (``core.engine.field_density``), mapped
                                 back by ``field`` and ``params``
    target_log_prob_fn           f(*parts) -> (chains,)
    param_names                  names of the scalar parameters recorded every draw
    params(parts)                (chains, n_params) constrained values (TF)
    has_field                    whether a field is stored
    field(parts)                 (chains, n0, n1, n2) (TF), field_power(x) (chains, n_shells)
    observed                     name -> (dims, array) for the store's observed_data
    density_terms(parts)         the log-density's terms, each (label, hint, (chains,)), in
                                 the order they are computed; ``nonfinite_report`` names the
                                 first one that is not finite at the initial state
"""

from __future__ import annotations

import copy

import numpy as np
import tensorflow as tf

from core.config import PER_MODE_PRECONDITIONERS, RunConfig
from core.engine import fft
from core.engine.field_density import FieldPosterior
from core.engine.interweaving import Interweaving
from core.field.power_estimator import measure_power
from core.field.power_spectrum import hyperparameter_priors, prior_spectrum

__all__ = ["FieldModel", "IntegralModel", "build_model", "nonfinite_report"]

_DTYPES = {"float32": tf.float32, "float64": tf.float64}


def _median(prior) -> float:
    return prior.median()


# The integral model's chains have always started from the half-normal's median written
# to four digits (0.6745 scale; core.priors' median is 0.674489... scale). Kept so that a
# seed gives the draws it always gave (the default sigma prior is half-normal).
_START = {"halfnormal": lambda prior: prior.scale * 0.6745}


class FieldModel:
    """The Gaussian-random-field model of a run config."""

    kind = "field"

    def __init__(self, config: RunConfig):
        from core.io import load_observations, load_prior_table

        self.config = config
        inputs, self.observations, self.grid = load_observations(config)
        self.truth = inputs.truth
        from core.io import LoadError
        from core.run.resources import grid_problem

        problem = grid_problem(inputs.data.shape)
        if problem is not None:     # the engine's preflight says so first, from the header
            raise LoadError(f"{config.data_path}: {problem}")
        prior = config.prior
        # the config holds a number (fixed) or a core.priors object (sampled)
        hyper = hyperparameter_priors(prior)
        values = {name: h.median() for name, h in hyper.items()}   # a fixed one: its value
        try:
            spectrum = prior_spectrum(prior, load_prior_table(config), values, grid=self.grid)
        except ValueError as exc:       # band powers: more bins than the grid has distinct |k|
            raise LoadError(f"{config.data_path}: {exc}") from None
        self.spectrum = spectrum
        self.dtype = _DTYPES[config.field.dtype]
        # "fourier" and "conditional" are changes of variables inside the density (every kernel
        # gets them); "diagonal" is the engine's mass matrix, adapted from warmup draws on top of
        # "identity"
        model_preconditioner = (config.sampler.preconditioner
                                if config.sampler.preconditioner in PER_MODE_PRECONDITIONERS else "identity")
        self.posterior = FieldPosterior(self.grid, spectrum, self.observations, hyper_priors=hyper,
                                        parameterisation=config.field.parameterisation, dtype=self.dtype,
                                        preconditioner=model_preconditioner,
                                        dense_modes=config.sampler.dense_modes)
        self.param_names = self.posterior.hyper_names
        self.has_field = True
        # the centred move between transitions (core.engine.interweaving), where it applies
        self.interweaving = (Interweaving(self.posterior) if config.sampler.interweave
                             and self.posterior.sampled and self.posterior.parameterisation == "whitened" else None)
        self._build_power_estimator()

    def _build_power_estimator(self):
        g = self.grid
        reference = measure_power(np.zeros(g.shape), g)
        self.k_centres, self.k_counts, self.k_edges = reference.k, reference.counts, reference.edges
        shell = g.shell_index_half(reference.edges)
        n_shells = len(reference.k)
        # modes in no shell (k = 0, beyond the edges) go to an extra bin that is dropped
        self._shell = tf.constant(np.where(shell >= 0, shell, n_shells).astype(np.int32))
        self._n_bins = n_shells + 1
        weight = g.multiplicity_half() * g.volume / g.n_cells**2
        self._power_weight = tf.constant(weight, self.dtype)
        self._inv_counts = tf.constant(np.where(reference.counts > 0, 1.0 / np.maximum(reference.counts, 1), 0.0),
                                       self.dtype)

    def initial_state(self, chains: int, seed: int):
        return self.posterior.initial_state(chains, seed)

    @property
    def target_log_prob_fn(self):
        return self.posterior.target_log_prob_fn()

    @property
    def target_log_prob_and_field(self):
        """parts -> (log p, [the field x]): the log-density and the field its likelihood
        computed (``field`` of the same parts, without a transform of its own)."""
        post = self.posterior        # its signal is field + observations.field_mean, as ``field``

        def fn(*parts):
            lp, signal = post.log_prob_and_signal(*parts)
            return lp, [signal]
        return fn

    def interweave(self, parts, seed):
        """The state parts after the centred move of ``core.engine.interweaving``."""
        return self.interweaving.move(parts, seed, self.posterior)

    def params(self, parts):
        if not self.param_names:
            return tf.zeros([tf.shape(parts[0])[0], 0], self.dtype)
        theta = self.posterior.hyperparameters(parts[1])
        return tf.stack([theta[n] for n in self.param_names], axis=-1)

    def field(self, parts):
        return self.posterior.field(*parts) + self.observations.field_mean

    def field_power(self, x):
        """Shell-averaged P(k) of fields x (chains, n0, n1, n2), as core.field.power_estimator."""
        spectrum = fft.rfft3d(x)  # the k = 0 mode is in no shell
        per_mode = tf.math.real(spectrum * tf.math.conj(spectrum)) * self._power_weight
        flat = tf.reshape(per_mode, [tf.shape(x)[0], -1])
        ids = tf.reshape(self._shell, [-1])
        sums = tf.transpose(tf.math.unsorted_segment_sum(tf.transpose(flat), ids, self._n_bins))
        return sums[:, :-1] * self._inv_counts

    def density_terms(self, parts):
        """The log-density's terms at ``parts``, eagerly, in the order they are computed:
        each sampled hyperparameter's value and its prior (with the Jacobian), the field
        prior, the field, the likelihood. Each is (label, what to check, per-chain values,
        ``at``: None or (name, per-chain values) of the hyperparameter the term is at)."""
        post, dtype = self.posterior, self.dtype
        latent, eta = self._latent_and_spectrum(parts)
        terms, hyper_total = [], 0.0
        for i, h in enumerate(post.sampled):
            key = f"prior.{h.name}"
            bijector = h.bijector(dtype)
            theta = bijector.forward(eta[..., i])
            hint = (f"check {key}'s prior (its scale): the chains start near its median, "
                    "a tenth of its spread apart")
            terms.append((f"the value of {key}", hint, theta, None))
            lp = h.distribution(dtype).log_prob(theta) + bijector.forward_log_det_jacobian(
                eta[..., i], event_ndims=0)
            terms.append((f"the prior of {key}", hint, lp, (h.name, theta)))
            hyper_total += lp
        terms.append(("the field prior", "check the P(k) prior (prior.amplitude, prior.index, "
                      "prior.k_pivot) against the grid's k range",
                      post.log_prior(latent, eta) - hyper_total, None))
        signal = post.signal(latent, eta)
        peak = tf.reduce_max(tf.abs(tf.reshape(signal, [tf.shape(signal)[0], -1])), axis=-1)
        terms.append(("the largest |field| value", "check the P(k) prior and grid.box_size",
                      peak, None))
        return terms + self._likelihood_terms(parts, signal)

    @staticmethod
    def _latent_and_spectrum(parts):
        """(the latent, the sampled P(k) hyperparameters' eta or None) of the state ``parts``."""
        return parts[0], (parts[1] if len(parts) > 1 else None)

    def _likelihood_terms(self, parts, signal):
        """The likelihood's terms of ``density_terms`` at ``parts`` whose signal is ``signal``."""
        if self.config.likelihood.kind == "gaussian":
            hint = ("check data.noise_sigma (or data.noise_map) against the scale of the data: "
                    "the likelihood sums (data - field)^2 / noise^2")
        else:
            hint = "check likelihood.mean_count and likelihood.field_mean against the counts"
        return [("the likelihood", hint, self.posterior.log_likelihood_of_signal(signal), None)]

    def with_data(self, data):
        """A shallow copy whose likelihood is against ``data``, a tensor with a leading chain axis
        (each chain its own data: a calibration batch's simulations), or the pair
        ``calibration_data`` makes of one; every other constant is shared (the Poisson
        normalisation, which depends on the counts, is per chain)."""
        other = copy.copy(self)
        post = copy.copy(self.posterior)
        if isinstance(data, (tuple, list)):
            data, post._data_gradient = data
        post._data = data
        if post.observations.kind != "gaussian":
            post._lik_const = -tf.reduce_sum(tf.math.lgamma(data + 1.0) * post._mask, axis=[-3, -2, -1])
        other.posterior = post
        return other

    def calibration_data(self, data):
        """What calibration's programs get for simulations' ``data`` (a leading axis): the data, and
        with "conditional" each one's centre term besides (``FieldPosterior.centre_terms``), so
        that each simulation's chains are centred on its data as a run on it would be, not on the
        data the config loaded."""
        return (data, self.posterior.centre_terms(data)) if self.posterior.centred else data

    def release_observed(self) -> None:
        """Drop the loaded float64 maps (data, mask, noise, truth) once the run store holds
        them (``observed``): the density keeps its own constants, so from here on only
        ``observations``' scalars (kind, field_mean, ...) are read. Their N * 8 bytes each
        are not held through the run (``core.run.resources``: host memory)."""
        import dataclasses

        self.truth = None
        light = dataclasses.replace(self.observations, data=None, mask=None, noise=None)
        self.observations = light
        self.posterior.observations = light

    @property
    def observed(self):
        obs = self.observations
        out = {"data": (["x", "y", "z"], np.where(obs.mask, obs.data, np.nan)),
               "mask": (["x", "y", "z"], obs.mask)}
        if obs.noise is not None:
            out["noise"] = (["x", "y", "z"], obs.noise)
        if self.truth is not None:
            out["truth"] = (["x", "y", "z"], np.asarray(self.truth, np.float64))
        return out


class IntegralModel:
    """The 1D integral model y(t) = c + int_0^t exp(A s) f(s) ds of a run config."""

    kind = "integral"

    def __init__(self, config: RunConfig):
        from core import integral as im
        from core.engine.integral_density import make_log_density
        from core.io import load_series_inputs

        self.config = config
        series = load_series_inputs(config)
        self.spec = im.spec_from_config(config, series.t, series.y, series.f)
        self.dtype = tf.float64
        im.check_overflow(self.spec, np.float64)
        self.density = make_log_density(self.spec, self.dtype)
        self.param_names = list(self.density.names)
        self.has_field = False

    def initial_state(self, chains: int, seed: int):
        d = len(self.density.unconstrained_names)
        centre = self.density.unconstrain(self._central_values())
        noise = tf.random.stateless_normal([chains, d], seed=[seed, 1], dtype=self.dtype)
        return [tf.broadcast_to(centre, [chains, d]) + 0.1 * noise]

    def _central_values(self):
        """Where the chains start (before their jitter): the prior medians."""
        return {name: _START.get(self.spec.priors[name].dist, _median)(self.spec.priors[name])
                for name in self.param_names}

    @property
    def target_log_prob_fn(self):
        return lambda u: self.density(u)

    def with_data(self, data):
        """A shallow copy whose likelihood is against the series ``data`` (a leading chain axis)."""
        other = copy.copy(self)
        density = copy.copy(self.density)
        density._y = data
        other.density = density
        return other

    def params(self, parts):
        values = self.density.constrain(parts[0])
        return tf.stack([values[n] for n in self.param_names], axis=-1)

    def density_terms(self, parts):
        """As ``FieldModel.density_terms``: each sampled parameter's value, then the whole
        log-density (the integral model's terms are one expression)."""
        values = self.density.constrain(parts[0])
        hint = "check the priors ([prior] A, c, sigma) and the data's scale"
        terms = [(f"the value of prior.{name}", hint, values[name], None)
                 for name in self.param_names]
        return terms + [("the log-density", hint, self.density(parts[0]), None)]

    @property
    def observed(self):
        out = {"t": (["time"], np.asarray(self.spec.t)), "y": (["time"], np.asarray(self.spec.y))}
        if self.spec.f is not None:
            out["f"] = (["time"], np.asarray(self.spec.f))
        return out


def build_model(config: RunConfig, model_file=None, devices=()):
    """The model adapter of ``config``; ``model_file``: its model file already loaded
    (``core.engine.model_file.load_model_file``), else loaded here when it has one; ``devices``:
    those a sharded field (``field.shard``) is cut over (``core.engine.devices.chain_devices``)."""
    if config.field is not None and config.field.shard != "none":
        from core.engine.sharded_model import ShardedFieldModel

        return ShardedFieldModel(config, devices)
    if config.model.kind == "integral":
        return IntegralModel(config)
    if config.model.kind == "python" or config.likelihood.kind == "python":
        from core.engine.python_models import FieldModelWithFile, PythonModel

        cls = PythonModel if config.model.kind == "python" else FieldModelWithFile
        return cls(config, model_file)
    return FieldModel(config)


def nonfinite_report(model, parts) -> str:
    """Why the log-density is not finite at ``parts`` (the initial state): the first of
    ``model.density_terms`` that is not finite, its value, the chain, and what to check."""
    chains = int(parts[0].shape[0])
    for label, hint, values, at in model.density_terms(parts):
        v = np.asarray(values, np.float64).reshape(-1)
        bad = np.flatnonzero(~np.isfinite(v))
        if bad.size:
            c = int(bad[0])
            where = f" at {at[0]} = {float(np.asarray(at[1]).reshape(-1)[c])!r}" if at else ""
            return (f"the log-density is not finite at the initial state: {label} is "
                    f"{float(v[c])!r}{where} (chain {c} of {chains}); {hint}")
    return ("the log-density is not finite at the initial state; check the data, noise and "
            "prior settings")
