"""Fixtures and helpers the GUI tests share (``tests/app/conftest.py`` registers the fixtures).

``make_window`` creates main windows and, after the test, closes them the way a user
does (stopping any run after its chunk, letting the engine exit) and fails the test if a
visible top-level widget, a running engine-reader QThread or an engine process is left.
``tiny_case`` writes a small real data set (an 8^3 Gaussian random field through a slab
mask, core.field.synthetic) and a config that samples it in a few seconds.
"""

from __future__ import annotations

import multiprocessing
import os
import sys

import pytest
import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent, QObject, QUrl, Slot
from PySide6.QtWidgets import QApplication

from core.config import config_from_dict, dump_config
from core.field.grid import Grid
from core.field.power_spectrum import PowerLawCutoff
from core.field.synthetic import make_dataset, save_dataset

TF_MODULES = ("tensorflow", "tensorflow_probability", "tf_keras")
#: whether something imported TensorFlow into this pytest process before the GUI tests
#: (only when tests/core and tests/app are collected into one process)
TF_BEFORE = any(m.split(".")[0] in TF_MODULES for m in sys.modules)


def tf_modules() -> list[str]:
    return sorted(m for m in sys.modules if m.split(".")[0] in TF_MODULES)


def tiny_case(folder, *, shape=(8, 8, 8), warmup=10, samples=20, chunk=5, name="tiny.toml",
              leapfrog=3, chains=2, thin=2):
    """Data + config for a run of a few seconds; returns the config path.

    The demo's field run (``core.demo``'s P(k), noise and mask) on a small grid, the
    config written by ``core.config``'s writer."""
    folder.mkdir(parents=True, exist_ok=True)
    grid = Grid(shape, 200.0, "Mpc/h")
    spectrum = PowerLawCutoff(amplitude=2000.0, index=-1.5, k_pivot=0.1, cutoff_scale=4.0)
    dataset = make_dataset(grid, spectrum, 0.5, mask="slab", mask_fraction=0.25, seed=7)
    save_dataset(folder / "tiny_field.npz", dataset)
    document = {
        "model": {"kind": "field"},
        "data": {"path": "tiny_field.npz", "key": "data", "noise_sigma": 0.5, "mask": "mask"},
        "grid": {"box_size": 200.0, "unit": "Mpc/h"},
        "prior": {"kind": "power_law_cutoff", "k_pivot": 0.1, "amplitude": 2000.0,
                  "index": {"dist": "normal", "loc": -1.5, "scale": 0.3},
                  "cutoff_scale": 4.0},
        "likelihood": {"kind": "gaussian"},
        "field": {"parameterisation": "whitened", "dtype": "float32"},
        "sampler": {"algorithm": "hmc", "num_warmup": warmup, "num_samples": samples,
                    "num_leapfrog_steps": leapfrog, "step_size": 0.05, "target_accept": 0.75,
                    "adapt_mass_matrix": False, "chains": chains, "seed": 42, "thin": thin,
                    "chunk_size": chunk},
    }
    path = folder / name
    path.write_text(dump_config(config_from_dict(document, base_dir=folder)))
    return path


def write_config(folder, document: dict, name: str = "run.toml"):
    """``document`` (core.config's layout) written by core.config's writer as ``folder/name``."""
    path = folder / name
    path.write_text(dump_config(config_from_dict(document, base_dir=folder)))
    return path


def open_prior_panel(qtbot, path):
    """(ConfigState of the config at ``path``, a shown Prior panel on it)."""
    from app.panels.prior import PriorPanel
    from app.state.config_state import ConfigState

    state = ConfigState.from_file(path)
    panel = PriorPanel(state)
    qtbot.addWidget(panel)
    panel.show()
    return state, panel


def _alive(obj) -> bool:
    return obj is not None and shiboken6.isValid(obj)


def close_window(qtbot, window, timeout=60_000) -> None:
    """Close as the user does (the window stops a run and waits for the engine)."""
    if not _alive(window):
        return
    window.confirm_close = False
    window.close()
    qtbot.waitUntil(lambda: not _alive(window) or not window.isVisible(), timeout=timeout)
    if _alive(window) and window.client is not None:
        assert window.client.wait(30_000), "the engine reader thread did not end"


@pytest.fixture(scope="session")
def xla_cache(tmp_path_factory):
    """A persistent XLA compilation cache shared by the engines this session spawns: the
    tests compile the same small model several times, and a hit halves the wait. It
    changes nothing but the time (the engine reads TF_XLA_FLAGS from its environment)."""
    return tmp_path_factory.mktemp("xla-cache")


def use_xla_cache(monkeypatch, folder) -> None:
    flags = os.environ.get("TF_XLA_FLAGS", "")
    if "tf_xla_persistent_cache_directory" not in flags:
        monkeypatch.setenv("TF_XLA_FLAGS",
                           f"{flags} --tf_xla_persistent_cache_directory={folder}".strip())


@pytest.fixture
def make_window(qtbot, monkeypatch, tmp_path, xla_cache):
    """Factory: ``make_window(config_path=None, engine="spawn")`` -> a shown MainWindow.

    Runs go under tmp_path (XDG_DATA_HOME points there too). After the test every window
    is closed and deleted; leaked visible top-level widgets, reader threads or engine
    processes fail the test.
    """
    from app.engine_client import running_readers
    from app.main_window import MainWindow

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    use_xla_cache(monkeypatch, xla_cache)
    before = {id(w) for w in QApplication.topLevelWidgets()}
    windows = []

    def factory(config_path=None, engine="spawn"):
        window = MainWindow(engine=engine)
        windows.append(window)
        if config_path is not None:
            assert window.open_config(config_path), window.last_message
        window.show()
        qtbot.waitExposed(window)
        return window

    yield factory

    for window in windows:
        close_window(qtbot, window)
    for window in windows:
        if _alive(window):
            window.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    QCoreApplication.processEvents()
    leaked = [w for w in QApplication.topLevelWidgets()
              if id(w) not in before and _alive(w) and w.isVisible()]
    threads = running_readers()
    children = multiprocessing.active_children()
    for child in children:
        child.kill()
    assert not leaked, f"top-level widgets left open: {leaked}"
    assert not threads, f"engine reader threads still running: {threads}"
    assert not children, f"engine processes left running: {children}"

def message_of(window, key) -> str:
    for panel in window.panels:
        if key in panel.messages:
            label = panel.messages[key]
            return label.text() if not label.isHidden() else ""
    raise KeyError(key)


def growing_only_axes(widget) -> tuple[int, list[str]]:
    """The pyqtgraph axes drawn inside ``widget`` (every GraphicsView among its children, the
    widget itself included): how many there are, and a description of each one whose
    tick-label space may shrink again (``app.views.style.steady_axes`` was not applied)."""
    import pyqtgraph as pg

    views = [widget] if isinstance(widget, pg.GraphicsView) else []
    views += widget.findChildren(pg.GraphicsView)
    count, loose = 0, []
    for view in views:
        for item in view.scene().items():
            if isinstance(item, pg.AxisItem):
                count += 1
                if item.style["autoReduceTextSpace"]:
                    owner = view
                    while owner is not None and not type(owner).__module__.startswith("app."):
                        owner = owner.parent()
                    loose.append(f"{type(owner).__name__} > {item.orientation} axis {item.labelText!r}")
    return count, loose


class UrlCatcher(QObject):
    """URLs the window asks the desktop to open, caught (install it with
    ``QDesktopServices.setUrlHandler(scheme, catcher, "open")``: no viewer is started)."""

    def __init__(self):
        super().__init__()
        self.urls = []

    @Slot(QUrl)
    def open(self, url):
        self.urls.append(url)
