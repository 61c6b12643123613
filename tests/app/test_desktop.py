"""Desktop integration: the icons, the launcher, ``fieldscope install-desktop [--uninstall]``."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app import cli, desktop

REPO = Path(__file__).resolve().parents[2]
RESOURCES = REPO / "resources"
VALIDATE = shutil.which("desktop-file-validate")


def _render_icons():
    spec = importlib.util.spec_from_file_location("render_icons", RESOURCES / "render_icons.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _validate(path: Path) -> str:
    if VALIDATE is None:
        pytest.skip("desktop-file-validate is not installed (Debian package desktop-file-utils)")
    out = subprocess.run([VALIDATE, str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return (out.stdout + out.stderr).strip()


def _exec_args(value: str) -> list[str]:
    """An ``Exec`` value split as the Desktop Entry spec says: the string-value escape
    (``\\\\`` is one backslash) first, then arguments separated by spaces, a double-quoted
    argument taking backslash-escaped ``"``, backquote, ``$`` and ``\\``."""
    value = value.replace("\\\\", "\\")
    args, i = [], 0
    while i < len(value):
        if value[i] == " ":
            i += 1
            continue
        if value[i] == '"':
            arg, i = "", i + 1
            while value[i] != '"':
                if value[i] == "\\" and value[i + 1] in '"`$\\':
                    i += 1
                arg, i = arg + value[i], i + 1
            args.append(arg)
            i += 1
        else:
            end = value.find(" ", i)
            end = len(value) if end < 0 else end
            args.append(value[i:end])
            i = end
    return args


def _files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


def _entry(path: Path) -> dict[str, str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "[Desktop Entry]"
    return dict(line.split("=", 1) for line in lines[1:] if "=" in line)


def test_the_png_icons_are_the_svg_rendered(qapp):
    """Every hicolor size is committed, and the 48 px one is exactly what render_icons.py
    draws from the SVG now (a changed SVG needs its PNGs rendered again)."""
    from PySide6.QtGui import QImage

    render_icons = _render_icons()
    assert render_icons.SIZES == desktop.ICON_SIZES
    for size in render_icons.SIZES:
        image = QImage(str(render_icons.png_path(size)))
        assert (image.width(), image.height()) == (size, size), size
    committed = QImage(str(render_icons.png_path(48))).convertToFormat(QImage.Format.Format_ARGB32)
    fresh = render_icons.render(48)
    worst = max(abs(((committed.pixel(x, y) >> s) & 255) - ((fresh.pixel(x, y) >> s) & 255))
                for x in range(48) for y in range(48) for s in (0, 8, 16, 24))
    assert worst <= 2, f"resources/fieldscope-48.png differs from the SVG by {worst}/255: re-render"


def test_the_launcher_validates_as_shipped_and_as_installed(tmp_path):
    shipped = RESOURCES / "fieldscope.desktop"
    assert _validate(shipped) == ""                  # no error, warning or hint
    keys = _entry(shipped)
    assert keys["Exec"] == "fieldscope gui %f" and keys["Icon"] == "fieldscope"
    assert keys["Type"] == "Application" and keys["Terminal"] == "false"
    assert keys["StartupWMClass"] == "Fieldscope"    # the window's WM_CLASS (applicationName)
    assert "Science" in keys["Categories"].split(";")
    # installed from a folder whose name needs quoting in Exec
    odd = tmp_path / "my venv $HOME" / "bin" / "python"
    installed = tmp_path / "fieldscope.desktop"
    installed.write_text(desktop.desktop_entry([str(odd), "-m", "app"]))
    assert _validate(installed) == ""
    assert _exec_args(_entry(installed)["Exec"]) == [str(odd), "-m", "app", "gui", "%f"]


def test_install_desktop_writes_under_xdg_data_home_and_uninstall_removes_it(tmp_path, monkeypatch,
                                                                              capsys):
    home = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cli.main(["install-desktop"]) == 0
    out = capsys.readouterr().out
    hicolor = home / "icons" / "hicolor"
    expected = {home / "applications" / "fieldscope.desktop", hicolor / "scalable" / "apps" / "fieldscope.svg"}
    expected |= {hicolor / f"{n}x{n}" / "apps" / "fieldscope.png" for n in (16, 32, 48, 64, 128, 256)}
    assert _files(tmp_path) == expected
    for path in expected:
        assert str(path) in out                      # it says what it wrote
    assert (hicolor / "48x48" / "apps" / "fieldscope.png").read_bytes() == \
        (RESOURCES / "fieldscope-48.png").read_bytes()
    # the launcher starts this installation, from a venv that is not activated
    entry = _entry(home / "applications" / "fieldscope.desktop")
    command = _exec_args(entry["Exec"])
    assert command[:-2] == desktop.exec_command() and command[-2:] == ["gui", "%f"]
    version = subprocess.run([*command[:-2], "--version"], capture_output=True, text=True, timeout=120,
                             env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)})
    assert version.returncode == 0 and version.stdout.startswith("fieldscope "), version.stderr
    assert cli.main(["install-desktop"]) == 0        # again: the same files, rewritten
    assert _files(tmp_path) == expected
    capsys.readouterr()

    assert cli.main(["install-desktop", "--uninstall"]) == 0
    out = capsys.readouterr().out
    assert _files(tmp_path) == set()
    assert all(str(path) in out for path in expected)
    assert cli.main(["install-desktop", "--uninstall"]) == 0
    assert "nothing to remove" in capsys.readouterr().out


def test_install_desktop_defaults_to_home_local_share(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cli.main(["install-desktop"]) == 0
    share = tmp_path / ".local" / "share"
    assert (share / "applications" / "fieldscope.desktop").is_file()
    assert (share / "icons" / "hicolor" / "256x256" / "apps" / "fieldscope.png").is_file()
    assert len(_files(tmp_path)) == 8
    monkeypatch.setenv("XDG_DATA_HOME", "relative/path")   # not absolute: ignored, as the spec says
    assert cli.main(["install-desktop", "--uninstall"]) == 0
    assert _files(tmp_path) == set()


def test_install_desktop_leaves_other_icons_and_refreshes_an_existing_icon_cache(tmp_path, monkeypatch,
                                                                                 capsys):
    tool = shutil.which("gtk-update-icon-cache")
    hicolor = tmp_path / "icons" / "hicolor"
    other = hicolor / "48x48" / "apps" / "other.png"
    other.parent.mkdir(parents=True)
    shutil.copyfile(RESOURCES / "fieldscope-48.png", other)
    cache = hicolor / "icon-theme.cache"
    if tool is not None:
        subprocess.run([tool, "-q", "-t", "-f", str(hicolor)], check=True, timeout=60)
        assert cache.is_file() and b"fieldscope" not in cache.read_bytes()
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert cli.main(["install-desktop"]) == 0
    if tool is not None:
        assert f"refreshed {cache}" in capsys.readouterr().out
        assert b"fieldscope" in cache.read_bytes()
    assert cli.main(["install-desktop", "--uninstall"]) == 0
    assert other.is_file()                           # not ours: kept, and its folder with it
    assert not (hicolor / "16x16").exists()          # ours, left empty: removed
    if tool is not None:
        assert b"fieldscope" not in cache.read_bytes()


def test_install_desktop_into_an_unusable_folder_is_one_line(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("XDG_DATA_HOME", str(blocker))
    assert cli.main(["install-desktop"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fieldscope: {blocker / 'applications'}") and "cannot write" in err
    assert "\n" not in err
    # what is wrong and what to do (issue #33: the reason was a bare "Not a directory")
    assert f"{blocker} is not a folder" in err and "0 of 8 files were written" in err
    assert "run fieldscope install-desktop again" in err


def test_exec_falls_back_to_python_dash_m_app(tmp_path):
    python = tmp_path / "bin" / "python3"
    assert desktop.exec_command(str(python)) == [str(python), "-m", "app"]
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "fieldscope"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert desktop.exec_command(str(python)) == [str(script)]
    assert os.access(sys.executable, os.X_OK)


def test_install_replaces_planted_links_and_uninstall_removes_only_what_it_wrote(tmp_path, monkeypatch, capsys):
    """Issue 33.5: install-desktop wrote through a link planted at an icon or at the launcher's
    temporary name, uninstall deleted a launcher it did not write, a failed install left .tmp."""
    home = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    icon = home / "icons" / "hicolor" / "48x48" / "apps" / "fieldscope.png"
    launcher = home / "applications" / "fieldscope.desktop"
    for link in (icon, launcher.with_name(launcher.name + ".tmp"), launcher):
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(victim)
    assert cli.main(["install-desktop"]) == 0
    assert victim.read_text() == "the user's own file\n"
    assert not icon.is_symlink() and icon.read_bytes() == (RESOURCES / "fieldscope-48.png").read_bytes()
    assert not launcher.is_symlink() and desktop.MARKER in launcher.read_text().splitlines()
    assert not [p for p in home.rglob("*.part")]
    launcher.with_name(launcher.name + ".tmp").unlink()       # the planted link, never written through
    capsys.readouterr()
    # a launcher of the user's own (no marker) is left by uninstall, and said so
    launcher.write_text("[Desktop Entry]\nType=Application\nName=Mine\nExec=mine\n")
    assert cli.main(["install-desktop", "--uninstall"]) == 0
    out = capsys.readouterr().out
    assert launcher.read_text().startswith("[Desktop Entry]\nType=Application\nName=Mine")
    assert f"{launcher}: left in place" in out and not icon.exists()
    # a failed write (a folder where the icon goes) leaves no temporary file
    launcher.unlink()
    icon.mkdir(parents=True)
    assert cli.main(["install-desktop"]) == 2
    assert str(icon) in capsys.readouterr().err
    assert not [p for p in home.rglob("*.part")] and not [p for p in home.rglob("*.tmp")]
