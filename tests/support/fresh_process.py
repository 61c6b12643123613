"""A check script of ``tests/support`` run in a fresh Python process (one whose TensorFlow must be
set up before it starts: logical devices), its report the JSON of its last line of output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def json_report(script: str, *args: str, timeout: float = 540) -> dict:
    """(``timeout`` below pytest's 10 minutes a test: a slow check fails by name, not by a killed worker.)"""
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "support" / script), *args],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
