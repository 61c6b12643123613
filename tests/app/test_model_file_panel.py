"""The Model file panel: a model file's PARAMETERS listed from its text (never executed in the
window's process), overrides written to the config's [parameters] (not to the file), the file
read again when it changes on disk, and check-model run in a process of its own."""

from __future__ import annotations

import os
import time

from PySide6.QtWidgets import QComboBox

from core.config import load_config
from support.model_files import copy_example

MARKER = "executed.txt"


def _panel(window):
    return window.panel["model file"]


def _rows(panel) -> dict[str, tuple[str, str]]:
    t = panel.table
    return {t.item(r, 0).text(): (t.item(r, 1).text(), t.item(r, 2).text()) for r in range(t.rowCount())}


def test_parameters_are_listed_from_the_text_and_overrides_go_to_the_config(make_window, qtbot, tmp_path):
    path = copy_example("trapezoid_integral", tmp_path)
    model = tmp_path / "model.py"
    # a side effect at import: the window must never run it
    model.write_text(f"open({str(tmp_path / MARKER)!r}, 'w').write('ran')\n" + model.read_text())
    window = make_window(path, engine=None)
    panel = _panel(window)
    assert window.errors == {}
    assert _rows(panel) == {"A": ('{ dist = "normal", loc = 0.0, scale = 0.5 }', ""), "variance": ("0.25", "")}
    assert window.findChild(QComboBox, "model.kind").currentData() == "python"

    cell = panel.table.item(0, 2)
    cell.setText('{ dist = "normal", loc = 0.1, scale = 0.03 }')
    assert window.state["parameters"] == {"A": {"dist": "normal", "loc": 0.1, "scale": 0.03}}
    assert window.errors == {} and window.windowTitle().endswith("*")
    panel.table.item(1, 2).setText('{ dist = "gamma" }')
    assert "parameters.variance" in window.errors and "gamma" in panel.parameters_message.text()
    panel.table.item(1, 2).setText("0.3")
    assert window.errors == {}
    out = tmp_path / "saved.toml"
    assert window.save_config(out)
    saved = load_config(out)
    assert saved.parameters["variance"] == 0.3 and saved.parameters["A"].loc == 0.1
    assert '"A": {"dist": "normal", "loc": 0.0, "scale": 0.5}' in model.read_text()   # never written

    # the file changes on disk: read again, a parameter the config overrides but the file lost is named
    time.sleep(0.05)
    model.write_text(model.read_text().replace('"variance": 0.25', '"sigma2": 0.25'))
    os.utime(model)
    qtbot.waitUntil(lambda: "sigma2" in _rows(panel), timeout=10_000)
    window.validate()
    assert "has no parameter 'variance'" in window.errors["parameters.variance"]
    assert not (tmp_path / MARKER).exists()


def test_check_model_runs_in_its_own_process_and_shows_the_report(make_window, qtbot, tmp_path):
    path = copy_example("beam_noise_map", tmp_path)
    window = make_window(path, engine=None)
    panel = _panel(window)
    assert window.state["likelihood.kind"] == "python" and window.errors == {}
    assert panel.check_model()
    qtbot.waitUntil(lambda: panel.process is None, timeout=240_000)
    assert "model file OK" in panel.report.toPlainText(), panel.report.toPlainText()
    model = tmp_path / "model.py"
    model.write_text(model.read_text().replace("def log_likelihood(field, params, data):",
                                               "def log_likelihood(field, params, data):\n    1 / 0"))
    assert panel.check_model()
    qtbot.waitUntil(lambda: panel.process is None, timeout=240_000)
    report = panel.report.toPlainText()
    assert f"PROBLEM: {model}:" in report and "ZeroDivisionError: division by zero (in log_likelihood)" in report
    assert not (tmp_path / ".fieldscope-check-model.toml").exists()
    # another model file (here: none) is shown: the report of this one goes
    window.state["likelihood.kind"] = "gaussian"
    assert panel.report.toPlainText() == ""
