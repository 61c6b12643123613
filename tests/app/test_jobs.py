"""app.views.jobs: results reach the GUI thread in order, and owners deleted while their
workers finish neither get results nor stop anyone else's (the workers touch no Qt object:
``gui_call``)."""

from __future__ import annotations

import threading
import time

import numpy as np
import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent, QObject

from app.views.jobs import Abandoned, CancellableJob, LatestJob, WorkerRelay, gui_call


def _delete(obj) -> None:
    obj.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def test_calls_from_worker_threads_run_in_the_gui_thread_in_their_order(qtbot):
    LatestJob().close()                  # the GUI thread's end of gui_call exists once a job was made
    seen = []

    def record(thread_name, i):
        seen.append((threading.current_thread() is threading.main_thread(), thread_name, i))

    def work(name):
        for i in range(300):
            gui_call(record, name, i)

    workers = [threading.Thread(target=work, args=(f"w{k}",)) for k in range(3)]
    for w in workers:
        w.start()
    qtbot.waitUntil(lambda: len(seen) == 900, timeout=20_000)
    for w in workers:
        w.join(5)
    assert all(in_gui for in_gui, _, _ in seen)
    for k in range(3):
        assert [i for _, name, i in seen if name == f"w{k}"] == list(range(300))   # each one's order


def test_owners_deleted_while_their_workers_finish_get_nothing_and_the_others_get_theirs(qtbot):
    rng = np.random.default_rng(3)
    owners, jobs, got = [], [], {}
    for k in range(40):
        owner = QObject()
        job = LatestJob(owner, name=f"test-job-{k}")
        job.finished.connect(lambda key, result, error, k=k: got.setdefault(k, []).append((key, result, error)))
        owners.append(owner)
        jobs.append(job)

    def slow(k, ms):
        time.sleep(ms / 1000)
        if k % 7 == 0:
            raise ValueError(f"job {k} fails")
        return k * k

    for k, job in enumerate(jobs):
        job.request(("key", k), slow, k, float(rng.uniform(0, 30)))
        job.request(("key", k), slow, k, float(rng.uniform(0, 30)))   # replaces nothing yet: waits
        job.request(("last", k), slow, k, float(rng.uniform(0, 30)))  # replaces the waiting one
    deleted = set(int(k) for k in rng.choice(40, 20, replace=False))
    t_end = time.monotonic() + 0.06
    order = sorted(deleted)
    while order or time.monotonic() < t_end:       # deletions spread over the workers' finishing
        if order:
            _delete(owners[order.pop()])
        qtbot.wait(2)
    alive = [k for k in range(40) if k not in deleted]
    qtbot.waitUntil(lambda: all(len(got.get(k, [])) == 2 for k in alive), timeout=20_000)
    qtbot.wait(100)
    for k in alive:
        (key1, r1, e1), (key2, r2, e2) = got[k]
        assert (key1, key2) == (("key", k), ("last", k))       # the first, then the newest waiting
        if k % 7 == 0:
            assert r1 is r2 is None and isinstance(e1, ValueError) and str(e2) == f"job {k} fails"
        else:
            assert r1 == r2 == k * k and e1 is e2 is None
        assert not jobs[k].busy
        jobs[k].close()
    # a deleted owner's job may have delivered before its deletion, never after
    for k in deleted:
        assert not shiboken6.isValid(owners[k])
        assert len(got.get(k, [])) <= 2
    for k in alive:
        thread = jobs[k].thread
        if thread is not None:
            thread.join(5)
            assert not thread.is_alive()                       # closed: the worker ended


def test_a_relay_deleted_mid_job_stops_the_job_at_its_next_report(qtbot):
    relay = WorkerRelay()
    partials, finished = [], []
    relay.progress.connect(lambda job, p: partials.append(p))
    relay.finished.connect(lambda job, r: finished.append(r))
    reached = threading.Event()
    stopped = []

    def compute(report):
        try:
            for i in range(10_000):
                report(i)
                if i == 20:
                    reached.set()
                time.sleep(0.001)
        except Abandoned:
            stopped.append(i)
            raise
        return "done"

    job = CancellableJob(compute, relay, name="test-cancellable").start()
    qtbot.waitUntil(lambda: len(partials) > 5, timeout=10_000)
    assert reached.wait(10)
    _delete(relay)
    n_before = len(partials)
    job.thread.join(10)
    assert not job.thread.is_alive() and stopped and stopped[0] < 9_999
    qtbot.wait(50)
    assert len(partials) == n_before and finished == []           # nothing after the deletion
    assert partials == list(range(n_before))                       # in order, none lost before it
