"""A field-shaped array of a run store, read block by block when indexed (``FieldVolume``).

Made by ``core.store.run_store.RunReader`` (``field_volume``, ``moment_volume``), which reads
for it; it holds no values of its own.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["FieldVolume"]


class FieldVolume:
    """A field-shaped array of a run store (a field draw, a moment), read when indexed.

    Made by ``RunReader.field_volume`` and ``moment_volume``. ``volume[key]`` (integers and
    slices, one per axis or fewer) reads just the blocks the selection covers, through the
    reader (so a damaged block raises RunStoreError naming its file); ``np.asarray(volume)``
    reads it all. ``chain(c)`` is the (x, y, z) volume of one chain of a draw, still unread;
    ``plane(axis, position)`` one plane of an (x, y, z) volume. It holds no values: what it
    gives is read from the store each time (the moments are rewritten after every chunk,
    so a moment volume reads the latest ones). Safe to index from a worker thread while
    the owning thread refreshes the reader.
    """

    def __init__(self, reader, group: str, name: str, lead: tuple, shape, dtype):
        self.reader = reader
        self.group, self.name = group, name
        self._lead = tuple(lead)
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"FieldVolume({self.group}/{self.name}{list(self._lead) or ''}, shape={self.shape})"

    def _key(self, key) -> tuple:
        key = key if isinstance(key, tuple) else (key,)
        if any(k is Ellipsis for k in key):
            at = next(i for i, k in enumerate(key) if k is Ellipsis)
            key = key[:at] + (slice(None),) * (self.ndim - len(key) + 1) + key[at + 1:]
        if len(key) > self.ndim or not all(isinstance(k, (slice, int, np.integer)) for k in key):
            raise IndexError(f"{self!r}: only integers and slices index a stored volume, not {key!r}")
        return key + (slice(None),) * (self.ndim - len(key))

    def __getitem__(self, key) -> np.ndarray:
        key = self._key(key)
        # the chain axis of a draw comes first in the lead, then the draw index
        if self._lead and isinstance(self._lead[0], slice):
            selection = (key[0], self._lead[1], *key[1:])
        else:
            selection = (*self._lead, *key)
        return self.reader._read(self.group, self.name, selection)

    def __array__(self, dtype=None, copy=None):
        values = self[...]
        return values if dtype is None else values.astype(dtype, copy=False)

    def astype(self, dtype, copy: bool = True) -> np.ndarray:
        return self[...].astype(dtype, copy=copy)

    def chain(self, chain: int) -> "FieldVolume":
        """The (x, y, z) volume of chain ``chain`` of a draw (nothing read)."""
        if not (self._lead and isinstance(self._lead[0], slice)):
            raise ValueError(f"{self!r} has no chain axis")
        chain = int(chain)
        if not 0 <= chain < self.shape[0]:
            raise IndexError(f"{self!r}: no chain {chain}")
        return FieldVolume(self.reader, self.group, self.name, (chain, self._lead[1]), self.shape[1:], self.dtype)

    def plane(self, axis: int, position: int) -> np.ndarray:
        """The plane at ``position`` along ``axis`` of an (x, y, z) volume (its blocks only)."""
        key = [slice(None)] * self.ndim
        key[self.ndim - 3 + int(axis)] = int(position)
        return self[tuple(key)]

    @property
    def block_shape(self) -> tuple[int, ...]:
        """The (x, y, z) extent of one stored block (what one chunk file holds)."""
        arr = self.reader._meta.get((self.group, self.name))
        return tuple(arr["chunks"][-3:]) if arr is not None else self.shape[-3:]
