"""The command line: help, version, and the FFT self-test as a user runs it."""

from __future__ import annotations

import subprocess
import sys

from app import cli


def test_help_lists_check(capsys):
    assert cli.main([]) == 0
    assert "check" in capsys.readouterr().out


def test_check_command_passes_in_a_fresh_process():
    out = subprocess.run([sys.executable, "-m", "app", "check"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert "VERDICT: PASS" in out.stdout
    assert out.stdout.count("[ok  ]") == 8


def test_app_process_never_imports_tensorflow():
    """The GUI process must not load TensorFlow (it crashes beside Mesa's OpenGL)."""
    code = ("import sys, pkgutil, importlib, app; "
            "[importlib.import_module('app.' + m.name) for m in pkgutil.iter_modules(app.__path__) "
            " if m.name != '__main__']; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'tensorflow_probability', 'tf_keras')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
