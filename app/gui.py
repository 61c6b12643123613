"""The desktop app's entry point: ``fieldscope gui [CONFIG | RUNDIR] [options]``.

    fieldscope                      the built-in demo, ready to run with one click
    fieldscope gui                  the same
    fieldscope gui CONFIG.toml      a config (the file ``fieldscope run`` takes)
    fieldscope gui RUNDIR           a stored run (its config, its draws; continue it)
    fieldscope gui DATAFILE         File > New from data on it (.npy .npz .h5 .hdf5 .fits):
                                    a fresh config that fits the file, not saved yet, shown
                                    at once (in voxel units when the file states no box size:
                                    the Grid panel asks for it); a DATA.toml next to it is
                                    offered first
    --demo                          the built-in demo (written once into the per-user data
                                    folder, ~/.local/share/fieldscope/demo)
    --run                           press Start as soon as the engine is ready
    --show TAB[,TAB]                bring these views to the front (e.g. "3D volume,P(k)")
    --screenshot PNG --quit-after S save the window S seconds after the run's first chunk
                                    (with --run; else after the window appeared) and quit:
                                    for docs and CI. Exit status 0 when the PNG was written
                                    and no run failed.

The window appears at once: TensorFlow loads only in the engine process, which starts
with the window. Qt is imported inside ``main``, so ``fieldscope --help`` stays instant.

Memory. A window that watches a long run reads and lets go of many buffers of a few MiB
in its worker threads (planes, blocks, a draw for P(k)). glibc serves an allocation from
a heap once its mmap threshold has risen past it (the threshold follows the largest
buffer freed, up to 32 MiB) and keeps the freed heap memory it cannot trim, so the
window's RSS crept by ~5 MiB per watched 256^3 draw (bench/gui_memory.py).
``limit_heap_retention`` fixes the threshold at ``MMAP_THRESHOLD``: every buffer of
1 MiB or more is mapped on its own and returned to the system when freed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

__all__ = [
    "main", "add_arguments", "demo_config", "display_available", "application_icon", "ICON_PATH",
    "limit_heap_retention", "MMAP_THRESHOLD"
]

#: bytes from which glibc maps each allocation on its own (``mallopt(M_MMAP_THRESHOLD)``)
MMAP_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3          # glibc's malloc.h

DEMO_CONFIG = "field.toml"


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("target", nargs="?", metavar="CONFIG | RUNDIR | DATAFILE",
                        help="a config file (.toml), a run directory or a data file (.npy, "
                             ".npz, .h5, .fits: a new config for it); default: the demo")
    parser.add_argument("--demo", action="store_true", help="open the built-in demo")
    parser.add_argument("--run", action="store_true",
                        help="start the run as soon as the engine is ready")
    parser.add_argument("--show", metavar="TAB[,TAB]",
                        help="views to bring to the front, by tab name, e.g. "
                             "\"3D volume,Diagnostics\"")
    parser.add_argument("--screenshot", metavar="PNG",
                        help="save a picture of the window, then quit (needs --quit-after)")
    parser.add_argument("--quit-after", type=float, metavar="S",
                        help="seconds after the first chunk (with --run) or after the window "
                             "appeared, then save the screenshot and quit")
    return parser


def build_parser() -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(
        prog="fieldscope gui", description="Fieldscope's desktop app."))


def display_available() -> bool:
    """Whether Qt can open a window here (a display, or an explicit QT_QPA_PLATFORM)."""
    if os.environ.get("QT_QPA_PLATFORM"):
        return True
    if sys.platform.startswith("linux") or "bsd" in sys.platform:
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def demo_config() -> Path:
    """The demo's config, written into the per-user data folder on first use."""
    from app.state.session import demo_path

    return demo_path(DEMO_CONFIG)


#: The window icon (resources/ at the top of the source tree; absent from a plain wheel install).
ICON_PATH = Path(__file__).resolve().parents[1] / "resources" / "fieldscope.svg"


def application_icon():
    """The application's QIcon, or None when the icon file is missing or unreadable here."""
    from PySide6.QtGui import QIcon

    if not ICON_PATH.is_file():
        return None
    icon = QIcon(str(ICON_PATH))
    return None if icon.isNull() else icon


def limit_heap_retention(threshold: int = MMAP_THRESHOLD) -> bool:
    """On glibc, fix malloc's mmap threshold at ``threshold`` bytes (see the module
    docstring: the window's memory must not grow with the run it watches). Returns whether
    it was set (False elsewhere: musl, macOS, Windows keep their allocators' defaults)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version        # glibc only (musl's mallopt does nothing)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt(_M_MMAP_THRESHOLD, int(threshold)) == 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run(args)


def run(args: argparse.Namespace) -> int:
    """Open the window for parsed ``args`` (see ``add_arguments``); returns the exit status."""
    t0 = time.perf_counter()
    if (args.screenshot is None) != (args.quit_after is None):
        print("fieldscope gui: --screenshot and --quit-after go together", file=sys.stderr)
        return 2
    if args.quit_after is not None and not args.quit_after >= 0:
        print("fieldscope gui: --quit-after needs a number of seconds >= 0", file=sys.stderr)
        return 2
    if not display_available():
        print("fieldscope gui: no display found (DISPLAY / WAYLAND_DISPLAY unset). Run it on a "
              "desktop, under xvfb-run, or with QT_QPA_PLATFORM=offscreen; "
              "headless runs: fieldscope run CONFIG --out RUNDIR", file=sys.stderr)
        return 2
    target = None if args.demo else args.target
    run_dir = config = data_file = None
    try:
        if target is None:
            config = demo_config()
        else:
            path = Path(target).expanduser()
            if not path.exists():
                print(f"fieldscope gui: {target}: no such file or directory", file=sys.stderr)
                return 2
            from core.store.run_store import STORE_NAME

            if path.is_dir():
                if not (path / STORE_NAME).exists():
                    print(f"fieldscope gui: {target}: a folder without a run store "
                          f"({STORE_NAME}); give a config file or a run directory",
                          file=sys.stderr)
                    return 2
                run_dir = path
            else:
                from core.config.from_data import is_data_file

                if is_data_file(path):
                    data_file = path
                else:
                    config = path
    except OSError as exc:
        print(f"fieldscope gui: cannot write the demo: {exc}", file=sys.stderr)
        return 2

    show = [name.strip() for name in (args.show or "").split(",") if name.strip()]
    from app.views.registry import titles

    unknown = [name for name in show if name not in titles()]
    if unknown:
        print(f"fieldscope gui: --show {', '.join(unknown)}: no such view; the views are "
              f"{', '.join(titles())}", file=sys.stderr)
        return 2

    limit_heap_retention()
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Fieldscope")
    app.setOrganizationName("Fieldscope")
    app.setDesktopFileName("fieldscope")      # Wayland's app id: fieldscope.desktop (install-desktop)
    icon = application_icon()
    if icon is not None:
        app.setWindowIcon(icon)
    window = MainWindow(remember_layout=not args.screenshot)
    # quit when the window has closed *and* its engine has exited (the window hides at
    # once, then closes when the engine is gone; Qt's last-window rule misses that)
    app.setQuitOnLastWindowClosed(False)
    window.closed.connect(app.quit)
    if config is not None:
        window.open_config(config)
    elif run_dir is not None:
        window.open_run_dir(run_dir)
    if window.views is not None:
        for name in show:
            window.views.show_tab(name)
    window.show()
    if data_file is not None:        # after show: an offer of DATA.toml sits on the window
        window.new_from_data(data_file)
    shown_after = time.perf_counter() - t0
    window.shown_after = shown_after
    if args.screenshot:
        print(f"fieldscope gui: window shown {shown_after:.2f} s after start", file=sys.stderr)
    window.auto_start = bool(args.run)
    result = {"code": 0}

    if args.screenshot:
        _arrange_screenshot(window, app, args, result)

    # A bug in a slot must not leave the user with a terminal traceback only: say it in
    # the window (the traceback still goes to stderr for a bug report); the app goes on.
    previous_hook = sys.excepthook

    def excepthook(kind, value, tb):
        import traceback

        traceback.print_exception(kind, value, tb)
        try:
            window.show_message("Unexpected error",
                                f"{kind.__name__}: {value}\n\nThe app keeps running; the "
                                "details are in the terminal.")
        except Exception:
            pass

    sys.excepthook = excepthook

    # Ctrl-C in the terminal closes the window the same way the close button does
    import signal

    def on_sigint(signum, frame):
        window.confirm_close = False
        QTimer.singleShot(0, window.close)

    previous = signal.signal(signal.SIGINT, on_sigint)
    ticker = QTimer()
    ticker.timeout.connect(lambda: None)     # lets Python run its signal handlers
    ticker.start(200)
    try:
        code = app.exec()
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.excepthook = previous_hook
        ticker.stop()
        if window.client is not None:      # quit by other means: never leave a thread
            window.client.shutdown()
            window.client.wait(15_000)
    return result["code"] or code


def _arrange_screenshot(window, app, args, result) -> None:
    """Save the window ``--quit-after`` seconds after the first chunk (``--run``) or
    after it appeared, then close it (stopping the run after its chunk)."""
    from PySide6.QtCore import QTimer

    delay_ms = int(args.quit_after * 1000)
    show_tabs = [name.strip() for name in (args.show or "").split(",") if name.strip()]
    fired = {"armed": False, "done": False}
    failed = {"value": False}

    def shoot():
        if fired["done"]:
            return
        fired["done"] = True
        if window.views is not None:
            for name in show_tabs:
                window.views.show_tab(name)
        window.refresh_views()
        if window.views is not None:
            window.views.refresh(force=True)
        app.processEvents()
        path = Path(args.screenshot).expanduser()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            ok = window.grab().save(str(path))
        except OSError:
            ok = False
        if not ok:
            print(f"fieldscope gui: could not write {path}", file=sys.stderr)
            result["code"] = 1
        else:
            print(f"fieldscope gui: screenshot written to {path}", file=sys.stderr)
            if failed["value"]:
                result["code"] = 1
        window.confirm_close = False
        window.close()

    def arm(*_):
        if not fired["armed"]:
            fired["armed"] = True
            QTimer.singleShot(delay_ms, shoot)

    if args.run and window.client is not None:
        window.client.chunk.connect(arm)

        def on_done(status):
            if status == "failed":
                failed["value"] = True
            arm()

        window.client.done.connect(on_done)

        def on_died(_message):
            failed["value"] = True
            arm()

        window.client.engine_died.connect(on_died)

        def on_ready():
            # --run with a config that does not validate: nothing will start
            if window.auto_start and not window.start_action.isEnabled():
                print("fieldscope gui: the run cannot start: "
                      + "; ".join(window.errors.values()), file=sys.stderr)
                failed["value"] = True
                arm()

        window.client.ready.connect(on_ready)
        # never hang: the first chunk comes within minutes or not at all
        QTimer.singleShot(delay_ms + 600_000, lambda: (failed.update(value=True), shoot()))
    else:
        QTimer.singleShot(0, arm)
