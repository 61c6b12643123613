"""The 3D view: a vispy volume rendering of what the slice views show, with their three planes.

Conventions. A field is indexed ``a[i, j, k]`` = (x, y, z), as in ``app.views.slices``. The
scene is in voxel units: voxel (i, j, k) covers [i, i+1) x [j, j+1) x [k, k+1), so the grid's
box is [0, nx] x [0, ny] x [0, nz] and z points up. vispy's Volume visual takes a (z, y, x)
array whose voxel centres sit at integer visual coordinates; the texture is ``a.transpose(2,
1, 0)`` and an ``STTransform`` (scale s, translate s / 2) places its voxel m at
s * (m + 1/2). The slice planes sit at the cursor's voxel centres, ``cursor + 1/2``.

Downsampling (``app.views.volume_texture``). A 3D texture holds at most ``GL_MAX_3D_TEXTURE_SIZE`` voxels per axis (queried
once per process) and software GL ray-casts every voxel a ray crosses, so an axis longer
than ``max_texture_size`` (that limit, and at most ``VOXELS_PER_AXIS``: 128 on software
OpenGL, 512 on a GPU) is reduced by block
means of f = ceil(n / max) voxels; the last block of an axis may be partial, and the
texture's m = ceil(n / f) voxels are stretched to fill the whole box (s = n / m).

Masked voxels (NaN) are the mean of the finite voxels of their block, and NaN where a whole
block is masked; the texture stores NaN as a value far below the low level (above the high
level for the minimum projection), so a projection never picks it, no NaN reaches the
shader, and a ray that crosses masked voxels only is discarded (``mip_cutoff``): masked
regions are see-through, showing the background.

Levels and colours are the slice views' (``SliceViewState``: one set of levels per level
group, fixed once set); the vispy colour map is built from pyqtgraph's lookup table of the
same name so the colours match exactly. The texture holds float32 values and the GPU scales
them (``texture_format="r32f"``). Voxels are drawn as the slices draw them, constant over
their cube (nearest-neighbour sampling; "smooth" switches to trilinear interpolation, about
twice the drawing time on software OpenGL). Visuals are created once; ``refresh`` feeds them with
``set_data`` only when what they show changed (field_version, kind, chain, levels, render
method), and moves the planes when the cursor moved.

A stored volume (a run opened or watched: ``core.store.run_store.FieldVolume``, read on
demand) is read and reduced slab by slab along x, each slab a whole number of the store's
blocks and of the reduction factor, so preparing it holds one slab of the draw (8 MiB at
256^3), never the draw; its levels come from the three planes through the cursor
(``app.views.slices.level_sample``).

Threading. A volume of more than ``async_voxels`` voxels (``ASYNC_VOXELS``) is prepared
(block means, transposition, NaN replacement: ``prepare_volume``) on a worker thread
(``app.views.jobs.LatestJob``, one per view: one preparation at a time, only the
newest waiting request kept) and uploaded when it arrives, unless a newer request (run,
field, kind, chain, levels, method or texture size) made it stale; smaller ones are
prepared in the GUI thread.

Display. The vispy canvas is a QOpenGLWidget, and Qt composites a whole top-level window
through OpenGL as soon as it holds one: on software OpenGL every repaint of the main window
then costs several times more, for as long as the window lives. So the canvas is a top-level
widget of its own that never appears on screen (``WA_DontShowOnScreen``, shown once so its
context initialises, then hidden), the scene is rendered off-screen (``canvas.render``: an
FBO read back) whenever it changed, and the image is painted by a plain widget in the view
(``VolumeDisplay``), whose size the canvas follows. Any change of the scene (a visual's
data, the camera) asks the canvas for an update; the canvas's ``update`` is redirected to a
zero-delay timer, so one render serves all the changes of one event-loop turn. The display
passes its mouse and wheel events on to the canvas, so the camera turns, zooms and pans as
it would on the canvas itself.

The GUI process never imports TensorFlow, and vispy is imported only when a view is built:
where vispy or OpenGL is missing, the view shows the reason instead of the canvas.
"""

from __future__ import annotations

import functools
import weakref

import numpy as np
import pyqtgraph as pg
from pyqtgraph.Qt import QtCore, QtGui, QtWidgets

from app.state.run_state import VOLUME_KINDS, VOLUME_LABELS, RunState
from app.views.base import FIELD, FIELD_VIEWS, RunView, save_png
from app.views.jobs import LatestJob
from app.views.slices import LEVEL_GROUPS, PLANES, SliceViewState, level_sample, robust_levels
from app.views.style import steady_axes
from app.views.volume_texture import (  # the texture (numpy only), names kept importable from here
    CUTOFF_RANGES,
    MASK_RANGES,
    block_mean,
    masked_value,
    prepare_volume,
    projection_cutoffs,
    texture_factors,
)
from core.store.run_store import RunStoreError

__all__ = [
    "RENDER_METHODS", "VOXELS_PER_AXIS", "SAFE_TEXTURE_SIZE", "ASYNC_VOXELS", "BACKGROUND",
    "AXIS_COLOURS", "texture_factors", "block_mean", "MASK_RANGES", "CUTOFF_RANGES",
    "masked_value", "projection_cutoffs", "prepare_volume", "vispy_colormap", "gl_problem",
    "gl_texture_limit", "gl_renderer", "default_voxels_per_axis", "VolumeDisplay", "VolumeView"
]

#: vispy's ray-casting projections offered, with their labels
RENDER_METHODS = {"mip": "maximum", "attenuated_mip": "attenuated maximum", "minip": "minimum"}
#: the most voxels per axis rendered, on software OpenGL (Mesa llvmpipe ray-casts on the CPU:
#: 128^3 draws in about 0.1 s, 256^3 in about 0.3 s plus a 64 MB upload) and on a GPU; the
#: GL limit may be lower still
VOXELS_PER_AXIS = {"software": 128, "gpu": 512}
_SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swrast", "software")
#: what every OpenGL 3 implementation accepts (used until the real limit is known)
SAFE_TEXTURE_SIZE = 256
#: volumes with more voxels are prepared (block means, transposition) in a worker thread
ASYNC_VOXELS = 128 ** 3
_GL_MAX_3D_TEXTURE_SIZE = 0x8073
BACKGROUND = "#1e1e1e"
#: colours of the axes x, y, z (a plane takes the colour of its normal)
AXIS_COLOURS = ((0.95, 0.35, 0.35), (0.4, 0.85, 0.4), (0.45, 0.6, 1.0))


@functools.lru_cache(maxsize=None)
def vispy_colormap(name: str):
    """A vispy Colormap with pyqtgraph's colours of the same name (256 entries)."""
    from vispy.color import Colormap

    table = pg.colormap.get(name).getLookupTable(0.0, 1.0, 256, alpha=False)
    return Colormap(np.asarray(table, np.float32) / 255.0)


_GL_PROBE: dict = {}


def gl_problem() -> str:
    """Why OpenGL cannot serve the 3D view ('' when it can). Probed once per process, in a
    throw-away context, which also reads GL_MAX_3D_TEXTURE_SIZE (see :func:`gl_texture_limit`)."""
    if "problem" in _GL_PROBE:
        return _GL_PROBE["problem"]
    problem, limit, renderer = "", 0, ""
    context = QtGui.QOpenGLContext()
    surface = QtGui.QOffscreenSurface()
    try:
        if not context.create():
            problem = "no OpenGL context could be created on this display"
        else:
            surface.setFormat(context.format())
            surface.create()
            if not surface.isValid() or not context.makeCurrent(surface):
                problem = "an OpenGL context was created but could not be made current"
            else:
                fmt = context.format()
                version = (fmt.majorVersion(), fmt.minorVersion())
                if version < (2, 1):
                    problem = f"OpenGL {version[0]}.{version[1]} is too old (3D textures need 2.1)"
                else:
                    try:
                        from vispy.gloo import gl

                        limit = int(gl.glGetParameter(_GL_MAX_3D_TEXTURE_SIZE))
                        renderer = str(gl.glGetParameter(gl.GL_RENDERER))
                    except Exception:            # noqa: BLE001 - the safe limit serves then
                        limit = 0
                context.doneCurrent()
    except Exception as err:                     # noqa: BLE001 - a GL failure must not stop the app
        problem = f"OpenGL failed: {err}"
    finally:
        surface.destroy()
    _GL_PROBE["problem"], _GL_PROBE["limit"], _GL_PROBE["renderer"] = problem, limit, renderer
    return problem


def gl_texture_limit() -> int:
    """GL_MAX_3D_TEXTURE_SIZE of this display's OpenGL (``SAFE_TEXTURE_SIZE`` when unknown)."""
    gl_problem()
    return _GL_PROBE.get("limit") or SAFE_TEXTURE_SIZE


def gl_renderer() -> str:
    """GL_RENDERER of this display's OpenGL ('' when unknown)."""
    gl_problem()
    return _GL_PROBE.get("renderer", "")


def default_voxels_per_axis() -> int:
    """``VOXELS_PER_AXIS`` for this display: software OpenGL, or a GPU."""
    renderer = gl_renderer().lower()
    software = not renderer or any(name in renderer for name in _SOFTWARE_RENDERERS)
    return VOXELS_PER_AXIS["software" if software else "gpu"]


def _hint(state: RunState) -> str:
    """The slice views' note for a state that has nothing to show (same wording)."""
    if state.model_kind == "integral" or (state.chains and not state.has_field and state.n_steps):
        return "this run has no field"
    if not state.has_field:
        return "no run yet: start one or open a run directory"
    return "no data yet"


# -- the view -------------------------------------------------------------------------------

class VolumeDisplay(QtWidgets.QWidget):
    """Paints the latest off-screen render and hands mouse and wheel events to the canvas.

    ``target`` is the canvas's native widget (same local coordinates: the canvas has the
    display's size). A plain raster widget: no OpenGL in the window that holds it.
    """

    resized = QtCore.Signal()
    shown = QtCore.Signal()

    def __init__(self, target, parent=None):
        super().__init__(parent)
        self.target = target
        self.image: QtGui.QImage | None = None
        self.setAttribute(QtCore.Qt.WidgetAttribute.WA_OpaquePaintEvent, True)
        self.setFocusPolicy(QtCore.Qt.FocusPolicy.WheelFocus)
        self.setMinimumSize(160, 140)
        self._background = QtGui.QColor(BACKGROUND)

    def set_image(self, image: QtGui.QImage) -> None:
        self.image = image
        self.update()

    def paintEvent(self, event) -> None:
        painter = QtGui.QPainter(self)
        painter.fillRect(self.rect(), self._background)
        if self.image is not None:
            painter.drawImage(0, 0, self.image)
        painter.end()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.resized.emit()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.shown.emit()

    # the canvas's handlers take the event as it is (positions are local to either widget);
    # the display keeps it, so a drag stays with the display
    def _forward(self, handler, event) -> None:
        try:
            handler(event)
        finally:
            event.accept()

    def mousePressEvent(self, event) -> None:
        self._forward(self.target.mousePressEvent, event)

    def mouseMoveEvent(self, event) -> None:
        self._forward(self.target.mouseMoveEvent, event)

    def mouseReleaseEvent(self, event) -> None:
        self._forward(self.target.mouseReleaseEvent, event)

    def mouseDoubleClickEvent(self, event) -> None:
        self._forward(self.target.mouseDoubleClickEvent, event)

    def wheelEvent(self, event) -> None:
        self._forward(self.target.wheelEvent, event)


def _request_render(view_ref, *_args, **_kwargs) -> None:
    """The canvas's ``update``: schedule one render of the view (if it still exists)."""
    view = view_ref()
    if view is None:
        return
    try:
        view._schedule_render()
    except RuntimeError:                         # the Qt object is gone
        pass


def _discard_canvas(canvas, *_args) -> None:
    """The view was destroyed: its top-level (hidden) canvas widget goes too."""
    try:
        canvas.native.hide()
        canvas.native.deleteLater()
    except RuntimeError:                         # already deleted
        pass


class VolumeView(RunView):
    """Volume rendering of the array the slices show, with the grid's box and the three planes.

    ``VolumeView(run_state, slices=None, parent=None)``. With ``slices`` (a SlicesView) it
    shows that view's kind, chain, levels, colour map and cursor, and follows its
    ``cursor_moved`` and ``settings_changed`` signals; without, it has its own kind selector
    and its planes sit at the grid's centre (``set_cursor`` moves them).

    Mouse: drag to rotate, wheel to zoom, shift-drag to pan; "Reset view" restores the view.
    """

    title = "3D volume"
    group = FIELD_VIEWS
    kinds = frozenset({FIELD})

    def __init__(self, run_state: RunState, slices=None, parent=None):
        super().__init__(run_state, parent)
        self.slices = slices
        self.settings: SliceViewState = slices.settings if slices is not None else SliceViewState()
        self.method = "mip"
        self.voxels_per_axis = 0           # 0: default_voxels_per_axis()
        self.async_voxels = ASYNC_VOXELS
        self.canvas = None
        self.display: VolumeDisplay | None = None
        self.problem = ""
        self.renders = 0                  # off-screen renders shown (the benchmark reads it)
        self.texture_shape = None         # (z, y, x) of the texture uploaded last
        self.texture_scale = None         # (3,) grid voxels per texture voxel along x, y, z
        self.uploads = 0                  # set_data calls (the benchmark and the tests read it)
        self._layout_seen = -1
        self._volume_key = None           # what the volume visual holds
        self._pending_key = None          # what a worker is preparing
        # big volumes are prepared off the GUI thread, one at a time, the newest request
        # waiting; a result whose key is no longer _pending_key is stale and dropped
        self.prepare_job = LatestJob(self, name="fieldscope-volume")
        self.destroyed.connect(self.prepare_job.close)
        self._cmap_shown = None
        self._cursor_shown = None
        self._hint_shown = None
        self._dirty = False
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.setSpacing(2)
        layout.addLayout(self._build_controls())
        self.problem = gl_problem()
        if not self.problem:
            try:
                self._build_scene()
            except Exception as err:     # noqa: BLE001 - no vispy / PyOpenGL / GL: say so, go on
                self._drop_partial_canvas()
                self.problem = f"{type(err).__name__}: {err}"
        if self.canvas is None:
            self.problem_label = QtWidgets.QLabel(f"The 3D view is unavailable: {self.problem}")
            self.problem_label.setWordWrap(True)
            self.problem_label.setAlignment(QtCore.Qt.AlignmentFlag.AlignCenter)
            layout.addWidget(self.problem_label, 1)
            for widget in (self.kind_combo, self.method_combo, self.smooth_check, self.planes_check,
                           self.reset_button):
                widget.setEnabled(False)
            self.hint_label.setText("")
        else:
            row = QtWidgets.QHBoxLayout()
            row.setSpacing(2)
            row.addWidget(self.display, 1)
            row.addWidget(self._build_colour_bar())
            layout.addLayout(row, 1)
            self.prepare_job.finished.connect(self._on_prepared)
        if slices is not None:
            slices.cursor_moved.connect(self._cursor_moved)
            slices.settings_changed.connect(self._slices_changed)

    # -- building (once) ------------------------------------------------------------------

    def _build_colour_bar(self) -> QtWidgets.QWidget:
        """The volume's colour bar (the slices' levels and colour map), beside the display."""
        self.colour_bar = pg.ColorBarItem(values=(0, 1), colorMap="viridis", orientation="vertical",
                                          interactive=False, width=14)
        steady_axes(self.colour_bar)
        self.colour_bar_widget = pg.GraphicsLayoutWidget()
        self.colour_bar_widget.setFixedWidth(72)
        self.colour_bar_widget.addItem(self.colour_bar)
        return self.colour_bar_widget

    def _build_controls(self) -> QtWidgets.QHBoxLayout:
        row = QtWidgets.QHBoxLayout()
        row.setContentsMargins(2, 0, 2, 0)
        self.kind_combo = QtWidgets.QComboBox()
        for kind in VOLUME_KINDS:
            self.kind_combo.addItem(VOLUME_LABELS[kind], kind)
        self.kind_combo.setCurrentIndex(VOLUME_KINDS.index(self.settings.kind))
        self.kind_combo.currentIndexChanged.connect(self._kind_chosen)
        self.kind_combo.setVisible(self.slices is None)
        self.method_combo = QtWidgets.QComboBox()
        for method, label in RENDER_METHODS.items():
            self.method_combo.addItem(label, method)
        self.method_combo.setToolTip("the projection along each ray: maximum (MIP), maximum "
                                     "attenuated with depth, or minimum")
        self.method_combo.currentIndexChanged.connect(self._method_chosen)
        self.smooth_check = QtWidgets.QCheckBox("smooth")
        self.smooth_check.setToolTip("interpolate between voxel centres (trilinear); costs about "
                                     "twice the drawing time on software OpenGL")
        self.smooth_check.toggled.connect(self._smooth_toggled)
        self.planes_check = QtWidgets.QCheckBox("planes")
        self.planes_check.setChecked(True)
        self.planes_check.setToolTip("draw the three slice planes through the cursor")
        self.planes_check.toggled.connect(self._planes_toggled)
        self.reset_button = QtWidgets.QPushButton("Reset view")
        self.reset_button.clicked.connect(self.reset_camera)
        self.hint_label = QtWidgets.QLabel("")
        self.hint_label.setWordWrap(True)
        self.hint_label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        if self.slices is None:
            row.addWidget(QtWidgets.QLabel("Show"))
            row.addWidget(self.kind_combo)
        row.addWidget(QtWidgets.QLabel("Projection"))
        row.addWidget(self.method_combo)
        row.addWidget(self.smooth_check)
        row.addWidget(self.planes_check)
        row.addWidget(self.reset_button)
        row.addWidget(self.hint_label, 1)
        return row

    def _build_scene(self) -> None:
        from vispy import scene
        from vispy.visuals.transforms import STTransform

        # a top-level widget of its own, never on screen (see the module docstring)
        canvas = scene.SceneCanvas(keys=None, app="pyside6", bgcolor=BACKGROUND, show=False,
                                   parent=None)
        self._canvas_built = canvas
        canvas.native.setAttribute(QtCore.Qt.WidgetAttribute.WA_DontShowOnScreen, True)
        view = canvas.central_widget.add_view()
        view.camera = scene.TurntableCamera(fov=30.0, elevation=25.0, azimuth=-55.0)
        # the volume: a placeholder until there is data, then only set_data
        self.volume = scene.visuals.Volume(np.zeros((2, 2, 2), np.float32), parent=view.scene,
                                           clim=(0.0, 1.0), method=self.method,
                                           texture_format="r32f", interpolation="nearest",
                                           cmap=vispy_colormap("viridis"))
        self.volume.transform = STTransform()
        self.volume.visible = False
        self.volume.order = 0
        # the grid's box: 12 edges of the unit cube scaled to the grid, x/y/z edges in colour
        corners = np.array([[i, j, k] for i in (0, 1) for j in (0, 1) for k in (0, 1)], np.float32)
        edges = [(a, b) for a in range(8) for b in range(a + 1, 8)
                 if np.abs(corners[a] - corners[b]).sum() == 1]
        edge_colours = []
        for a, b in edges:
            axis = int(np.argmax(np.abs(corners[a] - corners[b])))
            at_origin = not corners[a].any()
            edge_colours += [(*AXIS_COLOURS[axis], 1.0) if at_origin else (0.6, 0.6, 0.6, 0.8)] * 2
        self.box = scene.visuals.Line(pos=corners[np.array(edges).ravel()], connect="segments",
                                      color=np.array(edge_colours, np.float32), parent=view.scene,
                                      antialias=False)
        self.box.transform = STTransform()
        self.axis_labels = []
        for axis, name in enumerate("xyz"):
            label = scene.visuals.Text(name, color=AXIS_COLOURS[axis], font_size=10, bold=True,
                                       parent=view.scene)
            self.axis_labels.append(label)
        # the three slice planes: a translucent quad and its outline each, in a node that
        # the cursor moves along the plane's normal
        self.planes = []
        self.plane_fills = []
        self.plane_outlines = []
        for _name, (h, v), normal in PLANES:
            node = scene.Node(parent=view.scene)
            node.transform = STTransform()
            quad = np.zeros((4, 3), np.float32)
            quad[[1, 2], h] = 1.0
            quad[[2, 3], v] = 1.0
            colour = AXIS_COLOURS[normal]
            fill = scene.visuals.Mesh(vertices=quad, faces=np.array([[0, 1, 2], [0, 2, 3]], np.uint32),
                                      color=(*colour, 0.16), parent=node)
            outline = scene.visuals.Line(pos=quad[[0, 1, 2, 3, 0]], color=(*colour, 0.95),
                                         connect="strip", parent=node, antialias=False)
            self.planes.append(node)
            self.plane_fills.append(fill)
            self.plane_outlines.append(outline)
        for visual in (self.box, *self.axis_labels, *self.plane_fills, *self.plane_outlines):
            # drawn over the volume (whose depth is that of the voxel a ray picked), blended
            visual.set_gl_state("translucent", depth_test=False, cull_face=False)
            visual.order = 1
        for item in (self.box, *self.axis_labels, *self.planes):
            item.visible = False
        # every "draw me again" of the scene (visuals, camera) becomes one scheduled render
        self._render_timer = QtCore.QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(0)
        self._render_timer.timeout.connect(self._render_now)
        canvas.update = functools.partial(_request_render, weakref.ref(self))
        self.display = VolumeDisplay(canvas.native, self)
        self.display.resized.connect(self._schedule_render)
        self.display.shown.connect(self._schedule_render)
        self.destroyed.connect(functools.partial(_discard_canvas, canvas))
        self.canvas = canvas
        self.view = view

    def _drop_partial_canvas(self) -> None:
        """After a failed build: no stray GL widget left behind."""
        canvas, self._canvas_built, self.canvas = getattr(self, "_canvas_built", None), None, None
        if canvas is not None:
            try:
                canvas.native.hide()
                canvas.close()
            except Exception:                    # noqa: BLE001 - best effort
                pass

    # -- camera, cursor, settings ---------------------------------------------------------

    def reset_camera(self) -> None:
        """Look at the whole grid from the default direction."""
        if self.canvas is None:
            return
        shape = self.state.grid_shape or (1, 1, 1)
        camera = self.view.camera
        camera.elevation, camera.azimuth, camera.roll = 25.0, -55.0, 0.0
        camera.set_range(x=(0, shape[0]), y=(0, shape[1]), z=(0, shape[2]), margin=0.08)
        camera.center = tuple(n / 2 for n in shape)

    def set_cursor(self, voxel) -> None:
        """Move the planes (without slices; with slices the slices' cursor is followed)."""
        if self.slices is not None:
            self.slices.set_cursor(voxel)
            return
        shape = self.state.grid_shape
        self.settings.cursor = (tuple(int(min(max(int(c), 0), n - 1)) for c, n in zip(voxel, shape))
                                if shape else (0, 0, 0))
        if self._move_planes():
            self._update_canvas()

    def set_method(self, method: str) -> None:
        """Choose the projection (a key of ``RENDER_METHODS``)."""
        if method not in RENDER_METHODS:
            raise ValueError(f"unknown projection {method!r}; one of {', '.join(RENDER_METHODS)}")
        self.method_combo.setCurrentIndex(list(RENDER_METHODS).index(method))

    def _kind_chosen(self, index: int) -> None:
        self.settings.kind = VOLUME_KINDS[index]
        self.refresh()

    def _method_chosen(self, index: int) -> None:
        self.method = list(RENDER_METHODS)[index]
        if self.canvas is not None:
            self.volume.method = self.method
        self.refresh()

    def _smooth_toggled(self, on: bool) -> None:
        if self.canvas is None:
            return
        self.volume.interpolation = "linear" if on else "nearest"
        self._update_canvas()

    def _planes_toggled(self, on: bool) -> None:
        if self.canvas is None:
            return
        for node in self.planes:
            node.visible = bool(on) and self._hint_shown == ""
        self._update_canvas()

    def _cursor_moved(self, _voxel) -> None:
        if self._move_planes():
            self._update_canvas()

    def _slices_changed(self) -> None:
        self.refresh()

    @property
    def max_texture_size(self) -> int:
        """The most voxels per axis uploaded: the GL limit, and at most ``voxels_per_axis``
        (set it to trade resolution for drawing time; 0 is the default for this OpenGL)."""
        budget = int(self.voxels_per_axis) or default_voxels_per_axis()
        return max(1, min(gl_texture_limit(), budget))

    def shown_kind(self) -> str | None:
        """The kind drawn: the slices' (when given), else the chosen one or the data."""
        if self.slices is not None:
            return self.slices.shown_kind()
        st = self.state
        if st.has_volume(self.settings.kind):
            return self.settings.kind
        return "data" if st.has_volume("data") else None

    # -- drawing --------------------------------------------------------------------------

    def refresh(self, force: bool = False) -> bool:
        """Update the visuals whose content changed. Returns whether anything was redrawn.

        While the view is hidden nothing is uploaded (a queued texture would be a copy of
        the field each time); it catches up when shown.
        """
        if self.canvas is None:
            return False
        st = self.state
        changed = False
        if st.layout_version != self._layout_seen:
            self._apply_layout()
            changed = True
        kind = self.shown_kind()
        hint = "" if kind is not None else _hint(st)
        if hint != self._hint_shown or force:
            self._show_hint(hint)
            changed = True
        if kind is None:
            if changed:
                self._update_canvas()
            return changed
        if not self.isVisible():
            self._dirty = True
            return changed
        self._dirty = False
        settings = self.settings
        group = LEVEL_GROUPS[kind]
        volume = None
        mask = st.observed_mask if kind == "data" else None
        if group not in settings.levels:
            volume = st.volume(kind, settings.chain)
            try:
                sample = level_sample(volume, settings.cursor)
            except (RunStoreError, OSError) as err:      # a watched store damaged or deleted
                self.hint_label.setText(f"cannot read the run store: {err}")
                return changed
            settings.levels[group] = robust_levels(sample, group, mask)
        levels = tuple(float(v) for v in settings.levels[group])
        key = (st.layout_version, st.field_version, kind, settings.chain if kind == "latest" else 0,
               levels, self.method, self.max_texture_size)
        if (key != self._volume_key and key != self._pending_key) or force:
            if volume is None:
                volume = st.volume(kind, settings.chain)
            changed |= self._request_volume(key, volume, levels, mask)
        changed |= self._show_colours(settings.colour_maps.get(group, "viridis"), levels, force)
        changed |= self._move_planes(force=force)
        self._describe(kind, levels)
        if changed:
            self._update_canvas()
        return changed

    def _show_colours(self, cmap_name: str, levels, force: bool) -> bool:
        """The volume's and the colour bar's colour map and levels; whether the scene changed."""
        if tuple(self.colour_bar.levels()) != levels:
            self.colour_bar.setLevels(levels)
        if cmap_name == self._cmap_shown and not force:
            return False
        self.volume.cmap = vispy_colormap(cmap_name)
        self.colour_bar.setColorMap(pg.colormap.get(cmap_name))
        self._cmap_shown = cmap_name
        return True

    def _apply_layout(self) -> None:
        st = self.state
        self._layout_seen = st.layout_version
        shape = st.grid_shape
        self._volume_key = self._pending_key = None
        self._cursor_shown = None
        if self.slices is None:
            self.settings.levels.clear()
            self.settings.cursor = tuple(n // 2 for n in shape) if shape else (0, 0, 0)
        if shape:
            self.box.transform.scale = tuple(float(n) for n in shape)
            pad = 0.05 * max(shape) + 1.0
            # x and y beyond the ends of their edges at the origin; z beside the top of the
            # vertical edge at (0, ny), which the default view shows on the box's outline
            # (the origin's own vertical edge is in front of the volume there)
            self.axis_labels[0].pos = [[shape[0] + pad, 0.0, 0.0]]
            self.axis_labels[1].pos = [[0.0, shape[1] + pad, 0.0]]
            self.axis_labels[2].pos = [[0.0, shape[1] + pad, shape[2]]]
            for node, (_, (h, v), normal) in zip(self.planes, PLANES):
                scale = [1.0, 1.0, 1.0]
                scale[h], scale[v] = shape[h], shape[v]
                node.transform.scale = scale
        self.reset_camera()

    def _show_hint(self, hint: str) -> None:
        self._hint_shown = hint
        has = hint == ""
        self.volume.visible = has and self._volume_key is not None
        self.box.visible = has
        for label in self.axis_labels:
            label.visible = has
        for node in self.planes:
            node.visible = has and self.planes_check.isChecked()
        if hint:
            self.hint_label.setText(hint)
            self._volume_key = self._pending_key = None

    def _request_volume(self, key, volume, levels, mask=None) -> bool:
        """Upload the texture now (small volumes) or once a worker prepared it (big ones)."""
        max_size = self.max_texture_size
        if volume.size > self.async_voxels:
            self._pending_key = key
            self.prepare_job.request(key, prepare_volume, volume, levels, max_size, self.method, mask)
            return False
        self._upload(key, *prepare_volume(volume, levels, max_size, self.method, mask), levels)
        return True

    def _on_prepared(self, key, prepared, error) -> None:
        """``prepare_job.finished``: upload the texture prepared for ``key`` unless it is stale."""
        if key != self._pending_key:
            return                               # stale: an older run, field or setting
        self._pending_key = None
        if error is not None:                    # shown, the app goes on
            self.hint_label.setText(f"could not prepare the volume: {error}")
            return
        texture, scale = prepared
        self._upload(key, texture, scale, key[4])
        self._update_canvas()

    def _upload(self, key, texture, scale, levels) -> None:
        self.volume.set_data(texture, clim=levels)
        self.volume.mip_cutoff, self.volume.minip_cutoff = projection_cutoffs(levels)
        self.uploads += 1
        self.volume.transform.scale = tuple(scale)
        self.volume.transform.translate = tuple(scale / 2.0)
        self.volume.visible = self._hint_shown == ""
        self.texture_shape = texture.shape
        self.texture_scale = scale
        self._volume_key = key

    def _move_planes(self, force: bool = False) -> bool:
        if self.canvas is None or not self.state.grid_shape:
            return False
        cursor = tuple(self.settings.cursor)
        if cursor == self._cursor_shown and not force:
            return False
        self._cursor_shown = cursor
        for node, (_, _, normal) in zip(self.planes, PLANES):
            translate = [0.0, 0.0, 0.0]
            translate[normal] = cursor[normal] + 0.5
            node.transform.translate = translate
        return True

    def _describe(self, kind: str, levels) -> None:
        shape = self.state.grid_shape
        text = f"{VOLUME_LABELS[kind]}, levels {levels[0]:.4g} to {levels[1]:.4g}"
        if self.texture_shape is not None and shape and self.texture_shape[::-1] != tuple(shape):
            m = self.texture_shape[::-1]
            text += f"; shown at {m[0]}x{m[1]}x{m[2]} (block means)"
        if self._pending_key is not None:
            text += "; preparing..."
        if self.hint_label.text() != text:
            self.hint_label.setText(text)

    def _update_canvas(self) -> None:
        if self.canvas is not None:
            self._schedule_render()

    def _schedule_render(self) -> None:
        if self.canvas is not None and not self._render_timer.isActive():
            self._render_timer.start()

    def _gl_ready(self) -> bool:
        """Initialise the canvas's context once: show it (never on screen), then hide it."""
        native = self.canvas.native
        if not native.isValid():
            native.resize(max(self.display.width(), 1), max(self.display.height(), 1))
            native.show()
            native.hide()
        return native.isValid()

    def _fit_canvas(self) -> tuple[int, int]:
        """Give the canvas the display's size; returns the render's size in device pixels."""
        w, h = max(self.display.width(), 1), max(self.display.height(), 1)
        ratio = self.display.devicePixelRatioF() or 1.0
        physical = (max(int(round(w * ratio)), 1), max(int(round(h * ratio)), 1))
        if tuple(self.canvas.size) != (w, h) or tuple(self.canvas.physical_size) != physical:
            self.canvas.size = (w, h)
            self.canvas.native._vispy_set_physical_size(*physical)
            self.canvas.events.resize(size=(w, h), physical_size=physical)
        return physical

    def _render_now(self) -> None:
        """Render the scene off-screen and show it (while the display is visible)."""
        if self.canvas is None or not self.display.isVisible():
            return                               # the display's showEvent asks again
        if not self._gl_ready():
            self.hint_label.setText("the OpenGL context of the 3D view could not be initialised")
            return
        try:
            size = self._fit_canvas()
            pixels = np.ascontiguousarray(self.canvas.render(size=size, alpha=True))
        except Exception as err:                 # noqa: BLE001 - said in the view, the app goes on
            self.hint_label.setText(f"could not draw the 3D view: {type(err).__name__}: {err}")
            return
        h, w = pixels.shape[:2]
        image = QtGui.QImage(pixels.data, w, h, 4 * w, QtGui.QImage.Format.Format_RGBA8888).copy()
        image.setDevicePixelRatio(size[0] / max(self.canvas.size[0], 1))
        self.display.set_image(image)
        self.renders += 1

    # -- Qt -------------------------------------------------------------------------------

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self._dirty:
            QtCore.QTimer.singleShot(0, self.refresh)

    def closeEvent(self, event) -> None:
        if self.canvas is not None:
            self._pending_key = None
        super().closeEvent(event)

    # -- export ---------------------------------------------------------------------------

    def render_image(self) -> np.ndarray:
        """The view as an (h, w, 3) uint8 RGB array (an off-screen render of the scene, the
        display's size in device pixels).

        Raises RuntimeError with the reason when there is no OpenGL or the view was never shown.
        """
        if self.canvas is None:
            raise RuntimeError(f"the 3D view is unavailable: {self.problem}")
        if not self.display.isVisible() and not self.canvas.native.isValid():
            raise RuntimeError("the 3D view has not been shown yet: show it, then export")
        if not self._gl_ready():
            raise RuntimeError("the OpenGL context of the 3D view could not be initialised")
        size = self._fit_canvas()
        return self.canvas.render(size=size, alpha=False)

    def figure_parts(self) -> list:
        """The rendered scene as an image where the display is (a raster part of the figure), and
        the colour bar beside it (vector)."""
        qimage = self._rendered_qimage()
        w, h = qimage.width(), qimage.height()
        ratio = max(self.display.devicePixelRatioF(), 1.0)
        top_left = self.display.mapTo(self, QtCore.QPoint(0, 0))
        parts = [(qimage, QtCore.QRect(top_left, QtCore.QSize(round(w / ratio), round(h / ratio))))]
        bar = self.colour_bar_widget
        if bar.isVisibleTo(self):
            parts.append((bar, QtCore.QRect(bar.mapTo(self, QtCore.QPoint(0, 0)), bar.size())))
        return parts

    def export_png(self, path) -> str:
        """Write the view to ``path`` as PNG. Returns the path; raises RuntimeError / OSError
        with a message naming the reason or the file."""
        return save_png(self._rendered_qimage(), path)

    def _rendered_qimage(self) -> QtGui.QImage:
        """``render_image`` as a QImage that owns its pixels."""
        image = np.ascontiguousarray(self.render_image())
        h, w = image.shape[:2]
        return QtGui.QImage(image.data, w, h, 3 * w, QtGui.QImage.Format.Format_RGB888).copy()
