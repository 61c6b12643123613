"""The 3-D real FFTs of a field sharded over devices: slabs (x split over D devices) or pencils
(x over a, y over b devices), with exact gradients to any order (issue #34, item 2).

Why not DTensor: measured (``bench/dtensor_fft.py``, docs/benchmarks.md) it distributes the
complex fft3d but refuses rfft3d and irfft3d on any sharded grid, and shards only evenly
divisible axes. So the transforms here are written out: per-device transforms over the local
axes (``core.engine.fft.rfftnd`` / ``irfftnd`` for the real ones, with the project's gradient
conventions; ``core.engine.fft.complex_fft_axes`` for the complex 1-D ones) between all-to-all
exchanges, each part placed on its device with ``tf.device`` (TensorFlow copies a part to the
device that needs it: on one host's GPUs, device to device). Every step is differentiable, so
the VJPs and Hessian-vector products are those of the composition, exactly the unsharded
``core.engine.fft`` ones (tested to float64 round-off on logical CPU devices, even, odd and
non-cubic grids, uneven splits included).

Layouts (leading batch axes, e.g. chains, ride along unsplit; the grid is the last 3 axes):

  slab    real field: part i on device i holds x rows ``mesh.x_parts[i]`` (n0_i, N1, N2);
          spectrum:   part j holds all kx, the ky of ``mesh.y_parts[j]``, every stored kz
                      (N0, m1_j, N2 // 2 + 1)
          rfft3d: local 2-D rfft over (y, z), exchange (x rows -> ky columns), 1-D FFT over x.
  pencil  real field: part (i, j) holds x rows i of a, y rows j of b (n0_i, n1_j, N2);
          spectrum:   part (i, j) holds all kx, ky part i of a, kz part j of b
                      (N0, p1_i, q2_j)
          rfft3d: local 1-D rfft over z, exchange within each row of devices (y gathered, kz
          split), FFT over y, exchange within each column (x gathered, ky split), FFT over x.

The inverse transforms run the same steps backwards; their Hermitian convention is
``core.engine.fft``'s (the anti-Hermitian part on the self-conjugate planes is ignored: the
2-D / 1-D inverse real transforms at the end see exactly the 3-D Hermitian part).

Splits are as even as possible (``split_sizes``); an axis shorter than its device count is
refused (a part with no rows would reach an FFT kernel with a zero-length axis).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import tensorflow as tf

from core.engine.fft import complex_fft_axes, irfftnd, rfftnd

__all__ = ["ShardMesh", "split_sizes", "cut", "shard", "gather", "rfft3d", "irfft3d"]


def split_sizes(n: int, parts: int) -> list[int]:
    """``n`` rows in ``parts`` contiguous parts, the first ``n % parts`` one row longer."""
    base, extra = divmod(n, parts)
    return [base + (i < extra) for i in range(parts)]


@dataclass(frozen=True)
class ShardMesh:
    """A grid ``shape`` (N0, N1, N2) over ``devices`` (TensorFlow device names) as slabs
    (``rows`` = (D, 1)) or pencils (``rows`` = (a, b), a * b = D; device (i, j) is
    ``devices[i * b + j]``)."""

    devices: tuple[str, ...]
    shape: tuple[int, int, int]
    rows: tuple[int, int]
    view: bool = False          # one device's view of the mesh (``device_view``)

    @classmethod
    def slabs(cls, devices: Sequence[str], shape) -> "ShardMesh":
        return cls._checked(tuple(devices), tuple(int(n) for n in shape), (len(devices), 1))

    @classmethod
    def pencils(cls, devices: Sequence[str], shape, a: int, b: int) -> "ShardMesh":
        if a * b != len(devices):
            raise ValueError(f"a pencil mesh of {a} x {b} needs {a * b} devices, not {len(devices)}")
        return cls._checked(tuple(devices), tuple(int(n) for n in shape), (a, b))

    @classmethod
    def _checked(cls, devices, shape, rows) -> "ShardMesh":
        if len(shape) != 3 or min(shape) < 1:
            raise ValueError(f"grid {shape}: three positive sizes")
        mesh = cls(devices, shape, rows)
        a, b = rows
        needs = [("x", shape[0], a), ("y", shape[1], b if b > 1 else a)]
        if b > 1:
            needs += [("ky", shape[1], a), ("kz", shape[2] // 2 + 1, b)]
        for axis, n, parts in needs:
            if n < parts:
                raise ValueError(f"grid {shape}: its {axis} axis ({n}) is shorter than the {parts} devices "
                                 "it is split over")
        return mesh

    @property
    def is_slab(self) -> bool:
        return self.rows[1] == 1

    def device_view(self) -> "ShardMesh":
        """The program of this mesh's first device (its part the largest) alone: its parts, its
        transforms and its densities on that device's part only, each all-to-all replaced by a
        local stand-in with the collective's input and output shapes (``_exchange``). Its values
        are not the sharded ones; its buffers are: XLA compiles it for one device, and its buffer
        assignment is the per-device memory of a sharded chunk (``bench/device_memory.py
        --shard``, ``core.run.resources``). ``gather`` refuses it."""
        return ShardMesh(self.devices[:1], self.shape, self.rows, view=True)

    def device(self, i: int, j: int = 0) -> str:
        return self.devices[i * self.rows[1] + j]


def cut(array, mesh: ShardMesh, spectrum: bool = False) -> list:
    """The parts of a whole array (..., N0, N1, N2), or with ``spectrum`` a half-spectrum's
    (..., N0, N1, N2 // 2 + 1), in the mesh's layout (module docstring), part k for
    ``mesh.devices[k]``; numpy arrays and tensors alike (``gather`` is its inverse). Where
    they are is the caller's: ``shard`` places them."""
    a, b = mesh.rows
    split = tf.split if isinstance(array, tf.Tensor) else \
        (lambda t, sizes, axis: np.split(t, np.cumsum(sizes)[:-1], axis=axis))
    if spectrum:        # all kx; ky over a; (pencils) kz over b
        rows = split(array, split_sizes(mesh.shape[1], a), axis=-2)
        if mesh.is_slab:
            return _viewed(list(rows), mesh)
        return _viewed([cell for row in rows for cell in split(row, split_sizes(mesh.shape[2] // 2 + 1, b), axis=-1)],
                       mesh)
    rows = split(array, split_sizes(mesh.shape[0], a), axis=-3)
    if mesh.is_slab:
        return _viewed(list(rows), mesh)
    return _viewed([cell for row in rows for cell in split(row, split_sizes(mesh.shape[1], b), axis=-2)], mesh)


def _viewed(parts: list, mesh: ShardMesh) -> list:
    """``parts``, or the first alone for a device view."""
    return parts[:1] if mesh.view else parts


def shard(field, mesh: ShardMesh, spectrum: bool = False) -> list[tf.Tensor]:
    """The parts of ``field`` (..., N0, N1, N2), or of a half-spectrum with ``spectrum``, on
    their devices (slab: D parts; pencil: a * b parts, row-major)."""
    parts = []
    for part, device in zip(cut(field, mesh, spectrum), mesh.devices):
        with tf.device(device):
            parts.append(tf.identity(part))
    return parts


def gather(parts: Sequence, mesh: ShardMesh, spectrum: bool = False):
    """The whole array from its parts (a field's, or with ``spectrum`` a spectrum's), on the
    current device: for checks and writes that need it whole; numpy parts give a numpy array
    (the host's: a sharded run's draws as the store takes them)."""
    if mesh.view:
        raise ValueError("a device view holds one device's part: it has no whole to gather")
    a, b = mesh.rows
    concat = tf.concat if isinstance(parts[0], tf.Tensor) else (lambda ps, axis: np.concatenate(ps, axis=axis))
    if mesh.is_slab:
        return concat(list(parts), axis=-2 if spectrum else -3)
    rows = [concat(list(parts[i * b:(i + 1) * b]), axis=-1 if spectrum else -2) for i in range(a)]
    return concat(rows, axis=-2 if spectrum else -3)


def _exchange(parts, gather_axis: int, split_axis: int, sizes, devices, gathered):
    """All-to-all among ``parts`` (one per device of ``devices``): part k is split along
    ``split_axis`` into ``sizes``; device m receives piece m of every part, concatenated along
    ``gather_axis`` (where part k is ``gathered[k]`` long).

    A device view (one part where ``sizes`` has several) gets the stand-in of its collective:
    the output it would receive, its shape exactly, made of slices of its own first piece. XLA
    holds its input and its output as it would the all-to-all's."""
    if len(parts) < len(sizes):
        (part,) = parts
        first = tf.split(part, sizes, axis=split_axis)[0]
        full = first.shape[gather_axis]
        received = [first if g == full else tf.split(first, [g, full - g], axis=gather_axis)[0] for g in gathered]
        return [tf.concat(received, axis=gather_axis)]
    pieces = [_split_on(part, sizes, split_axis, device) for part, device in zip(parts, devices)]
    out = []
    for m, device in enumerate(devices):
        with tf.device(device):
            out.append(tf.concat([p[m] for p in pieces], axis=gather_axis))
    return out


def _split_on(part, sizes, axis: int, device: str) -> list[tf.Tensor]:
    """``tf.split`` on ``device``, its gradient (the pieces' gradients joined) there too: TensorFlow
    would make that concat where no one placed it, on the default device, gathering every part
    there. (The concat's gradient, slices of its own input, follows it: ``core.engine.placement``.)"""
    @tf.custom_gradient
    def split(part):
        with tf.device(device):
            pieces = tf.split(part, sizes, axis=axis)

        def grad(*upstream):
            with tf.device(device):
                return tf.concat(list(upstream), axis=axis)
        return pieces, grad
    return list(split(part))


def _exchange_in_groups(parts, mesh: ShardMesh, groups, gather_axis: int, split_axis: int, sizes, gathered):
    """``_exchange`` within each group of devices (lists of part indices: a pencil mesh's rows or
    columns)."""
    out = [None] * len(parts)
    for group in groups:
        exchanged = _exchange([parts[k] for k in group], gather_axis, split_axis, sizes,
                              [mesh.devices[k] for k in group], gathered)
        for k, t in zip(group, exchanged):
            out[k] = t
    return out


def _on_each(fn, parts, devices) -> list[tf.Tensor]:
    """``fn`` of each part, computed on its device."""
    out = []
    for part, device in zip(parts, devices):
        with tf.device(device):
            out.append(fn(part))
    return out


def _groups(mesh: ShardMesh):
    """(rows, columns) of a pencil mesh as lists of part indices."""
    if mesh.view:
        return [[0]], [[0]]
    a, b = mesh.rows
    return [[i * b + j for j in range(b)] for i in range(a)], [[i * b + j for i in range(a)] for j in range(b)]


def rfft3d(parts: Sequence[tf.Tensor], mesh: ShardMesh) -> list[tf.Tensor]:
    """The half-spectrum (numpy's rfftn over the last 3 axes) of the field whose parts are
    ``parts`` (``shard``'s layout), in the mesh's spectrum layout (module docstring)."""
    n0, n1, n2 = mesh.shape
    a, b = mesh.rows
    devices = list(mesh.devices)

    def along_x(t):
        return complex_fft_axes(t, [-3], inverse=False)

    if mesh.is_slab:
        local = _on_each(lambda t: rfftnd(t, fft_length=[n1, n2], axes=[-2, -1]), parts, devices)
        return _on_each(along_x, _exchange(local, -3, -2, split_sizes(n1, a), devices, split_sizes(n0, a)),
                        devices)
    # pencils: z, then y within each row of devices, then x within each column
    rows, columns = _groups(mesh)
    z = _on_each(lambda t: rfftnd(t, fft_length=[n2], axes=[-1]), parts, devices)
    z = _exchange_in_groups(z, mesh, rows, -2, -1, split_sizes(n2 // 2 + 1, b), split_sizes(n1, b))
    y = _on_each(lambda t: complex_fft_axes(t, [-2], inverse=False), z, devices)
    return _on_each(along_x, _exchange_in_groups(y, mesh, columns, -3, -2, split_sizes(n1, a), split_sizes(n0, a)),
                    devices)


def irfft3d(parts: Sequence[tf.Tensor], mesh: ShardMesh) -> list[tf.Tensor]:
    """The real field (``shard``'s layout) whose half-spectrum has the parts ``parts`` (the
    mesh's spectrum layout): ``core.engine.fft.irfft3d`` on the whole, computed in parts."""
    n0, n1, n2 = mesh.shape
    a, b = mesh.rows
    devices = list(mesh.devices)
    x = _on_each(lambda t: complex_fft_axes(t, [-3], inverse=True), parts, devices)
    if mesh.is_slab:
        rows = _exchange(x, -2, -3, split_sizes(n0, a), devices, split_sizes(n1, a))
        return _on_each(lambda t: irfftnd(t, fft_length=[n1, n2], axes=[-2, -1]), rows, devices)
    rows, columns = _groups(mesh)
    x = _exchange_in_groups(x, mesh, columns, -2, -3, split_sizes(n0, a), split_sizes(n1, a))
    y = _on_each(lambda t: complex_fft_axes(t, [-2], inverse=True), x, devices)
    y = _exchange_in_groups(y, mesh, rows, -1, -2, split_sizes(n1, b), split_sizes(n2 // 2 + 1, b))
    return _on_each(lambda t: irfftnd(t, fft_length=[n2], axes=[-1]), y, devices)
