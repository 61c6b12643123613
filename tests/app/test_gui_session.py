"""What the window remembers and tells: Help > About and Documentation, File > Recent, the
layout between sessions. Settings live in $XDG_CONFIG_HOME (tests/app/conftest.py points it
into the test's tmp_path), so nothing here touches the user's own settings."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import PySide6
from PySide6.QtCore import qVersion
from PySide6.QtGui import QDesktopServices

from app.settings import app_settings, settings_path
from app.state.session import MAX_RECENT
from core import __version__
from core.store.run_store import RunStoreWriter
from support.gui import TF_BEFORE, UrlCatcher, tf_modules, tiny_case

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


def _recent_actions(window):
    window._fill_recent_menu()
    return [a for a in window.recent_menu.actions() if a.data()]


def test_help_about_lists_the_installed_versions_and_documentation_opens_the_readme(make_window):
    window = make_window(engine=None)
    window.about_action.trigger()
    title, text = window.last_message
    assert title == "About Fieldscope"
    for name, value in (("TensorFlow", version("tensorflow")), ("Qt", qVersion()),
                        ("PySide6", PySide6.__version__), ("Python", platform.python_version()),
                        ("numpy", np.__version__)):
        assert f"{name}: {value}" in text, (name, text)
    assert text.startswith(f"Fieldscope {__version__}")
    # the 3D view is built when its tab is first shown: no OpenGL context before that
    assert "OpenGL: not yet initialised" in text
    from app.views.volume import gl_renderer

    volume = window.views.show_tab("3D volume").build()
    window.about_action.trigger()
    text = window.last_message[1]
    if volume.canvas is not None:               # its context was probed when it was built
        assert f"OpenGL: {gl_renderer() or 'unknown'}" in text
    else:
        assert f"OpenGL: unavailable ({volume.problem})" in text
    if not TF_BEFORE:
        assert tf_modules() == []

    # Help > Documentation: the README, through Qt's routing of a scheme to a handler (so
    # that the test starts no desktop viewer)
    catcher = UrlCatcher()
    QDesktopServices.setUrlHandler("file", catcher, "open")
    try:
        window.documentation_action.trigger()
    finally:
        QDesktopServices.unsetUrlHandler("file")
    assert [u.toLocalFile() for u in catcher.urls] == [str(README)]



def test_recent_lists_configs_and_runs_newest_first_and_reopens_them(make_window, tmp_path):
    a = tiny_case(tmp_path / "a", name="a.toml")
    b = shutil.copy(a, tmp_path / "a" / "b.toml")
    run = tmp_path / "run"
    RunStoreWriter.create(run, config_text=a.read_text(), model_kind="field", chains=2, num_warmup=10,
                          num_samples=20, thin=2, param_names=["index"], grid_shape=(8, 8, 8),
                          k_centres=[0.1, 0.2], k_counts=[6, 12],
                          observed={"data": (["x", "y", "z"], np.zeros((8, 8, 8)))}).set_status("stopped")
    window = make_window(a, engine=None)
    assert window.open_config(b) and window.open_run_dir(run)
    assert [a.data() for a in _recent_actions(window)] == [str(run), str(b), str(a)]
    # a new window (the next session) lists them too, and reopens one from the menu
    other = make_window(engine=None)
    actions = _recent_actions(other)
    assert [a.data() for a in actions] == [str(run), str(b), str(a)]
    actions[2].trigger()
    assert other.state.path == a
    assert [a.data() for a in _recent_actions(other)] == [str(a), str(run), str(b)]
    # a config that is gone is shown, disabled; "Clear recent" empties the list
    b.unlink()
    entry = {a.data(): a for a in _recent_actions(other)}[str(b)]
    assert not entry.isEnabled() and "missing" in entry.text()
    clear = [a for a in other.recent_menu.actions() if a.text() == "Clear recent"][0]
    clear.trigger()
    assert _recent_actions(other) == [] and other.recent_paths() == []
    clear = [a for a in other.recent_menu.actions() if a.text() == "Clear recent"][0]
    assert not clear.isEnabled()
    # at most MAX_RECENT, the newest first; a value that is not a list of paths counts as none
    paths = [tmp_path / f"c{i}.toml" for i in range(MAX_RECENT + 2)]
    for path in paths:
        path.write_text("")
        other.add_recent(path)
    assert [a.data() for a in _recent_actions(other)] == [str(p) for p in paths[::-1][:MAX_RECENT]]
    settings = app_settings()
    settings.setValue("recent/paths", 12345)
    settings.sync()
    assert other.recent_paths() == [] and _recent_actions(other) == []
    assert settings_path().is_relative_to(tmp_path)


#: one session of the app: a window, changed in the first, shown in the next, then closed
SESSION = """
import json, sys
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
app = QApplication(sys.argv[:1])
from app.main_window import MainWindow
window = MainWindow(engine=None)
window.show()
app.processEvents()
prior = next(d for d in window.docks if d.objectName() == "dock_prior")
if sys.argv[1] == "change":
    window.resize(1400, 860)
    window.move(70, 40)
    window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, prior)
    total = sum(window.views.splitter.sizes())
    window.views.splitter.setSizes([total // 4, total - total // 4])
    app.processEvents()
print(json.dumps({"size": [window.width(), window.height()], "pos": [window.x(), window.y()],
                  "splitter": window.views.splitter.sizes(),
                  "prior_right": window.dockWidgetArea(prior) == Qt.DockWidgetArea.RightDockWidgetArea}))
window.close()                  # saves the layout (and syncs the settings file) at once
app.processEvents()
sys.stdout.flush()
# no interpreter teardown of live Qt objects (PySide can crash there under load, exit -11):
# what this session had to do is done and written
import os
os._exit(0)
"""


def test_the_layout_is_restored_in_the_next_session(tmp_path):
    """Two sessions of the app (two processes) on a screen bigger than the window (Qt fits
    a restored window into its screen, and the test display is 800 x 600)."""
    screens = tmp_path / "screens.json"
    screens.write_text(json.dumps({"screens": [{"name": "big", "x": 0, "y": 0, "width": 1920, "height": 1200,
                                                "logicalDpi": 96, "logicalBpp": 32}]}))
    env = dict(os.environ, QT_QPA_PLATFORM=f"offscreen:configfile={screens}", PYTHONPATH=str(REPO),
               XDG_DATA_HOME=str(tmp_path / "xdg"))

    def session(mode):
        out = subprocess.run([sys.executable, "-c", SESSION, mode], capture_output=True, text=True,
                             env=env, timeout=120, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    changed = session("change")                 # the default is 1500 x 950, Prior on the left
    assert changed["size"] == [1400, 860] and changed["prior_right"]
    assert session("look") == changed
    assert settings_path().is_file()          # in this test's $XDG_CONFIG_HOME


def test_a_corrupted_layout_setting_is_ignored(make_window):
    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[window]\ngeometry=@ByteArray(not a geometry)\nstate=12\n"
                    "views_splitter=@Invalid()\n[recent]\npaths=@ByteArray(\\x1)\n")
    window = make_window(engine=None)
    assert (window.width(), window.height()) == (1500, 950)    # the default size
    assert window.recent_paths() == []
    assert "tensorflow" not in sys.modules or TF_BEFORE
