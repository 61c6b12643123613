"""Field draws and moments stored in blocks (``core.store.run_store``: field blocks): a plane
or a block of a draw reads only the chunk files it crosses (bytes counted by the kernel:
``rchar`` of /proc/self/io), the blocks are compressed losslessly and checksummed, the disk
estimate bounds the real files, xarray reads the blocked store, and a store written with the
old chunking (one chunk per draw of one chain) still reads and resumes."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
from numcodecs import CRC32

from core.store.run_record import zero_stats
from core.store.run_store import (
    FIELD_BLOCK,
    STORE_NAME,
    ChunkRecord,
    RunReader,
    RunStoreError,
    RunStoreWriter,
    field_chunks,
    field_draw_disk_bytes,
)

CHAINS = 2


def _stats(n):
    return zero_stats(CHAINS, n)


def write_blocked(run_dir: Path, grid, n_draws: int, seed: int = 3, num_samples: int | None = None):
    """A store of ``n_draws`` random float32 field draws (every draw kept) and their moments."""
    rng = np.random.default_rng(seed)
    writer = RunStoreWriter.create(
        run_dir, config_text='[model]\nkind = "field"\n', model_kind="field", chains=CHAINS, num_warmup=0,
        num_samples=num_samples or n_draws, thin=1, param_names=[],
        observed={"data": (["x", "y", "z"], rng.normal(size=grid))}, grid_shape=grid,
        k_centres=[0.1, 0.2], k_counts=[6, 12])
    fields = rng.normal(size=(CHAINS, n_draws, *grid)).astype(np.float32)
    mean, std = fields.mean(axis=(0, 1), dtype=np.float64), fields.std(axis=(0, 1), dtype=np.float64)
    writer.append(ChunkRecord(_stats(0), _stats(n_draws), {}, {}, fields=fields,
                              powers=rng.uniform(size=(CHAINS, n_draws, 2)),
                              field_draw_index=np.arange(n_draws), moments=(mean, std, CHAINS * n_draws)),
                  {"warmup_draws": 0, "draws": n_draws, "field_draws": n_draws, "chunks": 1})
    return writer, fields, mean, std


def _rchar() -> int:
    with open("/proc/self/io") as fh:
        for line in fh:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def _bytes_read(fn):
    before = _rchar()
    out = fn()
    return out, _rchar() - before


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counts bytes with Linux's /proc/self/io")
def test_a_plane_or_a_block_reads_only_the_blocks_it_crosses(tmp_path):
    grid = (4 * FIELD_BLOCK, 2 * FIELD_BLOCK, 2 * FIELD_BLOCK)       # 4 x 2 x 2 blocks per draw
    _, fields, mean, _ = write_blocked(tmp_path / "run", grid, 2)
    reader = RunReader(tmp_path / "run")
    assert reader.field_chunk_shape == (FIELD_BLOCK,) * 3
    reader.field_slice(0, 0, 0, chain=0)                   # opens the array (metadata) once
    draw, whole = _bytes_read(lambda: np.asarray(reader.field_volume(1).chain(1)))
    np.testing.assert_array_equal(draw, fields[1, 1])
    raw = math.prod(grid) * 4
    assert 0.8 * raw < whole < 1.01 * raw                 # compressed a little, read whole
    for axis in range(3):
        position = grid[axis] - 5
        plane, got = _bytes_read(lambda: reader.field_slice(1, axis, position, chain=1))
        np.testing.assert_array_equal(plane, np.take(fields[1, 1], position, axis=axis))
        share = FIELD_BLOCK / grid[axis]                   # the blocks one plane crosses
        assert got < (share + 0.05) * whole, (axis, got, whole)
    block, got = _bytes_read(lambda: reader.field_block(1, (slice(40, 60), slice(3, 9), 33), chain=0))
    np.testing.assert_array_equal(block, fields[0, 1, 40:60, 3:9, 33])
    assert got < (2 / 16 + 0.05) * whole                  # 2 of the 16 blocks
    # the lazy volume and the moments read the same way; a voxel's trace one block per draw
    volume = reader.field_volume(0)
    np.testing.assert_array_equal(volume[1, :, 7, :], fields[1, 0, :, 7, :])
    np.testing.assert_array_equal(volume.chain(0).plane(2, 63), fields[0, 0, :, :, 63])
    moment, got = _bytes_read(lambda: reader.moment_volume("mean").plane(1, 2))
    np.testing.assert_array_equal(moment, mean[:, 2, :])
    assert got < (0.5 + 0.05) * 2 * whole                 # float64: twice a draw's bytes
    trace, got = _bytes_read(lambda: reader.voxel_trace((100, 10, 50)))
    np.testing.assert_array_equal(trace, fields[:, :, 100, 10, 50])
    assert got < 4 * (FIELD_BLOCK ** 3 * 4) * 1.05         # 2 chains x 2 draws, one block each


def test_blocks_are_lossless_checksummed_and_fit_the_disk_estimate(tmp_path):
    grid = (40, 33, 20)                                   # partial blocks at the far ends
    n = 3
    _, fields, _, _ = write_blocked(tmp_path / "run", grid, n)
    reader = RunReader(tmp_path / "run")
    np.testing.assert_array_equal(reader.field_draws(), fields)     # bit for bit
    folder = tmp_path / "run" / STORE_NAME / "posterior_field" / "field"
    meta = json.loads((folder / ".zarray").read_text())
    assert meta["chunks"] == list(field_chunks(grid)) == [1, 1, 32, 32, 20]
    assert meta["compressor"] is None and [f["id"] for f in meta["filters"]] == ["blosc", "crc32"]
    files = [p for p in folder.iterdir() if not p.name.startswith(".")]
    assert len(files) == CHAINS * n * 2 * 2 * 1
    raw = math.prod(grid) * 4 * CHAINS * n
    stored = sum(p.stat().st_size for p in files)
    on_disk = sum(p.stat().st_blocks * 512 for p in files)
    estimate = field_draw_disk_bytes(grid) * CHAINS * n
    assert stored < 0.97 * raw                            # the bit-shuffled exponents compress
    assert on_disk <= estimate                            # the estimate is an upper bound ...
    assert raw <= estimate < 1.15 * raw                   # ... and a close one
    # a garbled block fails when a read crosses it, naming its file; the others still read
    victim = folder / "1.2.1.0.0"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    reader.refresh()
    np.testing.assert_array_equal(reader.field_slice(2, 0, 5, chain=1), fields[1, 2, 5])
    with pytest.raises(RunStoreError, match=r"1\.2\.1\.0\.0: damaged chunk of posterior_field/field"):
        reader.field_slice(2, 0, 35, chain=1)
    with pytest.raises(RunStoreError, match=r"1\.2\.1\.0\.0"):
        np.asarray(reader.field_volume(2))


def test_xarray_reads_the_blocked_store(tmp_path):
    xr = pytest.importorskip("xarray")
    grid = (48, 40, 36)
    _, fields, mean, std = write_blocked(tmp_path / "run", grid, 2)
    tree = xr.open_datatree(tmp_path / "run" / STORE_NAME, engine="zarr")
    field = tree["posterior_field"].dataset["field"]
    assert field.dims == ("chain", "field_draw", "x", "y", "z") and field.shape == (CHAINS, 2, *grid)
    np.testing.assert_array_equal(field.isel(chain=1, field_draw=1, y=37).values, fields[1, 1, :, 37, :])
    np.testing.assert_array_equal(field.values, fields)
    np.testing.assert_array_equal(tree["field_moments"].dataset["mean"].values, mean)
    np.testing.assert_array_equal(tree["field_moments"].dataset["std"].values, std)


def _rechunk_to_the_old_layout(store: Path) -> None:
    """Rewrite field draws and moments as the writer did before blocks: one chunk per draw of
    one chain and one per moment, a CRC32 filter before zarr's default compressor."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(str(store), mode="r+", zarr_format=2, use_consolidated=False)
        with zarr.config.set({"array.write_empty_chunks": True}):
            for group, name in (("posterior_field", "field"), ("field_moments", "mean"),
                                ("field_moments", "std")):
                old = root[group][name]
                values, dims = old[...], old.attrs["_ARRAY_DIMENSIONS"]
                del root[group][name]
                chunks = (1, 1, *values.shape[2:]) if name == "field" else values.shape
                new = root[group].create_array(name, shape=values.shape, chunks=chunks, dtype=values.dtype,
                                               fill_value=None, filters=[CRC32()])
                new.attrs["_ARRAY_DIMENSIONS"] = dims
                new[...] = values
        zarr.consolidate_metadata(str(store))


def test_a_store_with_the_old_chunking_reads_and_resumes(tmp_path):
    grid = (40, 8, 6)
    run = tmp_path / "run"
    _, fields, mean, _ = write_blocked(run, grid, 2, num_samples=4)
    _rechunk_to_the_old_layout(run / STORE_NAME)
    meta = json.loads((run / STORE_NAME / "posterior_field" / "field" / ".zarray").read_text())
    assert meta["chunks"] == [1, 1, *grid] and meta["compressor"]["id"] != "crc32"
    reader = RunReader(run)                                # the layout check passes
    assert reader.field_chunk_shape == grid
    np.testing.assert_array_equal(reader.field_slice(1, 0, 33, chain=0), fields[0, 1, 33])
    np.testing.assert_array_equal(reader.moment_volume("mean").plane(2, 5), mean[:, :, 5])
    np.testing.assert_array_equal(reader.voxel_trace((39, 7, 5)), fields[:, :, 39, 7, 5])
    # a missing chunk of the old layout is still found by the layout check
    victim = run / STORE_NAME / "posterior_field" / "field" / "1.1.0.0.0"
    saved = victim.read_bytes()
    victim.unlink()
    with pytest.raises(RunStoreError, match=r"1\.1\.0\.0\.0: missing chunk file"):
        reader.refresh()
    victim.write_bytes(saved)
    # resume appends to the old chunking
    progress = {"warmup_draws": 0, "draws": 2, "field_draws": 2, "chunks": 1}
    writer = RunStoreWriter.reopen(run, progress)
    more = np.random.default_rng(9).normal(size=(CHAINS, 2, *grid)).astype(np.float32)
    writer.append(ChunkRecord(_stats(0), _stats(2), {}, {}, fields=more, powers=np.ones((CHAINS, 2, 2)),
                              field_draw_index=np.arange(2, 4), moments=(mean, mean, 8)),
                  {"warmup_draws": 0, "draws": 4, "field_draws": 4, "chunks": 2})
    reader = RunReader(run)
    np.testing.assert_array_equal(reader.field_draws(), np.concatenate([fields, more], axis=1))
    assert reader.field_chunk_shape == grid
