"""Runs for ``tests/core/engine/test_chain_devices*.py`` in a fresh process, whose CPU the first
run's ``sampler.devices = 2`` splits into 2 logical devices (Fieldscope does it itself, before
TensorFlow starts). ``runs``: small runs of ``support.draw_digests``' cases with their chains
spread over the devices and on one, compared array by array, and a third device asked for after
the split; ``resumed``: a run stopped on 2 devices and resumed on 2 against one straight through
on one, and a calibration's batches over 2 devices and on one. Prints JSON.

Two processes, not one: nearly all their time is XLA compiling each program once per device, and
as two tests of two files they may run side by side, each well inside its time limit."""

from __future__ import annotations

import copy
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.config import config_from_dict, dump_config  # noqa: E402
from core.run.messages import STAT_NAMES  # noqa: E402
from core.store.run_store import RunReader, stored_run_config  # noqa: E402
from support import draw_digests  # noqa: E402

#: (case, chains, devices): each run with its chains over ``devices`` and on one device
RUNS = [("field-hmc-fourier-fixed", 4, 2), ("field-mclmc-diagonal-sampled", 3, 2)]
RESUMED = ("field-mams-diagonal-fixed", 2, 2)


def _config(folder, name, chains, devices):
    case = copy.deepcopy(draw_digests.CASES[name])
    case["sampler"].update(chains=chains, devices=devices)
    config = config_from_dict(case, base_dir=folder)
    return config, dump_config(config)


def _arrays(run_dir) -> dict:
    reader = RunReader(run_dir)
    out = {f"stat/{n}/{w}": reader.stat(n, w) for n in STAT_NAMES for w in (True, False)}
    out.update({f"param/{n}/{w}": reader.param(n, w) for n in reader.param_names for w in (True, False)})
    if reader.has_field:
        out["field_draws"] = reader.field_draws()
        out.update({f"powers/{i}": p for i, p in enumerate(reader.powers())})
    return out, reader


def _compare(a_dir, b_dir) -> dict:
    (a, ra), (b, rb) = _arrays(a_dir), _arrays(b_dir)
    differ = sorted(k for k in a if not np.array_equal(a[k], b[k], equal_nan=True))
    result = {"arrays": len(a), "differ": differ, "draws": int(np.asarray(a["stat/lp/False"]).size)}
    if ra.has_field:
        ma, mb = ra.field_moments(), rb.field_moments()
        result["moments"] = max(float(np.max(np.abs(x - y))) for x, y in zip(ma[:2], mb[:2]))
        result["moment counts"] = [int(ma[2]), int(mb[2])]
    return result


def check_same(result) -> None:
    """The test's assertions on one ``_compare``."""
    assert result["arrays"] >= 19 and result["draws"] > 0      # 18 statistics, draws, P(k)[, params]
    assert result["differ"] == []
    if "moments" in result:
        assert result["moments"] < 1e-5
        assert result["moment counts"][0] == result["moment counts"][1] > 0


def _calibrations(folder) -> dict:
    """A calibration (4 simulations in batches of 2, 2 chains each) with each batch's 4 chains
    over 2 devices and on one: ranks, posterior means and sds compared."""
    from core.calibration import CalibrationReader
    from core.engine.calibrate import Calibrator

    readers = {}
    for devices in (2, 1):
        config, text = _config(folder, "field-mclmc-conditional-sampled", 2, devices)
        out = folder / f"calibration-{devices}"
        assert Calibrator(config, text, out, simulations=4, draws=8, batch_size=2).run() == "finished"
        readers[devices] = CalibrationReader(out)
    a, b = readers[2], readers[1]
    return {"batches": [a.progress["batches"], b.progress["batches"]],
            "ranks": bool(np.array_equal(a.ranks(), b.ranks())),
            "means": bool(np.array_equal(a.posterior_mean(), b.posterior_mean(), equal_nan=True)),
            "sds": bool(np.array_equal(a.posterior_sd(), b.posterior_sd(), equal_nan=True)),
            "quantities": int(np.asarray(a.ranks()).size)}


def _runs(folder) -> dict:
    from core.engine.engine import Engine, EngineError

    report = {"runs": {}}
    for name, chains, devices in RUNS:
        spread, one = folder / f"{name}-spread", folder / f"{name}-one"
        engine = Engine(*_config(folder, name, chains, devices), spread)
        assert engine.start() == "finished"
        placed = engine.driver.run_chunk.__self__.placed
        assert Engine(*_config(folder, name, chains, 1), one).start() == "finished"
        report["runs"][f"{name} {chains} chains on {devices}"] = {**_compare(spread, one), "placed": placed}
    try:
        Engine(*_config(folder, "field-hmc-fourier-fixed", 3, 3), folder / "three").start()
        report["three"] = "ran"
    except EngineError as err:
        report["three"] = str(err)
    return report


def _resumed(folder) -> dict:
    from core.engine.engine import Control, Engine

    name, chains, devices = RESUMED
    stopped, straight = folder / "stopped", folder / "straight"
    control = Control()

    def emit(event):
        if event.get("type") == "chunk" and event["progress"]["chunks"] >= 2:
            control.stop = True

    assert Engine(*_config(folder, name, chains, devices), stopped, emit=emit, control=control).start() == "stopped"
    assert Engine(*stored_run_config(stopped), stopped).resume() == "finished"
    assert Engine(*_config(folder, name, chains, 1), straight).start() == "finished"
    return {"resumed": _compare(stopped, straight), "calibration": _calibrations(folder)}


def main(part: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        draw_digests.write_inputs(folder)
        return {"runs": _runs, "resumed": _resumed}[part](folder)


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
