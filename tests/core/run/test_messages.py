"""The engine's messages: constructors build what ``check_event`` accepts, and
``check_event`` names what is wrong with anything else (numpy only, no engine)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from core.run import messages as msgs
from support.runs import fake_run


def test_the_fake_runs_events_are_chunk_events():
    events, _ = fake_run()
    assert len(events) > 3
    for event in events:
        msgs.check_event(event)
    assert "moments" not in events[0] and "latest_field" not in events[0]   # warmup only
    assert {"moments", "latest_field", "latest_power"} <= set(events[-1])
    # the divergences split at the end of warmup, as the engine counts them
    assert events[0]["divergences"]["warmup"] == int(events[0]["stats"]["diverging"].sum()) > 0
    assert events[0]["divergences"]["sampling"] == 0
    assert events[-1]["divergences"] == {"warmup": 0, "sampling": int(events[-1]["stats"]["diverging"].sum())}


def test_every_constructor_builds_a_valid_event():
    events = [msgs.ready_event(1.5), msgs.status_event("compiling"),
              msgs.status_event("failed", error="why"),
              msgs.status_event("finished", progress=msgs.new_progress()),
              msgs.status_event("loading", estimate=msgs.Estimate(
                  bytes=10, available=None, gradient_seconds=0.1, run_seconds=2.0, text="t")),
              msgs.status_event("loading", estimate=msgs.Estimate(
                  bytes=10, available=20, memory="GPU memory", gradient_seconds=0.1,
                  run_seconds=2.0, text="t")),
              msgs.error_event("bad"), msgs.error_event("bad", "Traceback ..."),
              msgs.done_event("stopped")]
    for event in events:
        msgs.check_event(event)
        assert pickle.loads(pickle.dumps(event)) == event
    assert events[1] == {"type": "status", "status": "compiling"}      # no empty optionals


def test_commands():
    assert msgs.run_command("text", "/base", "/run") == {
        "cmd": "run", "config_text": "text", "base_dir": "/base", "run_dir": "/run",
        "resume": False, "num_samples": None, "accept_changed": False}
    assert msgs.run_command("text", "/base", "/run", resume=True, num_samples=9, accept_changed=True) == {
        "cmd": "run", "config_text": "text", "base_dir": "/base", "run_dir": "/run",
        "resume": True, "num_samples": 9, "accept_changed": True}
    assert msgs.control_command(msgs.PAUSE) == {"cmd": "pause"}
    with pytest.raises(ValueError, match="unknown engine command 'jump'"):
        msgs.control_command("jump")


def _chunk():
    events, _ = fake_run()
    return dict(events[-1])


@pytest.mark.parametrize("spoil, complaint", [
    (lambda e: e.pop("progress"), r"missing \['progress'\]"),
    (lambda e: e.update(extra=1), r"not defined \['extra'\]"),
    (lambda e: e.update(first_step=1.0), "first_step is float, not int"),
    (lambda e: e.update(phase="cooling"), "phase 'cooling'"),
    (lambda e: e["stats"].pop("lp"), "stats"),
    (lambda e: e["stats"].update(lp=np.zeros((2, 1))), r"stats\['lp'\] is not a \(chains, \d+\) array"),
    (lambda e: e["stats"].update(diverging=e["stats"]["diverging"].astype(np.int8)),
     r"stats\['diverging'\] is int8, not bool"),
    (lambda e: e["params"].update(index=e["params"]["index"][:1]), "has 1 chains, not 2"),
    (lambda e: e.pop("latest_power"), "come together"),
    (lambda e: e.update(latest_field=e["latest_field"][0]), "latest_field is not a"),
    (lambda e: e.update(moments=e["moments"][:2]), "moments is not"),
    (lambda e: e.update(progress={"draws": 1}), "progress"),
    (lambda e: e.update(divergences={"sampling": 0}), "divergences .* is not"),
    (lambda e: e.update(divergences={**e["divergences"], "warmup": e["divergences"]["warmup"] + 1}),
     r"is not the \d+ flagged in stats\['diverging'\]"),
])
def test_check_event_names_what_is_wrong(spoil, complaint):
    event = _chunk()
    event["stats"], event["params"] = dict(event["stats"]), dict(event["params"])
    spoil(event)
    with pytest.raises(ValueError, match=complaint):
        msgs.check_event(event)


def test_check_event_refuses_unknown_kinds_and_statuses():
    with pytest.raises(ValueError, match="not an engine event"):
        msgs.check_event({"type": "gossip"})
    with pytest.raises(ValueError, match="unknown status 'dozing'"):
        msgs.check_event({"type": "status", "status": "dozing"})
    with pytest.raises(ValueError, match="not a final status"):
        msgs.check_event({"type": "done", "status": "warmup"})
