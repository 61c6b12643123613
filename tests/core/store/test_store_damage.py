"""Damaged run stores: every file of a small real store deleted, truncated (to nothing and to
half) and garbled, plus hand-made attribute damage. Each case goes through the reader paths
``fieldscope summary`` uses (``summarize_run``) and the resume path's readers
(``read_checkpoint`` then ``RunStoreWriter.reopen``) and must end in a RunStoreError that
names what is damaged, or, where the damage does not matter to that path, in the same
result as the undamaged store. Never zeros (or junk) passed off as data, never another
exception.

The store is written by RunStoreWriter from synthetic chunks (no TensorFlow), with a
checkpoint (``write_checkpoint``) and a writer lock (``core.store.run_lock``) as the
engine leaves them.

Damage that does not matter, and why:

    writer.lock       no path here reads it (the engine's run_lock treats an unreadable
                      lock as no lock)
    checkpoint.npz    the summary never reads it (resume does: there it is an error)
    run.zarr/.zmetadata   resume rewrites it (the reader, for xarray / ArviZ's sake, refuses
                      a damaged one)
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from core.run.messages import STAT_NAMES
from core.store import run_lock
from core.store.checkpoint import CHECKPOINT_NAME, read_checkpoint, write_checkpoint
from core.store.run_store import STORE_NAME, ChunkRecord, RunReader, RunStoreError, RunStoreWriter
from core.store.run_summary import summarize_run

CHAINS, WARMUP, DRAWS, GRID, KEPT = 2, 3, 8, (3, 4, 2), (0, 2, 4, 6)
JUNK = b"\xff\xfe\x00\x9c\x80\x7f\xaa\x55" * 2
#: the least number of cases the fuzzer must run (it may grow with the layout, never shrink)
MIN_CASES = 380


def write_run(run_dir: Path) -> None:
    rng = np.random.default_rng(7)
    writer = RunStoreWriter.create(
        run_dir, config_text='[model]\nkind = "field"\n', model_kind="field", chains=CHAINS,
        num_warmup=WARMUP, num_samples=DRAWS, thin=2, param_names=["index"],
        observed={"data": (["x", "y", "z"], rng.normal(size=GRID)),
                  "mask": (["x", "y", "z"], rng.uniform(size=GRID) < 0.8)},
        grid_shape=GRID, k_centres=[0.1, 0.2, 0.3], k_counts=[6, 12, 8])

    def series(n):
        out = {name: rng.normal(size=(CHAINS, n)) for name in STAT_NAMES}
        out["diverging"] = rng.uniform(size=(CHAINS, n)) < 0.2
        out["n_steps"] = rng.integers(1, 9, size=(CHAINS, n)).astype(np.int32)
        return out

    params = ("index",)
    writer.append(ChunkRecord(warmup_stats=series(WARMUP), stats=series(0),
                              warmup_params={p: rng.normal(size=(CHAINS, WARMUP)) for p in params},
                              params={p: np.zeros((CHAINS, 0)) for p in params}),
                  {"warmup_draws": WARMUP, "draws": 0, "field_draws": 0, "chunks": 1})
    fields = rng.normal(size=(CHAINS, len(KEPT), *GRID)).astype(np.float32)
    writer.append(ChunkRecord(warmup_stats=series(0), stats=series(DRAWS),
                              warmup_params={p: np.zeros((CHAINS, 0)) for p in params},
                              params={p: rng.normal(size=(CHAINS, DRAWS)) for p in params},
                              fields=fields, powers=rng.uniform(1, 2, size=(CHAINS, len(KEPT), 3)),
                              field_draw_index=np.asarray(KEPT),
                              moments=(fields.mean(axis=(0, 1)), fields.std(axis=(0, 1)), CHAINS * DRAWS)),
                  {"warmup_draws": WARMUP, "draws": DRAWS, "field_draws": len(KEPT), "chunks": 2},
                  {"warmup_seconds": 0.5, "sampling_seconds": 1.0})
    writer.set_status("stopped")
    progress = {"warmup_draws": WARMUP, "draws": DRAWS, "field_draws": len(KEPT), "chunks": 2}
    write_checkpoint(run_dir, {"state_0": rng.normal(size=(CHAINS, 4))},
                     {"format": 1, "step": WARMUP + DRAWS, "progress": progress})
    run_lock.acquire(run_dir)


def read_everything(run_dir: Path) -> dict:
    """What the summary and the reader give for ``run_dir`` (RunStoreError propagates)."""
    summary = summarize_run(run_dir)
    reader = RunReader(run_dir)
    mean, std, count = reader.field_moments()
    return {"text": summary.text(), "csv": summary.table_csv(), "field": summary.field,
            "progress": reader.progress, "observed": reader.observed_data(),
            "moments": (mean, std, count), "steps": reader.field_draw_steps(),
            # what the GUI reads on open: every statistic and parameter, warmup too
            "series": {(name, warm): reader.stat(name, warm) for name in STAT_NAMES for warm in (True, False)}
            | {(p, warm): reader.param(p, warm) for p in reader.param_names for warm in (True, False)}}


def resume_everything(run_dir: Path) -> dict:
    """What resume reads: the checkpoint, the store reopened at its progress, and the store
    read back after that."""
    arrays, meta = read_checkpoint(run_dir)
    RunStoreWriter.reopen(run_dir, meta["progress"])
    return {"checkpoint": (arrays, meta), "after": read_everything(run_dir)}


def same(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and np.array_equal(a, b, equal_nan=True)
    if isinstance(a, float) and np.isnan(a):
        return isinstance(b, float) and np.isnan(b)
    return a == b


def damage_file(path: Path, how: str) -> None:
    if how == "delete":
        path.unlink()
        return
    data = path.read_bytes()
    if how == "truncate to 0":
        path.write_bytes(b"")
    elif how == "truncate to half":
        path.write_bytes(data[:len(data) // 2])
    else:                                 # garble: junk (never UTF-8) over the middle
        mid = len(data) // 2
        path.write_bytes(data[:mid] + JUNK[:max(1, len(data) - mid)] + data[mid + len(JUNK):])


def edit_json(path: Path, change) -> None:
    value = json.loads(path.read_text())
    change(value)
    path.write_text(json.dumps(value))


def attrs_case(change):
    return lambda run_dir: edit_json(run_dir / STORE_NAME / ".zattrs", change)


def set_progress(key, value):
    def change(attrs):
        attrs["progress"][key] = value
    return change


def set_shape(rel, shape):
    return lambda run_dir: edit_json(run_dir / STORE_NAME / rel / ".zarray",
                                     lambda meta: meta.__setitem__("shape", shape))


NONE = {"summary": False, "resume": False}
#: hand-made damage: (name, change of the run directory, what the message must name[, harmless to])
NAMED = [
    ("progress.draws = -5", attrs_case(set_progress("draws", -5)), "progress.draws"),
    ("progress a string", attrs_case(lambda a: a.__setitem__("progress", "12 draws")), "progress"),
    ("progress beyond the arrays", attrs_case(set_progress("draws", DRAWS + 1)), "progress.draws"),
    ("progress.field_draws beyond the arrays", attrs_case(set_progress("field_draws", len(KEPT) + 1)),
     "posterior_field"),
    ("progress.chunks a float", attrs_case(set_progress("chunks", 2.5)), "progress.chunks"),
    ("param_names '../../etc'", attrs_case(lambda a: a.__setitem__("param_names", ["index", "../../etc"])),
     "param_names"),
    ("param_names a name without an array", attrs_case(lambda a: a["param_names"].append("slope")),
     "posterior/slope"),
    ("chains a string", attrs_case(lambda a: a.__setitem__("chains", "2")), "chains"),
    ("huge draw axis", set_shape("posterior/index", [CHAINS, 2**60]), "posterior/index"),
    ("huge grid", set_shape("posterior_field/field", [CHAINS, len(KEPT), 2**20, 2**20, 2**20]),
     "posterior_field/field"),
    ("huge observed array", set_shape("observed_data/data", [2**40, 2**20, 2]), "observed_data/data"),
    ("an array's shape a string", set_shape("sample_stats/lp", "big"), "sample_stats/lp"),
    ("deleted group", lambda d: shutil.rmtree(d / STORE_NAME / "sample_stats"), "sample_stats"),
    ("deleted array", lambda d: shutil.rmtree(d / STORE_NAME / "observed_data" / "mask"), "observed_data/mask"),
    ("an array of another dtype", lambda d: edit_json(d / STORE_NAME / "posterior/index/.zarray",
                                                      lambda m: m.__setitem__("dtype", "<i2")), "posterior/index"),
    ("an unknown codec", lambda d: edit_json(d / STORE_NAME / "posterior/index/.zarray",
                                             lambda m: m.__setitem__("compressor", {"id": "nonesuch"})),
     "posterior/index"),
    ("checkpoint progress beyond the store", lambda d: write_checkpoint(
        d, {"state_0": np.zeros(2)}, {"format": 1, "step": 99, "progress": {
            "warmup_draws": WARMUP, "draws": DRAWS + 4, "field_draws": len(KEPT), "chunks": 3}}), "draws",
     {"summary": True, "resume": False}),                 # the summary never reads the checkpoint
]


#: what resume's reopen rewrites (at the checkpoint's progress, which is the store's: no array
#: is resized), restored after each case with the damaged file
REWRITTEN = (f"{STORE_NAME}/.zattrs", f"{STORE_NAME}/.zmetadata")


def restore(pristine: Path, work: Path, rel: str | None) -> None:
    """Undo a case: the damaged file ``rel`` and what reopen rewrites, or (None) everything."""
    if rel is None:
        shutil.rmtree(work)
        shutil.copytree(pristine, work)
        return
    for name in (rel, *REWRITTEN):
        shutil.copyfile(pristine / name, work / name)


def run_case(work: Path, damage, expected: dict, harmless: dict, names: str) -> str:
    """Damage the copy ``work`` of the store, run both paths. Returns a description of a
    failure or ''."""
    damage(work)
    for path, run in (("summary", read_everything), ("resume", resume_everything)):
        try:
            got = run(work)
        except RunStoreError as err:
            if harmless[path]:
                return f"{path}: an error for damage that does not matter: {err}"
            if names not in str(err):
                return f"{path}: the message does not name {names!r}: {err}"
            continue
        except Exception as err:  # noqa: BLE001 - the point: nothing else may escape
            return f"{path}: {type(err).__name__} escaped: {err}"
        if not harmless[path]:
            return f"{path}: read a damaged store without an error"
        if not same(got, expected[path]):
            return f"{path}: a result that differs from the undamaged store's"
    return ""


HARMLESS = {"writer.lock": {"summary": True, "resume": True},
            CHECKPOINT_NAME: {"summary": True, "resume": False},
            f"{STORE_NAME}/.zmetadata": {"summary": False, "resume": True}}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("damage") / "run"
    write_run(run_dir)
    return run_dir


def test_every_damaged_file_and_attribute_ends_in_a_named_error_or_the_same_result(pristine, tmp_path):
    work = tmp_path / "run"
    shutil.copytree(pristine, work)
    expected = {"summary": read_everything(work)}
    expected["resume"] = resume_everything(work)
    restore(pristine, work, None)
    assert expected["summary"]["progress"]["draws"] == DRAWS and expected["summary"]["field"] is not None
    assert same(expected["resume"]["after"], expected["summary"])

    files = sorted(p.relative_to(pristine).as_posix() for p in pristine.rglob("*") if p.is_file())
    assert CHECKPOINT_NAME in files and run_lock.LOCK_NAME in files and len(files) > 90
    cases, failures = 0, []
    for rel in files:
        harmless = HARMLESS.get(rel, NONE)
        # the message names the file (a chunk file by its path, metadata by its own)
        names = rel.removeprefix(f"{STORE_NAME}/")
        for how in ("delete", "truncate to 0", "truncate to half", "garble"):
            if how == "truncate to half" and os.path.getsize(pristine / rel) < 2:
                continue
            failure = run_case(work, lambda d, rel=rel, how=how: damage_file(d / rel, how),
                               expected, harmless, names)
            restore(pristine, work, rel)
            cases += 1
            if failure:
                failures.append(f"{how} {rel}: {failure}")
    for label, damage, names, *harmless in NAMED:
        failure = run_case(work, damage, expected, harmless[0] if harmless else NONE, names)
        restore(pristine, work, None)
        cases += 1
        if failure:
            failures.append(f"{label}: {failure}")
    print(f"store-damage fuzzer: {cases} cases")
    assert not failures, f"{len(failures)} of {cases} cases:\n" + "\n".join(failures)
    assert cases >= MIN_CASES


def test_chunks_whose_values_equal_the_fill_value_are_written_and_read_back(tmp_path):
    """zarr skips writing a chunk whose values all equal the fill value (a run with no
    divergence, a zero moment, an unobserved corner of the data): the reader, which takes a
    missing chunk for damage, must still open such a run, appended to and resumed."""
    run_dir = tmp_path / "run"
    writer = RunStoreWriter.create(
        run_dir, config_text='[model]\nkind = "field"\n', model_kind="field", chains=CHAINS,
        num_warmup=WARMUP, num_samples=DRAWS, thin=2, param_names=["index"],
        observed={"data": (["x", "y", "z"], np.zeros(GRID)), "mask": (["x", "y", "z"], np.zeros(GRID, bool))},
        grid_shape=GRID, k_centres=[0.1, 0.2, 0.3], k_counts=[6, 12, 8])

    def zeros(n):
        out = {name: np.zeros((CHAINS, n)) for name in STAT_NAMES}
        out["diverging"] = np.zeros((CHAINS, n), bool)
        out["n_steps"] = np.zeros((CHAINS, n), np.int32)
        return out

    empty = {"index": np.zeros((CHAINS, 0))}
    progress = {"warmup_draws": WARMUP, "draws": 0, "field_draws": 0, "chunks": 1}
    writer.append(ChunkRecord(warmup_stats=zeros(WARMUP), stats=zeros(0),
                              warmup_params={"index": np.zeros((CHAINS, WARMUP))}, params=empty), progress)
    reader = RunReader(run_dir)
    assert not reader.stat("diverging", warmup=True).any()
    assert reader.observed("data").shape == GRID
    resumed = RunStoreWriter.reopen(run_dir, progress)
    fields = np.zeros((CHAINS, 1, *GRID), np.float32)
    resumed.append(ChunkRecord(warmup_stats=zeros(0), stats=zeros(2), warmup_params=empty,
                               params={"index": np.zeros((CHAINS, 2))}, fields=fields,
                               powers=np.zeros((CHAINS, 1, 3)), field_draw_index=np.asarray([0]),
                               moments=(fields[0, 0], fields[0, 0], 2)),
                   {"warmup_draws": WARMUP, "draws": 2, "field_draws": 1, "chunks": 2})
    reader.refresh()
    assert reader.param("index").shape == (CHAINS, 2) and not reader.field_draw(0).any()


def test_the_files_a_killed_zarr_write_leaves_behind_are_not_members(pristine, tmp_path):
    """zarr writes NAME.<32 hex>.partial and renames it: kill -9 in between (seen in CI: a resume
    after kill -9 failed reading below '.zgroup.<hex>.partial' as if it were a child group) leaves
    it. The summary, the reader and resume see the store as it was."""
    expected = {"read": read_everything(pristine)}
    work = tmp_path / "run"
    shutil.copytree(pristine, work)
    zarr_dir = work / STORE_NAME
    some_array = next(zarr_dir.rglob(".zarray")).parent
    for folder, name in ((zarr_dir, ".zgroup"), (zarr_dir, ".zattrs"), (zarr_dir, ".zmetadata"),
                         (some_array, "0.0"), (some_array, ".zarray")):
        (folder / f"{name}.{'0123456789abcdef' * 2}.partial").write_bytes(b'{"half a wri')
    assert same(read_everything(work), expected["read"])
    after = resume_everything(work)
    assert same(after["after"], expected["read"])
