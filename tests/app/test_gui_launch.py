"""Launching the app as a user does: `fieldscope gui ...`, the demo, screenshot mode."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from PySide6.QtGui import QImage

from app import cli, gui
from core.store.run_store import RunReader
from support.gui import tiny_case


def launch(args, tmp_path, xla_cache, timeout=240):
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "xdg"),
               TF_XLA_FLAGS=f"--tf_xla_persistent_cache_directory={xla_cache}")
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=tmp_path)


def shown_after(stderr: str) -> float:
    match = re.search(r"window shown ([0-9.]+) s after start", stderr)
    assert match, stderr[-2000:]
    return float(match.group(1))


def test_screenshot_of_a_run(tmp_path, xla_cache):
    config = tiny_case(tmp_path / "case")
    png = tmp_path / "shot.png"
    out = launch(["gui", str(config), "--run", "--screenshot", str(png), "--quit-after", "0.5"],
                 tmp_path, xla_cache)
    assert out.returncode == 0, out.stderr[-3000:]
    # the window appears (~1 s on an idle machine); its speed is measured by bench/startup.py,
    # a loose bound here only catches a window that hangs behind a blocking load
    assert shown_after(out.stderr) < 30.0
    image = QImage(str(png))
    assert image.width() >= 1000 and image.height() >= 700
    runs = list((config.parent / "runs").iterdir())
    assert len(runs) == 1
    reader = RunReader(runs[0])
    assert reader.progress["draws"] > 0 and reader.status in ("finished", "stopped")
    # and the stored run opens again: `fieldscope gui RUNDIR`
    out = launch(["gui", str(runs[0]), "--screenshot", str(tmp_path / "run.png"),
                  "--quit-after", "0"], tmp_path, xla_cache)
    assert out.returncode == 0, out.stderr[-3000:]
    assert QImage(str(tmp_path / "run.png")).width() >= 1000


def test_no_argument_opens_the_demo(tmp_path, xla_cache):
    png = tmp_path / "demo.png"
    out = launch(["gui", "--screenshot", str(png), "--quit-after", "0"], tmp_path, xla_cache)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "xdg" / "fieldscope" / "demo" / "field.toml").exists()
    assert QImage(str(png)).width() >= 1000


def test_bad_targets_and_no_display_are_one_line_errors(tmp_path, monkeypatch, capsys):
    assert gui.main([str(tmp_path / "nothing.toml")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert gui.main([str(tmp_path)]) == 2
    assert "without a run store" in capsys.readouterr().err
    assert gui.main(["--screenshot", "x.png"]) == 2
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    assert gui.main([]) == 2
    assert "no display" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["fieldscope"])
    assert cli.main() == 0                       # `fieldscope` alone: help, and why
    out = capsys.readouterr().out
    assert "gui" in out and "no display found" in out


def test_the_application_icon_is_a_real_image(qapp):
    """resources/fieldscope.svg renders (Qt's SVG plugin reads it) at the sizes a desktop asks for."""
    from app.gui import ICON_PATH, application_icon

    assert ICON_PATH.is_file()
    icon = application_icon()
    assert icon is not None
    for size in (16, 48, 256):
        image = icon.pixmap(size, size).toImage()
        assert image.width() == size and image.height() == size
        # not blank: the field's colours differ across the image
        colours = {image.pixel(x, y) for x in range(0, size, max(1, size // 8))
                   for y in range(0, size, max(1, size // 8))}
        assert len(colours) > 4
