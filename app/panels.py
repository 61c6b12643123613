"""The setup panels: Data, Grid, Prior, Likelihood, Sampler (docked beside the live views).

Each panel is a thin adapter over one ``app.config_state.ConfigState``: every widget is
bound to a key (``bind_*``), writes what the user types into the state and follows the
state when it changes elsewhere (a file opened, another panel). Panels hold no settings.
Next to each widget a message label shows what is wrong with that key (the text of
``core.config`` / ``core.loaders``, which names the key); ``show_errors`` fills them.

Numbers are typed into line edits, not spin boxes: a spin box silently clamps what it
does not accept, where a line edit lets validation say what the key needs.

The Grid panel shows the run's memory and time estimates of ``core.resources`` (the
time per gradient is a lower bound from FFT work alone; the memory estimate counts the
engine's arrays, XLA's buffers and TensorFlow, calibrated against measured runs). A run
that cannot fit in this machine's free memory is a "grid.memory" error (from
``ConfigState.check_files``): the Grid panel shows it and Start stays disabled.

The Data panel reads the chosen array to show its statistics and a slice. Arrays above
``DataPanel.async_bytes`` (16 MiB) are read in a worker thread (a memory-mapped .npy or
FITS cube of gigabytes takes seconds to scan); the result comes back by a queued
signal, and a result for a file or array no longer chosen is dropped.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import shiboken6
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QCheckBox, QComboBox, QFileDialog, QFormLayout, QFrame,
                               QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPushButton,
                               QScrollArea, QSizePolicy, QSlider, QToolButton, QVBoxLayout,
                               QWidget)

from app.config_state import (FIELD_HYPERPARAMETERS, INTEGRAL_DISTRIBUTIONS,
                              INTEGRAL_PARAMETERS, SAMPLER_KEYS, ConfigState, format_value,
                              parse_number)
from core import config as cfg
from core import resources
from core.grid import Grid
from core.power_spectrum import DISTRIBUTIONS, spectrum_from_config
from core.resources import fft_pairs, fft_rate, gradient_seconds

__all__ = ["SetupPanel", "DataPanel", "GridPanel", "PriorPanel", "LikelihoodPanel",
           "SamplerPanel", "make_panels", "fft_rate", "gradient_seconds", "fft_pairs"]

ERROR_STYLE = "color: #d9534f;"
INFO_STYLE = "color: #6b6b6b;"
_INVALID_EDIT = "QLineEdit { border: 1px solid #d9534f; }"

HYPER_LABELS = {
    "amplitude": "amplitude A",
    "index": "index n",
    "cutoff_scale": "cutoff scale R",
    "A": "A",
    "c": "c",
    "sigma": "sigma",
}


def _alive(widget) -> bool:
    return widget is not None and shiboken6.isValid(widget)


# --------------------------------------------------------------------------- bindings


def bind_text(state: ConfigState, key: str, edit: QLineEdit, parse=parse_number) -> QLineEdit:
    """Two-way binding of a line edit to ``state[key]`` (``parse`` turns text into the
    value; for numbers, text that is not a number is kept and validation names it)."""
    edit.setText(format_value(state[key]))

    def from_widget(text):
        state[key] = parse(text)

    def from_state(value):
        if not _alive(edit):
            return
        current = parse(edit.text())
        if type(current) is type(value) and current == value or (
                isinstance(value, (int, float)) and not isinstance(value, bool)
                and isinstance(current, (int, float)) and current == value):
            return
        edit.setText(format_value(value))

    edit.textEdited.connect(from_widget)
    state.connect(key, from_state)
    edit.setObjectName(key)
    return edit


def bind_combo(state: ConfigState, key: str, combo: QComboBox, items) -> QComboBox:
    """A fixed-choice combo box: ``items`` are (label, value) pairs."""
    for label, value in items:
        combo.addItem(label, value)

    def sync(value):
        if not _alive(combo):
            return
        index = combo.findData(value)
        if index < 0:      # a value the file had that is not a choice: shown, flagged
            combo.addItem(f"{value} (unknown)", value)
            index = combo.count() - 1
        if combo.currentIndex() != index:
            combo.blockSignals(True)
            combo.setCurrentIndex(index)
            combo.blockSignals(False)

    sync(state[key])
    combo.currentIndexChanged.connect(lambda i: state.set(key, combo.itemData(i)))
    state.connect(key, sync)
    combo.setObjectName(key)
    return combo


def bind_editable_combo(state: ConfigState, key: str, combo: QComboBox) -> QComboBox:
    """An editable combo box (an array name chosen from a file, or typed)."""
    combo.setEditable(True)
    combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
    combo.setEditText(format_value(state[key]))

    def sync(value):
        if _alive(combo) and combo.currentText() != (value or ""):
            combo.blockSignals(True)
            combo.setEditText(value or "")
            combo.blockSignals(False)

    combo.currentTextChanged.connect(lambda text: state.set(key, text))
    state.connect(key, sync)
    combo.setObjectName(key)
    return combo


def bind_check(state: ConfigState, key: str, box: QCheckBox, setter=None) -> QCheckBox:
    box.setChecked(bool(state[key]))

    def sync(value):
        if _alive(box) and box.isChecked() != bool(value):
            box.blockSignals(True)
            box.setChecked(bool(value))
            box.blockSignals(False)

    box.toggled.connect(setter or (lambda on: state.set(key, bool(on))))
    state.connect(key, sync)
    box.setObjectName(key)
    return box


def _message_label() -> QLabel:
    label = QLabel()
    label.setWordWrap(True)
    label.setStyleSheet(ERROR_STYLE)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setVisible(False)
    return label


def _info_label() -> QLabel:
    label = QLabel()
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


# --------------------------------------------------------------------------- estimates


_si_time = resources.format_seconds
_bytes = resources.format_bytes


def _g(x, digits=4) -> str:
    return f"{x:.{digits}g}"


# --------------------------------------------------------------------------- panels


class SetupPanel(QWidget):
    """Base: a scrolling form bound to ``state``; ``show_errors`` fills message labels."""

    title = ""
    #: state keys this panel edits (prefixes: "prior.index" covers its sub-keys)
    keys: tuple[str, ...] = ()

    def __init__(self, state: ConfigState, parent=None):
        super().__init__(parent)
        self.state = state
        self.messages: dict[str, QLabel] = {}
        self.edits: dict[str, QWidget] = {}
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        outer.addWidget(scroll)
        body = QWidget()
        scroll.setWidget(body)
        self.body = QVBoxLayout(body)
        self.form = QFormLayout()
        self.form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.body.addLayout(self.form)

    # -- building helpers -----------------------------------------------------------------

    def _row(self, label: str, widget, key: str, form: QFormLayout | None = None,
             tip: str = "") -> QWidget:
        form = form or self.form
        form.addRow(label, widget)
        message = _message_label()
        form.addRow("", message)
        self.messages[key] = message
        if tip:
            label_item = form.labelForField(widget)
            if label_item is not None:
                label_item.setToolTip(tip)
            if isinstance(widget, QWidget):
                widget.setToolTip(tip)
        return widget

    def _number(self, key: str, label: str, tip: str = "", form=None) -> QLineEdit:
        edit = bind_text(self.state, key, QLineEdit())
        self.edits[key] = edit
        self._row(label, edit, key, form, tip)
        return edit

    def _choice(self, key: str, label: str, items, tip: str = "", form=None) -> QComboBox:
        combo = bind_combo(self.state, key, QComboBox(), [(str(i), i) for i in items]
                           if items and not isinstance(items[0], tuple) else items)
        self.edits[key] = combo
        self._row(label, combo, key, form, tip)
        return combo

    def _set_row_visible(self, widget: QWidget, key: str, visible: bool,
                         form: QFormLayout | None = None) -> None:
        form = form or self.form
        form.setRowVisible(widget, visible)
        message = self.messages.get(key)
        if message is not None:
            form.setRowVisible(message, visible and bool(message.text()))

    # -- errors -----------------------------------------------------------------------------

    def show_errors(self, errors: dict[str, str]) -> None:
        """Show each message next to its widget; clear the others."""
        for key, label in self.messages.items():
            text = errors.get(key, "")
            if not _alive(label):
                continue
            label.setText(text)
            parent_visible = self._row_visible(key)
            label.setVisible(bool(text) and parent_visible)
            edit = self.edits.get(key)
            if isinstance(edit, QLineEdit):
                edit.setStyleSheet(_INVALID_EDIT if text else "")

    def _row_visible(self, key: str) -> bool:
        edit = self.edits.get(key)
        return edit is None or not edit.isHidden()

    def error_keys(self) -> set[str]:
        return set(self.messages)


class _Preview(pg.PlotWidget):
    """One 2-D slice as an image (row-major, aspect locked, viridis)."""

    def __init__(self, parent=None, height: int = 200):
        super().__init__(parent)
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setColorMap(pg.colormap.get("viridis"))
        self.addItem(self.image)
        self.setAspectLocked(True)
        self.hideAxis("left")
        self.hideAxis("bottom")
        self.setMouseEnabled(False, False)
        self.setMinimumHeight(height)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)

    def show_slice(self, plane: np.ndarray | None) -> None:
        if plane is None:
            self.image.clear()
            return
        plane = np.asarray(plane, dtype=np.float32)
        finite = plane[np.isfinite(plane)]
        if finite.size:
            lo, hi = float(finite.min()), float(finite.max())
        else:
            lo, hi = 0.0, 1.0
        if hi <= lo:
            hi = lo + 1.0
        self.image.setImage(plane, autoLevels=False, levels=(lo, hi))
        self.autoRange(padding=0.0)


class DataPanel(SetupPanel):
    """The data file: which array, what it holds, a slice of it, noise and mask."""

    title = "Data"
    keys = ("model.kind", "data.path", "data.key", "data.noise", "data.noise_sigma",
            "data.noise_map", "data.mask")
    file_chosen = Signal(str)
    #: (key, LoadedArray | None, ArrayStats | None, error text) from the reading thread
    array_read = Signal(object, object, object, str)
    #: arrays larger than this are read in a worker thread
    async_bytes = 16 * 2**20

    def __init__(self, state: ConfigState, parent=None):
        super().__init__(state, parent)
        s = state
        self.array_read.connect(self._array_read)
        self._reader_box: dict = {"pool": None}      # the reading thread, made when needed
        self.destroyed.connect(lambda *_, box=self._reader_box: _stop_reader(box))
        self._choice("model.kind", "Model", [("field (3-D grid)", "field"),
                                             ("integral (1-D series)", "integral")],
                     tip="model.kind: a Gaussian random field on a grid, or the 1-D "
                         "integral model")
        row = QWidget()
        h = QHBoxLayout(row)
        h.setContentsMargins(0, 0, 0, 0)
        self.path_edit = bind_text(s, "data.path", QLineEdit(), parse=str)
        self.path_edit.setPlaceholderText("a .npy / .npz / .h5 / .fits file")
        self.browse = QToolButton()
        self.browse.setText("Browse…")
        self.browse.clicked.connect(self._browse)
        h.addWidget(self.path_edit)
        h.addWidget(self.browse)
        self.edits["data.path"] = self.path_edit
        self._row("File", row, "data.path",
                  tip="data.path, relative to the config file's folder")
        self.key_combo = bind_editable_combo(s, "data.key", QComboBox())
        self.edits["data.key"] = self.key_combo
        self._row("Array", self.key_combo, "data.key",
                  tip="data.key: the array in an .npz / the dataset in an .h5 / "
                      "the image HDU of a FITS file (PRIMARY, an EXTNAME or an index)")
        self.info = _info_label()
        self.form.addRow("", self.info)
        self.preview = _Preview(height=180)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.valueChanged.connect(self._show_plane)
        self.slice_label = QLabel()
        self.axis_combo = QComboBox()
        for i, name in enumerate("xyz"):
            self.axis_combo.addItem(f"slices ⟂ {name}", i)
        self.axis_combo.setCurrentIndex(2)
        self.axis_combo.currentIndexChanged.connect(lambda _i: self._set_volume(self._volume))
        preview_box = QWidget()
        v = QVBoxLayout(preview_box)
        v.setContentsMargins(0, 0, 0, 0)
        v.addWidget(self.preview)
        hs = QHBoxLayout()
        hs.addWidget(self.axis_combo)
        hs.addWidget(self.slice_label)
        hs.addWidget(self.slider)
        v.addLayout(hs)
        self.preview_box = preview_box
        self.form.addRow("Preview", preview_box)
        self.noise_combo = self._choice("data.noise", "Noise", [
            ("one sd for every voxel (noise_sigma)", "sigma"),
            ("a map of sds (noise_map)", "map")],
            tip="gaussian likelihood: data.noise_sigma or data.noise_map")
        self.sigma_edit = self._number("data.noise_sigma", "Noise sd",
                                       tip="data.noise_sigma, in data units")
        self.noise_map_combo = bind_editable_combo(s, "data.noise_map", QComboBox())
        self.edits["data.noise_map"] = self.noise_map_combo
        self._row("Noise map", self.noise_map_combo, "data.noise_map",
                  tip="data.noise_map: an array in the data file, a file (noise.npy) or "
                      "FILE:KEY")
        self.mask_combo = bind_editable_combo(s, "data.mask", QComboBox())
        self.edits["data.mask"] = self.mask_combo
        self._row("Mask", self.mask_combo, "data.mask",
                  tip="data.mask (true = observed): an array in the data file, a file or "
                      "FILE:KEY; empty = every voxel observed")
        self.note = _info_label()
        self.note.setStyleSheet(INFO_STYLE)
        self.form.addRow("", self.note)
        self.body.addStretch(1)
        self._volume = None            # the array shown (for the slider)
        self._loaded_key = None
        self._listing_key = None
        for key in ("data.path", "data.key", "model.kind", "likelihood.kind", "data.noise"):
            s.connect(key, lambda _v: self.refresh())
        self.refresh()

    # -- actions ------------------------------------------------------------------------------

    def _browse(self) -> None:
        start = str(self.state.resolve(self.state["data.path"]).parent) \
            if self.state["data.path"] else str(self.state.base_dir)
        if self.state["model.kind"] == "integral":
            filters = "Series (*.csv *.txt *.dat);;All files (*)"
        else:
            patterns = " ".join(f"*{ext}" for ext in cfg.FIELD_DATA_EXTENSIONS)
            filters = f"Gridded data ({patterns});;FITS (*.fits *.fit *.fts);;All files (*)"
        path, _ = QFileDialog.getOpenFileName(self, "Open data file", start, filters)
        if path:
            self.open_file(path)

    def open_file(self, path) -> None:
        """Use ``path`` as the data file: pick its array, and take the box size, unit and
        mask from the file when it states them (the note says what was taken)."""
        from core import loaders

        path = os.path.abspath(os.fspath(path))
        s = self.state
        try:
            rel = Path(path).relative_to(s.base_dir).as_posix()
        except ValueError:
            rel = path
        notes = []
        with s.batch():
            s["data.path"] = rel
            if s["model.kind"] == "integral" or Path(path).suffix.lower() not in \
                    cfg.FIELD_DATA_EXTENSIONS:
                self.note.setText("")
                return
            try:
                infos = s.array_listing()
            except loaders.LoadError:
                return                     # the message label says why
            names = [i.name for i in infos]
            grids = [i.name for i in infos if i.shape is not None and len(i.shape) == 3]
            if s["data.key"] not in grids and grids:
                s["data.key"] = "data" if "data" in grids else grids[0]
                notes.append(f"array {s['data.key']!r}")
            mask = next((n for n in names if n.lower() == "mask"), None)   # FITS: "MASK"
            if mask is not None and (s["data.mask"] in ("", None) or (
                    s["data.mask"] and s["data.mask"] not in names)):
                s["data.mask"] = mask
                notes.append(f"mask {mask!r}")
            try:
                loaded = loaders.loader_for(path).load(path, s["data.key"])
            except loaders.LoadError:
                loaded = None
            if loaded is not None and loaded.box_size is not None:
                box = loaded.box_size
                s["grid.box_size"] = box[0] if box[0] == box[1] == box[2] else list(box)
                notes.append(f"box size {format_value(s['grid.box_size'])}")
                if loaded.unit is not None:
                    s["grid.unit"] = loaded.unit
                    notes.append(f"unit {loaded.unit!r}")
        self.note.setText(("From the file: " + ", ".join(notes) + ".") if notes else "")
        self.file_chosen.emit(path)

    # -- display ------------------------------------------------------------------------------

    def refresh(self) -> None:
        from core import loaders

        s = self.state
        field = s["model.kind"] == "field"
        gaussian = s["likelihood.kind"] == "gaussian"
        for widget, key, visible in (
                (self.key_combo, "data.key", field), (self.preview_box, None, field),
                (self.noise_combo, "data.noise", field and gaussian),
                (self.sigma_edit, "data.noise_sigma", field and gaussian
                 and s["data.noise"] == "sigma"),
                (self.noise_map_combo, "data.noise_map", field and gaussian
                 and s["data.noise"] == "map"),
                (self.mask_combo, "data.mask", field)):
            self.form.setRowVisible(widget, visible)
            widget.setHidden(not visible)
            if key in self.messages and not visible:
                self.form.setRowVisible(self.messages[key], False)
        if not s["data.path"]:
            self.info.setText("No data file yet: choose one with Browse….")
            self._set_volume(None)
            return
        path = s.resolve(s["data.path"])
        if not field:
            try:
                series = s._cached(path, "series", loaders.load_series)
                t = np.asarray(series.t)
                self.info.setText(f"{t.size} points, t from {_g(t.min())} to {_g(t.max())}")
            except (loaders.LoadError, ValueError) as exc:
                self.info.setText("")
                del exc
            return
        try:
            infos = s.array_listing()
        except loaders.LoadError:
            self.info.setText("")
            self._set_volume(None)
            return
        listing_key = (str(path), tuple((i.name, i.shape) for i in infos))
        if listing_key != self._listing_key:
            self._listing_key = listing_key
            names = [i.name for i in infos]
            for combo, extra in ((self.key_combo, None), (self.mask_combo, ""),
                                 (self.noise_map_combo, None)):
                text = combo.currentText()
                combo.blockSignals(True)
                combo.clear()
                if extra is not None:
                    combo.addItem(extra)
                for info in infos:
                    combo.addItem(info.name)
                    combo.setItemData(combo.count() - 1, f"{info.shape} {info.dtype}",
                                      Qt.ItemDataRole.ToolTipRole)
                combo.setEditText(text)
                combo.blockSignals(False)
            del names
        self._load_selected(path, infos)

    def _load_selected(self, path: Path, infos) -> None:
        from core import loaders

        s = self.state
        single = path.suffix.lower() == ".npy"
        info = infos[0] if single and infos else next(
            (i for i in infos if i.name == s["data.key"]), None)
        if info is None:
            self.info.setText("")
            self._set_volume(None)
            return
        try:
            stamp = os.stat(path).st_mtime_ns
        except OSError:
            stamp = None
        key = (str(path), info.name, stamp)
        if key == self._loaded_key:
            return
        name = None if single else info.name
        if info.size_bytes > self.async_bytes:
            self._set_volume(None)
            self._loaded_key = key
            self.info.setText(f"reading {info.name!r} ({_bytes(info.size_bytes)})…")
            if self._reader_box["pool"] is None:
                self._reader_box["pool"] = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="fieldscope-data")
            future = self._reader_box["pool"].submit(_read_array, str(path), name)
            future.add_done_callback(lambda f: self._deliver(key, f))
            return
        self._loaded_key = key
        self._show_array(*_read_array(str(path), name))

    def _deliver(self, key, future) -> None:
        """In the reading thread: hand the result to the GUI thread (queued signal)."""
        if _alive(self):
            try:
                self.array_read.emit(key, *future.result())
            except RuntimeError:     # the panel was deleted meanwhile
                pass

    def _array_read(self, key, loaded, stats, error: str) -> None:
        if key != self._loaded_key or not _alive(self.info):
            return                   # a file or array chosen since: stale
        self._show_array(loaded, stats, error)

    def shutdown(self) -> None:
        """Stop the reading thread (also done when the panel is deleted)."""
        _stop_reader(self._reader_box)

    def _show_array(self, loaded, stats, error: str) -> None:
        if error:
            self.info.setText(error)
            self._set_volume(None)
            return
        parts = [f"shape {stats.shape}, {stats.dtype}"]
        if stats.min is not None:
            parts.append(f"min {_g(stats.min)}, max {_g(stats.max)}, mean {_g(stats.mean)}")
        parts.append(f"NaN {stats.n_nan}, inf {stats.n_inf}")
        if loaded.box_size is not None:
            box = loaded.box_size
            unit = f" {loaded.unit}" if loaded.unit else ""
            parts.append("file's box " + (f"{_g(box[0])}{unit}" if box[0] == box[1] == box[2]
                                          else "(" + ", ".join(_g(b) for b in box) + f"){unit}"))
        self.info.setText("; ".join(parts))
        arr = loaded.array
        self._set_volume(arr if arr.ndim == 3 and arr.dtype.kind in "biuf" else None)

    def _set_volume(self, volume) -> None:
        self._volume = volume
        if volume is None:
            self._loaded_key = None
            self.preview.show_slice(None)
            self.slider.setEnabled(False)
            self.slice_label.setText("")
            return
        n0 = volume.shape[self.axis_combo.currentData()]
        self.slider.blockSignals(True)
        self.slider.setRange(0, n0 - 1)
        self.slider.setValue(n0 // 2)
        self.slider.blockSignals(False)
        self.slider.setEnabled(n0 > 1)
        self._show_plane(n0 // 2)

    def _show_plane(self, i: int) -> None:
        if self._volume is None:
            return
        axis = self.axis_combo.currentData()
        i = min(max(int(i), 0), self._volume.shape[axis] - 1)
        self.slice_label.setText(f"{'xyz'[axis]} = {i}")
        plane = np.take(self._volume, i, axis=axis)
        self.preview.show_slice(np.asarray(plane, dtype=np.float32))


def _stop_reader(box: dict) -> None:
    pool, box["pool"] = box["pool"], None
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


def _read_array(path: str, name):
    """(LoadedArray, ArrayStats, "") or (None, None, message): runs in either thread."""
    from core import loaders

    try:
        loaded = loaders.loader_for(path).load(path, name)
        return loaded, loaders.inspect_array(loaded.array), ""
    except loaders.LoadError as exc:
        return None, None, str(exc)


class GridPanel(SetupPanel):
    """Box size and unit, and what the grid implies: k range, modes, memory, time."""

    title = "Grid"
    keys = ("grid.box_size", "grid.unit")

    def __init__(self, state: ConfigState, parent=None):
        super().__init__(state, parent)
        s = state
        self.cube = QCheckBox("cubic box (one length)")
        self.cube.toggled.connect(self._cube_toggled)
        self.form.addRow("", self.cube)
        row = QWidget()
        h = QHBoxLayout(row)
        h.setContentsMargins(0, 0, 0, 0)
        self.lengths = []
        for i in range(3):
            edit = QLineEdit()
            edit.setObjectName(f"grid.box_size[{i}]")
            edit.textEdited.connect(self._lengths_edited)
            h.addWidget(edit)
            self.lengths.append(edit)
        self.edits["grid.box_size"] = row
        self._row("Box size", row, "grid.box_size",
                  tip="grid.box_size: L (a cube) or L0, L1, L2 in the length unit")
        unit = bind_text(s, "grid.unit", QLineEdit(), parse=str)
        self.edits["grid.unit"] = unit
        self._row("Unit", unit, "grid.unit", tip="grid.unit: the length unit (for labels)")
        self.info = _info_label()
        self.info.setTextFormat(Qt.TextFormat.RichText)
        self.body.addWidget(self.info)
        self.memory_message = _message_label()      # "grid.memory": the run cannot fit
        self.memory_message.setVisible(False)
        self.body.addWidget(self.memory_message)
        self.messages["grid.memory"] = self.memory_message
        self.formula = _info_label()
        self.formula.setStyleSheet(INFO_STYLE)
        self.formula.setText(
            "Time per gradient ≈ chains × P × 5 N log₂N / R, from FFT work alone "
            "(P = FFT pairs per gradient: 1 whitened / raw_modes, 2 white_noise; R = "
            "numpy's FFT rate measured on this machine). A lower bound: the status bar "
            "shows the measured draws/s once a run starts. The run's memory counts the "
            "engine's arrays, about 24 grid-sized buffers per chain per leapfrog step that "
            "XLA keeps, and TensorFlow itself (measured on CPU runs); a run that does not "
            "fit in the free memory cannot be started.")
        self.body.addWidget(self.formula)
        self.body.addStretch(1)
        s.connect("grid.box_size", self._sync_lengths)
        s.connect_any(self._on_change)
        self._sync_lengths(s["grid.box_size"])
        self.refresh()

    def _cube_toggled(self, on: bool) -> None:
        if on:
            first = parse_number(self.lengths[0].text())
            self.state["grid.box_size"] = first
        else:
            value = self.state["grid.box_size"]
            self.state["grid.box_size"] = [value] * 3 if not isinstance(value, list) else value
        self._sync_lengths(self.state["grid.box_size"])

    def _lengths_edited(self, _text) -> None:
        if self.cube.isChecked():
            self.state["grid.box_size"] = parse_number(self.lengths[0].text())
        else:
            self.state["grid.box_size"] = [parse_number(e.text()) for e in self.lengths]

    def _sync_lengths(self, value) -> None:
        if not _alive(self.cube):
            return
        cube = not isinstance(value, list)
        self.cube.blockSignals(True)
        self.cube.setChecked(cube)
        self.cube.blockSignals(False)
        values = [value] * 3 if cube else list(value) + [""] * (3 - len(value))
        for i, (edit, v) in enumerate(zip(self.lengths, values)):
            if parse_number(edit.text()) != v or edit.text() == "":
                edit.setText(format_value(v))
            edit.setEnabled(i == 0 or not cube)

    def _run_estimate(self, shape, chains, dtype, kept):
        """core.resources' estimate for the state's sampler settings, None while invalid."""
        s = self.state
        values = {k: s[f"sampler.{k}"] for k in ("num_leapfrog_steps", "chunk_size", "thin",
                                                  "num_warmup", "num_samples")}
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                   for v in values.values()) or min(values["chunk_size"], values["thin"],
                                                    values["num_leapfrog_steps"]) < 1:
            return None
        return resources.estimate_run(
            shape, chains=chains, dtype=dtype, algorithm=s["sampler.algorithm"],
            parameterisation=s["field.parameterisation"],
            noise_map=s["data.noise"] == "map", **values)

    def show_errors(self, errors):
        super().show_errors(errors)
        bad = bool(errors.get("grid.box_size"))
        for edit in self.lengths:
            edit.setStyleSheet(_INVALID_EDIT if bad else "")

    def _on_change(self, keys) -> None:
        if _alive(self.info) and any(k.startswith(("grid.", "data.", "sampler.", "field.",
                                                   "model.")) for k in keys):
            self.refresh()

    def refresh(self) -> None:
        s = self.state
        if s["model.kind"] != "field":
            self.info.setText("The integral model has no grid.")
            self.setEnabled(False)
            return
        self.setEnabled(True)
        shape = s.data_shape()
        box = s.box_size()
        if shape is None:
            self.info.setText("The grid's shape is the data array's: choose a data file "
                              "to see k range, modes, memory and time.")
            return
        if box is None:
            self.info.setText(f"shape {shape}; give a valid box size to see the rest.")
            return
        grid = Grid(shape, box, s["grid.unit"] if isinstance(s["grid.unit"], str) else "")
        unit = grid.unit
        inv = f" /{unit}" if unit else ""
        rows = [("shape", f"{shape[0]} × {shape[1]} × {shape[2]} = {grid.n_cells:,} cells"),
                ("cell size", " × ".join(_g(c) for c in grid.cell_size) + (f" {unit}" if unit else "")),
                ("k fundamental", ", ".join(_g(k) for k in grid.k_fundamental) + inv),
                ("k Nyquist", ", ".join(_g(k) for k in grid.k_nyquist) + inv),
                ("k max (corner)", _g(grid.k_max) + inv),
                ("modes", f"{grid.n_half_modes:,} stored half-spectrum modes; "
                          f"{grid.n_independent_modes:,} real degrees of freedom"),
                ("shells", f"{len(grid.shell_edges()) - 1} |k| shells of width "
                           f"{_g(max(grid.k_fundamental))}{inv}")]
        chains = s["sampler.chains"]
        dtype = s["field.dtype"]
        chunk, thin = s["sampler.chunk_size"], s["sampler.thin"]
        ok = (isinstance(chains, int) and not isinstance(chains, bool) and chains >= 1
              and dtype in cfg.DTYPES)
        if ok:
            kept = 0
            if all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                   for v in (chunk, thin)):
                kept = -(-chunk // thin) + 1       # the engine's field buffer per chunk
            mem = grid.memory_estimate(chains=chains, dtype=dtype, n_field_draws_kept=kept)
            text = (f"{_bytes(mem.total)} for {chains} chain{'s' if chains > 1 else ''}, "
                    f"{dtype} (state, momentum, gradients, spectra, FFT scratch, running "
                    f"moments, {kept} field draws per chunk)")
            run = self._run_estimate(shape, chains, dtype, kept)
            if run is not None:
                free = resources.available_memory()
                text += (f"; the run ≈ {_bytes(run.needed(include_import=False))} with XLA's "
                         f"buffers ({_bytes(run.xla_working_set)}) in the engine, which holds "
                         f"TensorFlow ({_bytes(run.engine_import)})"
                         + (f"; {_bytes(free)} free" if free else ""))
            rows.append(("memory (estimate)", text))
            param = s["field.parameterisation"]
            t = gradient_seconds(shape, chains, param)
            steps = s["sampler.num_leapfrog_steps"]
            text = f"≥ {_si_time(t)} per gradient, all chains ({fft_pairs(param)} FFT pair" \
                   f"{'s' if fft_pairs(param) > 1 else ''}, R = {fft_rate() / 1e9:.2f} Gflop/s)"
            if s["sampler.algorithm"] == "hmc" and isinstance(steps, int) and steps >= 1:
                text += f"; ≥ {_si_time(t * steps)} per draw ({steps} leapfrog steps)"
                total = s["sampler.num_warmup"], s["sampler.num_samples"]
                if all(isinstance(v, int) and v >= 0 for v in total):
                    text += f"; ≥ {_si_time(t * steps * sum(total))} for the run"
            rows.append(("time (FFT bound)", text))
        html = "<table cellspacing='2'>" + "".join(
            f"<tr><td style='padding-right:8px'><b>{name}</b></td><td>{value}</td></tr>"
            for name, value in rows) + "</table>"
        self.info.setText(html)


class _HyperEditor(QGroupBox):
    """One hyperparameter: fixed value, or sampled from dist(loc, scale | low, high)."""

    def __init__(self, state: ConfigState, name: str, panel: "PriorPanel"):
        super().__init__(HYPER_LABELS.get(name, name))
        self.state, self.name = state, name
        p = f"prior.{name}"
        dists = INTEGRAL_DISTRIBUTIONS if name in INTEGRAL_PARAMETERS else DISTRIBUTIONS
        form = QFormLayout(self)
        self.form = form
        self.sampled = bind_check(state, f"{p}.sampled", QCheckBox("sampled (a prior)"),
                                  setter=lambda on: state.set_sampled(name, on))
        form.addRow("", self.sampled)
        self.value = bind_text(state, f"{p}.value", QLineEdit())
        form.addRow("value", self.value)
        self.dist = bind_combo(state, f"{p}.dist", QComboBox(), [(d, d) for d in dists])
        form.addRow("dist", self.dist)
        self.parts = {}
        for part in ("loc", "scale", "low", "high"):
            edit = bind_text(state, f"{p}.{part}", QLineEdit())
            form.addRow(part, edit)
            self.parts[part] = edit
        self.message = _message_label()
        form.addRow(self.message)
        panel.messages[p] = self.message
        panel.edits[p] = self
        self._dists = dists
        for part in ("sampled", "dist"):
            state.connect(f"{p}.{part}", lambda _v: self.update_rows())
        self.update_rows()

    def update_rows(self) -> None:
        if not _alive(self):
            return
        sampled = bool(self.state[f"prior.{self.name}.sampled"])
        dist = self.state[f"prior.{self.name}.dist"]
        needed = self._dists.get(dist, ())
        self.form.setRowVisible(self.value, not sampled)
        self.form.setRowVisible(self.dist, sampled)
        for part, edit in self.parts.items():
            self.form.setRowVisible(edit, sampled and part in needed)

    def set_invalid(self, text: str) -> None:
        for edit in [self.value, *self.parts.values()]:
            edit.setStyleSheet(_INVALID_EDIT if text else "")


class PriorPanel(SetupPanel):
    """The P(k) family and its hyperparameters, with the prior's P(k) and a draw."""

    title = "Prior"
    keys = ("prior.kind", "prior.k_pivot", "prior.table", "prior.amplitude", "prior.index",
            "prior.cutoff_scale", "prior.A", "prior.c", "prior.sigma", "integral.refine")

    #: number of hyperparameter draws behind the plotted 68 % band
    BAND_DRAWS = 200

    def __init__(self, state: ConfigState, parent=None):
        super().__init__(state, parent)
        s = state
        self.kind_combo = self._choice("prior.kind", "P(k) family", [
            ("power law: A (k/k_p)^n", "power_law"),
            ("power law with cutoff: A (k/k_p)^n exp(-(kR)^2)", "power_law_cutoff"),
            ("table of (k, P) rows", "table")], tip="prior.kind")
        self.pivot = self._number("prior.k_pivot", "k pivot",
                                  tip="prior.k_pivot: fixed convention, never sampled")
        row = QWidget()
        h = QHBoxLayout(row)
        h.setContentsMargins(0, 0, 0, 0)
        self.table_edit = bind_text(s, "prior.table", QLineEdit(), parse=str)
        browse = QToolButton()
        browse.setText("Browse…")
        browse.clicked.connect(self._browse_table)
        h.addWidget(self.table_edit)
        h.addWidget(browse)
        self.table_row = row
        self.edits["prior.table"] = row
        self._row("Table", row, "prior.table",
                  tip="prior.table: a text file of k, P rows (log-log interpolation)")
        self.refine = self._number("integral.refine", "refine",
                                   tip="integral.refine: trapezoid steps per data interval")
        self.editors: dict[str, _HyperEditor] = {}
        for name in ("amplitude", "index", "cutoff_scale", *INTEGRAL_PARAMETERS):
            editor = _HyperEditor(s, name, self)
            self.editors[name] = editor
            self.body.addWidget(editor)
        self.plot = pg.PlotWidget()
        self.plot.setLogMode(x=True, y=True)
        self.plot.setLabel("bottom", "k")
        self.plot.setLabel("left", "P(k)")
        self.plot.showGrid(x=True, y=True, alpha=0.2)
        self.plot.setMinimumHeight(200)
        self.curve = self.plot.plot(pen=pg.mkPen("#4fa3ff", width=2))
        self.band_lo = self.plot.plot(pen=pg.mkPen(None))
        self.band_hi = self.plot.plot(pen=pg.mkPen(None))
        self.band = pg.FillBetweenItem(self.band_lo, self.band_hi, brush=(79, 163, 255, 60))
        self.plot.addItem(self.band)
        self.k_lines = [pg.InfiniteLine(angle=90, movable=False,
                                        pen=pg.mkPen((200, 200, 200, 140), style=Qt.PenStyle.DashLine))
                        for _ in range(2)]
        for line in self.k_lines:
            self.plot.addItem(line)
            line.setVisible(False)
        self.plot_caption = _info_label()
        self.plot_caption.setStyleSheet(INFO_STYLE)
        self.body.addWidget(self.plot)
        self.body.addWidget(self.plot_caption)
        self.draw_button = QPushButton("Draw a field from the prior")
        self.draw_button.clicked.connect(self.draw_from_prior)
        self.body.addWidget(self.draw_button)
        self.draw_preview = _Preview(height=200)
        self.draw_preview.setVisible(False)
        self.body.addWidget(self.draw_preview)
        self.draw_caption = _info_label()
        self.body.addWidget(self.draw_caption)
        self.body.addStretch(1)
        self._draws = 0
        s.connect_any(self._on_change)
        self.refresh()

    def _browse_table(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open P(k) table", str(self.state.base_dir),
                                              "Tables (*.txt *.dat *.csv);;All files (*)")
        if path:
            try:
                rel = Path(path).relative_to(self.state.base_dir).as_posix()
            except ValueError:
                rel = path
            self.state["prior.table"] = rel

    def _on_change(self, keys) -> None:
        if _alive(self.plot) and any(k.startswith(("prior.", "grid.", "data.", "model."))
                                     for k in keys):
            self.refresh()

    def _row_visible(self, key):
        editor = self.editors.get(key.split(".", 1)[1]) if key.startswith("prior.") else None
        if editor is not None:
            return not editor.isHidden()
        return super()._row_visible(key)

    def show_errors(self, errors):
        super().show_errors(errors)
        for name, editor in self.editors.items():
            editor.set_invalid(errors.get(f"prior.{name}", ""))

    def refresh(self) -> None:
        s = self.state
        integral = s["model.kind"] == "integral"
        kind = s["prior.kind"]
        names = set(s.hyper_names())
        for name, editor in self.editors.items():
            editor.setVisible(name in names)
        for widget, key, visible in ((self.kind_combo, "prior.kind", not integral),
                                     (self.pivot, "prior.k_pivot", not integral and kind != "table"),
                                     (self.table_row, "prior.table", not integral and kind == "table"),
                                     (self.refine, "integral.refine", integral)):
            self.form.setRowVisible(widget, visible)
            widget.setHidden(not visible)
            if not visible:
                self.form.setRowVisible(self.messages[key], False)
        for widget in (self.plot, self.plot_caption, self.draw_button, self.draw_caption):
            widget.setVisible(not integral)
        if integral:
            self.draw_preview.setVisible(False)
            return
        self._update_plot()

    # -- the prior's P(k) ---------------------------------------------------------------------

    def spectrum(self, values: dict | None = None):
        """The spectrum at the hyperparameters' centres (or ``values``); None if invalid."""
        s = self.state
        kind = s["prior.kind"]
        try:
            if kind == "table":
                return spectrum_from_config("table", {"path": str(s.resolve(s["prior.table"]))})
            params = {"k_pivot": s["prior.k_pivot"]}
            for name in FIELD_HYPERPARAMETERS[kind]:
                params[name] = (values or {}).get(name, s.hyper_centre(name))
            return spectrum_from_config(kind, params)
        except (ValueError, TypeError, OSError, KeyError):
            return None

    def _grid(self) -> Grid | None:
        shape, box = self.state.data_shape(), self.state.box_size()
        if shape is None or box is None:
            return None
        return Grid(shape, box)

    def _k_values(self, spectrum) -> np.ndarray:
        grid = self._grid()
        if grid is not None:
            lo, hi = min(grid.k_fundamental), grid.k_max
        elif getattr(spectrum, "kind", "") == "table":
            lo, hi = float(spectrum.k[0]), float(spectrum.k[-1])
        else:
            kp = spectrum.k_pivot
            lo, hi = kp / 100.0, kp * 100.0
        return np.geomspace(lo, hi, 200)

    def _update_plot(self) -> None:
        s = self.state
        spectrum = self.spectrum()
        if spectrum is None:
            self.curve.setData([], [])
            self.band_lo.setData([], [])
            self.band_hi.setData([], [])
            self.plot_caption.setText("Fix the prior's settings to see its P(k).")
            self.draw_button.setEnabled(False)
            return
        k = self._k_values(spectrum)
        p = spectrum.evaluate(k)
        self.curve.setData(k, p)
        sampled = [n for n in FIELD_HYPERPARAMETERS.get(s["prior.kind"], ())
                   if s[f"prior.{n}.sampled"]]
        caption = "P(k) at the hyperparameters' medians"
        if sampled:
            priors = {n: s.hyper_prior(n) for n in sampled}
            if all(priors.values()):
                rng = np.random.default_rng(12345)      # a fixed stream: no flicker
                overrides = {n: pr.draw(rng, size=(self.BAND_DRAWS, 1)) for n, pr in priors.items()}
                try:
                    logp = spectrum.log_power(k[None, :], **overrides)
                    lo, hi = np.percentile(logp, [16, 84], axis=0)
                    self.band_lo.setData(k, np.exp(lo))
                    self.band_hi.setData(k, np.exp(hi))
                    caption += (f"; band: 68 % of P(k) over {self.BAND_DRAWS} draws of "
                                + ", ".join(sampled))
                except ValueError:
                    # e.g. a normal prior on the amplitude reaching A <= 0
                    self.band_lo.setData([], [])
                    self.band_hi.setData([], [])
                    caption += "; (no band: some prior draws are outside the family's range)"
        else:
            self.band_lo.setData([], [])
            self.band_hi.setData([], [])
        grid = self._grid()
        if grid is not None:
            for line, value in zip(self.k_lines, (min(grid.k_fundamental), min(grid.k_nyquist))):
                line.setPos(math.log10(value))
                line.setVisible(True)
            caption += "; dashed: k fundamental and k Nyquist of the grid"
        else:
            for line in self.k_lines:
                line.setVisible(False)
        self.plot_caption.setText(caption + ".")
        self.draw_button.setEnabled(grid is not None)
        self.draw_button.setToolTip("" if grid is not None else
                                    "needs the grid: choose a data file and a box size")

    def draw_from_prior(self) -> None:
        """Draw hyperparameters from their priors, then a Gaussian random field with
        that P(k) on the grid (core.synthetic), and show its middle slice."""
        from core.synthetic import gaussian_random_field

        s = self.state
        grid = self._grid()
        if grid is None:
            return
        seed = int(np.random.SeedSequence().entropy % 2**32)
        rng = np.random.default_rng(seed)
        values = {}
        for name in FIELD_HYPERPARAMETERS.get(s["prior.kind"], ()):
            prior = s.hyper_prior(name)
            if prior is None:
                return
            values[name] = float(prior.draw(rng))
        spectrum = self.spectrum(values)
        if spectrum is None:
            self.draw_caption.setText("This draw of the hyperparameters is outside the family's "
                                      "range (" + ", ".join(f"{k} = {_g(v)}" for k, v in values.items())
                                      + "); draw again.")
            return
        field = gaussian_random_field(grid, spectrum, rng)
        self._draws += 1
        self.draw_preview.setVisible(True)
        self.draw_preview.show_slice(field[grid.shape[0] // 2])
        drawn = ", ".join(f"{k} = {_g(v)}" for k, v in values.items()
                          if s[f"prior.{k}.sampled"])
        self.draw_caption.setText(
            f"Middle slice of a field drawn from the prior (seed {seed}"
            + (f"; {drawn}" if drawn else "") + f"); field sd {_g(float(field.std()))}.")
        self.last_draw = field


class LikelihoodPanel(SetupPanel):
    title = "Likelihood"
    keys = ("likelihood.kind", "likelihood.smoothing_scale", "likelihood.field_mean",
            "likelihood.mean_count")

    def __init__(self, state: ConfigState, parent=None):
        super().__init__(state, parent)
        self._choice("likelihood.kind", "Kind", [
            ("gaussian: data = field + noise", "gaussian"),
            ("poisson_lognormal: counts ~ Poisson(nbar exp(field))", "poisson_lognormal")],
            tip="likelihood.kind")
        self._number("likelihood.smoothing_scale", "Smoothing scale R",
                     tip="likelihood.smoothing_scale: a Gaussian beam exp(-(kR)^2/2); 0 = none")
        self._number("likelihood.field_mean", "Field mean",
                     tip="likelihood.field_mean: the fixed mean added to the field")
        self.mean_count = self._number("likelihood.mean_count", "Mean count nbar",
                                       tip="likelihood.mean_count (poisson_lognormal only)")
        self.body.addStretch(1)
        state.connect("likelihood.kind", lambda _v: self.refresh())
        state.connect("model.kind", lambda _v: self.refresh())
        self.refresh()

    def refresh(self) -> None:
        if not _alive(self.mean_count):
            return
        s = self.state
        self.setEnabled(s["model.kind"] == "field")
        poisson = s["likelihood.kind"] == "poisson_lognormal"
        self.form.setRowVisible(self.mean_count, poisson)
        self.mean_count.setHidden(not poisson)
        if not poisson:
            self.form.setRowVisible(self.messages["likelihood.mean_count"], False)


class SamplerPanel(SetupPanel):
    title = "Sampler"
    keys = SAMPLER_KEYS + ("field.parameterisation", "field.dtype")

    def __init__(self, state: ConfigState, parent=None):
        super().__init__(state, parent)
        self._choice("sampler.algorithm", "Algorithm", [
            ("HMC (fixed leapfrog steps)", "hmc"), ("NUTS (no-U-turn)", "nuts")],
            tip="sampler.algorithm")
        self._number("sampler.num_warmup", "Warmup steps",
                     tip="sampler.num_warmup: steps adapting the step size (not kept as draws)")
        self._number("sampler.num_samples", "Draws", tip="sampler.num_samples: post-warmup draws")
        self.leapfrog = self._number("sampler.num_leapfrog_steps", "Leapfrog steps",
                                     tip="sampler.num_leapfrog_steps (HMC)")
        self._number("sampler.step_size", "Initial step size",
                     tip="sampler.step_size: adapted during warmup")
        self._number("sampler.target_accept", "Target acceptance",
                     tip="sampler.target_accept, in (0, 1)")
        box = bind_check(state, "sampler.adapt_mass_matrix",
                         QCheckBox("adapt a diagonal mass matrix in warmup"))
        self.edits["sampler.adapt_mass_matrix"] = box
        self._row("Mass matrix", box, "sampler.adapt_mass_matrix",
                  tip="sampler.adapt_mass_matrix")
        self._number("sampler.chains", "Chains", tip="sampler.chains (run side by side)")
        self._number("sampler.seed", "Seed", tip="sampler.seed: same seed, same draws")
        self._number("sampler.thin", "Keep every", tip="sampler.thin: keep every thin-th "
                     "field draw (scalars are kept at every draw)")
        self._number("sampler.chunk_size", "Chunk size",
                     tip="sampler.chunk_size: steps per compiled call; progress, pause and "
                         "stop act between chunks")
        self._choice("field.parameterisation", "Parameterisation", [
            ("whitened Fourier modes", "whitened"), ("white noise", "white_noise"),
            ("raw Fourier modes", "raw_modes")], tip="field.parameterisation")
        self._choice("field.dtype", "Precision", [("float32", "float32"), ("float64", "float64")],
                     tip="field.dtype")
        self.info = _info_label()
        self.info.setStyleSheet(INFO_STYLE)
        self.body.addWidget(self.info)
        self.body.addStretch(1)
        state.connect_any(self._on_change)
        self.refresh()

    def _on_change(self, keys) -> None:
        if _alive(self.info) and any(k.startswith(("sampler.", "model.", "data.", "field."))
                                     for k in keys):
            self.refresh()

    def refresh(self) -> None:
        s = self.state
        hmc = s["sampler.algorithm"] == "hmc"
        self.form.setRowVisible(self.leapfrog, hmc)
        self.leapfrog.setHidden(not hmc)
        field = s["model.kind"] == "field"
        for key in ("field.parameterisation", "field.dtype"):
            self.form.setRowVisible(self.edits[key], field)
            self.edits[key].setHidden(not field)
        values = [s[f"sampler.{k}"] for k in ("num_warmup", "num_samples", "chains", "thin")]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values) \
                or min(values[1:]) < 1 or values[0] < 0:
            self.info.setText("")
            return
        warmup, samples, chains, thin = values
        text = (f"{warmup + samples} steps per chain; {samples * chains:,} draws kept in all "
                f"(scalars at every draw)")
        shape = s.data_shape() if field else None
        if shape is not None:
            kept = -(-samples // thin) * chains
            text += (f"; {kept:,} field draws stored (every {thin}th), "
                     f"{_bytes(kept * math.prod(shape) * 4)} in the run store")
        self.info.setText(text + ".")


def make_panels(state: ConfigState) -> list[SetupPanel]:
    """One of each panel, in the order they are docked."""
    return [DataPanel(state), GridPanel(state), PriorPanel(state), LikelihoodPanel(state),
            SamplerPanel(state)]
