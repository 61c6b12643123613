"""Benchmark: redraw time of the 3D view (app.views.volume.VolumeView) on this machine's OpenGL.

For each grid size (default 32^3, 64^3, 128^3), measured side by side in one run, round
robin over the sizes, median of --repeats redraws each:

  field     a new posterior mean arrives (a chunk event into the RunState) and the view is
            redrawn: refresh() (levels, NaN handling, (z, y, x) float32 texture, set_data;
            above 128^3 the texture is prepared in a worker thread and uploaded when ready),
            the event loop run until the view rendered the scene off-screen and handed the
            image to its display widget (what the app shows; the canvas is never on screen)
  rotate    the camera turns by 2 degrees and the view renders and shows it again
  smooth    the same with trilinear interpolation ("smooth" ticked; the default is off)
  export    canvas.render(): an offscreen render read back to memory (what export_png does)
  prepare   prepare_volume alone (numpy: what a worker thread does for big volumes)

Target: "field" at 64^3 under 100 ms on the test machine's software OpenGL (Mesa llvmpipe
under Xvfb); ratio = median / 100 ms. The canvas is --width x --height pixels; software
ray casting costs per pixel per voxel crossed, so both matter. This process imports no
TensorFlow. Needs a display: run under
``xvfb-run -a -s "-screen 0 1600x1200x24" .venv/bin/python bench/volume.py``
(or with $DISPLAY set; without one it starts Xvfb through pyvirtualdisplay).
Usage: python bench/volume.py [--sizes 32 64 128] [--repeats 20] [--width 800] [--height 600]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from virtual_display import start_display  # noqa: E402  (bench/virtual_display.py)

TARGET_S = 0.100


def smooth_field(n: int, seed: int) -> np.ndarray:
    """A Gaussian random field with a red spectrum (structure on several scales), float32."""
    rng = np.random.default_rng(seed)
    k = np.fft.fftfreq(n) * n
    kz = np.fft.rfftfreq(n) * n
    k2 = k[:, None, None] ** 2 + k[None, :, None] ** 2 + kz[None, None, :] ** 2
    amplitude = np.where(k2 > 0, (1.0 + k2) ** -1.0, 0.0)
    modes = (rng.normal(size=k2.shape) + 1j * rng.normal(size=k2.shape)) * amplitude
    field = np.fft.irfftn(modes, s=(n, n, n), axes=(0, 1, 2))
    return (field / field.std()).astype(np.float32)


def moments_chunk(first_step: int, moments) -> dict:
    """A one-step "chunk" event carrying new posterior moments (one chain), as the engine sends it."""
    from core.run.messages import chunk_event, new_progress
    from core.store.run_record import zero_stats

    stats = zero_stats(1, 1)
    progress = {**new_progress(), "draws": first_step + 1}
    return chunk_event(first_step=first_step, n_steps=1, phase="sampling", stats=stats, params={},
                       steps_total=first_step + 1, progress=progress, elapsed=0.0,
                       steps_per_second=0.0, total_elapsed=0.0, moments=moments)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--width", type=int, default=800)
    parser.add_argument("--height", type=int, default=600)
    args = parser.parse_args()
    display = start_display((1600, 1200))
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    from vispy.gloo import gl

    from app.state.run_state import RunState
    from app.views.volume import VolumeView, prepare_volume

    cases = {}
    for n in args.sizes:
        state = RunState()
        state.reset({"chains": 1, "param_names": [], "grid_shape": (n, n, n), "num_warmup": 0,
                     "num_samples": 10 ** 6, "observed": {"data": smooth_field(n, 0)}})
        view = VolumeView(state)
        view.resize(args.width, args.height + 40)
        view.show()
        for _ in range(20):
            app.processEvents()
        if view.canvas is None:
            sys.exit(f"no OpenGL: {view.problem}")
        view.refresh()
        fields = [smooth_field(n, seed) for seed in range(1, 5)]
        cases[n] = {"state": state, "view": view, "fields": fields, "field": [],
                    "rotate": [], "smooth": [], "export": [], "prepare": []}

    def draw(case):
        """Ask for a draw as the app does (update) and run the event loop until the view
        rendered off-screen and showed the image."""
        view = case["view"]
        before = view.renders
        view.canvas.update()
        deadline = time.perf_counter() + 10.0
        while view.renders == before and time.perf_counter() < deadline:
            app.processEvents()
        if view.renders == before:
            sys.exit("the view did not render within 10 s")
        view.canvas.set_current()
        gl.glFinish()

    first = cases[args.sizes[0]]["view"]
    first.canvas.set_current()
    renderer = gl.glGetParameter(gl.GL_RENDERER)
    size = tuple(first.canvas.size)
    print(f"OpenGL: {renderer}; canvas {size[0]}x{size[1]} px; CPU cores: {os.cpu_count()}; "
          f"LP_NUM_THREADS={os.environ.get('LP_NUM_THREADS', 'default')}; "
          f"median of {args.repeats}; projection: maximum (MIP); at most "
          f"{first.max_texture_size} voxels per axis (block means above)")
    for n, case in cases.items():                  # warm: shaders compiled, textures sized
        draw(case)
        case["view"].smooth_check.setChecked(True)
        draw(case)
        case["view"].smooth_check.setChecked(False)
        draw(case)
    for repeat in range(args.repeats):
        for n, case in cases.items():
            state, view = case["state"], case["view"]
            mean = case["fields"][repeat % len(case["fields"])]
            t0 = time.perf_counter()
            state.on_event(moments_chunk(state.n_steps, (mean, mean, repeat + 1)))
            view.refresh()
            while view._pending_key is not None:  # above 128^3 a worker thread prepares it
                app.processEvents()
            draw(case)
            case["field"].append(time.perf_counter() - t0)
            view.view.camera.azimuth += 2.0
            t0 = time.perf_counter()
            draw(case)
            case["rotate"].append(time.perf_counter() - t0)
            view.smooth_check.setChecked(True)
            view.view.camera.azimuth += 2.0
            t0 = time.perf_counter()
            draw(case)
            case["smooth"].append(time.perf_counter() - t0)
            view.smooth_check.setChecked(False)
            draw(case)                           # not timed: no draw left pending for the next
            t0 = time.perf_counter()
            view.canvas.render()
            case["export"].append(time.perf_counter() - t0)
            app.processEvents()
            levels = view.settings.levels["field"]
            t0 = time.perf_counter()
            prepare_volume(mean, levels, view.max_texture_size)
            case["prepare"].append(time.perf_counter() - t0)
    keys = ("field", "rotate", "smooth", "export", "prepare")
    print(f"{'grid':>6} {'field ms':>9} {'ratio':>6} {'rotate ms':>10} {'smooth ms':>10} "
          f"{'export ms':>10} {'prepare ms':>11}  texture")
    for n, case in cases.items():
        med = {key: statistics.median(case[key]) for key in keys}
        shape = "x".join(str(v) for v in case["view"].texture_shape[::-1])
        ms = {key: value * 1e3 for key, value in med.items()}
        print(f"{n:>4}^3 {ms['field']:9.1f} {med['field'] / TARGET_S:6.2f} {ms['rotate']:10.1f} "
              f"{ms['smooth']:10.1f} {ms['export']:10.1f} {ms['prepare']:11.2f}  {shape}")
    ok = statistics.median(cases[64]["field"]) < TARGET_S if 64 in cases else None
    if ok is not None:
        print(f"target: 64^3 field redraw under {TARGET_S * 1e3:.0f} ms: {'met' if ok else 'NOT met'}")
    for case in cases.values():
        case["view"].close()
    app.processEvents()
    if display is not None:
        display.stop()


if __name__ == "__main__":
    main()
