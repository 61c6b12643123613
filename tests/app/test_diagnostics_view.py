"""The diagnostics panel against ``fieldscope summary`` on run stores written here.

The stores are written with core.store.run_store.RunStoreWriter from synthetic chains (no
TensorFlow): one parameter whose chains disagree (R-hat > 1.01), a short chain (ESS < 100),
divergences in one chain, stored P(k) draws for the shell plot.
"""

from __future__ import annotations

import csv
import io
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from pyqtgraph.Qt import QtCore, QtGui

from app.state.run_state import RunState
from app.views import diagnostics as dview
from app.views.diagnostics import ATTENTION_COLOURS, COLUMN_PRIORITY, DiagnosticsView
from core.field.grid import Grid
from core.field.power_estimator import measure_power
from core.store import diagnostics as dg
from core.store.run_store import ChunkRecord, RunReader, RunStoreWriter
from core.store.run_summary import TEXT_COLUMNS, format_cell, needs_attention

REPO = Path(__file__).resolve().parents[2]
GRID = (6, 5, 4)
USER = QtCore.Qt.ItemDataRole.UserRole


class SyntheticRun:
    """A run store filled chunk by chunk from synthetic chains (engine layout)."""

    def __init__(self, run_dir, chains=3, num_warmup=10, num_samples=120, chunk=30, thin=2,
                 shift=1.5, seed=0, config_text="", config_dir=None):
        rng = np.random.default_rng(seed)
        self.chains, self.num_warmup, self.num_samples, self.chunk = chains, num_warmup, num_samples, chunk
        total = num_warmup + num_samples
        x = np.empty((chains, total))
        x[:, 0] = rng.normal(size=chains)
        for t in range(1, total):
            x[:, t] = 0.8 * x[:, t - 1] + 0.6 * rng.normal(size=chains)
        x[-1] += shift                                  # the last chain elsewhere: R-hat > 1.01
        self.params = {"index": x, "amplitude": np.exp(rng.normal(size=(chains, total)))}
        self.stats = {"lp": rng.normal(size=(chains, total)),
                      "acceptance_rate": rng.uniform(0.4, 1.0, (chains, total)),
                      "step_size": np.full((chains, total), 0.2) * np.arange(1, chains + 1)[:, None],
                      "energy_error": rng.normal(size=(chains, total)),
                      "diverging": np.zeros((chains, total), bool),
                      "n_steps": rng.integers(3, 20, (chains, total)).astype(np.int32),
                      "grad_norm": rng.uniform(1, 2, (chains, total)),
                      "trajectory_length": rng.uniform(1, 3, (chains, total))}
        self.stats["diverging"][min(1, chains - 1), num_warmup + np.array([3, 50])] = True
        self.grid = Grid(GRID, 24.0)
        ref = measure_power(np.zeros(GRID), self.grid)
        self.thin = thin
        self.run_dir = Path(run_dir)
        self.writer = RunStoreWriter.create(
            self.run_dir, config_text=config_text, config_dir=config_dir, model_kind="field", chains=chains, num_warmup=num_warmup,
            num_samples=num_samples, thin=thin, param_names=list(self.params), observed={},
            grid_shape=GRID, k_centres=ref.k, k_counts=ref.counts)
        self.writer.set_status("running")
        self.rng = rng
        self.step = 0
        self.progress = {"warmup_draws": 0, "draws": 0, "field_draws": 0, "chunks": 0}
        self.timing = {"warmup_seconds": 0.0, "sampling_seconds": 0.0}

    @property
    def done(self) -> bool:
        return self.step >= self.num_warmup + self.num_samples

    def append_chunk(self) -> None:
        a = self.step
        stop = self.num_warmup if a < self.num_warmup else self.num_warmup + self.num_samples
        b = min(a + self.chunk, stop)
        warm = a < self.num_warmup
        part = {k: v[:, a:b] for k, v in self.stats.items()}
        ppart = {k: v[:, a:b] for k, v in self.params.items()}
        none = {k: v[:, :0] for k, v in self.stats.items()}
        pnone = {k: v[:, :0] for k, v in self.params.items()}
        record = ChunkRecord(warmup_stats=part if warm else none, stats=none if warm else part,
                             warmup_params=ppart if warm else pnone, params=pnone if warm else ppart)
        if not warm:
            index = np.arange(a - self.num_warmup, b - self.num_warmup)
            index = index[index % self.thin == 0]
            fields = self.rng.normal(size=(self.chains, len(index), *GRID)).astype(np.float32)
            record.fields, record.field_draw_index = fields, index
            record.powers = measure_power(fields, self.grid).power
            self.progress["field_draws"] += len(index)
        self.progress["warmup_draws" if warm else "draws"] += b - a
        self.progress["chunks"] += 1
        self.timing["warmup_seconds" if warm else "sampling_seconds"] += 0.01 * (b - a)
        self.writer.append(record, dict(self.progress), dict(self.timing))
        self.step = b

    def finish(self) -> None:
        while not self.done:
            self.append_chunk()
        self.writer.set_status("finished")


def cli_summary(run_dir, tmp_path):
    """``fieldscope summary RUN --csv`` in a fresh process: (stdout, csv rows)."""
    out_csv = tmp_path / "cli.csv"
    out = subprocess.run([sys.executable, "-m", "app", "summary", str(run_dir), "--csv", str(out_csv)],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    return out.stdout, out_csv.read_text()


def view_for(qtbot, run_dir):
    state = RunState()
    state.load_from_store(run_dir)
    view = DiagnosticsView(state)
    qtbot.addWidget(view)
    view.resize(1100, 700)
    return view, state


def wait_computed(qtbot, view, timeout=20000):
    qtbot.waitUntil(lambda: not view.busy and view.summary is not None, timeout=timeout)


def table_cells(view):
    table = view.table
    return [[table.item(r, c) for c in range(table.columnCount())] for r in range(table.rowCount())]


def same(a, b) -> bool:
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("diag")
    run = SyntheticRun(d / "run")
    run.finish()
    stdout, csv_text = cli_summary(d / "run", d)
    return run, stdout, csv_text


def test_table_cells_equal_the_cli_summary(qtbot, finished_run, tmp_path):
    run, stdout, csv_text = finished_run
    view, _ = view_for(qtbot, run.run_dir)
    assert view.refresh()
    wait_computed(qtbot, view)
    parsed = list(csv.DictReader(io.StringIO(csv_text)))
    cells = table_cells(view)
    assert len(cells) == len(parsed) == 4 * 3          # (pooled + 3 chains) x (index, amplitude, lp)
    headers = [view.table.horizontalHeaderItem(c).text() for c in range(view.table.columnCount())]
    assert headers == [h for _, h in TEXT_COLUMNS]
    printed = stdout.splitlines()
    for row_cells, line in zip(cells, parsed):
        texts = []
        for (name, _), item in zip(TEXT_COLUMNS, row_cells):
            expected = line[name] if name in ("scope", "quantity") else \
                int(line[name]) if name == "divergences" else float(line[name])
            assert same(item.data(USER), expected), (line["scope"], line["quantity"], name)
            assert item.text() == format_cell(name, expected)
            texts.append(item.text())
        # the same row, as `fieldscope summary` printed it
        assert any(p.split() == " ".join(texts).split() for p in printed), texts
    # the export is the CLI's CSV, byte for byte
    view.export_csv(tmp_path / "view.csv")
    assert (tmp_path / "view.csv").read_text() == csv_text
    view.export_png(tmp_path / "view.png")
    assert QtGui.QImage(str(tmp_path / "view.png")).width() == view.width()


def test_cells_needing_attention_are_coloured(qtbot, finished_run):
    run, _, csv_text = finished_run
    view, _ = view_for(qtbot, run.run_dir)
    view.refresh()
    wait_computed(qtbot, view)
    seen = {"r_hat": 0, "ess": 0, "divergences": 0, "plain": 0}
    for row_cells in table_cells(view):
        for (name, _), item in zip(TEXT_COLUMNS, row_cells):
            value = item.data(USER)
            coloured = item.background().style() != QtCore.Qt.BrushStyle.NoBrush
            assert coloured == needs_attention(name, value), (name, value)
            if coloured:
                assert item.background().color() == QtGui.QColor(ATTENTION_COLOURS[name])
                seen["ess" if name.startswith("ess") else name] += 1
            elif name in ATTENTION_COLOURS:
                seen["plain"] += 1
    assert all(seen.values()), seen
    rows = {(r.scope, r.quantity): r for r in view.summary.table()}
    assert rows[("pooled", "index")].r_hat > 1.01          # the shifted chain
    red = QtGui.QColor(ATTENTION_COLOURS["r_hat"])
    assert view.table.item(0, 4).background().color() == red and view.table.item(0, 1).text() == "index"


def test_shell_plot_equals_shell_diagnostics(qtbot, finished_run):
    run, _, _ = finished_run
    view, _ = view_for(qtbot, run.run_dir)
    view.refresh()
    wait_computed(qtbot, view)
    k, _, power = RunReader(run.run_dir).powers()
    expected = dg.shell_diagnostics(power)
    for name, curve in view.shell_curves.items():
        x, y = curve.getOriginalDataset()
        np.testing.assert_array_equal(x, k)
        np.testing.assert_array_equal(y, getattr(expected, name))
    assert not view.shell_hint.isVisible()


def test_follows_a_store_chunk_by_chunk(qtbot, tmp_path):
    run = SyntheticRun(tmp_path / "run", num_samples=90)
    state = RunState()
    state.load_from_store(run.run_dir)
    view = DiagnosticsView(state)
    qtbot.addWidget(view)
    assert view.refresh()
    wait_computed(qtbot, view)
    assert view.table.rowCount() == 0 and "no post-warmup draws yet" in view.message.text()
    assert not view.refresh()                     # nothing new: no computation
    n_rows = []
    while not run.done:
        run.append_chunk()
        state.refresh_from_store()
        assert view.refresh()
        wait_computed(qtbot, view)
        assert view.summary.progress == run.progress
        n_rows.append(view.table.rowCount())
        assert not view.refresh()
    assert n_rows == [0] + [12] * 3
    run.writer.set_status("finished")
    state.refresh_from_store()
    assert view.refresh()
    wait_computed(qtbot, view)
    assert view.summary.status == "finished" and view.message.text().startswith("finished")


def test_computes_off_the_gui_thread_and_drops_stale_results(qtbot, tmp_path, monkeypatch):
    slow_a = SyntheticRun(tmp_path / "a", seed=1)
    slow_a.finish()
    run_b = SyntheticRun(tmp_path / "b", chains=2, num_samples=90, seed=2)
    run_b.finish()
    real = dview.compute_summary
    release = threading.Event()
    threads = []

    def slow(run_dir):
        threads.append(threading.current_thread())
        if Path(run_dir) == slow_a.run_dir:
            release.wait(60)                        # a store on a very slow disk
        return real(run_dir)

    monkeypatch.setattr(dview, "compute_summary", slow)
    state = RunState()
    state.load_from_store(slow_a.run_dir)
    view = DiagnosticsView(state)
    qtbot.addWidget(view)
    ticks = []
    timer = QtCore.QTimer()
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    timer.start(10)
    t0 = time.perf_counter()
    assert view.refresh()
    assert time.perf_counter() - t0 < 5.0            # hands the work over (the read waits 60 s)
    # the event loop runs while it computes (a deadline, not a fixed wait: a loaded
    # machine may give this process few time slices, but the read is held until release)
    qtbot.waitUntil(lambda: len(ticks) >= 10, timeout=20000)
    assert view.busy
    assert view.summary is None and "reading" in view.message.text()
    # the user opens another run while the first is still being read
    state.load_from_store(run_b.run_dir)
    view.refresh()
    computed = []
    view.computed.connect(lambda: computed.append(view.summary))
    release.set()
    qtbot.waitUntil(lambda: not view.busy and view.summary is not None, timeout=20000)
    timer.stop()
    assert threading.main_thread() not in threads and len(threads) == 2
    # a's result was dropped: only b's was ever shown
    assert computed and all(s.progress == run_b.progress and len(s.chains) == 2 for s in computed)
    assert view.table.rowCount() == 3 * 3
    assert {view.table.item(r, 0).data(USER) for r in range(9)} == {"pooled", "chain 0", "chain 1"}
    expected = real(run_b.run_dir).table()
    assert [view.table.item(r, 4).data(USER) for r in range(9)] == [row.r_hat for row in expected]


def test_hints_for_no_store_and_created_store(qtbot, tmp_path):
    state = RunState()
    view = DiagnosticsView(state)
    qtbot.addWidget(view)
    assert not view.refresh()
    assert "no run store" in view.message.text()
    with pytest.raises(ValueError, match="no diagnostics to export yet"):
        view.export_csv(tmp_path / "x.csv")
    state.reset({"run_dir": tmp_path / "later", "chains": 2})
    assert not view.refresh()
    assert "waiting for the run store" in view.message.text()
    SyntheticRun(tmp_path / "later")                 # created, no chunk yet
    state.reset(RunState.meta_from_reader(RunReader(tmp_path / "later")))
    assert view.refresh()
    wait_computed(qtbot, view)
    assert view.table.rowCount() == 0
    assert "running: no post-warmup draws yet" in view.message.text()
    assert view.shell_hint.isVisible()
    view.export_csv(tmp_path / "empty.csv")
    assert (tmp_path / "empty.csv").read_text().startswith("scope,quantity,")
    with pytest.raises(OSError, match="cannot write"):
        view.export_csv(tmp_path / "no" / "such" / "dir.csv")


@pytest.mark.parametrize("width", [290, 600, 1600])
def test_the_table_fits_its_panel_by_hiding_the_least_needed_columns(qtbot, finished_run, width):
    """At the default window size the view is ~290 px wide: no horizontal scrolling, the
    columns kept are the first of COLUMN_PRIORITY, and the header's menu shows one by hand."""
    run, _, _ = finished_run
    view, _ = view_for(qtbot, run.run_dir)
    view.resize(width, 600)
    view.show()
    qtbot.waitExposed(view)
    view.refresh()
    wait_computed(qtbot, view)
    table = view.table
    widths = lambda: [(n, table.columnWidth(c)) for c, (n, _) in enumerate(TEXT_COLUMNS)  # noqa: E731
                      if not table.isColumnHidden(c)]
    try:
        qtbot.waitUntil(lambda: table.horizontalScrollBar().maximum() == 0, timeout=5000)
    except Exception:
        raise AssertionError(f"viewport {table.viewport().width()}: {widths()}") from None
    hidden = view.hidden_columns()
    shown = [n for n in COLUMN_PRIORITY if n not in hidden]
    assert shown == list(COLUMN_PRIORITY[:len(shown)])      # hidden from the end of the priority
    # the estimate and R-hat first (issue #32 item 11: mean and sd were hidden), ESS from 600 px
    assert {"scope", "quantity", "mean", "sd", "r_hat"} <= set(shown)
    assert width < 600 or "ess_bulk" in shown
    if width >= 1600:
        assert hidden == []
    else:
        assert hidden and all(h in view.table.horizontalHeader().toolTip()
                              for h in (dict(TEXT_COLUMNS)[n] for n in hidden))
        # shown by hand, it stays shown (then the table scrolls); "fit" forgets the choice
        view.choose_column(hidden[-1], True)
        assert hidden[-1] not in view.hidden_columns()
        view.reset_columns()
        assert view.hidden_columns() == hidden
    # the cells of hidden columns are still there: the export and the CLI's table are whole
    assert view.table.columnCount() == len(TEXT_COLUMNS)


def test_advice_for_a_slow_hyperparameter_is_shown_and_its_button_sets_the_config(make_window, qtbot, tmp_path):
    """A run whose sampled index did not mix (its chains disagree) with the identity preconditioner
    (and with divergences): the view says to try the conditional one first (``core.store.advice``) and its button sets it in
    the window's config (changed, not saved); ``fieldscope summary`` prints the same advice."""
    from support.gui import tiny_case

    config = tiny_case(tmp_path / "case")
    run = SyntheticRun(tmp_path / "run", config_text=config.read_text(), config_dir=str(config.parent))
    run.finish()
    window = make_window(engine=None)
    assert window.open_run_dir(tmp_path / "run")
    assert window.state["sampler.preconditioner"] == "identity" and not window.state.modified
    view = window.views.show_tab("Diagnostics")
    view.refresh(force=True)
    wait_computed(qtbot, view)
    assert view.advice_box.isVisibleTo(window) and len(view.advice_rows) == 2
    assert "divergent transition(s) after warmup" in view.advice_rows[1][0].text()   # the run has two
    label, button = view.advice_rows[0]
    assert "the P(k) hyperparameters move slowly (R-hat index" in label.text()
    assert "sampler.preconditioner = \"conditional\"" in button.toolTip()
    button.click()
    assert window.state["sampler.preconditioner"] == "conditional" and window.state.modified
    assert "sampler.preconditioner" in window.message_label.text()
    stdout, _ = cli_summary(tmp_path / "run", tmp_path)
    assert "advice: the P(k) hyperparameters move slowly" in stdout
    assert 'set sampler.preconditioner = "conditional"' in stdout
