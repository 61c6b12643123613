"""The Sampler panel: algorithm, steps, warmup, chains, seed, field parameterisation and dtype."""

from __future__ import annotations

import math

from PySide6.QtWidgets import QCheckBox

from app.panels.base import SetupPanel
from app.panels.binding import INFO_STYLE, _alive, _bytes, _info_label, bind_check
from app.state.config_state import SAMPLER_KEYS, ConfigState

__all__ = ["SamplerPanel"]

class SamplerPanel(SetupPanel):
    title = "Sampler"
    keys = SAMPLER_KEYS + ("field.parameterisation", "field.dtype")

    def __init__(self, state: ConfigState, parent=None):
        super().__init__(state, parent)
        self._choice("sampler.algorithm", "Algorithm", [
            ("HMC (fixed leapfrog steps)", "hmc"), ("NUTS (no-U-turn)", "nuts"),
            ("MCLMC (microcanonical Langevin, unadjusted)", "mclmc"),
            ("MAMS (microcanonical, Metropolis-adjusted)", "mams")],
            tip="sampler.algorithm: MCLMC and MAMS tune their step size and trajectory length "
                "in warmup (core.engine.microcanonical)")
        self._number("sampler.num_warmup", "Warmup steps",
                     tip="sampler.num_warmup: steps adapting the step size (not kept as draws)")
        self._number("sampler.num_samples", "Draws", tip="sampler.num_samples: post-warmup draws")
        self.leapfrog = self._number("sampler.num_leapfrog_steps", "Leapfrog steps",
                                     tip="sampler.num_leapfrog_steps (HMC)")
        self._number("sampler.step_size", "Initial step size",
                     tip="sampler.step_size: adapted during warmup (MCLMC / MAMS: a move per "
                         "coordinate, their step is this x sqrt(dimensions))")
        self.target_accept = self._number(
            "sampler.target_accept", "Target acceptance",
            tip="sampler.target_accept, in (0, 1): dual averaging's target (HMC, NUTS, MAMS; "
                "0.9 is MAMS's recommended value); MCLMC accepts every step and tunes its step "
                "from the energy error instead")
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
        algorithm = s["sampler.algorithm"]
        # settings that do not apply to the algorithm are hidden (their values are kept)
        for edit, shown in ((self.leapfrog, algorithm == "hmc"),
                            (self.target_accept, algorithm != "mclmc")):
            self.form.setRowVisible(edit, shown)
            edit.setHidden(not shown)
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


