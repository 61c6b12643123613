"""The main window's menus and toolbar, built from ``app.state.actions.ACTIONS``, and the two
menus filled each time they open: File > Open recent and File > Export.

``build_menus(window)`` makes one ``QAction`` per row (``window.action[name]`` and
``window.<name>_action``), connected to the row's handler (a window method), with its shortcut
and tip, in its menu (and the toolbar); then the View menu's dock toggles. ``fill_recent_menu``
and ``fill_export_menu`` (re)fill their menus from ``window.recent_paths()`` and the views on show.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QToolBar

from app.state.actions import ACTIONS, DYNAMIC_MENUS, MENUS

__all__ = ["build_menus", "fill_recent_menu", "fill_export_menu"]


def build_menus(window) -> None:
    window.action = {}
    menus = {title: window.menuBar().addMenu(title) for title in MENUS}
    toolbar = window.toolbar = QToolBar("Run")
    toolbar.setObjectName("run_toolbar")
    toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
    for spec in ACTIONS:
        top, _, sub = spec.menu.partition("/")
        if sub and sub not in menus:
            menus[sub] = menus[top].addMenu(sub)
        menu = menus[sub or top]
        action = QAction(spec.text, window)
        handler = getattr(window, spec.handler)
        action.triggered.connect(lambda _checked=False, h=handler, a=spec.args: h(*a))  # not "checked"
        if spec.shortcut:
            standard = getattr(QKeySequence.StandardKey, spec.shortcut, None)
            action.setShortcut(QKeySequence(standard if standard is not None else spec.shortcut))
        if spec.tip:
            action.setStatusTip(spec.tip)
            action.setToolTip(spec.tip)
        if spec.separated:
            menu.addSeparator()
        menu.addAction(action)
        if spec.toolbar:
            toolbar.addAction(action)
        window.action[spec.name] = action
        setattr(window, f"{spec.name}_action", action)
        if spec.name in DYNAMIC_MENUS:
            dynamic = menu.addMenu(DYNAMIC_MENUS[spec.name])
            if spec.name == "open_run":
                window.recent_menu = dynamic
                dynamic.aboutToShow.connect(lambda: fill_recent_menu(window))
            else:
                window.export_menu = dynamic
                dynamic.aboutToShow.connect(lambda: fill_export_menu(window))
    fill_recent_menu(window)
    fill_export_menu(window)
    for dock in window.docks:
        menus["&View"].addAction(dock.toggleViewAction())
    window.addToolBar(Qt.ToolBarArea.TopToolBarArea, toolbar)


def fill_recent_menu(window) -> None:
    """One entry per recent path; a path that no longer exists is shown disabled."""
    menu = window.recent_menu
    menu.clear()
    paths = window.recent_paths()
    for path in paths:
        exists = path.is_dir() or path.is_file()
        kind = "run" if path.is_dir() else "config"
        text = f"{path.name}  ({kind}: {path.parent})" if exists else f"{path.name}  (missing: {path})"
        action = menu.addAction(text.replace("&", "&&"))
        action.setData(str(path))
        action.setEnabled(exists)
        action.triggered.connect(lambda _c=False, p=path: window.open_recent(p))
    if not paths:
        menu.addAction("(none yet)").setEnabled(False)
    menu.addSeparator()
    clear = menu.addAction("Clear recent")
    clear.setEnabled(bool(paths))
    clear.triggered.connect(lambda _c=False: window.clear_recent())


def fill_export_menu(window) -> None:
    """Each view on show as a figure (its plots alone: PNG at a chosen DPI, SVG or PDF), the whole
    window as PNG (a screen grab); each view with a table as CSV."""
    menu = window.export_menu
    menu.clear()
    views = window.views
    names = views.tab_names("left") + views.tab_names("right") if views is not None else []
    for name in names:
        action = menu.addAction(f"{name} as image (PNG, SVG, PDF)…")
        action.triggered.connect(lambda _c=False, n=name: window._export_dialog(n, "image"))
    action = menu.addAction("Whole window as PNG…")
    action.triggered.connect(lambda _c=False: window._export_dialog("Whole window", "png"))
    menu.addSeparator()
    for name in names:
        contents = views.view(name).csv_contents
        if contents is not None:
            action = menu.addAction(f"{contents} as CSV…")
            action.triggered.connect(lambda _c=False, n=name: window._export_dialog(n, "csv"))
