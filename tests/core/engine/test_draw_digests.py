"""Every draw bit for bit as before the sampling code was reorganised (issue #29): the digests of
small runs' stores (``support.draw_digests``: every algorithm x preconditioner with P(k) fixed and
sampled, the integral model with each algorithm) against those recorded on the code before the
change, and a run stopped and resumed against the same digest as straight through (a run killed
with SIGKILL and resumed equals one straight through: tests/core/engine/test_engine.py)."""

from __future__ import annotations

import json

import pytest

from support.draw_digests import CASES, REFERENCE, machine_fingerprint, recorded, run_case, write_inputs

DOCUMENT = json.loads(REFERENCE.read_text())
RECORDED = recorded(DOCUMENT, machine_fingerprint())


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    if RECORDED is None:
        kinds = "; ".join(f for machine in DOCUMENT["machines"] for f in machine["fingerprints"])
        pytest.skip(f"the digests were recorded on other kinds of machine ({kinds}; this one: "
                    f"{machine_fingerprint()}): XLA's arithmetic may differ; record them again on the old code here")
    folder = tmp_path_factory.mktemp("digest_inputs")
    write_inputs(folder)
    return folder


def _recorded(name: str) -> str:
    if name not in RECORDED:
        pytest.skip(f"{name}: its draws were changed on purpose since this kind of machine recorded them "
                    "(support.draw_digests record --changed on another kind)")
    return RECORDED[name]


@pytest.mark.parametrize("name", sorted(CASES))
def test_draws_are_those_of_the_code_before(inputs, tmp_path, name):
    expected = _recorded(name)
    assert run_case(name, inputs, tmp_path / "run") == expected


@pytest.mark.parametrize("name", ["field-hmc-diagonal-sampled", "field-nuts-fourier-fixed",
                                  "field-mclmc-diagonal-fixed", "field-mams-fourier-sampled",
                                  "integral-mclmc-identity"])
def test_a_run_stopped_and_resumed_draws_the_same(inputs, tmp_path, name):
    """Stopped after its second chunk (inside warmup, before the mass matrix is set) and resumed
    from its stored config: the digest of a straight run on the code before the change."""
    expected = _recorded(name)
    assert run_case(name, inputs, tmp_path / "run", stop_after_chunks=2) == expected


def test_the_records_of_each_kind_of_machine():
    """``with_record``: a kind of machine joins a record with its digests or gets its own; a
    second recording replaces its record; ``--changed`` drops the cases that moved on this kind
    from the others' records, and refuses a kind that recorded nothing before the change."""
    from support.draw_digests import with_record

    doc = {"machines": []}
    doc, moved = with_record(doc, "A", {"x": "1", "y": "2"}, False)
    doc, _ = with_record(doc, "B", {"x": "1", "y": "2"}, False)
    assert doc == {"machines": [{"fingerprints": ["A", "B"], "digests": {"x": "1", "y": "2"}}]} and moved == []
    doc, _ = with_record(doc, "C", {"x": "9", "y": "2"}, False)
    assert recorded(doc, "C") == {"x": "9", "y": "2"} and recorded(doc, "A") == {"x": "1", "y": "2"}
    doc, moved = with_record(doc, "C", {"x": "9", "y": "3"}, True)
    assert moved == ["y"]
    assert recorded(doc, "A") == recorded(doc, "B") == {"x": "1"} and recorded(doc, "C") == {"x": "9", "y": "3"}
    doc, _ = with_record(doc, "A", {"x": "5"}, False)
    assert recorded(doc, "A") == {"x": "5"} and recorded(doc, "B") == {"x": "1"}
    with pytest.raises(SystemExit, match="recorded no digests"):
        with_record(doc, "D", {"x": "1"}, True)
