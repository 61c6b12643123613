"""The field posterior with the field sharded over devices (issue #34, item 2): the density of
``core.engine.field_density.FieldPosterior`` in its ``white_noise`` parameterisation, computed in
parts, each on its device, with the sharded FFTs of ``core.engine.sharded_fft``.

Why white noise: its latent u ~ N(0, I) lives in real space, so it is cut exactly as the field
is (``sharded_fft.shard``'s layout: slabs of x, or pencils of x and y), and the prior is a sum
over each part's own cells. The whitened latent pairs every mode k with -k (``mirror``), which
on a sharded spectrum is one more all-to-all a density; white noise pays one more FFT pair
instead, and its FFTs are the sharded ones.

The state is the latent's parts (each (chains, n0_i, n1_j, N2), part k on ``mesh.devices[k]``)
and, with sampled hyperparameters, eta (chains, n_hyper), kept whole (it is a few numbers). The
density, with X = rfft3d(u) sqrt(S_k(eta) / N) B_k and x = irfft3d(X):

    log p = sum over parts of [ -|u_k|^2 / 2 - |(d_k - x_k - mean) / sigma_k|^2 / 2 ]
            + the constants + log p(eta)

Each part's terms are summed on its device; what crosses devices are the FFTs' exchanges and
one number per chain and part. The spectrum's weights are cut into the mesh's spectrum layout
once (sampled hyperparameters: the log k ratios, k^2 or the bins, from which each device makes
its own S_k(eta)); the data, the mask (inside 1 / sigma) and the noise map into the field's.
Every step is differentiable, so the gradient is the unsharded density's (tested to round-off on
logical CPU devices, ``tests/core/engine/test_sharded_density.py``).

A Gaussian likelihood only, and no per-mode preconditioner (its scale is per mode, not per
cell of the white-noise latent): ``ShardedFieldPosterior`` refuses the others by name.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from core.engine import sharded_fft
from core.engine.field_density import FieldPosterior
from core.engine.sharded_fft import ShardMesh
from core.log_density import LOG_2PI

__all__ = ["ShardedFieldPosterior"]


class ShardedFieldPosterior:
    """``whole``'s density (a ``FieldPosterior``) on the parts of ``mesh`` (module docstring)."""

    def __init__(self, whole: FieldPosterior, mesh: ShardMesh):
        problems = []
        if whole.parameterisation != "white_noise":
            problems.append(f"parameterisation {whole.parameterisation!r} (a sharded field needs "
                            "\"white_noise\": its latent is cut as the field is)")
        if whole.per_mode:
            problems.append(f"preconditioner {whole.preconditioner!r} (per mode, not per cell)")
        if whole.observations.kind != "gaussian":
            problems.append(f"likelihood {whole.observations.kind!r} (Gaussian only)")
        if tuple(mesh.shape) != tuple(whole.grid.shape):
            problems.append(f"mesh grid {mesh.shape} against the model's {whole.grid.shape}")
        if problems:
            raise ValueError("a sharded field: not with " + "; ".join(problems))
        self.whole, self.mesh = whole, mesh
        self.dtype, self.cdtype = whole.dtype, whole.cdtype
        self.sampled = whole.sampled
        self.n_parts = len(mesh.devices)
        n = whole.grid.n_cells
        self._inv_sqrt_n = 1.0 / math.sqrt(n)
        self._log_norm = math.log(whole._norm)                             # noqa: SLF001
        spectrum = {"sqrt_s": None if self.sampled else whole._fixed_sqrt_s,  # noqa: SLF001
                    "dc": whole._dc_mask_half,                               # noqa: SLF001
                    "log_k_ratio": getattr(whole, "_log_k_ratio", None),
                    "k2": getattr(whole, "_k2", None), "bins": getattr(whole, "_bin_half", None),
                    "beam": whole._beam}                                     # noqa: SLF001
        self._spectrum = {name: None if t is None else self._placed(t.numpy(), spectrum=True)
                          for name, t in spectrum.items()}
        inv = whole._inv_sigma.numpy()                                       # noqa: SLF001
        self._inv_sigma = (self._placed(inv) if inv.ndim else
                           self._placed(np.broadcast_to(inv, (self.n_parts,)), per_part=True))
        self._data = self._placed(whole._data.numpy())                      # noqa: SLF001
        self._field_mean = whole._field_mean                                 # noqa: SLF001
        self._constant = -0.5 * n * LOG_2PI + whole._lik_const               # noqa: SLF001

    def _placed(self, array, spectrum: bool = False, per_part: bool = False) -> list[tf.Tensor]:
        """``array`` cut into the mesh's parts (``per_part``: already one entry a part), each a
        constant on its device."""
        parts = list(array) if per_part else sharded_fft.cut(array, self.mesh, spectrum)
        out = []
        for part, device in zip(parts, self.mesh.devices):
            with tf.device(device):
                out.append(tf.constant(part, self._dtype_of(part)))
        return out

    def _dtype_of(self, part):
        return tf.int32 if np.asarray(part).dtype.kind in "iu" else self.dtype

    # -- the state --------------------------------------------------------------

    def split_state(self, state):
        """(the latent's parts, eta or None) of a state list."""
        state = list(state)
        return (state[:-1], state[-1]) if self.sampled else (state, None)

    def _scale(self, k: int, eta, theta):
        """sqrt(S_k(eta) / N) on part k of the spectrum (FieldPosterior's ``_sqrt_mode_variance``
        over sqrt(N), in the same order of operations)."""
        sp = self._spectrum
        if not self.sampled:
            return sp["sqrt_s"][k] / math.sqrt(self.whole.grid.n_cells)
        log_s = self.whole._log_power_with(                                  # noqa: SLF001
            theta, sp["log_k_ratio"][k] if sp["log_k_ratio"] else None, sp["k2"][k] if sp["k2"] else None,
            sp["bins"][k] if sp["bins"] else None, eta) + self._log_norm
        return tf.exp(0.5 * log_s) * sp["dc"][k] / math.sqrt(self.whole.grid.n_cells)

    def field(self, latent_parts, eta=None) -> list[tf.Tensor]:
        """The field's parts (without the fixed mean), each on its device."""
        devices = self.mesh.devices
        spec = sharded_fft.rfft3d(latent_parts, self.mesh)
        theta = self.whole.hyperparameters(eta) if self.sampled else None
        weighted = []
        for k, (part, device) in enumerate(zip(spec, devices)):
            with tf.device(device):
                x = part * tf.cast(self._scale(k, eta, theta), self.cdtype)
                if self._spectrum["beam"] is not None:
                    x = x * tf.cast(self._spectrum["beam"][k], self.cdtype)
                weighted.append(x)
        return sharded_fft.irfft3d(weighted, self.mesh)

    def log_prob(self, *state) -> tf.Tensor:
        """log p(state, data), (chains,): ``FieldPosterior.log_prob`` of the whole."""
        return self.log_prob_and_signal(*state)[0]

    def log_prob_and_signal(self, *state):
        """(log p, the signal's parts: the field plus the field mean, each on its device)."""
        latent, eta = self.split_state(state)
        field = self.field(latent, eta)
        terms, signal = [], []
        for k, device in enumerate(self.mesh.devices):
            with tf.device(device):
                signal.append(field[k] + self._field_mean)
                r = (self._data[k] - signal[k]) * self._inv_sigma[k]
                terms.append(-0.5 * tf.reduce_sum(latent[k]**2, axis=[-3, -2, -1])
                             - 0.5 * tf.reduce_sum(r**2, axis=[-3, -2, -1]))
        total = tf.add_n(terms) + self._constant
        if self.sampled:
            total += self.whole._hyper_log_prior(eta)                        # noqa: SLF001
        return total, signal

    def target_log_prob_fn(self):
        """A function of the state parts, as the kernels take it."""
        return self.log_prob
