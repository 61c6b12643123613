"""Benchmark: what one plane of a stored field draw costs against the whole draw.

For each grid (default 128^3 and 256^3) a run store of --draws random float32 field draws
(2 chains; Gaussian random fields with a red spectrum, like posterior draws, so that the
compression figure is not that of white noise) is written with RunStoreWriter (no
TensorFlow), then read back through RunReader, round robin over the grids, median of
--repeats each, the page cache dropped for the store's files before every read
(``posix_fadvise(DONTNEED)``, so "cold" is a read from disk where the kernel honours it):

  write      seconds to append one field draw of both chains (compression, CRC32, files)
  disk       bytes on disk per field draw of one chain (st_blocks), against the raw values
             and the estimate ``field_draw_disk_bytes`` (the Sampler panel's and the disk check's)
  draw       read one chain's whole draw (np.asarray of its FieldVolume)
  xy/xz/yz   read one plane of it (RunReader.field_slice)
  block      read one 32^3 block (RunReader.field_block)

Bytes read are the kernel's count of this process's read() calls (``rchar`` of
/proc/self/io, Linux), so they include the chunk files' headers and nothing is assumed.
Prints the median time and bytes of each, and the ratios plane / draw, measured side by
side in one run. This process imports no TensorFlow.
Usage: python bench/store_reads.py [--sizes 128 256] [--draws 3] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.store.run_record import zero_stats  # noqa: E402
from core.store.run_store import FIELD_BLOCK, STORE_NAME, ChunkRecord, RunReader, RunStoreWriter, field_draw_disk_bytes  # noqa: E402

CHAINS = 2


def red_field(rng, n: int) -> np.ndarray:
    """A Gaussian random field with P(k) ~ k^-1.5 on an n^3 grid, float32, unit variance."""
    k2 = (np.fft.fftfreq(n)[:, None, None] ** 2 + np.fft.fftfreq(n)[None, :, None] ** 2
          + np.fft.rfftfreq(n)[None, None, :] ** 2)
    with np.errstate(divide="ignore"):
        amp = np.where(k2 > 0, k2 ** -0.375, 0.0)
    f = np.fft.irfftn(np.fft.rfftn(rng.standard_normal((n, n, n), np.float32)) * amp, s=(n, n, n),
                      axes=(0, 1, 2))
    return (f / f.std()).astype(np.float32)


def rchar() -> int:
    with open("/proc/self/io") as fh:
        for line in fh:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


def drop_cache(folder: Path) -> None:
    for entry in os.scandir(folder):
        if entry.is_file():
            fd = os.open(entry.path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def stats(n: int) -> dict:
    return zero_stats(CHAINS, n)


def write_store(run_dir: Path, n: int, draws: int, rng) -> list[float]:
    grid = (n, n, n)
    writer = RunStoreWriter.create(
        run_dir, config_text='[model]\nkind = "field"\n', model_kind="field", chains=CHAINS, num_warmup=0,
        num_samples=draws, thin=1, param_names=[], observed={}, grid_shape=grid,
        k_centres=[0.1, 0.2], k_counts=[6, 12])
    seconds = []
    for d in range(draws):
        fields = np.stack([red_field(rng, n) for _ in range(CHAINS)])[:, None]
        record = ChunkRecord(stats(0), stats(1), {}, {}, fields=fields, powers=np.ones((CHAINS, 1, 2)),
                             field_draw_index=np.asarray([d]))
        t0 = time.perf_counter()
        writer.append(record, {"warmup_draws": 0, "draws": d + 1, "field_draws": d + 1, "chunks": d + 1})
        seconds.append(time.perf_counter() - t0)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="fieldscope-store-reads-") as tmp:
        readers, written = {}, {}
        for n in args.sizes:
            run = Path(tmp) / f"run{n}"
            written[n] = write_store(run, n, args.draws, rng)
            readers[n] = RunReader(run)
        folder = {n: Path(tmp) / f"run{n}" / STORE_NAME / "posterior_field" / "field" for n in args.sizes}
        mid = {n: n // 2 for n in args.sizes}
        cases = {
            "draw": lambda r, n: np.asarray(r.field_volume(-1).chain(0)),
            "xy": lambda r, n: r.field_slice(-1, 2, mid[n], chain=0),
            "xz": lambda r, n: r.field_slice(-1, 1, mid[n], chain=0),
            "yz": lambda r, n: r.field_slice(-1, 0, mid[n], chain=0),
            "block": lambda r, n: r.field_block(-1, (slice(0, FIELD_BLOCK),) * 3, chain=0),
        }
        times = {(n, c): [] for n in args.sizes for c in cases}
        nbytes = {(n, c): [] for n in args.sizes for c in cases}
        for n in args.sizes:                                  # opens the arrays once
            cases["block"](readers[n], n)
        for _ in range(args.repeats):
            for n in args.sizes:
                for case, fn in cases.items():
                    drop_cache(folder[n])
                    b0, t0 = rchar(), time.perf_counter()
                    fn(readers[n], n)
                    times[n, case].append(time.perf_counter() - t0)
                    nbytes[n, case].append(rchar() - b0)
        print(f"{CHAINS} chains, {args.draws} draws, blocks of {FIELD_BLOCK}^3, median of {args.repeats} "
              "cold reads (page cache dropped)")
        for n in args.sizes:
            files = [p for p in folder[n].iterdir() if not p.name.startswith(".")]
            disk = sum(p.stat().st_blocks * 512 for p in files) / (CHAINS * args.draws)
            raw = n ** 3 * 4
            print(f"\n{n}^3: write {statistics.median(written[n]):.3f} s per field draw (both chains); "
                  f"disk {disk / 2**20:.2f} MiB per draw of one chain = {disk / raw:.3f} of the raw "
                  f"{raw / 2**20:.0f} MiB (estimate {field_draw_disk_bytes((n,) * 3) / 2**20:.2f} MiB)")
            draw_t = statistics.median(times[n, "draw"])
            draw_b = statistics.median(nbytes[n, "draw"])
            for case in cases:
                t, b = statistics.median(times[n, case]), statistics.median(nbytes[n, case])
                print(f"  {case:6s} {t * 1e3:8.1f} ms {b / 2**20:8.2f} MiB read   "
                      f"time / draw {t / draw_t:.3f}   bytes / draw {b / draw_b:.3f}")


if __name__ == "__main__":
    main()
