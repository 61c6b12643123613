"""The live views of one run side by side: slices on the left, traces and health on the right."""

from __future__ import annotations

from pyqtgraph.Qt import QtCore, QtWidgets

from app.run_state import RunState
from app.views.health import HealthView
from app.views.slices import SlicesView
from app.views.traces import TracesView


class LiveViews(QtWidgets.QWidget):
    """Slices | (Traces, Health) tabs, with a one-line summary of the run on top.

    The owner feeds the RunState and calls :meth:`refresh` from a timer (a few times a
    second); children redraw only when ``run_state.version`` moved since the last call, and
    only the tab on show: the other one catches up when it is shown.
    """

    def __init__(self, run_state: RunState, parent=None):
        super().__init__(parent)
        self.state = run_state
        self.slices = SlicesView(run_state)
        self.traces = TracesView(run_state)
        self.health = HealthView(run_state)
        self.summary = QtWidgets.QLabel("")
        self.summary.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.tabs = QtWidgets.QTabWidget()
        self.tabs.addTab(self.traces, "Traces")
        self.tabs.addTab(self.health, "Health")
        self.splitter = QtWidgets.QSplitter(QtCore.Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.slices)
        self.splitter.addWidget(self.tabs)
        self.splitter.setStretchFactor(0, 1)
        self.splitter.setStretchFactor(1, 1)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.summary)
        layout.addWidget(self.splitter, 1)
        self.slices.voxel_pinned.connect(lambda _voxel: self.traces.refresh())
        self.slices.voxel_unpinned.connect(lambda _voxel: self.traces.refresh())
        self.tabs.currentChanged.connect(lambda _index: self._refresh_tabs())
        self._seen = None
        self.refresh()

    def refresh(self, force: bool = False) -> bool:
        """Redraw the children if the state changed. Returns whether anything was redrawn."""
        version = self.state.version
        if version == self._seen and not force:
            return False
        self._seen = version
        self.slices.refresh(force=force)
        self._refresh_tabs(force=force)
        self.summary.setText(self._summary_text())
        return True

    def _refresh_tabs(self, force: bool = False) -> None:
        # a hidden tab is not fed (setData costs a copy of every series); each view keeps
        # its own versions, so the one shown next redraws exactly what it missed
        shown = self.tabs.currentWidget()
        for view in (self.traces, self.health):
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
