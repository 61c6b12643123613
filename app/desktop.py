"""Desktop integration: ``fieldscope install-desktop [--uninstall]``.

Installs, for the current user only (the freedesktop.org base-directory layout)::

    $XDG_DATA_HOME/applications/fieldscope.desktop              the launcher (menu entry)
    $XDG_DATA_HOME/icons/hicolor/<n>x<n>/apps/fieldscope.png    n = 16, 32, 48, 64, 128, 256
    $XDG_DATA_HOME/icons/hicolor/scalable/apps/fieldscope.svg

with ``XDG_DATA_HOME`` defaulting to ``~/.local/share`` when unset or not an absolute path
(as the specification says). The launcher's ``Exec`` names this installation's own
``fieldscope`` script (next to ``sys.executable``, so a virtual environment need not be
activated), else ``sys.executable -m app``. ``--uninstall`` removes exactly these files (and the icon
folders of a size when they are left empty), and only as install wrote them: the launcher
carries the line ``X-Fieldscope-Installed=true`` (``MARKER``), an icon the resource's bytes;
anything else there (a file of the user's, a link) is left with a note. Every file is written whole or not at all and never through a link
(``core.io.regular_file.write_atomic``).

Caches: a desktop reads these folders directly; a cache that already exists there would
hide the new files, so an existing ``mimeinfo.cache`` (``update-desktop-database``) or
``icon-theme.cache`` (``gtk-update-icon-cache``) is refreshed when the tool is installed.
None is created, and a missing or failing tool is reported, never an error.

The files come from the source tree's ``resources/`` (``resources/render_icons.py``
renders the PNGs from the SVG) or, in an installed wheel, ``<prefix>/share/fieldscope``.
This module imports neither Qt nor TensorFlow.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from core.io.regular_file import read_regular, write_atomic

__all__ = [
    "APP_ID", "ICON_SIZES", "DesktopError", "DesktopInstall", "data_home", "resource_dir",
    "exec_command", "desktop_entry", "install", "uninstall", "planned_files",
]

APP_ID = "fieldscope"
ICON_SIZES = (16, 32, 48, 64, 128, 256)
DESKTOP_NAME = f"{APP_ID}.desktop"
#: the line that marks a launcher install() wrote (uninstall removes no other)
MARKER = "X-Fieldscope-Installed=true"

_SOURCE_RESOURCES = Path(__file__).resolve().parents[1] / "resources"
_CACHE_TOOLS = {"mimeinfo.cache": "update-desktop-database", "icon-theme.cache": "gtk-update-icon-cache"}


class DesktopError(Exception):
    """A problem installing or removing the launcher: one line naming the file."""


@dataclass
class DesktopInstall:
    """What an install or uninstall did: the files written or removed, caches, notes."""

    files: list[Path] = field(default_factory=list)
    caches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def data_home(environ=None) -> Path:
    """``$XDG_DATA_HOME``, or ``$HOME/.local/share`` when it is unset, empty or relative."""
    environ = os.environ if environ is None else environ
    value = environ.get("XDG_DATA_HOME", "")
    if value and os.path.isabs(value):
        return Path(value)
    home = environ.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".local" / "share"


def resource_dir() -> Path:
    """The folder holding fieldscope.desktop, fieldscope.svg and fieldscope-<n>.png."""
    for folder in (_SOURCE_RESOURCES, Path(sys.prefix) / "share" / APP_ID):
        if (folder / DESKTOP_NAME).is_file():
            return folder
    raise DesktopError(f"the launcher's files are not installed: neither {_SOURCE_RESOURCES} nor "
                       f"{Path(sys.prefix) / 'share' / APP_ID} holds {DESKTOP_NAME}")


def _exec_quote(arg: str) -> str:
    """One argument of an ``Exec`` value (Desktop Entry spec: quoted when it holds a reserved
    character; ``"``, backquote, ``$`` and ``\\`` escaped inside quotes; ``%`` doubled), then
    escaped as a string value (a backslash doubled again)."""
    arg = arg.replace("%", "%%")
    if any(c in arg for c in ' \t\n"\'\\><~|&;$*?#()`'):
        inner = "".join("\\" + c if c in '"`$\\' else c for c in arg)
        arg = f'"{inner}"'
    return arg.replace("\\", "\\\\")


def exec_command(executable: str | None = None) -> list[str]:
    """The command that opens the app: the ``fieldscope`` script installed next to the
    interpreter (a venv's bin/), else ``<python> -m app``."""
    python = Path(executable or sys.executable)    # not resolved: a venv's python is a link
    script = python.with_name("fieldscope.exe" if os.name == "nt" else "fieldscope")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [str(python), "-m", "app"]


def desktop_entry(command: list[str] | None = None) -> str:
    """The launcher's text: ``resources/fieldscope.desktop`` with ``Exec`` (and ``TryExec``)
    pointing at ``command`` (default :func:`exec_command`)."""
    command = command or exec_command()
    source = resource_dir() / DESKTOP_NAME
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DesktopError(f"{source}: cannot read the launcher: {exc}") from None
    exec_value = " ".join(_exec_quote(a) for a in [*command, "gui"]) + " %f"
    lines = []
    for line in text.splitlines():
        if line == "[Desktop Entry]":
            lines.append(line)
            lines.append(MARKER)
            continue
        if line.startswith("Exec="):
            lines.append(f"Exec={exec_value}")
            lines.append(f"TryExec={command[0].replace(chr(92), chr(92) * 2)}")
        elif not line.startswith("TryExec="):
            lines.append(line)
    return "\n".join(lines) + "\n"


def planned_files(home: Path | None = None) -> dict[Path, Path | None]:
    """Target path -> source file (None for the launcher, which is generated)."""
    home = data_home() if home is None else Path(home)
    hicolor = home / "icons" / "hicolor"
    res = _SOURCE_RESOURCES
    try:
        res = resource_dir()
    except DesktopError:
        pass
    files: dict[Path, Path | None] = {home / "applications" / DESKTOP_NAME: None}
    for size in ICON_SIZES:
        files[hicolor / f"{size}x{size}" / "apps" / f"{APP_ID}.png"] = res / f"{APP_ID}-{size}.png"
    files[hicolor / "scalable" / "apps" / f"{APP_ID}.svg"] = res / f"{APP_ID}.svg"
    return files


def install(home: Path | None = None, command: list[str] | None = None) -> DesktopInstall:
    """Write the launcher and the icons under ``home`` (default :func:`data_home`)."""
    home = data_home() if home is None else Path(home)
    files = planned_files(home)
    entry = desktop_entry(command)
    missing = [str(src) for src in files.values() if src is not None and not src.is_file()]
    if missing:
        raise DesktopError(f"icon files missing: {', '.join(missing)} (python resources/render_icons.py "
                           "renders the PNGs)")
    done = DesktopInstall()
    for target, source in files.items():
        try:
            data = entry.encode("utf-8") if source is None else source.read_bytes()
        except OSError as exc:
            raise DesktopError(f"{source}: cannot read: {exc.strerror or exc}") from None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            # whole or not at all, a link at the target replaced and never written through
            write_atomic(target, data)
        except OSError as exc:
            parent = next((p for p in target.parents if p.exists() or p.is_symlink()), None)
            why = (f"{parent} is not a folder" if parent is not None and not parent.is_dir()
                   else exc.strerror or str(exc))
            raise DesktopError(f"{target}: cannot write: {why}; {len(done.files)} of {len(files)} files were "
                               f"written. Fix that (or set XDG_DATA_HOME), then run fieldscope install-desktop "
                               "again, or fieldscope install-desktop --uninstall to remove them") from None
        done.files.append(target)
    _refresh_caches(home, done)
    return done


def uninstall(home: Path | None = None) -> DesktopInstall:
    """Remove what :func:`install` wrote under ``home`` (default :func:`data_home`)."""
    home = data_home() if home is None else Path(home)
    done = DesktopInstall()
    for target, source in planned_files(home).items():
        if not os.path.lexists(target):
            continue
        try:
            expected = None if source is None else source.read_bytes()
        except OSError:
            expected = None
        if not _written_here(target, expected):
            done.notes.append(f"{target}: left in place: fieldscope install-desktop did not write it")
            continue
        try:
            target.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise DesktopError(f"{target}: cannot remove: {exc.strerror or exc}") from None
        done.files.append(target)
        # the icon folders of one size (hicolor/<n>x<n>/apps), when nothing else is left in them
        hicolor = home / "icons" / "hicolor"
        for folder in (target.parent, target.parent.parent):
            if folder.parent == hicolor or folder.parent.parent == hicolor:
                try:
                    folder.rmdir()
                except OSError:
                    break
    if done.files:
        _refresh_caches(home, done)
    return done


def _written_here(target: Path, expected: bytes | None) -> bool:
    """Whether ``target`` is a file install() wrote: a regular file (not a link) holding the
    icon's bytes, or for the launcher (``expected`` None) a launcher with MARKER."""
    try:
        data = read_regular(target, follow_symlinks=False, max_bytes=1 << 24)
    except OSError:
        return False
    if expected is not None:
        return data == expected
    return MARKER.encode() in data.splitlines()


def _refresh_caches(home: Path, done: DesktopInstall) -> None:
    """Refresh the caches that exist (never create one); a missing tool is a note."""
    folders = {"mimeinfo.cache": home / "applications", "icon-theme.cache": home / "icons" / "hicolor"}
    for cache, folder in folders.items():
        if not (folder / cache).is_file():
            continue
        tool = _CACHE_TOOLS[cache]
        path = shutil.which(tool)
        if path is None:
            done.notes.append(f"{folder / cache} may be stale: {tool} is not installed")
            continue
        args = [path, str(folder)] if cache == "mimeinfo.cache" else [path, "-q", "-t", "-f", str(folder)]
        try:
            result = subprocess.run(args, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            done.notes.append(f"{tool} {folder} failed: {exc}")
            continue
        if result.returncode != 0:
            reason = (result.stderr or result.stdout).strip().splitlines()
            done.notes.append(f"{tool} {folder} failed: {reason[-1] if reason else result.returncode}")
        else:
            done.caches.append(str(folder / cache))
