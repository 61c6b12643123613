"""The 3D volume view (vispy) under Xvfb with Mesa, in a pytest process without TensorFlow.

Rendered images are checked against where the scene's own transform projects a point
(independent of the view's code), colours against pyqtgraph's colour maps, downsampling
against a loop of numpy ``nanmean`` over blocks. The canvas is never on screen: the view
shows off-screen renders in a plain widget, which passes mouse events on to the canvas; the
main window holds no OpenGL widget.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

import numpy as np
import pyqtgraph as pg
import pytest
from pyqtgraph.Qt import QtCore, QtGui, QtWidgets
from PySide6 import QtOpenGLWidgets

from app.state.run_state import RunState
from app.views import volume as volume_module
from app.views.slices import COLOUR_MAPS, PLANES, SlicesView
from app.views.volume import VolumeView, block_mean, masked_value, prepare_volume, projection_cutoffs, texture_factors
from support.gui import tiny_case
from support.runs import meta_for, view_chunk

N = 32
BACKGROUND = (30, 30, 30)          # volume.BACKGROUND "#1e1e1e"
BLOB = (8, 8, 24)


def blob(centre, n=N, width=2.0):
    """Zero everywhere but a Gaussian blob of peak 2 at ``centre`` (voxel indices): its
    core is above the levels (0, 1) of the tests, so it shows the colour map's top colour."""
    x, y, z = np.meshgrid(*[np.arange(n)] * 3, indexing="ij")
    r2 = (x - centre[0]) ** 2 + (y - centre[1]) ** 2 + (z - centre[2]) ** 2
    return 2.0 * np.exp(-r2 / (2 * width ** 2))


def new_mean(state: RunState, mean: np.ndarray) -> None:
    """A chunk event carrying new posterior moments (as the engine sends them)."""
    first = state.n_steps
    state.on_event(view_chunk(first, chains=state.chains or 1,
                              moments=(mean, np.ones_like(mean), first + 1)))


def lut(name: str) -> np.ndarray:
    return pg.colormap.get(name).getLookupTable(0.0, 1.0, 256, alpha=False).astype(int)


def project(view: VolumeView, point) -> tuple[int, int]:
    """(row, column) of the rendered image where a scene point (grid voxel units) lands."""
    transform = view.view.scene.node_transform(view.canvas.scene)
    mapped = transform.map(np.asarray(point, float))
    x, y = mapped[:2] / mapped[3]
    return int(round(y)), int(round(x))


def pixels(image: QtGui.QImage) -> np.ndarray:
    """(h, w, 3) uint8 of a QImage (what the display paints)."""
    image = image.convertToFormat(QtGui.QImage.Format.Format_RGBA8888)
    h, w = image.height(), image.width()
    data = np.frombuffer(image.constBits(), np.uint8, count=image.sizeInBytes())
    return data.reshape(h, image.bytesPerLine())[:, :4 * w].reshape(h, w, 4)[..., :3].copy()


def shown_now(view: VolumeView, qtbot) -> np.ndarray:
    """The pixels on show once the scheduled render (if any) happened."""
    qtbot.waitUntil(lambda: view.renders > 0 and not view._render_timer.isActive(), timeout=3000)
    return pixels(view.display.image)


def patch(image, row, col, r=1):
    return image[row - r: row + r + 1, col - r: col + r + 1, :3].reshape(-1, 3).astype(int)


@pytest.fixture
def gl_log():
    """vispy reports draw errors through its logger instead of raising: collect them."""
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("vispy")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


@pytest.fixture
def open_view(qtbot, gl_log):
    """``open_view(data)``: a state with that data, its slices view (levels (0, 1)) and a
    shown VolumeView without planes (colour checks see the volume alone)."""

    def make(data):
        state = RunState()
        state.reset(meta_for(grid=data.shape, observed={"data": data}))
        slices = SlicesView(state)
        slices.refresh()
        slices.settings.levels["field"] = (0.0, 1.0)     # as if typed
        slices.refresh()
        view = VolumeView(state, slices=slices)
        qtbot.addWidget(slices)
        qtbot.addWidget(view)
        view.resize(420, 360)
        view.show()
        qtbot.waitExposed(view)
        assert view.canvas is not None, view.problem
        view.planes_check.setChecked(False)
        assert view.refresh()
        return state, slices, view

    yield make
    assert not [r.getMessage() for r in gl_log]
    assert "tensorflow" not in sys.modules


@pytest.fixture
def shown(open_view):
    return open_view(blob(BLOB))


def test_the_blob_renders_where_it_projects(shown):
    state, slices, view = shown
    image = view.render_image()
    h, w = image.shape[:2]
    assert (w, h) == tuple(view.canvas.size)
    for row, col in ((2, 2), (2, w - 3), (h - 3, 2), (h - 3, w - 3)):
        np.testing.assert_array_equal(patch(image, row, col), [BACKGROUND] * 9)
    top, bottom = lut("viridis")[[-1, 0]]
    row, col = project(view, np.add(BLOB, 0.5))
    assert np.abs(patch(image, row, col) - top).max() <= 6            # the peak, saturated
    # a point of the box whose ray passes far from the blob: the lowest colour, not background
    octants = [(x, y, z) for x in (4.5, 27.5) for y in (4.5, 27.5) for z in (4.5, 27.5)]
    frow, fcol = max((project(view, p) for p in octants), key=lambda rc: np.hypot(rc[0] - row, rc[1] - col))
    assert np.hypot(frow - row, fcol - col) > 60
    assert np.abs(patch(image, frow, fcol) - bottom).max() <= 6
    # a different field changes the image: the blob moved
    new_mean(state, blob((24, 24, 8)))
    slices.refresh()              # now shows the mean: settings_changed, and the view follows
    view.refresh()
    assert view._volume_key[1:3] == (state.field_version, "mean")
    moved = view.render_image()
    assert np.abs(patch(moved, row, col) - bottom).max() <= 6
    mrow, mcol = project(view, (24.5, 24.5, 8.5))
    assert np.abs(patch(moved, mrow, mcol) - top).max() <= 6


def test_the_display_shows_the_offscreen_render_at_its_size(shown, qtbot):
    state, slices, view = shown
    display = view.display
    on_show = shown_now(view, qtbot)
    assert on_show.shape[:2] == (display.height(), display.width())
    assert tuple(view.canvas.size) == (display.width(), display.height())
    np.testing.assert_array_equal(on_show, view.render_image())
    # the canvas is a hidden top-level widget, not a child of the view
    native = view.canvas.native
    assert native.isWindow() and not native.isVisible()
    assert not view.findChildren(QtOpenGLWidgets.QOpenGLWidget)
    # a bigger view: the canvas follows the display, the image too
    renders = view.renders
    view.resize(520, 430)
    qtbot.waitUntil(lambda: view.renders > renders and not view._render_timer.isActive(), timeout=3000)
    bigger = pixels(display.image)
    assert bigger.shape[:2] == (display.height(), display.width()) != on_show.shape[:2]
    assert tuple(view.canvas.size) == (display.width(), display.height())
    np.testing.assert_array_equal(bigger, view.render_image())
    # a change of the scene (the cursor moves the planes) is rendered and shown
    view.planes_check.setChecked(True)
    slices.set_cursor((3, 20, 9))
    after = shown_now(view, qtbot)
    assert np.abs(after.astype(int) - bigger).max() > 40
    np.testing.assert_array_equal(after, view.render_image())


def test_drag_and_wheel_on_the_display_move_the_camera(shown, qtbot):
    state, slices, view = shown
    display, camera = view.display, view.view.camera
    before = shown_now(view, qtbot)
    azimuth, elevation, scale = camera.azimuth, camera.elevation, camera.scale_factor
    renders = view.renders
    left, none = QtCore.Qt.MouseButton.LeftButton, QtCore.Qt.KeyboardModifier.NoModifier
    qtbot.mousePress(display, left, none, QtCore.QPoint(150, 150))
    for x in range(165, 271, 15):                # vispy drops moves closer than 10 ms
        qtbot.wait(15)
        qtbot.mouseMove(display, QtCore.QPoint(x, 150))
    qtbot.mouseRelease(display, left, none, QtCore.QPoint(270, 150))
    assert abs(camera.azimuth - azimuth) > 20 and camera.elevation == elevation
    rotated = shown_now(view, qtbot)
    assert view.renders > renders
    assert np.abs(rotated.astype(int) - before).max() > 40
    np.testing.assert_array_equal(rotated, view.render_image())
    # the wheel zooms in
    at = QtCore.QPointF(150, 150)
    wheel = QtGui.QWheelEvent(at, display.mapToGlobal(at), QtCore.QPoint(0, 0), QtCore.QPoint(0, 120),
                              QtCore.Qt.MouseButton.NoButton, none, QtCore.Qt.ScrollPhase.NoScrollPhase,
                              False)
    QtWidgets.QApplication.sendEvent(display, wheel)
    assert camera.scale_factor < scale
    assert camera.azimuth != azimuth             # the zoom kept the turn


def test_the_main_window_holds_no_opengl_widget(make_window, qtbot, tmp_path):
    """An OpenGL widget in a window makes Qt composite all of it through OpenGL (slow on
    software OpenGL): the 3D tab, once shown and drawn, must not bring one in."""
    window = make_window(tiny_case(tmp_path), engine=None)
    lazy = window.views.show_tab("3D volume")
    qtbot.waitUntil(lambda: lazy.view is not None, timeout=3000)
    view = lazy.view
    assert isinstance(view, VolumeView) and view.canvas is not None, getattr(view, "problem", view)
    qtbot.waitUntil(lambda: view.renders > 0, timeout=3000)    # shown and drawn
    assert view.display.isVisible() and view.display.window() is window
    assert not window.findChildren(QtOpenGLWidgets.QOpenGLWidget)
    assert view.canvas.native.window() is not window and not view.canvas.native.isVisible()


def test_colours_follow_the_slices_colour_map(shown, qtbot):
    state, slices, view = shown
    row, col = project(view, np.add(BLOB, 0.5))
    with qtbot.waitSignal(slices.settings_changed, timeout=1000):
        slices.cmap_combo.setCurrentIndex(COLOUR_MAPS.index("magma"))
    assert view._cmap_shown == "magma"
    image = view.render_image()
    assert np.abs(patch(image, row, col) - lut("magma")[-1]).max() <= 6
    # the vispy map is pyqtgraph's table
    colours = view.volume.cmap.map(np.linspace(0, 1, 5))[:, :3] * 255
    expected = pg.colormap.get("magma").map(np.linspace(0, 1, 5), mode="byte")[:, :3]
    assert np.abs(colours - expected).max() <= 2
    # the colour bar beside the volume shows the same map and the volume's levels
    assert view.colour_bar.colorMap().name == "magma"
    assert tuple(view.colour_bar.levels()) == tuple(view.volume.clim)


def test_levels_kind_and_chain_changes_are_announced_and_followed(shown, qtbot):
    state, slices, view = shown
    uploads = view.uploads
    with qtbot.waitSignal(slices.settings_changed, timeout=1000):
        slices.level_spins[1].setValue(2.0)
    assert view.volume.clim == slices.settings.levels["field"] and view.volume.clim[1] == 2.0
    assert view.uploads == uploads + 1
    slices.set_kind("data")                      # shown already: no change
    new_mean(state, blob((24, 24, 8)))
    slices.refresh()
    assert view._volume_key[2] == "data"
    with qtbot.waitSignal(slices.settings_changed, timeout=1000):
        slices.set_kind("mean")
    assert view._volume_key[2] == "mean"
    texture, _ = prepare_volume(state.mean, slices.settings.levels["field"], 256)
    np.testing.assert_array_equal(view.volume._last_data, texture)
    # the latest draw of chain 1 (two chains: a chunk event with one field per chain)
    draws = np.stack([blob((4, 4, 4)), blob((28, 28, 28))]).astype(np.float32)
    state.on_event(view_chunk(state.n_steps, chains=2, latest_field=draws))
    slices.refresh()
    with qtbot.waitSignal(slices.settings_changed, timeout=1000):
        slices.set_kind("latest")
    assert view._volume_key[2:4] == ("latest", 0)
    with qtbot.waitSignal(slices.settings_changed, timeout=1000):
        slices.chain_spin.setValue(1)
    assert view._volume_key[2:4] == ("latest", 1)
    texture, _ = prepare_volume(draws[1], slices.settings.levels["field"], 256)
    np.testing.assert_array_equal(view.volume._last_data, texture)
    # the colour map of another level group: std starts with magma
    with qtbot.waitSignal(slices.settings_changed, timeout=1000):
        slices.set_kind("std")
    assert view._cmap_shown == "magma" and view._volume_key[2] == "std"


def test_planes_move_with_the_cursor(shown, qtbot):
    state, slices, view = shown
    view.planes_check.setChecked(True)
    before = view.render_image()
    for cursor in ((3, 20, 9), (30, 1, 17)):
        slices.set_cursor(cursor)
        for node, (_, _, normal) in zip(view.planes, PLANES):
            translate = node.transform.translate
            assert translate[normal] == cursor[normal] + 0.5
            assert [translate[a] for a in range(3) if a != normal] == [0.0, 0.0]
        after = view.render_image()
        assert np.abs(after.astype(int) - before).max() > 40
        before = after
    # the xy plane's corner (0, 0, k + 1/2) is where its outline is drawn: brighter than the volume
    assert all(node.visible for node in view.planes)
    view.planes_check.setChecked(False)
    assert not any(node.visible for node in view.planes)


def test_visuals_are_made_once_and_fed_with_set_data(shown, monkeypatch):
    state, slices, view = shown
    calls = []
    original = view.volume.set_data
    monkeypatch.setattr(view.volume, "set_data",
                        lambda *a, **k: (calls.append(a[0].shape), original(*a, **k)))
    visuals = [id(v) for v in (view.volume, view.box, *view.planes, *view.plane_fills, view.canvas)]
    assert not view.refresh()                    # nothing changed: nothing done
    slices.set_cursor((1, 2, 3))
    assert not calls                             # the cursor moves planes, uploads nothing
    for k in range(3):
        new_mean(state, blob((8 + k, 8, 8)))
        slices.refresh()                         # the first one: settings_changed (now "mean")
        view.refresh()
        assert not view.refresh()
        assert calls == [(N, N, N)] * (k + 1)
        assert view._volume_key[:3] == (state.layout_version, state.field_version, "mean")
    assert visuals == [id(v) for v in (view.volume, view.box, *view.planes, *view.plane_fills, view.canvas)]
    # a refresh with nothing new is cheap (the views are refreshed from a 10 Hz timer)
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        assert not view.refresh()
        times.append(time.perf_counter() - t0)
    assert np.median(times) < 2e-3


def test_block_means_equal_numpy():
    rng = np.random.default_rng(1)
    volume = rng.normal(size=(10, 7, 5))
    volume[rng.uniform(size=volume.shape) < 0.3] = np.nan
    volume[:3, :2, :] = np.nan                   # a whole block masked
    factors = (3, 2, 1)
    out = block_mean(volume, factors)
    assert out.shape == (4, 4, 5) and out.dtype == np.float32
    expected = np.full(out.shape, np.nan)
    for a in range(4):
        for b in range(4):
            for c in range(5):
                block = volume[3 * a: 3 * a + 3, 2 * b: 2 * b + 2, c]
                if np.isfinite(block).any():
                    expected[a, b, c] = np.nanmean(block)
    np.testing.assert_allclose(out, expected, rtol=1e-6, equal_nan=True)
    assert np.isnan(out[0, 0]).all()
    # all finite, whole blocks (the fast path)
    finite = rng.normal(size=(6, 4, 8))
    expected = [[[finite[3 * a: 3 * a + 3, 2 * b: 2 * b + 2, 4 * c: 4 * c + 4].mean() for c in range(2)]
                 for b in range(2)] for a in range(2)]
    np.testing.assert_allclose(block_mean(finite, (3, 2, 4)), expected, rtol=1e-6)
    assert texture_factors((300, 256, 100), 256) == (2, 1, 1)
    assert texture_factors((2048, 9, 4097), 2048) == (1, 1, 3)
    # the texture: (z, y, x), no NaN, voxel sizes n / m
    texture, scale = prepare_volume(volume, (-1.0, 1.0), 4)     # factors (3, 2, 2)
    assert texture.shape == (3, 4, 4) and texture.dtype == np.float32
    np.testing.assert_allclose(scale, [10 / 4, 7 / 4, 5 / 3])
    reduced = block_mean(volume, (3, 2, 2))
    np.testing.assert_array_equal(texture, np.where(np.isnan(reduced), masked_value((-1, 1)),
                                                    reduced).transpose(2, 1, 0))


def test_a_grid_over_the_limit_is_shown_as_block_means(shown):
    state, slices, view = shown
    view.voxels_per_axis = 12
    assert view.max_texture_size == 12
    assert view.refresh()
    assert view.texture_shape == (11, 11, 11)
    np.testing.assert_allclose(view.volume.transform.scale[:3], [N / 11] * 3)
    np.testing.assert_allclose(view.volume.transform.translate[:3], [N / 22] * 3)
    expected, _ = prepare_volume(state.volume("data"), (0.0, 1.0), 12)
    np.testing.assert_array_equal(view.volume._last_data, expected)
    assert "11x11x11" in view.hint_label.text()
    # the blob is still drawn where it is (the texture fills the same box)
    image = view.render_image()
    row, col = project(view, np.add(BLOB, 0.5))
    assert np.abs(patch(image, row, col) - lut("viridis")[0]).max() > 120


def test_the_voxel_budget_follows_the_renderer(shown, monkeypatch):
    state, slices, view = shown
    renderer = volume_module.gl_renderer()
    assert renderer                              # read once with GL_MAX_3D_TEXTURE_SIZE
    assert volume_module.gl_texture_limit() >= 256
    monkeypatch.setitem(volume_module._GL_PROBE, "renderer", "llvmpipe (LLVM 15.0.6, 256 bits)")
    assert volume_module.default_voxels_per_axis() == 128 and view.max_texture_size == 128
    monkeypatch.setitem(volume_module._GL_PROBE, "renderer", "NVIDIA H200/PCIe/SSE2")
    assert view.max_texture_size == min(512, volume_module.gl_texture_limit())
    view.voxels_per_axis = 40
    assert view.max_texture_size == 40


def test_masked_voxels_are_see_through(open_view):
    data = blob(BLOB)
    data[:8] = np.nan                            # x < 8 masked, all y and z
    state, slices, view = open_view(data)
    texture = view.volume._last_data
    assert np.isfinite(texture).all()
    assert (texture[:, :, :8] == masked_value((0.0, 1.0))).all()
    assert view.volume.mip_cutoff == projection_cutoffs((0.0, 1.0))[0] > masked_value((0.0, 1.0))
    camera = view.view.camera
    camera.fov, camera.elevation, camera.azimuth = 0.0, 90.0, 0.0      # straight down z
    image = view.render_image()
    row, col = project(view, (4.0, 16.0, 16.0))
    np.testing.assert_array_equal(patch(image, row, col), [BACKGROUND] * 9)
    row, col = project(view, (20.0, 16.0, 16.0))
    assert np.abs(patch(image, row, col) - lut("viridis")[0]).max() <= 6
    # the minimum projection stores masked voxels above the levels instead
    view.set_method("minip")
    assert (view.volume._last_data[:, :, :8] == masked_value((0.0, 1.0), "minip")).all()


def test_no_field_shows_a_hint(qtbot, gl_log):
    state = RunState()
    slices = SlicesView(state)
    view = VolumeView(state, slices=slices)
    qtbot.addWidget(slices)
    qtbot.addWidget(view)
    view.resize(300, 200)
    view.show()
    qtbot.waitExposed(view)
    slices.refresh()
    view.refresh()
    assert view.hint_label.text() == "no run yet: start one or open a run directory"
    assert not view.volume.visible and not view.box.visible
    image = view.render_image()
    assert (image[..., :3] == BACKGROUND).all()
    state.reset({"chains": 2, "model_kind": "integral", "param_names": ["A"]})
    slices.refresh()
    view.refresh()
    assert view.hint_label.text() == "this run has no field"
    view.planes_check.setChecked(True)
    assert not any(node.visible for node in view.planes)
    assert not gl_log


def test_without_slices_it_has_its_own_kind_and_cursor(qtbot):
    state = RunState()
    state.reset(meta_for(grid=(N, N, N), observed={"data": blob(BLOB), "truth": blob((4, 4, 4))}))
    view = VolumeView(state)
    qtbot.addWidget(view)
    view.show()
    qtbot.waitExposed(view)
    view.refresh()
    assert view._volume_key[2] == "data"         # "mean" does not exist yet: the data
    view.kind_combo.setCurrentIndex(view.kind_combo.findData("truth"))
    assert view._volume_key[2] == "truth"
    expected, _ = prepare_volume(blob((4, 4, 4)), view.settings.levels["field"], 256)
    np.testing.assert_array_equal(view.volume._last_data, expected)
    assert view.settings.cursor == (16, 16, 16)
    view.set_cursor((40, -1, 3))
    assert [node.transform.translate[normal] for node, (_, _, normal) in zip(view.planes, PLANES)] \
        == [3.5, 0.5, 31.5]


def test_hidden_view_uploads_nothing_until_shown(qtbot):
    state = RunState()
    state.reset(meta_for(grid=(8, 8, 8), observed={"data": blob((2, 2, 2), n=8)}))
    view = VolumeView(state)
    qtbot.addWidget(view)
    view.refresh()
    assert view.uploads == 0
    view.show()
    qtbot.waitUntil(lambda: view.uploads == 1, timeout=2000)


def test_big_volumes_are_prepared_off_the_gui_thread_and_stale_results_dropped(shown, qtbot, monkeypatch):
    state, slices, view = shown
    release = threading.Event()
    threads = []

    def slow_prepare(*args):
        threads.append(threading.current_thread())
        release.wait(5)
        return prepare_volume(*args)

    monkeypatch.setattr(volume_module, "prepare_volume", slow_prepare)
    view.async_voxels = 0                        # every volume is "big"
    uploads = view.uploads
    new_mean(state, blob((8, 8, 8)))
    slices.refresh()                             # settings_changed: the view asks for the mean
    view.refresh()                               # returns at once, the worker is blocked
    first = view._pending_key
    assert first is not None and first[1] == state.field_version and view.uploads == uploads
    new_mean(state, blob((20, 20, 20)))          # before the first is ready
    slices.refresh()
    assert not view.refresh()                    # nothing drawn yet
    assert view._pending_key != first
    release.set()
    qtbot.waitUntil(lambda: view._pending_key is None, timeout=3000)
    qtbot.wait(50)
    assert view.uploads == uploads + 1           # the stale first result was dropped
    assert view._volume_key[1] == state.field_version
    assert threads and all(t is not threading.main_thread() for t in threads)
    np.testing.assert_array_equal(view.volume._last_data, prepare_volume(state.mean, (0.0, 1.0), 256)[0])


def test_export_png(shown, tmp_path):
    state, slices, view = shown
    path = tmp_path / "volume.png"
    assert view.export_png(path) == str(path)
    written = QtGui.QImage(str(path))
    assert (written.width(), written.height()) == tuple(view.canvas.size)
    rendered = view.render_image()
    pixel = written.pixelColor(5, 5)
    assert (pixel.red(), pixel.green(), pixel.blue()) == tuple(rendered[5, 5, :3])
    with pytest.raises(OSError, match="could not write"):
        view.export_png(tmp_path / "no such folder" / "x.png")
    # as a figure: the rendered scene where the display is, and the colour bar beside it
    parts = view.figure_parts()
    assert len(parts) == 2 and isinstance(parts[0][0], QtGui.QImage) and parts[1][0] is view.colour_bar_widget
    assert parts[1][1].left() >= parts[0][1].right()
    svg = tmp_path / "volume.svg"
    view.export_image(svg)
    assert "<image" in svg.read_text() and "<text" in svg.read_text()      # the scene, the bar's tick labels


def test_export_before_shown_is_a_clear_error(qtbot):
    view = VolumeView(RunState())
    qtbot.addWidget(view)
    with pytest.raises(RuntimeError, match="not been shown"):
        view.export_png("never.png")


def test_without_opengl_the_view_says_why(qtbot, monkeypatch):
    monkeypatch.setattr(volume_module, "gl_problem", lambda: "no OpenGL context could be created")
    state = RunState()
    state.reset(meta_for(grid=(4, 4, 4), observed={"data": np.zeros((4, 4, 4))}))
    view = VolumeView(state)
    qtbot.addWidget(view)
    view.show()
    assert view.canvas is None
    assert "no OpenGL context could be created" in view.problem_label.text()
    assert not view.refresh()
    with pytest.raises(RuntimeError, match="unavailable: no OpenGL"):
        view.export_png("x.png")
    monkeypatch.setattr(volume_module, "gl_problem", lambda: "")
    monkeypatch.setattr(VolumeView, "_build_scene", lambda self: 1 / 0)
    view = VolumeView(state)
    qtbot.addWidget(view)
    assert view.canvas is None and "ZeroDivisionError" in view.problem_label.text()
    # a failure half-way (the canvas exists, a visual cannot be made): no GL widget left over
    monkeypatch.undo()
    from vispy import scene

    def no_volume(*args, **kwargs):
        raise RuntimeError("3D textures are not supported")

    monkeypatch.setattr(scene.visuals, "Volume", no_volume)
    view = VolumeView(state)
    qtbot.addWidget(view)
    view.show()
    assert view.canvas is None and "3D textures are not supported" in view.problem_label.text()
    assert not view.findChildren(QtOpenGLWidgets.QOpenGLWidget)
    assert not view.refresh()
