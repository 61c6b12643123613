"""Every menu and toolbar action of the main window, declared once: ``ACTIONS``.

Each ``ActionSpec`` names the action (``window.action[name]``), its menu, text, shortcut (a
``QKeySequence.StandardKey`` name such as "Open", or a key string such as "Ctrl+R"), the
window method that handles it, whether it sits in the toolbar, and when it is enabled: a
predicate of a ``WindowStatus``, a plain snapshot of the window (no Qt) that the window
makes with ``MainWindow.status()`` and applies to every action at once. ``None``: always
enabled (the handler says why when it cannot act, e.g. "Stop the run before ...").

Menus that change with the session (File > Open recent, File > Export, View) are filled by
the window; File > Demos is one row per demo (``args``). File > Runs… opens the run browser
(``app.run_browser``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from app.state.session import DEMOS

__all__ = ["ActionSpec", "WindowStatus", "ACTIONS", "MENUS", "DYNAMIC_MENUS", "ACTIVE_RUN"]

#: run-controller statuses of a run handed to the engine and not yet stopping
ACTIVE_RUN = ("starting", "running", "paused")


@dataclass(frozen=True)
class WindowStatus:
    """What the actions' enabled state depends on.

    run          the run controller's status: idle | starting | running | paused | stopping
    pause_pending  a pause or resume was asked and the engine has not answered yet
    engine       "none" (a set-up-only window), "starting", "ready" or "stopped"
    config_ok    the config validates
    resumable    the run shown can be continued (stopped or interrupted, with a checkpoint)
    closing      the window is closing
    """

    run: str = "idle"
    pause_pending: bool = False
    engine: str = "none"
    config_ok: bool = True
    resumable: bool = False
    closing: bool = False

    @property
    def idle(self) -> bool:
        return self.run == "idle"

    @property
    def active(self) -> bool:
        return self.run in ACTIVE_RUN


def _can_start(s: WindowStatus) -> bool:
    return s.engine == "ready" and s.idle and s.config_ok and not s.closing


def _can_pause(s: WindowStatus) -> bool:
    return s.run in ("running", "paused") and not s.pause_pending and not s.closing


def _can_stop(s: WindowStatus) -> bool:
    return s.active and not s.closing


def _can_continue(s: WindowStatus) -> bool:
    return s.engine == "ready" and s.idle and s.resumable and not s.closing


def _can_open_run(s: WindowStatus) -> bool:
    return not s.active and s.run != "stopping"


def _can_browse_runs(s: WindowStatus) -> bool:
    return not s.closing


def _can_restart_engine(s: WindowStatus) -> bool:
    return s.engine != "none" and (s.engine == "stopped" or s.idle)


@dataclass(frozen=True)
class ActionSpec:
    name: str
    menu: str
    text: str
    handler: str
    shortcut: str | None = None
    tip: str = ""
    enabled: Callable[[WindowStatus], bool] | None = None
    toolbar: bool = False
    args: tuple = ()
    #: a separator in the menu before this action
    separated: bool = False


#: menu title -> where it sits in the menu bar (the View menu lists the docks)
MENUS = ("&File", "&Run", "&View", "&Help")

#: menus the window fills when they open, each placed after the named action
DYNAMIC_MENUS = {"open_run": "Open &recent", "calibrate": "&Export"}

ACTIONS: tuple[ActionSpec, ...] = (
    ActionSpec("new_from_data", "&File", "&New from data…", "_new_from_data_dialog", "New",
               "a fresh config for a data file, with defaults that fit it"),
    ActionSpec("open_config", "&File", "&Open config…", "_open_config_dialog", "Open"),
    ActionSpec("save_config", "&File", "&Save config", "save_config", "Save",
               "write the TOML file the command line runs"),
    ActionSpec("save_as", "&File", "Save config &as…", "_save_as_dialog", "SaveAs"),
    ActionSpec("open_data", "&File", "Open &data file…", "_open_data_dialog", separated=True),
    ActionSpec("open_run", "&File", "Open &run directory…", "_open_run_dialog",
               tip="show a stored run, or continue a stopped one", enabled=_can_open_run),
    ActionSpec("runs", "&File", "R&uns…", "_runs_dialog",
               tip="the runs found here and recently: their status and R-hat; open one, or compare several",
               enabled=_can_browse_runs),
    *(ActionSpec(f"demo_{i}", "&File/De&mos", text, "_open_demo_action", args=(file,))
      for i, (text, file) in enumerate(DEMOS.items())),
    ActionSpec("calibrate", "&File", "&Calibrate…", "_calibrate_dialog",
               tip="simulation-based calibration of this config", separated=True),
    ActionSpec("quit", "&File", "&Quit", "close", "Quit", separated=True),
    ActionSpec("start", "&Run", "Start", "start_run", "Ctrl+R", "start a new run of this config",
               _can_start, toolbar=True),
    ActionSpec("pause", "&Run", "Pause", "toggle_pause", "Ctrl+P",
               "pause after the current chunk / resume", _can_pause, toolbar=True),
    ActionSpec("stop", "&Run", "Stop", "stop_run", "Ctrl+.",
               "stop after the current chunk; everything so far is kept", _can_stop, toolbar=True),
    ActionSpec("continue", "&Run", "Continue run", "continue_run",
               tip="continue the stopped or interrupted run", enabled=_can_continue, toolbar=True,
               separated=True),
    ActionSpec("restart_engine", "&Run", "Restart engine", "restart_engine",
               tip="start a new engine process", enabled=_can_restart_engine),
    ActionSpec("documentation", "&Help", "&Documentation", "open_documentation", "HelpContents",
               "open the README"),
    ActionSpec("about", "&Help", "&About Fieldscope", "show_about",
               tip="versions of Fieldscope and what it runs on"),
)
