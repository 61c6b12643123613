"""Three orthogonal slices (xy, xz, yz) through one field-shaped array of a run.

Conventions. A field is indexed ``a[i, j, k]`` = (x, y, z). The xy view shows
``a[:, :, k].T`` (x across, y up), xz shows ``a[:, j, :].T`` (x across, z up), yz shows
``a[i, :, :].T`` (y across, z up): images are row-major (``imageAxisOrder='row-major'``),
so row r of an image is the vertical axis. Voxel (i, j, k) covers [i, i+1) x [j, j+1) x
[k, k+1) in view coordinates; the crosshairs sit at voxel centres.

The cursor (i, j, k) links the views: each view draws two of its coordinates as a
crosshair and is the slice at the third, which its slider sets. Dragging a crosshair in
one view moves the slices of the others. A left click on a voxel moves the cursor there
and pins the voxel (``voxel_pinned``): the traces view then follows its value.

Levels are fixed (a live image must not flicker): they are computed once, from the 1st and
99th percentiles, when an array is first shown, and again only when "Auto levels" is
pressed or the user types them. Data, draws, mean and truth share one set of levels so
that they can be compared by eye; std, residual (symmetric about 0), noise and mask have
their own. The data's levels are those of its observed voxels (a masked voxel may hold a
fill value such as 0 or -999).

Reading. An array in memory (a live run's, the data) is sliced at once. A stored one
(``core.store.run_store.FieldVolume``: a run opened or watched) is read by block in the
view's worker thread (``plane_job``, an ``app.views.jobs.LatestJob``: the newest request
wins), with the levels it needs and the value under the cursor; the images keep the
previous planes until the new ones arrive, so a refresh, a slider drag or a new draw
never holds the GUI thread for a read (a 256^3 draw's three planes are 64 blocks each).
Typed levels only recolour the planes shown, without a read.

Mask overlay. With "mask" checked (the default) and a mask known, masked voxels are tinted
(``MASK_TINT``, semi-transparent) over whatever is shown; before any run the data are
shown as read, so the tint is how masked voxels are told apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyqtgraph as pg
from pyqtgraph.Qt import QtCore, QtWidgets

from app.state.run_state import VOLUME_KINDS, VOLUME_LABELS, RunState
from app.views.base import FIELD, FIELD_VIEWS, RunView
from app.views.jobs import LatestJob
from app.views.style import pin_colour, steady_axes
from core.store.run_store import RunStoreError

__all__ = [
    "PLANES", "AXIS_NAMES", "COLOUR_MAPS", "COLOUR_MAP_LABELS", "LEVEL_GROUPS",
    "DEFAULT_COLOUR_MAPS", "MASK_TINT", "slice_of", "level_sample", "mask_overlay", "robust_levels",
    "read_planes", "SliceViewState",
    "SlicesView"
]

#: (name, (horizontal axis, vertical axis), normal axis) of each view, axes of a[i, j, k]
PLANES = (("xy", (0, 1), 2), ("xz", (0, 2), 1), ("yz", (1, 2), 0))
AXIS_NAMES = "xyz"
COLOUR_MAPS = ("viridis", "magma", "inferno", "plasma", "cividis", "turbo", "CET-L1", "CET-D1")
COLOUR_MAP_LABELS = {"CET-L1": "grey", "CET-D1": "diverging (blue-red)"}
#: which kinds share levels (and the colour map they start with)
LEVEL_GROUPS = {"data": "field", "latest": "field", "mean": "field", "truth": "field",
                "std": "std", "residual": "residual", "mask": "mask", "noise": "noise"}
DEFAULT_COLOUR_MAPS = {"field": "viridis", "std": "magma", "residual": "CET-D1", "mask": "CET-L1",
                       "noise": "magma"}
#: RGBA of a masked voxel in the mask overlay (semi-transparent magenta: apart from every map)
MASK_TINT = (255, 60, 200, 120)


def slice_of(volume, plane: int, index: int) -> np.ndarray:
    """The image a view shows: rows = the plane's vertical axis, columns = its horizontal one.

    ``volume`` is a numpy array or a stored volume (``core.store.run_store.FieldVolume``,
    ``app.state.run_state.LazyResidual``): indexed, so a stored one reads only the blocks
    of the plane from the run store."""
    _, _, normal = PLANES[plane]
    key = [slice(None)] * 3
    key[normal] = int(index)
    return np.ascontiguousarray(np.asarray(volume[tuple(key)]).T)


def level_sample(volume, cursor) -> np.ndarray:
    """What levels are computed from: a numpy array itself; of a stored volume (read by
    block, never whole in the GUI thread) the three planes through ``cursor``, the voxels
    the views show."""
    if isinstance(volume, np.ndarray):
        return volume
    return np.concatenate([slice_of(volume, p, cursor[PLANES[p][2]]).ravel() for p in range(3)])


def box_axes(config, shape) -> tuple[tuple[float, ...], str] | None:
    """The cell size along x, y, z and the length unit of a field run's grid (``[grid]``
    box_size / shape), or None where no box is known (axes in voxels)."""
    grid = getattr(config, "grid", None) if config is not None else None
    if grid is None or not shape or len(shape) != 3:
        return None
    return tuple(float(b) / int(n) for b, n in zip(grid.box_size, shape)), grid.unit.strip()


def mask_overlay(mask_slice: np.ndarray) -> np.ndarray:
    """(rows, columns, 4) uint8 RGBA of one slice of the mask (True = observed): ``MASK_TINT``
    where masked, transparent elsewhere."""
    rgba = np.zeros((*mask_slice.shape, 4), np.uint8)
    rgba[~np.asarray(mask_slice, bool)] = MASK_TINT
    return rgba


def robust_levels(values: np.ndarray, group: str, observed: np.ndarray | None = None) -> tuple[float, float]:
    """1st / 99th percentile of the finite values (of the ``observed`` voxels only, when
    given: a bool array of the same shape); symmetric about 0 for residuals."""
    if group == "mask":
        return 0.0, 1.0
    finite = np.asarray(values)
    if observed is not None and observed.shape == finite.shape:
        finite = finite[observed]
    finite = np.asarray(finite, np.float64)
    finite = finite[np.isfinite(finite)]
    if not finite.size:
        return 0.0, 1.0
    lo, hi = np.percentile(finite, [1.0, 99.0])
    if group == "residual":
        hi = max(abs(lo), abs(hi))
        lo = -hi
    if not hi > lo:
        lo, hi = lo - 0.5, hi + 0.5
    return float(lo), float(hi)


def read_planes(volume, planes: tuple, cursor: tuple, level_group: str | None = None,
                level_mask: np.ndarray | None = None) -> dict:
    """The images of ``planes`` (plane numbers) through ``cursor`` of ``volume`` (any thread:
    a slice view's worker reads a stored volume with it).

    Returns {"images": {plane: float32 image}, "value": the voxel under the cursor,
    "levels": ``robust_levels`` of ``level_sample`` for ``level_group`` (None when not
    asked; from the three planes read here for a stored volume, so ask for all three)}."""
    images = {p: slice_of(volume, p, cursor[PLANES[p][2]]).astype(np.float32, copy=False) for p in planes}
    if images:
        p = next(iter(images))
        _, (h, v), _ = PLANES[p]
        value = float(images[p][cursor[v], cursor[h]])
    else:
        value = float(np.asarray(volume[tuple(cursor)]))
    levels = None
    if level_group is not None:
        if isinstance(volume, np.ndarray) or len(images) < 3:
            sample = level_sample(volume, cursor)
        else:
            sample = np.concatenate([images[p].ravel() for p in range(3)])
        levels = robust_levels(sample, level_group, level_mask)
    return {"images": images, "value": value, "levels": levels}


@dataclass
class SliceViewState:
    """The settings of the slice views (glue style: the widgets show these, hold none).

    kind        what is shown (``app.state.run_state.VOLUME_KINDS``)
    chain       the chain whose draw "latest" shows
    cursor      the linked voxel (i, j, k)
    levels      level group -> (low, high), fixed once set
    colour_maps level group -> pyqtgraph colour map name
    mask_overlay  tint the masked voxels (when a mask is known)
    """

    kind: str = "mean"
    chain: int = 0
    cursor: tuple = (0, 0, 0)
    levels: dict = field(default_factory=dict)
    colour_maps: dict = field(default_factory=lambda: dict(DEFAULT_COLOUR_MAPS))
    mask_overlay: bool = True

    @property
    def group(self) -> str:
        return LEVEL_GROUPS[self.kind]


class _ClickableImage(pg.ImageItem):
    """An ImageItem that reports left clicks in image coordinates (column, row)."""

    def __init__(self, on_click):
        super().__init__()
        self._on_click = on_click

    def mouseClickEvent(self, ev):
        if ev.button() == QtCore.Qt.MouseButton.LeftButton and self.image is not None:
            ev.accept()
            pos = ev.pos()
            self._on_click(int(np.floor(pos.x())), int(np.floor(pos.y())))
            return
        super().mouseClickEvent(ev)


class SlicesView(RunView):
    """xy / xz / yz slices with linked crosshairs, a selector of what they show, and pinning."""

    title = "Slices"
    group = FIELD_VIEWS
    kinds = frozenset({FIELD})

    voxel_pinned = QtCore.Signal(tuple)
    voxel_unpinned = QtCore.Signal(tuple)
    cursor_moved = QtCore.Signal(tuple)
    #: the shown kind, the chain, the levels or the colour map changed (after the images)
    settings_changed = QtCore.Signal()

    def __init__(self, run_state: RunState, parent=None):
        super().__init__(run_state, parent)
        self.settings = SliceViewState()
        self._syncing = False
        self._layout_seen = -1
        self._drawn = None            # per plane: (field_version, kind, chain, slice index) shown
        self._levels_drawn = None     # the levels the images are drawn with
        self._requested = None        # the newest plane read asked of plane_job (until it is in)
        self.plane_job = LatestJob(self, name="fieldscope-slices")
        self.plane_job.finished.connect(self._planes_read)
        self.destroyed.connect(self.plane_job.close)
        self._cmap_drawn = None
        self._axes_drawn = ()          # box_axes of the axes as labelled (() before the first)
        self._pins_seen = -1
        self._settings_seen = None    # (shown kind, chain, levels, colour map) last announced
        self.plots: list[pg.PlotWidget] = []
        self.images: list[_ClickableImage] = []
        self.overlays: list[pg.ImageItem] = []
        self._overlay_drawn = [None] * 3
        self.vlines: list[pg.InfiniteLine] = []
        self.hlines: list[pg.InfiniteLine] = []
        self.pin_markers: list[pg.ScatterPlotItem] = []
        self.outlines: list[QtWidgets.QGraphicsRectItem] = []
        self.sliders: list[QtWidgets.QSlider] = []
        self.slider_labels: list[QtWidgets.QLabel] = []
        self._build_widgets()

    # -- widgets (made once) -------------------------------------------------------------

    def _build_widgets(self) -> None:
        grid = QtWidgets.QGridLayout(self)
        grid.setContentsMargins(2, 2, 2, 2)
        grid.setSpacing(4)
        for p, (name, (h, v), normal) in enumerate(PLANES):
            box = QtWidgets.QWidget()
            col = QtWidgets.QVBoxLayout(box)
            col.setContentsMargins(0, 0, 0, 0)
            col.setSpacing(1)
            plot = pg.PlotWidget()
            steady_axes(plot)
            plot.setMinimumSize(140, 140)
            item = plot.getPlotItem()
            item.setTitle(f"{name} slice", size="9pt")
            item.setLabel("bottom", AXIS_NAMES[h])
            item.setLabel("left", AXIS_NAMES[v])
            item.setAspectLocked(True)
            item.setMenuEnabled(False)
            # grey, not black: masked voxels (NaN) are transparent and must not read as low values
            item.getViewBox().setBackgroundColor("#2b2b2b")
            outline = QtWidgets.QGraphicsRectItem(0, 0, 1, 1)
            outline.setPen(pg.mkPen((150, 150, 150), width=1))
            outline.setZValue(-1)
            item.addItem(outline, ignoreBounds=True)
            self.outlines.append(outline)
            image = _ClickableImage(lambda c, r, p=p: self._image_clicked(p, c, r))
            item.addItem(image)
            overlay = pg.ImageItem(axisOrder="row-major")
            overlay.setAcceptedMouseButtons(QtCore.Qt.MouseButton.NoButton)   # clicks reach the image
            overlay.setVisible(False)
            item.addItem(overlay)
            self.overlays.append(overlay)
            pen = pg.mkPen((255, 255, 255, 160), width=1)
            vline = pg.InfiniteLine(angle=90, movable=True, pen=pen, hoverPen=pg.mkPen("y", width=2))
            hline = pg.InfiniteLine(angle=0, movable=True, pen=pen, hoverPen=pg.mkPen("y", width=2))
            vline.sigPositionChanged.connect(lambda line, p=p: self._line_moved(p, 0, line))
            hline.sigPositionChanged.connect(lambda line, p=p: self._line_moved(p, 1, line))
            item.addItem(vline, ignoreBounds=True)
            item.addItem(hline, ignoreBounds=True)
            markers = pg.ScatterPlotItem(symbol="s", size=9, brush=None)
            markers.setZValue(5)
            item.addItem(markers)
            slider_row = QtWidgets.QHBoxLayout()
            label = QtWidgets.QLabel(f"{AXIS_NAMES[normal]} = 0")
            label.setMinimumWidth(52)
            slider = QtWidgets.QSlider(QtCore.Qt.Orientation.Horizontal)
            slider.setToolTip(f"the {name} slice: position along {AXIS_NAMES[normal]}")
            slider.valueChanged.connect(lambda value, p=p: self._slider_moved(p, value))
            slider_row.addWidget(label)
            slider_row.addWidget(slider, 1)
            col.addWidget(plot, 1)
            col.addLayout(slider_row)
            grid.addWidget(box, p // 2, p % 2)
            self.plots.append(plot)
            self.images.append(image)
            self.vlines.append(vline)
            self.hlines.append(hline)
            self.pin_markers.append(markers)
            self.sliders.append(slider)
            self.slider_labels.append(label)
        grid.addWidget(self._build_controls(), 1, 1)
        grid.setRowStretch(0, 1)
        grid.setRowStretch(1, 1)
        grid.setColumnStretch(0, 1)
        grid.setColumnStretch(1, 1)

    def _build_controls(self) -> QtWidgets.QWidget:
        box = QtWidgets.QWidget()
        outer = QtWidgets.QVBoxLayout(box)
        outer.setContentsMargins(6, 2, 2, 2)
        form = QtWidgets.QFormLayout()
        form.setRowWrapPolicy(QtWidgets.QFormLayout.RowWrapPolicy.WrapLongRows)   # a narrow panel: fields below their labels
        outer.addLayout(form)
        self.kind_combo = QtWidgets.QComboBox()
        for kind in VOLUME_KINDS:
            self.kind_combo.addItem(VOLUME_LABELS[kind], kind)
        self.kind_combo.setCurrentIndex(VOLUME_KINDS.index(self.settings.kind))
        self.kind_combo.currentIndexChanged.connect(self._kind_chosen)
        form.addRow("Show", self.kind_combo)
        self.mask_check = QtWidgets.QCheckBox("mask")
        self.mask_check.setChecked(self.settings.mask_overlay)
        self.mask_check.setToolTip("tint the masked (unobserved) voxels over the image")
        self.mask_check.toggled.connect(self._mask_toggled)
        form.addRow("Overlay", self.mask_check)
        self.chain_spin = QtWidgets.QSpinBox()
        self.chain_spin.setToolTip("the chain whose latest draw is shown")
        self.chain_spin.valueChanged.connect(self._chain_chosen)
        form.addRow("Chain", self.chain_spin)
        self.cmap_combo = QtWidgets.QComboBox()
        for name in COLOUR_MAPS:
            self.cmap_combo.addItem(COLOUR_MAP_LABELS.get(name, name), name)
        self.cmap_combo.currentIndexChanged.connect(self._cmap_chosen)
        form.addRow("Colours", self.cmap_combo)
        levels_row = QtWidgets.QHBoxLayout()
        self.level_spins = []
        for tip in ("low level", "high level"):
            # pyqtgraph's SpinBox: 4 significant digits whatever the magnitude of the field
            spin = pg.SpinBox(value=0.0, dec=True, decimals=4, compactHeight=False)
            spin.setToolTip(tip)
            # room for a level as it prints ("-1.608", "2.5e+04"): never cut to "..63"
            spin.setMinimumWidth(spin.fontMetrics().horizontalAdvance("-8.888e+04") + 22)
            spin.sigValueChanged.connect(self._levels_typed)
            levels_row.addWidget(spin, 1)
            self.level_spins.append(spin)
        self.auto_button = QtWidgets.QPushButton("Auto")
        self.auto_button.setToolTip("set the levels once to the 1st-99th percentile of what is shown")
        self.auto_button.clicked.connect(self.auto_levels)
        self.auto_button.setFixedWidth(self.auto_button.fontMetrics().horizontalAdvance("Auto") + 20)
        levels_row.addWidget(self.auto_button)
        form.addRow("Levels", levels_row)
        self.colour_bar = pg.ColorBarItem(values=(0, 1), colorMap="viridis", orientation="horizontal",
                                          interactive=False, width=14)
        steady_axes(self.colour_bar)
        bar_widget = pg.GraphicsLayoutWidget()
        bar_widget.setFixedHeight(48)
        bar_widget.addItem(self.colour_bar)
        form.addRow(bar_widget)
        self.cursor_label = QtWidgets.QLabel("")
        self.cursor_label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow("Cursor", self.cursor_label)
        self.note_label = QtWidgets.QLabel("")
        self.note_label.setWordWrap(True)
        self.note_label.setStyleSheet("color: #c08000")
        form.addRow(self.note_label)
        outer.addStretch(1)
        pin_row = QtWidgets.QHBoxLayout()
        self.pins_label = QtWidgets.QLabel("click a voxel to pin it")
        self.pins_label.setWordWrap(True)
        self.clear_pins_button = QtWidgets.QPushButton("Clear pins")
        self.clear_pins_button.clicked.connect(self._clear_pins)
        pin_row.addWidget(self.pins_label, 1)
        pin_row.addWidget(self.clear_pins_button)
        outer.addLayout(pin_row)
        return box

    # -- run layout ------------------------------------------------------------------------

    def _apply_layout(self) -> None:
        """A new run: slider ranges, cursor at the centre, image extents."""
        st = self.state
        self._layout_seen = st.layout_version
        shape = st.grid_shape
        self._syncing = True
        try:
            chains = max(st.chains or 1, 1)
            self.chain_spin.setRange(0, chains - 1)
            for p, (_, (h, v), normal) in enumerate(PLANES):
                n = shape[normal] if shape else 1
                self.sliders[p].setRange(0, n - 1)
                self.sliders[p].setEnabled(bool(shape))
                for item in (self.vlines[p], self.hlines[p], self.outlines[p]):
                    item.setVisible(bool(shape))
                if not shape:
                    self.plots[p].getPlotItem().setRange(xRange=(0, 1), yRange=(0, 1), padding=0)
                else:
                    self.outlines[p].setRect(0, 0, shape[h], shape[v])
                    self.vlines[p].setBounds((0, shape[h]))
                    self.hlines[p].setBounds((0, shape[v]))
                    self.plots[p].getPlotItem().setRange(xRange=(0, shape[h]), yRange=(0, shape[v]),
                                                         padding=0.02)
        finally:
            self._syncing = False
        self.settings.levels.clear()
        self._drawn = None
        self._requested = None
        self.plane_job.cancel_pending()
        self._pins_seen = -1
        self.set_cursor(tuple(s // 2 for s in shape) if shape else (0, 0, 0))

    def _apply_axes(self) -> None:
        """Axes in the box's unit (ticks at positions i * cell; the view keeps voxel
        coordinates), or in voxels where the run's config gives no box."""
        axes = box_axes(self.state.config, self.state.grid_shape)
        if axes == self._axes_drawn:
            return
        self._axes_drawn = axes
        cells, unit = axes if axes is not None else ((1.0, 1.0, 1.0), "voxel")
        for plot, (_, (h, v), _) in zip(self.plots, PLANES):
            item = plot.getPlotItem()
            for side, axis in (("bottom", h), ("left", v)):
                item.getAxis(side).setScale(cells[axis])
                item.setLabel(side, f"{AXIS_NAMES[axis]} [{unit}]" if unit else AXIS_NAMES[axis])

    def cursor_text(self, voxel) -> str:
        """The cursor's voxel indices and, with a box, its centre's position in the box's unit."""
        text = f"voxel ({', '.join(str(int(i)) for i in voxel)})"
        if self._axes_drawn:
            cells, unit = self._axes_drawn
            where = ", ".join(f"{(int(i) + 0.5) * c:.4g}" for i, c in zip(voxel, cells))
            text += f"\nat ({where}){' ' + unit if unit else ''}"
        return text

    # -- the cursor -----------------------------------------------------------------------

    def set_cursor(self, voxel) -> None:
        """Move the linked cursor (crosshairs and slice sliders of all three views)."""
        shape = self.state.grid_shape
        if shape:
            voxel = tuple(int(min(max(int(v), 0), s - 1)) for v, s in zip(voxel, shape))
        else:
            voxel = (0, 0, 0)
        changed = voxel != self.settings.cursor
        self.settings.cursor = voxel
        self._syncing = True
        try:
            for p, (_, (h, v), normal) in enumerate(PLANES):
                self.vlines[p].setValue(voxel[h] + 0.5)
                self.hlines[p].setValue(voxel[v] + 0.5)
                self.sliders[p].setValue(voxel[normal])
                self.slider_labels[p].setText(f"{AXIS_NAMES[normal]} = {voxel[normal]}")
        finally:
            self._syncing = False
        self._draw_images()
        self._draw_pin_markers(force=True)
        if changed:
            self.cursor_moved.emit(voxel)

    def _line_moved(self, plane: int, which: int, line) -> None:
        if self._syncing:
            return
        _, (h, v), _ = PLANES[plane]
        axis = (h, v)[which]
        cursor = list(self.settings.cursor)
        cursor[axis] = int(np.floor(line.value()))
        self.set_cursor(tuple(cursor))

    def _slider_moved(self, plane: int, value: int) -> None:
        if self._syncing:
            return
        cursor = list(self.settings.cursor)
        cursor[PLANES[plane][2]] = int(value)
        self.set_cursor(tuple(cursor))

    def _image_clicked(self, plane: int, column: int, row: int) -> None:
        shape = self.state.grid_shape
        if not shape:
            return
        _, (h, v), _ = PLANES[plane]
        if not (0 <= column < shape[h] and 0 <= row < shape[v]):
            return
        cursor = list(self.settings.cursor)
        cursor[h], cursor[v] = column, row
        self.set_cursor(tuple(cursor))
        self.pin(tuple(cursor))

    # -- pins -----------------------------------------------------------------------------

    def pin(self, voxel) -> None:
        """Pin a voxel (as a click does) and emit ``voxel_pinned``."""
        voxel = tuple(int(v) for v in voxel)
        try:
            self.state.pin_voxel(voxel)
        except ValueError:
            return
        self._draw_pin_markers()
        self.voxel_pinned.emit(voxel)

    def unpin(self, voxel) -> None:
        voxel = tuple(int(v) for v in voxel)
        if voxel in self.state.pins:
            self.state.unpin(voxel)
            self._draw_pin_markers()
            self.voxel_unpinned.emit(voxel)

    def _clear_pins(self) -> None:
        for voxel in list(self.state.pins):
            self.unpin(voxel)

    def _draw_pin_markers(self, force: bool = False) -> None:
        st = self.state
        if not force and self._pins_seen == st.trace_version:
            return
        self._pins_seen = st.trace_version
        cursor = self.settings.cursor
        for p, (_, (h, v), normal) in enumerate(PLANES):
            spots = [{"pos": (voxel[h] + 0.5, voxel[v] + 0.5), "pen": pg.mkPen(pin_colour(t.serial), width=2)}
                     for voxel, t in st.pins.items() if voxel[normal] == cursor[normal]]
            self.pin_markers[p].setData(spots)
        if st.pins:
            self.pins_label.setText("pinned: " + ", ".join(str(v) for v in st.pins))
        else:
            self.pins_label.setText("click a voxel to pin it")

    # -- settings -------------------------------------------------------------------------

    def set_kind(self, kind: str) -> None:
        """Show another array (``VOLUME_KINDS``)."""
        if kind not in VOLUME_KINDS:
            raise ValueError(f"unknown kind {kind!r}; one of {', '.join(VOLUME_KINDS)}")
        self.kind_combo.setCurrentIndex(VOLUME_KINDS.index(kind))

    def _kind_chosen(self, index: int) -> None:
        self.settings.kind = VOLUME_KINDS[index]
        self._draw_images()

    def _mask_toggled(self, on: bool) -> None:
        self.settings.mask_overlay = bool(on)
        self._draw_overlays()

    def _chain_chosen(self, value: int) -> None:
        self.settings.chain = int(value)
        self._draw_images()

    def _cmap_chosen(self, index: int) -> None:
        if self._syncing:
            return
        self.settings.colour_maps[self._group_shown()] = COLOUR_MAPS[index]
        self._draw_images()

    def _levels_typed(self, _value=None) -> None:
        if self._syncing:
            return
        lo, hi = (s.value() for s in self.level_spins)
        if hi > lo:
            self.settings.levels[self._group_shown()] = (lo, hi)
            self._draw_images()

    def auto_levels(self) -> None:
        """Set the levels once from the 1st/99th percentile of the array shown now (of its
        three planes shown, for a stored array: read in the worker, set when they are in)."""
        kind = self.shown_kind()
        if kind is None:
            return
        self.settings.levels.pop(LEVEL_GROUPS[kind], None)
        self._draw_images(force=True)

    # -- drawing ---------------------------------------------------------------------------

    def shown_kind(self) -> str | None:
        """The kind drawn: the chosen one, or the data while the chosen one does not exist yet."""
        st = self.state
        if st.has_volume(self.settings.kind):
            return self.settings.kind
        return "data" if st.has_volume("data") else None

    def _level_mask(self, kind: str) -> np.ndarray | None:
        """The voxels the levels of ``kind`` come from: the observed ones for the data."""
        return self.state.observed_mask if kind == "data" else None

    def _group_shown(self) -> str:
        kind = self.shown_kind() or self.settings.kind
        return LEVEL_GROUPS[kind]

    def refresh(self, force: bool = False) -> bool:
        """Redraw what changed in the state. Returns whether the images were redrawn."""
        st = self.state
        if st.layout_version != self._layout_seen:
            self._apply_layout()
        self._apply_axes()
        self._update_kind_items()
        self._draw_pin_markers()
        return self._draw_images(force=force)

    def _update_kind_items(self) -> None:
        available = set(self.state.available_volumes())
        model = self.kind_combo.model()
        for index, kind in enumerate(VOLUME_KINDS):
            model.item(index).setEnabled(kind in available or kind in ("latest", "mean", "std", "residual"))
        self.chain_spin.setEnabled(self.settings.kind == "latest")
        has_field = self.state.has_field
        for widget in (self.kind_combo, self.cmap_combo, self.auto_button, *self.level_spins):
            widget.setEnabled(has_field)
        self.mask_check.setEnabled(self.state.observed_mask is not None)

    def _draw_images(self, force: bool = False) -> bool:
        """Set the images whose content changed; announce changed settings (``settings_changed``).

        A stored array that cannot be read (a store damaged or deleted while watched) leaves
        the images as they were, with the reason in the note."""
        try:
            redrew = self._draw_changed_images(force=force)
        except (RunStoreError, OSError) as err:
            self._drawn = None
            self.note_label.setText(f"cannot read the run store: {err}")
            redrew = False
        redrew |= self._draw_overlays(force=force)
        kind = self.shown_kind()
        group = LEVEL_GROUPS[kind] if kind else None
        seen = (kind, self.settings.chain, self.settings.levels.get(group),
                self.settings.colour_maps.get(group))
        if seen != self._settings_seen:
            self._settings_seen = seen
            self.settings_changed.emit()
        return redrew

    def _draw_changed_images(self, force: bool = False) -> bool:
        """Set the images whose content changed (each plane separately), reading an array in
        memory at once and asking ``plane_job`` for the planes of a stored one (drawn by
        ``_planes_read``). Returns whether any image was redrawn now."""
        st = self.state
        settings = self.settings
        kind = self.shown_kind()
        if kind is None:
            self._requested = None
            self.plane_job.cancel_pending()
            if self._drawn == [None] * 3 and not force:
                return False
            for image in self.images:
                image.clear()
            self._drawn = [None] * 3
            self._levels_drawn = None
            if st.model_kind == "integral" or (st.chains and not st.has_field and st.n_steps):
                note = "this run has no field"
            elif not st.has_field:
                note = "no run yet: start one or open a run directory"
            else:
                note = "no data yet"
            self.note_label.setText(note)
            self.cursor_label.setText("")
            return True
        group = LEVEL_GROUPS[kind]
        cmap_name = settings.colour_maps.get(group, "viridis")
        if cmap_name != self._cmap_drawn:
            cmap = pg.colormap.get(cmap_name)
            for image in self.images:
                image.setColorMap(cmap)
            self.colour_bar.setColorMap(cmap)
            self._cmap_drawn = cmap_name
        want = self._wanted(kind)
        drawn = self._drawn or [None] * 3
        stale = tuple(p for p in range(3) if force or want[p] != drawn[p])
        need_levels = group not in settings.levels
        if not stale and not need_levels:
            return self._recolour(kind, group)
        planes = tuple(range(3)) if need_levels else stale
        cursor = tuple(settings.cursor)
        key = (kind, settings.chain, tuple(want[p] for p in planes), planes, cursor,
               group if need_levels else None)
        volume = st.volume(kind, settings.chain)      # computed only now: a residual costs a subtraction
        args = (volume, planes, cursor, group if need_levels else None, self._level_mask(kind))
        if isinstance(volume, np.ndarray):            # in memory: at once
            self._requested = None
            self.plane_job.cancel_pending()
            return self._show_planes(key, read_planes(*args))
        if key != self._requested or force:
            self._requested = key
            self.plane_job.request(key, read_planes, *args)
        return False

    def _wanted(self, kind: str) -> list:
        """Per plane, what its image should hold now: (field_version, kind, chain, index)."""
        st, settings = self.state, self.settings
        return [(st.field_version, kind, settings.chain, settings.cursor[PLANES[p][2]]) for p in range(3)]

    def _planes_read(self, key, result, error) -> None:
        """``plane_job``'s planes are in: draw them (unless another array is shown by now),
        then ask for whatever is still out of date."""
        if key == self._requested:
            self._requested = None
        kind, chain = key[0], key[1]
        if kind != self.shown_kind() or chain != self.settings.chain:
            self._draw_images()
            return
        if error is not None:
            if isinstance(error, (RunStoreError, OSError)):
                self.note_label.setText(f"cannot read the run store: {error}")
                return
            raise error
        self._show_planes(key, result)
        self._draw_images()

    def _show_planes(self, key, result: dict) -> bool:
        """Set the images ``read_planes`` returned for request ``key``; the levels it measured
        when none were set meanwhile; the cursor's value and the note."""
        st, settings = self.state, self.settings
        kind, chain, wanted, planes = key[0], key[1], key[2], key[3]
        group = LEVEL_GROUPS[kind]
        if result["levels"] is not None:
            settings.levels.setdefault(group, result["levels"])
        levels = settings.levels.get(group)
        if levels is None:           # "Auto" pressed again while this read ran: the next one sets them
            return False
        drawn = list(self._drawn) if self._drawn else [None] * 3
        for p, want in zip(planes, wanted):
            self.images[p].setImage(result["images"][p], autoLevels=False, levels=levels)
            drawn[p] = want
        self._drawn = drawn
        self._levels_drawn = levels
        self.colour_bar.setLevels(levels)
        self._show_settings(kind, group, levels, settings.colour_maps.get(group, "viridis"))
        self.cursor_label.setText(f"{self.cursor_text(key[4])}\n{VOLUME_LABELS[kind]} = {result['value']:.4g}")
        tinted = "; masked voxels tinted" if self._overlay_shown() else ""
        if st.is_preview and kind in ("data", "mask", "noise", "truth"):
            self.note_label.setText(f"no run yet: the data file's {VOLUME_LABELS[kind]}{tinted}")
        elif kind != settings.kind:
            self.note_label.setText(f"{VOLUME_LABELS[settings.kind]}: none yet, showing the data")
        elif kind == "latest" and st.latest_field_step >= 0:
            self.note_label.setText(f"chain {chain}, draw {st.latest_field_step - st.num_warmup}")
        elif kind in ("mean", "std", "residual"):
            masked = "; masked voxels are grey" if kind == "residual" else ""
            self.note_label.setText(f"over {st.moment_count} post-warmup draws{masked}")
        elif kind == "data":
            self.note_label.setText("masked voxels are grey")
        else:
            self.note_label.setText("")
        return True

    def _recolour(self, kind: str, group: str) -> bool:
        """New levels (typed) on the planes shown: no read. Returns whether any changed."""
        levels = self.settings.levels[group]
        if levels == self._levels_drawn:
            return False
        for image in self.images:
            if image.image is not None:
                image.setLevels(levels)
        self._levels_drawn = levels
        self.colour_bar.setLevels(levels)
        self._show_settings(kind, group, levels, self.settings.colour_maps.get(group, "viridis"))
        return True

    def _overlay_shown(self) -> bool:
        return self.settings.mask_overlay and self.state.observed_mask is not None \
            and self.shown_kind() is not None

    def _draw_overlays(self, force: bool = False) -> bool:
        """Tint the masked voxels of each plane (when the overlay is on and a mask known)."""
        st = self.state
        show = self._overlay_shown()
        redrew = False
        for p in range(3):
            index = self.settings.cursor[PLANES[p][2]]
            key = (st.layout_version, st.field_version, index) if show else None
            if key == self._overlay_drawn[p] and not force:
                continue
            self._overlay_drawn[p] = key
            overlay = self.overlays[p]
            if show:
                overlay.setImage(mask_overlay(slice_of(st.observed_mask, p, index)), autoLevels=False,
                                 levels=(0, 255))
            overlay.setVisible(show)
            redrew = True
        return redrew

    def _show_settings(self, kind, group, levels, cmap_name) -> None:
        self._syncing = True
        try:
            for spin, value in zip(self.level_spins, levels):
                spin.setValue(value, update=True, delaySignal=False)
            self.cmap_combo.setCurrentIndex(COLOUR_MAPS.index(cmap_name))
        finally:
            self._syncing = False
