"""The Data panel: the data file, its arrays, statistics and a slice preview; mask and noise.

Arrays above ``DataPanel.async_bytes`` (16 MiB) are read in a worker thread (the views'
``app.views.jobs.LatestJob``: one read at a time, the newest waiting request replaces an
older one); a result for a file or array no longer chosen is dropped.

The same read feeds the live views before any run: with the config valid, the mask and
the noise map are read next to it (``core.io.load_field_inputs`` with the data array
already read: the data file is not read twice; a new mask or noise setting reads only
those), and ``data_loaded`` carries an ``app.state.run_state.DataPreview`` of the arrays
read (the panel's own, no copies), or None when there is nothing to show.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QSlider,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.panels.base import SetupPanel
from app.panels.binding import INFO_STYLE, _alive, _bytes, _g, _info_label, bind_editable_combo, bind_text
from app.state.config_state import ConfigState, format_value
from app.state.run_state import DataPreview
from app.views.jobs import LatestJob
from app.views.style import steady_axes
from core import config as cfg

__all__ = ["DataPanel"]

class _Preview(pg.PlotWidget):
    """One 2-D slice as an image (row-major, aspect locked, viridis)."""

    def __init__(self, parent=None, height: int = 200):
        super().__init__(parent)
        steady_axes(self)
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
        """Draw ``plane`` (a slice of a volume: (first axis, second axis), as ``np.take`` gives
        it) in the Slices view's orientation: its first axis across, its second up."""
        if plane is None:
            self.image.clear()
            return
        plane = np.asarray(plane, dtype=np.float32).T
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
    #: the data (with mask and noise when known) were read: a DataPreview, or None
    data_loaded = Signal(object)
    #: arrays larger than this are read in a worker thread
    async_bytes = 16 * 2**20

    def __init__(self, state: ConfigState, parent=None):
        super().__init__(state, parent)
        s = state
        # reads of large arrays; results come back in the GUI thread, tagged with the key
        # (file, array, mtime) they were asked for
        self._reader = LatestJob(self, name="fieldscope-data")
        self._reader.finished.connect(self._array_read)
        self.destroyed.connect(lambda *_, job=self._reader: job.close())
        self._choice("model.kind", "Model", [("field (3-D grid)", "field"),
                                             ("integral (1-D series)", "integral"),
                                             ("python (your model file)", "python")],
                     tip="model.kind: a Gaussian random field on a grid, the 1-D integral model, "
                         "or a scalar model written in a Python file (the Model file tab)")
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
        self.mask_button = QPushButton("Edit mask…")
        self.mask_button.setObjectName("data.mask.edit")
        self.mask_button.setToolTip("build a mask from the data (NaNs, a threshold, boxes), "
                                    "saved next to the config as data.mask")
        self.mask_button.clicked.connect(lambda _checked=False: self.open_mask_editor())
        row_index, _role = self.form.getWidgetPosition(self.mask_combo)
        self.form.insertRow(row_index + 1, "", self.mask_button)    # above the mask's message
        self.mask_editor = None
        for key in ("model.kind", "data.path"):
            s.connect(key, lambda _v: self._update_mask_button())
        self._update_mask_button()
        self.note = _info_label()
        self.note.setStyleSheet(INFO_STYLE)
        self.form.addRow("", self.note)
        self.body.addStretch(1)
        self._volume = None            # the array shown (for the slider)
        self._loaded_key = None        # (file, array, mtime) of the data read or being read
        self._inputs_key = None        # ... and of the mask / noise settings read with it
        self._loaded = None            # (LoadedArray, ArrayStats) of _loaded_key, once read
        self.data_preview: DataPreview | None = None   # what data_loaded carried last
        self._listing_key = None
        self._note_for = None          # the data file self.note speaks of
        for key in ("data.path", "data.key", "model.kind", "likelihood.kind", "data.noise"):
            s.connect(key, lambda _v: self.refresh(load=False))
        # arrays are read once a change is complete (after a batch: open_file sets the file,
        # then its mask); the mask and noise map (and whether the config is valid, to read
        # them) are read again without the data when only they change
        s.connect_any(lambda _keys: self._settings_changed())
        self.refresh()

    # -- actions ------------------------------------------------------------------------------

    def _browse(self) -> None:
        start = str(self.state.resolve(self.state["data.path"]).parent) \
            if self.state["data.path"] else str(self.state.base_dir)
        if self.state["model.kind"] == "integral":
            filters = "Series (*.csv *.txt *.dat);;All files (*)"
        elif self.state["model.kind"] == "python":
            filters = "Named columns or arrays (*.csv *.npz);;All files (*)"
        else:
            patterns = " ".join(f"*{ext}" for ext in cfg.FIELD_DATA_EXTENSIONS)
            filters = f"Gridded data ({patterns});;FITS (*.fits *.fit *.fts);;All files (*)"
        from app.dialogs import questions

        path = questions.choose_open_file(self, "Open data file", start, filters)
        if path:
            self.open_file(path)

    def _update_mask_button(self) -> None:
        field = self.state["model.kind"] == "field"
        self.form.setRowVisible(self.mask_button, field)
        self.mask_button.setEnabled(field and bool(self.state["data.path"]))

    def open_mask_editor(self):
        """Open the mask editor (``app.panels.mask_editor``) on this config's data; the one
        already open is brought to the front."""
        from app.panels.mask_editor import MaskEditor

        if self.mask_editor is not None and _alive(self.mask_editor):
            self.mask_editor.raise_()
            self.mask_editor.activateWindow()
            return self.mask_editor
        window = self.window()
        save_config = getattr(window, "save_config", None) if window is not self else None
        editor = MaskEditor(self.state, self, save_config=save_config)
        editor.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.mask_editor = editor
        editor.open()
        return editor

    def open_file(self, path) -> None:
        """Use ``path`` as the data file: pick its array, and take the box size, unit and
        mask from the file when it states them (the note says what was taken)."""
        from core import io as loaders

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
        self._note_for = path
        self.file_chosen.emit(path)

    # -- display ------------------------------------------------------------------------------

    def _show_scalar_data(self, path) -> None:
        """The data of a model without a field: the integral model's series (its points and t
        range), a model file's arrays (the names and shapes its log_likelihood reads as data[name])."""
        from core import io as loaders

        try:
            if self.state["model.kind"] == "python":
                arrays = self.state._cached(path, "named", loaders.load_named_arrays)
                self.info.setText("data[name] in the model file: " + ", ".join(
                    f"{name} {tuple(a.shape)}" for name, a in arrays.items()))
            else:
                t = np.asarray(self.state._cached(path, "series", loaders.load_series).t)
                self.info.setText(f"{t.size} points, t from {_g(t.min())} to {_g(t.max())}")
        except (loaders.LoadError, ValueError, AttributeError):
            self.info.setText("")       # a file that cannot be read: validation names it

    def refresh(self, load: bool = True) -> None:
        """Show what the settings say; ``load``: also read the arrays they name (else the
        next complete change does)."""
        from core import io as loaders

        s = self.state
        if self._note_for != (os.path.abspath(s.resolve(s["data.path"])) if s["data.path"] else None):
            self.note.setText("")          # what was taken from another file (another config's)
            self._note_for = None
        field = s["model.kind"] == "field"
        gaussian = s["likelihood.kind"] == "gaussian"
        python = s["likelihood.kind"] == "python"       # a model file's likelihood: a map, if any
        for widget, key, visible in (
                (self.key_combo, "data.key", field), (self.preview_box, None, field),
                (self.noise_combo, "data.noise", field and gaussian),
                (self.sigma_edit, "data.noise_sigma", field and gaussian
                 and s["data.noise"] == "sigma"),
                (self.noise_map_combo, "data.noise_map", field and (gaussian and s["data.noise"] == "map"
                                                                    or python)),
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
            self._show_scalar_data(path)
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
        if load:
            self._load_selected(path, infos)

    def _load_selected(self, path: Path, infos) -> None:

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
        config, inputs_key = self._inputs_config()
        if key == self._loaded_key and inputs_key == self._inputs_key:
            return
        name = None if single else info.name
        before = self._loaded if key == self._loaded_key else None
        self._loaded_key, self._inputs_key = key, inputs_key
        if before is None:
            self._loaded = None
        if info.size_bytes > self.async_bytes:
            if before is None:
                self._set_volume(None, keep_key=True)
                self._emit_preview(None)      # not the previous file's arrays meanwhile
                self.info.setText(f"reading {info.name!r} ({_bytes(info.size_bytes)})…")
            self._reader.request((key, inputs_key), _read_inputs, str(path), name, config, before)
            return
        self._take_inputs(_read_inputs(str(path), name, config, before), fresh=before is None)

    def _inputs_config(self):
        """(the config to read the mask and noise map with, or None while it is not valid;
        the key of what they depend on)."""
        s = self.state
        settings = tuple(s[k] for k in ("data.mask", "data.noise", "data.noise_map", "data.noise_sigma",
                                        "likelihood.kind"))
        try:
            config = s.config()
        except cfg.ConfigError:
            config = None
        return config, (settings, config is not None)

    def _settings_changed(self) -> None:
        """A change is complete: read what it changed (nothing when only other settings did)."""
        if _alive(self.info):
            self.refresh()

    def _array_read(self, key, result, error: Exception | None) -> None:
        """A large array's read ended (``LatestJob.finished``, in the GUI thread)."""
        if key != (self._loaded_key, self._inputs_key) or not _alive(self.info):
            return                   # a file, array or mask chosen since: stale
        if error is not None:        # _read_inputs reports LoadError itself: this is a bug
            self._show_array(None, None, f"{type(error).__name__}: {error}")
            return
        self._take_inputs(result, fresh=self._loaded is None)

    def _take_inputs(self, result, fresh: bool) -> None:
        loaded, stats, error, preview = result
        if error:
            self._show_array(None, None, error)
            return
        self._loaded = (loaded, stats)
        if fresh:
            self._show_array(loaded, stats, "")
        self._emit_preview(preview)

    def _emit_preview(self, preview: DataPreview | None) -> None:
        if preview is self.data_preview:
            return
        self.data_preview = preview
        self.data_loaded.emit(preview)

    def shutdown(self) -> None:
        """Read no more arrays in the worker; a read under way is dropped (also done when
        the panel is deleted)."""
        self._reader.close()

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
        self._set_volume(arr if arr.ndim == 3 and arr.dtype.kind in "biuf" else None, keep_key=True)

    def _set_volume(self, volume, keep_key: bool = False) -> None:
        self._volume = volume
        if volume is None:
            if not keep_key:
                self._loaded_key = self._inputs_key = self._loaded = None
                self._emit_preview(None)
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


def _read_array(path: str, name):
    """(LoadedArray, ArrayStats, "") or (None, None, message): runs in either thread."""
    from core import io as loaders

    try:
        loaded = loaders.loader_for(path).load(path, name)
        return loaded, loaders.inspect_array(loaded.array), ""
    except loaders.LoadError as exc:
        return None, None, str(exc)


def _read_inputs(path: str, name, config, before=None):
    """(LoadedArray, ArrayStats, "", DataPreview or None) or (None, None, message, None):
    the data array (``before``: (LoadedArray, ArrayStats) already read, not read again)
    and, with ``config`` (a valid ``core.config.RunConfig``), its mask, noise sd and truth
    as a run would read them. A mask or noise map that cannot be read is a note of the
    preview, which then shows the data alone. Runs in either thread."""
    from core import io as loaders
    from core.field.observations import with_nonfinite_masked

    if before is None:
        loaded, stats, error = _read_array(path, name)
        if error:
            return None, None, error, None
    else:
        loaded, stats = before
    arr = loaded.array
    if arr.ndim != 3 or arr.dtype.kind not in "biuf":
        return loaded, stats, "", None
    mask = noise = truth = None
    notes = []
    if config is None:
        notes.append("the mask and noise map are shown once the config is valid")
    else:
        try:
            inputs = loaders.load_field_inputs(config, loaded=loaded)
        except loaders.LoadError as exc:
            notes.append(f"mask and noise not shown: {exc}")
        else:
            mask, truth = with_nonfinite_masked(arr, inputs.mask), inputs.truth
            if config.likelihood is None or config.likelihood.kind == "gaussian":
                if inputs.noise_map is not None:
                    noise = inputs.noise_map
                elif inputs.noise_sigma is not None:
                    noise = np.broadcast_to(np.float64(inputs.noise_sigma), arr.shape)
    return loaded, stats, "", DataPreview(arr, mask, noise, truth, path=str(path), notes=tuple(notes))


