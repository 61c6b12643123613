"""A field cut over devices written part by part (``core.store.field_parts``, issue #34): the
store written from parts equals the store written from the whole arrays, the file bytes of
every block included, chunk after chunk; and the write never holds the whole grid on the host
(numpy's allocations, which tracemalloc traces, peak at about one part)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from core.store.field_parts import FieldParts, regions_of
from core.store.run_record import zero_stats
from core.store.run_store import STORE_NAME, ChunkRecord, RunReader, RunStoreWriter

CHAINS = 2


def _writer(run_dir: Path, grid, n_draws: int) -> RunStoreWriter:
    return RunStoreWriter.create(
        run_dir, config_text='[model]\nkind = "field"\n', model_kind="field", chains=CHAINS, num_warmup=0,
        num_samples=n_draws, thin=1, param_names=[],
        observed={"data": (["x", "y", "z"], np.zeros(grid))}, grid_shape=grid,
        k_centres=[0.1, 0.2], k_counts=[6, 12])


def _cut(array, regions, grid) -> FieldParts:
    return FieldParts(grid, regions, tuple(np.ascontiguousarray(array[(..., *r)]) for r in regions))


@pytest.mark.parametrize("grid, rows", [((12, 10, 9), (3, 1)), ((11, 13, 8), (2, 2)), ((7, 9, 5), (4, 2))],
                         ids=["slabs 12x10x9", "pencils 11x13x8", "pencils 7x9x5 over 8"])
def test_a_store_written_in_parts_is_the_store_written_whole(tmp_path, grid, rows):
    regions = regions_of(grid, rows)
    assert len(regions) == rows[0] * rows[1]
    cover = np.zeros(grid, int)
    for region in regions:
        cover[region] += 1
    assert (cover == 1).all()          # the regions tile the grid

    rng = np.random.default_rng(7)
    whole_writer, parts_writer = _writer(tmp_path / "whole", grid, 5), _writer(tmp_path / "parts", grid, 5)
    done = 0
    for chunk, n in enumerate((2, 3)):
        fields = rng.normal(size=(CHAINS, n, *grid)).astype(np.float32)
        mean, std = rng.normal(size=grid), rng.uniform(size=grid)
        powers, index = rng.uniform(size=(CHAINS, n, 2)), np.arange(done, done + n)
        done += n
        progress = {"warmup_draws": 0, "draws": done, "field_draws": done, "chunks": chunk + 1}
        whole_writer.append(ChunkRecord(zero_stats(CHAINS, 0), zero_stats(CHAINS, n), {}, {}, fields=fields,
                                        powers=powers, field_draw_index=index, moments=(mean, std, done)),
                            progress)
        # the parts as the recorder hands them: draws first, transposed as they are read
        parts = _cut(fields.transpose(1, 0, 2, 3, 4), regions, grid).map(lambda a: a.transpose(1, 0, 2, 3, 4))
        parts_writer.append(ChunkRecord(zero_stats(CHAINS, 0), zero_stats(CHAINS, n), {}, {}, fields=parts,
                                        powers=powers, field_draw_index=index,
                                        moments=(_cut(mean, regions, grid), _cut(std, regions, grid), done)),
                            progress)
    a, b = RunReader(tmp_path / "whole"), RunReader(tmp_path / "parts")
    assert np.array_equal(a.field_draws(), b.field_draws())
    assert np.array_equal(b.field_draws(), np.asarray(b.field_draws()))
    for x, y in zip(a.field_moments(), b.field_moments()):
        assert np.array_equal(x, y)
    for group in ("posterior_field/field", "field_moments/mean", "field_moments/std"):
        files = sorted(p.relative_to(tmp_path / "whole" / STORE_NAME / group)
                       for p in (tmp_path / "whole" / STORE_NAME / group).iterdir())
        for name in files:
            assert ((tmp_path / "whole" / STORE_NAME / group / name).read_bytes()
                    == (tmp_path / "parts" / STORE_NAME / group / name).read_bytes()), (group, name)


def test_parts_are_read_one_at_a_time_so_the_host_never_holds_the_whole_grid(tmp_path):
    grid, rows, n = (64, 64, 64), (4, 2), 16
    regions = regions_of(grid, rows)
    whole_bytes = CHAINS * n * int(np.prod(grid)) * 4          # the chunk's draws as one float32 array

    class OnDevice:
        """A part that is made on the host only when read (as a device's tensor is copied)."""

        def __init__(self, shape, seed):
            self.shape, self.seed = shape, seed

        def __array__(self, dtype=None, copy=None):
            return np.random.default_rng(self.seed).standard_normal(self.shape, dtype=np.float32)

    parts = FieldParts(grid, regions, tuple(OnDevice((n, CHAINS, *[r.stop - r.start for r in region]), i)
                                            for i, region in enumerate(regions)))
    record = ChunkRecord(zero_stats(CHAINS, 0), zero_stats(CHAINS, n), {}, {},
                         fields=parts.map(lambda a: a.transpose(1, 0, 2, 3, 4)),
                         powers=np.ones((CHAINS, n, 2)), field_draw_index=np.arange(n))
    writer = _writer(tmp_path / "run", grid, n)
    tracemalloc.start()
    try:
        writer.append(record, {"warmup_draws": 0, "draws": n, "field_draws": n, "chunks": 1})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # zarr's own buffers take a few MB whatever is written; the parts one 8th of the 34 MB each
    assert peak < 0.4 * whole_bytes, (peak, whole_bytes)
    stored = RunReader(tmp_path / "run").field_draws()
    for region, part in parts.each():      # read again: the same numbers, in their regions
        assert np.array_equal(stored[(slice(None), slice(None), *region)], part.transpose(1, 0, 2, 3, 4))
