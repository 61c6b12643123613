"""The live views of one run side by side: field views on the left, plots on the right.

Left tabs: Slices, 3D volume, Exact posterior (field runs) or Integral model (integral
runs). Right tabs: Traces, Health, P(k), Diagnostics (P(k) only for field runs). A tab
that does not apply to the run shown is hidden, not disabled.
"""

from __future__ import annotations

from pyqtgraph.Qt import QtCore, QtWidgets

from app.state.run_state import RunState
from app.views.diagnostics import DiagnosticsView
from app.views.health import HealthView
from app.views.power import PowerView
from app.views.slices import SlicesView
from app.views.traces import TracesView

#: the tabs of each side, in order
LEFT_TABS = ("Slices", "3D volume", "Exact posterior", "Integral model")
RIGHT_TABS = ("Traces", "Health", "P(k)", "Diagnostics")
#: tabs that apply only to one kind of run
FIELD_ONLY = {"3D volume", "Exact posterior", "P(k)", "Slices"}
INTEGRAL_ONLY = {"Integral model"}


def _optional_view(make, name: str):
    """A view whose construction may fail on this machine (the 3D view needs OpenGL): on
    failure, a label with the reason takes its place and the app goes on."""
    try:
        return make()
    except Exception as exc:    # any failure of an optional view must not stop the app
        label = QtWidgets.QLabel(f"{name} is not available here: {type(exc).__name__}: {exc}")
        label.setWordWrap(True)
        label.setAlignment(QtCore.Qt.AlignmentFlag.AlignCenter)
        return label


class LazyView(QtWidgets.QWidget):
    """A tab whose view is built the first time the tab is shown (or exported).

    Used for the 3D view: building it imports vispy and probes OpenGL (a few hundred ms on
    software OpenGL), which a user who never opens the tab should not wait for. (The 3D view
    renders off-window, so the main window never holds an OpenGL widget: Qt would otherwise
    composite the whole window through OpenGL, measured at 66-82 % of a core for the GUI
    process during a 32^3 run on llvmpipe, against 26-34 % without; see app/views/volume.py.)
    """

    def __init__(self, make, name: str, parent=None):
        super().__init__(parent)
        self._make, self._name = make, name
        self.view = None
        self._layout = QtWidgets.QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)

    def build(self) -> QtWidgets.QWidget:
        if self.view is None:
            self.view = _optional_view(self._make, self._name)
            self._layout.addWidget(self.view)
        return self.view

    def showEvent(self, event) -> None:
        self.build()
        super().showEvent(event)

    def refresh(self, force: bool = False) -> bool:
        view = self.view
        return bool(view.refresh(force=force)) if view is not None and hasattr(view, "refresh") \
            else False

    def export_png(self, path):
        view = self.build()
        if hasattr(view, "export_png"):
            return view.export_png(path)
        if not view.grab().save(str(path), "PNG"):
            raise OSError(f"{path}: cannot write the PNG image")
        return str(path)


class LiveViews(QtWidgets.QWidget):
    """Field views | plots, each a tab widget, with a one-line summary of the run on top.

    The owner feeds the RunState and calls :meth:`refresh` from a timer (a few times a
    second); the tab on show on each side redraws when ``run_state.version`` moved since
    the last call, the others catch up when they are shown (each view keeps the versions
    it drew).
    """

    def __init__(self, run_state: RunState, parent=None):
        super().__init__(parent)
        self.state = run_state
        self.slices = SlicesView(run_state)
        self.traces = TracesView(run_state)
        self.health = HealthView(run_state)
        self.power = PowerView(run_state)
        self.diagnostics = DiagnosticsView(run_state)

        def volume():
            from app.views.volume import VolumeView

            return VolumeView(run_state, slices=self.slices)

        def exact():
            from app.views.exact import ExactComparisonView

            return ExactComparisonView(run_state)

        def integral():
            from app.views.integral import IntegralView

            return IntegralView(run_state)

        self.volume = LazyView(volume, "The 3D view")     # .view: the VolumeView once shown
        self.exact = _optional_view(exact, "The exact-posterior comparison")
        self.integral = _optional_view(integral, "The integral-model view")

        self.summary = QtWidgets.QLabel("")
        self.summary.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.left = QtWidgets.QTabWidget()
        self.right = QtWidgets.QTabWidget()
        for name, view in zip(LEFT_TABS, (self.slices, self.volume, self.exact, self.integral)):
            self.left.addTab(view, name)
        for name, view in zip(RIGHT_TABS, (self.traces, self.health, self.power, self.diagnostics)):
            self.right.addTab(view, name)
        self.splitter = QtWidgets.QSplitter(QtCore.Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.left)
        self.splitter.addWidget(self.right)
        self.splitter.setStretchFactor(0, 1)
        self.splitter.setStretchFactor(1, 1)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.summary)
        layout.addWidget(self.splitter, 1)
        self.slices.voxel_pinned.connect(lambda _voxel: self.traces.refresh())
        self.slices.voxel_unpinned.connect(lambda _voxel: self.traces.refresh())
        self.left.currentChanged.connect(self._left_tab_changed)
        self.right.currentChanged.connect(lambda _index: self._refresh_tabs(self.right))
        self._seen = None
        self._kind_shown = None
        self._apply_kind()
        self.refresh()

    def _left_tab_changed(self, _index: int) -> None:
        self._refresh_tabs(self.left)

    # -- which tabs apply -------------------------------------------------------------------

    def _apply_kind(self) -> None:
        """Show the tabs that apply to the run's model (integral runs have no field)."""
        kind = "integral" if self.state.model_kind == "integral" else "field"
        if kind == self._kind_shown:
            return
        self._kind_shown = kind
        for tabs in (self.left, self.right):
            for index in range(tabs.count()):
                name = tabs.tabText(index)
                tabs.setTabVisible(index, not (kind == "integral" and name in FIELD_ONLY
                                               or kind == "field" and name in INTEGRAL_ONLY))
        self.left.setCurrentWidget(self.integral if kind == "integral" else self.slices)

    def tab_names(self, side: str = "left") -> list[str]:
        """The names of the visible tabs of one side ("left" or "right")."""
        tabs = self.left if side == "left" else self.right
        return [tabs.tabText(i) for i in range(tabs.count()) if tabs.isTabVisible(i)]

    def show_tab(self, name: str) -> QtWidgets.QWidget:
        """Bring the tab called ``name`` to the front (either side); returns its view. A tab
        that does not apply to the run shown (hidden) is left in the background."""
        for tabs in (self.left, self.right):
            for index in range(tabs.count()):
                if tabs.tabText(index) == name:
                    if tabs.isTabVisible(index):
                        tabs.setCurrentIndex(index)
                    return tabs.widget(index)
        raise KeyError(f"no view called {name!r}")

    def current_views(self) -> list[tuple[str, QtWidgets.QWidget]]:
        """(name, view) of the tab on show on each side."""
        return [(tabs.tabText(tabs.currentIndex()), tabs.currentWidget())
                for tabs in (self.left, self.right)]

    # -- refreshing ---------------------------------------------------------------------------

    def refresh(self, force: bool = False) -> bool:
        """Redraw the views on show if the state changed. Returns whether anything was."""
        version = self.state.version
        if version == self._seen and not force:
            return False
        self._seen = version
        self._apply_kind()
        self._refresh_tabs(self.left, force=force)
        self._refresh_tabs(self.right, force=force)
        self.summary.setText(self._summary_text())
        return True

    def _refresh_tabs(self, tabs: QtWidgets.QTabWidget, force: bool = False) -> None:
        # a hidden tab is not fed (setData costs a copy of every series); each view keeps
        # its own versions, so the one shown next redraws exactly what it missed
        shown = tabs.currentWidget()
        for index in range(tabs.count()):
            view = tabs.widget(index)
            if not hasattr(view, "refresh") or not tabs.isTabVisible(index):
                continue
            if view is shown or force or not self.isVisible():
                view.refresh(force=force)

    def _summary_text(self) -> str:
        st = self.state
        if st.chains is None:
            return "no run"
        done = int(st.steps[-1]) + 1 if st.n_steps else 0
        phase = st.phase or ("warmup" if done < st.num_warmup else "sampling")
        parts = [f"{st.status}", f"{phase}", f"step {done}/{st.steps_total}", f"{st.chains} chains",
                 f"{st.divergences} divergences"]
        if st.steps_per_second:
            parts.append(f"{st.steps_per_second:.0f} steps/s")
        if st.error:
            parts.append(f"error: {st.error}")
        return "  |  ".join(parts)
