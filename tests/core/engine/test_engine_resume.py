"""A run stopped and resumed, or extended, against one straight through (the unrolled leapfrog
and the while loop), a resume refused where it would add nothing or its checkpoint is damaged,
an older checkpoint's pooled adaptation sums resumed, and the seed's reproducibility. Apart from
``test_engine.py`` so that the test workers share the two files (after kill -9 and Ctrl-C:
``test_engine_signals.py``).
"""

from __future__ import annotations

import numpy as np
import pytest

from core.engine.engine import Engine, EngineError
from core.run.engine_limits import unrolls
from core.store.run_store import RunReader, stored_run_config
from support.engine_cases import assert_same_run, run, stop_then_resume, write_field_case


@pytest.mark.parametrize("leapfrog", [10, 40])
def test_stop_and_resume_give_the_same_draws_as_one_run(tmp_path, leapfrog):
    # L = 10: the unrolled leapfrog; L = 40: the while loop (core.run.engine_limits.unrolls)
    assert unrolls(leapfrog, 2, 8**3, 4) == (leapfrog == 10)
    config, text, *_ = write_field_case(tmp_path, warmup=60, samples=90, chunk=20, shape=(8, 8, 8),
                                        leapfrog=leapfrog)
    status, _ = run(config, text, tmp_path / "straight")
    assert status == "finished"

    stopped = stop_then_resume(config, text, tmp_path / "resumed", lambda p: p["draws"] >= 40)
    assert 40 <= stopped["draws"] < 90
    assert_same_run(tmp_path / "straight", tmp_path / "resumed")


def test_extending_a_finished_run_equals_a_longer_run(tmp_path):
    config, text, *_ = write_field_case(tmp_path, warmup=40, samples=80, chunk=30, shape=(8, 8, 8))
    run(config, text, tmp_path / "long")
    short_cfg, short_text, *_ = write_field_case(tmp_path, warmup=40, samples=50, chunk=30, shape=(8, 8, 8))
    run(short_cfg, short_text, tmp_path / "short")
    cfg, txt = stored_run_config(tmp_path / "short")
    assert Engine(cfg, txt, tmp_path / "short").resume(num_samples=80) == "finished"
    ra, rb = RunReader(tmp_path / "long"), RunReader(tmp_path / "short")
    np.testing.assert_array_equal(ra.stat("lp"), rb.stat("lp"))
    np.testing.assert_array_equal(ra.param("index") if ra.param_names else ra.stat("grad_norm"),
                                  rb.param("index") if rb.param_names else rb.stat("grad_norm"))


def test_resume_refuses_a_finished_run_and_a_damaged_checkpoint(tmp_path):
    config, text, *_ = write_field_case(tmp_path, warmup=10, samples=10, shape=(8, 8, 8))
    run(config, text, tmp_path / "run")
    cfg, txt = stored_run_config(tmp_path / "run")
    with pytest.raises(EngineError, match="already finished"):
        Engine(cfg, txt, tmp_path / "run").resume()
    with pytest.raises(EngineError, match="would not add any"):
        Engine(cfg, txt, tmp_path / "run").resume(num_samples=5)
    with np.load(tmp_path / "run" / "checkpoint.npz") as data:
        kept = {k: data[k] for k in data.files if k != "state_0"}
    np.savez(tmp_path / "run" / "checkpoint.npz", **kept)
    with pytest.raises(EngineError, match="incomplete or damaged"):
        Engine(cfg, txt, tmp_path / "run").resume(num_samples=20)


def test_a_checkpoint_with_the_older_pooled_adaptation_sums_resumes(tmp_path):
    """Checkpoints from before issue #34 hold the diagonal's Welford sums pooled over the chains,
    (1, ...) a part; each chain takes them (``core.engine.checkpoint``) and the run finishes."""
    from core.engine.engine import Control

    config, text, *_ = write_field_case(tmp_path, warmup=60, samples=20, chunk=20, shape=(8, 8, 8))
    assert config.sampler.preconditioner == "diagonal"
    control = Control()

    def emit(event):          # stop after the first chunk: inside the window [9, 45)
        if event.get("type") == "chunk":
            control.stop = True

    assert Engine(config, text, tmp_path / "run", emit=emit, control=control).start() == "stopped"
    path = tmp_path / "run" / "checkpoint.npz"
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    assert arrays["mass_mean_0"].shape == (2, 8, 8, 8) and float(arrays["mass_count"]) == 11.0
    for key in ("mass_mean_0", "mass_m2_0"):
        arrays[key] = arrays[key].mean(axis=0, keepdims=True)           # the older layout
    np.savez(path, **arrays)
    cfg, txt = stored_run_config(tmp_path / "run")
    assert Engine(cfg, txt, tmp_path / "run").resume() == "finished"
    reader = RunReader(tmp_path / "run")
    assert reader.stat("lp").shape == (2, 20) and np.all(np.isfinite(reader.stat("lp")))


def test_seed_reproducibility(tmp_path):
    config, text, *_ = write_field_case(tmp_path, warmup=20, samples=30, shape=(8, 8, 8))
    run(config, text, tmp_path / "a")
    run(config, text, tmp_path / "b")
    assert_same_run(tmp_path / "a", tmp_path / "b")
    other, other_text, *_ = write_field_case(tmp_path, warmup=20, samples=30, shape=(8, 8, 8), seed=4)
    run(other, other_text, tmp_path / "c")
    assert not np.array_equal(RunReader(tmp_path / "a").stat("lp"), RunReader(tmp_path / "c").stat("lp"))
