"""The ``fieldscope`` command line.

Subcommands import what they need lazily, so that ``fieldscope --help`` is instant and a
command that never samples (``summary``, ``demo``) never loads TensorFlow.

    fieldscope                           the desktop app on the built-in demo
    fieldscope gui [CONFIG | RUNDIR]     the desktop app (--run, --screenshot PNG --quit-after S)
    fieldscope check                     self-test of the differentiable FFT core
    fieldscope demo OUTDIR               write demo data and configs
    fieldscope run CONFIG --out RUNDIR   sample, with a progress line; Ctrl-C stops after the chunk
    fieldscope resume RUNDIR [--num-samples N]
    fieldscope summary RUNDIR [--csv FILE]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

__all__ = ["main", "build_parser", "ProgressLine", "UserError"]


class UserError(Exception):
    """A problem with the user's input: printed as one line, exit status 2."""


def _quiet_tensorflow() -> None:
    # TensorFlow's C++ start-up chatter (CPU feature notices) is not for end users.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _cmd_check(args: argparse.Namespace) -> int:
    _quiet_tensorflow()
    from core.engine import fft_check

    return fft_check.main()


def _cmd_demo(args: argparse.Namespace) -> int:
    from core.demo import write_demo

    paths = write_demo(args.outdir)
    print(f"demo written to {args.outdir}:")
    for path in paths.values():
        print(f"  {path}")
    print(f"run it with: fieldscope run {paths['field_config']} --out {os.path.join(args.outdir, 'run')}")
    return 0


class ProgressLine:
    """One status line, rewritten in place: phase, draws, draws/s, acceptance, divergences, ETA."""

    def __init__(self, stream=sys.stderr):
        self.stream = stream
        self.interactive = stream.isatty()
        self.divergences = 0
        self.last = ""

    def __call__(self, event: dict) -> None:
        """Take one engine event (``core.run.messages``)."""
        from core.run import messages as msgs

        kind = event["type"]
        if kind == msgs.STATUS:
            status = event["status"]
            estimate = event.get("estimate")
            if estimate:
                from core.run.resources import format_bytes, format_seconds

                free = estimate.get("available")
                self._write(f"estimate: about {format_bytes(estimate['bytes'])} of memory"
                            + (f" ({format_bytes(free)} free)" if free else "")
                            + f", at least {format_seconds(estimate['run_seconds'])} "
                            "(FFT bound)", final=True)
            if status in ("loading", "compiling"):
                self._write(f"{status}...", final=not self.interactive)
            elif status == "failed":
                # the reason is printed once, as the command's one-line error
                if self.interactive and self.last:
                    self._write("", final=True)
            elif status in ("finished", "stopped", "paused"):
                self._write(status, final=True)
            return
        if kind != msgs.CHUNK:
            return
        stats = event["stats"]
        self.divergences += int(stats["diverging"].sum())
        done = event["first_step"] + event["n_steps"]
        total = event["steps_total"]
        rate = event["steps_per_second"]
        eta = (total - done) / rate if rate > 0 else float("nan")
        width = 24
        filled = int(width * done / max(total, 1))
        bar = "#" * filled + "-" * (width - filled)
        line = (f"{event['phase']:8} [{bar}] {done}/{total}  {rate:6.1f} draws/s  "
                f"acc {stats['acceptance_rate'].mean():.2f}  div {self.divergences}  "
                f"ETA {_clock(eta)}")
        self._write(line, final=not self.interactive)

    def _write(self, text: str, final: bool) -> None:
        if self.interactive:
            pad = max(0, len(self.last) - len(text))
            self.stream.write("\r" + text + " " * pad + ("\n" if final else ""))
            self.last = "" if final else text
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def _clock(seconds: float) -> str:
    if not seconds == seconds or seconds == float("inf"):
        return "--:--"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _install_stop_handler(control) -> None:
    def handler(signum, frame):
        if control.stop:
            raise KeyboardInterrupt
        control.stop = True
        sys.stderr.write("\nstopping after the current chunk (Ctrl-C again to abort now)\n")

    signal.signal(signal.SIGINT, handler)


def _engine_errors():
    from core.config import ConfigError
    from core.engine.engine import EngineError
    from core.store.run_store import RunStoreError

    return (ConfigError, EngineError, RunStoreError, ValueError)


def _cmd_run(args: argparse.Namespace) -> int:
    _quiet_tensorflow()
    from core.config import ConfigError, parse_config, read_config_text
    try:   # read once, size checked first: the text run is the text checked
        text = read_config_text(args.config)
        config = parse_config(text, base_dir=os.path.dirname(os.path.abspath(args.config)),
                              source=args.config)
    except ConfigError as err:
        raise UserError(str(err)) from None
    from core.engine.engine import Control, Engine

    control = Control()
    _install_stop_handler(control)
    engine = Engine(config, text, args.out, emit=ProgressLine(), control=control)
    try:
        status = engine.start()
    except _engine_errors() as err:
        raise UserError(str(err)) from None
    return _report(status, args.out)


def _cmd_resume(args: argparse.Namespace) -> int:
    _quiet_tensorflow()
    from core.engine.engine import Control, Engine
    from core.store.run_store import stored_run_config

    try:
        config, text = stored_run_config(args.rundir)
    except _engine_errors() as err:
        raise UserError(str(err)) from None
    control = Control()
    _install_stop_handler(control)
    engine = Engine(config, text, args.rundir, emit=ProgressLine(), control=control)
    try:
        status = engine.resume(num_samples=args.num_samples)
    except _engine_errors() as err:
        raise UserError(str(err)) from None
    return _report(status, args.rundir)


def _report(status: str, run_dir) -> int:
    if status == "stopped":
        print(f"stopped; everything so far is in {run_dir}. Continue with: fieldscope resume {run_dir}")
    else:
        print(f"{status}: {run_dir}. Diagnostics: fieldscope summary {run_dir}")
    return 0


def _cmd_summary(args: argparse.Namespace) -> int:
    from core.store.run_store import RunStoreError
    from core.store.run_summary import summarize_run

    try:
        summary = summarize_run(args.rundir)
    except RunStoreError as err:
        raise UserError(str(err)) from None
    print(summary.text())
    if args.csv:
        try:
            with open(args.csv, "w", encoding="utf-8") as fh:
                fh.write(summary.table_csv())
        except OSError as err:
            raise UserError(f"{args.csv}: cannot write the table: {err.strerror or err}") from None
        print(f"table written to {args.csv}")
    return 0


def _cmd_install_desktop(args: argparse.Namespace) -> int:
    from app import desktop

    try:
        done = desktop.uninstall() if args.uninstall else desktop.install()
    except desktop.DesktopError as err:
        raise UserError(str(err)) from None
    if args.uninstall:
        print("removed:" if done.files else f"nothing to remove under {desktop.data_home()}")
    else:
        print("wrote:")
    for path in done.files:
        print(f"  {path}")
    for cache in done.caches:
        print(f"refreshed {cache}")
    for note in done.notes:
        print(f"note: {note}")
    return 0


def _cmd_gui(args: argparse.Namespace) -> int:
    from app import gui

    return gui.run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fieldscope",
        description="Bayesian field inference with Hamiltonian Monte Carlo.",
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("gui", help="the desktop app: set up a run, launch it, watch it live")
    from app.gui import add_arguments  # argparse only; Qt is imported when it runs

    add_arguments(p)
    p.set_defaults(func=_cmd_gui)
    p = sub.add_parser("check", help="self-test of the differentiable FFT core")
    p.set_defaults(func=_cmd_check)
    p = sub.add_parser("demo", help="write demo data and configs into a directory")
    p.add_argument("outdir")
    p.set_defaults(func=_cmd_demo)
    p = sub.add_parser("run", help="sample a config into a run directory")
    p.add_argument("config")
    p.add_argument("--out", required=True, help="run directory to create")
    p.set_defaults(func=_cmd_run)
    p = sub.add_parser("resume", help="continue a stopped run (or extend a finished one)")
    p.add_argument("rundir")
    p.add_argument("--num-samples", type=int, default=None, help="new total of post-warmup draws")
    p.set_defaults(func=_cmd_resume)
    p = sub.add_parser("summary", help="print the diagnostics table of a run")
    p.add_argument("rundir")
    p.add_argument("--csv", help="also write the diagnostics table (pooled and per chain) as CSV")
    p.set_defaults(func=_cmd_summary)
    p = sub.add_parser("install-desktop", help="add Fieldscope to this user's application menu "
                       "(launcher and icons under $XDG_DATA_HOME, default ~/.local/share)")
    p.add_argument("--uninstall", action="store_true", help="remove the launcher and icons it installed")
    p.set_defaults(func=_cmd_install_desktop)
    return parser


def _version() -> str:
    from core import __version__

    return f"fieldscope {__version__}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    if argv is None and not sys.argv[1:]:
        # `fieldscope` alone opens the desktop app on the demo (main([]) prints the help)
        from app import gui

        if gui.display_available():
            return gui.main([])
        parser.print_help()
        print("\n(no display found, so the desktop app was not opened; "
              "see `fieldscope gui --help`)")
        return 0
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except UserError as err:
        print(f"fieldscope: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
