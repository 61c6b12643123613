"""Digests of small engine runs' stores, to show that a change of the sampling code keeps every
draw bit for bit (issue #29): ``CASES`` is the matrix (every algorithm x preconditioner, with P(k)
fixed and with its index sampled; the integral model with each algorithm; a run stopped and
resumed), ``store_digest`` hashes everything a run stores that the sampler determines (every
statistic and parameter of warmup and sampling, field draws, their P(k), the field moments).

The reference digests in ``tests/core/engine/data/draw_digests.json`` were recorded on the code
before the change, with

    PYTHONPATH=. .venv/bin/python -m support.draw_digests record   (from tests/)

XLA's CPU code depends on the instruction set (fused multiply-add, vector width) and on the
TensorFlow release, so the file keeps one record a kind of machine (``machine_fingerprint``): the
fingerprints that drew a set of digests, and the digests. Recording on a kind of machine that has
none adds its fingerprint to a record with the same digests, or a record of its own; recording
again on one that has a record replaces that record. A change meant to change some draws is
recorded with ``record --changed`` on the code after it, on a kind of machine that recorded the
code before it: the cases whose digests moved are named and dropped from the other kinds'
records (which cannot draw them again here); the test compares a case where this kind's record
has it and skips it elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from pathlib import Path

import numpy as np

from core.config import config_from_dict, dump_config
from core.config.schema import PRECONDITIONERS
from core.field.grid import Grid
from core.field.power_spectrum import PowerLaw
from core.field.synthetic import make_dataset, save_dataset
from core.run.messages import STAT_NAMES
from core.store.run_store import RunReader

REFERENCE = Path(__file__).resolve().parents[1] / "core" / "engine" / "data" / "draw_digests.json"
SHAPE = (6, 6, 6)
_SAMPLED_INDEX = {"dist": "normal", "loc": -1.5, "scale": 0.3}

INTEGRAL_SERIES = "t,y\n" + "".join(f"{0.25 * i},{1.0 + 0.9 * (0.25 * i) + 0.05 * ((-1) ** i)}\n" for i in range(13))


def field_case(algorithm: str, preconditioner: str, sampled: bool) -> dict:
    return {
        "model": {"kind": "field"},
        "data": {"path": "data.npz", "noise_sigma": 0.5, "mask": "mask"},
        "grid": {"box_size": 48.0},
        "prior": {"kind": "power_law", "k_pivot": 0.1, "amplitude": 300.0,
                  "index": dict(_SAMPLED_INDEX) if sampled else -1.5},
        "field": {"dtype": "float32"},
        "sampler": {"algorithm": algorithm, "num_warmup": 60, "num_samples": 24, "num_leapfrog_steps": 4,
                    "step_size": 0.1, "preconditioner": preconditioner, "chains": 2, "seed": 5, "thin": 3,
                    "chunk_size": 16},
    }


def integral_case(algorithm: str, preconditioner: str) -> dict:
    return {
        "model": {"kind": "integral"},
        "data": {"path": "series.csv"},
        "integral": {"refine": 4},
        "prior": {"A": {"dist": "normal", "loc": 0.0, "scale": 1.0},
                  "c": {"dist": "normal", "loc": 0.0, "scale": 10.0},
                  "sigma": {"dist": "halfnormal", "scale": 2.0}},
        "sampler": {"algorithm": algorithm, "num_warmup": 60, "num_samples": 24, "num_leapfrog_steps": 4,
                    "step_size": 0.01, "preconditioner": preconditioner, "chains": 2, "seed": 1, "thin": 1,
                    "chunk_size": 16},
    }


#: the samplers the code before #29 had (samplers added since have no digest from before)
ALGORITHMS = ("hmc", "nuts", "mclmc", "mams")


def _cases() -> dict[str, dict]:
    cases = {}
    for algorithm in ALGORITHMS:
        for preconditioner in PRECONDITIONERS:
            for sampled in (False, True):
                name = f"field-{algorithm}-{preconditioner}-{'sampled' if sampled else 'fixed'}"
                cases[name] = field_case(algorithm, preconditioner, sampled)
        for preconditioner in ("identity", "diagonal"):
            cases[f"integral-{algorithm}-{preconditioner}"] = integral_case(algorithm, preconditioner)
    return cases


CASES = _cases()


def write_inputs(folder: Path) -> None:
    """The data files every case reads: a 6^3 field with a slab mask, and a short series."""
    grid = Grid(SHAPE, 48.0)
    dataset = make_dataset(grid, PowerLaw(amplitude=300.0, index=-1.5, k_pivot=0.1), 0.5, mask="slab",
                           mask_fraction=0.25, seed=11)
    save_dataset(folder / "data.npz", dataset)
    (folder / "series.csv").write_text(INTEGRAL_SERIES)


def case_config(name: str, folder: Path):
    config = config_from_dict(CASES[name], base_dir=folder)
    return config, dump_config(config)


def store_digest(run_dir) -> str:
    """SHA-256 of every array a run stores that its sampler determines, in a fixed order."""
    reader = RunReader(run_dir)
    h = hashlib.sha256()

    def put(label, array):
        a = np.ascontiguousarray(np.asarray(array))
        h.update(f"{label}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())

    for warmup in (True, False):
        for name in STAT_NAMES:
            put(f"stat/{name}/{warmup}", reader.stat(name, warmup))
        for name in reader.param_names:
            put(f"param/{name}/{warmup}", reader.param(name, warmup))
    if reader.has_field:
        put("field_draws", reader.field_draws())
        for i, part in enumerate(reader.powers()):
            put(f"powers/{i}", part)
        mean, std, count = reader.field_moments()
        put("moments/mean", mean)
        put("moments/std", std)
        put("moments/count", np.int64(count))
    return h.hexdigest()


def machine_fingerprint() -> str:
    """What XLA's CPU code depends on: TensorFlow's release and the CPU's vector extensions."""
    import tensorflow as tf

    flags = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = {f for f in line.split(":", 1)[1].split()
                         if f.startswith(("avx", "fma", "sse4", "amx"))}
                break
    except OSError:
        pass
    return f"tf {tf.__version__}; {platform.machine()}; {' '.join(sorted(flags))}"


def run_case(name: str, folder: Path, run_dir: Path, stop_after_chunks: int | None = None) -> str:
    """Run case ``name`` into ``run_dir`` (straight through, or stopped after that many chunks and
    resumed from the stored config) -> its store's digest."""
    from core.engine.engine import Control, Engine
    from core.store.run_store import stored_run_config

    config, text = case_config(name, folder)
    if stop_after_chunks is None:
        assert Engine(config, text, run_dir).start() == "finished"
        return store_digest(run_dir)
    control = Control()

    def emit(event):
        if event.get("type") == "chunk" and event["progress"]["chunks"] >= stop_after_chunks:
            control.stop = True

    assert Engine(config, text, run_dir, emit=emit, control=control).start() == "stopped"
    config2, text2 = stored_run_config(run_dir)
    assert Engine(config2, text2, run_dir).resume() == "finished"
    return store_digest(run_dir)


def recorded(document: dict, fingerprint: str) -> dict | None:
    """The digests a kind of machine recorded (None where it recorded none)."""
    for machine in document["machines"]:
        if fingerprint in machine["fingerprints"]:
            return machine["digests"]
    return None


def with_record(document: dict, fingerprint: str, digests: dict, changed: bool) -> tuple[dict, list[str]]:
    """``document`` with ``digests`` as ``fingerprint``'s record (module docstring) and the cases
    dropped from the other kinds' records (``changed``: those whose digests moved here)."""
    mine = recorded(document, fingerprint)
    if changed and mine is None:
        raise SystemExit(f"record --changed: this kind of machine ({fingerprint}) recorded no digests "
                         "on the code before the change: record them there first")
    moved = sorted(name for name in digests if changed and mine.get(name) != digests[name])
    machines = []
    for machine in document["machines"]:
        prints = [f for f in machine["fingerprints"] if f != fingerprint]
        kept = {name: value for name, value in machine["digests"].items() if name not in moved}
        if prints:
            machines.append({"fingerprints": prints, "digests": kept})
    same = next((m for m in machines if not changed and m["digests"] == digests), None)
    if same is not None:
        same["fingerprints"] = sorted(same["fingerprints"] + [fingerprint])
    else:
        machines.append({"fingerprints": [fingerprint], "digests": digests})
    return {"machines": machines}, moved


def record(folder: Path) -> dict:
    import time

    folder.mkdir(parents=True, exist_ok=True)
    write_inputs(folder)
    digests = {}
    for name in CASES:
        t0 = time.perf_counter()
        digests[name] = run_case(name, folder, folder / name)
        print(f"{name}: {digests[name][:16]} ({time.perf_counter() - t0:.1f} s)", flush=True)
    return {"fingerprints": [machine_fingerprint()], "digests": digests}


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] not in (["record"], ["record", "--changed"]):
        sys.exit("usage: python -m support.draw_digests record [--changed]")
    document = json.loads(REFERENCE.read_text()) if REFERENCE.exists() else {"machines": []}
    fingerprint = machine_fingerprint()
    if "--changed" in sys.argv and recorded(document, fingerprint) is None:
        with_record(document, fingerprint, {}, True)          # refuses before the runs
    with tempfile.TemporaryDirectory() as tmp:
        result = record(Path(tmp))
    document, moved = with_record(document, fingerprint, result["digests"], "--changed" in sys.argv)
    if moved:
        print(f"changed by the change, dropped from the other kinds' records: {', '.join(moved)}")
    REFERENCE.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"wrote {REFERENCE}")
