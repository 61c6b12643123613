"""Hostile run folders: every file of a small real run store and of a calibration store replaced
by a FIFO, a symlink to ``/dev/zero``, a symlink to a copy of itself outside the store, a
directory, or (chunk files) a few flipped bytes; the calibration store's files also deleted and
truncated (``test_store_damage`` does that for the run store). Each case must end, within a
few seconds (a timer interrupts a read that blocks), in one error naming the file or in the same
result as the undamaged store: never a hang, an endless read, zeros passed off as data, or
another exception.

The readers are those of ``fieldscope summary`` and the window (the run's reader, the writer
lock's holder) and of resume (checkpoint, ``RunStoreWriter.reopen``; ``CalibrationWriter.reopen``).

``python -m tests.core.store.test_store_hostile`` runs every kind of damage on every file (the
test runs one kind per file, chosen by a seeded generator, to stay within a few seconds).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

from core.calibration import CalibrationReader, CalibrationStoreError, CalibrationWriter, make_plan
from core.calibration.store import STORE_NAME as CALIBRATION_NAME
from core.store import run_lock
from core.store.checkpoint import CHECKPOINT_NAME
from core.store.run_store import STORE_NAME, RunStoreError

sys.path.insert(0, str(Path(__file__).parent))
from test_store_damage import read_everything, resume_everything, same, write_run  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")

#: seconds one read may take before the case counts as a hang
CASE_SECONDS = 10
HOSTILE = ("fifo", "symlink to /dev/zero", "symlink out of the store", "directory", "flip bytes")
CALIBRATION_KINDS = HOSTILE + ("delete", "truncate to 0", "truncate to half")


def is_chunk(rel: str) -> bool:
    return not Path(rel).name.startswith(".") and Path(rel).parent.name != "" and "zarr/" in rel


def damage(path: Path, how: str, outside: Path, rng) -> None:
    if how == "flip bytes":
        data = bytearray(path.read_bytes())
        for i in rng.choice(len(data), size=min(3, len(data)), replace=False):
            data[i] ^= 0xFF
        path.write_bytes(bytes(data))
        return
    if how == "truncate to half":
        path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])
        return
    if how == "symlink out of the store":
        outside.mkdir(parents=True, exist_ok=True)
        copy = outside / f"copy-{rng.integers(1 << 30)}"
        shutil.copyfile(path, copy)
    path.unlink()
    if how == "fifo":
        os.mkfifo(path)
    elif how == "symlink to /dev/zero":
        path.symlink_to("/dev/zero")
    elif how == "symlink out of the store":
        path.symlink_to(copy)
    elif how == "directory":
        path.mkdir()
        (path / "0").write_bytes(b"x")
    elif how == "truncate to 0":
        path.write_bytes(b"")
    elif how != "delete":
        raise ValueError(how)


@contextlib.contextmanager
def time_bound(seconds: float):
    """TimeoutError when the block runs longer (a blocking open or read is interrupted)."""
    def expire(signum, frame):
        raise TimeoutError(f"still reading after {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def outcome(read, work: Path, errors: tuple):
    """("ok", result) or ("error", message) of ``read(work)``, time-bounded; anything else escapes."""
    with time_bound(CASE_SECONDS):
        try:
            return "ok", read(work)
        except errors as err:
            return "error", str(err)


def judge(got, expected, names: str) -> str:
    kind, value = got
    if kind == "error":
        if "\n" in value:
            return f"a message of several lines: {value!r}"
        return "" if names in value else f"the message does not name {names!r}: {value}"
    return "" if same(value, expected) else "a result that differs from the undamaged store's"


# -- the run store ------------------------------------------------------------------------


def window(run_dir: Path) -> dict:
    """What the window reads (the summary's readers and the writer lock's holder)."""
    holder = run_lock.holder(run_dir)
    return {"read": read_everything(run_dir), "holder": None if holder is None else holder.pid}


RUN_PATHS = {"window": window, "resume": resume_everything}
#: what resume's reopen rewrites, restored after each case with the damaged file
REWRITTEN = (f"{STORE_NAME}/.zattrs", f"{STORE_NAME}/.zmetadata")


def restore(pristine: Path, work: Path, rel: str) -> None:
    for name in (rel, *REWRITTEN):
        target = work / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
        shutil.copyfile(pristine / name, target)


def judge_run(got, expected, rel: str) -> str:
    if rel == run_lock.LOCK_NAME and got[0] == "ok" and "holder" in got[1]:
        # a lock that is not a regular file is read as no lock (never through a link)
        if got[1]["holder"] is None:
            got = ("ok", dict(got[1], holder=expected["holder"]))
    return judge(got, expected, rel.removeprefix(f"{STORE_NAME}/"))


def sweep_run(pristine: Path, tmp: Path, kinds_for) -> tuple[int, list[str]]:
    work, outside = tmp / "run", tmp / "outside"
    shutil.copytree(pristine, work)
    expected = {name: read(work) for name, read in RUN_PATHS.items()}
    shutil.rmtree(work)
    shutil.copytree(pristine, work)
    rng = np.random.default_rng(33)
    files = sorted(p.relative_to(pristine).as_posix() for p in pristine.rglob("*") if p.is_file())
    cases, failures = 0, []
    for rel in files:
        for how in kinds_for(rel, rng):
            for name, read in RUN_PATHS.items():
                damage(work / rel, how, outside, rng)
                try:
                    failure = judge_run(outcome(read, work, (RunStoreError,)), expected[name], rel)
                except Exception as err:  # noqa: BLE001 - the point: nothing else may escape
                    failure = f"{type(err).__name__} escaped: {err}"
                restore(pristine, work, rel)
                cases += 1
                if failure:
                    failures.append(f"{how} {rel} ({name}): {failure}")
    return cases, failures


def one_kind(kinds):
    def pick(rel, rng):
        choices = [k for k in kinds if k != "flip bytes" or is_chunk(rel)]
        return [choices[int(rng.integers(len(choices)))]]
    return pick


def every_kind(kinds):
    return lambda rel, rng: [k for k in kinds if k != "flip bytes" or is_chunk(rel)]


@pytest.fixture(scope="module")
def pristine_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("hostile") / "run"
    write_run(run_dir)
    return run_dir


def test_hostile_files_in_a_run_folder_end_in_a_named_error_or_the_same_result(pristine_run, tmp_path):
    cases, failures = sweep_run(pristine_run, tmp_path, one_kind(HOSTILE))
    print(f"hostile run folder: {cases} cases")
    assert cases > 200
    assert not failures, f"{len(failures)} of {cases} cases:\n" + "\n".join(failures)


@pytest.mark.parametrize("rel", [f"{STORE_NAME}/.zattrs", f"{STORE_NAME}/posterior/index/0.0",
                                 f"{STORE_NAME}/posterior_field/field/0.0.0.0.0", CHECKPOINT_NAME,
                                 run_lock.LOCK_NAME])
@pytest.mark.parametrize("how", ["fifo", "symlink to /dev/zero"])
def test_a_fifo_or_dev_zero_is_refused_at_once_naming_the_file(pristine_run, tmp_path, rel, how):
    """The cases the red team found (issue 33.1): summary, the window and resume hung or read
    /dev/zero until the kernel killed them."""
    work = tmp_path / "run"
    shutil.copytree(pristine_run, work)
    damage(work / rel, how, tmp_path / "outside", np.random.default_rng(0))
    for name, read in RUN_PATHS.items():
        got = outcome(read, work, (RunStoreError,))
        if rel in (run_lock.LOCK_NAME,) or (rel == CHECKPOINT_NAME and name != "resume"):
            assert got[0] == "ok", (name, got)
        else:
            assert got[0] == "error" and Path(rel).name in got[1], (name, got)


@pytest.mark.parametrize("how", ["fifo", "symlink to /dev/zero"])
def test_reopening_rewrites_a_zmetadata_that_is_a_fifo_or_dev_zero_without_reading_it(pristine_run, tmp_path, how):
    """The writer's reopen tolerates a damaged ``.zmetadata`` (it rewrites it), but zarr's
    consolidation read the old one first: a FIFO hung it, /dev/zero read without end (found by
    this module's full sweep, ``python -m tests.core.store.test_store_hostile``). The readers
    refuse such a store naming the file; reopening replaces it, and the store reads as before."""
    from core.store.checkpoint import read_checkpoint
    from core.store.run_store import RunStoreWriter

    work = tmp_path / "run"
    shutil.copytree(pristine_run, work)
    expected = read_everything(work)
    damage(work / STORE_NAME / ".zmetadata", how, tmp_path / "outside", np.random.default_rng(7))
    got = outcome(read_everything, work, (RunStoreError,))
    assert got[0] == "error" and ".zmetadata" in got[1], got
    _, meta = read_checkpoint(work)
    with time_bound(CASE_SECONDS):
        RunStoreWriter.reopen(work, meta["progress"])
    assert (work / STORE_NAME / ".zmetadata").is_file() and not (work / STORE_NAME / ".zmetadata").is_symlink()
    assert same(read_everything(work), expected)


def test_a_store_whose_folder_is_a_symlink_out_of_the_run_is_refused(pristine_run, tmp_path):
    work = tmp_path / "run"
    shutil.copytree(pristine_run, work)
    shutil.move(work / STORE_NAME, tmp_path / "elsewhere.zarr")
    (work / STORE_NAME).symlink_to(tmp_path / "elsewhere.zarr")
    for read in RUN_PATHS.values():
        got = outcome(read, work, (RunStoreError,))
        assert got[0] == "error" and "symlink" in got[1], got
    # a group of the store that is a symlink (a folder planted below the store's root)
    shutil.rmtree(work)
    shutil.copytree(pristine_run, work)
    shutil.move(work / STORE_NAME / "posterior", tmp_path / "posterior")
    (work / STORE_NAME / "posterior").symlink_to(tmp_path / "posterior")
    for read in RUN_PATHS.values():
        got = outcome(read, work, (RunStoreError,))
        assert got[0] == "error" and "posterior" in got[1], got


def files_of(folder: Path) -> dict:
    """rel -> bytes (or what it is) of everything under ``folder``, links not followed."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            out[rel] = "symlink to " + os.readlink(path)
        elif path.is_file():
            out[rel] = path.read_bytes()
        elif path.is_dir():
            out[rel] = "directory"
        else:
            out[rel] = "special"
    return out


@pytest.mark.parametrize("rel", [f"{STORE_NAME}/sample_stats", f"{STORE_NAME}/posterior_field",
                                 f"{STORE_NAME}/posterior/index", f"{STORE_NAME}/observed_data/mask"])
def test_a_group_or_array_folder_that_is_a_symlink_out_of_the_run_is_refused(pristine_run, tmp_path, rel):
    """A folder of the store (a group or an array) moved out and replaced by a symlink to it:
    summary, the window and resume refuse the store naming that folder, and write nothing
    through the link (issue 33: reads open only files inside the store, no component a link)."""
    work, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    shutil.copytree(pristine_run, work)
    elsewhere.mkdir()
    shutil.move(work / rel, elsewhere / Path(rel).name)
    (work / rel).symlink_to(elsewhere / Path(rel).name)
    before = files_of(elsewhere)
    for name, read in RUN_PATHS.items():
        got = outcome(read, work, (RunStoreError,))
        assert got[0] == "error" and rel.removeprefix(f"{STORE_NAME}/") in got[1] and "symlink" in got[1], (name, got)
    assert files_of(elsewhere) == before


#: the tail chunk of a statistic: the store's 8 draws of it lie in its first chunk of 1024,
#: which appending the next chunk's draws reads back and rewrites
TAIL_CHUNK = f"{STORE_NAME}/sample_stats/step_size/0.0"


@pytest.mark.parametrize("how", ["truncate to 0", "truncate to half", "flip bytes", "fifo", "symlink to /dev/zero",
                                 "symlink out of the store", "directory"])
def test_resume_refuses_a_damaged_chunk_it_would_append_to_before_writing_anything(pristine_run, tmp_path, how):
    """``fieldscope resume`` of a store whose partly filled chunk was damaged ran the sampler,
    then failed when appending read it back: a traceback (a truncated chunk: Blosc's
    RuntimeError) or "writing chunk 6 failed ... (e.g. free disk space)" with the run marked
    failed (a FIFO or a symlink). The writer's reopen reads back every chunk an append
    rewrites: RunStoreError naming it, nothing in the store changed."""
    from core.store.checkpoint import read_checkpoint
    from core.store.run_store import RunStoreWriter

    work = tmp_path / "run"
    shutil.copytree(pristine_run, work)
    if how == "truncate to 0":
        (work / TAIL_CHUNK).write_bytes(b"")
    else:
        damage(work / TAIL_CHUNK, how, tmp_path / "outside", np.random.default_rng(3))
    before = files_of(work)
    _, meta = read_checkpoint(work)
    with time_bound(CASE_SECONDS), pytest.raises(RunStoreError, match="sample_stats/step_size/0.0"):
        RunStoreWriter.reopen(work, meta["progress"])
    assert files_of(work) == before


@pytest.mark.parametrize("rel", [f"{STORE_NAME}/observed_data/mask/0.0.0", f"{STORE_NAME}/posterior_field/k/0",
                                 f"{STORE_NAME}/warmup_sample_stats/lp/0.0"])
@pytest.mark.parametrize("how", ["fifo", "symlink to /dev/zero", "symlink out of the store", "directory"])
def test_a_chunk_file_that_is_not_a_regular_file_is_refused_when_the_store_is_opened(pristine_run, tmp_path,
                                                                                    rel, how):
    """A chunk that no reader of a command reads (the mask: not summary's; a warmup statistic:
    not resume's) but that is a FIFO, a device or a symlink: the store is refused when it is
    opened (its layout check, before TensorFlow loads for resume), naming the file; resume
    used to go on and report "finished" with the link left in the store."""
    from core.store.run_store import RunReader

    work = tmp_path / "run"
    shutil.copytree(pristine_run, work)
    damage(work / rel, how, tmp_path / "outside", np.random.default_rng(4))
    with time_bound(CASE_SECONDS), pytest.raises(RunStoreError, match=rel.removeprefix(f"{STORE_NAME}/")) as err:
        RunReader(work)
    assert "not a regular file" in str(err.value) and "\n" not in str(err.value)


def test_a_metadata_file_listed_in_zmetadata_that_is_a_fifo_is_named_as_a_fifo_not_missing(pristine_run, tmp_path):
    from core.store.run_store import RunReader

    work = tmp_path / "run"
    shutil.copytree(pristine_run, work)
    damage(work / STORE_NAME / "sample_stats" / "lp" / ".zarray", "fifo", tmp_path / "outside", None)
    with time_bound(CASE_SECONDS), pytest.raises(RunStoreError, match="sample_stats/lp/.zarray: a FIFO"):
        RunReader(work)


@pytest.mark.parametrize("how", ["symlink to a folder", "symlink to a file", "file"])
def test_a_run_store_is_created_beside_a_planted_link_at_its_temporary_name(tmp_path, how):
    """``run.zarr.creating`` (the name the store is built under) planted as a symlink to
    someone's folder: ``fieldscope run`` failed with "cannot create the run store: Cannot call
    rmtree on a symbolic link". The planted entry is removed (never followed): the run is
    created, the folder it pointed to is untouched."""
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "a.txt").write_text("precious")
    (victim / "sub" / "b.txt").write_text("precious too")
    before = files_of(victim)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    planted = run_dir / f"{STORE_NAME}.creating"
    if how == "symlink to a folder":
        planted.symlink_to(victim)
    elif how == "symlink to a file":
        planted.symlink_to(victim / "a.txt")
    else:
        planted.write_text("left over")
    write_run(run_dir)
    assert (run_dir / STORE_NAME).is_dir() and not (run_dir / STORE_NAME).is_symlink()
    assert not os.path.lexists(planted)
    assert files_of(victim) == before


def test_a_chunk_larger_than_its_metadata_allows_is_refused_before_it_is_read(pristine_run, tmp_path):
    work = tmp_path / "run"
    shutil.copytree(pristine_run, work)
    chunk = work / STORE_NAME / "posterior" / "index" / "0.0"
    with open(chunk, "r+b") as fh:           # sparse: 20 GB that take no disk
        fh.truncate(20 * 2**30)
    got = outcome(read_everything, work, (RunStoreError,))
    assert got[0] == "error" and "posterior/index/0.0" in got[1] and "bytes" in got[1], got


# -- the calibration store ----------------------------------------------------------------

NAMES = ["index", "loglik", "power_k00", "voxel_1_1_1"]


def write_calibration(out: Path) -> None:
    plan = make_plan(simulations=6, draws=20, chains=2, num_samples=50, seed=1, batch_size=4)
    writer = CalibrationWriter.create(out, config_text="[model]\n", config_dir=out, simulate_text="", plan=plan,
                                      quantities=NAMES, model_kind="field", grid_shape=(3, 3, 3), k=[0.1, 0.2],
                                      voxels=[(1, 1, 1)])
    rng = np.random.default_rng(2)
    for b in range(plan.batches):
        n = plan.kept(b)
        writer.append({"rank": rng.integers(1, plan.draws, (n, len(NAMES))),
                       "truth": rng.normal(size=(n, len(NAMES))),
                       "posterior_mean": rng.normal(size=(n, len(NAMES))),
                       "posterior_sd": rng.random((n, len(NAMES))) + 0.1,
                       "divergences": rng.integers(0, 3, n).astype(np.int32), "acceptance": rng.random(n),
                       "simulation": np.arange(b * plan.batch_size, b * plan.batch_size + n),
                       "voxel_rank": rng.integers(1, plan.draws, (n, 3, 3, 3))}, b + 1, 1.0 + b)
    writer.set_status("finished")


def read_calibration(out: Path) -> dict:
    reader = CalibrationReader(out)
    verdict = reader.verdict()
    return {"status": reader.status, "quantities": reader.quantities, "ranks": reader.ranks(),
            "truth": reader.truth(), "mean": reader.posterior_mean(), "sd": reader.posterior_sd(),
            "divergences": reader.divergences(), "index": reader.simulation_index(),
            "voxels": reader.voxel_ranks(), "k": reader.k(), "coverage": reader.coverage(),
            "verdict": str(verdict)}


def remove(folder: Path) -> None:
    """rmtree, once more if a write that failed was still removing its temporary file."""
    shutil.rmtree(folder, ignore_errors=True)
    if folder.exists():
        shutil.rmtree(folder)


def reopen_calibration(out: Path) -> dict:
    CalibrationWriter.reopen(out)
    return read_calibration(out)


def test_hostile_and_lost_files_of_a_calibration_store_end_in_a_named_error_or_the_same_result(tmp_path):
    pristine, work, outside = tmp_path / "pristine", tmp_path / "work", tmp_path / "outside"
    write_calibration(pristine)
    paths = {"summary": read_calibration, "resume": reopen_calibration}
    expected = {name: read(pristine) for name, read in paths.items()}
    rng = np.random.default_rng(21)
    files = sorted(p.relative_to(pristine).as_posix() for p in pristine.rglob("*") if p.is_file())
    assert len(files) > 30
    cases, failures = 0, []
    for rel in files:
        kinds = [k for k in CALIBRATION_KINDS if k != "flip bytes" or is_chunk(rel)]
        for how in kinds if is_chunk(rel) else [kinds[int(rng.integers(len(kinds)))]]:
            for name, read in paths.items():
                shutil.copytree(pristine, work)
                damage(work / rel, how, outside, rng)
                names = rel.removeprefix(f"{CALIBRATION_NAME}/") if is_chunk(rel) else CALIBRATION_NAME
                try:
                    failure = judge(outcome(read, work, (CalibrationStoreError,)), expected[name], names)
                except Exception as err:  # noqa: BLE001 - the point: nothing else may escape
                    failure = f"{type(err).__name__} escaped: {err}"
                remove(work)
                cases += 1
                if failure:
                    failures.append(f"{how} {rel} ({name}): {failure}")
    print(f"hostile calibration store: {cases} cases")
    assert not failures, f"{len(failures)} of {cases} cases:\n" + "\n".join(failures)


@pytest.mark.parametrize("rel", [CALIBRATION_NAME, f"{CALIBRATION_NAME}/rank", f"{CALIBRATION_NAME}/voxel_rank"])
def test_a_calibration_store_or_array_folder_that_is_a_symlink_out_of_it_is_refused(tmp_path, rel):
    """The calibration store, or one of its array folders, moved out and replaced by a symlink
    to it: the report and resume refuse it naming the folder, and write nothing through the
    link (the sweep above damages files only)."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    write_calibration(work)
    elsewhere.mkdir()
    shutil.move(work / rel, elsewhere / Path(rel).name)
    (work / rel).symlink_to(elsewhere / Path(rel).name)
    before = files_of(elsewhere)
    for read in (read_calibration, reopen_calibration):
        got = outcome(read, work, (CalibrationStoreError,))
        assert got[0] == "error" and f"{rel}:" in got[1] and "symlink" in got[1], (read.__name__, got)
    assert files_of(elsewhere) == before


@pytest.mark.parametrize("how", ["fifo", "symlink to /dev/zero", "symlink out of the store", "directory"])
def test_a_calibration_chunk_that_is_not_a_regular_file_is_refused_when_opened(tmp_path, how):
    """A chunk of a fixed array no report reads first (the field's k): named when the store
    is opened, before anything reads or writes it."""
    work = tmp_path / "work"
    write_calibration(work)
    damage(work / CALIBRATION_NAME / "k" / "0", how, tmp_path / "outside", np.random.default_rng(5))
    with time_bound(CASE_SECONDS), pytest.raises(CalibrationStoreError, match="k/0: .*not a regular file"):
        CalibrationReader(work)


@pytest.mark.parametrize("how", ["symlink to a folder", "file"])
def test_a_calibration_store_is_created_beside_a_planted_link_at_its_temporary_name(tmp_path, how):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "a.txt").write_text("precious")
    before = files_of(victim)
    out = tmp_path / "out"
    out.mkdir()
    planted = out / f"{CALIBRATION_NAME}.creating"
    if how == "file":
        planted.write_text("left over")
    else:
        planted.symlink_to(victim)
    write_calibration(out)
    assert (out / CALIBRATION_NAME).is_dir() and not (out / CALIBRATION_NAME).is_symlink()
    assert not os.path.lexists(planted)
    assert files_of(victim) == before


@pytest.mark.parametrize("rel", ["voxel_rank/0.0.0.0", "rank/0.0"])
@pytest.mark.parametrize("how", ["flip bytes", "truncate to half"])
def test_resuming_a_calibration_refuses_a_damaged_rank_chunk_before_writing(tmp_path, rel, how):
    """``fieldscope calibrate`` resuming a stopped store whose voxel_rank chunk was garbled ran
    the next batch, then ended in Blosc's RuntimeError traceback when appending read the
    ranks back for the coverage. Reopening reads them first: one error naming the chunk."""
    import json

    work = tmp_path / "work"
    write_calibration(work)
    attrs_path = work / CALIBRATION_NAME / ".zattrs"
    attrs = json.loads(attrs_path.read_text())
    attrs.update(progress={"batches": 1, "simulations": 4}, status="stopped")
    attrs_path.write_text(json.dumps(attrs))
    damage(work / CALIBRATION_NAME / rel, how, tmp_path / "outside", np.random.default_rng(6))
    before = files_of(work)
    with time_bound(CASE_SECONDS), pytest.raises(CalibrationStoreError, match=rel):
        CalibrationWriter.reopen(work)
    assert files_of(work) == before


def test_a_deleted_chunk_or_edited_progress_of_a_calibration_is_an_error_not_pass(tmp_path):
    """The red team's cases (issue 33.6): a deleted rank chunk read as zeros, a deleted
    quantity chunk gave empty names, an edited progress passed 2 of 6 simulations."""
    import json

    write_calibration(tmp_path / "a")
    (tmp_path / "a" / CALIBRATION_NAME / "rank" / "1.0").unlink()
    with pytest.raises(CalibrationStoreError, match="rank/1.0"):
        read_calibration(tmp_path / "a")
    write_calibration(tmp_path / "b")
    (tmp_path / "b" / CALIBRATION_NAME / "quantity" / "0").unlink()
    with pytest.raises(CalibrationStoreError, match="quantity/0"):
        read_calibration(tmp_path / "b")
    write_calibration(tmp_path / "c")
    attrs_path = tmp_path / "c" / CALIBRATION_NAME / ".zattrs"
    attrs = json.loads(attrs_path.read_text())
    attrs["progress"] = {"batches": 1, "simulations": 2}
    attrs_path.write_text(json.dumps(attrs))
    with pytest.raises(CalibrationStoreError, match="progress counts 2 simulations"):
        read_calibration(tmp_path / "c")
    attrs["progress"] = {"batches": 1, "simulations": 4}
    attrs_path.write_text(json.dumps(attrs))
    with pytest.raises(CalibrationStoreError, match="finished"):
        read_calibration(tmp_path / "c")


if __name__ == "__main__":      # the whole sweep: every kind of damage on every file
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_run(tmp / "pristine")
        cases, failures = sweep_run(tmp / "pristine", tmp / "sweep", every_kind(HOSTILE))
        print(f"hostile run folder, every kind: {cases} cases, {len(failures)} failures")
        print("\n".join(failures))
