"""The Grid panel: box size and unit, and what the grid implies (k range, modes, memory, time)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLineEdit, QWidget

from app.panels.base import SetupPanel
from app.panels.binding import (
    _INVALID_EDIT,
    INFO_STYLE,
    _alive,
    _bytes,
    _g,
    _info_label,
    _message_label,
    _si_time,
    bind_text,
)
from app.state.config_state import ConfigState, format_value, parse_number
from app.state.session import VOXEL_UNIT
from core import config as cfg
from core.field.grid import Grid
from core.run import resources
from core.run.engine_limits import field_buffer_draws
from core.run.resources import fft_pairs, fft_rate, gradient_seconds
from core.samplers import SAMPLERS

__all__ = ["GridPanel"]

BOX_QUESTION_STYLE = "background: #fff3cd; color: #664d03; border: 1px solid #e0c36a; padding: 6px;"

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
        # File > New from data on a file that states no box size: the question, asked here
        # without blocking (the data are shown meanwhile, in voxel units)
        self.box_question = _info_label()
        self.box_question.setObjectName("box_question")
        self.box_question.setStyleSheet(BOX_QUESTION_STYLE)
        self.box_question.setVisible(False)
        self.body.insertWidget(0, self.box_question)
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
            "engine's arrays, XLA's working set (the same for any number of leapfrog steps) "
            "and TensorFlow itself (measured on CPU runs); a run that does not "
            "fit in the free memory cannot be started.")
        self.body.addWidget(self.formula)
        self.body.addStretch(1)
        s.connect("grid.box_size", self._sync_lengths)
        s.connect_any(self._on_change)
        self._sync_lengths(s["grid.box_size"])
        self.refresh()

    def ask_box_size(self, data_name: str) -> None:
        """Ask for the box size here, without blocking: ``data_name`` states none, so the box
        is measured in voxels until the user types its side length (and unit)."""
        self.box_question.setText(
            f"<b>{data_name} does not state the size of the box it covers.</b> Until you give it, "
            "lengths are in voxels (one voxel = 1) and k in 1/voxel. Type the box's side length "
            "(one number, or three without \"cubic box\") and its unit: they set the wavenumbers "
            "k of P(k) and so the prior's units.")
        self.box_question.setVisible(True)
        self.lengths[0].setFocus()
        self.lengths[0].selectAll()

    @property
    def asking_box_size(self) -> bool:
        return not self.box_question.isHidden()

    def _box_answered(self) -> None:
        """The user typed a box size: the question is answered; a "voxel" unit no longer holds."""
        if self.asking_box_size:
            self.box_question.setVisible(False)
            if self.state["grid.unit"] == VOXEL_UNIT:
                self.state["grid.unit"] = ""

    def _cube_toggled(self, on: bool) -> None:
        if on:
            first = parse_number(self.lengths[0].text())
            self.state["grid.box_size"] = first
        else:
            value = self.state["grid.box_size"]
            self.state["grid.box_size"] = [value] * 3 if not isinstance(value, list) else value
        self._sync_lengths(self.state["grid.box_size"])

    def _lengths_edited(self, _text) -> None:
        self._box_answered()
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
        """core.run.resources' estimate for the state's sampler settings, None while invalid."""
        s = self.state
        values = {k: s[f"sampler.{k}"] for k in ("num_leapfrog_steps", "chunk_size", "thin",
                                                  "num_warmup", "num_samples")}
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                   for v in values.values()) or min(values["chunk_size"], values["thin"],
                                                    values["num_leapfrog_steps"]) < 1:
            return None
        return resources.estimate_run(
            shape, chains=chains, dtype=dtype, algorithm=s["sampler.algorithm"],
            parameterisation=s["field.parameterisation"], hyper_sampled=s.samples_hyperparameters(),
            noise_map=s["data.noise"] == "map", preconditioner=s["sampler.preconditioner"],
            slab=s.exact_slab(), box_size=s.box_size(), **values)

    def show_errors(self, errors):
        super().show_errors(errors)
        bad = bool(errors.get("grid.box_size"))
        for edit in self.lengths:
            edit.setStyleSheet(_INVALID_EDIT if bad else "")

    def _on_change(self, keys) -> None:
        if _alive(self.info) and any(k.startswith(("grid.", "data.", "sampler.", "field.",
                                                   "model.", "prior.")) for k in keys):
            self.refresh()

    def refresh(self) -> None:
        s = self.state
        if s["model.kind"] != "field":
            self.info.setText(f"The {s['model.kind']} model has no grid.")
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
                kept = field_buffer_draws(chunk, thin)
            mem = grid.memory_estimate(chains=chains, dtype=dtype, n_field_draws_kept=kept)
            text = (f"{_bytes(mem.total)} for {chains} chain{'s' if chains > 1 else ''}, "
                    f"{dtype} (state, momentum, gradients, spectra, FFT scratch, running "
                    f"moments, {kept} field draws per chunk)")
            run = self._run_estimate(shape, chains, dtype, kept)
            if run is not None:
                free = resources.available_memory()
                slab = run.arrays.get("slab_factors")
                text += (f"; the run ≈ {_bytes(run.needed(include_import=False))} with XLA's "
                         f"buffers ({_bytes(run.xla_working_set)})"
                         + (f" and the slab's exact conditional's factors ({_bytes(slab)})" if slab else "")
                         + f" in the engine, which holds TensorFlow ({_bytes(run.engine_import)})"
                         + (f"; {_bytes(free)} free" if free else ""))
            rows.append(("memory (estimate)", text))
            param = s["field.parameterisation"]
            t = gradient_seconds(shape, chains, param)
            steps = s["sampler.num_leapfrog_steps"]
            text = f"≥ {_si_time(t)} per gradient, all chains ({fft_pairs(param)} FFT pair" \
                   f"{'s' if fft_pairs(param) > 1 else ''}, R = {fft_rate() / 1e9:.2f} Gflop/s)"
            info = SAMPLERS.get(s["sampler.algorithm"])
            if info is not None and isinstance(steps, int) and steps >= 1:
                per_step = info.gradients_per_step(steps, s.samples_hyperparameters(), s["sampler.interweave"])
                what = f"{steps} leapfrog steps" if info.fixed_gradients is None else \
                    f"{per_step} gradient{'s' if per_step > 1 else ''}" + " on average" * bool(info.trajectory_steps)
                text += f"; ≥ {_si_time(t * per_step)} per draw ({what})"
                total = s["sampler.num_warmup"], s["sampler.num_samples"]
                if all(isinstance(v, int) and v >= 0 for v in total):
                    text += f"; ≥ {_si_time(t * per_step * sum(total))} for the run"
            if run is not None and "slab_factors" in run.arrays:
                text += ("; under this slab mask \"conditional\" is exact and a gradient costs more: "
                         "1.8-5x the diagonal centre's on the benchmarks, docs/benchmarks.md")
            rows.append(("time (FFT bound)", text))
        html = "<table cellspacing='2'>" + "".join(
            f"<tr><td style='padding-right:8px'><b>{name}</b></td><td>{value}</td></tr>"
            for name, value in rows) + "</table>"
        self.info.setText(html)


