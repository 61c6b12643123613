"""The window's Qt-free model: the session (config file, modified flag, run folders, File >
Recent) and the action table's enabled-when rules; the model imports no Qt (checked in a subprocess)."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from app.state.actions import ACTIONS, WindowStatus
from app.state.config_state import ConfigState
from app.state.session import (
    MAX_RECENT,
    RECENT_KEY,
    VOXEL_UNIT,
    MemoryStore,
    RecentFiles,
    Session,
    config_for_data_file,
)
from support.gui import tiny_case

REPO = Path(__file__).resolve().parents[3]


def test_the_model_imports_no_qt():
    code = ("import sys, app.state.session, app.state.actions, app.state.config_state, app.state.run_state; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6', 'pyqtgraph')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_session_names_the_config_and_where_its_runs_go(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    config = tiny_case(tmp_path / "case", name="tiny.toml")
    session = Session(ConfigState.from_file(config))
    assert session.title() == "tiny.toml" and not session.modified
    session.config["sampler.num_warmup"] = 99
    assert session.title() == "tiny.toml *" and session.modified
    now = dt.datetime(2026, 12, 4, 18, 30, 5)
    first = session.new_run_dir(now)
    assert first == config.parent / "runs" / "tiny-20261204-183005"
    first.mkdir()
    assert session.new_run_dir(now).name == "tiny-20261204-183005-2"       # never an existing folder
    assert session.save_as_default() == config

    # a config made for a data file, not saved: runs go to the per-user folder, named after the data
    data = tmp_path / "mine" / "survey.npy"
    data.parent.mkdir()
    np.save(data, np.random.default_rng(0).normal(size=(6, 5, 4)))
    result, text = config_for_data_file(data)
    assert result.box_size is None
    fresh = Session(ConfigState())
    fresh.config.load_text(text, base_dir=data.parent)
    assert fresh.title() == "untitled" and fresh.config.validate() == {}
    assert fresh.config["grid.box_size"] == [6.0, 5.0, 4.0] and fresh.config["grid.unit"] == VOXEL_UNIT
    assert fresh.new_run_dir(now) == tmp_path / "xdg" / "fieldscope" / "runs" / "survey-20261204-183005"
    assert fresh.save_as_default() == data.with_suffix(".toml")
    assert fresh.config_beside(data) is None
    data.with_suffix(".toml").write_text("")
    assert fresh.config_beside(data) == data.with_suffix(".toml")


def test_recent_files_newest_first_without_repeats_at_most_max(tmp_path):
    store = MemoryStore()
    recent = RecentFiles(lambda: store)
    paths = [tmp_path / f"c{i}.toml" for i in range(MAX_RECENT + 3)]
    for p in paths:
        recent.add(p)
    recent.add(paths[-5])
    assert recent.paths()[0] == paths[-5].resolve() and len(recent.paths()) == MAX_RECENT
    assert len(set(recent.paths())) == MAX_RECENT
    recent.remove(paths[-5].resolve())
    assert paths[-5].resolve() not in recent.paths()
    for bad in (12345, None, {"a": 1}):
        store[RECENT_KEY] = bad
        assert recent.paths() == []
    store[RECENT_KEY] = str(paths[0])        # QSettings' way of giving back a one-element list
    assert recent.paths() == [paths[0]]
    recent.clear()
    assert recent.paths() == [] and RECENT_KEY not in store


def test_the_action_table_enables_run_controls_only_when_they_make_sense():
    rules = {spec.name: spec.enabled for spec in ACTIONS if spec.enabled is not None}
    ready = WindowStatus(engine="ready")
    assert rules["start"](ready) and not rules["start"](replace(ready, config_ok=False))
    assert not rules["start"](replace(ready, engine="starting"))
    assert not rules["start"](replace(ready, run="running")) and not rules["start"](replace(ready, closing=True))
    assert rules["pause"](replace(ready, run="running")) and rules["pause"](replace(ready, run="paused"))
    assert not rules["pause"](replace(ready, run="running", pause_pending=True))
    assert not rules["pause"](replace(ready, run="stopping"))
    assert rules["stop"](replace(ready, run="starting")) and not rules["stop"](ready)
    assert rules["continue"](replace(ready, resumable=True))
    assert not rules["continue"](ready) and not rules["continue"](replace(ready, resumable=True, engine="stopped"))
    assert not rules["open_run"](replace(ready, run="paused")) and not rules["open_run"](replace(ready, run="stopping"))
    assert rules["restart_engine"](replace(ready, engine="stopped", run="running"))
    assert not rules["restart_engine"](replace(ready, run="running"))
    assert not rules["restart_engine"](WindowStatus(engine="none"))
    names = [spec.name for spec in ACTIONS]
    assert len(names) == len(set(names))
    assert sum(spec.toolbar for spec in ACTIONS) == 4
