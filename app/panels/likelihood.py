"""The Likelihood panel: Gaussian, Poisson-lognormal or a model file's, smoothing, mean count."""

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
            ("poisson_lognormal: counts ~ Poisson(nbar exp(field))", "poisson_lognormal"),
            ("python: log_likelihood(field, params, data) of your model file", "python")],
            tip="likelihood.kind; python: the Model file tab picks the file and its parameters")
        self.smoothing = self._number("likelihood.smoothing_scale", "Smoothing scale R",
                                      tip="likelihood.smoothing_scale: a Gaussian beam exp(-(kR)^2/2); 0 = none")
        self.field_mean = self._number("likelihood.field_mean", "Field mean",
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
        built_in = s["likelihood.kind"] != "python"       # a model file writes its beam and mean
        for widget, key, visible in ((self.mean_count, "likelihood.mean_count", poisson),
                                     (self.smoothing, "likelihood.smoothing_scale", built_in),
                                     (self.field_mean, "likelihood.field_mean", built_in)):
            self.form.setRowVisible(widget, visible)
            widget.setHidden(not visible)
            if not visible:
                self.form.setRowVisible(self.messages[key], False)


