"""The main window's status bar: a line of messages, then the run's phase, progress, rate,
ETA, divergences and the engine's state.

``RunStatusBar(bar)`` adds its widgets to a ``QStatusBar`` and says what a run is doing:
``started(total)`` when a run starts, ``chunk(event, counts)`` for each engine "chunk" event,
``stored(reader, counts)`` for a run opened from its store (its own status and progress, not
those of a run shown before), ``watching(...)`` while a store another process writes is
followed, ``clear()`` when another config replaces the one whose run was shown (nothing of that
run stays). ``counts`` are (sampling, warmup) divergences, or None.
"""

from __future__ import annotations

import math

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar

from app.run_controller import PHASE_TEXT
from core.store.run_summary import divergence_text

__all__ = ["RunStatusBar", "clock"]

DIVERGENCE_TIP = ("divergent transitions after warmup (they mean the sampler missed part of the "
                  "posterior); in brackets those during warmup, expected while the step size adapts")


def clock(seconds: float) -> str:
    """"mm:ss" or "h:mm:ss"; "--:--" when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "--:--"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60:02d}:{rest % 60:02d}"


class _Line(QLabel):
    """The message line: a long message is cut at the bar's width, so its whole text is the
    tooltip too (a damaged store's message names a chunk file at its end)."""

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        super().setText(text)
        self.setToolTip(text)


class RunStatusBar:
    """See the module docstring; its labels are ``message``, ``phase``, ``progress``, ``rate``,
    ``eta``, ``divergences`` and ``engine``."""

    def __init__(self, bar: QStatusBar):
        self.message = _Line()
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        bar.addWidget(self.message, 1)
        self.phase = QLabel()
        self.progress = QProgressBar()
        self.progress.setFixedWidth(220)
        self.progress.setFormat("%v / %m steps")
        self.progress.setVisible(False)
        self.rate = QLabel()
        self.eta = QLabel()
        self.divergences = QLabel()
        self.divergences.setToolTip(DIVERGENCE_TIP)
        self.engine = QLabel("engine getting ready…")
        for widget in (self.phase, self.progress, self.rate, self.eta, self.divergences, self.engine):
            bar.addPermanentWidget(widget)

    def say(self, text: str, problem: bool = False) -> None:
        self.message.setStyleSheet("color: #d9534f;" if problem else "")
        self.message.setText(text)

    def _steps(self, done: int, total: int) -> None:
        self.progress.setVisible(True)
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(min(done, max(total, 1)))

    def clear(self) -> None:
        """No run shown: phase, progress, rate, ETA and divergences empty."""
        for label in (self.phase, self.rate, self.eta):
            label.setText("")
        self.progress.setVisible(False)
        self.show_divergences(None)

    def started(self, total: int) -> None:
        self.clear()
        self._steps(0, total)

    def chunk(self, event, counts) -> None:
        done = int(event.get("first_step", 0)) + int(event.get("n_steps", 0))
        total = int(event.get("steps_total", self.progress.maximum()))
        self._steps(done, total)
        rate = float(event.get("steps_per_second", 0.0))
        self.rate.setText(f"{rate:.1f} draws/s" if rate > 0 else "")
        self.eta.setText(f"ETA {clock((total - done) / rate if rate > 0 else float('nan'))}")
        self.show_divergences(counts)

    def ended(self, status: str) -> None:
        if status != "finished":
            self.rate.setText("")
        self.eta.setText("")

    def stored(self, reader, counts) -> None:
        """A run opened from its store: its status and progress (a run shown before leaves nothing)."""
        self.clear()
        p, attrs = reader.progress, reader.attrs
        total = int(attrs.get("steps_total") or 0) or int(attrs.get("num_warmup", 0)) + int(attrs.get("num_samples", 0))
        self._steps(int(p.get("warmup_draws", 0)) + int(p.get("draws", 0)), total)
        self.phase.setText(PHASE_TEXT.get(reader.status, reader.status))
        self.show_divergences(counts)

    def watching(self, path, status: str, progress: dict, total: int, counts, idle: float) -> None:
        """A store another process writes, polled ``idle`` seconds after it last grew."""
        self._steps(int(progress.get("warmup_draws", 0)) + int(progress.get("draws", 0)), total)
        self.rate.setText("")
        self.show_divergences(counts)
        quiet = f"  ·  no new chunk for {clock(idle)}" if idle >= 30 else ""
        self.eta.setText(f"watching {path.name if path else ''}{quiet}")
        self.message.setText(f"watching {path}: {status}, {progress.get('warmup_draws', 0)} warmup and "
                             f"{progress.get('draws', 0)} draws per chain (written by another process)")

    def show_divergences(self, counts) -> None:
        """"0 divergences (49 in warmup)"; post-warmup ones in the diagnostics' attention colour
        (warmup ones are expected and never alarm)."""
        if counts is None:
            self.divergences.setText("")
            self.divergences.setStyleSheet("")
            return
        sampling, warmup = counts
        self.divergences.setText(divergence_text(sampling, warmup))
        style = ""
        if sampling:
            try:
                from app.views.diagnostics import ATTENTION_COLOURS
                style = f"background: {ATTENTION_COLOURS['divergences']}; color: white; padding: 0 4px;"
            except Exception:     # the views are broken (their message is shown): plain text
                style = "font-weight: bold;"
        self.divergences.setStyleSheet(style)
