"""The command line refuses, before TensorFlow loads and before anything is written, what
cannot work: a ``resume --num-samples`` beyond the config limit or below what the run holds,
a resume whose checkpoint was lost (it used to draw every stored draw again), a grid too
small to sample (issue 33, items 2, 3 and 10). No TensorFlow: the store is written by
``core.store``'s writer (``test_cli._store_with_draws``)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from test_cli import _no_tensorflow, _store_with_draws

from app import cli
from core.store.checkpoint import CHECKPOINT_NAME, write_checkpoint
from core.store.run_store import STORE_NAME, RunReader
from support.gui import tiny_case


def snapshot(folder):
    """Every file of a folder with its bytes (what must stay untouched)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(capsys, argv) -> str:
    t0 = time.perf_counter()
    assert cli.main(argv) == 2
    assert time.perf_counter() - t0 < 10.0          # TensorFlow alone takes 10-20 s to load
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def test_a_lost_checkpoint_is_refused_and_the_stored_draws_kept(tmp_path, capsys):
    config = tiny_case(tmp_path)
    run_dir = tmp_path / "run"
    _store_with_draws(run_dir, config, warmup=(3, 2))           # two chunks: a checkpoint was written
    before = snapshot(run_dir)
    line = refused(capsys, ["resume", str(run_dir)])
    assert f"{CHECKPOINT_NAME} is missing" in line and "5 draws per chain in 2 chunks" in line
    assert "fieldscope run CONFIG --out NEWDIR" in line
    assert snapshot(run_dir) == before
    assert RunReader(run_dir).progress["warmup_draws"] == 5
    assert _no_tensorflow()


@pytest.mark.parametrize("n, needle", [(0, "1 to 10,000,000"), (20_000_000, "1 to 10,000,000"),
                                       (10**12, "1 to 10,000,000"), (-3, "1 to 10,000,000")])
def test_resume_num_samples_out_of_range_is_refused_at_once(tmp_path, capsys, n, needle):
    config = tiny_case(tmp_path)
    run_dir = tmp_path / "run"
    _store_with_draws(run_dir, config)
    write_checkpoint(run_dir, {"state": np.zeros(2)}, {"progress": RunReader(run_dir).progress})
    before = snapshot(run_dir)
    line = refused(capsys, ["resume", str(run_dir), "--num-samples", str(n)])
    assert f"--num-samples {n}" in line and needle in line
    assert snapshot(run_dir) == before
    assert RunReader(run_dir).attrs["num_samples"] == 4
    assert _no_tensorflow()


def test_a_grid_too_small_to_sample_is_refused_before_tensorflow_loads(tmp_path, capsys):
    config = tiny_case(tmp_path)
    data = dict(np.load(tmp_path / "tiny_field.npz"))
    data["data"] = np.zeros((1, 1, 1), np.float32) + 0.5
    np.savez(tmp_path / "tiny_field.npz", **data)
    line = refused(capsys, ["run", str(config), "--out", str(tmp_path / "run")])
    assert "too small to sample" in line and "tiny_field.npz" in line
    assert not (tmp_path / "run" / STORE_NAME).exists()
    line = refused(capsys, ["calibrate", str(config), "--simulations", "4", "--out", str(tmp_path / "cal")])
    assert "too small to sample" in line
    assert _no_tensorflow()


def test_a_calibration_batch_that_cannot_fit_in_memory_is_refused_before_tensorflow_loads(tmp_path, capsys):
    config = tiny_case(tmp_path, shape=(32, 32, 32))
    line = refused(capsys, ["calibrate", str(config), "--simulations", "100000", "--batch", "100000",
                            "--out", str(tmp_path / "cal")])
    assert line.startswith("fieldscope: --batch: a batch of 200000 chains does not fit")
    assert not (tmp_path / "cal").exists()
    assert _no_tensorflow()


def _store_begun_with(run_dir, config_path):
    """A store with draws whose ``inputs`` fingerprint the files as the engine records them."""
    from core.config import parse_config
    from core.run.input_files import input_digests
    from core.store.zarr_files import open_group

    config = parse_config(config_path.read_text(), base_dir=config_path.parent, source=str(config_path))
    _store_with_draws(run_dir, config_path)
    write_checkpoint(run_dir, {"state": np.zeros(2)}, {"progress": RunReader(run_dir).progress})
    open_group(run_dir / STORE_NAME, "r+").attrs["inputs"] = input_digests(config)
    return config


def test_resume_refuses_a_changed_data_file_naming_it_and_accepts_it_when_asked(tmp_path, capsys):
    """Issue 33.4: resume re-read the data file and never compared it with what the run began
    with; a changed file gave draws of another posterior beside the old data."""
    from core.run import input_files

    config_path = tiny_case(tmp_path)
    run_dir = tmp_path / "run"
    config = _store_begun_with(run_dir, config_path)
    assert input_files.verify_inputs(run_dir, config) is None          # the same files: nothing to say
    data = dict(np.load(tmp_path / "tiny_field.npz"))
    data["data"] = data["data"] + 1.0
    np.savez(tmp_path / "tiny_field.npz", **data)
    before = snapshot(run_dir)
    line = refused(capsys, ["resume", str(run_dir)])
    assert f"{tmp_path / 'tiny_field.npz'} (data.path) is not the file the run began with" in line
    assert "--accept-changed-data" in line
    assert snapshot(run_dir) == before and _no_tensorflow()
    # accepted: the new fingerprints and the change are recorded, and it checks clean again
    assert "accepting changed input files" in input_files.verify_inputs(run_dir, config, accept=True)
    input_files.record_accepted(run_dir, config)
    attrs = RunReader(run_dir).attrs
    assert len(attrs["input_changes"]) == 1 and "tiny_field.npz" in attrs["input_changes"][0]["changes"][0]
    assert input_files.verify_inputs(run_dir, config) is None
    # a data file replaced by a FIFO is named, never opened for a blocking read
    (tmp_path / "tiny_field.npz").unlink()
    import os

    os.mkfifo(tmp_path / "tiny_field.npz")
    line = refused(capsys, ["resume", str(run_dir)])
    assert "tiny_field.npz: a FIFO, not a regular file (data.path)" in line


def test_demo_never_overwrites_a_file_it_did_not_write_nor_writes_through_a_link(tmp_path, capsys):
    """Issue 33.5: ``fieldscope demo DIR`` overwrote a user's field.toml or series.csv silently
    and followed links planted at its files' names."""
    out = tmp_path / "demo"
    assert cli.main(["demo", str(out)]) == 0
    first = snapshot(out)
    assert set(first) == {"demo_field.npz", "field.toml", "field_exact.toml", "series.csv", "integral.toml"}
    assert cli.main(["demo", str(out)]) == 0                 # again: the same files, nothing refused
    assert snapshot(out) == first
    capsys.readouterr()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "field.toml").write_text("# my own config\n")
    victim = tmp_path / "victim.csv"
    victim.write_text("t,y\n1,2\n")
    (mine / "series.csv").symlink_to(victim)
    line = refused(capsys, ["demo", str(mine)])
    assert f"{mine / 'field.toml'}: exists and is not the demo's" in line and f"{mine / 'series.csv'}: a symlink" in line
    assert sorted(p.name for p in mine.iterdir()) == ["field.toml", "series.csv"]          # nothing written
    assert (mine / "field.toml").read_text() == "# my own config\n" and victim.read_text() == "t,y\n1,2\n"


def test_saving_a_config_replaces_a_planted_link_and_never_writes_through_it(tmp_path):
    """Issue 33.5: saving a config wrote through a link planted at ``.NAME.toml.part`` (the saved
    config then was a link to the victim)."""
    from app.state.config_state import ConfigState
    from core.demo import write_demo

    demo = write_demo(tmp_path / "demo")
    state = ConfigState.from_file(demo["field_config"])
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    target = tmp_path / "demo" / "copy.toml"
    (tmp_path / "demo" / ".copy.toml.part").symlink_to(victim)
    target.symlink_to(victim)
    state.save(target)
    assert victim.read_text() == "the user's own file\n"
    assert not target.is_symlink() and ConfigState.from_file(target).document() == state.document()


def test_summary_into_a_closed_pipe_ends_quietly(tmp_path):
    """Issue 33.9: ``fieldscope summary RUN | head -1`` ended in a BrokenPipeError traceback."""
    import subprocess
    import sys

    config = tiny_case(tmp_path)
    run_dir = tmp_path / "run"
    _store_with_draws(run_dir, config)
    for argv in (["summary", str(run_dir)], ["--help"]):
        proc = subprocess.Popen([sys.executable, "-m", "app", *argv], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        proc.stdout.close()                       # before it writes: as head -1 does after its line
        err = proc.stderr.read().decode()
        proc.wait(timeout=120)
        assert "Traceback" not in err and "BrokenPipeError" not in err, err


def _sampled_store(run_dir, acceptance: float, moving: bool, draws: int = 40):
    """A finished store of two chains (no TensorFlow): ``acceptance`` the mean acceptance,
    ``moving`` whether the draws change."""
    from core.run.messages import STAT_DTYPES, STAT_NAMES
    from core.store.run_store import ChunkRecord, RunStoreWriter

    rng = np.random.default_rng(5)
    writer = RunStoreWriter.create(run_dir, config_text="[model]\n", model_kind="integral", chains=2, num_warmup=0,
                                   num_samples=draws, thin=1, param_names=["A"], observed={})
    stats = {name: rng.normal(size=(2, draws)).astype(STAT_DTYPES.get(name, np.float64)) for name in STAT_NAMES}
    stats["acceptance_rate"] = np.clip(rng.normal(acceptance, 0.01, (2, draws)), 0, 1)
    stats["diverging"] = np.zeros((2, draws), bool)
    stats["n_steps"] = np.full((2, draws), 8, np.int32)
    values = rng.normal(size=(2, draws)) if moving else np.full((2, draws), 0.3)
    if not moving:
        stats["lp"] = np.full((2, draws), -12.5)
    empty = {name: np.zeros((2, 0), STAT_DTYPES.get(name, np.float64)) for name in STAT_NAMES}
    writer.append(ChunkRecord(warmup_stats=empty, stats=stats, warmup_params={"A": np.zeros((2, 0))},
                              params={"A": values}),
                  {"warmup_draws": 0, "draws": draws, "field_draws": 0, "chunks": 1})
    writer.set_status("finished")


@pytest.mark.parametrize("acceptance, moving, needle", [(0.004, True, "accepted almost no proposal"),
                                                        (0.7, False, "never moved"),
                                                        (0.7, True, None)])
def test_a_run_whose_chains_do_not_sample_ends_with_a_warning_and_exit_1(tmp_path, capsys, acceptance, moving,
                                                                         needle):
    """Issue 33.8: MAMS with target_accept 1e-4 (acceptance 0.004, chains frozen) and NUTS with
    one warmup step (acceptance 0.03) printed 'finished: 0 divergences' and exited 0."""
    from core.store.run_summary import summarize_run

    run_dir = tmp_path / "run"
    _sampled_store(run_dir, acceptance, moving)
    code = cli._report("finished", run_dir)
    out = capsys.readouterr().out
    text = summarize_run(run_dir).text()
    if needle is None:
        assert code == 0 and "warning" not in out and "warning" not in text
    else:
        assert code == 1
        assert f"warning: chains 0, 1 {'of 2 ' if 'accepted' in needle else ''}{needle}" in out
        assert text.splitlines()[1].startswith("warning: chains 0, 1") and needle in text
    assert RunReader(run_dir).progress["draws"] == 40          # the draws are kept


def test_resume_of_a_finished_run_without_num_samples_names_the_option_at_once(tmp_path, capsys):
    """Nothing to continue: the refusal comes before TensorFlow loads and says how to extend it."""
    from core.store.run_store import RunStoreWriter

    config = tiny_case(tmp_path)
    run_dir = tmp_path / "run"
    _store_with_draws(run_dir, config)
    write_checkpoint(run_dir, {"state": np.zeros(2)}, {"progress": RunReader(run_dir).progress})
    writer = RunStoreWriter.reopen(run_dir, RunReader(run_dir).progress)
    writer.set_status("finished")
    before = snapshot(run_dir)
    line = refused(capsys, ["resume", str(run_dir)])
    assert "is finished with" in line and f"fieldscope resume {run_dir} --num-samples" in line
    assert snapshot(run_dir) == before
    assert _no_tensorflow()


@pytest.mark.parametrize("damage", ["fifo", "directory", "truncated", "flipped", "link"])
def test_a_damaged_checkpoint_is_named_before_tensorflow_loads(tmp_path, capsys, damage):
    """A checkpoint that cannot be read (issue #33: named only after TensorFlow loaded, with no
    advice): refused at once, naming the file, the store untouched and what to do said."""
    import os

    config = tiny_case(tmp_path)
    run_dir = tmp_path / "run"
    _store_with_draws(run_dir, config)
    write_checkpoint(run_dir, {"state": np.arange(4096.0)}, {"progress": RunReader(run_dir).progress})
    path = run_dir / CHECKPOINT_NAME
    raw = path.read_bytes()
    if damage in ("fifo", "directory", "link"):
        path.unlink()
        {"fifo": os.mkfifo, "directory": os.mkdir,
         "link": lambda p: os.symlink(tmp_path / "elsewhere.npz", p)}[damage](path)
        (tmp_path / "elsewhere.npz").write_bytes(raw)
    elif damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    else:
        flipped = bytearray(raw)
        flipped[len(raw) // 2] ^= 0x10                 # inside the array's bytes: its CRC-32 differs
        path.write_bytes(bytes(flipped))
    store_before = snapshot(run_dir / STORE_NAME)
    line = refused(capsys, ["resume", str(run_dir), "--num-samples", "10"])
    assert str(path) in line and "fieldscope run CONFIG --out NEWDIR" in line
    assert snapshot(run_dir / STORE_NAME) == store_before
    assert _no_tensorflow()


def test_a_store_older_than_the_fingerprints_compares_its_kept_data(tmp_path, capsys):
    """A store without input fingerprints (written before them) keeps its observed data: resume
    compares it with what the data file gives now (issue #33: a replaced file was sampled, exit
    0); the same data passes, other data is refused at once, and accepting it records the
    fingerprints from then on."""
    from core.config import parse_config
    from core.io import load_field_inputs
    from core.run import input_files
    from core.store.run_store import RunStoreWriter

    config_path = tiny_case(tmp_path)
    config = parse_config(config_path.read_text(), base_dir=config_path.parent, source=str(config_path))
    inputs = load_field_inputs(config)
    mask = np.asarray(inputs.mask, bool) & np.isfinite(inputs.data)
    run_dir = tmp_path / "run"
    writer = RunStoreWriter.create(run_dir, config_text=config_path.read_text(), config_dir=config_path.parent,
                                   model_kind="field", chains=2, num_warmup=3, num_samples=4, thin=1,
                                   param_names=["index"], grid_shape=inputs.data.shape,
                                   observed={"data": (["x", "y", "z"], np.where(mask, inputs.data, np.nan)),
                                             "mask": (["x", "y", "z"], mask)},
                                   k_centres=np.array([1.0, 2.0]), k_counts=np.array([6, 20]))
    writer.set_status("stopped")
    write_checkpoint(run_dir, {"state": np.zeros(2)}, {"progress": RunReader(run_dir).progress})
    assert "inputs" not in RunReader(run_dir).attrs
    assert input_files.verify_inputs(run_dir, config) is None            # the same data
    data = dict(np.load(tmp_path / "tiny_field.npz"))
    data["data"] = data["data"] * 1.001
    np.savez(tmp_path / "tiny_field.npz", **data)
    before = snapshot(run_dir)
    line = refused(capsys, ["resume", str(run_dir), "--num-samples", "10"])
    assert "tiny_field.npz: its data differ from the data the run's store kept" in line
    assert snapshot(run_dir) == before and _no_tensorflow()
    input_files.record_accepted(run_dir, config)
    attrs = RunReader(run_dir).attrs
    assert attrs["inputs"]["data.path"]["sha256"] == input_files.file_digest(tmp_path / "tiny_field.npz")["sha256"]
    assert input_files.verify_inputs(run_dir, config) is None


def test_a_simulate_with_config_that_samples_other_parameters_is_named_at_once(tmp_path, capsys):
    """--simulate-with a config that samples other P(k) hyperparameters (issue #33 item 10: the
    refusal came after TensorFlow loaded, named the data file and left an empty --out folder)."""
    import tomllib

    from core.config import config_from_dict, dump_config

    config_path = tiny_case(tmp_path)
    document = tomllib.loads(config_path.read_text())
    document["prior"]["index"] = -1.5                       # fixed: samples nothing
    other = tmp_path / "fixed.toml"
    other.write_text(dump_config(config_from_dict(document, tmp_path)))
    out = tmp_path / "cal"
    line = refused(capsys, ["calibrate", str(config_path), "--simulations", "6", "--simulate-with", str(other),
                            "--out", str(out)])
    assert line.startswith(f"fieldscope: {other} (--simulate-with): its prior samples no parameter")
    assert "the calibrated config's samples index" in line
    assert not out.exists() and _no_tensorflow()
    # the same parameters: no refusal from this check
    from core.calibration.plan import check_simulate_with
    from core.config import parse_config

    config = parse_config(config_path.read_text(), base_dir=tmp_path)
    check_simulate_with(config, config, str(config_path))


@pytest.mark.parametrize("option,needle", [("0", "--devices: must be a positive integer"),
                                           ("gpu", '--devices: must be "all" or a positive integer'),
                                           ("9", "--devices: may be at most sampler.chains = 2")])
def test_a_devices_option_that_cannot_work_is_refused_before_tensorflow_loads(tmp_path, capsys, option, needle):
    config = tiny_case(tmp_path)
    line = refused(capsys, ["run", str(config), "--out", str(tmp_path / "run"), "--devices", option])
    assert needle in line
    assert not (tmp_path / "run" / STORE_NAME).exists()
    assert _no_tensorflow()
