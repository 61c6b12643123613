"""The Sampler panel: algorithm, steps, warmup, chains, seed, field parameterisation and dtype.

Next to "Keep every" (``sampler.thin``) it shows what the kept field draws cost on disk:
bytes per kept draw (one chain, and all chains) and the whole run's store, from
``core.run.resources.estimate_run`` (the store's own block layout,
``core.store.run_store.field_draw_disk_bytes``), the same figure the disk check refuses a
run with, so the two never disagree. It is an upper bound: random draws compress only to
about 90 %. It follows every edit of the grid (the data's shape), chains, dtype,
num_samples and thin.

Below the settings, before a run, the advice ``fieldscope summary`` would give after it where
the choice alone decides it (``core.store.advice.unadjusted_bias``): an unadjusted sampler
(MCLMC) sampling P(k) through a mask, a noise map or a non-Gaussian likelihood, with a
button that sets what it suggests (MAMS).
"""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QPushButton

from app.panels.base import SetupPanel
from app.panels.binding import INFO_STYLE, _alive, _bytes, _info_label, bind_check
from app.state.config_state import SAMPLER_KEYS, ConfigState
from core.config import PER_MODE_PRECONDITIONERS
from core.run import resources
from core.samplers import SAMPLERS
from core.store.advice import coupling, unadjusted_bias

__all__ = ["SamplerPanel"]

def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 < 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class SamplerPanel(SetupPanel):
    title = "Sampler"
    keys = SAMPLER_KEYS + ("field.parameterisation", "field.dtype", "field.shard")

    def __init__(self, state: ConfigState, parent=None):
        super().__init__(state, parent)
        self._choice("sampler.algorithm", "Algorithm", [(info.label, name) for name, info in SAMPLERS.items()],
            tip="sampler.algorithm: MCLMC and MAMS tune their step size and trajectory length "
                "in warmup (core.engine.adaptation.mclmc_tuning, mams_tuning)")
        self._number("sampler.num_warmup", "Warmup steps",
                     tip="sampler.num_warmup: steps adapting the step size (not kept as draws)")
        self._number("sampler.num_samples", "Draws", tip="sampler.num_samples: post-warmup draws")
        self.leapfrog = self._number("sampler.num_leapfrog_steps", "Leapfrog steps",
                                     tip="sampler.num_leapfrog_steps (HMC)")
        self._number("sampler.step_size", "Initial step size",
                     tip="sampler.step_size: the first guess of the initial step-size search "
                         "(doubled or halved at the start until a trajectory's acceptance "
                         "crosses the target), then adapted during warmup (MCLMC / MAMS: no "
                         "search; a move per coordinate, their step is this x sqrt(dimensions))")
        self.target_accept = self._number(
            "sampler.target_accept", "Target acceptance",
            tip="sampler.target_accept, in (0, 1): dual averaging's target (HMC, NUTS, MAMS; "
                "0.9 is MAMS's recommended value); MCLMC accepts every step and tunes its step "
                "from the energy error instead")
        self._choice("sampler.preconditioner", "Mass matrix", [
            ("identity", "identity"), ("diagonal (adapted in warmup)", "diagonal"),
            ("fourier (from the model)", "fourier"),
            ("conditional (fourier, centred given P(k))", "conditional")],
            tip="sampler.preconditioner: diagonal estimates each coordinate's variance in "
                "warmup; fourier takes each Fourier mode's posterior scale from the prior, "
                "noise, mask and beam (field model, whitened or raw modes); conditional also "
                "centres each mode on its posterior mean given the current P(k), so that "
                "sampled hyperparameters are not pinned by well-measured modes")
        self.dense_modes = self._number(
            "sampler.dense_modes", "Dense low-k modes",
            tip="sampler.dense_modes (fourier): with a mask or a noise map, this many of the "
                "best-measured low-k modes get the exact posterior precision among themselves, "
                "which a per-mode scale cannot follow (0 = none; at most 4096). On the 32³ "
                "masked benchmark this is where the fourier preconditioner gains most: "
                "docs/benchmarks.md")
        self.interweave = bind_check(state, "sampler.interweave", QCheckBox("centred move of P(k) each draw"))
        self.interweave.setToolTip(
            "sampler.interweave: with P(k) hyperparameters or band powers sampled (whitened modes), "
            "after each transition the spectrum is drawn again given the field's Fourier modes, "
            "which the data pin where the sampler alone moves the spectrum least (ASIS; "
            "core.engine.interweaving; docs/benchmarks.md)")
        self._row("Interweaving", self.interweave, "sampler.interweave")
        self._number("sampler.chains", "Chains", tip="sampler.chains (run side by side)")
        self._number("sampler.devices", "Devices",
                     tip='sampler.devices: spread the chains over N devices (GPUs), or "all" the GPUs; '
                         "the draws are the same as on one. On a machine without a GPU, N logical "
                         "devices share the CPU's cores: no faster. With the field cut over devices "
                         "(Field across devices), the devices its parts are on")
        self._number("sampler.seed", "Seed", tip="sampler.seed: same seed, same draws")
        self._number("sampler.thin", "Keep every", tip="sampler.thin: keep every thin-th "
                     "field draw (scalars are kept at every draw)")
        self.disk_cost = _info_label()
        self.disk_cost.setStyleSheet(INFO_STYLE)
        self.disk_cost.setToolTip("what the kept field draws take in the run store (an estimate, "
                                  "at most: random draws compress only to about 90 %)")
        self.form.addRow("", self.disk_cost)
        self._number("sampler.chunk_size", "Chunk size",
                     tip="sampler.chunk_size: steps per compiled call; progress, pause and "
                         "stop act between chunks")
        self._choice("field.parameterisation", "Parameterisation", [
            ("whitened Fourier modes", "whitened"), ("white noise", "white_noise"),
            ("raw Fourier modes", "raw_modes")], tip="field.parameterisation")
        self._choice("field.dtype", "Precision", [("float32", "float32"), ("float64", "float64")],
                     tip="field.dtype")
        self._choice("field.shard", "Field across devices", [
            ("whole on each device", "none"), ("cut in slabs (x)", "slab"), ("cut in pencils (x, y)", "pencil")],
            tip="field.shard: cut the field, its latent and its FFTs over the Devices, for a grid "
                "one device cannot hold (every chain on every device). Needs white noise, a "
                "Gaussian likelihood and the identity or diagonal mass matrix; slabs exchange "
                "once an FFT, pencils twice and take more devices (docs/benchmarks.md)")
        self.info = _info_label()
        self.info.setStyleSheet(INFO_STYLE)
        self.body.addWidget(self.info)
        # the advice the sampler choice alone decides (module docstring), with its button
        self.advice = _info_label()
        self.advice.setObjectName("sampler.advice")
        self.advice_button = QPushButton()
        self.advice_button.setObjectName("sampler.advice_action")
        self.advice_button.clicked.connect(self._apply_advice)
        self._advice_changes: dict = {}
        self.body.addWidget(self.advice)
        self.body.addWidget(self.advice_button)
        self.body.addStretch(1)
        state.connect_any(self._on_change)
        self.refresh()

    def _on_change(self, keys) -> None:
        if _alive(self.info) and any(k.startswith(("sampler.", "model.", "data.", "field.", "prior.",
                                                   "likelihood."))
                                     for k in keys):
            self.refresh()

    def refresh(self) -> None:
        s = self.state
        algorithm = s["sampler.algorithm"]
        info = SAMPLERS.get(algorithm)
        # settings that do not apply to the algorithm are hidden (their values are kept)
        for edit, shown in ((self.leapfrog, info is None or info.leapfrog_steps),
                            (self.target_accept, info is None or info.target_accept),
                            (self.dense_modes, s["sampler.preconditioner"] in PER_MODE_PRECONDITIONERS
                             and not self._exact_slab()),
                            (self.interweave, s["model.kind"] == "field")):
            self.form.setRowVisible(edit, shown)
            edit.setHidden(not shown)
        field = s["model.kind"] == "field"
        for key in ("field.parameterisation", "field.dtype", "field.shard"):
            self.form.setRowVisible(self.edits[key], field)
            self.edits[key].setHidden(not field)
        self._show_advice()
        values = [s[f"sampler.{k}"] for k in ("num_warmup", "num_samples", "chains", "thin")]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values) \
                or min(values[1:]) < 1 or values[0] < 0:
            self.info.setText("")
            return
        warmup, samples, chains, thin = values
        text = (f"{warmup + samples} steps per chain; {samples * chains:,} draws kept in all "
                f"(scalars at every draw)")
        if info is not None and info.microcanonical and warmup < samples // 3:
            text += (f". {algorithm.upper()} tunes its step size and trajectory length in warmup: "
                     f"BlackJAX tunes for a third as many steps as it samples, {samples // 3:,} here; "
                     "fewer leave the step size short (at 32³ 700 warmup steps gave 0.62 of the "
                     "effective samples of 4000: docs/benchmarks.md)")
        shape = s.data_shape() if field else None
        self.disk_cost.setText(self.disk_text(shape, warmup, samples, chains, thin))
        self.form.setRowVisible(self.disk_cost, bool(self.disk_cost.text()))
        self.info.setText(text + ".")

    def _show_advice(self) -> None:
        s = self.state
        advice = None
        if s["likelihood.kind"] != "python" and s.samples_hyperparameters():
            masked = s["data.mask"] not in ("", None)
            advice = unadjusted_bias(s["sampler.algorithm"], coupling(masked, s["data.noise"] == "map",
                                                                      s["likelihood.kind"], self._exact_slab()))
        self._advice_changes = dict(advice.changes) if advice is not None else {}
        self.advice.setText(f"{advice.text[0].upper()}{advice.text[1:]}." if advice is not None else "")
        self.advice_button.setText(advice.action[0].upper() + advice.action[1:] if advice is not None else "")
        self.advice.setVisible(advice is not None)
        self.advice_button.setVisible(advice is not None)

    def _exact_slab(self) -> bool:
        """Whether "conditional" is exact under the data's slab mask with these settings (the
        engine's rule, ``ConfigState.exact_slab``): then no dense block is built either."""
        s = self.state
        return s["model.kind"] == "field" and s.exact_slab() is not None

    def _apply_advice(self) -> None:
        with self.state.batch():
            for key, value in self._advice_changes.items():
                self.state[key] = value

    def disk_text(self, shape, warmup: int, samples: int, chains: int, thin: int) -> str:
        """The disk cost of the kept field draws (module docstring), or "" without a grid."""
        if shape is None or len(shape) != 3 or min(shape) < 1:
            return ""
        s = self.state
        est = resources.estimate_run(shape, chains=chains, thin=thin, num_warmup=warmup,
                                     num_samples=samples, dtype=s["field.dtype"] if s["field.dtype"]
                                     in ("float32", "float64") else "float32",
                                     noise_map=s["data.noise"] == "map")
        kept = -(-samples // thin)
        per = est.field_draw_bytes
        every = "every draw" if thin == 1 else f"every {_ordinal(thin)} draw"
        return (f"on disk (estimate, at most): {_bytes(per)} per kept field draw of a chain, "
                f"{_bytes(per * chains)} for all {chains}; {kept:,} kept per chain ({every}): "
                f"{_bytes(per * chains * kept)} of field draws, the run's store "
                f"≈ {_bytes(est.store_bytes)} in all")


