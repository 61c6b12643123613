"""File > Runs…: the run browser (``app.run_browser``), where it looks (``app.run_catalog``) and
the comparison window (``app.run_compare``), on run stores written here without TensorFlow
(``SyntheticRun`` of the Diagnostics view's tests, ``support.runs.stored_run``).

Every number is checked against the draws that were fed to the store, computed independently
with ``core.store.diagnostics``; hostile folders (a FIFO, a link out, a damaged store, an
unreadable folder, many entries) are listed within a time bound and reported.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from test_diagnostics_view import SyntheticRun

from app.run_browser import COLUMN, PATH_ROLE, VALUE_ROLE, RunBrowser, places_for
from app.run_catalog import DAMAGED, Place, find_runs, power_band, read_record
from app.run_compare import SUMMARY_COLUMNS, RunComparison
from core.store import diagnostics as dg
from core.store import run_lock
from support.gui import tiny_case
from support.runs import stored_run

#: seconds a scan of the hostile folders below may take at most (they take milliseconds)
BOUND_S = 10.0


def capture_powers(run: SyntheticRun) -> list:
    """The P(k) draws each chunk hands the store, kept as they are written."""
    powers, append = [], run.writer.append

    def keep(record, progress, timing=None):
        if record.powers is not None and record.powers.shape[1]:
            powers.append(np.array(record.powers))
        append(record, progress, timing)

    run.writer.append = keep
    return powers


def post(run: SyntheticRun, values) -> np.ndarray:
    """The post-warmup draws of a (chain, step) array the run was fed, as far as it got."""
    return values[:, run.num_warmup:run.num_warmup + run.progress["draws"]]


def fed_worst_rhat(run: SyntheticRun) -> float:
    draws = [post(run, v) for v in run.params.values()] + [post(run, run.stats["lp"])]
    return max(dg.rhat(d) for d in draws)


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture
def runs(tmp_path):
    """A data folder with runs two levels down, as the window leaves them: finished (its
    algorithm recorded by the engine), running (this process holds its lock), interrupted
    (its writer's process is gone), stopped and failed (``stored_run``)."""
    config = tiny_case(tmp_path / "data")
    text = config.read_text()
    folder = tmp_path / "data" / "runs"
    finished = SyntheticRun(folder / "finished", chains=3, seed=1, config_text=text, config_dir=config.parent)
    finished.writer.root.attrs["algorithm"] = "mclmc"
    finished.finish()
    running = SyntheticRun(folder / "running", chains=2, num_samples=90, seed=2, config_text=text,
                           config_dir=config.parent)
    for _ in range(3):
        running.append_chunk()
    lock = run_lock.acquire(running.run_dir)
    interrupted = SyntheticRun(folder / "interrupted", chains=2, seed=3, shift=0.0, config_text=text,
                               config_dir=config.parent)
    for _ in range(2):
        interrupted.append_chunk()
    (interrupted.run_dir / run_lock.LOCK_NAME).write_text(json.dumps(
        {"host": socket.gethostname(), "pid": dead_pid(), "started": "2026-01-01T00:00:00", "token": "gone"}))
    stopped = stored_run(folder / "stopped", config, "stopped", checkpoint=True)
    failed = stored_run(folder / "failed", config, "failed", error="the sampler diverged")
    yield {"folder": tmp_path / "data", "config": config, "finished": finished, "running": running,
           "interrupted": interrupted, "stopped": stopped, "failed": failed}
    lock.release()


def browse(qtbot, places, open_run=None) -> RunBrowser:
    browser = RunBrowser(places, open_run)
    qtbot.addWidget(browser)
    browser.show()
    qtbot.waitUntil(lambda: not browser.busy, timeout=int(BOUND_S * 1000))
    return browser


def table(browser: RunBrowser) -> dict[str, dict]:
    """Run directory -> column -> (text, value) as the table shows it."""
    out = {}
    model = browser.model
    for row in range(model.rowCount()):
        path = model.item(row, 0).data(PATH_ROLE)
        out[path] = {key: (model.item(row, i).text(), model.item(row, i).data(VALUE_ROLE))
                     for key, i in COLUMN.items()}
    return out


def test_rows_are_what_the_stores_hold(qtbot, runs):
    browser = browse(qtbot, [Place("data folder", runs["folder"])])
    rows = table(browser)
    running = runs["running"]
    real = {name: os.path.realpath(runs[name] if isinstance(runs[name], Path) else runs[name].run_dir)
            for name in ("finished", "running", "interrupted", "stopped", "failed")}
    assert sorted(rows) == sorted(real.values())
    row = {name: rows[path] for name, path in real.items()}
    assert {name: r["status"][0] for name, r in row.items()} == {
        "finished": "finished", "running": "running", "interrupted": "interrupted", "stopped": "stopped",
        "failed": "failed"}
    assert row["finished"]["draws"][0] == "120/120"
    assert row["running"]["draws"][0] == f"{running.progress['draws']}/90" == "60/90"
    assert row["interrupted"]["draws"][0] == "30/120"
    assert row["stopped"]["draws"][0] == "4/4"
    # the sampler: recorded by the engine, or from the stored config
    assert row["finished"]["sampler"][0] == "mclmc"
    assert row["running"]["sampler"][0] == row["stopped"]["sampler"][0] == "hmc"
    assert {r["model"][0] for r in row.values()} == {"field"}
    assert row["failed"]["note"][0] == "the sampler diverged"
    # the worst R-hat of the fed post-warmup draws (parameters and lp), computed independently
    for name in ("finished", "running", "interrupted"):
        expected = fed_worst_rhat(runs[name])
        assert row[name]["rhat"][1] == pytest.approx(expected, rel=1e-12), name
        assert row[name]["rhat"][0] == f"{expected:.3f}"
    assert row["finished"]["rhat"][1] > 1.01          # its last chain was shifted
    # stored_run's draws are constant: R-hat is undefined, shown as a dash
    assert row["stopped"]["rhat"][0] == "–" and np.isnan(row["stopped"]["rhat"][1])
    assert "5 runs" in browser.status.text() and not browser.skipped_label.isVisible()
    # sorted by a header: worst R-hat, largest first
    browser.table.sortByColumn(COLUMN["rhat"], Qt.SortOrder.DescendingOrder)
    order = [browser.proxy.index(r, 0).data(PATH_ROLE) for r in range(browser.proxy.rowCount())]
    by_rhat = sorted(("finished", "running", "interrupted"), key=lambda n: -fed_worst_rhat(runs[n]))
    assert order[:3] == [real[n] for n in by_rhat]


def test_open_shows_the_run_and_compare_needs_two_readable_runs(qtbot, runs):
    opened = []
    browser = browse(qtbot, [Place("data folder", runs["folder"])], lambda p: opened.append(p) or True)
    browser.select_paths([runs["finished"].run_dir])
    assert browser.open_button.isEnabled() and not browser.compare_button.isEnabled()
    assert browser.compare_selected() is None and "two or more" in browser.status.text()
    idx = browser.table.selectionModel().selectedRows()[0]
    browser.table.doubleClicked.emit(idx)
    assert opened == [Path(os.path.realpath(runs["finished"].run_dir))]
    browser.select_paths([runs["finished"].run_dir, runs["running"].run_dir])
    assert browser.compare_button.isEnabled() and not browser.open_button.isEnabled()


def hostile_folder(tmp_path) -> dict:
    """A folder with a good run and everything that must neither hang nor crash a scan."""
    root = tmp_path / "hostile"
    good = SyntheticRun(root / "runs" / "good", seed=4)
    good.finish()
    os.mkfifo(root / "a_fifo")                              # a FIFO loose in the folder: no run
    (root / "fifo_store").mkdir()
    os.mkfifo(root / "fifo_store" / "run.zarr")             # a FIFO in place of the store
    attrs = SyntheticRun(root / "runs" / "fifo_attrs", seed=5)
    attrs.finish()
    (attrs.run_dir / "run.zarr" / ".zattrs").unlink()
    os.mkfifo(attrs.run_dir / "run.zarr" / ".zattrs")       # ... of its attributes
    truncated = SyntheticRun(root / "runs" / "truncated", seed=6)
    truncated.finish()
    chunk = sorted((truncated.run_dir / "run.zarr" / "posterior" / "index").glob("0.*"))[0]
    chunk.write_bytes(chunk.read_bytes()[:10])              # a disk full while it was written
    outside = SyntheticRun(tmp_path / "elsewhere" / "theirs", seed=7)
    outside.finish()
    os.symlink(outside.run_dir, root / "link_out")          # a link out of the folder
    os.symlink("/", root / "runs" / "link_to_root")
    os.symlink(root / "runs" / "good", root / "link_in")    # a link inside: the run is listed once
    (root / "locked").mkdir()
    return {"root": root, "good": good.run_dir, "fifo_store": root / "fifo_store",
            "fifo_attrs": attrs.run_dir, "truncated": truncated.run_dir, "locked": root / "locked"}


def refuse_listing(monkeypatch, folder) -> None:
    """``folder`` cannot be listed (as a folder without read permission, also for root)."""
    scandir = os.scandir

    def guarded(path="."):
        if os.fspath(path) == os.fspath(folder):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", guarded)


def test_a_hostile_folder_is_listed_quickly_and_what_is_wrong_is_said(qtbot, tmp_path, monkeypatch):
    case = hostile_folder(tmp_path)
    refuse_listing(monkeypatch, case["locked"])
    t0 = time.monotonic()
    browser = browse(qtbot, [Place("data folder", case["root"])])
    assert time.monotonic() - t0 < BOUND_S
    rows = table(browser)
    real = {k: os.path.realpath(v) for k, v in case.items() if k not in ("root", "locked")}
    assert sorted(rows) == sorted(real.values())            # the good run once, the damaged ones, no FIFO
    assert rows[real["good"]]["status"][0] == "finished"
    for name, words in (("fifo_store", "run.zarr: missing or not a directory"),
                        ("fifo_attrs", ".zattrs: a FIFO, not a regular file"),
                        ("truncated", "damaged chunk of posterior/index")):
        assert rows[real[name]]["status"][0] == DAMAGED, name
        assert words in rows[real[name]]["note"][0], (name, rows[real[name]]["note"][0])
    skipped = browser.skipped_label.toolTip()
    assert "link_out: a symbolic link to" in skipped and "outside" in skipped
    assert "link_to_root: a symbolic link to /," in skipped
    assert "locked: cannot be listed: Permission denied" in skipped
    assert "link_in" not in skipped and browser.skipped_label.isVisible()
    assert "3 damaged" in browser.status.text()
    browser.select_paths([case["good"], case["truncated"]])
    assert not browser.compare_button.isEnabled()           # one readable run only
    browser.select_paths([case["truncated"]])
    assert not browser.open_button.isEnabled() and not browser.open_selected()


def test_many_entries_are_bounded(tmp_path):
    root = tmp_path / "crowded"
    for i in range(3000):
        (root / f"d{i:04d}" / "sub").mkdir(parents=True)
    run = SyntheticRun(root / "zzz" / "run", seed=8)
    run.finish()
    t0 = time.monotonic()
    found = find_runs([Place("data folder", root)], max_entries=500)
    assert time.monotonic() - t0 < 2.0
    assert not found.runs and found.entries == 500
    assert any("the scan stopped after 500 entries" in reason for _, reason in found.skipped)
    t0 = time.monotonic()
    found = find_runs([Place("data folder", root)])           # the default bound holds them all
    assert time.monotonic() - t0 < BOUND_S
    assert list(found.runs) == [Path(os.path.realpath(run.run_dir))] and not found.skipped


def test_recent_entries_and_a_record_that_cannot_be_read(tmp_path):
    run = SyntheticRun(tmp_path / "r", seed=9)
    run.finish()
    gone = tmp_path / "gone"
    empty = tmp_path / "empty"
    empty.mkdir()
    config = tmp_path / "c.toml"
    config.write_text("")
    found = find_runs([Place("recent", p, scan=False) for p in (run.run_dir, gone, empty, config)]
                      + [Place("user runs", tmp_path)])
    assert found.runs == {Path(os.path.realpath(run.run_dir)): ["recent", "user runs"]}
    assert (gone, "recent: no longer exists") in found.skipped
    assert (empty, "recent: holds no run any more (no run.zarr)") in found.skipped
    record = read_record(gone)
    assert record.status == DAMAGED and "not a Fieldscope run directory" in record.note


def test_compare_overlays_each_runs_draws(qtbot, tmp_path):
    config = tiny_case(tmp_path / "data")
    made, powers = [], []
    for i, (chains, samples) in enumerate(((3, 120), (2, 90))):
        run = SyntheticRun(tmp_path / "data" / "runs" / f"run{i}", chains=chains, num_samples=samples,
                           seed=10 + i, config_text=config.read_text(), config_dir=config.parent)
        powers.append(capture_powers(run))
        run.finish()
        made.append(run)
    without_field = stored_run(tmp_path / "data" / "runs" / "nofield", config, "finished")
    browser = browse(qtbot, [Place("data folder", tmp_path / "data")])
    browser.select_paths([made[0].run_dir, made[1].run_dir, without_field])
    browser.table.sortByColumn(COLUMN["run"], Qt.SortOrder.AscendingOrder)
    window = browser.compare_selected()
    assert isinstance(window, RunComparison)
    qtbot.waitUntil(lambda: not window.busy, timeout=int(BOUND_S * 1000))
    labels = [r.label for r in window.runs]
    assert labels == ["nofield", "run0", "run1"]
    runs = {"run0": made[0], "run1": made[1]}
    # traces: one curve per chain of each run, the fed post-warmup draws
    assert sorted(window.trace_curves) == ["amplitude", "index"]
    for name, per_run in window.trace_curves.items():
        colours = [curves[0].opts["pen"].color().name() for curves in per_run if curves]
        assert len(set(colours)) == len(colours), (name, colours)        # one colour per run
        for j, label in enumerate(labels):
            if label == "nofield":                                       # stored_run samples "index" only
                assert len(per_run[j]) == (0 if name == "amplitude" else 2)
                continue
            run = runs[label]
            assert len(per_run[j]) == run.chains
            for c, curve in enumerate(per_run[j]):
                x, y = curve.getOriginalDataset()
                np.testing.assert_array_equal(y, run.params[name][c, run.num_warmup:])
                np.testing.assert_array_equal(x, np.arange(run.num_samples))
            assert per_run[j][0].name() == label
    legend = window.trace_curves["index"][0][0].getViewBox().parentItem().legend
    assert [item.text for _, item in legend.items] == labels
    # P(k): the mean and the 5-95 % band of each run's stored draws
    assert window.power_curves[0] is None and "nofield: no P(k) draws" in window.note.text()
    for j, label in enumerate(labels[1:], start=1):
        fed = np.concatenate(powers[j - 1], axis=1)
        flat = fed.reshape(-1, fed.shape[-1])
        curves = window.power_curves[j]
        for key, expected in (("mean", flat.mean(axis=0)), ("high", np.percentile(flat, 95, axis=0)),
                              ("low", np.maximum(np.percentile(flat, 5, axis=0), flat.mean(axis=0) * 1e-3))):
            np.testing.assert_allclose(curves[key].getOriginalDataset()[1], expected, rtol=1e-12)
        assert curves["mean"].name() == label
    assert window.power_plot.getAxis("bottom").labelText == "k [h/Mpc]"
    assert window.power_plot.getAxis("left").labelText == "P(k) [(Mpc/h)^3]"
    # the summary, side by side: mean, sd, R-hat, ESS bulk of the pooled fed draws
    per = len(SUMMARY_COLUMNS)
    assert window.table.item(0, 1 + per).text() == "run0"
    for j, label in enumerate(labels):
        if label == "nofield":
            continue
        run = runs[label]
        fed = {name: post(run, v) for name, v in run.params.items()} | {"lp": post(run, run.stats["lp"])}
        for row in dg.summarize(fed):
            i = 1 + window.quantities.index(row.name)
            for c, (attr, _, _) in enumerate(SUMMARY_COLUMNS):
                shown = window.table.item(i, 1 + per * j + c).data(VALUE_ROLE)
                assert shown == pytest.approx(getattr(row, attr), rel=1e-12, nan_ok=True), (label, row.name, attr)
    browser.close()                                   # closes its comparisons
    QApplication.processEvents()
    assert not any(isinstance(w, (RunBrowser, RunComparison)) and w.isVisible()
                   for w in QApplication.topLevelWidgets())


def test_power_band_is_over_every_chain_and_draw():
    power = np.arange(2 * 5 * 3, dtype=float).reshape(2, 5, 3) + 1
    mean, low, high = power_band(power)
    flat = power.reshape(10, 3)
    np.testing.assert_array_equal(mean, flat.mean(axis=0))
    np.testing.assert_array_equal(low, np.percentile(flat, 5, axis=0))
    np.testing.assert_array_equal(high, np.percentile(flat, 95, axis=0))


def test_the_window_looks_in_recent_the_data_folder_and_the_user_runs(make_window, qtbot, runs, tmp_path):
    window = make_window(engine=None)
    window.open_config(runs["config"])
    elsewhere = stored_run(tmp_path / "elsewhere" / "old", runs["config"], "finished")
    window.add_recent(elsewhere)
    xdg = tmp_path / "xdg" / "fieldscope" / "runs" / "untitled-1"         # make_window's XDG_DATA_HOME
    stored_run(xdg, runs["config"], "stopped")
    places = places_for(window)
    assert [(p.label, p.scan) for p in places] == [("recent", False), ("data folder", True), ("user runs", True)]
    window.action["runs"].trigger()
    browser = next(d for d in window._dialogs if isinstance(d, RunBrowser))
    qtbot.waitUntil(lambda: not browser.busy, timeout=int(BOUND_S * 1000))
    found = {Path(p).name: browser.records[Path(p)].found_in for p in map(str, browser.records)}
    assert found == {"old": ("recent",), "untitled-1": ("user runs",), "finished": ("data folder",),
                     "running": ("data folder",), "interrupted": ("data folder",), "stopped": ("data folder",),
                     "failed": ("data folder",)}
    window.action["runs"].trigger()                   # again: the same browser, scanned again
    assert [d for d in window._dialogs if isinstance(d, RunBrowser)] == [browser]
    qtbot.waitUntil(lambda: not browser.busy, timeout=int(BOUND_S * 1000))
    browser.select_paths([runs["finished"].run_dir])
    assert browser.open_selected()
    assert window.run_dir == Path(os.path.realpath(runs["finished"].run_dir))
    browser.close()

