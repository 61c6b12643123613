"""The registry of live views: which views there are, in which order, and how each is built.

``VIEWS`` lists one ``ViewEntry`` per view, field views (left tabs) first, then plots
(right tabs), each group in tab order. ``LiveViews`` builds its two tab groups from it; the
main window (Export menu) and ``fieldscope gui --show`` take the views' titles from it.
A view's title, group, model kinds and CSV export are its class's (``app.views.base.RunView``);
the registry adds how it is built:

- ``factory(run_state, built)`` makes the view; ``built`` maps the titles of the views
  made so far to them (the 3D view shares the slices' settings);
- ``lazy``: built the first time its tab is shown, behind a ``LazyView`` (the 3D view:
  vispy and an OpenGL probe cost a few hundred ms that a user who never opens it should
  not pay);
- ``optional``: the view's name in a message; a failure to build it (on this machine)
  puts an ``UnavailableView`` with the reason in its place and the app goes on. A view
  that is not optional fails the live views as a whole (the main window says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from app.state.run_state import RunState
from app.views.base import LazyView, RunView, UnavailableView
from app.views.diagnostics import DiagnosticsView
from app.views.exact import ExactComparisonView
from app.views.health import HealthView
from app.views.integral import IntegralView
from app.views.pairs import PairPlotView
from app.views.power import PowerView
from app.views.slices import SlicesView
from app.views.traces import TracesView
from app.views.volume import VolumeView

__all__ = ["VIEWS", "ViewEntry", "entry", "titles"]


def _plain(view_class: type[RunView]) -> Callable[[RunState, Mapping[str, RunView]], RunView]:
    return lambda run_state, _built: view_class(run_state)


@dataclass(frozen=True)
class ViewEntry:
    """One view of the registry: its class, how to make it, when, and what a failure means.

    ``name`` is the attribute of ``LiveViews`` that holds the view (``views.slices``).
    """

    name: str
    view_class: type[RunView]
    factory: Callable[[RunState, Mapping[str, RunView]], RunView]
    lazy: bool = False
    optional: str | None = None

    @property
    def title(self) -> str:
        return self.view_class.title

    @property
    def group(self) -> str:
        return self.view_class.group

    @property
    def kinds(self) -> frozenset[str]:
        return self.view_class.kinds

    def applies_to(self, model_kind: str) -> bool:
        """Whether the view applies to a run of ``model_kind`` (see ``RunView.applies_to``)."""
        return model_kind in self.kinds

    def make(self, run_state: RunState, built: Mapping[str, RunView]) -> RunView:
        """The view now (an ``UnavailableView`` with the reason when an optional one fails)."""
        if self.optional is None:
            return self.factory(run_state, built)
        try:
            return self.factory(run_state, built)
        except Exception as exc:    # any failure of an optional view must not stop the app
            return UnavailableView(
                run_state, self.title, self.group, self.kinds,
                f"{self.optional} is not available here: {type(exc).__name__}: {exc}")

    def build(self, run_state: RunState, built: Mapping[str, RunView]) -> RunView:
        """The tab's widget: the view, or a ``LazyView`` that makes it on first show."""
        if not self.lazy:
            return self.make(run_state, built)
        return LazyView(run_state, lambda: self.make(run_state, built), title=self.title,
                        group=self.group, kinds=self.kinds,
                        csv_contents=self.view_class.csv_contents)


VIEWS: tuple[ViewEntry, ...] = (
    ViewEntry("slices", SlicesView, _plain(SlicesView)),
    ViewEntry("volume", VolumeView,
              lambda run_state, built: VolumeView(run_state, slices=built[SlicesView.title]),
              lazy=True, optional="The 3D view"),
    ViewEntry("exact", ExactComparisonView, _plain(ExactComparisonView),
              optional="The exact-posterior comparison"),
    ViewEntry("integral", IntegralView, _plain(IntegralView), optional="The integral-model view"),
    ViewEntry("traces", TracesView, _plain(TracesView)),
    ViewEntry("pairs", PairPlotView, _plain(PairPlotView)),
    ViewEntry("health", HealthView, _plain(HealthView)),
    ViewEntry("power", PowerView, _plain(PowerView)),
    ViewEntry("diagnostics", DiagnosticsView, _plain(DiagnosticsView)),
)



def titles(group: str | None = None) -> tuple[str, ...]:
    """The views' titles in tab order, of one group (FIELD_VIEWS, PLOTS) or of all."""
    return tuple(e.title for e in VIEWS if group is None or e.group == group)


def entry(title: str) -> ViewEntry:
    """The entry of the view called ``title``; KeyError if there is none."""
    for e in VIEWS:
        if e.title == title:
            return e
    raise KeyError(f"no view called {title!r}")
