"""The per-user settings file and what the window keeps in it between sessions.

``settings_path()`` is $XDG_CONFIG_HOME/fieldscope/fieldscope.conf (default ~/.config), an
INI file read with ``app_settings()``: File > Recent (``app.state.session.RecentFiles`` over
it) and the window's layout (``save_layout`` / ``restore_layout``: geometry, docks and
toolbar, the views' splitter). A value that cannot be read is ignored.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings

__all__ = ["settings_path", "app_settings", "save_layout", "restore_layout", "LAYOUT_KEYS"]

LAYOUT_KEYS = ("window/geometry", "window/state", "window/views_splitter")


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


def _layout_parts(window):
    splitter = getattr(window.views, "splitter", None)
    return (("window/geometry", window.saveGeometry, window.restoreGeometry),
            ("window/state", window.saveState, window.restoreState),
            ("window/views_splitter", splitter.saveState if splitter else None,
             splitter.restoreState if splitter else None))


def save_layout(window) -> None:
    """Remember ``window``'s geometry, docks and toolbar, and its views' splitter."""
    settings = app_settings()
    for key, save, _restore in _layout_parts(window):
        if save is not None:
            settings.setValue(key, save())
    settings.sync()


def restore_layout(window) -> bool:
    """Apply the remembered layout; a value that is missing or cannot be read (another
    version's, a hand-edited file) is skipped and that part keeps its default."""
    settings = app_settings()
    restored = False
    for key, _save, restore in _layout_parts(window):
        value = settings.value(key)
        if restore is None or not isinstance(value, (QByteArray, bytes)):
            continue
        try:
            restored = bool(restore(QByteArray(value))) or restored
        except (TypeError, ValueError):
            continue
    return restored
