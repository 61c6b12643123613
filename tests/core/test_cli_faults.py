"""``fieldscope run`` / ``resume`` over the engine in this (TensorFlow) process: a run that
ends before its first checkpoint, by a stop or by a file-size limit (the kernel refuses the
write: EFBIG, as a full disk refuses one with ENOSPC), is started again in place, and both
give the same draws (compared bit for bit)."""

from __future__ import annotations

import resource
import signal
from pathlib import Path

from app import cli
from core.engine.engine import Control, Engine
from core.store import run_lock
from core.store.checkpoint import CHECKPOINT_NAME
from core.store.run_store import RunReader
from support.engine_cases import assert_same_run, write_field_case

SMALL = dict(shape=(8, 8, 8), warmup=20, samples=20, chunk=10)     # 4 chunks


class FileSizeLimit:
    """RLIMIT_FSIZE on this process (soft limit only, so that it can be lifted again), with
    SIGXFSZ ignored: a write beyond ``limit`` bytes fails with EFBIG (an OSError)."""

    def __init__(self, limit: int):
        self.limit = limit

    def __enter__(self):
        self.saved = resource.getrlimit(resource.RLIMIT_FSIZE)
        self.handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.limit, self.saved[1]))
        return self

    def __exit__(self, *exc):
        resource.setrlimit(resource.RLIMIT_FSIZE, self.saved)
        signal.signal(signal.SIGXFSZ, self.handler)
        return False


def test_runs_ended_before_their_first_checkpoint_start_again_in_place(tmp_path, capsys):
    """Stopped while loading/compiling (no draws, no checkpoint): ``resume`` starts it again,
    saying so. A write refused during the first chunk (the store, about 12 kB of metadata, is
    created; the first chunk's checkpoint, about 30 kB, is refused): one line naming the write
    and EFBIG, exit 2, lock released; ``resume`` starts it again. Both give the same draws."""
    config, text, *_ = write_field_case(tmp_path, **SMALL)
    stopped = tmp_path / "stopped"
    assert Engine(config, text, stopped, control=Control(stop=True)).start() == "stopped"
    reader = RunReader(stopped)
    assert reader.status == "stopped" and reader.progress["chunks"] == 0
    assert not (stopped / CHECKPOINT_NAME).exists() and run_lock.holder(stopped) is None
    assert cli.main(["resume", str(stopped)]) == 0
    assert (f"fieldscope: {stopped}: the run ended before its first checkpoint (stopped); "
            "starting it again from the beginning with its stored config") in capsys.readouterr().err
    assert RunReader(stopped).status == "finished"
    # a folder holding draws is never overwritten
    assert cli.main(["run", str(tmp_path / "run.toml"), "--out", str(stopped)]) == 2
    assert f"{stopped}: already holds a run (finished, 40 draws per chain)" in capsys.readouterr().err

    full = tmp_path / "full"
    with FileSizeLimit(20_000):
        assert cli.main(["run", str(tmp_path / "run.toml"), "--out", str(full)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fieldscope:")]
    assert len(err) == 1, err
    assert "writing the checkpoint failed: File too large [EFBIG]" in err[0]
    assert f"fieldscope resume {full}" in err[0]
    reader = RunReader(full)
    assert reader.status == "failed" and reader.progress["chunks"] == 1
    assert not (full / CHECKPOINT_NAME).exists() and run_lock.holder(full) is None
    assert not [p for p in Path(full).iterdir() if p.name.startswith(".checkpoint")]
    assert cli.main(["resume", str(full)]) == 0
    assert "its 10 stored draws per chain are drawn again" in capsys.readouterr().err
    assert_same_run(stopped, full)
