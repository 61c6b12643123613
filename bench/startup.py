"""Benchmark: time from `fieldscope gui` to the window on screen, for the demo and for a config.

What a user waits for before the first click. Each case is a fresh interpreter running
``python -m app gui [TARGET] --screenshot PNG --quit-after 0`` (the screenshot mode prints
"window shown S s after start", measured from the top of `app.gui.main` to `window.show()`),
plus the process's whole wall time (interpreter start, imports, window, screenshot, exit).
Cases alternate round robin over --repeats; prints the median and the max of each.

Target: the window is shown within 2 s on an idle machine (ratio = median / 2 s). The GUI
test suite only checks that the window appears (a loose bound, because CI machines are
loaded); the speed is measured here. This process imports no TensorFlow and no Qt.
Needs a display: uses $DISPLAY, or run under ``xvfb-run -a``.
Usage: python bench/startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from virtual_display import start_display  # bench/virtual_display.py

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 2.0
SHOWN = re.compile(r"window shown ([0-9.]+) s after start")


def _launch(args: list[str], workdir: Path) -> tuple[float, float]:
    env = dict(os.environ, XDG_DATA_HOME=str(workdir / "xdg"), PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "app", "gui", *args, "--screenshot",
                          str(workdir / "shot.png"), "--quit-after", "0"],
                         capture_output=True, text=True, env=env, cwd=workdir, timeout=300)
    wall = time.perf_counter() - t0
    match = SHOWN.search(out.stderr)
    if out.returncode != 0 or not match:
        raise SystemExit(f"bench/startup.py: `gui {' '.join(args)}` failed:\n{out.stderr[-2000:]}")
    return float(match.group(1)), wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    start_display((1600, 1200))          # only without a display; it ends with this process
    with tempfile.TemporaryDirectory(prefix="fieldscope-bench-startup-") as tmp:
        work = Path(tmp)
        # the demo is written on the first launch; a second config case opens that file
        _launch([], work)
        config = work / "xdg" / "fieldscope" / "demo" / "field.toml"
        cases = {"demo": [], "config": [str(config)]}
        shown = {name: [] for name in cases}
        walls = {name: [] for name in cases}
        for _ in range(args.repeats):
            for name, extra in cases.items():
                s, w = _launch(extra, work)
                shown[name].append(s)
                walls[name].append(w)
    print(f"{'case':8} {'shown median':>13} {'shown max':>10} {'process median':>15} {'ratio':>6}")
    for name in cases:
        med = statistics.median(shown[name])
        print(f"{name:8} {med:12.2f}s {max(shown[name]):9.2f}s {statistics.median(walls[name]):14.2f}s "
              f"{med / TARGET_S:6.2f}")
    print(f"(ratio = median time to the window / {TARGET_S:.0f} s target; {args.repeats} repeats)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
