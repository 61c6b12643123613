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
