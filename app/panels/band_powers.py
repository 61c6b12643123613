"""The Prior panel's band powers (``prior.kind = "band_powers"``): P(k) piecewise constant over
bins of k, each bin's power sampled (``core.field.power_spectrum.BandPowers``).

The editor sets what the config holds: the number of bins (their edges from the grid's
shells, ``band_edges``; edges a file gives are kept and said until a number is set), each
bin's lognormal prior written as its median power and the sd of log P (``prior.band_power =
{dist = "lognormal", loc = log(median), scale = sd}``) and the smoothness prior, a random walk
in log P of a given step sd (``prior.random_walk_scale``; off: independent bins). Together
they are a Gaussian in log P (``band_log_prior``), which the panel draws (its median and
each bin's 68 % band) and draws fields from.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from PySide6.QtWidgets import QCheckBox, QFormLayout, QGroupBox, QLineEdit, QSpinBox

from app.panels.binding import _alive, _g, _info_label, _message_label
from app.state.config_state import ConfigState, format_value, parse_number
from core.config.limits import MAX_BANDS
from core.config.parse import DEFAULT_BAND_COUNT
from core.field.grid import Grid
from core.field.power_spectrum import BandPowers, band_edges, band_log_prior

__all__ = ["BandPowersEditor", "band_prior", "default_band_power"]

#: a new band-powers prior's sd of log P: a factor e^3 = 20 either way at one sd
DEFAULT_LOG_SD = 3.0


def default_band_power(level: float | None) -> dict:
    """Each bin's prior for a new band-powers config: lognormal with its median at ``level``
    (the P(k) the previous family gave there, when known, else 1) and sd ``DEFAULT_LOG_SD``."""
    loc = round(math.log(level), 2) if level is not None and level > 0 and math.isfinite(level) else 0.0
    return {"dist": "lognormal", "loc": loc, "scale": DEFAULT_LOG_SD}


def band_prior(state: ConfigState, grid):
    """(edges, mean, covariance) of the band powers' prior in log P, or a message (str) saying
    what is missing or wrong."""
    p = state["prior.band_power"]
    if not isinstance(p, dict) or p.get("dist") != "lognormal":
        return "set each bin's prior (its median power and the sd of log P)"
    loc, scale, walk = p.get("loc"), p.get("scale"), state["prior.random_walk_scale"]
    numbers = [v for v in (loc, scale, walk) if v is not None]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in numbers) \
            or scale is None or scale <= 0 or (walk is not None and walk <= 0):
        return "the band powers' prior needs numbers (median > 0, sds > 0)"
    if state["prior.edges"] is not None:
        edges = _numbers(state["prior.edges"])
        if edges is None or edges.size < 2 or np.any(edges <= 0) or np.any(np.diff(edges) <= 0):
            return "prior.edges must be increasing positive numbers"
    elif grid is None:
        return "the bins' edges come from the grid: choose the data file and the box size first"
    else:
        try:
            edges = grid_edges(tuple(grid.shape), tuple(grid.box_size), bin_count(state))
        except ValueError as exc:
            return str(exc)
    mean, covariance = band_log_prior(edges.size - 1, float(loc), float(scale), walk)
    return edges, mean, covariance


@functools.lru_cache(maxsize=8)
def grid_edges(shape: tuple, box_size: tuple, n_bins: int) -> np.ndarray:
    """``band_edges`` of a grid's wavenumbers (as the engine takes them), kept: every edit of
    the panel redraws the prior, and the distinct |k| of a 256^3 grid take seconds to find."""
    edges = band_edges(Grid(shape, box_size).k_magnitude_full(), n_bins)
    edges.setflags(write=False)
    return edges


def _numbers(values) -> np.ndarray | None:
    """``values`` as finite float64 numbers, or None where they are not all numbers."""
    if not isinstance(values, (list, tuple)) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    out = np.asarray(values, np.float64)
    return out if np.all(np.isfinite(out)) else None


def bin_count(state: ConfigState) -> int:
    """The number of bins the config asks for (its edges', else n_bins, else the default); a
    value that is not a count (the config's check names it) counts as the default."""
    edges, n = _numbers(state["prior.edges"]), state["prior.n_bins"]
    if edges is not None and edges.size >= 2:
        return min(edges.size - 1, MAX_BANDS)
    if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_BANDS:
        return n
    return DEFAULT_BAND_COUNT


def band_spectrum(edges, log_powers) -> BandPowers:
    """The band powers ``exp(log_powers)`` over ``edges``."""
    return BandPowers(edges=tuple(edges), powers=tuple(np.exp(log_powers)))


def _same(shown, value) -> bool:
    """Whether a widget's text already says ``value`` (a number to 1e-9: a median goes
    through log and exp)."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (shown, value))
    return math.isclose(shown, value, rel_tol=1e-9) if numbers else shown == value


class BandPowersEditor(QGroupBox):
    """Bins, each bin's prior and the smoothness of band powers (module docstring)."""

    def __init__(self, state: ConfigState, panel):
        super().__init__("Band powers")
        self.state = state
        form = self.form = QFormLayout(self)
        self.bins = QSpinBox()
        self.bins.setRange(1, MAX_BANDS)
        self.bins.setToolTip("prior.n_bins: bins in log k, edges from the grid's shells")
        form.addRow("bins", self.bins)
        self.edges_note = _info_label()
        form.addRow("", self.edges_note)
        self.median = QLineEdit()
        self.median.setToolTip("each bin's prior: lognormal, median exp(prior.band_power.loc)")
        form.addRow("median P", self.median)
        self.log_sd = QLineEdit()
        self.log_sd.setToolTip("prior.band_power.scale: the sd of log P in each bin")
        form.addRow("sd of log P", self.log_sd)
        self.smooth = QCheckBox("smooth: a random walk in log P, step sd")
        self.walk = QLineEdit()
        self.walk.setToolTip("prior.random_walk_scale: the prior sd of log P_{b+1} - log P_b")
        form.addRow(self.smooth, self.walk)
        for key in ("prior.n_bins", "prior.edges", "prior.band_power", "prior.random_walk_scale"):
            message = _message_label()
            form.addRow(message)
            panel.messages[key] = message
            panel.edits[key] = self
            state.connect(key, lambda _v: self.sync())
        self.bins.valueChanged.connect(self._bins_edited)
        self.median.textEdited.connect(lambda _t: self._prior_edited())
        self.log_sd.textEdited.connect(lambda _t: self._prior_edited())
        self.smooth.toggled.connect(self._smooth_toggled)
        self.walk.textEdited.connect(lambda text: state.set("prior.random_walk_scale", parse_number(text)))
        self._last_walk = 0.5
        self.sync()

    def sync(self) -> None:
        """Show what the config holds (a widget being edited keeps its text)."""
        if not _alive(self):
            return
        s = self.state
        edges = s["prior.edges"]
        self.bins.blockSignals(True)
        self.bins.setValue(bin_count(s))
        self.bins.blockSignals(False)
        given = _numbers(edges) if edges is not None else None
        self.edges_note.setText("" if edges is None else
                                f"edges from the config: {', '.join(_g(e, 3) for e in given)}; "
                                "change the number of bins to take them from the grid's shells"
                                if given is not None else
                                "the config's edges are not numbers; change the number of bins to "
                                "take them from the grid's shells")
        self.edges_note.setVisible(edges is not None)
        p = s["prior.band_power"] if isinstance(s["prior.band_power"], dict) else {}
        loc = p.get("loc")
        median = math.exp(loc) if isinstance(loc, (int, float)) and abs(loc) < 700 else loc
        for edit, value in ((self.median, median), (self.log_sd, p.get("scale"))):
            if not edit.hasFocus() and not _same(parse_number(edit.text()), value):
                edit.setText("" if value is None else format_value(float(f"{value:.6g}"))
                             if isinstance(value, float) else format_value(value))
        walk = s["prior.random_walk_scale"]
        self.smooth.blockSignals(True)
        self.smooth.setChecked(walk is not None)
        self.smooth.blockSignals(False)
        self.walk.setEnabled(walk is not None)
        if not self.walk.hasFocus() and walk is not None and not _same(parse_number(self.walk.text()), walk):
            self.walk.setText(format_value(walk))

    def _bins_edited(self, n: int) -> None:
        with self.state.batch():
            self.state["prior.edges"] = None
            self.state["prior.n_bins"] = int(n)

    def _prior_edited(self) -> None:
        median, scale = parse_number(self.median.text()), parse_number(self.log_sd.text())
        loc = median
        if isinstance(median, (int, float)) and not isinstance(median, bool):
            # a median <= 0 has no log: kept as text, which the config's check names
            loc = math.log(median) if median > 0 else f"median {median!r} must be > 0"
        self.state["prior.band_power"] = {"dist": "lognormal", "loc": loc, "scale": scale}

    def _smooth_toggled(self, on: bool) -> None:
        walk = self.state["prior.random_walk_scale"]
        if not on and isinstance(walk, (int, float)):
            self._last_walk = walk
        self.state["prior.random_walk_scale"] = (parse_number(self.walk.text()) or self._last_walk) if on else None
