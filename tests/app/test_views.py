"""The live views over a RunState fed with engine-shaped events (see test_run_state.fake_run)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pyqtgraph as pg
import pytest
from pyqtgraph.Qt import QtCore

import app.views.live as live_module
from app.state.run_state import VOLUME_KINDS, RunState
from app.views.base import FIELD, FIELD_VIEWS, INTEGRAL, PLOTS, LazyView, RunView, UnavailableView
from app.views.health import HealthView
from app.views.live import LiveViews
from app.views.registry import VIEWS, entry, titles
from app.views.slices import PLANES, slice_of
from app.views.traces import TracesView
from support.runs import fake_run, feed, meta_for

GRID = (6, 5, 4)


def observed():
    rng = np.random.default_rng(5)
    data = rng.normal(size=GRID)
    mask = np.ones(GRID, bool)
    mask[2] = False
    data[~mask] = np.nan
    return {"data": data, "mask": mask, "truth": rng.normal(size=GRID), "noise": np.where(mask, 0.5, 1.0)}


@pytest.fixture
def fed_state():
    events, _ = fake_run(num_warmup=30, num_samples=50, chunk_size=16, thin=3, grid=GRID)
    state = RunState()
    state.reset(meta_for(num_warmup=30, num_samples=50, thin=3, grid=GRID, observed=observed()))
    feed(state, events)
    return state, events


@pytest.fixture
def live(qtbot, fed_state):
    state, events = fed_state
    views = LiveViews(state)
    qtbot.addWidget(views)
    views.resize(1200, 700)
    views.show()
    qtbot.waitExposed(views)
    return views, state, events


def test_trace_curves_hold_every_step_of_every_chain(qtbot, fed_state):
    state, events = fed_state
    view = TracesView(state)
    qtbot.addWidget(view)
    assert view.refresh()
    view.resize(600, 500)
    view.show()
    qtbot.waitExposed(view)
    qtbot.wait(20)            # auto-range happens before the first paint; clipToView follows it
    assert set(view.plots) == {"lp", "index", "amplitude", "pins"}
    for name, curves in view.curves.items():
        assert len(curves) == 2
        expected = state.stat("lp") if name == "lp" else state.param(name)
        for c, curve in enumerate(curves):
            x, y = curve.getOriginalDataset()
            np.testing.assert_array_equal(x, np.arange(80))
            np.testing.assert_array_equal(y, expected[c])
            assert len(curve.getData()[0]) == 80
    for plot in view.plots.values():
        assert plot.clipToViewMode() and plot.downsampleMode()[1:] == (True, "peak")


def test_health_plots_and_divergences(qtbot, fed_state):
    state, _ = fed_state
    view = HealthView(state)
    qtbot.addWidget(view)
    view.refresh()
    assert set(view.curves) == {"grad_norm", "acceptance_rate", "step_size"}
    for name, curves in view.curves.items():
        for c, curve in enumerate(curves):
            np.testing.assert_array_equal(curve.getOriginalDataset()[1], state.stat(name)[c])
    assert view.plots["grad_norm"].getAxis("left").logMode
    n_div = int(state.stat("diverging").sum())
    assert n_div > 0
    chain, step = np.nonzero(state.stat("diverging"))
    # post-warmup ones filled, warmup ones hollow: together every divergent step
    post = step >= state.num_warmup
    assert post.any() and (~post).any()
    for dots, part in ((view.divergences["grad_norm"], post), (view.warmup_divergences["grad_norm"], ~post)):
        x, y = dots.getOriginalDataset()
        np.testing.assert_array_equal(x, step[part])
        np.testing.assert_array_equal(y, state.stat("grad_norm")[chain[part], step[part]])
    assert view.divergence_note.text == (
        f"{int(post.sum())} divergences ({int((~post).sum())} in warmup); hollow: in warmup, expected")


def test_slice_images_equal_the_selected_arrays_slices(live):
    views, state, _ = live
    slices = views.slices
    assert slices.settings.cursor == (3, 2, 2)             # the centre of the grid
    for kind in VOLUME_KINDS:
        slices.set_kind(kind)
        assert slices.shown_kind() == kind
        volume = state.volume(kind, slices.settings.chain)
        for p in range(3):
            index = slices.settings.cursor[PLANES[p][2]]
            expected = slice_of(volume, p, index).astype(np.float32)   # shown as float32
            np.testing.assert_array_equal(slices.images[p].image, expected)
    # orientation: the xy view shows a[:, :, k].T (x across, y up)
    mean = state.volume("mean")
    slices.set_kind("mean")
    np.testing.assert_array_equal(slices.images[0].image, mean[:, :, 2].T.astype(np.float32))
    np.testing.assert_array_equal(slices.images[1].image, mean[:, 2, :].T.astype(np.float32))
    np.testing.assert_array_equal(slices.images[2].image, mean[3, :, :].T.astype(np.float32))
    # the chain of the latest draw
    slices.set_kind("latest")
    slices.chain_spin.setValue(1)
    np.testing.assert_array_equal(slices.images[0].image, state.latest_field[1][:, :, 2].T)


def test_levels_are_fixed_until_auto(live):
    views, state, events = live
    slices = views.slices
    slices.set_kind("latest")
    levels = slices.settings.levels["field"]
    assert slices.images[0].levels.tolist() == list(levels)
    # a new draw with a far larger range: the levels stay
    event = dict(events[-1], first_step=80, n_steps=1, latest_field=events[-1]["latest_field"] * 100,
                 stats={k: v[:, :1] for k, v in events[-1]["stats"].items()},
                 params={k: v[:, :1] for k, v in events[-1]["params"].items()})
    state.on_chunk(event)
    views.refresh()
    assert slices.settings.levels["field"] == levels
    slices.auto_button.click()
    lo, hi = slices.settings.levels["field"]
    assert (lo, hi) == pytest.approx(tuple(np.percentile(state.latest_field[0], [1, 99])))
    assert slices.images[0].levels.tolist() == pytest.approx([lo, hi])
    slices.set_kind("residual")
    lo, hi = slices.settings.levels["residual"]
    assert lo == -hi


def test_crosshairs_and_sliders_move_the_other_views(live):
    views, _, _ = live
    slices = views.slices
    slices.set_kind("truth")
    truth = views.state.volume("truth")
    # drag the xy view's vertical line (x) to voxel 1: the yz view is now the slice x = 1
    slices.vlines[0].setValue(1.7)
    assert slices.settings.cursor == (1, 2, 2)
    assert slices.sliders[2].value() == 1
    assert slices.vlines[1].value() == 1.5               # xz view: x across
    np.testing.assert_array_equal(slices.images[2].image, truth[1].T.astype(np.float32))
    # drag the xz view's horizontal line (z) to 0: the xy view is the slice z = 0
    slices.hlines[1].setValue(0.2)
    assert slices.settings.cursor == (1, 2, 0)
    assert slices.sliders[0].value() == 0
    assert slices.hlines[2].value() == 0.5               # yz view: z up
    np.testing.assert_array_equal(slices.images[0].image, truth[:, :, 0].T.astype(np.float32))
    # the xz view's slider sets y: crosshairs of xy and yz follow
    slices.sliders[1].setValue(4)
    assert slices.settings.cursor == (1, 4, 0)
    assert slices.hlines[0].value() == 4.5 and slices.vlines[2].value() == 4.5
    np.testing.assert_array_equal(slices.images[1].image, truth[:, 4, :].T.astype(np.float32))


def test_clicking_a_voxel_pins_it_and_adds_a_trace(qtbot, live):
    views, state, _ = live
    slices = views.slices
    plot, image = slices.plots[0], slices.images[0]        # xy view at z = 2
    qtbot.wait(50)
    scene_pos = image.mapToScene(QtCore.QPointF(4.5, 1.5))   # column x = 4, row y = 1
    pos = plot.mapFromScene(scene_pos)
    with qtbot.waitSignal(slices.voxel_pinned, timeout=2000) as blocker:
        qtbot.mouseClick(plot.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=pos)
    assert blocker.args == [(4, 1, 2)]
    assert (4, 1, 2) in state.pins
    assert slices.settings.cursor == (4, 1, 2)
    views.refresh()
    curves = views.traces.pin_curves[(4, 1, 2)]
    assert len(curves) == 2
    trace = state.pins[(4, 1, 2)]
    np.testing.assert_array_equal(curves[1].getOriginalDataset()[1], trace.values[1])
    # the pinned voxel is marked in the slices through it (all three, at the cursor) ...
    assert [len(m.data) for m in slices.pin_markers] == [1, 1, 1]
    np.testing.assert_array_equal(slices.pin_markers[0].getData(), ([4.5], [1.5]))
    # ... and not in the yz slice x = 0
    slices.sliders[2].setValue(0)
    assert [len(m.data) for m in slices.pin_markers] == [1, 1, 0]
    slices.clear_pins_button.click()
    views.refresh()
    assert state.pins == {} and views.traces.pin_curves == {}


def test_refresh_without_changes_sets_no_data(live, monkeypatch):
    views, state, events = live
    calls = {"setData": 0, "setImage": 0}
    original_set_data, original_set_image = pg.PlotDataItem.setData, pg.ImageItem.setImage

    def counting_set_data(self, *args, **kwargs):
        calls["setData"] += 1
        return original_set_data(self, *args, **kwargs)

    def counting_set_image(self, *args, **kwargs):
        calls["setImage"] += 1
        return original_set_image(self, *args, **kwargs)

    monkeypatch.setattr(pg.PlotDataItem, "setData", counting_set_data)
    monkeypatch.setattr(pg.ImageItem, "setImage", counting_set_image)
    assert not views.refresh()
    assert not views.slices.refresh() and not views.traces.refresh() and not views.health.refresh()
    assert calls == {"setData": 0, "setImage": 0}
    # new steps without a field draw (a warmup-like chunk): curves redraw, images do not
    event = dict(events[0], first_step=80, n_steps=3,
                 stats={k: v[:, :3] for k, v in events[0]["stats"].items()},
                 params={k: v[:, :3] for k, v in events[0]["params"].items()})
    for key in ("latest_field", "latest_power", "moments"):
        event.pop(key, None)
    state.on_chunk(event)
    assert views.refresh()
    assert calls["setData"] > 0 and calls["setImage"] == 0
    assert len(views.traces.curves["lp"][0].getOriginalDataset()[0]) == 83


def test_views_of_a_run_without_a_field(qtbot):
    events, _ = fake_run(param_names=("A", "sigma"))
    for event in events:
        for key in ("latest_field", "latest_power", "moments"):
            event.pop(key, None)
    state = RunState()
    state.reset({"chains": 2, "param_names": ["A", "sigma"], "num_warmup": 40, "num_samples": 60,
                 "model_kind": "integral", "grid_shape": None})
    feed(state, events)
    views = LiveViews(state)
    qtbot.addWidget(views)
    views.refresh(force=True)
    # the field views are hidden: the integral model's own view takes their place
    assert views.tab_names("left") == ["Integral model"]
    assert views.left.currentWidget() is views.integral
    assert views.tab_names("right") == ["Traces", "Pairs", "Health", "Diagnostics"]
    assert set(views.traces.plots) == {"lp", "A", "sigma"}
    views.slices.refresh(force=True)
    assert "no field" in views.slices.note_label.text()


def test_the_registry_lists_every_view_once_in_tab_order():
    # the tab order of each side, and the model kinds each view applies to
    assert titles(FIELD_VIEWS) == ("Slices", "3D volume", "Exact posterior", "Integral model")
    assert titles(PLOTS) == ("Traces", "Pairs", "Health", "P(k)", "Diagnostics")
    assert titles() == titles(FIELD_VIEWS) + titles(PLOTS)
    assert [e.title for e in VIEWS] == list(titles())       # field views first, then plots
    assert {e.title for e in VIEWS if not e.applies_to(INTEGRAL)} == \
        {"Slices", "3D volume", "Exact posterior", "P(k)"}
    assert {e.title for e in VIEWS if not e.applies_to(FIELD)} == {"Integral model"}
    assert [e.title for e in VIEWS if e.lazy] == ["3D volume"]
    assert {e.title: e.view_class.csv_contents for e in VIEWS if e.view_class.csv_contents} == \
        {"P(k)": "P(k) curves", "Diagnostics": "Diagnostics table"}
    for e in VIEWS:
        assert issubclass(e.view_class, RunView) and e.view_class.title == e.title
        assert entry(e.title) is e
    with pytest.raises(KeyError, match="no view called 'Nope'"):
        entry("Nope")


def test_live_views_build_their_tabs_from_the_registry(qtbot, tmp_path):
    state = RunState()
    state.reset(meta_for(grid=GRID))
    views = LiveViews(state)
    qtbot.addWidget(views)
    assert [views.left.tabText(i) for i in range(views.left.count())] == list(titles(FIELD_VIEWS))
    assert [views.right.tabText(i) for i in range(views.right.count())] == list(titles(PLOTS))
    for e in VIEWS:
        view = views.view(e.title)
        assert view is getattr(views, e.name) and view.title == e.title
        assert isinstance(view, LazyView if e.lazy else e.view_class)
        assert view.applies_to(FIELD) == e.applies_to(FIELD)
    assert views.volume.view is None                 # built on first show only
    with pytest.raises(KeyError, match="no view called"):
        views.show_tab("Nope")
    # a view without a table says so; an unwritable PNG names the file
    with pytest.raises(ValueError, match="Traces has no CSV export"):
        views.traces.export_csv(tmp_path / "t.csv")
    with pytest.raises(OSError, match="could not write the PNG image"):
        views.traces.export_png(tmp_path / "no such folder" / "t.png")
    assert views.traces.export_png(tmp_path / "t.png") == str(tmp_path / "t.png")


def test_an_optional_view_that_cannot_be_built_says_why(qtbot, monkeypatch):
    def broken(_run_state, _built):
        raise RuntimeError("no OpenGL here")

    monkeypatch.setattr(live_module, "VIEWS", tuple(
        dataclasses.replace(e, factory=broken) if e.name in ("volume", "exact") else e
        for e in VIEWS))
    state = RunState()
    state.reset(meta_for(grid=GRID))
    views = LiveViews(state)
    qtbot.addWidget(views)
    assert isinstance(views.exact, UnavailableView) and views.exact.title == "Exact posterior"
    assert views.exact.label.text() == ("The exact-posterior comparison is not available "
                                        "here: RuntimeError: no OpenGL here")
    assert not views.exact.refresh(force=True)
    lazy = views.show_tab("3D volume")
    views.show()
    qtbot.waitUntil(lambda: lazy.view is not None, timeout=3000)
    assert isinstance(lazy.view, UnavailableView)
    assert "The 3D view is not available here: RuntimeError: no OpenGL here" == lazy.view.label.text()
    assert not lazy.refresh(force=True)


def test_the_views_import_no_tensorflow():
    code = ("import sys, app.views, app.views.slices, app.views.traces, app.views.health, "
            "app.views.live, app.views.style, app.views.jobs, app.views.power, "
            "app.views.diagnostics, app.views.volume, app.views.exact, app.views.integral, "
            "app.views.base, app.views.registry, app.panels.data, "
            "app.state.run_state, "
            "app.main_window; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'tensorflow_probability', 'tf_keras')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_views_rebuild_when_the_run_is_learned_later(qtbot):
    """The main window knows chains and grid from the config; parameters come with the first
    chunk (or the store): the trace rows follow."""
    events, _ = fake_run(num_warmup=30, num_samples=50, chunk_size=16, thin=3, grid=GRID)
    state = RunState()
    state.reset({"chains": 2, "num_warmup": 30, "num_samples": 50, "thin": 3, "grid_shape": GRID,
                 "model_kind": "field", "run_dir": "/nonexistent/run"})
    views = LiveViews(state)
    qtbot.addWidget(views)
    assert set(views.traces.plots) == {"lp", "pins"}
    assert views.traces.empty_hint.isVisibleTo(views.traces.plots["lp"])
    layout = state.layout_version
    feed(state, events)
    assert state.layout_version > layout and state.param_names == ["index", "amplitude"]
    views.refresh()
    assert set(views.traces.plots) == {"lp", "index", "amplitude", "pins"}
    assert len(views.traces.curves["index"][0].getOriginalDataset()[0]) == 80
    assert not views.traces.empty_hint.isVisibleTo(views.traces.plots["lp"])
    assert views.slices.shown_kind() == "mean"


def test_slice_axes_are_in_the_box_unit_and_the_cursor_names_its_voxel(qtbot):
    """Axes in the box's unit (pyqtgraph's axis scale: cell size per axis, the view in voxels),
    labelled with the unit; the cursor read-out gives the voxel indices and the voxel centre's
    position; without a box (no config) the axes say voxels."""
    from app.views.slices import SlicesView
    from support.configs import field_config_text

    box = (60.0, 25.0, 8.0)           # cells 10, 5, 2 along x, y, z
    config = field_config_text(box_size=list(box), unit="Mpc/h", prior={
        "kind": "power_law", "k_pivot": 0.2, "amplitude": 3.0, "index": -1.5})
    events, _ = fake_run(num_warmup=6, num_samples=8, chunk_size=7, thin=2, grid=GRID)
    state = RunState()
    state.reset(meta_for(num_warmup=6, num_samples=8, thin=2, grid=GRID, observed=observed(),
                         config_text=config))
    feed(state, events)
    view = SlicesView(state)
    qtbot.addWidget(view)
    view.resize(800, 700)
    view.show()
    qtbot.waitExposed(view)
    view.refresh()
    cells = [b / n for b, n in zip(box, GRID)]
    for plot, (_, (h, v), _) in zip(view.plots, PLANES):
        item = plot.getPlotItem()
        for side, axis in (("bottom", h), ("left", v)):
            assert item.getAxis(side).scale == pytest.approx(cells[axis])
            assert item.getAxis(side).labelText == f"{'xyz'[axis]} [Mpc/h]"
        # the tick labels read positions in the box: the largest tick is within the box's length
        item.getAxis("bottom").picture = None
        ticks = item.getAxis("bottom").tickValues(0.0, GRID[h] * cells[h], 400)
        values = [t for _, level in ticks for t in level]
        assert max(values) <= box[h] + 1e-9 and max(values) > GRID[h]
    view.set_cursor((4, 1, 3))
    qtbot.waitUntil(lambda: "voxel (4, 1, 3)" in view.cursor_label.text(), timeout=5000)
    assert "at (45, 7.5, 7) Mpc/h" in view.cursor_label.text()
    # no config: voxel axes
    bare = RunState()
    bare.reset(meta_for(num_warmup=6, num_samples=8, thin=2, grid=GRID, observed=observed()))
    feed(bare, events)
    plain = SlicesView(bare)
    qtbot.addWidget(plain)
    plain.refresh()
    assert plain.plots[0].getPlotItem().getAxis("bottom").labelText == "x [voxel]"
    assert plain.plots[0].getPlotItem().getAxis("bottom").scale == 1.0
    assert plain.cursor_text((1, 2, 3)) == "voxel (1, 2, 3)"
