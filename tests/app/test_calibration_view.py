"""The Calibration view over a calibration.zarr written batch by batch (no TensorFlow: the
store is written by core.calibration's writer), and its window's process wiring."""

from __future__ import annotations

import numpy as np
import pytest

from app.views.calibration import CalibrationView, CalibrationWindow, calibrate_command
from core.calibration import CalibrationReader, CalibrationWriter, make_plan, simultaneous_band
from core.calibration.bands import ecdf_counts, evaluation_points
from support.gui import growing_only_axes

NAMES = ["index", "loglik", "power_k00", "power_k01", "voxel_1_1_1"]


def batch(plan, b, rng, skewed=False):
    n = plan.kept(b)
    rank = rng.integers(0, plan.draws + 1, (n, len(NAMES)))
    if skewed:
        rank[:, 1] = rng.integers(0, 3, n)           # loglik: the truth below nearly every draw
    return {"rank": rank, "truth": np.zeros((n, len(NAMES))), "posterior_mean": np.zeros((n, len(NAMES))),
            "posterior_sd": np.ones((n, len(NAMES))), "divergences": np.zeros(n, np.int32),
            "acceptance": np.full(n, 0.8), "simulation": np.arange(b * plan.batch_size, b * plan.batch_size + n),
            "voxel_rank": rng.integers(0, plan.draws + 1, (n, 3, 3, 3))}


@pytest.fixture
def store(tmp_path):
    plan = make_plan(simulations=60, draws=20, chains=2, num_samples=40, seed=1, batch_size=30)
    writer = CalibrationWriter.create(tmp_path, config_text="[model]\n", config_dir=tmp_path, simulate_text="",
                                      plan=plan, quantities=NAMES, model_kind="field", grid_shape=(3, 3, 3),
                                      k=[0.2, 0.4], voxels=[(1, 1, 1)])
    return tmp_path, plan, writer


def test_view_draws_ranks_band_and_coverage_live(qtbot, store):
    folder, plan, writer = store
    rng = np.random.default_rng(0)
    view = CalibrationView(folder)
    qtbot.addWidget(view)
    count, loose = growing_only_axes(view)
    assert count >= 12 and loose == []
    assert "waiting" in view.status_label.text() or "0 of 60" in view.status_label.text()
    writer.append(batch(plan, 0, rng, skewed=True), 1, 1.0)
    assert view.refresh()
    assert not view.refresh()                       # nothing new: nothing redrawn
    assert "30 of 60 simulations" in view.status_label.text()
    assert view.verdict_label.text().startswith("FAIL: loglik")
    view.quantity_box.setCurrentText("loglik")
    ranks = CalibrationReader(folder).ranks()[:, 1]
    z = evaluation_points(plan.draws)
    x, y = view.ecdf_curve.getData()
    assert np.allclose(y[1:-1], ecdf_counts(ranks, plan.draws) / 30 - z)
    band = simultaneous_band(30, plan.draws)
    assert np.allclose(view.band_low.getData()[1][1:-1], band.lower - z)
    assert np.allclose(view.band_high.getData()[1][1:-1], band.upper - z)
    # loglik's ECDF leaves its band (the verdict and the plot agree)
    assert np.any((y[1:-1] < band.lower - z - 1e-12) | (y[1:-1] > band.upper - z + 1e-12))
    assert view.bars.opts["height"].sum() == 30
    # coverage per k-shell, at the shells' k
    cx, cy = view.coverage_curves[1].getData()
    assert np.allclose(cx, [0.2, 0.4])
    assert np.allclose(cy, CalibrationReader(folder).coverage()[1, 2:4])
    writer.append(batch(plan, 1, rng, skewed=True), 2, 2.0)
    writer.set_status("finished")
    assert view.refresh()
    assert "60 of 60 simulations" in view.status_label.text() and "finished" in view.status_label.text()
    assert view.bars.opts["height"].sum() == 60


def test_window_shows_the_refusal_of_its_calibrate_process(qtbot, store, tmp_path_factory):
    folder, plan, writer = store
    config = tmp_path_factory.mktemp("cfg") / "c.toml"
    config.write_text('[model]\nkind = "field"\n[data]\npath = "d.npy"\n')
    # 7 draws for 2 chains: refused before TensorFlow loads, with the option named
    window = CalibrationWindow(folder / "new", calibrate_command(config, 10, folder / "new", draws=7))
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.process.finished, timeout=60000):
        pass
    assert "--draws" in window.line.text() and "multiple of sampler.chains" in window.line.text()
    assert not window.stop_button.isEnabled()
