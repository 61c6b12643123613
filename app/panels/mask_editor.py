"""The mask editor: build ``data.mask`` from the data by looking at it (Data panel ▸ Edit mask…).

A dialog over one ``ConfigState``. It shows a slice of the data (a plane chooser and a
slice slider) with the mask laid over it (masked voxels red; what a threshold would add
magenta) and the observed fraction, and offers the tools of ``core.field.mask_tools``:

    From NaNs        mask the voxels whose data are NaN or infinite
    Threshold        on the data or on the noise map: observed where low <= v <= high
                     (each bound optional); the voxels it would mask are previewed live,
                     "Apply threshold" adds them to the mask
    Box              a rectangle (pg.RectROI, snapped to voxels) on the slice masks the
                     voxels whose centres lie inside it, on this slice, a range of slices
                     or all slices (a slab)
    Invert, Clear, Undo

Every tool combines with the mask so far (and). OK writes the mask as a .npy of bools
next to the config, ``<config stem>.mask.npy`` (``core.field.mask_tools.save_mask``), and
sets ``data.mask`` to it through the state, so the main window validates it as for any
edit. An unsaved config is saved first (the window's Save as), or the mask goes next to the
data file, as the user chooses. A file of that name that is not the mask being edited is
replaced only when the user says so. A mask that observes everything clears ``data.mask``
(no file); one that observes nothing is refused.

The arrays (data, the current mask when it is valid, the noise map) are read in a worker
thread (``app.views.jobs.LatestJob``); the dialog holds its own copies, so the Data panel's
reading is untouched.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QSlider,
    QSpinBox,
    QVBoxLayout,
)

from app.panels.binding import ERROR_STYLE, INFO_STYLE, _alive, _g
from app.state.config_state import ConfigState
from app.views.jobs import LatestJob
from app.views.style import steady_axes
from core import config as cfg
from core.field.mask_tools import (
    MaskError,
    mask_from_boxes,
    mask_from_nans,
    mask_from_threshold,
    mask_path_for,
    save_mask,
)
from core.field.observations import with_nonfinite_masked
from core.io.field_inputs import load_field_inputs, load_reference

__all__ = ["MaskEditor", "MaskInputs", "read_mask_inputs"]

#: RGBA of masked voxels, and of those a threshold preview would add
MASKED_RGBA = (200, 20, 20, 200)
PREVIEW_RGBA = (240, 0, 240, 170)
#: the undo history keeps at most this many bytes of masks
UNDO_BYTES = 256 * 2**20


class MaskInputs(NamedTuple):
    """What the editor works on (``read_mask_inputs``)."""

    data: np.ndarray              # the data, 3-D
    mask: np.ndarray | None       # the config's current mask (bool) when it is valid
    noise: np.ndarray | None      # the noise map (float64, the data's shape), if any
    levels: tuple[float, float]   # the data's finite range (the image's colour levels)
    notes: tuple[str, ...]        # why the current mask or the noise map are not used


def _finite_range(values: np.ndarray) -> tuple[float, float]:
    finite = values[np.isfinite(values)] if values.dtype.kind == "f" else values
    if not finite.size:
        return 0.0, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    return (lo, hi) if hi > lo else (lo, lo + 1.0)


def read_mask_inputs(document: dict, base_dir) -> MaskInputs:
    """The data, current mask and noise map the config ``document`` (``ConfigState.document``)
    names, for the editor; runs in the worker thread. The data must load (LoadError /
    ConfigError otherwise); a current mask or noise map that does not is left out with a note.
    """
    table = document.get("data", {}) if isinstance(document.get("data"), dict) else {}
    base = {"path": table.get("path", ""), "key": table.get("key", "data")}

    def config(**extra):
        return cfg.config_from_dict({"model": {"kind": "field"}, "data": {**base, **extra}},
                                    base_dir)

    notes: list[str] = []
    data = mask = None
    if table.get("mask"):
        try:        # the run's own checks: a mask the run would refuse starts the editor empty
            inputs = load_field_inputs(config(mask=table["mask"]))
            data, mask = inputs.data, np.array(inputs.mask, dtype=bool)
        except ValueError as exc:          # ConfigError, LoadError: the message names the key
            notes.append(f"The current mask is not used: {exc}")
    if data is None:
        data = load_field_inputs(config()).data
    n_nonfinite = int(np.size(data) - np.count_nonzero(np.isfinite(data)))
    if n_nonfinite:            # a run masks them whatever the mask says
        mask = with_nonfinite_masked(data, mask)
        notes.append(f"{n_nonfinite} voxels whose data are NaN or infinite are masked, as a run masks them.")
    noise = None
    if table.get("noise_map"):
        try:
            loaded = load_reference(config(noise_map=table["noise_map"]), "data.noise_map")
            if loaded.array.ndim == 0:
                notes.append("data.noise_map is one sd for every voxel: nothing to threshold")
            else:
                noise = np.asarray(loaded.array, dtype=np.float64)
        except ValueError as exc:
            notes.append(f"The noise map is not offered for thresholds: {exc}")
    return MaskInputs(data, mask, noise, _finite_range(np.asarray(data)), tuple(notes))


def _spin(decimals: int = 4) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setDecimals(decimals)
    box.setRange(-1e12, 1e12)
    box.setKeyboardTracking(True)     # previewed live, after a short pause (the timer)
    return box


class MaskEditor(QDialog):
    """The mask editor dialog (module docstring). ``save_config``: a callable that saves an
    unsaved config (the main window's ``save_config``, which asks where) and returns whether
    it did; without one the dialog asks for the file itself."""

    def __init__(self, state: ConfigState, parent=None, *,
                 save_config: Callable[[], bool] | None = None):
        super().__init__(parent)
        self.setWindowTitle("Edit mask")
        self.setObjectName("mask_editor")
        self.state = state
        self.save_config = save_config
        self.inputs: MaskInputs | None = None
        self.mask: np.ndarray | None = None         # the mask being edited, True = observed
        self.threshold_mask: np.ndarray | None = None   # the threshold previewed (None: off)
        self._undo: list[np.ndarray] = []
        self._generation = 0
        self.saved_reference: str | None = None     # what OK wrote to data.mask
        self._reader = LatestJob(self, name="fieldscope-mask-editor")
        self._reader.finished.connect(self._inputs_read)
        self.destroyed.connect(lambda *_, job=self._reader: job.close())
        self._preview_timer = QTimer(self, singleShot=True, interval=120)
        self._preview_timer.timeout.connect(self.update_preview)
        self._build()
        self.resize(1000, 640)
        self.reload()

    # -- layout ---------------------------------------------------------------------------------

    def _build(self) -> None:
        outer = QVBoxLayout(self)
        top = QHBoxLayout()
        outer.addLayout(top, 1)
        left = QVBoxLayout()
        top.addLayout(left, 3)
        self.plot = pg.PlotWidget()
        steady_axes(self.plot)
        self.plot.setAspectLocked(True)
        self.plot.setMenuEnabled(False)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setColorMap(pg.colormap.get("viridis"))
        self.overlay = pg.ImageItem(axisOrder="row-major")
        self.overlay.setZValue(5)
        self.plot.addItem(self.image)
        self.plot.addItem(self.overlay)
        self.roi = pg.RectROI([0, 0], [4, 4], pen=pg.mkPen("w", width=2), translateSnap=True,
                              scaleSnap=True)
        self.roi.setZValue(10)
        self.roi.setVisible(False)
        self.roi.sigRegionChanged.connect(lambda *_: self._update_box_label())
        self.plot.addItem(self.roi)
        left.addWidget(self.plot, 1)
        row = QHBoxLayout()
        self.axis_combo = QComboBox()
        for i, name in enumerate("xyz"):
            self.axis_combo.addItem(f"slices ⟂ {name}", i)
        self.axis_combo.setCurrentIndex(2)
        self.axis_combo.currentIndexChanged.connect(lambda _i: self._plane_changed())
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.valueChanged.connect(lambda _v: self._show_slice())
        self.slice_label = QLabel()
        row.addWidget(self.axis_combo)
        row.addWidget(self.slice_label)
        row.addWidget(self.slider, 1)
        left.addLayout(row)

        tools = QVBoxLayout()
        top.addLayout(tools, 2)
        basic = QGroupBox("Mask")
        g = QGridLayout(basic)
        self.nan_button = QPushButton("From NaNs")
        self.nan_button.setToolTip("mask the voxels whose data are NaN or infinite")
        self.nan_button.clicked.connect(self.from_nans)
        self.invert_button = QPushButton("Invert")
        self.invert_button.clicked.connect(self.invert)
        self.clear_button = QPushButton("Clear")
        self.clear_button.setToolTip("every voxel observed")
        self.clear_button.clicked.connect(self.clear)
        self.undo_button = QPushButton("Undo")
        self.undo_button.clicked.connect(self.undo)
        for i, b in enumerate((self.nan_button, self.invert_button, self.clear_button,
                               self.undo_button)):
            g.addWidget(b, i // 2, i % 2)
        tools.addWidget(basic)

        thr = QGroupBox("Threshold: observed where low ≤ value ≤ high")
        g = QGridLayout(thr)
        self.source_combo = QComboBox()
        self.source_combo.addItem("on the data", "data")
        self.source_combo.addItem("on the noise map", "noise")
        self.source_combo.currentIndexChanged.connect(lambda _i: self._source_changed())
        g.addWidget(self.source_combo, 0, 0, 1, 2)
        self.low_check = QCheckBox("low")
        self.high_check = QCheckBox("high")
        self.low_spin = _spin()
        self.high_spin = _spin()
        for w in (self.low_check, self.high_check):
            w.toggled.connect(lambda _on: self._schedule_preview())
        for w in (self.low_spin, self.high_spin):
            w.valueChanged.connect(lambda _v: self._schedule_preview())
        g.addWidget(self.low_check, 1, 0)
        g.addWidget(self.low_spin, 1, 1)
        g.addWidget(self.high_check, 2, 0)
        g.addWidget(self.high_spin, 2, 1)
        self.threshold_label = QLabel()
        self.threshold_label.setWordWrap(True)
        g.addWidget(self.threshold_label, 3, 0, 1, 2)
        self.threshold_button = QPushButton("Apply threshold")
        self.threshold_button.clicked.connect(self.apply_threshold)
        g.addWidget(self.threshold_button, 4, 0, 1, 2)
        tools.addWidget(thr)

        box = QGroupBox("Box")
        g = QGridLayout(box)
        self.draw_button = QPushButton("Draw box")
        self.draw_button.setCheckable(True)
        self.draw_button.setToolTip("a rectangle on the slice: drag it, resize it by its corner")
        self.draw_button.toggled.connect(self._draw_toggled)
        g.addWidget(self.draw_button, 0, 0, 1, 2)
        self.range_combo = QComboBox()
        self.range_combo.addItem("on this slice", "this")
        self.range_combo.addItem("on slices from … to …", "range")
        self.range_combo.addItem("on all slices", "all")
        self.range_combo.currentIndexChanged.connect(lambda _i: self._range_changed())
        g.addWidget(self.range_combo, 1, 0, 1, 2)
        self.from_spin = QSpinBox()
        self.to_spin = QSpinBox()
        for w in (self.from_spin, self.to_spin):
            w.valueChanged.connect(lambda _v: self._update_box_label())
        g.addWidget(self.from_spin, 2, 0)
        g.addWidget(self.to_spin, 2, 1)
        self.box_label = QLabel()
        self.box_label.setWordWrap(True)
        g.addWidget(self.box_label, 3, 0, 1, 2)
        self.box_button = QPushButton("Mask the box")
        self.box_button.clicked.connect(self.mask_box)
        g.addWidget(self.box_button, 4, 0, 1, 2)
        tools.addWidget(box)
        tools.addStretch(1)
        self.tool_widgets = (basic, thr, box)

        self.fraction_label = QLabel()
        self.fraction_label.setObjectName("mask_fraction")
        outer.addWidget(self.fraction_label)
        self.note_label = QLabel()
        self.note_label.setWordWrap(True)
        self.note_label.setStyleSheet(INFO_STYLE)
        self.note_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        outer.addWidget(self.note_label)
        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet(ERROR_STYLE)
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        outer.addWidget(self.error_label)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                        | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        outer.addWidget(self.buttons)
        self._range_changed()
        self._set_enabled(False)

    def _set_enabled(self, on: bool) -> None:
        for w in self.tool_widgets:
            w.setEnabled(on)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(on)
        if on:
            noise = self.inputs is not None and self.inputs.noise is not None
            self.source_combo.model().item(1).setEnabled(noise)
            self.undo_button.setEnabled(bool(self._undo))

    # -- reading --------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """Whether the arrays are being read."""
        return self._reader.busy

    def reload(self) -> None:
        """Read the data, current mask and noise map of the config (in the worker)."""
        self._set_enabled(False)
        self.fraction_label.setText("reading the data…")
        self._generation += 1
        self._reader.request(self._generation, read_mask_inputs, self.state.document(),
                             self.state.base_dir)

    def _inputs_read(self, generation, result, error) -> None:
        if generation != self._generation or not _alive(self.fraction_label):
            return
        if error is not None:
            known = isinstance(error, ValueError)      # LoadError / ConfigError name the key
            self.fraction_label.setText("")
            self.error_label.setText(("Cannot edit a mask: " if known else
                                      f"Cannot edit a mask ({type(error).__name__}): ") + str(error))
            return
        self.inputs = result
        shape = result.data.shape
        self.mask = result.mask if result.mask is not None else np.ones(shape, dtype=bool)
        self._undo.clear()
        self.note_label.setText("\n".join(result.notes))
        self.image.setLevels(result.levels)
        self._source_changed()
        self._plane_changed()
        self._set_enabled(True)
        self._update_fraction()

    # -- the slice ------------------------------------------------------------------------------

    @property
    def axis(self) -> int:
        """The axis the slices are perpendicular to."""
        return int(self.axis_combo.currentData())

    def _plane_axes(self) -> tuple[int, int]:
        """The axes of the slice's rows (image y, up) and columns (image x, across): the Slices
        view's orientation (xy: x across, y up; xz: x across, z up; yz: y across, z up)."""
        across, up = (i for i in range(3) if i != self.axis)
        return up, across

    def _plane(self, volume: np.ndarray) -> np.ndarray:
        """The current slice of ``volume`` as drawn: rows the up axis, columns the across axis."""
        return np.take(volume, self.slice_index, axis=self.axis).T

    def _plane_changed(self) -> None:
        if self.inputs is None:
            return
        n = self.inputs.data.shape[self.axis]
        self.slider.blockSignals(True)
        self.slider.setRange(0, n - 1)
        self.slider.setValue(n // 2)
        self.slider.blockSignals(False)
        for w in (self.from_spin, self.to_spin):
            w.blockSignals(True)
            w.setRange(0, n - 1)
            w.blockSignals(False)
        self.from_spin.setValue(n // 2)
        self.to_spin.setValue(n // 2)
        a, b = self._plane_axes()
        rows, cols = self.inputs.data.shape[a], self.inputs.data.shape[b]
        self.plot.getPlotItem().setLabel("left", "xyz"[a])
        self.plot.getPlotItem().setLabel("bottom", "xyz"[b])
        self.roi.setPos((cols // 4, rows // 4), finish=False)
        self.roi.setSize((max(1, cols // 2), max(1, rows // 2)), finish=False)
        self._show_slice()
        self.plot.getPlotItem().getViewBox().setRange(xRange=(0, cols), yRange=(0, rows),
                                                      padding=0.02)

    @property
    def slice_index(self) -> int:
        return int(self.slider.value())

    def _show_slice(self) -> None:
        if self.inputs is None:
            return
        i = self.slice_index
        self.slice_label.setText(f"{'xyz'[self.axis]} = {i}")
        plane = self._plane(self.inputs.data)
        self.image.setImage(np.asarray(plane, dtype=np.float32), autoLevels=False,
                            levels=self.inputs.levels)
        self._show_overlay()
        if self.range_combo.currentData() == "this":
            self._update_box_label()

    def _show_overlay(self) -> None:
        if self.mask is None:
            self.overlay.clear()
            return
        masked = ~self._plane(self.mask)
        rgba = np.zeros(masked.shape + (4,), dtype=np.ubyte)
        rgba[masked] = MASKED_RGBA
        if self.threshold_mask is not None:
            added = ~self._plane(self.threshold_mask) & ~masked
            rgba[added] = PREVIEW_RGBA
        self.overlay.setImage(rgba, autoLevels=False, levels=(0, 255))

    # -- the mask -------------------------------------------------------------------------------

    def _set_mask(self, mask: np.ndarray, note: str = "") -> None:
        if self.mask is not None:
            self._undo.append(self.mask)
            while len(self._undo) > 1 and sum(m.nbytes for m in self._undo) > UNDO_BYTES:
                self._undo.pop(0)
        self.mask = mask
        self.error_label.setText("")
        if note:
            self.note_label.setText(note)
        self.undo_button.setEnabled(bool(self._undo))
        self._update_preview_now()
        self._show_overlay()
        self._update_fraction()

    def _update_fraction(self) -> None:
        if self.mask is None:
            return
        n = self.mask.size
        k = int(np.count_nonzero(self.mask))
        text = f"Observed: {k} of {n} voxels ({100 * k / n:.1f} %)"
        if self.threshold_mask is not None:
            after = int(np.count_nonzero(self.mask & self.threshold_mask))
            text += f"; with the threshold applied: {after} ({100 * after / n:.1f} %)"
        self.fraction_label.setText(text)

    def from_nans(self) -> None:
        """Mask the voxels whose data are NaN or infinite."""
        if self.inputs is None:
            return
        nans = mask_from_nans(self.inputs.data)
        bad = int(nans.size - np.count_nonzero(nans))
        self._set_mask(self.mask & nans, f"From NaNs: {bad} voxel(s) of the data are NaN or "
                                         "infinite" if bad else "From NaNs: the data have no NaN")

    def invert(self) -> None:
        if self.mask is not None:
            self._set_mask(~self.mask, "Inverted: observed and masked swapped")

    def clear(self) -> None:
        if self.mask is not None:
            self._set_mask(np.ones_like(self.mask), "Cleared: every voxel observed")

    def undo(self) -> None:
        if self._undo:
            self.mask = self._undo.pop()
            self.undo_button.setEnabled(bool(self._undo))
            self._update_preview_now()
            self._show_overlay()
            self._update_fraction()

    # -- threshold ------------------------------------------------------------------------------

    def _values(self) -> np.ndarray | None:
        if self.inputs is None:
            return None
        return self.inputs.noise if self.source_combo.currentData() == "noise" else self.inputs.data

    def _source_changed(self) -> None:
        values = self._values()
        if values is None:
            if self.inputs is not None and self.source_combo.currentData() == "noise":
                self.source_combo.setCurrentIndex(0)       # no noise map: back to the data
            return
        lo, hi = _finite_range(np.asarray(values))
        span = hi - lo
        decimals = min(10, max(2, 3 - int(math.floor(math.log10(span)))))
        for spin, value in ((self.low_spin, lo), (self.high_spin, hi)):
            spin.blockSignals(True)
            spin.setDecimals(decimals)
            spin.setRange(lo - span, hi + span)
            spin.setSingleStep(float(f"{span / 100:.2g}"))
            spin.setValue(value)
            spin.blockSignals(False)
        self.update_preview()

    def threshold(self) -> tuple[float | None, float | None]:
        """The (low, high) bounds set (None: not applied)."""
        return (self.low_spin.value() if self.low_check.isChecked() else None,
                self.high_spin.value() if self.high_check.isChecked() else None)

    def set_threshold(self, low=None, high=None, source: str = "data") -> None:
        """Set the threshold's source ("data" or "noise") and bounds (None: off), previewed."""
        self.source_combo.setCurrentIndex(self.source_combo.findData(source))
        for check, spin, value in ((self.low_check, self.low_spin, low),
                                   (self.high_check, self.high_spin, high)):
            check.blockSignals(True)
            spin.blockSignals(True)
            check.setChecked(value is not None)
            if value is not None:
                spin.setValue(float(value))
            check.blockSignals(False)
            spin.blockSignals(False)
        self.update_preview()

    def _schedule_preview(self) -> None:
        self._preview_timer.start()

    def update_preview(self) -> None:
        """Recompute the threshold preview now (the spin boxes call it after a short pause)."""
        self._preview_timer.stop()
        self._update_preview_now()
        self._show_overlay()
        self._update_fraction()

    def _update_preview_now(self) -> None:
        values = self._values()
        low, high = self.threshold()
        self.threshold_mask = None
        if values is None or (low is None and high is None):
            self.threshold_label.setText("tick low and/or high to preview a threshold")
            self.threshold_button.setEnabled(False)
            return
        try:
            self.threshold_mask = mask_from_threshold(values, low, high)
        except MaskError as exc:
            self.threshold_label.setText(str(exc))
            self.threshold_button.setEnabled(False)
            return
        n = self.threshold_mask.size
        out = int(n - np.count_nonzero(self.threshold_mask))
        new = int(np.count_nonzero(self.mask & ~self.threshold_mask)) if self.mask is not None else out
        self.threshold_label.setText(f"masks {out} voxel(s) ({100 * out / n:.1f} %), {new} of them "
                                     "not masked yet (magenta)")
        self.threshold_button.setEnabled(True)

    def apply_threshold(self) -> None:
        """Add the previewed threshold to the mask."""
        self._update_preview_now()
        if self.threshold_mask is None or self.mask is None:
            return
        low, high = self.threshold()
        what = self.source_combo.currentText().removeprefix("on the ")
        self._set_mask(self.mask & self.threshold_mask,
                       f"Threshold on the {what}: observed where "
                       f"{_g(low) if low is not None else '-inf'} ≤ value ≤ "
                       f"{_g(high) if high is not None else 'inf'}")

    # -- boxes ----------------------------------------------------------------------------------

    def _draw_toggled(self, on: bool) -> None:
        self.roi.setVisible(on)
        self._update_box_label()

    def _range_changed(self) -> None:
        ranged = self.range_combo.currentData() == "range"
        self.from_spin.setEnabled(ranged)
        self.to_spin.setEnabled(ranged)
        self._update_box_label()

    def set_box(self, x0: int, y0: int, width: int, height: int, slices="this") -> None:
        """Place the box (image columns x0.., rows y0..) and choose its slices: "this", "all"
        or an inclusive (first, last) pair; shows the box."""
        self.draw_button.setChecked(True)
        self.roi.setPos((x0, y0), finish=False)
        self.roi.setSize((width, height))
        if isinstance(slices, str):
            self.range_combo.setCurrentIndex(self.range_combo.findData(slices))
        else:
            self.range_combo.setCurrentIndex(self.range_combo.findData("range"))
            self.from_spin.setValue(int(slices[0]))
            self.to_spin.setValue(int(slices[1]))
        self._update_box_label()

    def box(self) -> tuple | None:
        """The box as mask_tools' (i0, i1, j0, j1, k0, k1): the voxels whose centres lie in the
        rectangle, on the chosen slices; None when it covers no voxel."""
        if self.inputs is None:
            return None
        shape = self.inputs.data.shape
        a, b = self._plane_axes()
        pos, size = self.roi.pos(), self.roi.size()

        def cover(start: float, length: float, n: int) -> tuple[int, int]:
            first = max(0, math.ceil(start - 0.5))
            stop = min(n, math.floor(start + length - 0.5) + 1)
            return first, stop

        ranges: list = [None, None, None]
        ranges[a] = cover(pos.y(), size.y(), shape[a])
        ranges[b] = cover(pos.x(), size.x(), shape[b])
        mode = self.range_combo.currentData()
        if mode == "all":
            ranges[self.axis] = (None, None)
        elif mode == "this":
            ranges[self.axis] = (self.slice_index, self.slice_index + 1)
        else:
            first, last = sorted((self.from_spin.value(), self.to_spin.value()))
            ranges[self.axis] = (first, last + 1)
        if ranges[a][0] >= ranges[a][1] or ranges[b][0] >= ranges[b][1]:
            return None
        return tuple(x for pair in ranges for x in pair)

    def _update_box_label(self) -> None:
        if not self.draw_button.isChecked():
            self.box_label.setText("press Draw box to place a rectangle on the slice")
            self.box_button.setEnabled(False)
            return
        box = self.box()
        if box is None:
            self.box_label.setText("the rectangle covers no voxel of the slice")
            self.box_button.setEnabled(False)
            return
        parts = []
        for axis in range(3):
            lo, hi = box[2 * axis], box[2 * axis + 1]
            name = "xyz"[axis]
            parts.append(f"{name} all" if lo is None else
                         f"{name} = {lo}" if hi == lo + 1 else f"{name} {lo}..{hi - 1}")
        self.box_label.setText("masks " + ", ".join(parts))
        self.box_button.setEnabled(True)

    def mask_box(self) -> None:
        """Mask the box's voxels."""
        box = self.box()
        if box is None or self.mask is None:
            return
        try:
            boxed = mask_from_boxes(self.mask.shape, [box])
        except MaskError as exc:
            self.error_label.setText(str(exc))
            return
        self._set_mask(self.mask & boxed, "Box: " + self.box_label.text())

    # -- saving ---------------------------------------------------------------------------------

    def _current_file(self) -> Path | None:
        """The .npy file data.mask names now (a file the editor may replace: it is the mask
        being edited), or None."""
        ref = self.state["data.mask"]
        if isinstance(ref, str) and ref.strip().lower().endswith(".npy"):
            return self.state.resolve(ref.strip())
        return None

    def _reference_for(self, path: Path) -> str:
        """data.mask text for ``path``: relative to the config's folder when inside it."""
        try:
            return path.relative_to(self.state.base_dir).as_posix()
        except ValueError:
            return str(path)

    def target(self, where: str | None = None) -> Path | None:
        """Where OK writes the mask: next to the config ("config"), saving it first when it
        has no file, or next to the data ("data"); None (default) asks when the config is not
        saved. None when the user cancels."""
        if where is None and self.state.path is None:
            where = self._ask_where()
        if where == "data":
            return mask_path_for(self.state.resolve(self.state["data.path"]))
        if where is None and self.state.path is None:
            return None
        if self.state.path is None:
            saved = self.save_config() if self.save_config is not None else self._save_dialog()
            if not saved or self.state.path is None:
                return None
        return mask_path_for(self.state.path)

    def _ask_where(self) -> str | None:
        box = QMessageBox(QMessageBox.Icon.Question, "Save the mask",
                          "The mask is saved as a file next to the config, which has no file "
                          "yet. Save the config first, or save the mask next to the data file?",
                          QMessageBox.StandardButton.Cancel, self)
        config = box.addButton("Save config…", QMessageBox.ButtonRole.AcceptRole)
        data = box.addButton("Next to the data", QMessageBox.ButtonRole.AcceptRole)
        box.exec()
        return "config" if box.clickedButton() is config else \
            "data" if box.clickedButton() is data else None

    def _save_dialog(self) -> bool:
        path, _ = QFileDialog.getSaveFileName(self, "Save config", str(
            self.state.base_dir / "config.toml"), "Fieldscope config (*.toml)")
        if not path:
            return False
        try:
            self.state.save(path)
        except (cfg.ConfigError, OSError) as exc:
            self.error_label.setText(f"The config was not saved: {exc}")
            return False
        return True

    def _ask_replace(self, path: Path) -> bool:
        answer = QMessageBox.question(
            self, "Replace file?", f"{path} exists and is not the mask this config uses. "
            "Replace it with this mask?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def save(self, where: str | None = None, replace: bool | None = None) -> str | None:
        """Write the mask and point data.mask at it; returns the reference written ("" when
        the mask observes everything: data.mask cleared, no file), or None when nothing was
        saved (the dialog says why). ``where``: see ``target``; ``replace``: whether an
        existing file that is not the current mask may be replaced (None: ask)."""
        if self.mask is None:
            return None
        if not self.mask.any():
            self.error_label.setText("No voxel is observed: a run needs at least one (Invert "
                                     "or Undo); nothing saved")
            return None
        if self.mask.all():
            self.state["data.mask"] = ""
            self.saved_reference = ""
            return ""
        path = self.target(where)
        if path is None:
            return None
        current = self._current_file()
        overwrite = False
        if path.exists():
            overwrite = current is not None and _same_file(path, current)
            if not overwrite:
                if replace is None:
                    replace = self._ask_replace(path)
                if not replace:
                    self.error_label.setText(f"{path} exists; not replaced, nothing saved")
                    return None
                overwrite = True
        try:
            save_mask(path, self.mask, overwrite=overwrite)
        except MaskError as exc:
            self.error_label.setText(str(exc))
            return None
        ref = self._reference_for(path)
        self.state["data.mask"] = ref
        self.saved_reference = ref
        return ref

    def accept(self) -> None:
        if self.save() is not None:
            super().accept()

    def done(self, result: int) -> None:
        self._reader.close()
        super().done(result)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
