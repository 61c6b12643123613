"""The main window's File menu: opening, making and saving configs, File > Open recent, and
Save / Discard / Cancel before anything replaces or closes a config with unsaved changes.

``ConfigFiles`` is a mix-in of ``app.main_window.MainWindow`` (it uses the window's
``session``, ``state``, ``runs``, ``panel``, ``bar`` and ``show_message``); its handlers are the
rows of ``app.state.actions.ACTIONS`` under File. Every question goes through
``app.dialogs.questions``. A config replaced by another leaves nothing of the old one's run on
show (``_config_replaced``): not in the status bar, the views, nor Run > Continue run.

File > New from data reads the file and fits P(k) on a worker thread
(``app.state.session.config_for_data_file``); a file that states no box size is shown at once
in voxel units and the Grid panel asks for the box size without blocking; a config next to the
data (``<data stem>.toml``) is offered first, in a message that does not block either.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QMessageBox

from app import menus
from app.dialogs import questions
from app.run_controller import ACTIVE
from app.state.session import config_for_data_file, demo_path
from core.config import ConfigError

__all__ = ["ConfigFiles"]


class ConfigFiles:
    """See the module docstring."""

    # -- replacing the config ------------------------------------------------------------------

    def settle_changes(self, doing: str) -> bool:
        """Before ``doing`` (e.g. "opening another config") replaces or closes a config with
        unsaved changes: Save / Discard / Cancel. True when it may go ahead."""
        if not self.session.modified:
            return True
        answer = questions.ask_save_changes(self, self.session.name(), doing)
        if answer == questions.SAVE:
            return self.save_config()
        return answer == questions.DISCARD

    def _config_replaced(self) -> None:
        """Another config is in the panels: nothing of the old one's run stays on show (the
        status bar, the views, Run > Continue run), and no question of the old one's stays."""
        if self.runs.status == "idle":
            self.runs.forget_run()
            self.bar.clear()
            st = self.run_state
            if st is not None and not st.is_preview:
                st.show_preview(self.panel["data"].data_preview, *self._preview_config())
                self.refresh_views()
        self.panel["grid"].box_question.setVisible(False)
        self._update_title()
        self._update_actions()

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
        self._config_replaced()
        self.add_recent(path)
        return True

    def clear_config(self) -> None:
        """A new, empty config in the panels (the one a window opens with), nothing of the
        old one left; no question (the caller settles unsaved changes first)."""
        self.state.reset()
        self.state.notify_all()
        self._config_replaced()

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

    def _open_demo_action(self, name: str) -> bool:
        if self.runs.status != "idle":
            return self.open_demo(name)      # says why not
        return self.settle_changes("opening the demo") and self.open_demo(name)

    def _open_config_dialog(self) -> None:
        if not self.settle_changes("opening another config"):
            return
        start = str(self.state.path.parent if self.state.path else self.state.base_dir)
        path = questions.choose_open_file(self, "Open config", start, "Fieldscope config (*.toml);;All files (*)")
        if path:
            self.open_config(path)

    def _open_data_dialog(self) -> None:
        self.panel["data"]._browse()

    # -- File > New from data ------------------------------------------------------------------

    def _new_from_data_dialog(self) -> None:
        from core.config import FIELD_DATA_EXTENSIONS

        if self.runs.status in ACTIVE:
            self.show_message("A run is in progress", "Stop the run before making a new config.")
            return
        if not self.settle_changes("making a new config"):
            return
        data = self.state["data.path"]
        start = str(self.state.resolve(data).parent) if isinstance(data, str) and data \
            else str(self.state.base_dir)
        patterns = " ".join(f"*{ext}" for ext in FIELD_DATA_EXTENSIONS)
        path = questions.choose_open_file(self, "New from data", start,
                                          f"Gridded data ({patterns});;All files (*)")
        if path:
            self.new_from_data(path)

    def new_from_data(self, path, key=None, *, offer_config: bool = True) -> bool:
        """A fresh config for the data file ``path`` (``core.config.from_data``), not saved
        (File > Save config as… offers ``<data stem>.toml`` next to the data).

        When ``<data stem>.toml`` already sits next to the data (and ``offer_config``), a
        message offers to open it instead, without blocking. Reading the file and fitting
        P(k) take seconds for a large grid, so they run on a worker thread (``self._from_data``)
        while the window stays live; ``new_config_done(ok)`` follows. A file that states no
        box size is shown at once in voxel units and the Grid panel asks for the box size
        (no modal question). False when nothing was started (a run is in progress)."""
        if self.runs.status in ACTIVE:
            self.show_message("A run is in progress", "Stop the run before making a new config.")
            return False
        path = Path(path).expanduser().absolute()
        beside = self.session.config_beside(path) if offer_config else None
        if beside is not None:
            self._offer_config_beside(beside, path, key)
            return True
        self._make_config_for_data(path, key)
        return True

    def _offer_config_beside(self, config: Path, data: Path, key) -> None:
        box = self.show_message(f"{config.name} is next to {data.name}",
                                f"{config} sits next to the data. Open that config, or make a new "
                                f"one from {data.name}?", QMessageBox.Icon.Question,
                                QMessageBox.StandardButton.Cancel)
        box.setObjectName("config_beside_question")
        open_button = box.addButton(f"Open {config.name}", QMessageBox.ButtonRole.AcceptRole)
        new_button = box.addButton("New config from the data", QMessageBox.ButtonRole.ActionRole)
        open_button.clicked.connect(lambda: self.new_config_done.emit(self.open_config(config)))
        new_button.clicked.connect(lambda: self._make_config_for_data(data, key))
        box.button(QMessageBox.StandardButton.Cancel).clicked.connect(
            lambda: self.new_config_done.emit(False))

    def _make_config_for_data(self, path: Path, key) -> None:
        self.bar.say(f"reading {path.name} and fitting P(k) to it…")
        self._from_data.request((path, key), config_for_data_file, path, key)

    def _config_for_data_made(self, request, made, error) -> None:
        from core.io import LoadError

        path, _key = request
        if error is not None:
            if not isinstance(error, (LoadError, ConfigError, OSError)):
                error = f"{type(error).__name__}: {error}"
            self.bar.say("")
            self.show_message("Cannot make a config from the data", str(error))
            self.new_config_done.emit(False)
            return
        self.new_config_done.emit(self._use_new_config(path, *made))

    def _use_new_config(self, path: Path, result, text: str) -> bool:
        try:
            self.state.load_text(text, base_dir=path.parent)
        except ConfigError as exc:
            self.show_message("Cannot make a config from the data", str(exc))
            return False
        self.state.notify_all()
        self._config_replaced()
        self.bar.say(f"new config for {path.name}, not saved (File > Save config as… writes {path.stem}.toml "
                     "next to the data)")
        self.show_message(f"New config for {path.name}", "Made from the data file:\n\n" + "\n".join(
            f"• {n}" for n in result.notes), QMessageBox.Icon.Information)
        if result.box_size is None:      # in voxels until the Grid panel's question is answered
            grid = self.panel["grid"]
            grid.ask_box_size(path.name)
            next(d for d in self.docks if d.widget() is grid).raise_()
        return True

    # -- File > Calibrate, Save ------------------------------------------------------------------

    def _calibrate_dialog(self) -> None:
        """File > Calibrate…: save the config, ask how many simulations, and open a Calibration
        window on ``<config stem>-calibration`` next to it (``app.views.calibration``: a
        ``fieldscope calibrate`` process it watches; the same folder resumes a stopped one)."""
        if (self.state.path is None or self.state.modified) and not self.save_config():
            return
        from app.views.calibration import CalibrationWindow, calibrate_command

        n = questions.ask_integer(self, "Calibrate", "Simulations (each a data set simulated from the prior "
                                  "and sampled with this config):", 100, 1, 100000)
        if n is None:
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
        """Where File > Save config as… starts (``Session.save_as_default``)."""
        return self.session.save_as_default()

    def _save_as_dialog(self) -> bool:
        path = questions.choose_save_file(self, "Save config", str(self.save_as_default()),
                                          "Fieldscope config (*.toml)")
        return self.save_config(path) if path else False

    # -- File > Recent ---------------------------------------------------------------------------

    def recent_paths(self) -> list[Path]:
        """The configs and run directories opened, newest first (``Session.recent``)."""
        return self.session.recent.paths()

    def add_recent(self, path) -> None:
        """Put ``path`` (a config file or a run directory) first in File > Recent."""
        self.session.recent.add(path)
        self._fill_recent_menu()

    def clear_recent(self) -> None:
        self.session.recent.clear()
        self._fill_recent_menu()

    def _fill_recent_menu(self) -> None:
        menus.fill_recent_menu(self)

    def open_recent(self, path) -> bool:
        """Open a recent entry: a run directory as a stored run, a file as a config (after
        Save / Discard / Cancel for unsaved changes)."""
        path = Path(path)
        if self.runs.status in ACTIVE:
            self.show_message("A run is in progress", f"Stop the run before opening {path}.")
            return False
        if not (path.is_dir() or path.is_file()):
            self.show_message("Cannot open", f"{path} no longer exists; it is removed from File > Recent.")
            self.session.recent.remove(path)
            self._fill_recent_menu()
            return False
        if not self.settle_changes(f"opening {path.name}"):
            return False
        return self.open_run_dir(path) if path.is_dir() else self.open_config(path)

