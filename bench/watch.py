"""Benchmark: does watching a run cost the writing process anything?

A 64^3 field run (HMC, 10 leapfrog steps, 2 chains, float32, field draws every 5th step,
chunks of 25) is sampled by a spawned engine process (the engine ``fieldscope run`` uses),
alternately

  alone     nobody reads its store
  watched   a separate process follows the store as the window does when it watches a
            run (``RunState.refresh_from_store`` every WATCH_INTERVAL_MS = 1 s: the store's
            attributes, then every new draw, the latest field, its P(k) and the moments)
  stressed  the same follower polling 20 times a second

Throughput: post-warmup steps divided by the wall time from the end of warmup to the end
of the run. Also the follower's own CPU time over the time it followed the run (the most
it can take from the writer, whatever the noise of the throughput figures). Prints the median over repeats of each mode and the ratios watched/alone and
stressed/alone, measured side by side in one run. The follower reports how many
refreshes found new data (so it did read every chunk). This process imports no
TensorFlow. Usage: python bench/watch.py [--size 64] [--samples 300] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CPU_SHARES: dict[float, list[float]] = {}      # follower CPU time / time followed, per rate
sys.path.insert(0, str(REPO / "bench"))

from gui import WARMUP, headless, write_case  # noqa: E402  (bench/gui.py)


def follower(run_dir: str, hz: float) -> None:
    """The watcher process: follow ``run_dir`` until it is finished (prints a count)."""
    from app.state.run_state import RunState
    from core.store.run_store import RunStoreError

    state = RunState()
    loaded = False
    changes = polls = 0
    cpu0 = wall0 = None
    while True:
        polls += 1
        if not loaded:
            try:
                state.load_from_store(run_dir)
                loaded = state.chains is not None
            except (RunStoreError, KeyError, OSError):
                pass
            if loaded:
                cpu0, wall0 = time.process_time(), time.perf_counter()
        else:
            changes += state.refresh_from_store()
            if state.status in ("finished", "failed", "stopped"):
                break
        time.sleep(1.0 / hz)
    cpu = time.process_time() - cpu0 if cpu0 is not None else float("nan")
    wall = time.perf_counter() - wall0 if wall0 is not None else float("nan")
    print(f"{polls} {changes} {state.n_steps} {cpu:.3f} {wall:.3f}")


def run_once(config: Path, run_dir: Path, hz: float | None) -> tuple[float, str]:
    watcher = None
    if hz is not None:
        watcher = subprocess.Popen([sys.executable, str(REPO / "bench" / "watch.py"), "--follow", str(run_dir),
                                    "--hz", str(hz)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        seconds = headless(config, run_dir)
    finally:
        note = ""
        if watcher is not None:
            out, _ = watcher.communicate(timeout=120)
            polls, changes, steps, cpu, wall = out.split()
            share = float(cpu) / float(wall)
            note = (f"(follower: {polls} polls, {changes} with new data, {steps} steps seen, "
                    f"{float(cpu):.2f} s CPU over {float(wall):.1f} s followed = {100 * share:.2f} % "
                    "of one core)")
            CPU_SHARES.setdefault(hz, []).append(share)
    return seconds, note


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--follow", help=argparse.SUPPRESS)
    parser.add_argument("--hz", type=float, default=1.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.follow:
        follower(args.follow, args.hz)
        return
    modes = {"alone": None, "watched": 1.0, "stressed": 20.0}
    with tempfile.TemporaryDirectory() as tmp:
        config = write_case(Path(tmp) / f"n{args.size}", args.size, args.samples)
        rates = {mode: [] for mode in modes}
        for repeat in range(args.repeats):
            for mode, hz in modes.items():
                run_dir = Path(tmp) / f"run-{mode}-{repeat}"
                seconds, note = run_once(config, run_dir, hz)
                rate = args.samples / seconds
                rates[mode].append(rate)
                print(f"{args.size}^3 repeat {repeat} {mode:8s} {rate:7.2f} steps/s {note}",
                      flush=True)
    print(f"\n{args.size}^3, {args.samples} post-warmup steps after {WARMUP} warmup, "
          f"median of {args.repeats}:")
    med = {mode: statistics.median(v) for mode, v in rates.items()}
    for mode in modes:
        print(f"  {mode:8s} {med[mode]:7.2f} steps/s  (min {min(rates[mode]):.2f}, "
              f"max {max(rates[mode]):.2f})")
    print(f"  ratio watched/alone  {med['watched'] / med['alone']:.3f}")
    print(f"  ratio stressed/alone {med['stressed'] / med['alone']:.3f}")
    for mode, hz in modes.items():
        if hz is not None and CPU_SHARES.get(hz):
            print(f"  follower CPU, {mode:8s} ({hz:g} Hz): median "
                  f"{100 * statistics.median(CPU_SHARES[hz]):.2f} % of one core while following")


if __name__ == "__main__":
    main()
