"""The Sampler panel's disk cost next to "Keep every": the run store's own estimate (the
figure the engine's disk check refuses a run with), updated as the settings change."""

from __future__ import annotations

import dataclasses

from PySide6.QtWidgets import QLineEdit

from core.config import load_config
from core.run import resources
from core.store.run_store import field_draw_disk_bytes
from support.gui import tiny_case


def test_the_disk_cost_follows_thin_and_agrees_with_the_disk_check(make_window, qtbot, tmp_path):
    config_path = tiny_case(tmp_path, shape=(40, 8, 8), samples=20, thin=2)
    window = make_window(config_path, engine=None)
    panel = window.panel["sampler"]
    config = load_config(config_path)

    def expected(cfg):
        est = resources.estimate_for_config(cfg, (40, 8, 8))      # what the engine checks
        return est, resources.format_bytes(est.store_bytes)

    est, total = expected(config)
    text = panel.disk_cost.text()
    assert est.field_draw_bytes == field_draw_disk_bytes((40, 8, 8)) > 40 * 8 * 8 * 4
    assert f"{resources.format_bytes(est.field_draw_bytes)} per kept field draw of a chain" in text
    assert "10 kept per chain (every 2nd draw)" in text and f"store ≈ {total} in all" in text
    edit = window.findChild(QLineEdit, "sampler.thin")
    edit.setFocus()
    edit.selectAll()
    qtbot.keyClicks(edit, "5")
    assert window.state["sampler.thin"] == 5
    est5, total5 = expected(dataclasses.replace(config, sampler=dataclasses.replace(config.sampler, thin=5)))
    assert est5.store_bytes < est.store_bytes
    text = panel.disk_cost.text()
    assert "4 kept per chain (every 5th draw)" in text and f"store ≈ {total5} in all" in text
    assert f"{resources.format_bytes(4 * 2 * est.field_draw_bytes)} of field draws" in text
