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

With ``--shard slab|pencil --devices 1 2 4 8``: a white-noise field cut over D devices, each
device's programs (``sharded_view_run``: the sharded model's view of its first device, XLA-compiled
for that device, each all-to-all a local stand-in of its shapes), against the registry's
``white_noise_programs`` / D (``core.run.resources``).

Usage: python bench/device_memory.py [--size 32] [--algorithms hmc nuts mclmc mams]
       [--preconditioners identity diagonal] [--shard pencil --devices 1 2 4 8]
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
    if spec.get("looped"):      # HMC's looped leapfrog, as a large run has it (small ones unroll)
        import core.engine.samplers.hmc as hmc_mod

        hmc_mod.unrolls = lambda *args: False
    sampler = {"algorithm": spec["algorithm"], "num_warmup": WARMUP, "num_samples": SAMPLES,
               "num_leapfrog_steps": 10, "chains": spec["chains"], "seed": 1, "thin": THIN,
               "chunk_size": CHUNK, "preconditioner": spec["preconditioner"]}
    field = {"parameterisation": "whitened", "dtype": "float32"}
    devices = spec.get("devices", 1)
    if spec.get("shard"):
        field["parameterisation"] = "white_noise"
        if devices > 1:
            field["shard"], sampler["devices"] = spec["shard"], devices
    text = cases.config_text(DEMO_SPECTRUM["index"], sampler=sampler, field=field)
    config = parse_config(text, base_dir=Path(spec["data_dir"]))
    if spec.get("shard"):
        driver, schedule = sharded_view_run(config, devices)
    else:
        engine = engine_mod.Engine(config, text, Path(spec["run_dir"]), emit=lambda e: None)
        assert engine.start() == "finished"
        driver, schedule = engine.driver, engine.schedule
    # the chunk programs in the order the run first called them
    kinds = []
    for first, n in schedule.boundaries(0):
        tuner = getattr(driver.kernel, "tuner", None)
        if tuner is not None:
            two = schedule.mass_end is not None or spec["apart"]
            kind = ("stage2" if tuner.in_stage2(first, n) else "other") if two else "one"
        else:
            kind = "one"
        if kind not in kinds:
            kinds.append(kind)
    return {"kinds": kinds}


def sharded_view_run(config, devices: int):
    """The run of ``config`` (a white-noise field) as one device of a mesh of ``devices`` runs it:
    the sharded model's device view (``ShardMesh.device_view``: that device's part, each
    all-to-all a local stand-in of its shapes) through the engine's driver, its programs
    compiled by XLA; ``devices`` = 1: the unsharded model. No store: the draws are one part's.
    (driver, schedule)."""
    from core.engine.driver import Driver, hyper_metric, schedule_for
    from core.engine.models import build_model
    from core.engine.sharded_model import ShardedFieldModel

    here = "/job:localhost/replica:0/task:0/device:CPU:0"
    model = ShardedFieldModel(config, [here] * devices, view=True) if devices > 1 else build_model(config)
    schedule = schedule_for(config)
    driver = Driver(model, config.sampler, schedule, hyper_metric=hyper_metric(config))
    st = driver.fresh_state()
    for first, n in schedule.boundaries(0):
        out = driver.run_chunk(st, first, n)
        driver.advance(st, out, first, n)
        driver.at_boundary(st)
    return driver, schedule


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
    parser.add_argument("--shard", choices=("slab", "pencil"),
                        help="a white-noise field cut over --devices: each device's program")
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    if args.shard:
        return sharded(args)
    n = args.size
    kept = header(args, "whitened", f"{'program':>7} | {'C=1':>6} {'C=2':>6} | {'W':>5} {'S':>5}  "
                  "(W C + S + field draws)")
    for algorithm, preconditioner, apart, data_dir in each_case(args):
        got = {chains: run_case(dict(size=n, chains=chains, algorithm=algorithm,
                                     preconditioner=preconditioner, apart=apart, data_dir=str(data_dir),
                                     run_dir=str(data_dir.parent / f"run-{algorithm}-{preconditioner}-{apart}-{chains}")))
               for chains in (1, 2)}
        for kind, (W, S) in fit(got, kept).items():
            print(f"{algorithm:>9} {preconditioner:>9} {str(apart):>5} {kind:>7} | "
                  f"{got[1][kind]['total']:6.1f} {got[2][kind]['total']:6.1f} | {W:5.1f} {S:5.1f}", flush=True)
    for algorithm in args.algorithms:
        for apart in ((False, True) if sampler_info(algorithm).microcanonical else (False,)):
            programs = ", ".join(f"({W}, {S}{', draws' if draws else ''})"
                                 for W, S, draws in resources.DEVICE_PROGRAMS[(algorithm, apart)])
            print(f"{'':>9} resources.DEVICE_PROGRAMS[{algorithm!r}, {apart}]: {programs}")
    print("By the estimate (chunk_size 25, thin 20, float32), device memory on a GPU:")
    for algorithm in args.algorithms:
        for shape, chains in (((512,) * 3, 4), ((1024,) * 3, 1)):
            e = resources.estimate_run(shape, chains=chains, algorithm=algorithm, chunk_size=25, thin=20)
            print(f"  {algorithm:>5} {shape[0]}^3 x {chains}: {e.device_bytes('gpu') / 2**30:6.1f} GiB")


def header(args, what: str, columns: str) -> int:
    """Print the table's title and columns; the field draws a chain of a chunk (``kept``)."""
    kept = field_buffer_draws(CHUNK, THIN)
    print(f"{args.size}^3, float32, {what}; warmup {WARMUP}, chunk {CHUNK}, thin {THIN} (field buffer {kept} "
          "draws a chain); grid-sized buffers of XLA's buffer assignment per chunk program")
    print(f"{'algorithm':>9} {'precond':>9} {'apart':>5} {columns}")
    return kept


def each_case(args):
    """(algorithm, preconditioner, stage 2 apart, the data's folder) of every case: the
    microcanonical samplers with the identity mass also with stage 2 forced into a program of
    its own; the benchmark's data written once, in a folder removed at the end."""
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        cases.write_data(data_dir, args.size)
        for algorithm in args.algorithms:
            micro = sampler_info(algorithm).microcanonical
            for preconditioner in args.preconditioners:
                for apart in ((False, True) if micro and preconditioner == "identity" else (False,)):
                    yield algorithm, preconditioner, apart, data_dir


def sharded(args) -> None:
    """Each device's chunk programs of a white-noise field cut over D devices (``--shard``): XLA's
    buffer assignment of one device's view (``sharded_view_run``), against the estimate's share
    per device (``core.run.resources``), all in the whole grid's buffers (n^3 float32 values)."""
    n = args.size
    kept = header(args, f"white noise cut in {args.shard}s, one device's programs",
                  f"{'D':>2} {'program':>7} | {'C=1':>6} {'C=2':>6} | {'D x C=1':>7} {'D x C=2':>7} | "
                  f"{'estimate C=1':>12} {'C=2':>6} | {'W':>5} {'S':>5} (per device)")
    for algorithm, preconditioner, apart, data_dir in each_case(args):
        for devices in args.devices:
            sharded_case(n, algorithm, preconditioner, apart, devices, args.shard, data_dir, kept)
    for algorithm in args.algorithms:
        for key, figures in sampler_info(algorithm).white_noise_programs.items():
            programs = ", ".join(f"({W}, {S}{', draws' if draws else ''})" for W, S, draws in figures)
            print(f"{'':>9} SAMPLERS[{algorithm!r}].white_noise_programs[{key}]: {programs}")
    print("By the estimate (chunk_size 25, thin 20, float32, white noise, identity mass), each device of a "
          "sharded run on GPUs:")
    for algorithm in args.algorithms:
        for side, chains, devices in ((2048, 1, 8), (1024, 4, 4), (1024, 1, 1)):
            e = resources.estimate_run((side,) * 3, chains=chains, algorithm=algorithm, chunk_size=25, thin=20,
                                       parameterisation="white_noise", shards=devices, preconditioner="identity")
            print(f"  {algorithm:>5} {side}^3 x {chains} chain(s) on {devices} device(s): "
                  f"{e.device_bytes('gpu') / 2**30:6.1f} GiB a device")


def sharded_case(n, algorithm, preconditioner, apart, devices, shard, data_dir, kept) -> None:
    """One row a program of ``sharded``'s table."""
    got = {chains: run_case(dict(size=n, chains=chains, algorithm=algorithm, preconditioner=preconditioner,
                                 apart=apart, looped=True, shard=shard, devices=devices, data_dir=str(data_dir),
                                 run_dir=str(data_dir / "unused")))
           for chains in (1, 2)}
    # the registry's figures for these programs (stage 2 apart as this run had it: the stage-2
    # program is the one without the field draws), each device's share
    programs = resources.program_figures(algorithm, apart, white_noise=True, preconditioner=preconditioner)
    for kind, (W, S) in fit(got, kept / devices).items():
        t1, t2 = got[1][kind]["total"], got[2][kind]["total"]
        est = {c: (Wr * c + Sr + (kept * c if draws else 0)) / devices
               for Wr, Sr, draws in programs if draws == (kind != "stage2") for c in (1, 2)}
        est = {c: est.get(c, float("nan")) for c in (1, 2)}
        print(f"{algorithm:>9} {preconditioner:>9} {str(apart):>5} {devices:>2} {kind:>7} | {t1:6.2f} {t2:6.2f} | "
              f"{devices * t1:7.1f} {devices * t2:7.1f} | {est[1]:12.2f} {est[2]:6.2f} | {W:5.2f} {S:5.2f}",
              flush=True)


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
