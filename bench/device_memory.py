"""Benchmark: the device memory of the engine's chunk programs, from XLA's own buffer assignment.

On a GPU the engine's device memory during a chunk is what XLA allocates for the compiled chunk
program: its parameters (state, gradients, tuning state, the model's constant maps), its outputs
and its temporaries (the arrays the engine holds between chunks are the next chunk's parameters).
XLA writes that account, its buffer assignment, when asked to dump (``--xla_dump_to``). Each case
here runs a short engine run in a fresh process on this machine's CPU at a small grid with the
dump on, reads the account of every chunk program it compiled, and reports it in grid-sized
buffers (n^3 values of the run's float32): the total, and without the chunk's field draws (the
field buffer, ceil(chunk_size / thin) + 1 draws a chain, in the programs that can reach the
sampling phase). Fitted on 1 and 2 chains: W per chain and S once per run, per program, against
``core.run.resources.DEVICE_PROGRAMS`` (what the GPU estimate uses).

Programs: HMC and NUTS have one; MCLMC and MAMS one, or two where the diagonal is adapted (the
chunks of warmup stage 2 with the mass-matrix sums, ``stage2``, and the others, ``other``) or the
moments of z are large (``core.run.engine_limits.stage2_apart``, forced here with ``apart``).
The step-size search and the first gradient are programs of their own, smaller, run before.

The CPU compiler's account stands in for a GPU's, which no run here has measured: the same HLO,
but the GPU compiler fuses differently and cuFFT adds a workspace (GPU_RUNTIME_BYTES).

Usage: python bench/device_memory.py [--size 32] [--algorithms hmc nuts mclmc mams]
       [--preconditioners identity diagonal]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cases  # noqa: E402  (bench/cases.py)

from core.run import resources  # noqa: E402
from core.run.engine_limits import field_buffer_draws  # noqa: E402
from core.samplers import sampler_info  # noqa: E402

WARMUP, SAMPLES, CHUNK, THIN = 30, 10, 5, 5


def program_units(dump: Path, unit: int) -> list[dict]:
    """The buffer assignment of every compiled module in ``dump``, in compile order:
    {name, total, parameters, outputs, temporaries} in units of ``unit`` bytes."""
    modules = []
    for path in sorted(dump.glob("module_*buffer-assignment.txt")):
        kinds = {"parameters": 0, "outputs": 0, "temporaries": 0, "constants": 0}
        for line in path.read_text().splitlines():
            m = re.match(r"allocation \d+: size (\d+), (.*)", line)
            if not m:
                continue
            size, what = int(m.group(1)), m.group(2)
            key = ("parameters" if what.startswith("parameter") else "temporaries" if "preallocated-temp" in what
                   else "outputs" if "maybe-live-out" in what else "constants")
            kinds[key] += size
        number = int(path.name.split(".")[0].split("_")[1])
        modules.append({"module": number, "name": path.name.split(".")[1],
                        **{k: v / unit for k, v in kinds.items()}, "total": sum(kinds.values()) / unit})
    return sorted(modules, key=lambda m: m["module"])


def worker(spec: dict) -> dict:
    from core.run.tensorflow_env import quiet_tensorflow

    quiet_tensorflow()
    import core.engine.engine as engine_mod
    from core.config import parse_config
    from core.demo import DEMO_SPECTRUM

    if spec["apart"]:
        import core.engine.samplers.microcanonical_kernel as kernel_mod

        kernel_mod.stage2_apart = lambda chains, n_values: True
    sampler = {"algorithm": spec["algorithm"], "num_warmup": WARMUP, "num_samples": SAMPLES,
               "num_leapfrog_steps": 10, "chains": spec["chains"], "seed": 1, "thin": THIN,
               "chunk_size": CHUNK, "preconditioner": spec["preconditioner"]}
    text = cases.config_text(DEMO_SPECTRUM["index"], sampler=sampler,
                             field={"parameterisation": "whitened", "dtype": "float32"})
    config = parse_config(text, base_dir=Path(spec["data_dir"]))
    engine = engine_mod.Engine(config, text, Path(spec["run_dir"]), emit=lambda e: None)
    assert engine.start() == "finished"
    # the chunk programs in the order the run first called them
    kinds = []
    for first, n in engine.schedule.boundaries(0):
        tuner = getattr(engine.driver.kernel, "tuner", None)
        if tuner is not None:
            two = engine.schedule.mass_end is not None or spec["apart"]
            kind = ("stage2" if tuner.in_stage2(first, n) else "other") if two else "one"
        else:
            kind = "one"
        if kind not in kinds:
            kinds.append(kind)
    return {"kinds": kinds}


def run_case(spec: dict) -> dict:
    with tempfile.TemporaryDirectory() as dump:
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
               "XLA_FLAGS": f"--xla_dump_to={dump}",
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        out = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)],
                             capture_output=True, text=True, env=env)
        if out.returncode != 0:
            raise SystemExit(f"case {spec} failed:\n{out.stderr[-3000:]}")
        kinds = json.loads(out.stdout.strip().splitlines()[-1])["kinds"]
        modules = program_units(Path(dump), 4 * spec["size"] ** 3)
    # the chunk programs: the last len(kinds) "lambda" modules (before them: the first gradient)
    chunk_modules = [m for m in modules if "lambda" in m["name"]][-len(kinds):]
    return dict(zip(kinds, chunk_modules))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--algorithms", nargs="+", default=["hmc", "nuts", "mclmc", "mams"])
    parser.add_argument("--preconditioners", nargs="+", default=["identity", "diagonal"])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    n = args.size
    kept = field_buffer_draws(CHUNK, THIN)
    print(f"{n}^3, float32, whitened; warmup {WARMUP}, chunk {CHUNK}, thin {THIN} (field buffer {kept} "
          "draws a chain); grid-sized buffers of XLA's buffer assignment per chunk program")
    print(f"{'algorithm':>9} {'precond':>9} {'apart':>5} {'program':>7} | {'C=1':>6} {'C=2':>6} | "
          f"{'W':>5} {'S':>5}  (W C + S + field draws)")
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        cases.write_data(data_dir, n)
        for algorithm in args.algorithms:
            micro = sampler_info(algorithm).microcanonical
            for preconditioner in args.preconditioners:
                for apart in ((False, True) if micro and preconditioner == "identity" else (False,)):
                    got = {chains: run_case(dict(size=n, chains=chains, algorithm=algorithm,
                                                 preconditioner=preconditioner, apart=apart,
                                                 data_dir=str(data_dir),
                                                 run_dir=str(Path(tmp) / f"run-{algorithm}-{preconditioner}-{apart}-{chains}")))
                           for chains in (1, 2)}
                    for kind, (W, S) in fit(got, kept).items():
                        print(f"{algorithm:>9} {preconditioner:>9} {str(apart):>5} {kind:>7} | "
                              f"{got[1][kind]['total']:6.1f} {got[2][kind]['total']:6.1f} | {W:5.1f} {S:5.1f}",
                              flush=True)
            for apart in ((False, True) if micro else (False,)):
                programs = ", ".join(f"({W}, {S}{', draws' if draws else ''})"
                                     for W, S, draws in resources.DEVICE_PROGRAMS[(algorithm, apart)])
                print(f"{'':>9} resources.DEVICE_PROGRAMS[{algorithm!r}, {apart}]: {programs}")
    print("By the estimate (chunk_size 25, thin 20, float32), device memory on a GPU:")
    for algorithm in args.algorithms:
        for shape, chains in (((512,) * 3, 4), ((1024,) * 3, 1)):
            e = resources.estimate_run(shape, chains=chains, algorithm=algorithm, chunk_size=25, thin=20)
            print(f"  {algorithm:>5} {shape[0]}^3 x {chains}: {e.device_bytes('gpu') / 2**30:6.1f} GiB")


def fit(got: dict, kept: int) -> dict:
    """{program: (W, S)} from the programs' totals at 1 and 2 chains, the field draws left out
    (the stage-2 program has none)."""
    out = {}
    for kind, one in got[1].items():
        draws = kind != "stage2"
        t1, t2 = one["total"] - kept * draws, got[2][kind]["total"] - 2 * kept * draws
        out[kind] = (t2 - t1, 2 * t1 - t2)
    return out


if __name__ == "__main__":
    main()
