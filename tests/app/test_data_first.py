"""Data first: a data file chosen in the Data panel of a window with no run is shown in the
big views at once (slices with the mask overlay and the noise map, the 3D view, the data's
P(k) against the prior's), and a run's own arrays replace it when the run's events arrive.

Real parts only: a real data file read by the panel's worker, a real run store, engine
events built by ``support.runs.fake_run`` (as the engine builds them). No engine process.
"""

from __future__ import annotations

import numpy as np
import pytest

from app.state.run_state import DataPreview, RunState
from app.views.slices import MASK_TINT, PLANES, slice_of
from core.field.grid import Grid
from core.field.power_estimator import measure_power
from core.field.power_spectrum import PowerLaw
from core.store.run_store import RunStoreWriter
from support.runs import fake_run, feed

SHAPE = (12, 10, 8)


def write_data(folder):
    """mine.npz: data (masked voxels hold -999, a fill value), mask, noise map."""
    rng = np.random.default_rng(3)
    data = rng.normal(size=SHAPE)
    mask = rng.random(SHAPE) > 0.3
    data[~mask] = -999.0
    noise = 0.5 + rng.random(SHAPE)
    path = folder / "mine.npz"
    np.savez(path, data=data, mask=mask, noise=noise)
    return path, data, mask, noise


@pytest.fixture
def chosen(make_window, qtbot, tmp_path):
    """A window with no run and no engine; mine.npz chosen in the Data panel with its mask
    and noise map; returns (window, data, mask, noise) once the views show the data."""
    window = make_window(engine=None)
    path, data, mask, noise = write_data(tmp_path)
    panel = window.panel["data"]
    panel.async_bytes = 0                   # read in the panel's worker, as a large file is
    window.state["grid.box_size"] = 60.0
    window.state["data.noise"] = "map"
    window.state["data.noise_map"] = "noise"
    panel.open_file(path)
    assert window.state["data.mask"] == "mask"
    st = window.run_state
    qtbot.waitUntil(lambda: st.is_preview and {"mask", "noise"} <= set(st.observed), timeout=10_000)
    window.refresh_views()
    return window, data, mask, noise


def planes(slices):
    return [slices.settings.cursor[normal] for _, _, normal in PLANES]


def test_slices_show_the_data_its_mask_and_noise_before_any_run(chosen):
    window, data, mask, noise = chosen
    st, slices = window.run_state, window.views.slices
    assert st.chains is None and st.grid_shape == SHAPE
    assert st.observed["data"] is window.panel["data"]._volume      # the panel's array, no copy
    assert slices.shown_kind() == "data"
    k = slices.settings.cursor[2]
    np.testing.assert_array_equal(slices.images[0].image, data[:, :, k].T.astype(np.float32))
    for p, index in enumerate(planes(slices)):
        np.testing.assert_array_equal(slices.images[p].image, slice_of(data, p, index).astype(np.float32))
    # the levels come from the observed voxels: the fill value -999 of masked ones is ignored
    lo, hi = slices.settings.levels["field"]
    assert lo > -10 and hi < 10
    assert "no run yet" in slices.note_label.text()

    # the mask overlay: on, tinting exactly the masked voxels of each plane
    assert slices.mask_check.isEnabled() and slices.mask_check.isChecked()
    for p, index in enumerate(planes(slices)):
        overlay = slices.overlays[p]
        assert overlay.isVisible()
        masked = ~slice_of(mask, p, index)
        np.testing.assert_array_equal(overlay.image[..., 3] > 0, masked)
        assert (overlay.image[masked] == MASK_TINT).all()
    slices.set_cursor((3, 4, 5))
    np.testing.assert_array_equal(slices.overlays[0].image[..., 3] > 0, ~mask[:, :, 5].T)
    slices.mask_check.setChecked(False)
    assert not any(o.isVisible() for o in slices.overlays)
    slices.mask_check.setChecked(True)
    assert all(o.isVisible() for o in slices.overlays)

    # the noise map is a kind like the others
    slices.set_kind("noise")
    assert slices.shown_kind() == "noise"
    np.testing.assert_array_equal(slices.images[0].image, noise[:, :, 5].T.astype(np.float32))


def test_pk_shows_the_data_against_the_prior_before_any_run(chosen, qtbot):
    window, data, mask, _ = chosen
    assert window.state.document()["prior"] == {
        "kind": "power_law", "k_pivot": 0.1, "amplitude": 1.0,
        "index": {"dist": "normal", "loc": -2.0, "scale": 0.5}}
    view = window.views.show_tab("P(k)")
    qtbot.waitUntil(lambda: view.measured is not None and view.measured.data is not None, timeout=10_000)
    window.refresh_views()
    grid = Grid(SHAPE, 60.0, "")
    filled = np.where(mask, data - data[mask].mean(), 0.0)
    expected = measure_power(filled[None], grid)
    x, y = (np.asarray(a) for a in view.curves["data"].getOriginalDataset())
    np.testing.assert_allclose(x, expected.k[expected.k > 0])
    np.testing.assert_allclose(y, (expected.power[0] / mask.mean())[expected.k > 0], rtol=1e-12)
    # the prior at its index prior's median (-2): no draw yet
    x, y = (np.asarray(a) for a in view.curves["prior"][0].getOriginalDataset())
    np.testing.assert_allclose(y, PowerLaw(amplitude=1.0, index=-2.0, k_pivot=0.1).evaluate(x), rtol=1e-12)
    assert "median" in view.note.text() and not view.empty_hint.isVisible()
    # the prior follows the Prior panel
    window.state["prior.amplitude.value"] = 5.0
    window.refresh_views()
    x, y = (np.asarray(a) for a in view.curves["prior"][0].getOriginalDataset())
    np.testing.assert_allclose(y, PowerLaw(amplitude=5.0, index=-2.0, k_pivot=0.1).evaluate(x), rtol=1e-12)


def test_a_run_replaces_the_preview_with_its_own_arrays(chosen, qtbot, tmp_path):
    window, data, mask, noise = chosen
    st, slices = window.run_state, window.views.slices
    run_dir = tmp_path / "run"
    # Start: the run controller resets the state with the window's run metadata
    st.reset(window._run_meta(run_dir))
    window.refresh_views()
    assert not st.is_preview and st.chains == 2
    np.testing.assert_array_equal(slices.images[0].image,
                                  data[:, :, slices.settings.cursor[2]].T.astype(np.float32))
    # the engine writes its store (observed_data as the engine's model gives it), then chunks
    own = {"data": np.where(mask, data, np.nan), "mask": mask, "noise": np.where(mask, noise, 1.0)}
    RunStoreWriter.create(run_dir, config_text=st.config_text, model_kind="field", chains=2, num_warmup=40,
                          num_samples=60, thin=3, param_names=["index"],
                          observed={n: (["x", "y", "z"], v) for n, v in own.items()}, grid_shape=SHAPE,
                          k_centres=[0.1, 0.2, 0.3], k_counts=[6, 12, 20])
    events, _ = fake_run(grid=SHAPE, param_names=("index",), dtype=np.float64)
    feed(st, events)
    window.refresh_views()
    for name, value in own.items():
        np.testing.assert_array_equal(st.observed[name], value)
    mean = events[-1]["moments"][0]
    assert slices.shown_kind() == "mean"
    for p, index in enumerate(planes(slices)):
        np.testing.assert_array_equal(slices.images[p].image, slice_of(mean, p, index).astype(np.float32))
    slices.set_kind("data")
    np.testing.assert_array_equal(slices.images[0].image,
                                  own["data"][:, :, slices.settings.cursor[2]].T.astype(np.float32))

    # a shown run of these data stays when the config changes elsewhere ...
    window.state["prior.amplitude.value"] = 3.0
    assert not st.is_preview and st.chains == 2
    # ... and gives way to the data preview when the data change (no run going)
    window.state["data.mask"] = ""
    qtbot.waitUntil(lambda: st.is_preview, timeout=10_000)        # the mask read in the worker
    assert "mask" not in st.observed
    window.refresh_views()
    assert not any(o.isVisible() for o in slices.overlays)
    np.testing.assert_array_equal(slices.images[0].image,
                                  data[:, :, slices.settings.cursor[2]].T.astype(np.float32))


def test_a_data_file_that_cannot_be_shown_clears_the_preview(chosen, tmp_path):
    window, *_ = chosen
    np.save(tmp_path / "flat.npy", np.zeros((4, 5)))     # 2-D: not a grid
    window.panel["data"].open_file(tmp_path / "flat.npy")
    assert not window.run_state.is_preview and window.run_state.grid_shape is None
    window.refresh_views()
    assert window.views.slices.note_label.text() == "no run yet: start one or open a run directory"


def test_the_state_keeps_the_preview_until_the_store_brings_the_runs_arrays():
    """RunState alone: provisional arrays stay until a store attaches, then all go."""
    data = np.arange(120.0).reshape(6, 5, 4)
    preview = DataPreview(data, mask=data > 3, noise=np.broadcast_to(0.5, data.shape))
    st = RunState()
    st.show_preview(preview, "", "")
    assert st.is_preview and st.available_volumes() == ["data", "mask", "noise"]
    assert st.volume("data") is data
    st.reset({"chains": 2, "grid_shape": data.shape, **st.preview_meta()})
    assert not st.is_preview and st.volume("data") is data
    feed(st, fake_run(grid=data.shape)[0])
    assert st.volume("data") is data                 # no store: nothing replaces them



def test_the_3d_view_shows_the_data_with_masked_voxels_see_through(chosen, qtbot):
    """Under Xvfb with Mesa, like tests/app/test_volume_view.py."""
    from app.views.volume import masked_value, prepare_volume

    window, data, mask, _ = chosen
    view = window.views.show_tab("3D volume").build()
    assert view.canvas is not None, view.problem
    window.refresh_views()
    qtbot.waitUntil(lambda: view.uploads > 0, timeout=5000)
    levels = window.views.slices.settings.levels["field"]
    texture = view.volume._last_data
    expected, _ = prepare_volume(window.run_state.volume("data"), levels, view.max_texture_size, view.method,
                                 mask)
    np.testing.assert_array_equal(texture, expected)
    np.testing.assert_array_equal(texture.transpose(2, 1, 0)[mask], data[mask].astype(np.float32))
    assert (texture.transpose(2, 1, 0)[~mask] == np.float32(masked_value(levels, view.method))).all()


def test_nan_voxels_of_a_file_without_a_mask_are_tinted_before_any_run(make_window, qtbot, tmp_path):
    """Issue #32 item 7: a run masks the NaN voxels whatever the mask says, so the preview tints
    exactly them before a run, as the run's stored mask does after it."""
    rng = np.random.default_rng(11)
    data = rng.normal(size=SHAPE)
    nan = rng.random(SHAPE) < 0.1
    data[nan] = np.nan
    np.save(tmp_path / "plain.npy", data)
    window = make_window(engine=None)
    panel = window.panel["data"]
    panel.async_bytes = 0
    window.state["grid.box_size"] = 60.0
    panel.open_file(tmp_path / "plain.npy")
    st, slices = window.run_state, window.views.slices
    qtbot.waitUntil(lambda: st.is_preview and "mask" in st.observed, timeout=10_000)
    window.refresh_views()
    assert not window.state.document().get("data", {}).get("mask")      # no mask in the config
    np.testing.assert_array_equal(st.observed_mask, ~nan)
    assert slices.mask_check.isEnabled() and slices.mask_check.isChecked()
    for p, index in enumerate(planes(slices)):
        np.testing.assert_array_equal(slices.overlays[p].image[..., 3] > 0, slice_of(nan, p, index))
