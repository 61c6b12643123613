"""The live views of one run side by side: field views on the left, plots on the right.

The tabs are the registry's (``app.views.registry.VIEWS``): left, the field views (Slices,
3D volume, Exact posterior for field runs; Integral model for integral runs); right, the
plots (Traces, Health, P(k), Diagnostics; P(k) only for field runs). A tab that does not
apply to the run shown is hidden, not disabled.
"""

from __future__ import annotations

from pyqtgraph.Qt import QtCore, QtWidgets

from app.state.run_state import RunState
from app.views.base import FIELD, FIELD_VIEWS, MODEL_KINDS, PLOTS, RunView
from app.views.diagnostics import DiagnosticsView
from app.views.exact import ExactComparisonView
from app.views.health import HealthView
from app.views.integral import IntegralView
from app.views.power import PowerView
from app.views.registry import VIEWS
from app.views.slices import SlicesView
from app.views.traces import TracesView
from core.store.run_summary import divergence_text

__all__ = ["LiveViews"]

#: LiveViews' sides and the view group each shows
SIDES = {"left": FIELD_VIEWS, "right": PLOTS}


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
        # one attribute per view (ViewEntry.name); the lazy 3D view is its LazyView (.view:
        # the VolumeView once shown), a view that failed to build its UnavailableView
        self.slices: SlicesView
        self.volume: RunView
        self.exact: ExactComparisonView | RunView
        self.integral: IntegralView | RunView
        self.traces: TracesView
        self.health: HealthView
        self.power: PowerView
        self.diagnostics: DiagnosticsView
        #: title -> the tab's widget, in tab order
        self.views: dict[str, RunView] = {}
        for entry in VIEWS:
            view = entry.build(run_state, self.views)
            self.views[entry.title] = view
            setattr(self, entry.name, view)

        self.summary = QtWidgets.QLabel("")
        self.summary.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.left = QtWidgets.QTabWidget()
        self.right = QtWidgets.QTabWidget()
        self.tabs = {FIELD_VIEWS: self.left, PLOTS: self.right}
        for title, view in self.views.items():
            self.tabs[view.group].addTab(view, title)
        self.splitter = QtWidgets.QSplitter(QtCore.Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.left)
        self.splitter.addWidget(self.right)
        self.splitter.setStretchFactor(0, 1)
        self.splitter.setStretchFactor(1, 1)
        # half and half from the start: a splitter left to itself sizes its sides by their
        # size hints, and the slices' controls then leave the plots a third of the width,
        # where their tick labels, legends and titles do not fit (a remembered layout
        # restores its own split later)
        self.splitter.setSizes([1000, 1000])
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
        kind = self.state.model_kind if self.state.model_kind in MODEL_KINDS else FIELD
        if kind == self._kind_shown:
            return
        self._kind_shown = kind
        for tabs in (self.left, self.right):
            applies = [tabs.widget(index).applies_to(kind) for index in range(tabs.count())]
            # an applicable tab to the front before any is hidden: hiding the tab on show
            # shows its neighbour, which for the lazy 3D view means building it for nothing
            # (and its page then widens the whole side)
            if True in applies and not applies[tabs.currentIndex()]:
                tabs.setCurrentIndex(applies.index(True))
            for index, shown in enumerate(applies):
                tabs.setTabVisible(index, shown)
        # the first field view that applies comes to the front (Slices, or Integral model); a
        # model file's scalar model has none: the left side is hidden
        first = next((view for view in self.views.values()
                      if view.group == FIELD_VIEWS and view.applies_to(kind)), None)
        self.left.setVisible(first is not None)
        if first is not None:
            self.left.setCurrentWidget(first)

    def tab_names(self, side: str = "left") -> list[str]:
        """The names of the visible tabs of one side ("left" or "right")."""
        tabs = self.tabs[SIDES[side]]
        return [tabs.tabText(i) for i in range(tabs.count()) if tabs.isTabVisible(i)]

    def show_tab(self, name: str) -> RunView:
        """Bring the tab called ``name`` to the front (either side); returns its view. A tab
        that does not apply to the run shown (hidden) is left in the background."""
        view = self.view(name)
        tabs = self.tabs[view.group]
        index = tabs.indexOf(view)
        if tabs.isTabVisible(index):
            tabs.setCurrentIndex(index)
        return view

    def view(self, name: str) -> RunView:
        """The tab's widget called ``name``; KeyError if there is none."""
        try:
            return self.views[name]
        except KeyError:
            raise KeyError(f"no view called {name!r}") from None

    def current_views(self) -> list[tuple[str, RunView]]:
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
            if not tabs.isTabVisible(index):
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
                 divergence_text(st.sampling_divergences, st.warmup_divergences)]
        if st.steps_per_second:
            parts.append(f"{st.steps_per_second:.0f} steps/s")
        if st.error:
            parts.append(f"error: {st.error}")
        return "  |  ".join(parts)
