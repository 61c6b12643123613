"""Benchmark: the engine's peak memory and throughput against grid size, chains and L.

Each case (grid n^3, chains C, leapfrog steps L, kernel) runs the engine in a fresh
subprocess (a short HMC run: one warmup chunk, then ``--chunks`` sampling chunks) and
reports

  peak       the process's peak resident memory (VmHWM of /proc/self/status; Linux's
             ru_maxrss would keep the parent's peak across fork and exec)
  grad/s     gradient evaluations per second of the sampling chunks, all chains
             (sum of the leapfrog steps taken / wall time; the compiling first chunk left out)
  /FFT       time per gradient (all chains) over the FFT floor: one irfft3d(rfft3d(x)) pair
             of the C x n^3 batch, jitted, timed in the same process (median of 15)
  estimate   core.run.resources' estimate for the same settings (for the engine's own kernel
             choice: an unrolled case past the unroll budget reads high), and measured / estimate
  buffers    (peak - the estimate's runtime) / (C N b): grid-sized buffers per chain held
             above TensorFlow's runtime (the named arrays, data and moments included)

Kernels: ``looped`` (tfp.mcmc.HamiltonianMonteCarlo, its leapfrog a tf.while_loop),
``loopK`` (core.engine.hmc's step with ``looped_leapfrog``, K straight-line steps per iteration
of its while loop) and ``unrolled`` (the same with every step straight-line, the engine before
issue #13 for L <= 64), and ``engine``: the engine's own choice (the
unrolled kernel where it costs at most core.run.engine_limits.UNROLL_BUDGET_BYTES, else the loop). Cases alternate kernels so that both see the same machine load; with
``--repeats`` > 1 the medians are printed. NUTS with ``--algorithm nuts`` (L ignored; kernels
``engine``, core.engine.nuts, and ``tfp``, TFP's NoUTurnSampler that the engine used before);
MCLMC and MAMS with ``--algorithm mclmc`` / ``mams`` (the engine's own, L ignored).

A field cut over devices (issue #34): ``--shards none slab pencil --devices N`` runs the engine's own
kernel on the white-noise parameterisation (the one a sharded field takes) with ``field.shard``
each of them over N devices (on a CPU: N logical devices, which share its cores and one memory:
peak is the process's, the whole run's). The FFT floor is the whole grid's, on one device.

Usage: python bench/scale.py [--sizes 64 96] [--leapfrog 5 10 40] [--chains 1 2]
       [--kernels looped unrolled] [--chunks 3] [--chunk-size 5] [--repeats 1]
       [--shards none slab pencil --devices 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cases  # noqa: E402  (bench/cases.py)

from core.run import resources  # noqa: E402
from core.samplers import sampler_info  # noqa: E402


def sampler_settings(chains, leapfrog, chunk, chunks, algorithm):
    return {"algorithm": algorithm, "num_warmup": chunk, "num_samples": chunk * chunks,
            "num_leapfrog_steps": leapfrog, "step_size": 0.05, "chains": chains, "seed": 1,
            "thin": chunk, "chunk_size": chunk, "adapt_mass_matrix": False}


def _tfp_step(make_kernel, nuts: bool, steps: int = 0):
    """A TFP kernel as the driver's step(seed, state, step_size) -> (state, info): its
    results bootstrapped at the state and given the state's log-density and gradient (XLA
    drops the bootstrap's own evaluation, unused), then one ``one_step``."""
    import tensorflow as tf

    from core.engine import hmc
    from core.engine import nuts as engine_nuts

    def step(seed, state, step_size):
        kernel = make_kernel(step_size)
        results = kernel.bootstrap_results(list(state.position))
        held = dict(target_log_prob=state.logdensity, grads_target_log_prob=list(state.logdensity_grad))
        if nuts:
            results = results._replace(**held)
        else:
            results = results._replace(accepted_results=results.accepted_results._replace(**held))
        position, results = kernel.one_step(list(state.position), results, seed=seed)
        if nuts:
            info = engine_nuts.NUTSInfo(results.log_accept_ratio, results.leapfrogs_taken, results.is_accepted,
                                        results.reach_max_depth, results.has_divergence, results.energy)
            return type(state)(position, results.target_log_prob, results.grads_target_log_prob), info
        accepted = results.accepted_results
        info = hmc.HMCInfo(results.log_accept_ratio, results.is_accepted, tf.constant(steps, tf.int32))
        return type(state)(position, accepted.target_log_prob, accepted.grads_target_log_prob), info
    return step


def _case_kernel(name: str, target_z, steps: int, nuts: bool):
    """The step on z of kernel ``name`` (module docstring's kernels)."""
    import tensorflow_probability as tfp

    from core.engine import hmc

    if nuts:
        return _tfp_step(lambda eps: tfp.mcmc.NoUTurnSampler(target_z, eps), nuts=True)
    if name == "looped":
        return _tfp_step(lambda eps: tfp.mcmc.HamiltonianMonteCarlo(target_z, eps, steps), nuts=False, steps=steps)
    per_iteration = steps if name == "unrolled" else int(name[4:])
    return hmc.build_kernel(target_z, hmc.leapfrog_proposal(target_z, steps, per_iteration))


def worker(spec: dict) -> dict:
    """One case in this (fresh) process: the engine's run, then the FFT floor."""
    from core.run.tensorflow_env import quiet_tensorflow

    quiet_tensorflow()
    import tensorflow as tf

    from core.config import parse_config
    from core.demo import DEMO_SPECTRUM
    from core.engine.engine import Engine

    directory = Path(spec["data_dir"])
    s = sampler_settings(spec["chains"], spec["leapfrog"], spec["chunk"], spec["chunks"], spec["algorithm"])
    shard = spec.get("shard")
    field = {"parameterisation": "whitened", "dtype": "float32"}
    if shard is not None:           # --shards: white noise, cut (or not) over the devices
        field.update(parameterisation="white_noise", shard=shard)
        if shard != "none":
            s["devices"] = spec["devices"]
    text = cases.config_text(DEMO_SPECTRUM["index"], sampler=s, field=field)
    config = parse_config(text, base_dir=directory)

    class CaseEngine(Engine):
        """The engine with the case's HMC kernel for every L (NUTS: the engine's own, or
        with kernel "tfp" TFP's NoUTurnSampler, the engine's before issue #13)."""

        def _build(self, estimate=None):
            super()._build(estimate)
            nuts = self.sampler.algorithm == "nuts"
            if spec["kernel"] == "engine" or (nuts and spec["kernel"] != "tfp"):
                return
            steps = self.sampler.num_leapfrog_steps
            # the driver's dual-averaging family with the case's step
            self.driver.kernel.kernel = lambda target_z: _case_kernel(spec["kernel"], target_z, steps, nuts)

    cls = CaseEngine
    chunks = []
    run_dir = Path(tempfile.mkdtemp(dir=spec["tmp"]))
    cls(config, text, run_dir, emit=lambda e: chunks.append(e) if e.get("type") == "chunk" else None).start()
    timed = chunks[1:]
    seconds = sum(e["elapsed"] for e in timed)
    leapfrogs = sum(int(e["stats"]["n_steps"].sum()) for e in timed)
    per_chain = leapfrogs / spec["chains"]

    n = spec["size"]
    x = tf.random.stateless_normal([spec["chains"], n, n, n], [1, 2], dtype=tf.float32)
    pair = tf.function(lambda v: tf.signal.irfft3d(tf.signal.rfft3d(v), fft_length=[n, n, n]), jit_compile=True)
    pair(x).numpy()
    times = []
    for _ in range(15):
        t0 = time.perf_counter()
        pair(x).numpy()
        times.append(time.perf_counter() - t0)
    with open("/proc/self/status") as fh:
        hwm = [line.split()[1] for line in fh if line.startswith("VmHWM:")]
    return {"peak": int(hwm[0]) * 1024, "grad_per_s": leapfrogs / seconds,
            "t_grad": seconds / per_chain, "t_fft": statistics.median(times)}


def run_case(spec: dict) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"case {spec} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 96])
    parser.add_argument("--leapfrog", type=int, nargs="+", default=[5, 10, 40])
    parser.add_argument("--chains", type=int, nargs="+", default=[1])
    parser.add_argument("--kernels", nargs="+", default=["looped", "unrolled"],
                        help="engine (the engine's own choice, core.run.engine_limits.unrolls), looped "
                             "(TFP's HMC), unrolled, or loopK (core.engine.kernels' looped leapfrog, K "
                             "steps per iteration); with --algorithm nuts: engine (core.engine.nuts) or tfp "
                             "(TFP's NoUTurnSampler)")
    parser.add_argument("--algorithm", default="hmc", choices=["hmc", "nuts", "mclmc", "mams"])
    parser.add_argument("--chunks", type=int, default=3)
    parser.add_argument("--chunk-size", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--shards", nargs="+", choices=["none", "slab", "pencil"],
                        help="field.shard of each case (white noise; the engine's own kernel)")
    parser.add_argument("--devices", type=int, default=4, help="the devices a sharded field is cut over")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.shards:
        args.kernels = [f"engine/{shard}" for shard in args.shards]
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    load = os.getloadavg()
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; CPU cores {os.cpu_count()}; load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {args.algorithm}, float32, "
          f"{'white_noise' if args.shards else 'whitened'}; "
          f"{args.chunks} sampling chunks of {args.chunk_size} steps per case; median of {args.repeats}")
    leapfrogs = args.leapfrog if sampler_info(args.algorithm).leapfrog_steps else [0]
    print(f"{'grid':>5} {'C':>2} {'L':>3} {'kernel':>12} | {'peak MiB':>8} {'est MiB':>8} {'ratio':>5} | "
          f"{'buffers':>7} | {'grad/s':>7} {'ms/grad':>7} {'/FFT':>5}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            data_dir = Path(tmp) / f"data{n}"
            cases.write_data(data_dir, n)
            for chains in args.chains:
                for L in leapfrogs:
                    results = {k: [] for k in args.kernels}
                    for _ in range(args.repeats):
                        for kernel in args.kernels:        # alternating: the same load on both
                            spec = dict(data_dir=str(data_dir), tmp=tmp, size=n, chains=chains,
                                        leapfrog=max(L, 1), chunk=args.chunk_size, chunks=args.chunks,
                                        algorithm=args.algorithm, kernel=kernel.split("/")[0],
                                        devices=args.devices)
                            if "/" in kernel:
                                spec["shard"] = kernel.split("/")[1]
                            results[kernel].append(run_case(spec))
                    est = resources.estimate_run(
                        (n,) * 3, chains=chains, dtype="float32", algorithm=args.algorithm,
                        num_leapfrog_steps=max(L, 1), chunk_size=args.chunk_size, thin=args.chunk_size,
                        num_warmup=args.chunk_size, num_samples=args.chunk_size * args.chunks,
                        noise_map=False, truth=True)
                    for kernel, rs in results.items():
                        med = {key: statistics.median(r[key] for r in rs) for key in rs[0]}
                        buffers = (med["peak"] - est.runtime) / (chains * n**3 * 4)
                        print(f"{n:>4}^3 {chains:>2} {L or '-':>3} {kernel:>12} | {med['peak'] / 2**20:8.0f} "
                              f"{est.total / 2**20:8.0f} {med['peak'] / est.total:5.2f} | {buffers:7.1f} | "
                              f"{med['grad_per_s']:7.0f} {1e3 * med['t_grad']:7.2f} "
                              f"{med['t_grad'] / med['t_fft']:5.1f}", flush=True)
                    rates = {k: statistics.median(r["grad_per_s"] for r in rs) for k, rs in results.items()}
                    last = args.kernels[-1]
                    for k in args.kernels[:-1]:
                        print(f"{'':>20}   throughput {k} / {last} = {rates[k] / rates[last]:.3f}")


if __name__ == "__main__":
    main()
