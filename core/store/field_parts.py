"""A field-shaped array held in parts: a field cut over devices (``field.shard``, issue #34),
which the run store writes part by part, so that no whole-grid array of it is made on the host.

``FieldParts`` is the grid's shape, each part's region of it (slices of the last three axes)
and the parts themselves: anything ``np.asarray`` reads (a device's tensor, a numpy array),
all with the same leading axes. ``map`` applies a numpy function to every part, lazily: a
part is read from its device only when ``each`` reaches it, so a store write holds one part at
a time on the host. ``whole`` joins them (what the window's events carry: it shows whole
fields). numpy only: the engine makes them, the store writes them (``append_draws``,
``write_grid``, on its zarr arrays).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

__all__ = ["FieldParts", "regions_of", "append_draws", "write_grid"]

Region = tuple[slice, slice, slice]


def regions_of(shape: Sequence[int], rows: tuple[int, int]) -> tuple[Region, ...]:
    """The regions of a grid ``shape`` cut as ``rows`` = (a, b): axis 0 in a contiguous parts, axis
    1 in b (b = 1: slabs), the first ``n % parts`` of an axis one row longer, row-major
    (``core.engine.sharded_fft.cut``'s parts, in its order)."""
    def bounds(n: int, parts: int) -> list[slice]:
        base, extra = divmod(int(n), parts)
        ends = np.cumsum([base + (i < extra) for i in range(parts)])
        return [slice(int(e - base - (i < extra)), int(e)) for i, e in enumerate(ends)]

    a, b = rows
    return tuple((x, y, slice(0, int(shape[2]))) for x in bounds(shape[0], a) for y in bounds(shape[1], b))


def _compose(first: Callable | None, then: Callable) -> Callable:
    return then if first is None else (lambda array: then(first(array)))


@dataclass(frozen=True)
class FieldParts:
    """(module docstring) ``grid``: the whole's last three axes; ``regions``: each part's slices of
    them; ``parts``: the parts; ``take``: applied to each part (as numpy) when it is read."""

    grid: tuple[int, int, int]
    regions: tuple[Region, ...]
    parts: tuple[Any, ...]
    take: Callable | None = None

    def __post_init__(self):
        if len(self.regions) != len(self.parts):
            raise ValueError(f"{len(self.parts)} parts for {len(self.regions)} regions")

    @classmethod
    def zeros(cls, grid, regions, dtype=np.float64) -> "FieldParts":
        """Host arrays of zeros, one a region (a run's moment totals)."""
        return cls(tuple(grid), tuple(regions),
                   tuple(np.zeros([r.stop - r.start for r in region], dtype) for region in regions))

    def map(self, fn: Callable[[np.ndarray], np.ndarray]) -> "FieldParts":
        """``fn`` applied to every part (numpy in, numpy out; it keeps the last three axes), when read."""
        return FieldParts(self.grid, self.regions, self.parts, _compose(self.take, fn))

    def each(self) -> Iterator[tuple[Region, np.ndarray]]:
        """(region, the part as a numpy array), one part at a time."""
        for region, part in zip(self.regions, self.parts):
            array = np.asarray(part)
            yield region, (array if self.take is None else self.take(array))

    def whole(self) -> np.ndarray:
        """The whole array (the leading axes, then ``grid``) on the host."""
        out = None
        for region, part in self.each():
            if out is None:
                out = np.empty((*part.shape[:-3], *self.grid), part.dtype)
            out[(..., *region)] = part
        return out


def append_draws(array, fields, n: int) -> None:
    """``n`` draws of every chain, (chains, n, x, y, z) whole or in ``FieldParts``, appended to the
    store's (chain, field_draw, x, y, z) zarr array as float32: a part at a time into its region."""
    if not isinstance(fields, FieldParts):
        array.append(fields.astype(np.float32, copy=False), axis=1)
        return
    old = array.shape[1]
    array.resize((array.shape[0], old + n, *array.shape[2:]))
    for region, part in fields.each():
        array[(slice(None), slice(old, old + n), *region)] = part.astype(np.float32, copy=False)


def write_grid(array, value) -> None:
    """A grid-shaped value (a moment), whole or in ``FieldParts``, over the zarr array's contents."""
    for region, part in (value.each() if isinstance(value, FieldParts) else [((...,), value)]):
        array[region] = part
