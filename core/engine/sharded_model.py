"""A run whose field is cut over devices (``field.shard`` = "slab" | "pencil", issue #34 item 2):
the model adapter the engine samples, and the observer that keeps its draws.

``ShardedFieldModel`` is ``FieldModel`` with its state in parts: the white-noise latent's parts
(each (chains, n0_i, n1_j, N2) on its device of the mesh, ``core.engine.sharded_fft``'s layout),
then eta (the sampled P(k) hyperparameters, whole) where there are any. Its density is
``core.engine.sharded_density.ShardedFieldPosterior``; its field and its P(k) come in parts too:
the P(k) of a draw is each device's sums over its shells of its part of the spectrum, added up
(a few numbers a device cross). The whole model (``FieldModel``'s ``FieldPosterior``, whose
constants the parts are cut from) is built on the host's CPU, so no device holds a whole-grid
array.

``ShardedFieldDraws`` is ``driver.FieldDraws`` for such a model: each part's thinned draws and
its sums of x - field_mean and their squares are kept on its device in the compiled chunk; the
host reads them a part at a time (``on_host`` gives ``core.store.field_parts.FieldParts``) as the
run store writes each part into its region and the run's float64 moments fold it: the moments
are kept in parts on the host (and in the checkpoint), so no whole-grid array of the run is
made; only the window's chunk event joins the latest draw and the moments (it shows them).

The driver runs such a model's chunks as TensorFlow graphs placed by their inputs
(``core.engine.placement.program``: XLA compiles a program for one device), with the state's
parts on their devices between chunks (``on_devices``).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from core.engine import sharded_fft
from core.engine.driver import FieldDraws
from core.engine.models import FieldModel
from core.engine.sharded_density import ShardedFieldPosterior
from core.engine.sharded_fft import ShardMesh
from core.store.field_parts import FieldParts, regions_of

__all__ = ["ShardedFieldModel", "ShardedFieldDraws", "mesh_for", "pencil_rows"]


def pencil_rows(devices: int) -> tuple[int, int]:
    """(a, b) with a * b = ``devices`` and a >= b as close as they come (4: 2 x 2, 8: 4 x 2)."""
    b = max(d for d in range(1, int(devices**0.5) + 1) if devices % d == 0)
    return devices // b, b


def mesh_for(shard: str, devices, shape) -> ShardMesh:
    """The mesh of ``field.shard`` over ``devices`` for a grid ``shape``; ValueError naming what
    does not fit (fewer than 2 devices, an axis shorter than the devices it is cut over)."""
    devices = list(devices)
    if len(devices) < 2:
        raise ValueError(f"field.shard = {shard!r} cuts the field over 2 or more devices; this run has "
                         f"{len(devices) or 1} (sampler.devices)")
    if shard == "slab":
        return ShardMesh.slabs(devices, shape)
    return ShardMesh.pencils(devices, shape, *pencil_rows(len(devices)))


class ShardedFieldModel(FieldModel):
    """``FieldModel`` of ``config`` with its field cut over ``devices`` (module docstring)."""

    sharded = True

    def __init__(self, config, devices, view: bool = False):
        """``view``: the first device's program alone (``ShardMesh.device_view``: its memory by
        XLA's account, ``bench/device_memory.py --shard``); its chunks run, its draws are one
        part's and the host cannot join them."""
        with tf.device("/CPU:0"):          # the whole model's constants: the host's
            super().__init__(config)
        from core.io import LoadError
        try:
            self.mesh = mesh_for(config.field.shard, devices, self.grid.shape)
            if view:
                self.mesh = self.mesh.device_view()
            self.density = ShardedFieldPosterior(self.posterior, self.mesh)
        except ValueError as err:
            raise LoadError(f"{config.data_path}: {err}") from None
        self.part_devices = list(self.mesh.devices) + ([""] if self.param_names else [])
        self.interweaving = None            # its latent is in parts: no centred move (the whole one's)
        with tf.device("/CPU:0"):
            shell, weight = self._shell.numpy(), self._power_weight.numpy()
        self._shell_parts = self.density._placed(shell, spectrum=True)           # noqa: SLF001
        self._weight_parts = self.density._placed(weight, spectrum=True)         # noqa: SLF001
        empty = np.broadcast_to(np.int8(0), self.grid.shape)
        self.part_shapes = [tuple(p.shape) for p in sharded_fft.cut(empty, self.mesh)]
        # each part's region of the grid: where the store writes it (``FieldParts``)
        self.field_regions = regions_of(self.grid.shape, self.mesh.rows)[:len(self.part_shapes)]

    def initial_state(self, chains: int, seed: int):
        """``FieldModel``'s initial state (the same draws, made on the host), its latent cut into
        the mesh's parts on their devices."""
        with tf.device("/CPU:0"):
            whole = self.posterior.initial_state(chains, seed)
        return sharded_fft.shard(whole[0], self.mesh) + list(whole[1:])

    def split(self, parts):
        """(the latent's parts, eta or None) of a state list."""
        return self.density.split_state(parts)

    @property
    def target_log_prob_fn(self):
        return self.density.log_prob

    @property
    def target_log_prob_and_field(self):
        """parts -> (log p, the field's parts) (``FieldModel.target_log_prob_and_field``, whose
        aux is [the field])."""
        return self.density.log_prob_and_signal

    def params(self, parts):
        latent, eta = self.split(parts)
        if eta is None:
            return tf.zeros([tf.shape(latent[0])[0], 0], self.dtype)
        theta = self.posterior.hyperparameters(eta)
        return tf.stack([theta[n] for n in self.param_names], axis=-1)

    def field(self, parts):
        """The field's parts (with the field mean), each on its device."""
        mean, out = self.observations.field_mean, []
        for f, device in zip(self.density.field(*self.split(parts)), self.mesh.devices):
            with tf.device(device):
                out.append(f + mean)
        return out

    def field_power(self, x_parts):
        """Shell-averaged P(k) of the fields whose parts are ``x_parts`` (``FieldModel.field_power``):
        each device sums its part of the spectrum over the shells; the sums are added."""
        spectrum = sharded_fft.rfft3d(x_parts, self.mesh)
        sums = []
        for part, weight, shell, device in zip(spectrum, self._weight_parts, self._shell_parts, self.mesh.devices):
            with tf.device(device):
                per_mode = tf.math.real(part * tf.math.conj(part)) * weight
                flat = tf.reshape(per_mode, [tf.shape(part)[0], -1])
                sums.append(tf.transpose(tf.math.unsorted_segment_sum(
                    tf.transpose(flat), tf.reshape(shell, [-1]), self._n_bins)))
        return tf.add_n(sums)[:, :-1] * self._inv_counts

    def density_terms(self, parts):
        """``FieldModel.density_terms`` at the whole state (the parts joined on the host: this runs
        only to say why the initial state's log-density is not finite)."""
        latent, eta = self.split(parts)
        with tf.device("/CPU:0"):
            whole = [sharded_fft.gather([tf.identity(p) for p in latent], self.mesh)]
            return super().density_terms(whole + ([eta] if eta is not None else []))

    def with_data(self, data):
        raise NotImplementedError("a sharded field runs one posterior (calibration refuses field.shard)")

    def state_problem(self, parts) -> str | None:
        """Why a checkpoint's state ``parts`` is not this mesh's (a run cut over other devices),
        or None."""
        n = len(self.mesh.devices)
        shapes = [tuple(int(d) for d in p.shape[1:]) for p in parts[:n]]
        if len(parts) == len(self.part_devices) and shapes == self.part_shapes:
            return None
        return (f"this run's field was cut into {len(parts) - (len(self.part_devices) - n)} parts; "
                f"field.shard = {self.config.field.shard!r} over {n} devices cuts it into {n}: resume it "
                "with the devices it ran on (sampler.devices or --devices)")

    def on_devices(self, parts: list) -> list:
        """State-shaped ``parts`` (a list a state part) each copied to its part's device (eager:
        a restored checkpoint's, a scale set between chunks)."""
        out = []
        for value, device in zip(parts, self.part_devices):
            if device and isinstance(value, tf.Tensor) and value.device != device:
                with tf.device(device):
                    value = tf.identity(value)
            out.append(value)
        return out


class ShardedFieldDraws(FieldDraws):
    """``FieldDraws`` of a ``ShardedFieldModel``: a carry of (each part's draws, the P(k) draws,
    their count, (count, each part's sum, each part's sum of squares)) (module docstring)."""

    def start(self, carry, view, draws: bool):
        model, dtype, chains = self.model, view.dtype, self.chains
        keeps = bool(draws)
        rows = max(self.max_fields, 1)
        fields, totals, squares = [], [], []
        for shape, device in zip(model.part_shapes, model.mesh.devices):
            with tf.device(device):
                fields.append(tf.zeros([rows, chains, *shape] if keeps else [1], dtype))
                totals.append(tf.zeros(shape if keeps else [1], dtype))
                squares.append(tf.zeros(shape if keeps else [1], dtype))
        power_buf = tf.zeros([rows, chains, len(model.k_centres)] if keeps else [1], dtype)
        return (fields, power_buf, tf.constant(0), (tf.constant(0.0, tf.float64), totals, squares)), keeps

    def for_chains(self, chains: int):
        raise NotImplementedError("a sharded field's chains run on every device of its mesh")

    def on_host(self, carry):
        """The carry with each part's draws and sums as ``FieldParts``: still on their devices,
        each read to the host only as the store writes it or the moments fold it (a part at a
        time: the host never holds the whole grid's draws)."""
        fields, power_buf, n_fields, (count, totals, squares) = carry

        if len(totals[0].shape) == 1:           # a chunk that kept nothing
            return fields[0], power_buf, n_fields, (count, totals[0], squares[0])

        def parts(values):
            return FieldParts(self.model.grid.shape, self.model.field_regions, tuple(values))
        return parts(fields), power_buf, n_fields, (count, parts(totals), parts(squares))


ShardedFieldModel.observer_class = ShardedFieldDraws
