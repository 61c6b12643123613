"""Benchmark: the window's memory while it watches a growing 256^3 run, and its GUI thread.

A run store of an n^3 grid (default 256^3, 2 chains, float32; the demo's data, noise and
mask) is written with RunStoreWriter from synthetic draws (no TensorFlow) by a separate
writer process (``--append``), --first field draws first, then --more in chunks of --step,
while the main window (``MainWindow.open_run_dir``: it watches a store whose status is
"running", as ``fieldscope gui RUNDIR`` does) shows it with "latest draw" in the Slices
view, then the 3D view, and P(k) on the right. After each chunk, once the window has
refreshed and the 3D and P(k) workers are idle, this process's RSS (VmRSS) and its peak
(VmHWM) are read from /proc/self/status. A 10 ms heartbeat QTimer measures how long the GUI
thread is held (the latency of each tick past its 10 ms) while the window catches up with
each chunk (not while this process waits for the writer): the block means and the FFTs
run in worker threads, the GUI thread reads three planes per refresh.

Prints RSS per round and the growth per kept draw (MiB), against the size of one draw.
Needs a display (uses $DISPLAY, else Xvfb through pyvirtualdisplay). Linux only (/proc).
The window process sets glibc's mmap threshold as ``fieldscope gui`` does (``--allocator
default``: leave glibc's dynamic threshold, to compare); a thread prints the GUI thread's
stack whenever it is held for more than 1 s (to attribute a stall).
Usage: python bench/gui_memory.py [--size 256] [--first 5] [--more 20] [--step 5] [--allocator app|default]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import cases  # noqa: E402  (bench/cases.py)
from virtual_display import start_display  # noqa: E402  (bench/virtual_display.py)

CHAINS = 2


def _stats(n):
    from core.store.run_record import zero_stats

    return zero_stats(CHAINS, n)


def append(run_dir: Path, first: int, count: int, n: int) -> None:
    """The writer process: append ``count`` field draws (one chunk) after ``first``."""
    from core.store.run_store import ChunkRecord, RunReader, RunStoreWriter

    reader = RunReader(run_dir)
    writer = RunStoreWriter.reopen(run_dir, reader.progress)
    rng = np.random.default_rng(first)
    fields = rng.standard_normal((CHAINS, count, n, n, n), np.float32)
    k = reader.shells()[0]
    total = first + count
    writer.append(ChunkRecord(_stats(0), _stats(count), {}, {}, fields=fields,
                              powers=np.ones((CHAINS, count, len(k))),
                              field_draw_index=np.arange(first, total),
                              moments=(fields[0, -1].astype(np.float64), np.abs(fields[1, -1]).astype(np.float64),
                                       CHAINS * total)),
                  {"warmup_draws": 0, "draws": total, "field_draws": total, "chunks": total})


def create(folder: Path, n: int, draws: int) -> Path:
    from core.config import parse_config
    from core.store.run_store import RunStoreWriter

    cases.write_data(folder, n)
    text = cases.config_text(-1.5, {"num_warmup": 0, "num_samples": draws, "thin": 1, "chains": CHAINS})
    (folder / "run.toml").write_text(text)
    config = parse_config(text, base_dir=folder)
    data = np.load(folder / "data.npz")
    mask = data["mask"].astype(bool)
    run_dir = folder / "run"
    RunStoreWriter.create(run_dir, config_text=text, config_dir=folder, model_kind="field", chains=CHAINS,
                          num_warmup=0, num_samples=draws, thin=1, param_names=[],
                          observed={"data": (["x", "y", "z"], np.where(mask, data["data"], np.nan)),
                                    "mask": (["x", "y", "z"], mask)},
                          grid_shape=(n, n, n), k_centres=np.linspace(0.01, 1.0, 40),
                          k_counts=np.ones(40, np.int64)).set_status("running")
    del config
    return run_dir


class StallReporter:
    """Prints the GUI thread's stack when it has not ticked for ``after`` s (a sampling
    thread: py-spy in a few lines). ``ticks`` is the heartbeat's list; ``armed`` is set
    while the window catches up (not while this process waits for the writer). A stall
    is sampled at 1, 2, 4, 8 ... s, so a long one shows where its time went."""

    def __init__(self, ticks: list, after: float = 1.0):
        self.ticks, self.after = ticks, after
        self.armed = threading.Event()
        self.stalls: list[float] = []
        self._main = threading.main_thread().ident
        threading.Thread(target=self._watch, daemon=True, name="stall-reporter").start()

    def _watch(self) -> None:
        reported_at, next_sample = None, self.after
        while True:
            time.sleep(0.05)
            if not self.armed.is_set() or not self.ticks:
                reported_at, next_sample = None, self.after
                continue
            last = self.ticks[-1]
            held = time.perf_counter() - last
            if held < self.after:
                if reported_at is not None:
                    self.stalls.append(reported_at)
                reported_at, next_sample = None, self.after
                continue
            if held >= next_sample:
                frame = sys._current_frames().get(self._main)
                stack = "".join(traceback.format_stack(frame)[-14:]) if frame is not None else "?"
                print(f"--- GUI thread held {held:.1f} s; its stack:\n{stack}", file=sys.stderr, flush=True)
                reported_at, next_sample = held, next_sample * 2


def status_mib(key: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--first", type=int, default=5)
    parser.add_argument("--more", type=int, default=20)
    parser.add_argument("--step", type=int, default=5)
    parser.add_argument("--allocator", choices=("app", "default"), default="app",
                        help="app: glibc's mmap threshold as fieldscope gui sets it "
                             "(app.gui.limit_heap_retention); default: glibc's own")
    parser.add_argument("--append", nargs=3, metavar=("RUNDIR", "FIRST", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = args.size
    if args.append:
        append(Path(args.append[0]), int(args.append[1]), int(args.append[2]), n)
        return
    if args.allocator == "app":
        from app.gui import limit_heap_retention

        if not limit_heap_retention():
            print("(not glibc: the allocator's defaults)", flush=True)
    display = start_display((1600, 1000))
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow

    def write(run_dir, first, count):
        subprocess.run([sys.executable, __file__, "--size", str(n), "--append", str(run_dir), str(first),
                        str(count)], check=True, cwd=REPO)

    app = QApplication.instance() or QApplication(sys.argv[:1])
    total = args.first + args.more
    draw_mib = CHAINS * n ** 3 * 4 / 2**20
    try:
        with tempfile.TemporaryDirectory(prefix="fieldscope-gui-memory-") as tmp:
            run_dir = create(Path(tmp), n, total)
            write(run_dir, 0, args.first)
            ticks: list[float] = []
            heartbeat = QTimer()
            heartbeat.setInterval(10)
            heartbeat.timeout.connect(lambda: ticks.append(time.perf_counter()))
            stalls = StallReporter(ticks)
            rss0 = status_mib("VmRSS")
            window = MainWindow()
            window.resize(1500, 950)
            window.show()
            assert window.open_run_dir(run_dir)
            views = window.views
            views.show_tab("P(k)")
            def built(name):
                view = views.view(name)
                return view.build() if hasattr(view, "build") else view

            slices, volume, power = built("Slices"), built("3D volume"), built("P(k)")
            slices.set_kind("latest")
            heartbeat.start()

            latencies: list[float] = []

            def settle(seen_field_draws: int, timeout: float = 600.0) -> None:
                # the heartbeat counts from here: the writer process ran while this thread waited
                ticks.clear()
                stalls.armed.set()
                deadline = time.monotonic() + timeout
                st = window.run_state
                for tab in ("Slices", "3D volume"):
                    views.show_tab(tab)
                    while time.monotonic() < deadline:
                        app.processEvents()
                        time.sleep(0.01)
                        busy = volume.prepare_job.busy or power.job.busy or any(
                            job.busy for job in (getattr(slices, "plane_job", None),
                                                 getattr(window.runs, "_store_job", None)) if job is not None)
                        if st.progress.get("field_draws", 0) >= seen_field_draws and not busy \
                                and (tab == "Slices" or volume._pending_key is None):
                            break
                for _ in range(50):
                    app.processEvents()
                    time.sleep(0.01)
                stalls.armed.clear()
                latencies.extend(np.maximum(0.0, np.diff(ticks) - 0.010))

            print(f"{n}^3, {CHAINS} chains, one field draw = {draw_mib:.0f} MiB; process RSS before the window "
                  f"{rss0:.0f} MiB", flush=True)
            settle(args.first)
            rows = [(args.first, status_mib("VmRSS"), status_mib("VmHWM"))]
            print(f"  {args.first:3d} field draws: RSS {rows[-1][1]:7.0f} MiB, peak {rows[-1][2]:7.0f} MiB",
                  flush=True)
            done = args.first
            while done < total:
                count = min(args.step, total - done)
                write(run_dir, done, count)
                done += count
                settle(done)
                rows.append((done, status_mib("VmRSS"), status_mib("VmHWM")))
                print(f"  {done:3d} field draws: RSS {rows[-1][1]:7.0f} MiB, peak {rows[-1][2]:7.0f} MiB",
                      flush=True)
            heartbeat.stop()
            latency = 1e3 * np.asarray(latencies)
            growth = (rows[-1][1] - rows[0][1]) / (rows[-1][0] - rows[0][0])
            print(f"RSS growth from {rows[0][0]} to {rows[-1][0]} draws: {rows[-1][1] - rows[0][1]:+.0f} MiB "
                  f"({growth:+.1f} MiB per draw; one draw is {draw_mib:.0f} MiB)")
            print(f"GUI thread latency past 10 ms ticks: p50 {np.percentile(latency, 50):.1f} ms, p99 "
                  f"{np.percentile(latency, 99):.1f} ms, max {latency.max():.0f} ms")
            st = window.run_state
            print(f"state holds latest_field as {type(st.latest_field).__name__}, mean as "
                  f"{type(st.mean).__name__}; P(k) measured for field_version "
                  f"{getattr(power.measured, 'field_version', None)} of {st.field_version}; "
                  f"3D uploads {volume.uploads}")
            window.close()
            app.processEvents()
    finally:
        if display is not None:
            display.stop()


if __name__ == "__main__":
    main()
