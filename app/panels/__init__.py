"""The setup panels: Data, Grid, Prior, Likelihood, Model file, Sampler (docked beside the live views).

One module per panel (``data``, ``grid``, ``prior``, ``likelihood``, ``model_file``, ``sampler``), on the
``SetupPanel`` base (``base``) and the binding helpers (``binding``).

Each panel is a thin adapter over one ``app.state.config_state.ConfigState``: every widget is
bound to a key (``bind_*``), writes what the user types into the state and follows the
state when it changes elsewhere (a file opened, another panel). Panels hold no settings.
Next to each widget a message label shows what is wrong with that key (the text of
``core.config`` / ``core.io``, which names the key); ``show_errors`` fills them.

Numbers are typed into line edits, not spin boxes: a spin box silently clamps what it
does not accept, where a line edit lets validation say what the key needs.

The Grid panel shows the run's memory and time estimates of ``core.run.resources`` (the
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

from app.panels.base import SetupPanel
from app.panels.data import DataPanel
from app.panels.grid import GridPanel
from app.panels.likelihood import LikelihoodPanel
from app.panels.model_file import ModelFilePanel
from app.panels.prior import PriorPanel
from app.panels.sampler import SamplerPanel
from app.state.config_state import ConfigState

__all__ = ["SetupPanel", "DataPanel", "GridPanel", "PriorPanel", "LikelihoodPanel",
           "ModelFilePanel", "SamplerPanel", "make_panels"]


def make_panels(state: ConfigState) -> list[SetupPanel]:
    """One of each panel, in the order they are docked."""
    return [DataPanel(state), GridPanel(state), PriorPanel(state), LikelihoodPanel(state),
            ModelFilePanel(state), SamplerPanel(state)]
