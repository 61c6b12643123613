"""The main window: setup panels docked on the left, live views in the middle, run controls.

Data flow (napari / glue shape)::

    ConfigState  <-->  setup panels (bound widgets, inline messages)
        |  Start: to_toml()
        v
    RunController  <--(signals, GUI thread)--  EngineClient
        |  RunState.on_chunk / on_status          ^
        v                                         |  pause / resume / stop
    LiveViews.refresh() at 10 Hz (a timer,   run controls (toolbar, Run menu)
    never per message)

A run's lifetime (start, pause / resume / stop, continue, watching a store another
process writes, the run-lock checks, the run's status) is ``app.run_controller``'s
``RunController`` (``self.runs``); the window wires its signals to the menus, the status
bar and the views. Run controls are enabled only when they make sense: Start needs a
ready engine, no run in progress and a config that validates; Pause/Resume and Stop need a run. Errors (a bad
file, an impossible setting, an engine failure, a killed engine, closing during a run)
are dialogs or inline messages, never tracebacks, and the window stays usable.

Session memory (``app_settings``, an INI file in $XDG_CONFIG_HOME/fieldscope): File > Recent
(the configs and run directories opened, newest first) and the window's layout (geometry,
docks, toolbar, the views' splitter), saved on close and restored when a window opens; a
setting that cannot be read is ignored.

Run directories: ``<config folder>/runs/<config name>-<YYYYmmdd-HHMMSS>`` (a per-user
folder when the config's folder is not writable); a config not saved yet (File > New from
data) runs in ``$XDG_DATA_HOME/fieldscope/runs/<data stem>-<YYYYmmdd-HHMMSS>``, and the
status bar names the folder when the run starts. The run store keeps the config text,
every draw recorded and a checkpoint; a stopped or interrupted run can be continued
(Run > Continue run) with the same engine a terminal's ``fieldscope resume`` uses.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import os
import stat
import tempfile
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QAction, QDesktopServices, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QToolBar,
    QWidget,
)

from app.engine_client import EngineClient
from app.panels import SetupPanel, make_panels
from app.run_controller import ACTIVE, RunController
from app.state.config_state import ConfigState
from app.views.jobs import LatestJob
from core.config import ConfigError
from core.store.run_store import RunReader, RunStoreError
from core.store.run_summary import divergence_text

__all__ = ["MainWindow", "default_run_dir", "user_data_dir", "app_settings", "settings_path",
           "documentation_url", "versions", "MAX_RECENT"]

VIEW_REFRESH_HZ = 10
#: File > Recent keeps this many configs and run directories
MAX_RECENT = 10
_RECENT_KEY = "recent/paths"
_LAYOUT_KEYS = ("window/geometry", "window/state", "window/views_splitter")
#: where the documentation lives when the source tree's README is not at hand
_README = Path(__file__).resolve().parents[1] / "README.md"


def settings_path() -> Path:
    """Fieldscope's settings file: $XDG_CONFIG_HOME/fieldscope/fieldscope.conf (default
    ~/.config). An explicit file (not Qt's organisation/application lookup), so that a test
    or a second installation points it elsewhere with XDG_CONFIG_HOME alone."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    if not base or not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "fieldscope" / "fieldscope.conf"


def app_settings() -> QSettings:
    """The per-user settings (recent files, window layout), read from :func:`settings_path`."""
    return QSettings(str(settings_path()), QSettings.Format.IniFormat)


def documentation_url() -> QUrl:
    """Help > Documentation: the README of this source tree, else the project's URL from the
    installed package's metadata (empty when neither is known)."""
    if _README.is_file():
        return QUrl.fromLocalFile(str(_README))
    try:
        from importlib.metadata import PackageNotFoundError, metadata

        meta = metadata("fieldscope")
    except (ImportError, PackageNotFoundError):
        return QUrl()
    for entry in meta.get_all("Project-URL") or []:
        url = entry.split(",", 1)[-1].strip()
        if url:
            return QUrl(url)
    home = meta.get("Home-page")
    return QUrl(home) if home else QUrl()


def _package_version(name: str) -> str:
    """An installed distribution's version from its metadata (nothing is imported)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def versions(opengl: str = "not yet initialised") -> dict[str, str]:
    """What Help > About lists. TensorFlow's version is read from its metadata: the GUI
    process never imports TensorFlow (it runs in the engine process)."""
    import platform

    import numpy
    import PySide6
    from PySide6.QtCore import qVersion

    from core import __version__

    return {"Fieldscope": __version__, "TensorFlow": _package_version("tensorflow"),
            "TensorFlow Probability": _package_version("tensorflow-probability"),
            "Qt": qVersion(), "PySide6": PySide6.__version__,
            "Python": platform.python_version(), "numpy": numpy.__version__, "OpenGL": opengl}


def user_data_dir() -> Path:
    """Fieldscope's per-user data folder ($XDG_DATA_HOME/fieldscope, or
    ~/.local/share/fieldscope; a temporary folder when neither is writable)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                           "share")
    path = Path(base) / "fieldscope"
    try:
        path.mkdir(parents=True, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    return _private_temp_dir()


#: rejected shared-temp folder -> the private one made instead (one per process)
_PRIVATE_TEMP: dict[str, Path] = {}


def _is_private_dir(path: Path) -> bool:
    """A real folder (not a symlink) owned by this user with mode 0700."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    owner_ok = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    return stat.S_ISDIR(st.st_mode) and owner_ok and stat.S_IMODE(st.st_mode) == 0o700


def _private_temp_dir() -> Path:
    """``<tmp>/fieldscope-<uid>``, created 0700; if it already exists and is not this user's
    private folder (another user's, a symlink, group/world accessible: someone else could
    plant or read files there), a fresh ``tempfile.mkdtemp(prefix="fieldscope-")`` instead."""
    path = Path(tempfile.gettempdir()) / f"fieldscope-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    try:
        path.mkdir(mode=0o700)
        os.chmod(path, 0o700)      # exactly 0700 whatever the umask (lstat'ed just below)
    except OSError:
        pass                       # there already (checked below), or not creatable
    if _is_private_dir(path):
        return path
    made = _PRIVATE_TEMP.get(str(path))
    if made is None or not _is_private_dir(made):
        made = _PRIVATE_TEMP[str(path)] = Path(tempfile.mkdtemp(prefix="fieldscope-"))
    return made


#: the built-in demos (File > Demos): menu text -> config file in the demo folder
DEMOS = {"Field, P(k) index sampled": "field.toml",
         "Field, P(k) fixed (exact answer known)": "field_exact.toml",
         "Integral model (1-D series)": "integral.toml"}


def demo_path(name: str) -> Path:
    """A file of the built-in demo (``core.demo.write_demo``), written into the per-user
    data folder on first use (and again when one of its files is missing)."""
    from core.demo import write_demo

    folder = user_data_dir() / "demo"
    wanted = ("demo_field.npz", "series.csv", *DEMOS.values())
    if not all((folder / f).exists() for f in wanted):
        write_demo(folder)
    return folder / name


def default_run_dir(state: ConfigState, now: _dt.datetime | None = None) -> Path:
    """A new run directory for ``state``: <config folder>/runs/<config name>-<timestamp>; for a
    config not saved to a file, <per-user data folder>/runs/<data file's stem>-<timestamp>
    (never a folder next to data the user did not ask to write into)."""
    now = now or _dt.datetime.now()
    stamp = now.strftime("%Y%m%d-%H%M%S")
    if state.path is not None:
        name, base = state.path.stem, state.base_dir / "runs"
    else:
        data = state["data.path"]
        name = Path(data).stem if isinstance(data, str) and Path(data).stem else "untitled"
        base = user_data_dir() / "runs"
    try:
        base.mkdir(parents=True, exist_ok=True)
        writable = os.access(base, os.W_OK)
    except OSError:
        writable = False
    if not writable:
        base = user_data_dir() / "runs"
        base.mkdir(parents=True, exist_ok=True)
    run_dir = base / f"{name}-{stamp}"
    n = 2
    while run_dir.exists():
        run_dir = base / f"{name}-{stamp}-{n}"
        n += 1
    return run_dir


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "--:--"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60:02d}:{rest % 60:02d}"


class MainWindow(QMainWindow):
    """Fieldscope's window. ``engine``: "spawn" (default: start an engine process when
    the window opens), an ``EngineClient`` to use, or None (set-up only, e.g. tests)."""

    run_started = Signal(str)       # the run directory
    run_finished = Signal(str)      # the final status
    closed = Signal()               # the window closed and its engine exited
    new_config_done = Signal(bool)  # File > New from data: the config is in the panels (or not)

    def __init__(self, state: ConfigState | None = None, *, engine="spawn", remember_layout: bool = True,
                 parent=None):
        super().__init__(parent)
        #: restore the remembered layout on opening and save it on closing (off for screenshots,
        #: which must look the same on every machine and must not change the user's layout)
        self.remember_layout = remember_layout
        self.state = state if state is not None else ConfigState()
        self.errors: dict[str, str] = {}
        self.last_message: tuple[str, str] | None = None   # (title, text) of the last dialog
        self.auto_start = False           # press Start as soon as it is enabled (--run)
        self.confirm_close = True
        self._closing = False
        self._close_ok = False
        self._divergences = {"warmup": 0, "sampling": 0}   # this session's, without a RunState
        self._dialogs: list[QMessageBox] = []
        self.box_dialog = None            # File > New from data's box-size question, when asked
        # File > New from data reads the file and fits P(k) off the GUI thread
        self._from_data = LatestJob(self, name="fieldscope-new-from-data")
        self._from_data.finished.connect(self._config_for_data_made)
        self.destroyed.connect(lambda *_, job=self._from_data: job.close())
        self._close_question: QMessageBox | None = None

        self.setWindowTitle("Fieldscope")
        self.resize(1500, 950)
        self._make_views()
        self.runs = RunController(self.run_state, self)
        self._make_panels()
        self._make_actions()
        self._make_status_bar()

        self.view_timer = QTimer(self)
        self.view_timer.setInterval(int(1000 / VIEW_REFRESH_HZ))
        self.view_timer.timeout.connect(self.refresh_views)
        self._connect_runs()

        self.state.connect_any(self._on_state_changed)
        self.panel["data"].data_loaded.connect(self._on_data_loaded)
        self._on_data_loaded(self.panel["data"].data_preview)
        self.validate()
        self._update_title()
        self.runs.set_client(EngineClient(self) if engine == "spawn" else engine)
        self._update_actions()
        if self.remember_layout:
            self.restore_layout()

    @property
    def client(self) -> EngineClient | None:
        """The engine client (``self.runs`` owns it); None for a set-up-only window."""
        return self.runs.client

    @property
    def run_dir(self) -> Path | None:
        """The run directory shown (``self.runs`` owns it)."""
        return self.runs.run_dir

    # -- building --------------------------------------------------------------------------

    def _make_views(self) -> None:
        """The live views of the other half of the app, imported defensively: a missing or
        broken views package leaves a message in the middle, and the rest works."""
        self.run_state = None
        self.views = None
        problem = ""
        try:
            from app.state.run_state import RunState

            self.run_state = RunState()
        except Exception as exc:   # any failure of an optional module must not stop the app
            problem = f"app.state.run_state: {type(exc).__name__}: {exc}"
        if self.run_state is not None:
            try:
                from app.views.live import LiveViews

                self.views = LiveViews(self.run_state)
            except Exception as exc:
                problem = f"app.views: {type(exc).__name__}: {exc}"
        if self.views is None:
            label = QLabel(f"Live views are not available ({problem}).\n"
                           "Runs still start, stop and are stored.")
            label.setAlignment(Qt.AlignmentFlag.AlignCenter)
            label.setWordWrap(True)
            self.setCentralWidget(label)
        else:
            self.setCentralWidget(self.views)

    def _make_panels(self) -> None:
        self.panels: list[SetupPanel] = make_panels(self.state)
        self.docks: list[QDockWidget] = []
        for panel in self.panels:
            dock = QDockWidget(panel.title, self)
            dock.setObjectName(f"dock_{panel.title.lower()}")
            dock.setWidget(panel)
            dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                             | QDockWidget.DockWidgetFeature.DockWidgetFloatable)
            dock.setMinimumWidth(380)
            self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, dock)
            self.docks.append(dock)
        for dock in self.docks[1:]:
            self.tabifyDockWidget(self.docks[0], dock)
        self.docks[0].raise_()
        self.panel = {p.title.lower(): p for p in self.panels}

    def _action(self, text, slot, shortcut=None, tip="") -> QAction:
        action = QAction(text, self)
        action.triggered.connect(lambda _checked=False: slot())   # not the "checked" flag
        if shortcut:
            action.setShortcut(QKeySequence(shortcut))
        if tip:
            action.setStatusTip(tip)
            action.setToolTip(tip)
        return action

    def _make_actions(self) -> None:
        self.new_from_data_action = self._action(
            "&New from data…", self._new_from_data_dialog, QKeySequence.StandardKey.New,
            "a fresh config for a data file, with defaults that fit it")
        self.open_config_action = self._action("&Open config…", self._open_config_dialog,
                                               QKeySequence.StandardKey.Open)
        self.save_config_action = self._action("&Save config", self.save_config,
                                               QKeySequence.StandardKey.Save,
                                               "write the TOML file the command line runs")
        self.save_as_action = self._action("Save config &as…", self._save_as_dialog,
                                           QKeySequence.StandardKey.SaveAs)
        self.open_data_action = self._action("Open &data file…",
                                             lambda: self.panel["data"]._browse())
        self.open_run_action = self._action("Open &run directory…", self._open_run_dialog,
                                            tip="show a stored run, or continue a stopped one")
        self.calibrate_action = self._action("&Calibrate…", self._calibrate_dialog,
                                             tip="simulation-based calibration of this config")
        self.quit_action = self._action("&Quit", self.close, QKeySequence.StandardKey.Quit)
        file_menu = self.menuBar().addMenu("&File")
        for action in (self.new_from_data_action, self.open_config_action, self.save_config_action, self.save_as_action):
            file_menu.addAction(action)
        file_menu.addSeparator()
        file_menu.addAction(self.open_data_action)
        file_menu.addAction(self.open_run_action)
        self.recent_menu = file_menu.addMenu("Open &recent")
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)
        self._fill_recent_menu()
        demos = file_menu.addMenu("De&mos")
        for text, name in DEMOS.items():
            action = demos.addAction(text)
            action.triggered.connect(lambda _c=False, n=name: self.open_demo(n))
        file_menu.addSeparator()
        file_menu.addAction(self.calibrate_action)
        self.export_menu = file_menu.addMenu("&Export")
        self.export_menu.aboutToShow.connect(self._fill_export_menu)
        self._fill_export_menu()
        file_menu.addSeparator()
        file_menu.addAction(self.quit_action)

        self.start_action = self._action("Start", self.start_run, "Ctrl+R",
                                         "start a new run of this config")
        self.pause_action = self._action("Pause", self.toggle_pause, "Ctrl+P",
                                         "pause after the current chunk / resume")
        self.stop_action = self._action("Stop", self.stop_run, "Ctrl+.",
                                        "stop after the current chunk; everything so far is kept")
        self.continue_action = self._action("Continue run", self.continue_run, None,
                                            "continue the stopped or interrupted run")
        self.restart_engine_action = self._action("Restart engine", self.restart_engine, None,
                                                  "start a new engine process")
        run_menu = self.menuBar().addMenu("&Run")
        for action in (self.start_action, self.pause_action, self.stop_action):
            run_menu.addAction(action)
        run_menu.addSeparator()
        run_menu.addAction(self.continue_action)
        run_menu.addAction(self.restart_engine_action)

        view_menu = self.menuBar().addMenu("&View")
        for dock in self.docks:
            view_menu.addAction(dock.toggleViewAction())

        self.about_action = self._action("&About Fieldscope", self.show_about,
                                         tip="versions of Fieldscope and what it runs on")
        self.documentation_action = self._action("&Documentation", self.open_documentation,
                                                 QKeySequence.StandardKey.HelpContents,
                                                 "open the README")
        help_menu = self.menuBar().addMenu("&Help")
        help_menu.addAction(self.documentation_action)
        help_menu.addAction(self.about_action)

        toolbar = QToolBar("Run")
        toolbar.setObjectName("run_toolbar")
        toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        for action in (self.start_action, self.pause_action, self.stop_action,
                       self.continue_action):
            toolbar.addAction(action)
        self.addToolBar(Qt.ToolBarArea.TopToolBarArea, toolbar)
        self.toolbar = toolbar

    def _make_status_bar(self) -> None:
        bar = self.statusBar()
        self.message_label = QLabel()
        self.message_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        bar.addWidget(self.message_label, 1)
        self.phase_label = QLabel()
        self.progress = QProgressBar()
        self.progress.setFixedWidth(220)
        self.progress.setFormat("%v / %m steps")
        self.progress.setVisible(False)
        self.rate_label = QLabel()
        self.eta_label = QLabel()
        self.divergence_label = QLabel()
        self.divergence_label.setToolTip(
            "divergent transitions after warmup (they mean the sampler missed part of the "
            "posterior); in brackets those during warmup, expected while the step size adapts")
        self.engine_label = QLabel("engine getting ready…")
        for widget in (self.phase_label, self.progress, self.rate_label, self.eta_label,
                       self.divergence_label, self.engine_label):
            bar.addPermanentWidget(widget)

    # -- config --------------------------------------------------------------------------------

    def _on_state_changed(self, _keys) -> None:
        self.validate()
        self._update_title()
        st = self.run_state
        if st is not None and st.is_preview and st.set_preview_config(*self._preview_config()):
            self.refresh_views()

    # -- the data before any run ------------------------------------------------------------------

    def _preview_config(self) -> tuple[str, str]:
        """(config text, folder) the data preview's views read (the grid, the prior); empty
        text while the config is not valid."""
        try:
            return self.state.to_toml(), str(self.state.base_dir)
        except ConfigError:
            return "", str(self.state.base_dir)

    def _on_data_loaded(self, preview) -> None:
        """The Data panel read the data (a ``DataPreview``, or None): the views show it
        unless a run is going, or a run of these same data is shown."""
        st = self.run_state
        if st is None or self.runs.status != "idle":
            return
        if not st.is_preview and st.chains is not None and self._shows_run_of_config():
            return
        if preview is None and not st.is_preview:
            return
        st.show_preview(preview, *self._preview_config())
        self.refresh_views()

    def _shows_run_of_config(self) -> bool:
        """Whether the run shown reads the data the config names (the same file, array, mask
        and noise: a run opened from its store loads its own config first)."""
        run_cfg = self.run_state.config
        try:
            cfg = self.state.config()
        except ConfigError:
            return False
        if run_cfg is None or run_cfg.data is None or cfg.data is None:
            return False
        def where(c):
            return (str(Path(c.data_path).resolve()), c.data.key, c.data.mask, c.data.noise_map,
                    c.data.noise_sigma)
        return where(run_cfg) == where(cfg)

    def validate(self) -> dict[str, str]:
        """Check the config, show each message beside its widget, and enable Start."""
        self.errors = self.state.validate()
        shown = set()
        for panel in self.panels:
            panel.show_errors(self.errors)
            shown |= {k for k in self.errors if k in panel.messages}
        if self.errors:
            first_key = next(iter(self.errors))
            rest = len(self.errors) - 1
            text = self.errors[first_key] + (f"  (+{rest} more)" if rest else "")
            self.message_label.setText(("⚠ " if first_key in shown else "⚠ config: ") + text)
            self.message_label.setStyleSheet("color: #d9534f;")
        else:
            self.message_label.setStyleSheet("")
            if self.runs.status == "idle":
                self.message_label.setText("config OK" + (
                    "" if self.client is None or self.client.is_ready else
                    "; Start is enabled once the engine is ready"))
        self._update_actions()
        return self.errors

    def _update_title(self) -> None:
        name = self.state.path.name if self.state.path is not None else "untitled"
        self.setWindowTitle(f"Fieldscope — {name}{' *' if self.state.modified else ''}")

    def open_config(self, path) -> bool:
        """Load a config file into the panels. A file that is not TOML gives a dialog; a
        TOML file with bad values is loaded and its problems shown beside the widgets."""
        try:
            self.state.load_file(path)
        except ConfigError as exc:
            self.show_message("Cannot open the config", str(exc))
            return False
        self.state.notify_all()
        if self.state.ignored:
            self.show_message("Config opened with unknown settings",
                              f"{path}: these settings are not part of a Fieldscope config "
                              f"and were left out: {', '.join(self.state.ignored)}",
                              QMessageBox.Icon.Information)
        self._update_title()
        self.add_recent(path)
        return True

    def open_demo(self, name: str) -> bool:
        """Open one of the built-in demo configs (``DEMOS``)."""
        if self.runs.status != "idle":
            self.show_message("A run is in progress", "Stop the run before opening a demo.")
            return False
        try:
            path = demo_path(name)
        except OSError as exc:
            self.show_message("Cannot write the demo", f"the demo files could not be written: {exc}")
            return False
        return self.open_config(path)

    # -- File > New from data ------------------------------------------------------------------

    def _new_from_data_dialog(self) -> None:
        from core.config import FIELD_DATA_EXTENSIONS

        data = self.state["data.path"]
        start = str(self.state.resolve(data).parent) if isinstance(data, str) and data \
            else str(self.state.base_dir)
        patterns = " ".join(f"*{ext}" for ext in FIELD_DATA_EXTENSIONS)
        path, _ = QFileDialog.getOpenFileName(self, "New from data", start,
                                              f"Gridded data ({patterns});;All files (*)")
        if path:
            self.new_from_data(path)

    def new_from_data(self, path, key=None) -> bool:
        """A fresh config for the data file ``path`` (``core.config.from_data``), not saved
        (File > Save config as… offers ``<data stem>.toml`` next to the data).

        Reading the file and fitting P(k) take seconds for a large grid (12 s at 256^3 on
        two busy cores), so they run on a worker thread (``self._from_data``) while the
        window stays live; ``new_config_done(ok)`` follows. When the file states no box
        size, ``self.box_dialog`` asks for it (non-blocking) and the config follows its OK.
        False when nothing was started (a run is in progress); a file that cannot be used
        is a dialog saying why, then ``new_config_done(False)``."""
        if self.runs.status in ACTIVE:
            self.show_message("A run is in progress", "Stop the run before making a new config.")
            return False
        path = Path(path).expanduser().absolute()
        self._make_config_for_data(path, key)
        return True

    def _make_config_for_data(self, path: Path, key, box=None, unit: str = "") -> None:
        from core.config.from_data import config_for_data

        self.message_label.setStyleSheet("")
        self.message_label.setText(f"reading {path.name} and fitting P(k) to it…")
        kwargs = {} if box is None else {"box_size": box, "unit": unit}
        self._from_data.request((path, key, box is None), functools.partial(config_for_data, **kwargs),
                                path, key)

    def _config_for_data_made(self, request, result, error) -> None:
        from app.new_from_data import BoxSizeDialog
        from core.io import LoadError

        path, key, first = request
        if error is not None:
            if not isinstance(error, (LoadError, ConfigError, OSError)):
                error = f"{type(error).__name__}: {error}"
            self.message_label.setText("")
            self.show_message("Cannot make a config from the data", str(error))
            self.new_config_done.emit(False)
            return
        if result.box_size is not None or not first:
            self.new_config_done.emit(self._use_new_config(path, result))
            return
        self.message_label.setText(f"{path.name}: what box size does the grid cover?")
        dialog = self.box_dialog = BoxSizeDialog(path.name, self._shape_of(path, result), self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.chosen.connect(lambda box, unit: self._make_config_for_data(path, key, box, unit))
        dialog.rejected.connect(lambda: self.new_config_done.emit(False))
        dialog.open()
        self._dialogs = [d for d in self._dialogs if _alive(d)] + [dialog]

    @staticmethod
    def _shape_of(path: Path, result) -> tuple:
        from core.io import LoadError, array_info

        try:
            return tuple(array_info(path, result.document["data"]["key"]).shape)
        except LoadError:      # read a moment ago; gone now: the dialog just omits the shape
            return ()

    def _use_new_config(self, path: Path, result) -> bool:
        try:
            self.state.load_text(result.text(), base_dir=path.parent)
        except ConfigError as exc:
            self.show_message("Cannot make a config from the data", str(exc))
            return False
        self.state.notify_all()
        self._update_title()
        self.message_label.setStyleSheet("")
        self.message_label.setText(f"new config for {path.name}, not saved (File > Save config "
                                   f"as… writes {path.stem}.toml next to the data)")
        self.show_message(f"New config for {path.name}",
                          "Made from the data file:\n\n" + "\n".join(f"• {n}" for n in result.notes),
                          QMessageBox.Icon.Information)
        return True

    def _open_config_dialog(self) -> None:
        start = str(self.state.path.parent if self.state.path else self.state.base_dir)
        path, _ = QFileDialog.getOpenFileName(self, "Open config", start,
                                              "Fieldscope config (*.toml);;All files (*)")
        if path:
            self.open_config(path)

    def _calibrate_dialog(self) -> None:
        """File > Calibrate…: save the config, ask how many simulations, and open a Calibration
        window on ``<config stem>-calibration`` next to it (``app.views.calibration``: a
        ``fieldscope calibrate`` process it watches; the same folder resumes a stopped one)."""
        if (self.state.path is None or self.state.modified()) and not self.save_config():
            return
        from PySide6.QtWidgets import QInputDialog

        from app.views.calibration import CalibrationWindow, calibrate_command

        n, ok = QInputDialog.getInt(self, "Calibrate", "Simulations (each a data set simulated from the prior "
                                    "and sampled with this config):", 100, 1, 100000)
        if not ok:
            return
        out = self.state.path.parent / f"{self.state.path.stem}-calibration"
        self.calibration_window = CalibrationWindow(out, calibrate_command(self.state.path, n, out))
        self.calibration_window.resize(1000, 750)
        self.calibration_window.show()

    def save_config(self, path=None) -> bool:
        """Save (to ``path``, or the config's own file); refuses an invalid config."""
        target = path or self.state.path
        if target is None:
            return self._save_as_dialog()
        try:
            self.state.save(target)
        except ConfigError as exc:
            self.validate()
            self.show_message("Config not saved", f"The config was not saved: {exc}")
            return False
        except OSError as exc:
            self.show_message("Config not saved", f"{target}: {exc.strerror or exc}")
            return False
        self._update_title()
        self.message_label.setText(f"saved {self.state.path}")
        self.add_recent(self.state.path)
        return True

    def save_as_default(self) -> Path:
        """Where File > Save config as… starts: the config's own file; for a config not saved
        yet (File > New from data), ``<data stem>.toml`` next to its data file."""
        data = self.state["data.path"]
        if self.state.path is None and isinstance(data, str) and data:
            target = self.state.resolve(data)
            return target.with_name(f"{target.stem}.toml")
        return self.state.path or self.state.base_dir / "config.toml"

    def _save_as_dialog(self) -> bool:
        start = str(self.save_as_default())
        path, _ = QFileDialog.getSaveFileName(self, "Save config", start,
                                              "Fieldscope config (*.toml)")
        return self.save_config(path) if path else False

    # -- export ---------------------------------------------------------------------------------

    def _fill_export_menu(self) -> None:
        menu = self.export_menu
        menu.clear()
        names = []
        if self.views is not None:
            names = self.views.tab_names("left") + self.views.tab_names("right")
        for name in names + ["Whole window"]:
            action = menu.addAction(f"{name} as PNG…")
            action.triggered.connect(lambda _c=False, n=name: self._export_png_dialog(n))
        menu.addSeparator()
        for name in names:
            contents = self.views.view(name).csv_contents
            if contents is not None:
                action = menu.addAction(f"{contents} as CSV…")
                action.triggered.connect(lambda _c=False, n=name: self._export_csv_dialog(n))

    def _export_start(self, suffix: str, name: str) -> str:
        base = self.run_dir if self.run_dir is not None else self.state.base_dir
        slug = name.lower().replace(" ", "_").replace("(", "").replace(")", "")
        return str(Path(base) / f"{slug}.{suffix}")

    def _export_png_dialog(self, name: str) -> None:
        path, _ = QFileDialog.getSaveFileName(self, f"Export {name} as PNG",
                                              self._export_start("png", name), "PNG image (*.png)")
        if path:
            self.export_png(name, path)

    def _export_csv_dialog(self, name: str) -> None:
        path, _ = QFileDialog.getSaveFileName(self, f"Export {name} as CSV",
                                              self._export_start("csv", name), "CSV (*.csv)")
        if path:
            self.export_csv(name, path)

    def export_png(self, name: str, path) -> bool:
        """Save the view called ``name`` (a tab name, or "Whole window") as a PNG image;
        the view is brought to the front first, so what is saved is what is seen."""
        try:
            if name == "Whole window":
                ok = self.grab().save(str(path), "PNG")
            else:
                if self.views is None:
                    raise ValueError("the live views are not available")
                view = self.views.show_tab(name)
                self.views.refresh(force=True)
                from PySide6.QtWidgets import QApplication

                QApplication.processEvents()
                view.export_png(path)
                ok = Path(path).exists()
            if not ok:
                raise OSError(f"the image could not be written to {path}")
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            self.show_message("Export failed", f"{name} was not saved: {exc}")
            return False
        self.message_label.setText(f"saved {name} to {path}")
        return True

    def export_csv(self, name: str, path) -> bool:
        """Save the table of the view called ``name`` as CSV: the diagnostics table
        ("Diagnostics", as ``fieldscope summary --csv`` writes it) or the P(k) curves
        ("P(k)"); a view without a table (``csv_contents`` None) refuses with a message."""
        try:
            if self.views is None:
                raise ValueError("the live views are not available")
            self.views.view(name).export_csv(path)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            self.show_message("Export failed", f"{name} was not saved: {exc}")
            return False
        self.message_label.setText(f"saved {name} to {path}")
        return True

    # -- the run controller's signals -------------------------------------------------------------

    def _connect_runs(self) -> None:
        runs = self.runs
        runs.engine_ready.connect(self._on_ready)
        runs.changed.connect(self._update_actions)
        runs.phase_text.connect(self.phase_label.setText)
        runs.device.connect(self._show_device)
        runs.message.connect(self.message_label.setText)
        runs.problem.connect(self.show_message)
        runs.run_started.connect(self._on_run_started)
        runs.chunk.connect(self._on_chunk)
        runs.run_error.connect(self._on_error)
        runs.run_ended.connect(self._on_run_ended)
        runs.run_done.connect(self._on_done)
        runs.engine_died.connect(self._on_engine_died)
        runs.engine_closed.connect(self._on_client_closed)
        runs.store_changed.connect(self.refresh_views)
        runs.watch_progress.connect(self._show_watch_progress)

    # -- engine -------------------------------------------------------------------------------

    def _on_ready(self) -> None:
        seconds = self.client.ready_seconds if self.client is not None else None
        self.engine_label.setText("engine ready" + (f" ({seconds:.1f} s)" if seconds else ""))
        self.validate()
        if self.auto_start and self.start_action.isEnabled():
            self.auto_start = False
            self.start_run()

    def _show_device(self, device: str) -> None:
        """The engine's compute device next to its state ("engine ready · CPU (2 threads)")."""
        text = self.engine_label.text().split(" · ")[0]
        self.engine_label.setText(f"{text} · {device}")
        self.engine_label.setToolTip(f"the sampler computes on {device}")

    def restart_engine(self) -> None:
        if self.runs.restart_engine():
            self.engine_label.setText("engine getting ready…")
        self._update_actions()

    def _on_engine_died(self, message: str, running: bool) -> None:
        self.engine_label.setText("engine stopped")
        if self._closing:
            return
        where = (f" Everything up to the last completed chunk is kept in {self.run_dir}; "
                 "after restarting the engine, Run > Continue run resumes it."
                 if running and self.run_dir else "")
        box = self.show_message("The engine stopped",
                                f"The engine process ended unexpectedly ({message}).{where}",
                                buttons=QMessageBox.StandardButton.Close)
        restart = box.addButton("Restart engine", QMessageBox.ButtonRole.AcceptRole)
        restart.clicked.connect(self.restart_engine)
        self._update_actions()

    def _on_client_closed(self) -> None:
        if self._closing:
            self._close_ok = True
            self.close()

    # -- runs ------------------------------------------------------------------------------------

    def can_start(self) -> bool:
        return self.runs.can_start and not self.errors and not self._closing

    def start_run(self, run_dir=None) -> bool:
        """Start a new run of the current config (in ``run_dir`` or a new default one)."""
        if not self.can_start():
            return False
        try:
            text = self.state.to_toml()
        except ConfigError as exc:
            self.show_message("Cannot start", str(exc))
            return False
        try:
            run_dir = Path(run_dir) if run_dir is not None else default_run_dir(self.state)
        except OSError as exc:
            self.show_message("Cannot start", f"no folder for the run: {exc}")
            return False
        meta = None
        try:
            meta = self._run_meta(run_dir)
        except Exception as exc:    # a views problem must not stop the run
            self.message_label.setText(f"live views: {exc}")
        return self.runs.launch(text, self.state.base_dir, run_dir, resume=False, meta=meta)

    def _on_run_started(self, run_dir: str) -> None:
        self._divergences = {"warmup": 0, "sampling": 0}
        self._show_divergences(None)
        self.progress.setVisible(True)
        self.progress.setRange(0, max(1, self._steps_total()))
        self.progress.setValue(0)
        self.rate_label.setText("")
        self.eta_label.setText("")
        self.message_label.setStyleSheet("")
        self.message_label.setText(f"run: {run_dir}" + (
            "  (config not saved: the run keeps its text; File > Save config as… writes it "
            "next to the data)" if self.state.path is None else ""))
        self.view_timer.start()
        self._update_actions()
        self.run_started.emit(run_dir)

    def _steps_total(self) -> int:
        w, n = self.state["sampler.num_warmup"], self.state["sampler.num_samples"]
        return int(w) + int(n) if isinstance(w, int) and isinstance(n, int) else 0

    def _run_meta(self, run_dir) -> dict:
        s = self.state
        meta = {**self.run_state.preview_meta(),
                "chains": s["sampler.chains"], "num_warmup": s["sampler.num_warmup"],
                "num_samples": s["sampler.num_samples"], "thin": s["sampler.thin"],
                "steps_total": self._steps_total(), "model_kind": s["model.kind"],
                "run_dir": str(run_dir), "status": "created"}
        try:
            meta["config_text"] = s.to_toml()
            meta["config_dir"] = str(s.base_dir)
        except ConfigError:
            pass
        if s["model.kind"] == "field":
            meta["grid_shape"] = s.data_shape()
        return meta

    def toggle_pause(self) -> None:
        self.runs.toggle_pause()

    def stop_run(self) -> None:
        self.runs.stop()

    def continue_run(self) -> bool:
        """Resume the current run directory with its stored config (as ``fieldscope
        resume`` does)."""
        return self.runs.continue_run()

    def open_run_dir(self, path) -> bool:
        """Show a stored run (its config in the panels, its draws in the views)."""
        try:
            reader = RunReader(path)
        except RunStoreError as exc:
            self.show_message("Cannot open the run", str(exc))
            return False
        stored = reader.stored_config
        try:
            self.state.load_text(stored.text, base_dir=stored.base_dir, source=stored.source)
        except ConfigError as exc:
            self.show_message("The run's config cannot be read", str(exc))
        self.state.notify_all()
        self.message_label.setStyleSheet("")
        self.runs.show_store(reader)
        st = self.run_state
        self._show_divergences((st.sampling_divergences, st.warmup_divergences)
                               if st is not None and st.n_steps else None)
        self._update_actions()
        self.add_recent(path)
        return True

    def _show_watch_progress(self, idle: float = 0.0) -> None:
        st = self.run_state
        watching = self.runs.watching
        p = st.progress if st is not None else {}
        done = int(p.get("warmup_draws", 0)) + int(p.get("draws", 0))
        total = st.steps_total if st is not None else 0
        self.progress.setVisible(True)
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(min(done, max(total, 1)))
        self.rate_label.setText("")
        self._show_divergences((st.sampling_divergences, st.warmup_divergences)
                               if st is not None and st.n_steps else None)
        quiet = f"  ·  no new chunk for {_clock(idle)}" if idle >= 30 else ""
        self.eta_label.setText(f"watching {watching.name if watching else ''}{quiet}")
        self.message_label.setText(
            f"watching {watching}: {st.status if st else ''}, "
            f"{p.get('warmup_draws', 0)} warmup and {p.get('draws', 0)} draws per chain "
            "(written by another process)")

    def _open_run_dialog(self) -> None:
        start = str(self.state.base_dir / "runs")
        path = QFileDialog.getExistingDirectory(self, "Open run directory", start)
        if path:
            self.open_run_dir(path)

    # -- engine events ----------------------------------------------------------------------------

    def _on_chunk(self, event) -> None:
        done = int(event.get("first_step", 0)) + int(event.get("n_steps", 0))
        total = int(event.get("steps_total", self.progress.maximum()))
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)
        rate = float(event.get("steps_per_second", 0.0))
        for key, count in (event.get("divergences") or {}).items():
            if key in self._divergences:
                self._divergences[key] += int(count)
        self.rate_label.setText(f"{rate:.1f} draws/s" if rate > 0 else "")
        eta = (total - done) / rate if rate > 0 else float("nan")
        self.eta_label.setText(f"ETA {_clock(eta)}")
        st = self.run_state
        # the run state holds the whole run (a continued one too: it was read from the store)
        self._show_divergences((st.sampling_divergences, st.warmup_divergences) if st is not None
                               else (self._divergences["sampling"], self._divergences["warmup"]))

    def _show_divergences(self, counts) -> None:
        """The status bar's divergences: "0 divergences (49 in warmup)"; post-warmup ones in
        the diagnostics' attention colour (warmup ones are expected and never alarm)."""
        if counts is None:
            self.divergence_label.setText("")
            self.divergence_label.setStyleSheet("")
            return
        sampling, warmup = counts
        self.divergence_label.setText(divergence_text(sampling, warmup))
        style = ""
        if sampling:
            try:
                from app.views.diagnostics import ATTENTION_COLOURS
                style = f"background: {ATTENTION_COLOURS['divergences']}; color: white; padding: 0 4px;"
            except Exception:     # the views are broken (their message is shown): plain text
                style = "font-weight: bold;"
        self.divergence_label.setStyleSheet(style)

    def _on_error(self, message: str) -> None:
        if self._closing:
            return
        where = f" (run directory {self.run_dir})" if self.run_dir else ""
        self.show_message("The run failed", f"{message}{where}")

    def _on_done(self, status: str) -> None:
        texts = {"finished": "finished", "stopped": "stopped; Run > Continue run resumes it",
                 "failed": "failed"}
        self.message_label.setStyleSheet("")
        self.message_label.setText(f"run {texts.get(status, status)}: {self.run_dir}")
        self.run_finished.emit(status)

    def _on_run_ended(self, status: str) -> None:
        self.view_timer.stop()
        self.refresh_views()
        self.rate_label.setText(self.rate_label.text() if status == "finished" else "")
        self.eta_label.setText("")
        self._update_actions()

    def refresh_views(self) -> None:
        if self.views is not None:
            try:
                self.views.refresh()
            except Exception as exc:   # a drawing bug must not stop the run or the app
                self.message_label.setText(f"live views: {type(exc).__name__}: {exc}")

    # -- actions ---------------------------------------------------------------------------------

    def _update_actions(self) -> None:
        if not hasattr(self, "start_action"):
            return
        status = self.runs.status
        active = status in ACTIVE
        engine = self.client is not None and self.client.is_ready
        self.start_action.setEnabled(self.can_start())
        if self.client is None:
            tip = "no engine"
        elif not engine:
            tip = "the engine is getting ready" if self.client.is_running else \
                "the engine stopped: Run > Restart engine"
        elif self.errors:
            tip = "fix the config first: " + next(iter(self.errors.values()))
        elif status != "idle":
            tip = "a run is in progress"
        else:
            tip = "start a new run of this config"
        self.start_action.setToolTip(tip)
        self.start_action.setStatusTip(tip)
        self.pause_action.setText("Resume" if status == "paused" else "Pause")
        self.pause_action.setEnabled(status in ("running", "paused")
                                     and not self.runs.pause_pending)
        self.stop_action.setEnabled(active)
        self.continue_action.setEnabled(engine and status == "idle"
                                        and self.runs.resumable_run() is not None)
        self.open_run_action.setEnabled(not active and status != "stopping")
        self.restart_engine_action.setEnabled(self.client is not None
                                              and (not self.client.is_running
                                                   or status == "idle"))
        if self.client is not None and not self.client.is_running and not self._closing:
            self.engine_label.setText("engine stopped")

    # -- File > Recent ---------------------------------------------------------------------------

    def recent_paths(self) -> list[Path]:
        """The configs and run directories opened, newest first (at most ``MAX_RECENT``); a
        stored value that is not a list of paths counts as empty."""
        value = app_settings().value(_RECENT_KEY, [])
        if isinstance(value, str):          # QSettings gives a one-element list back as a str
            value = [value]
        if not isinstance(value, (list, tuple)):
            return []
        paths = []
        for item in value:
            if isinstance(item, str) and item and Path(item) not in paths:
                paths.append(Path(item))
        return paths[:MAX_RECENT]

    def add_recent(self, path) -> None:
        """Put ``path`` (a config file or a run directory) first in File > Recent."""
        try:
            path = Path(path).expanduser().resolve()
        except (OSError, RuntimeError, TypeError):
            return
        paths = [path] + [p for p in self.recent_paths() if p != path]
        settings = app_settings()
        settings.setValue(_RECENT_KEY, [str(p) for p in paths[:MAX_RECENT]])
        settings.sync()
        self._fill_recent_menu()

    def clear_recent(self) -> None:
        settings = app_settings()
        settings.remove(_RECENT_KEY)
        settings.sync()
        self._fill_recent_menu()

    def _fill_recent_menu(self) -> None:
        """One entry per recent path; a path that no longer exists is shown disabled."""
        menu = self.recent_menu
        menu.clear()
        paths = self.recent_paths()
        for path in paths:
            exists = path.is_dir() or path.is_file()
            kind = "run" if path.is_dir() else "config"
            text = f"{path.name}  ({kind}: {path.parent})" if exists else f"{path.name}  (missing: {path})"
            action = menu.addAction(text.replace("&", "&&"))
            action.setData(str(path))
            action.setEnabled(exists)
            action.triggered.connect(lambda _c=False, p=path: self.open_recent(p))
        if not paths:
            menu.addAction("(none yet)").setEnabled(False)
        menu.addSeparator()
        clear = menu.addAction("Clear recent")
        clear.setEnabled(bool(paths))
        clear.triggered.connect(lambda _c=False: self.clear_recent())

    def open_recent(self, path) -> bool:
        """Open a recent entry: a run directory as a stored run, a file as a config."""
        path = Path(path)
        if self.runs.status in ACTIVE:
            self.show_message("A run is in progress", f"Stop the run before opening {path}.")
            return False
        if path.is_dir():
            return self.open_run_dir(path)
        if path.is_file():
            return self.open_config(path)
        self.show_message("Cannot open", f"{path} no longer exists; it is removed from File > Recent.")
        settings = app_settings()
        settings.setValue(_RECENT_KEY, [str(p) for p in self.recent_paths() if p != path])
        settings.sync()
        self._fill_recent_menu()
        return False

    # -- window layout memory ---------------------------------------------------------------------

    def _layout_widgets(self):
        splitter = getattr(self.views, "splitter", None)
        return (("window/geometry", self.saveGeometry, self.restoreGeometry),
                ("window/state", self.saveState, self.restoreState),
                ("window/views_splitter", splitter.saveState if splitter else None,
                 splitter.restoreState if splitter else None))

    def save_layout(self) -> None:
        """Remember the geometry, the docks and toolbar, and the views' splitter."""
        if not self.remember_layout:
            return
        settings = app_settings()
        for key, save, _restore in self._layout_widgets():
            if save is not None:
                settings.setValue(key, save())
        settings.sync()

    def restore_layout(self) -> bool:
        """Apply the remembered layout; a value that is missing or cannot be read (another
        version's, a hand-edited file) is skipped and that part keeps its default."""
        settings = app_settings()
        restored = False
        for key, _save, restore in self._layout_widgets():
            value = settings.value(key)
            if restore is None or not isinstance(value, (QByteArray, bytes)):
                continue
            try:
                restored = bool(restore(QByteArray(value))) or restored
            except (TypeError, ValueError):
                continue
        return restored

    # -- Help ---------------------------------------------------------------------------------------

    def _opengl_text(self) -> str:
        """The 3D view's OpenGL renderer, when its vispy canvas exists (its context was probed
        then: nothing is created here)."""
        try:
            view = self.views.view("3D volume") if self.views is not None else None
        except KeyError:
            view = None
        from app.views.base import LazyView

        if isinstance(view, LazyView):      # built when its tab is first shown
            view = view.view
        if view is None or getattr(view, "canvas", None) is None:
            problem = getattr(view, "problem", "") if view is not None else ""
            return f"unavailable ({problem})" if problem else "not yet initialised"
        from app.views.volume import gl_renderer

        return gl_renderer() or "unknown"

    def about_text(self) -> str:
        rows = versions(self._opengl_text())
        lines = [f"Fieldscope {rows.pop('Fieldscope')}", "Bayesian field inference with Hamiltonian Monte Carlo.", ""]
        lines += [f"{name}: {value}" for name, value in rows.items()]
        return "\n".join(lines)

    def show_about(self) -> QMessageBox:
        box = self.show_message("About Fieldscope", self.about_text(), QMessageBox.Icon.Information)
        icon = self.windowIcon()
        if not icon.isNull():
            box.setIconPixmap(icon.pixmap(64, 64))
        return box

    def open_documentation(self) -> bool:
        """Open the README (or the project's page) with the desktop's viewer."""
        url = documentation_url()
        if url.isEmpty():
            self.show_message("Documentation", "No documentation was found with this installation; "
                              "`fieldscope --help` lists the commands.")
            return False
        if not QDesktopServices.openUrl(url):
            self.show_message("Documentation", f"No program to open {url.toDisplayString()} was found.")
            return False
        return True

    # -- messages ----------------------------------------------------------------------------------

    def show_message(self, title: str, text: str, icon=QMessageBox.Icon.Warning,
                     buttons=QMessageBox.StandardButton.Ok) -> QMessageBox:
        """A window-modal message that does not block the event loop (runs go on)."""
        self.last_message = (title, text)
        box = QMessageBox(icon, title, text, buttons, self)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        box.open()
        self._dialogs = [d for d in self._dialogs if _alive(d)] + [box]
        return box

    # -- closing -------------------------------------------------------------------------------------

    def closeEvent(self, event) -> None:
        if self._close_ok or self.client is None:
            self._finish_close()
            event.accept()
            self.closed.emit()
            return
        event.ignore()
        if self._closing:
            return
        if self.runs.status != "idle" and self.confirm_close:
            if _alive(self._close_question):
                self._close_question.raise_()
                return
            box = self._close_question = self.show_message(
                "A run is in progress",
                f"Stop the run after its current chunk and close? Everything recorded so far "
                f"stays in {self.run_dir}, and it can be continued later.",
                QMessageBox.Icon.Question,
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No)
            box.button(QMessageBox.StandardButton.Yes).clicked.connect(self.begin_close)
            return
        self.begin_close()

    def begin_close(self) -> None:
        """Stop the run after its chunk, let the engine exit, then close (asynchronous)."""
        if self._closing:
            return
        self.save_layout()          # now, while the window is still shown as the user left it
        self._closing = True
        self.auto_start = False
        if self.runs.status != "idle":
            self.phase_label.setText("stopping after the current chunk, then closing…")
        for action in (self.start_action, self.pause_action, self.stop_action,
                       self.continue_action):
            action.setEnabled(False)
        if self.client is not None and self.client.is_running:
            if self.runs.status == "idle":
                self.hide()       # nothing to wait for but the engine's exit
            self.client.shutdown()
        else:
            self._close_ok = True
            self.close()

    def _finish_close(self) -> None:
        self.view_timer.stop()
        if not self._closing:       # closed at once (no engine): begin_close did not save it
            self.save_layout()
        for box in self._dialogs:
            if _alive(box):
                box.close()
        self.runs.shutdown(10_000)


def _alive(widget: QWidget) -> bool:
    import shiboken6

    return widget is not None and shiboken6.isValid(widget)
