"""A calibration's batches on a Dask cluster of 2 worker processes (``core.engine.calibrate_cluster``,
issue #34): the ranks, means and sds of a single-process calibration; a worker killed with SIGKILL
while it runs a batch: Dask runs that batch again and the campaign ends with the same ranks; a
stop cancels the queue and the same command resumes to the same ranks; a scheduler that is not
there, a typo in ``--scheduler`` and a worker reading another file than the submitter are refused
naming what is wrong.

The integral model (its program compiles in seconds), 8 simulations in 4 batches of 2. The
single-process reference runs in the test process; the clusters' workers are processes of their
own (spawned, TensorFlow loaded in each).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from app import cli
from core.calibration import CalibrationReader, PlanError
from core.calibration.cluster import Scheduler, parse_scheduler
from core.config import config_from_dict, dump_config
from core.engine.calibrate import Calibrator
from core.engine.calibrate_cluster import BatchJob, _check_inputs, input_sha256
from core.engine.engine import Control, EngineError
from core.integral.series import make_demo_series
from core.io.series import save_series_csv

distributed = pytest.importorskip("distributed")

SIMULATIONS, DRAWS, BATCH = 8, 20, 2


def integral_document():
    return {"model": {"kind": "integral"}, "data": {"path": "series.csv"}, "integral": {"refine": 2},
            "prior": {"A": {"dist": "normal", "loc": 0.0, "scale": 0.2}, "c": {"dist": "normal", "loc": 0.0, "scale": 1.0},
                      "sigma": {"dist": "halfnormal", "scale": 1.0}},
            "sampler": {"algorithm": "hmc", "num_warmup": 100, "num_samples": 40, "num_leapfrog_steps": 6,
                        "step_size": 0.05, "adapt_mass_matrix": True, "chains": 2, "seed": 5, "thin": 1}}


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cluster")
    series = make_demo_series(seed=0, n=12, t_max=5.0, A=0.1, c=0.0, sigma=0.5)
    save_series_csv(folder / "series.csv", series.t, series.y)
    config = config_from_dict(integral_document(), base_dir=folder)
    text = dump_config(config)
    (folder / "integral.toml").write_text(text)
    return folder, config, text


def calibrate(case, out, **kwargs):
    folder, config, text = case
    calibrator = Calibrator(config, text, folder / out, simulations=SIMULATIONS, draws=DRAWS, batch_size=BATCH,
                            **kwargs)
    return calibrator.run(), CalibrationReader(folder / out)


def same_calibration(reader, reference):
    """Equal ranks and simulations; means and sds to float tolerance (other processes, same program)."""
    assert reader.progress["batches"] == reference.progress["batches"] == SIMULATIONS // BATCH
    np.testing.assert_array_equal(reader.ranks(), reference.ranks())
    a, b = reader.posterior_mean(), reference.posterior_mean()
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(reader.posterior_sd(), reference.posterior_sd(), rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def reference(case):
    status, reader = calibrate(case, "reference")
    assert status == "finished"
    return reader


@pytest.fixture(scope="module")
def cluster():
    """A cluster of 2 worker processes of our own (so that the test can reach its workers),
    used through its address as ``--scheduler tcp://...`` would."""
    import logging

    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       silence_logs=logging.ERROR,
                                       env={"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"})
    client = distributed.Client(cluster)
    yield cluster, client
    client.close()
    cluster.close()


def test_a_local_cluster_gives_the_ranks_of_one_process(case, reference):
    status, reader = calibrate(case, "local2", scheduler=parse_scheduler("local:2"))
    assert status == "finished"
    same_calibration(reader, reference)
    assert reader.status == "finished"


def test_a_worker_killed_mid_batch_has_its_batch_run_again(case, reference, cluster):
    local, client = cluster
    client.restart()              # fresh workers: their first batch compiles (seconds), so it is in hand a while
    killed = []

    def kill_a_busy_worker():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            busy = [addr for addr, keys in client.processing().items() if keys]
            if busy:
                time.sleep(1.0)                       # well into the batch (its compilation)
                addr = busy[0]
                in_hand = list(client.processing().get(addr, ()))
                pid = client.run(os.getpid, workers=[addr])[addr]
                os.kill(pid, signal.SIGKILL)
                killed.append((addr, pid, in_hand))
            time.sleep(0.05)

    killer = threading.Thread(target=kill_a_busy_worker)
    killer.start()
    try:
        status, reader = calibrate(case, "killed", scheduler=Scheduler(address=local.scheduler_address))
    finally:
        killer.join()
    assert killed and killed[0][2], "no worker was running a batch"
    assert status == "finished"
    same_calibration(reader, reference)
    # the nanny started a new worker process in place of the killed one
    client.wait_for_workers(2, timeout=60)
    assert killed[0][1] not in client.run(os.getpid).values()


def test_a_stopped_campaign_resumes_to_the_same_ranks(case, reference, cluster):
    local, _client = cluster
    control = Control()

    def stop_after_first(info):
        control.stop = True

    scheduler = Scheduler(address=local.scheduler_address)
    status, reader = calibrate(case, "stopped", scheduler=scheduler, control=control, on_batch=stop_after_first)
    assert status == "stopped"
    assert reader.status == "stopped"
    assert 1 <= reader.progress["batches"] < SIMULATIONS // BATCH
    status, reader = calibrate(case, "stopped", scheduler=scheduler)
    assert status == "finished"
    same_calibration(reader, reference)


def test_a_scheduler_that_is_not_there_is_named(case, monkeypatch):
    monkeypatch.setattr("core.engine.calibrate_cluster._CONNECT_TIMEOUT", "3s")
    with pytest.raises(EngineError, match="cannot reach the Dask scheduler"):
        calibrate(case, "nowhere", scheduler=parse_scheduler("tcp://127.0.0.1:9"))


@pytest.mark.parametrize("spec", ["local", "local:0", "local:x", "local:100000", "127.0.0.1:8786",
                                  "http://host:8786", "tcp://host", "tcp://host:99999"])
def test_a_wrong_scheduler_option_is_refused_before_anything_loads(spec, case, capsys):
    folder = case[0]
    with pytest.raises(PlanError, match="--scheduler"):
        parse_scheduler(spec)
    code = cli.main(["calibrate", str(folder / "integral.toml"), "--simulations", "4", "--out",
                     str(folder / "typo"), "--scheduler", spec])
    assert code == 2
    assert "--scheduler" in capsys.readouterr().err
    assert not (folder / "typo").exists()


def test_the_scheduler_option_parses():
    assert parse_scheduler("local:3") == Scheduler(workers=3)
    assert parse_scheduler(" tcp://10.0.0.5:8786 ") == Scheduler(address="tcp://10.0.0.5:8786")
    assert parse_scheduler("tls://node-1.cluster:8786").address == "tls://node-1.cluster:8786"


def test_a_worker_reading_another_file_is_refused(case, tmp_path):
    folder, config, text = case
    plan_job = BatchJob(text, str(folder), "", "", None, input_sha256(config))
    _check_inputs(plan_job, config, None)                                   # the same files: fine
    changed = BatchJob(text, str(folder), "", "", None, {**plan_job.digests, "data.path": "0" * 64})
    with pytest.raises(EngineError, match="data.path differs from the submitting machine"):
        _check_inputs(changed, config, None)
    moved = config_from_dict({**integral_document(), "data": {"path": str(tmp_path / "absent.csv")}}, base_dir=folder)
    with pytest.raises(EngineError, match="cannot read the file of data.path"):
        _check_inputs(plan_job, moved, None)


def test_a_batch_that_kills_every_worker_it_runs_on_fails_naming_it(tmp_path, cluster):
    """A model file whose simulate kills its process (as an out-of-memory kill would): Dask runs
    the batch again on other workers, then gives up; the calibration fails naming the batch."""
    from tests.support.model_files import copy_example

    local, client = cluster
    config_path = copy_example("trapezoid_integral", tmp_path)
    model = tmp_path / "model.py"
    model.write_text(model.read_text() + "\n\ndef simulate(params, seed):\n    import os, signal\n"
                     "    os.kill(os.getpid(), signal.SIGKILL)\n")
    config_path.write_text(config_path.read_text().replace("num_warmup = 500", "num_warmup = 20")
                           .replace("num_samples = 1000", "num_samples = 20").replace("chains = 4", "chains = 1"))
    config, text = cli._read_config(str(config_path))
    calibrator = Calibrator(config, text, tmp_path / "out", simulations=2, draws=10, batch_size=1,
                            scheduler=Scheduler(address=local.scheduler_address))
    with pytest.raises(EngineError, match=r"batch 0: its worker process died each time it ran it"):
        calibrator.run()
    reader = CalibrationReader(tmp_path / "out")
    assert reader.status == "failed" and "batch 0" in reader.error


def test_each_local_worker_gets_its_gpu_and_its_threads():
    from core.calibration.cluster import local_worker_env, visible_gpus

    envs = [local_worker_env(i, 4, ["0", "1"], 16) for i in range(4)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1", "0", "1"]          # round robin
    assert all(e["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" and e["TF_NUM_INTRAOP_THREADS"] == "4" for e in envs)
    one_each = [local_worker_env(i, 2, ["2", "5"], 8) for i in range(2)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in one_each] == ["2", "5"] and "TF_FORCE_GPU_ALLOW_GROWTH" not in one_each[0]
    assert local_worker_env(0, 2, [], 2) == {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1",
                                             "CUDA_VISIBLE_DEVICES": "-1"}
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3, 1"}) == ["3", "1"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == [] and visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []


def test_the_local_cluster_workers_run_with_their_environments():
    """The worker processes themselves see their GPU assignment (2 GPUs named, none used: the
    check reads the environment only) and thread counts."""
    from core.engine.calibrate_cluster import local_cluster

    cluster = local_cluster(2, ["7", "9"], 4)
    client = distributed.Client(cluster)
    try:
        seen = client.run(lambda: (os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("TF_NUM_INTRAOP_THREADS")))
    finally:
        client.close()
        cluster.close()
    assert sorted(seen.values()) == [("7", "2"), ("9", "2")]
