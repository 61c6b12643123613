"""Benchmark: sampling throughput with the GUI watching vs headless, and GUI responsiveness.

For a 32^3 and a 64^3 field config (HMC, 10 leapfrog steps, 2 chains, float32), measured
side by side in one run, alternating:

  headless  a spawned engine process (the engine the CLI runs), its events read by a loop
  gui       the main window (live slices, traces, health views redrawn at 15 Hz) running
            the same config through its own spawned engine

Throughput: post-warmup steps divided by the wall time from the end of warmup to the end
of the run (the arrival of the events in this process). Responsiveness: a 10 ms heartbeat
QTimer in the GUI process during the run; the latency is the delay of each tick past its
10 ms. Prints medians over repeats, the ratio gui/headless and the p50/p99/max latency.
This process imports no TensorFlow (the engines do). Needs a display: uses $DISPLAY, or
starts Xvfb through pyvirtualdisplay. Usage: python bench/gui.py [--sizes 32 64]
[--samples 300] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cases  # bench/cases.py
import numpy as np
from virtual_display import start_display  # bench/virtual_display.py

from core.run.engine_process import EngineProcess

WARMUP = 50



def write_case(folder: Path, n: int, samples: int) -> Path:
    cases.write_data(folder, n)
    path = folder / "run.toml"
    path.write_text(cases.config_text(
        {"dist": "normal", "loc": -1.5, "scale": 0.3},
        sampler={"num_warmup": WARMUP, "num_samples": samples, "num_leapfrog_steps": 10,
                 "step_size": 0.05, "adapt_mass_matrix": True, "chains": 2, "seed": 1, "thin": 5,
                 "chunk_size": 25}))
    return path


def headless(config: Path, run_dir: Path) -> float:
    proc = EngineProcess.spawn()
    try:
        while (event := proc.poll(0.5)) is None or event["type"] != "ready":
            pass
        proc.run(config.read_text(), config.parent, run_dir)
        warm_end = None
        while True:
            event = proc.poll(0.5)
            if event is None:
                continue
            if event["type"] == "chunk" and event["first_step"] + event["n_steps"] == WARMUP:
                warm_end = time.perf_counter()
            if event["type"] == "done":
                assert event["status"] == "finished", event
                return time.perf_counter() - warm_end
    finally:
        proc.shutdown()


def with_gui(app, config: Path, run_dir: Path, visit=()) -> tuple[float, list[float]]:
    from PySide6.QtCore import QTimer

    from app.main_window import MainWindow

    window = MainWindow()
    window.open_config(config)
    window.resize(1500, 950)
    window.show()
    for name in visit:                # tabs shown once before the run (then Slices again)
        window.views.show_tab(name)
        for _ in range(20):
            app.processEvents()
            time.sleep(0.01)
    if visit:
        window.views.show_tab("Slices")
    marks: dict[str, float] = {}
    ticks: list[float] = []

    def on_chunk(event):
        if event["first_step"] + event["n_steps"] == WARMUP:
            marks["warm_end"] = time.perf_counter()

    def on_done(status):
        marks["done"] = time.perf_counter()
        marks["status"] = status

    window.client.chunk.connect(on_chunk)
    window.client.done.connect(on_done)
    heartbeat = QTimer()
    heartbeat.setInterval(10)
    heartbeat.timeout.connect(lambda: ticks.append(time.perf_counter()))
    from PySide6.QtCore import QEventLoop

    waiting = QEventLoop()
    window.client.ready.connect(waiting.quit)
    if not window.client.is_ready:
        waiting.exec()          # the real event loop: idle while nothing happens
    assert window.start_run(run_dir), "the window refused to start"
    heartbeat.start()
    cpu0 = time.process_time()
    running = QEventLoop()
    window.client.done.connect(lambda _status: running.quit())
    if "done" not in marks:
        running.exec()
    heartbeat.stop()
    marks["cpu"] = time.process_time() - cpu0
    assert marks.get("status") == "finished", marks
    window.close()
    for _ in range(300):
        app.processEvents()
        time.sleep(0.01)
    during = [t for t in ticks if marks["warm_end"] <= t <= marks["done"]]
    latency = [max(0.0, (b - a) - 0.010) for a, b in zip(during, during[1:])]
    print(f"    (gui process cpu during the run: {100 * marks['cpu'] / (marks['done'] - marks.get('t_start', marks['warm_end'])):.0f}% of one core)", flush=True)
    return marks["done"] - marks["warm_end"], latency


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--visit", nargs="*", default=[], metavar="TAB",
                        help="tabs to show once before each GUI run (then Slices again), e.g. "
                             "\"3D volume\": what a view costs after it has been opened")
    args = parser.parse_args()
    display = start_display((1600, 1000))
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    print(f"CPU cores: {os.cpu_count()}; HMC 10 leapfrog steps, 2 chains, float32, {args.samples} "
          f"post-warmup steps, median of {args.repeats} (alternating headless / gui)"
          + (f"; tabs visited before each GUI run: {', '.join(args.visit)}" if args.visit else ""))
    print(f"{'size':>6} | {'headless steps/s':>16} | {'gui steps/s':>11} | {'gui/headless':>12} | "
          f"{'latency p50 ms':>14} | {'p99 ms':>7} | {'max ms':>7}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for n in args.sizes:
                config = write_case(Path(tmp) / f"n{n}", n, args.samples)
                head, gui, lat = [], [], []
                for r in range(args.repeats):
                    head.append(args.samples / headless(config, Path(tmp) / f"n{n}" / f"h{r}"))
                    seconds, latency = with_gui(app, config, Path(tmp) / f"n{n}" / f"g{r}",
                                               args.visit)
                    gui.append(args.samples / seconds)
                    lat.extend(latency)
                h, g = statistics.median(head), statistics.median(gui)
                lat_ms = 1e3 * np.asarray(lat)
                print(f"{n:>4}^3 | {h:16.1f} | {g:11.1f} | {g / h:12.3f} | {np.percentile(lat_ms, 50):14.1f} | "
                      f"{np.percentile(lat_ms, 99):7.1f} | {lat_ms.max():7.1f}", flush=True)
    finally:
        if display is not None:
            display.stop()


if __name__ == "__main__":
    main()
