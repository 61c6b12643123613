"""The Likelihood panel: Gaussian or Poisson-lognormal, smoothing, mean count."""

from __future__ import annotations

from app.panels.base import SetupPanel
from app.panels.binding import _alive
from app.state.config_state import ConfigState

__all__ = ["LikelihoodPanel"]

class LikelihoodPanel(SetupPanel):
    title = "Likelihood"
    keys = ("likelihood.kind", "likelihood.smoothing_scale", "likelihood.field_mean",
            "likelihood.mean_count")

    def __init__(self, state: ConfigState, parent=None):
        super().__init__(state, parent)
        self._choice("likelihood.kind", "Kind", [
            ("gaussian: data = field + noise", "gaussian"),
            ("poisson_lognormal: counts ~ Poisson(nbar exp(field))", "poisson_lognormal")],
            tip="likelihood.kind")
        self._number("likelihood.smoothing_scale", "Smoothing scale R",
                     tip="likelihood.smoothing_scale: a Gaussian beam exp(-(kR)^2/2); 0 = none")
        self._number("likelihood.field_mean", "Field mean",
                     tip="likelihood.field_mean: the fixed mean added to the field")
        self.mean_count = self._number("likelihood.mean_count", "Mean count nbar",
                                       tip="likelihood.mean_count (poisson_lognormal only)")
        self.body.addStretch(1)
        state.connect("likelihood.kind", lambda _v: self.refresh())
        state.connect("model.kind", lambda _v: self.refresh())
        self.refresh()

    def refresh(self) -> None:
        if not _alive(self.mean_count):
            return
        s = self.state
        self.setEnabled(s["model.kind"] == "field")
        poisson = s["likelihood.kind"] == "poisson_lognormal"
        self.form.setRowVisible(self.mean_count, poisson)
        self.mean_count.setHidden(not poisson)
        if not poisson:
            self.form.setRowVisible(self.messages["likelihood.mean_count"], False)


