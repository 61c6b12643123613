"""A watched run's memory in the GUI does not grow with the run, and the GUI thread never
reads a whole field draw: a store written here with RunStoreWriter (synthetic draws, no
TensorFlow), followed by RunState.refresh_from_store (what the window's watch timer runs in
a worker thread), shown by the slice and P(k) views. Memory is numpy's allocations as tracemalloc counts
them (numpy reports every array buffer to it)."""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np

from app.state.run_state import RunState
from app.views.power import PowerView
from app.views.slices import SlicesView
from core.field.grid import Grid
from core.field.power_spectrum import PowerLaw
from core.field.synthetic import make_dataset, save_dataset
from core.store.run_record import zero_stats
from core.store.run_store import ChunkRecord, FieldVolume, RunReader, RunStoreWriter, field_chunks
from support.configs import field_config_text

SHAPE = (64, 64, 64)
CHAINS = 2
DRAW = CHAINS * 64 ** 3 * 4            # bytes of one field draw, all chains (float32)


def _stats(n):
    return zero_stats(CHAINS, n)


def test_watching_holds_no_draw_and_the_gui_thread_reads_none(qtbot, tmp_path, monkeypatch):
    grid = Grid(SHAPE, 64.0)
    save_dataset(tmp_path / "data.npz", make_dataset(grid, PowerLaw(amplitude=300.0, index=-1.5, k_pivot=0.1),
                                                     0.5, mask="slab", mask_fraction=0.25, seed=1))
    config = field_config_text(box_size=64.0, prior={"kind": "power_law", "k_pivot": 0.1, "amplitude": 300.0,
                                                     "index": -1.5},
                               sampler={"num_warmup": 0, "num_samples": 25, "thin": 1, "chains": CHAINS})
    (tmp_path / "run.toml").write_text(config)
    k = np.linspace(0.1, 1.0, 5)          # the store's shells (the P(k) view measures its own)
    writer = RunStoreWriter.create(tmp_path / "run", config_text=config, config_dir=tmp_path, model_kind="field",
                                   chains=CHAINS, num_warmup=0, num_samples=25, thin=1, param_names=[],
                                   observed={}, grid_shape=SHAPE, k_centres=k,
                                   k_counts=np.ones(len(k), np.int64))
    writer.set_status("running")
    rng = np.random.default_rng(5)
    done = 0

    def append(n):
        nonlocal done
        fields = rng.normal(size=(CHAINS, n, *SHAPE)).astype(np.float32)
        writer.append(ChunkRecord(_stats(0), _stats(n), {}, {}, fields=fields,
                                  powers=np.ones((CHAINS, n, len(k))), field_draw_index=np.arange(done, done + n),
                                  moments=(fields[0, 0].astype(np.float64), fields[1, 0].astype(np.float64),
                                           CHAINS * (done + n))),
                      {"warmup_draws": 0, "draws": done + n, "field_draws": done + n, "chunks": 1})
        done += n
        return fields

    append(5)
    state = RunState()
    state.load_from_store(tmp_path / "run")
    slices, power = SlicesView(state), PowerView(state)
    for view in (slices, power):
        qtbot.addWidget(view)
    slices.set_kind("latest")
    slices.refresh()
    qtbot.waitUntil(lambda: not slices.plane_job.busy, timeout=30000)
    power.refresh()
    qtbot.waitUntil(lambda: power.measured is not None and not power.job.busy, timeout=30000)
    assert isinstance(state.latest_field, FieldVolume) and isinstance(state.mean, FieldVolume)

    # which threads read the store while the views refresh (the real reads, recorded)
    readers = []
    real_read = RunReader._read

    def recording_read(self, *args, **kwargs):
        readers.append(threading.current_thread())
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(RunReader, "_read", recording_read)
    tracemalloc.start()
    try:
        gui_peaks, held = [], []
        for kind in ("latest", "mean", "residual", "latest"):
            newest = append(5)[0, -1]       # chain 0's newest draw; the rest let go
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            assert state.refresh_from_store()
            readers.clear()
            slices.set_kind(kind)
            slices.refresh()
            assert threading.main_thread() not in readers
            qtbot.waitUntil(lambda: not slices.plane_job.busy, timeout=30000)
            assert threading.main_thread() not in readers        # the planes: read in the worker
            gui_peaks.append(tracemalloc.get_traced_memory()[1] - before)
            if kind == "latest":     # what the view shows is the newest draw, read by plane
                assert readers
                i, j, kz = slices.settings.cursor
                np.testing.assert_array_equal(slices.images[0].image, newest[:, :, kz].T)
            power.refresh()
            qtbot.waitUntil(lambda: power.measured is not None and not power.job.busy
                            and power.measured.field_version == state.field_version, timeout=30000)
            del newest
            held.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    # the P(k) worker read every new draw whole (that is its job), and let it go
    np.testing.assert_allclose(power.measured.latest.shape, (CHAINS, len(power.measured.k)))
    # a refresh and the three planes it shows, read by block in the slice view's worker (a
    # plane crosses half the blocks at 64^3; float64 for the moments), never the draw of both
    # chains nor the moments whole (reading those, as the state once did, is 3 draws' bytes)
    plane_blocks = 3 * 64 * 64 * field_chunks(SHAPE)[4] * 8
    assert max(gui_peaks) < min(DRAW, plane_blocks), gui_peaks
    # after the first round (one-time costs: imports, Qt's caches), 15 more draws (30 MiB of
    # them) appended and shown: the views and the state hold less than a quarter of a draw more
    assert held[-1] - held[0] < DRAW / 4, np.diff(held)
