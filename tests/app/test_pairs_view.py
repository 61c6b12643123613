"""The pair plot: post-warmup draws only, each parameter's histogram a density of its draws, every
pair's scatter the draws of both (thinned alike), a note when nothing is sampled or too much is."""

from __future__ import annotations

import numpy as np

from app.state.run_state import RunState
from app.views.pairs import MAX_PARAMETERS, MAX_POINTS, PairPlotView
from support.runs import view_chunk


def _state(names, warmup=10, samples=300, chains=2, seed=0):
    rng = np.random.default_rng(seed)
    state = RunState()
    state.reset({"chains": chains, "param_names": list(names), "num_warmup": warmup, "num_samples": samples,
                 "model_kind": "python", "grid_shape": None})
    # warmup draws far away: a pair plot that kept them would show them
    state.on_event(view_chunk(0, chains=chains, n_steps=warmup, phase="warmup",
                              params={n: np.full((chains, warmup), 1e6) for n in names}))
    draws = {n: rng.normal(i, 1.0 + i, (chains, samples)) for i, n in enumerate(names)}
    state.on_event(view_chunk(warmup, chains=chains, n_steps=samples, params=draws))
    return state, draws


def test_histograms_and_scatter_show_the_post_warmup_draws(qtbot):
    state, draws = _state(["A", "b1", "sigma"])
    view = PairPlotView(state)
    qtbot.addWidget(view)
    assert view.refresh(force=True)
    assert not view.hint.isVisible()
    for name, curve in view.diagonal.items():
        edges, density = curve.getOriginalDataset()
        assert np.isclose(np.sum(density * np.diff(edges)), 1.0)     # a density
        assert edges[0] == draws[name].min() and edges[-1] == draws[name].max()   # no warmup draw
    assert set(view.scatter) == {("A", "b1"), ("A", "sigma"), ("b1", "sigma")}
    x, y = view.scatter[("A", "sigma")].getData()
    np.testing.assert_array_equal(x, draws["A"].reshape(-1))
    np.testing.assert_array_equal(y, draws["sigma"].reshape(-1))
    assert not view.refresh()                                          # nothing new: nothing drawn


def test_many_draws_are_thinned_and_many_parameters_are_cut_with_a_note(qtbot):
    names = [f"p{i}" for i in range(MAX_PARAMETERS + 2)]
    state, draws = _state(names, samples=3000)
    view = PairPlotView(state)
    qtbot.addWidget(view)
    view.refresh(force=True)
    assert view.names == names[:MAX_PARAMETERS]
    assert f"the first {MAX_PARAMETERS} of {len(names)} sampled parameters" in view.hint.toPlainText()
    x, _ = view.scatter[("p0", "p1")].getData()
    assert MAX_POINTS // 2 <= x.size <= MAX_POINTS
    np.testing.assert_array_equal(x, draws["p0"][:, ::3].reshape(-1))


def test_a_run_with_nothing_sampled_says_so(qtbot):
    state = RunState()
    state.reset({"chains": 2, "param_names": [], "num_warmup": 5, "num_samples": 5, "model_kind": "field",
                 "grid_shape": (4, 4, 4)})
    view = PairPlotView(state)
    qtbot.addWidget(view)
    view.refresh(force=True)
    assert "no sampled parameter" in view.hint.toPlainText()
