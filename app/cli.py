"""The ``fieldscope`` command line.

Subcommands import what they need lazily, so that ``fieldscope --help`` is instant
and a command that never samples never loads TensorFlow.
"""

from __future__ import annotations

import argparse
import os
import sys


def _quiet_tensorflow() -> None:
    # TensorFlow's C++ start-up chatter (CPU feature notices) is not for end users.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _cmd_check(args: argparse.Namespace) -> int:
    _quiet_tensorflow()
    from core import fft_check

    return fft_check.main()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fieldscope",
        description="Bayesian field inference with Hamiltonian Monte Carlo.",
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = sub.add_parser("check", help="self-test of the differentiable FFT core")
    check.set_defaults(func=_cmd_check)
    return parser


def _version() -> str:
    from core import __version__

    return f"fieldscope {__version__}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
