"""Registers the GUI fixtures of ``support.gui`` for every test in ``tests/app``."""

from support.gui import make_window, xla_cache  # noqa: F401  (fixtures)
