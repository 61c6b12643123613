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


def _check_figures(window, name, folder):
    """The view's plots alone (no buttons or boxes) as PNG at two resolutions, SVG and PDF."""
    import xml.etree.ElementTree as ET

    from pyqtgraph.Qt import QtGui

    slug = name.replace(" ", "_").replace("(", "").replace(")", "")
    window.views.show_tab(name)
    if not window.views.view(name).figure_parts():      # a view showing only its message
        assert not window.export_image(name, folder / f"{slug}.png")
        assert "shows no plot" in window.last_message[1]
        return
    sizes = {}
    for dpi in (96, 192):
        path = folder / f"{slug}-{dpi}.png"
        assert window.export_image(name, path, dpi), window.last_message
        image = QtGui.QImage(str(path))
        assert _not_blank(path), name
        assert round(image.dotsPerMeterX() * 0.0254) == dpi
        sizes[dpi] = (image.width(), image.height())
    assert abs(sizes[192][0] - 2 * sizes[96][0]) <= 1 and abs(sizes[192][1] - 2 * sizes[96][1]) <= 1, sizes
    view = window.views.view(name)
    parts = view.figure_parts()
    assert parts, name
    # the figure is the plots' box: no larger than the view, smaller where the view has controls
    assert sizes[96][0] <= view.width() and sizes[96][1] <= view.height(), (name, sizes[96], view.size())
    if name in ("Slices", "P(k)"):
        assert sizes[96][0] * sizes[96][1] < view.width() * view.height(), name
    svg = folder / f"{slug}.svg"
    assert window.export_image(name, svg), window.last_message
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    if name != "3D volume":              # vector plots carry their text (axis labels, titles)
        assert any(el.tag.endswith("text") and "".join(el.itertext()).strip() for el in root.iter()), name
    pdf = folder / f"{slug}.pdf"
    assert window.export_image(name, pdf), window.last_message
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF") and b"/Type /Page" in data and len(data) > 1000, name


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
        [f"{name} as image (PNG, SVG, PDF)…" for name in names] + ["Whole window as PNG…"] + \
        ["P(k) curves as CSV…", "Diagnostics table as CSV…"]
    for name in names + ["Whole window"]:
        path = tmp_path / f"{name.replace(' ', '_').replace('(', '').replace(')', '')}.png"
        assert window.export_png(name, path), window.last_message
        assert _not_blank(path), name
    for name in names:
        _check_figures(window, name, tmp_path)
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
    assert header[0] == "k [h/Mpc]" and "mean [(Mpc/h)^3]" in header and "mode_count" in header

    # an unwritable target: a message, no exception
    assert not window.export_png("Slices", tmp_path / "no-such-dir" / "x.png")
    assert window.last_message[0] == "Export failed"
    assert not window.export_csv("Diagnostics", tmp_path / "no-such-dir" / "x.csv")
    assert not window.export_image("P(k)", tmp_path / "no-such-dir" / "x.pdf")
    assert "folder does not exist" in window.last_message[1]
    assert not window.export_image("P(k)", tmp_path / "pk.jpg")
    assert ".png, .svg or .pdf" in window.last_message[1]
    assert not window.export_image("P(k)", tmp_path / "pk.png", dpi=5000)
    assert "50 to 1200" in window.last_message[1]
    assert window.isVisible()
