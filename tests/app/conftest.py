"""Registers the GUI fixtures of ``support.gui`` for every test in ``tests/app``."""

import pytest

from support.gui import make_window, xla_cache  # noqa: F401  (fixtures)


@pytest.fixture(autouse=True)
def _own_settings(tmp_path, monkeypatch):
    """Windows remember recent files and their layout in $XDG_CONFIG_HOME/fieldscope: every
    test (and every app it launches) gets its own, never the user's real settings."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
