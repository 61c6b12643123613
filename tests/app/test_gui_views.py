"""The window's views after real runs: the integral-model demo, exports of every view.

Each test drives a real engine process (TensorFlow loads there, never here).
"""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QImage

from core.integral import posterior_quadrature
from core.store.run_store import RunReader
from core.store.run_summary import summarize_run
from support.gui import TF_BEFORE, growing_only_axes, tf_modules, tiny_case

READY_MS = 90_000
RUN_MS = 240_000


def _run_to_the_end(window, qtbot) -> None:
    qtbot.waitUntil(window.start_action.isEnabled, timeout=READY_MS)
    with qtbot.waitSignal(window.run_finished, timeout=RUN_MS) as blocker:
        window.start_action.trigger()
    assert blocker.args == ["finished"], window.last_message


def _not_blank(path) -> bool:
    image = QImage(str(path))
    if image.isNull() or image.width() < 50 or image.height() < 50:
        return False
    colours = {image.pixel(x, y) for x in range(0, image.width(), 7)
               for y in range(0, image.height(), 7)}
    return len(colours) > 20


def test_the_integral_demo_window_shows_its_posterior(make_window, qtbot, tmp_path):
    window = make_window(engine="spawn")
    assert window.open_demo("integral.toml")
    # fewer draws than the demo's, same model and data
    window.state["sampler.num_samples"] = 400
    window.state["sampler.num_warmup"] = 200
    window.state.notify_all()
    _run_to_the_end(window, qtbot)
    views = window.views
    assert views.tab_names("left") == ["Integral model"]
    assert "P(k)" not in views.tab_names("right")
    window._fill_export_menu()
    assert [a.text() for a in window.export_menu.actions() if "CSV" in a.text()] == \
        ["Diagnostics table as CSV…"]
    view = views.integral
    assert views.left.currentWidget() is view
    qtbot.waitUntil(lambda: view.band is not None and bool(view.report_text), timeout=60_000)

    # the sampled posterior of A agrees with the exact (quadrature) posterior of the same
    # discretised model, within a few Monte Carlo standard errors
    reader = RunReader(window.run_dir)
    draws = reader.param("A")
    exact = posterior_quadrature(view.spec)
    mean, sd = float(exact.mean["A"]), float(exact.sd["A"])
    ess = [r.ess_bulk for r in summarize_run(window.run_dir).rows if r.name == "A"][0]
    assert abs(draws.mean() - mean) < 4 * sd / np.sqrt(ess)
    assert 0.8 < draws.std() / sd < 1.2
    # the view's histogram holds every post-warmup draw of A
    _edges, counts = view.hists["A"]
    assert counts.sum() == draws.size
    # the model band brackets the posterior mean curve; the predictive band contains it
    band = view.band
    assert np.all(band.lo <= band.mean + 1e-12) and np.all(band.mean <= band.hi + 1e-12)
    assert np.all(band.pred_lo <= band.lo + 1e-12) and np.all(band.hi <= band.pred_hi + 1e-12)
    assert "refine" in view.report_text
    if not TF_BEFORE:
        assert tf_modules() == []


def test_every_view_exports_and_the_table_equals_the_summary(make_window, qtbot, tmp_path):
    config = tiny_case(tmp_path, warmup=10, samples=40, chunk=10)
    window = make_window(config)
    _run_to_the_end(window, qtbot)
    views = window.views
    names = views.tab_names("left") + views.tab_names("right")
    assert names == ["Slices", "3D volume", "Exact posterior", "Traces", "Pairs", "Health", "P(k)",
                     "Diagnostics"]
    window._fill_export_menu()
    assert [a.text() for a in window.export_menu.actions() if a.text()] == \
        [f"{name} as PNG…" for name in names + ["Whole window"]] + \
        ["P(k) curves as CSV…", "Diagnostics table as CSV…"]
    for name in names + ["Whole window"]:
        path = tmp_path / f"{name.replace(' ', '_').replace('(', '').replace(')', '')}.png"
        assert window.export_png(name, path), window.last_message
        assert _not_blank(path), name
    # every view has been shown: none of the window's plot axes may shrink its label space
    # (pyqtgraph's default, which can make linked plots repaint for ever)
    count, loose = growing_only_axes(window)
    assert count > 40 and loose == [], "\n".join(loose)

    # the diagnostics table, exported, is exactly what `fieldscope summary --csv` writes
    diag = views.show_tab("Diagnostics")
    qtbot.waitUntil(lambda: diag.summary is not None and not diag.busy, timeout=60_000)
    out = tmp_path / "diagnostics.csv"
    assert window.export_csv("Diagnostics", out)
    assert out.read_text() == summarize_run(window.run_dir).table_csv()
    pk = tmp_path / "pk.csv"
    assert window.export_csv("P(k)", pk)
    header = pk.read_text().splitlines()[0].split(",")
    assert header[0] == "k" and "mean" in header

    # an unwritable target: a message, no exception
    assert not window.export_png("Slices", tmp_path / "no-such-dir" / "x.png")
    assert window.last_message[0] == "Export failed"
    assert not window.export_csv("Diagnostics", tmp_path / "no-such-dir" / "x.csv")
    assert window.isVisible()
