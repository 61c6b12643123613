"""The one surface every live view of a run has (``RunView``), and its two stand-ins.

A view is a QWidget over one ``app.state.run_state.RunState``. What the rest of the app
(``LiveViews``, the main window's Export menu, ``fieldscope gui --show``) may ask of a view
is defined here, once: its ``title`` (the tab's text, unique among views), its ``group``
(``FIELD_VIEWS``, shown on the left, or ``PLOTS``, on the right), the model kinds it
applies to (``applies_to``), ``refresh(force)`` and ``export_png(path)``, and, for the
views that have one, ``export_csv(path)`` (``csv_contents`` says what it writes, None
when the view has no CSV export). A view that cannot do something says so here (the
default refuses, or does the plain thing), never by a missing attribute.

Every view is a plain QWidget (the 3D view renders off-window and shows images in one,
see ``app.views.volume``), so the base is a QWidget subclass, not a mixin.

``LazyView`` stands in for a view built the first time its tab is shown; ``UnavailableView``
takes the place of a view that could not be built on this machine, with the reason.
"""

from __future__ import annotations

from typing import Callable, ClassVar

from pyqtgraph.Qt import QtCore, QtGui, QtWidgets

from app.state.run_state import RunState
from core.config.schema import MODEL_KINDS

__all__ = ["FIELD", "FIELD_VIEWS", "INTEGRAL", "PYTHON", "LazyView", "MODEL_KINDS", "PLOTS", "RunView", "TracesFedView",
           "UnavailableView", "save_png"]

#: the view groups: field views (left tabs) and plots (right tabs)
FIELD_VIEWS = "field views"
PLOTS = "plots"
#: the model kinds a view may apply to (``RunState.model_kind``; an unknown kind counts as a
#: field run): the field model, the integral model, a model file's scalar model
FIELD, INTEGRAL, PYTHON = MODEL_KINDS


def save_png(image: QtGui.QImage | QtGui.QPixmap, path) -> str:
    """Write ``image`` to ``path`` as PNG; returns the path as a string. Raises OSError
    naming the file when it cannot be written."""
    if not image.save(str(path), "PNG"):
        raise OSError(f"{path}: could not write the PNG image")
    return str(path)


class RunView(QtWidgets.QWidget):
    """A live view of one run: a QWidget with the view surface the app relies on.

    Subclasses set ``title``, ``group`` and ``kinds`` (class attributes) and implement
    ``refresh``; ``export_png`` saves the widget as shown unless the subclass draws
    otherwise; ``export_csv`` exists for every view and refuses unless the subclass has
    a table to write (then it sets ``csv_contents``).
    """

    #: the tab's text, unique among the views; also the view's name in menus and --show
    title: ClassVar[str] = ""
    #: FIELD_VIEWS or PLOTS
    group: ClassVar[str] = PLOTS
    #: the model kinds (FIELD, INTEGRAL, PYTHON) the view applies to; elsewhere its tab is hidden
    kinds: ClassVar[frozenset[str]] = frozenset(MODEL_KINDS)
    #: what ``export_csv`` writes, for the Export menu ("P(k) curves"); None: no CSV export
    csv_contents: ClassVar[str | None] = None

    def __init__(self, run_state: RunState, parent=None):
        super().__init__(parent)
        self.state = run_state

    def applies_to(self, model_kind: str) -> bool:
        """Whether the view shows anything for a run of ``model_kind`` (FIELD, INTEGRAL, PYTHON)."""
        return model_kind in self.kinds

    def refresh(self, force: bool = False) -> bool:
        """Redraw what changed in the state since the last call (everything if ``force``).
        Returns whether anything was redrawn."""
        raise NotImplementedError(f"{type(self).__name__}.refresh")

    def export_png(self, path) -> str:
        """Save the view as it is shown as PNG; returns the path. Raises OSError naming the
        file when it cannot be written."""
        return save_png(self.grab(), path)

    def export_csv(self, path) -> None:
        """Write the view's table as CSV (views with ``csv_contents``). Raises ValueError
        for a view without one."""
        raise ValueError(f"{self.title} has no CSV export")

    def figure_parts(self) -> list:
        """The plots that make the view's figure, where they are (``app.views.figure``): its
        plot widgets; a view drawn otherwise (the 3D view) gives its image."""
        from app.views.figure import figure_parts

        return figure_parts(self)

    def export_image(self, path, dpi: int | None = None) -> str:
        """The view's plots alone as PNG at ``dpi`` (default 300), SVG or PDF, by ``path``'s
        suffix (``app.views.figure.export_figure``); returns the path."""
        from app.views.figure import DEFAULT_DPI, export_figure

        return export_figure(self.figure_parts(), path, dpi or DEFAULT_DPI, title=self.title)


class TracesFedView(RunView):
    """A view of plots fed from the run's traces (Traces, Pairs, Health): a graphics layout
    filling the view, its plot items made by ``_build`` once per run (``RunState.layout_version``),
    redrawn when the traces change (``_traces_changed``)."""

    def __init__(self, run_state: RunState, parent=None):
        super().__init__(run_state, parent)
        import pyqtgraph as pg

        self.graphics = pg.GraphicsLayoutWidget()
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.graphics)
        self._seen = (-1, -1)             # (layout_version, trace_version) drawn
        self._layout_seen = -1

    def _build(self) -> None:
        raise NotImplementedError

    def _traces_changed(self, force: bool = False) -> bool:
        """Build again when the run changed, then whether the traces changed since the last
        draw (or ``force``)."""
        st = self.state
        if st.layout_version != self._layout_seen:
            self._build()
            self._layout_seen = st.layout_version
        key = (st.layout_version, st.trace_version)
        if key == self._seen and not force:
            return False
        self._seen = key
        return True


class UnavailableView(RunView):
    """Takes the place of a view that could not be built here (the 3D view needs OpenGL):
    a label with the reason; it never redraws and exports what it shows."""

    def __init__(self, run_state: RunState, title: str, group: str, kinds, reason: str,
                 parent=None):
        super().__init__(run_state, parent)
        self.title, self.group, self.kinds = title, group, frozenset(kinds)
        self.label = QtWidgets.QLabel(reason)
        self.label.setWordWrap(True)
        self.label.setAlignment(QtCore.Qt.AlignmentFlag.AlignCenter)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.label)

    def refresh(self, force: bool = False) -> bool:
        """Nothing to redraw."""
        return False


class LazyView(RunView):
    """A tab whose view is built the first time the tab is shown (or exported).

    Used for the 3D view: building it imports vispy and probes OpenGL (a few hundred ms on
    software OpenGL), which a user who never opens the tab should not wait for. (The 3D view
    renders off-window, so the main window never holds an OpenGL widget: Qt would otherwise
    composite the whole window through OpenGL, measured at 66-82 % of a core for the GUI
    process during a 32^3 run on llvmpipe, against 26-34 % without; see app/views/volume.py.)

    ``build`` is the registry's builder (it returns the view, or an ``UnavailableView``);
    ``view`` is None until the first show. Title, group, kinds and CSV export are the built
    view's, given beforehand by the registry.
    """

    def __init__(self, run_state: RunState, build: Callable[[], RunView], *, title: str,
                 group: str, kinds, csv_contents: str | None = None, parent=None):
        super().__init__(run_state, parent)
        self.title, self.group, self.kinds = title, group, frozenset(kinds)
        self.csv_contents = csv_contents
        self._make = build
        self.view: RunView | None = None
        self._layout = QtWidgets.QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)

    def build(self) -> RunView:
        """The view, built now if it was not yet."""
        if self.view is None:
            self.view = self._make()
            self._layout.addWidget(self.view)
        return self.view

    def showEvent(self, event) -> None:
        self.build()
        super().showEvent(event)

    def refresh(self, force: bool = False) -> bool:
        """The view's refresh once built; before, nothing to redraw."""
        return bool(self.view.refresh(force=force)) if self.view is not None else False

    def export_png(self, path) -> str:
        return self.build().export_png(path)

    def figure_parts(self) -> list:
        return self.build().figure_parts()

    def export_csv(self, path) -> None:
        self.build().export_csv(path)
