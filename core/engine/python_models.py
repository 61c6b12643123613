"""The model adapters of a model file (``core.engine.model_file``): a scalar model
(``model.kind = "python"``) and the field model with a model file's likelihood
(``likelihood.kind = "python"``), each in the shape ``core.engine.models`` describes.

Scalar model. The state is one part u (chains, d), the sampled parameters in the file's order,
each in its prior's unconstrained coordinate (``core.priors``):

    log p(u) = sum_i [log p_i(x_i(u_i)) + log |dx_i/du_i|] + log_likelihood(params(u), data)

Field model. The state is [latent] or [latent, eta]: eta holds the sampled P(k)
hyperparameters (``core.engine.field_density``, which gives the field and its prior) and then
the model file's sampled parameters:

    log p = log p(latent, eta_P | prior) + sum_i log p_i(u_i) + log_likelihood(field, params, data)

with ``field`` the real-space field (the grid's shape) and ``data`` the data file's arrays:
"data" (masked and NaN voxels set to 0), "mask" (1 observed, 0 not) when the config names a mask
or the data hold NaN, "noise" when the config names a noise map; all in the model's dtype. The
user's function sees one state; ``per_chain`` maps it over the chains.
"""

from __future__ import annotations

import copy

import numpy as np
import tensorflow as tf

from core.engine.model_file import ModelFileError, UserParameters, load_model_file, per_chain
from core.engine.models import _DTYPES, FieldModel

__all__ = ["PythonModel", "FieldModelWithFile"]


def _file_term(model_file) -> str:
    return f"the log-likelihood of {model_file.path}"


_FILE_HINT = "check the model file's log_likelihood at these parameter values (fieldscope check-model)"


def _simulated(model, arguments: tuple, seed) -> dict:
    """The model file's ``simulate(*arguments, seed)``, checked against the data the likelihood
    reads: a dict giving every one of its arrays, each of its shape; cast to the model's dtype."""
    mf = model.model_file
    # a pair of non-negative ints: seeds tf.random.stateless_* (seed=seed) and np.random.default_rng(seed)
    pair = tuple(int(x) & 0x7FFFFFFF for x in np.asarray(seed).reshape(-1)[:2])
    out = mf.call("simulate", *arguments, pair)
    if not isinstance(out, dict):
        raise ModelFileError(f"{mf.path}: simulate returned {type(out).__name__}, not a dict of data arrays "
                             f"(the names the likelihood reads: {', '.join(model.data)})")
    missing = [n for n in model.data if n not in out]
    if missing:
        raise ModelFileError(f"{mf.path}: simulate returned no {', '.join(repr(n) for n in missing)} (it must give "
                             f"every array the likelihood reads: {', '.join(model.data)})")
    data = {}
    for name, reference in model.data.items():
        value = tf.cast(tf.convert_to_tensor(out[name]), model.dtype)
        if value.shape != reference.shape:
            raise ModelFileError(f"{mf.path}: simulate returned {name!r} of shape {tuple(value.shape)}, the data's "
                                 f"is {tuple(reference.shape)}")
        data[name] = value
    return data


def _stack(datas: list[dict]) -> dict:
    return {name: tf.stack([d[name] for d in datas]) for name in datas[0]}


def _user_terms(user: UserParameters, u) -> list:
    """``density_terms`` of a model file's sampled parameters: each one's value, then its prior."""
    values, terms = user.values(u), []
    for i, name in enumerate(user.names):
        hint = f"check the prior of {name} (PARAMETERS or [parameters])"
        terms.append((f"the value of {name}", hint, values[name], None))
        terms.append((f"the prior of {name}", hint, user.log_prior_of(i, u[..., i]), (name, values[name])))
    return terms


class _FileLikelihood:
    """What both adapters do with their model file: its log_likelihood mapped over the chains,
    each chain against the shared data or (``with_data``, calibration) its own."""

    _per_chain_data = False

    def _mapped_likelihood(self, fields: tuple, u) -> tf.Tensor:
        """(chains,): ``log_likelihood(*fields, params, data)`` one chain at a time; ``fields``:
        () for a scalar model, (signal (chains, n0, n1, n2),) for a field."""
        values = self.user.values(u)
        names, data_names = self.user.all_names, list(self.data)
        mf, dtype, own_data = self.model_file, self.dtype, self._per_chain_data

        def one(e):
            data = dict(zip(data_names, e[2])) if own_data else self.data
            return mf.log_likelihood(*e[0], dict(zip(names, e[1])), data, dtype=dtype)
        elems = (list(fields), [values[n] for n in names], [self.data[n] for n in data_names] if own_data else [])
        return per_chain(one, elems, dtype)

    def _user_start(self, chains: int, seed: int, stream: int) -> tf.Tensor:
        """(chains, d): the file's sampled parameters where the chains start, their priors'
        medians (unconstrained) with a jitter of 0.1."""
        centre = tf.constant(self.user.centre(), self.dtype)
        noise = tf.random.stateless_normal([chains, len(self.user)], seed=[seed, stream], dtype=self.dtype)
        return centre + 0.1 * noise

    def with_data(self, data: dict):
        """A shallow copy whose likelihood is against ``data`` (name -> (chains, ...) tensor:
        each chain its own data)."""
        other = copy.copy(self)
        other.data = dict(data)
        other._per_chain_data = True
        return other


class PythonModel(_FileLikelihood):
    """A scalar model whose log-likelihood is a model file's ``log_likelihood(params, data)``."""

    kind = "python"
    has_field = False

    def __init__(self, config, model_file=None):
        from core.io import load_named_arrays

        self.config = config
        self.dtype = _DTYPES[config.model.dtype]
        self.model_file = model_file or load_model_file(config.model_file, "scalar", config.parameters)
        self.arrays = load_named_arrays(config.data_path)
        self.data = {name: tf.constant(a, self.dtype) for name, a in self.arrays.items()}
        self.user = UserParameters(self.model_file.parameters, self.dtype)
        if not len(self.user):
            raise ValueError(f"{self.model_file.path}: no parameter is sampled (every PARAMETERS entry "
                             "is a number); give one a prior table to sample it")
        self.param_names = list(self.user.names)

    def initial_state(self, chains: int, seed: int):
        return [self._user_start(chains, seed, 1)]

    def prior_draw(self, seed: int):
        """One state drawn from the prior (``fieldscope check-model``'s points)."""
        return [self.user.draw(1, seed)]

    def log_likelihood(self, u) -> tf.Tensor:
        """(chains, d) -> (chains,): the user's function, one state at a time."""
        return self._mapped_likelihood((), u)

    def file_coordinates(self, parts) -> tf.Tensor:
        """(chains, d): the model file's sampled parameters (unconstrained) in the state ``parts``."""
        return parts[0]

    @property
    def target_log_prob_fn(self):
        return lambda u: self.user.log_prior(u) + self.log_likelihood(u)

    def log_likelihood_at(self, parts) -> tf.Tensor:
        """(chains,): the model file's log-likelihood at the state ``parts`` (calibration's test quantity)."""
        return self.log_likelihood(parts[0])

    def simulate_batch(self, seeds):
        """Truth and data of one simulation per seed (calibration): the parameters drawn from
        their priors, the data from the model file's ``simulate(params, seed)`` ->
        (data name -> (S, ...), truth parts [u (S, d)])."""
        truths, datas = [], []
        for s in seeds:
            u = self.user.draw(1, tf.random.experimental.stateless_fold_in(s, 0))
            values = {n: v[0] for n, v in self.user.values(u).items()}
            datas.append(_simulated(self, (values,), tf.random.experimental.stateless_fold_in(s, 1)))
            truths.append(u[0])
        return _stack(datas), [tf.stack(truths)]

    def params(self, parts):
        return self.user.stacked(parts[0])

    def density_terms(self, parts):
        """As ``FieldModel.density_terms``: each sampled parameter's value and prior, then the
        model file's log-likelihood."""
        u = parts[0]
        return _user_terms(self.user, u) + [(_file_term(self.model_file), _FILE_HINT, self.log_likelihood(u), None)]

    @property
    def observed(self):
        return {name: ([f"{name}_dim_{i}" for i in range(a.ndim)], a) for name, a in self.arrays.items()}


class FieldModelWithFile(_FileLikelihood, FieldModel):
    """The field model whose likelihood is a model file's ``log_likelihood(field, params, data)``."""

    def __init__(self, config, model_file=None):
        super().__init__(config)
        self.model_file = model_file or load_model_file(config.model_file, "field", config.parameters)
        self.user = UserParameters(self.model_file.parameters, self.dtype)
        self.n_spectrum = len(self.posterior.sampled)
        self.param_names = list(self.posterior.hyper_names) + list(self.user.names)
        obs = self.observations
        data = {"data": obs.data}
        if config.data.mask is not None or not obs.mask.all():
            data["mask"] = obs.mask.astype(np.float64)
        if obs.noise is not None:
            data["noise"] = obs.noise
        self.data = {name: tf.constant(a, self.dtype) for name, a in data.items()}

    # -- the state's parts -------------------------------------------------------------

    def _split(self, parts):
        latent = parts[0]
        eta = parts[1] if len(parts) > 1 else None
        if eta is None:
            return latent, None, tf.zeros([tf.shape(latent)[0], 0], self.dtype)
        spectrum = eta[..., :self.n_spectrum] if self.n_spectrum else None
        return latent, spectrum, eta[..., self.n_spectrum:]

    def initial_state(self, chains: int, seed: int):
        return self._with_user(self.posterior.initial_state(chains, seed),
                               lambda: self._user_start(chains, seed, 3))

    def prior_draw(self, seed: int):
        """One state drawn from the prior: the field, its P(k) hyperparameters, the file's parameters."""
        return self._with_user(self.posterior.draw_prior(1, seed), lambda: self.user.draw(1, seed))

    def _with_user(self, parts, user_part):
        """The field's state ``parts`` with the file's sampled parameters (``user_part()``) after
        its P(k) hyperparameters in eta."""
        if not len(self.user):
            return parts
        u = user_part()
        return [parts[0], tf.concat([parts[1], u], axis=-1) if len(parts) > 1 else u]

    def interweave(self, parts, seed):
        """``FieldModel.interweave`` on the P(k) hyperparameters' columns of eta; the file's
        parameters (the columns after them) as they were: the move holds the field, so the
        file's likelihood, and they are not in p(eta | z)."""
        latent, spectrum, user = self._split(parts)
        (state, moved), acceptance = self.interweaving.move([latent, spectrum], seed, self.posterior)
        return [state, tf.concat([moved, user], axis=-1)], acceptance

    def file_coordinates(self, parts) -> tf.Tensor:
        """(chains, d): the model file's sampled parameters (unconstrained) in the state ``parts``."""
        return self._split(parts)[2]

    def log_likelihood_of(self, signal, u) -> tf.Tensor:
        """(chains, n0, n1, n2), (chains, d) -> (chains,): the user's function per chain."""
        return self._mapped_likelihood((signal,), u)

    def _log_prob_and_signal(self, *parts):
        latent, eta, u = self._split(parts)
        post = self.posterior
        signal = post.signal(latent, eta)
        lp = post.log_prior(latent, eta) + self.user.log_prior(u) + self.log_likelihood_of(signal, u)
        return lp, signal

    @property
    def target_log_prob_fn(self):
        return lambda *parts: self._log_prob_and_signal(*parts)[0]

    def log_likelihood_at(self, parts) -> tf.Tensor:
        """(chains,): the model file's log-likelihood at the state ``parts`` (calibration's test quantity)."""
        latent, eta, u = self._split(parts)
        return self.log_likelihood_of(self.posterior.signal(latent, eta), u)

    def simulate_batch(self, seeds):
        """Truth and data of one simulation per seed (calibration): the field, its P(k)
        hyperparameters and the file's parameters drawn from their priors, the data from the model
        file's ``simulate(field, params, seed)`` -> (data name -> (S, ...), truth parts)."""
        latents, etas, datas = [], [], []
        for s in seeds:
            parts = self.prior_draw(tf.random.experimental.stateless_fold_in(s, 0))
            latent, eta, u = self._split(parts)
            signal = self.posterior.signal(latent, eta)[0]
            values = {n: v[0] for n, v in self.user.values(u).items()}
            datas.append(_simulated(self, (signal, values), tf.random.experimental.stateless_fold_in(s, 1)))
            latents.append(parts[0][0])
            if len(parts) > 1:
                etas.append(parts[1][0])
        truth = [tf.stack(latents)] + ([tf.stack(etas)] if etas else [])
        return _stack(datas), truth

    @property
    def target_log_prob_and_field(self):
        def fn(*parts):
            lp, signal = self._log_prob_and_signal(*parts)
            return lp, [signal]
        return fn

    def params(self, parts):
        latent, eta, u = self._split(parts)
        columns = []
        if self.n_spectrum:
            theta = self.posterior.hyperparameters(eta)
            columns += [theta[n] for n in self.posterior.hyper_names]
        if len(self.user):
            values = self.user.values(u)
            columns += [values[n] for n in self.user.names]
        if not columns:
            return tf.zeros([tf.shape(latent)[0], 0], self.dtype)
        return tf.stack(columns, axis=-1)

    def field(self, parts):
        latent, eta, _ = self._split(parts)
        return self.posterior.field(latent, eta) + self.observations.field_mean

    def _latent_and_spectrum(self, parts):
        latent, eta, _ = self._split(parts)
        return latent, eta

    def _likelihood_terms(self, parts, signal):
        """``density_terms``' last terms: each model-file parameter's value and prior, then
        the model file's log-likelihood."""
        u = self._split(parts)[2]
        return _user_terms(self.user, u) + [
            (_file_term(self.model_file), _FILE_HINT, self.log_likelihood_of(signal, u), None)]
