"""The main window: setup panels docked on the left, live views in the middle, run controls.

Data flow (napari / glue shape)::

    Session (app.state.session: the ConfigState, its file, run folders, File > Recent)
        ^  ConfigState  <-->  setup panels (bound widgets, inline messages)
        |  Start: to_toml()
        v
    RunController  <--(signals, GUI thread)--  EngineClient
        |  RunState.on_chunk / on_status          ^
        v                                         |  pause / resume / stop
    LiveViews.refresh() at 10 Hz (a timer,   run controls (toolbar, Run menu)
    never per message)

The window keeps layout and wiring. Its menu and toolbar actions are declared once, in
``app.state.actions.ACTIONS`` (text, shortcut, handler, when enabled), and enabled from one
snapshot of the window (``status()``); every question it waits for goes through
``app.dialogs.questions``; messages are window-modal and never block the event loop. A
run's lifetime is ``app.run_controller``'s ``RunController`` (``self.runs``).

Before anything replaces or closes a config with unsaved changes (File > Open config, New
from data, a demo, a recent entry, a run directory, Quit, closing the window) the window
asks Save / Discard / Cancel. A config replaced by another leaves no trace of the old one's
run in the status bar, the views or Run > Continue run. ``fieldscope gui DATA`` and File >
New from data show the data at once; a file that states no box size is measured in voxels
until the Grid panel's question is answered, and a config next to the data (``<stem>.toml``)
is offered.

Session memory (``app.settings``): File > Recent and the window's layout, saved on close and
restored when a window opens. Run directories: ``app.state.session.default_run_dir``.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QDockWidget, QLabel, QMainWindow, QMessageBox, QWidget

from app import menus, settings
from app.config_files import ConfigFiles
from app.dialogs import about, questions
from app.engine_client import EngineClient
from app.gui_gc import collect_in_gui_thread
from app.panels import SetupPanel, make_panels
from app.run_controller import ACTIVE, RunController
from app.state.actions import ACTIONS, WindowStatus
from app.state.config_state import ConfigState
from app.state.session import RecentFiles, Session
from app.status_bar import RunStatusBar
from app.views.jobs import LatestJob
from core.config import ConfigError
from core.run.input_files import ACCEPT_OPTION
from core.store.run_store import RunReader, RunStoreError
from core.store.run_summary import settings_text as run_summary_settings

__all__ = ["MainWindow", "VIEW_REFRESH_HZ"]

VIEW_REFRESH_HZ = 10


class MainWindow(ConfigFiles, QMainWindow):
    """Fieldscope's window. ``engine``: "spawn" (default: start an engine process when
    the window opens), an ``EngineClient`` to use, or None (set-up only, e.g. tests)."""

    run_started = Signal(str)       # the run directory
    run_finished = Signal(str)      # the final status
    closed = Signal()               # the window closed and its engine exited
    new_config_done = Signal(bool)  # File > New from data: the config is in the panels (or not)

    def __init__(self, state: ConfigState | None = None, *, engine="spawn", remember_layout: bool = True,
                 parent=None):
        super().__init__(parent)
        collect_in_gui_thread()           # cycles of Qt objects freed in this thread only
        #: restore the remembered layout on opening and save it on closing (off for screenshots,
        #: which must look the same on every machine and must not change the user's layout)
        self.remember_layout = remember_layout
        self.state = state if state is not None else ConfigState()
        self.session = Session(self.state, RecentFiles(settings.app_settings))
        self.errors: dict[str, str] = {}
        self.last_message: tuple[str, str] | None = None   # (title, text) of the last dialog
        self.auto_start = False           # press Start as soon as it is enabled (--run)
        self.confirm_close = True
        self._closing = False
        self._changed_inputs: str | None = None     # a Continue run refused for a changed input file
        self._close_ok = False
        self._divergences = {"warmup": 0, "sampling": 0}   # this session's, without a RunState
        self._dialogs: list[QMessageBox] = []
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
        if self.views is not None:
            self.views.view("Diagnostics").apply_requested.connect(self.apply_settings)
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

    def _make_actions(self) -> None:
        """Menus and toolbar from ``app.state.actions.ACTIONS`` (``app.menus``)."""
        menus.build_menus(self)

    def _make_status_bar(self) -> None:
        self.bar = RunStatusBar(self.statusBar())
        # the labels by their old names (tests and screenshots read them)
        b = self.bar
        self.message_label, self.phase_label, self.progress, self.rate_label = b.message, b.phase, b.progress, b.rate
        self.eta_label, self.divergence_label, self.engine_label = b.eta, b.divergences, b.engine

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
        self.setWindowTitle(f"Fieldscope — {self.session.title()}")

    # -- export ---------------------------------------------------------------------------------

    def _fill_export_menu(self) -> None:
        menus.fill_export_menu(self)

    def _export_dialog(self, name: str, kind: str) -> None:
        """File > Export > a view as an image (PNG at a DPI asked for, SVG or PDF), the whole
        window as PNG, or a table as CSV: where, then ``export_image`` / ``export_png`` /
        ``export_csv``."""
        from app.views.figure import DEFAULT_DPI, FIGURE_FORMATS, MAX_DPI, MIN_DPI

        base = self.run_dir if self.run_dir is not None else self.state.base_dir
        slug = name.lower().replace(" ", "_").replace("(", "").replace(")", "")
        if kind == "image":
            path = questions.choose_figure_file(self, f"Export {name}", str(Path(base) / f"{slug}.png"), FIGURE_FORMATS)
            if not path:
                return
            dpi = DEFAULT_DPI
            if path.lower().endswith(".png"):
                dpi = questions.ask_integer(self, "Export as PNG", "Resolution (dots per inch):", DEFAULT_DPI,
                                            MIN_DPI, MAX_DPI)
                if dpi is None:
                    return
            self.export_image(name, path, dpi)
            return
        path = questions.choose_save_file(self, f"Export {name} as {kind.upper()}", str(Path(base) / f"{slug}.{kind}"),
                                          "PNG image (*.png)" if kind == "png" else "CSV (*.csv)")
        if path:
            (self.export_png if kind == "png" else self.export_csv)(name, path)

    def _front_view(self, name: str):
        """The view called ``name``, brought to the front and redrawn (what is saved is what is seen)."""
        if self.views is None:
            raise ValueError("the live views are not available")
        view = self.views.show_tab(name)
        self.views.refresh(force=True)
        from PySide6.QtWidgets import QApplication

        QApplication.processEvents()
        return view

    def _exported(self, name: str, path, write) -> bool:
        """Run ``write()``; say where ``name`` went, or why it did not (a message, never a raise)."""
        try:
            write()
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            self.show_message("Export failed", f"{name} was not saved: {exc}")
            return False
        self.message_label.setText(f"saved {name} to {path}")
        return True

    def export_image(self, name: str, path, dpi: int | None = None) -> bool:
        """Save the plots of the view called ``name`` as a figure: PNG at ``dpi``, SVG or PDF by
        the suffix (``app.views.figure``)."""
        return self._exported(name, path, lambda: self._front_view(name).export_image(path, dpi))

    def export_png(self, name: str, path) -> bool:
        """Save the view called ``name`` (a tab name, or "Whole window") as a PNG image, as shown."""
        def write():
            if name == "Whole window":
                ok = self.grab().save(str(path), "PNG")
            else:
                self._front_view(name).export_png(path)
                ok = Path(path).exists()
            if not ok:
                raise OSError(f"the image could not be written to {path}")
        return self._exported(name, path, write)

    def export_csv(self, name: str, path) -> bool:
        """Save the table of the view called ``name`` as CSV: the diagnostics table
        ("Diagnostics", as ``fieldscope summary --csv`` writes it) or the P(k) curves
        ("P(k)"); a view without a table (``csv_contents`` None) refuses with a message."""
        def write():
            if self.views is None:
                raise ValueError("the live views are not available")
            self.views.view(name).export_csv(path)
        return self._exported(name, path, write)

    # -- the run controller's signals -------------------------------------------------------------

    def _connect_runs(self) -> None:
        runs = self.runs
        runs.engine_ready.connect(self._on_ready)
        runs.engine_renewing.connect(self._on_renewing)
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

    def _on_renewing(self, why: str) -> None:
        self.engine_label.setText("engine getting ready…")
        self.engine_label.setToolTip(why)

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
            run_dir = Path(run_dir) if run_dir is not None else self.session.new_run_dir()
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
        self.bar.started(self._steps_total())
        self.bar.say(f"run: {run_dir}" + (
            "  (config not saved: the run keeps its text; File > Save config as… writes it "
            "next to the data)" if self.state.path is None else ""))
        self.view_timer.start()
        self._update_actions()
        self.run_started.emit(run_dir)

    def _steps_total(self) -> int:
        return self.session.steps_total()

    def _run_meta(self, run_dir) -> dict:
        return self.session.run_meta(run_dir, self.run_state.preview_meta())

    def toggle_pause(self) -> None:
        self.runs.toggle_pause()

    def stop_run(self) -> None:
        self.runs.stop()

    def continue_run(self) -> bool:
        """Resume the current run directory with its stored config (as ``fieldscope
        resume`` does)."""
        return self.runs.continue_run()

    def apply_settings(self, changes: dict) -> None:
        """Set config keys to values (the Diagnostics view's advice): the panels show them, the
        config is marked changed, and the next Start runs with them. A key the config does not
        have (another model kind) is skipped and said."""
        done, skipped = [], []
        for key, value in changes.items():
            try:
                self.state[key] = value
                done.append(key)
            except (KeyError, ValueError, TypeError):
                skipped.append(key)
        text = run_summary_settings({key: changes[key] for key in done}) if done else ""
        if skipped:
            text += ("; " if text else "") + f"not in this config: {', '.join(skipped)}"
        self.message_label.setText(text + (" (Start runs with it)" if done else ""))
        self.message_label.setStyleSheet("")

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
        self.panel["grid"].box_question.setVisible(False)
        self.runs.show_store(reader)
        self.bar.stored(reader, self._divergence_counts())
        if self.runs.watching is not None:
            self._show_watch_progress()
        self._update_title()
        self._update_actions()
        self.add_recent(path)
        return True

    def _divergence_counts(self):
        """(sampling, warmup) divergences of the run shown (None: no draws yet)."""
        st = self.run_state
        return (st.sampling_divergences, st.warmup_divergences) if st is not None and st.n_steps else None

    def _show_watch_progress(self, idle: float = 0.0) -> None:
        st = self.run_state
        self.bar.watching(self.runs.watching, st.status if st else "", st.progress if st is not None else {},
                          st.steps_total if st is not None else 0, self._divergence_counts(), idle)

    def _open_run_dialog(self) -> None:
        if self.runs.status in ACTIVE or not self.settle_changes("opening a run"):
            return
        path = questions.choose_directory(self, "Open run directory", str(self.state.base_dir / "runs"))
        if path:
            self.open_run_dir(path)

    def _runs_dialog(self) -> None:
        """File > Runs…: the run browser (``app.run_browser``), one per window, closed with it."""
        from app.run_browser import show_run_browser

        self._dialogs = [d for d in self._dialogs if _alive(d)]
        browser = show_run_browser(self, self._dialogs)
        if browser not in self._dialogs:
            self._dialogs.append(browser)

    # -- engine events ----------------------------------------------------------------------------

    def _on_chunk(self, event) -> None:
        for key, count in (event.get("divergences") or {}).items():
            if key in self._divergences:
                self._divergences[key] += int(count)
        st = self.run_state
        # the run state holds the whole run (a continued one too: it was read from the store)
        self.bar.chunk(event, (st.sampling_divergences, st.warmup_divergences) if st is not None
                       else (self._divergences["sampling"], self._divergences["warmup"]))

    def _on_error(self, message: str) -> None:
        if self._closing:
            return
        if ACCEPT_OPTION in message:      # continuing was refused: an input file changed
            self._changed_inputs = message
            return
        where = f" (run directory {self.run_dir})" if self.run_dir else ""
        self.show_message("The run failed", f"{message}{where}")

    def _ask_accept_changed_inputs(self) -> None:
        """After a refused Continue run (an input file changed): continue anyway, if the user says so."""
        message, self._changed_inputs = self._changed_inputs, None
        if message and questions.ask_accept_changed_inputs(self, message):
            self.runs.continue_run(accept_changed=True)
        elif message:
            self.message_label.setText("not continued: " + message.split(". Resuming would", 1)[0])

    def _on_done(self, status: str) -> None:
        texts = {"finished": "finished", "stopped": "stopped; Run > Continue run resumes it",
                 "failed": "failed"}
        self.message_label.setStyleSheet("")
        self.message_label.setText(f"run {texts.get(status, status)}: {self.run_dir}")
        self.run_finished.emit(status)
        if self._changed_inputs and not self._closing:
            QTimer.singleShot(0, self._ask_accept_changed_inputs)

    def _on_run_ended(self, status: str) -> None:
        self.view_timer.stop()
        self.refresh_views()
        self.bar.ended(status)
        self._update_actions()

    def refresh_views(self) -> None:
        if self.views is not None:
            try:
                self.views.refresh()
            except Exception as exc:   # a drawing bug must not stop the run or the app
                self.message_label.setText(f"live views: {type(exc).__name__}: {exc}")

    # -- actions ---------------------------------------------------------------------------------

    def status(self) -> WindowStatus:
        """The snapshot the actions' enabled state is computed from (``app.state.actions``)."""
        client = self.client
        engine = "none" if client is None else "ready" if client.is_ready else \
            "starting" if client.is_running else "stopped"
        return WindowStatus(run=self.runs.status, pause_pending=self.runs.pause_pending, engine=engine,
                            config_ok=not self.errors, closing=self._closing,
                            resumable=self.runs.status == "idle" and self.runs.resumable_run() is not None)

    def _update_actions(self) -> None:
        if not hasattr(self, "action"):
            return
        now = self.status()
        for spec in ACTIONS:
            if spec.enabled is not None:
                self.action[spec.name].setEnabled(spec.enabled(now))
        if now.engine == "none":
            tip = "no engine"
        elif now.engine != "ready":
            tip = "the engine is getting ready" if now.engine == "starting" else \
                "the engine stopped: Run > Restart engine"
        elif self.errors:
            tip = "fix the config first: " + next(iter(self.errors.values()))
        elif not now.idle:
            tip = "a run is in progress"
        else:
            tip = "start a new run of this config"
        self.start_action.setToolTip(tip)
        self.start_action.setStatusTip(tip)
        self.pause_action.setText("Resume" if now.run == "paused" else "Pause")
        if now.engine == "stopped" and not self._closing:
            self.engine_label.setText("engine stopped")

    # -- window layout memory ---------------------------------------------------------------------

    def save_layout(self) -> None:
        """Remember the geometry, the docks and toolbar, and the views' splitter."""
        if self.remember_layout:
            settings.save_layout(self)

    def restore_layout(self) -> bool:
        return settings.restore_layout(self)

    # -- Help ---------------------------------------------------------------------------------------

    def about_text(self) -> str:
        return about.about_text(about.opengl_text(self.views))

    def show_about(self) -> QMessageBox:
        box = self.show_message("About Fieldscope", self.about_text(), QMessageBox.Icon.Information)
        icon = self.windowIcon()
        if not icon.isNull():
            box.setIconPixmap(icon.pixmap(64, 64))
        return box

    def open_documentation(self) -> bool:
        """Open the README (or the project's page) with the desktop's viewer."""
        url = about.documentation_url()
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
        if not (self._close_ok or self._closing) and self.confirm_close \
                and not self.settle_changes("closing"):
            event.ignore()
            return
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
        self._update_actions()
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
