"""What a run will need, estimated before it starts: memory and a time bound, checked
against this machine's free memory.

numpy only (the GUI's Grid panel and ``app.state.config_state`` import it; no TensorFlow).

Memory. A field run's peak resident memory is modelled as three parts::

    runtime      TensorFlow + TFP imported (ENGINE_IMPORT_BYTES), plus XLA's compiled
                 chunk program and its runtime (PROGRAM_BYTES; ``program_bytes``)
    arrays       the arrays the engine holds, named and counted one by one (below)
    xla          XLA's working set inside a chunk beyond them: (W C + S) grid-sized
                 buffers, W = XLA_BUFFERS_PER_CHAIN (HMC), NUTS_BUFFERS_PER_CHAIN or
                 MICROCANONICAL_BUFFERS_PER_CHAIN, S = XLA_SHARED_BUFFERS (HMC, NUTS) or
                 MICROCANONICAL_SHARED_BUFFERS (``xla_buffers_per_chain``, ``xla_shared_buffers``)

with C chains, N cells, b bytes per value (float32: 4, float64: 8). None of it depends
on the trajectory's length L: the engine's HMC runs its leapfrog steps in a while loop
(``core.engine.hmc.looped_leapfrog``) whose buffers XLA reuses from one
step to the next. NUTS's trees are while loops too (``core.engine.nuts``); beyond the named
arrays they hold W = 36 grid-sized buffers per chain (the two trajectory ends, the proposals, the
momentum sums and 2 x 10 U-turn checkpoints), with its own program size (NUTS_PROGRAM_BYTES).
For HMC, W = 0 (the ~18 named arrays per chain cover the 16 buffers a chain adds: the
checkpoint's and the store's copies are not live while XLA runs) and S = 19 once per run (XLA's
copies of the data, mask and the model's constant maps). MCLMC and MAMS
(``core.engine.microcanonical``) integrate in while loops too, with a smaller program
(MICROCANONICAL_PROGRAM_BYTES), W = 6 and S = 35, two gradients a step (MAMS: at least two).
Every constant is fitted on bench/scale.py's fresh engine processes on CPU (float32, 32^3 to
256^3, 1 to 4 chains, L = 5 to 40: the peak does not depend on L); docs/benchmarks.md has the
runs and the estimate beside each (within 6 %).

Small HMC runs keep the unrolled leapfrog, which is faster on CPU
(``core.run.engine_limits.unrolls``: while it costs at most UNROLL_BUDGET_BYTES more).
For those the xla part is UNROLLED_BUFFERS_PER_STEP grid-sized buffers per chain per
step, C N b 24 L, and the program UNROLLED_PROGRAM_BASE_BYTES + UNROLLED_PROGRAM_STEP_BYTES
(L - 1) (measured before issue #13 on 16^3 to 96^3; within 11 % of bench/scale.py's runs).
tests/core/test_faults.py measures a run's peak against this estimate.

The named arrays at a chunk's peak (``RunEstimate.arrays``, bytes):

    model_state     ``Grid.memory_estimate``: state, proposal, momentum, gradients,
                    half spectra, FFT scratch, the chunk's sums for the moments (b bytes
                    a value), and the chunk's field buffer of ceil(chunk_size / thin) + 1
                    draws per chain
    model_constants data and 1 / noise (0 where masked; Poisson: the mask) as the
                    model's tensors (2 N b; 1 / noise is a scalar for uniform noise
                    without a mask, not counted apart), and with the fourier
                    preconditioner its dense low-k block and the block's inverse (2 m^2 b,
                    m = sampler.dense_modes at most; its float64 build is in ``setup``)
    slab_factors    where "conditional" is exact under a slab of r missing planes
                    (``core.engine.slab_conditional``: no dense block then), its r x r
                    factors, SLAB_FACTOR_MATRICES float64 matrices per chain and row of the
                    column layout (``core.field.observations.slab_rows``): an upper bound of
                    XLA's account, which bench/slab_memory.py prints; the compiled programs
                    that hold that density take SLAB_PROGRAM_BYTES_PER_PLANE a missing plane
                    more of the host's memory (counted in ``program``; measured on MCLMC runs)
    chunk_copies    the chunk's field draws as the store takes them (2 copies), the run's
                    float64 moment totals (host memory: the chunk's sums are added to them
                    after each chunk, ``Engine._fold_moments``), their mean / std (float64)
                    and float32 copies for the views

Not at the peak: the maps as loaded (data, mask, noise, truth: float64) and the
store's observed_data copies of them live only while the store is created
(``RunEstimate.setup``, 2 x maps x N x 8; the engine drops them before the chain starts,
``FieldModel.release_observed``), and the checkpoint is written one array at a time
(``core.store.checkpoint.write_checkpoint``): on a CPU a tensor's array is its own buffer.

Device and host. On a CPU there is one memory: ``total`` = ``host_bytes("cpu")`` =
``device_bytes("cpu")``, the runtime plus the larger of the chunk's peak and the set-up's.
On a GPU (``core.engine.devices.memory_kind``) the device holds what XLA allocates for the
chunk program it runs (the arrays the engine holds between chunks are its parameters) and
GPU_RUNTIME_BYTES (the CUDA context and cuFFT plans: an assumption, no GPU has been measured):
``device_bytes("gpu")``. The programs' own account (XLA's buffer assignment: parameters,
outputs, temporaries) is measured by bench/device_memory.py on this machine's CPU compiler and
fitted per chunk program as (W C + S) grid-sized buffers plus the chunk's field draws where the
program makes them (``DEVICE_PROGRAMS``; the largest of a run's programs counts), plus the
fourier preconditioner's dense block; the CPU's RSS fit above also counts host arrays (the
model's numpy maps, the store's buffers) that a GPU run keeps in host memory. Small HMC runs
(unrolled) count as on a CPU: the model (``DEVICE_ARRAYS``) and XLA's working set. The host holds TensorFlow's runtime
and the larger of the chunk's copies (``gpu_host``: the draws and the moments copied off
the device, 2 kept C N 4 + 4 N 8 + 2 N 4, and the checkpoint's largest array) and the
set-up's maps, ``host_bytes("gpu")``. ``memory_problem`` checks each against its memory
(the GPU's free memory from nvidia-smi where the engine can read it) and says which.

A field cut over D devices (``field.shard``, white noise: the registry's ``white_noise_programs``):
each GPU holds one device's program, measured by ``bench/device_memory.py --shard`` as XLA's
account of one device's view (``core.engine.sharded_fft.ShardMesh.device_view``): 1 / D of the
whole program plus SHARD_PLANES planes of the grid. Its host still takes each chunk's draws
whole (the engine joins the parts there), and on a CPU the logical devices share one memory.

Time. A lower bound from FFT work alone (the status bar shows measured draws/s)::

    one real 3-D FFT pair of N cells     ~ 5 N log2 N flops
    one gradient of the log-density      ~ P FFT pairs, P = 1 (whitened, raw_modes) or
                                           2 (white_noise)
    t_gradient >= C * P * 5 N log2 N / R

R (flop/s) is measured once per process by timing numpy's rfftn + irfftn on a 32^3
grid (median of 7; ``fft_rate``). HMC takes L gradients per step; NUTS at least one.

Free memory: ``/proc/meminfo`` MemAvailable (what the kernel can give without
swapping), else ``os.sysconf`` free pages. ``check_config`` refuses a run whose
estimate exceeds it, with a message that says what to change: where the chunk's field
buffer (ceil(chunk_size / thin) + 1 draws per chain, in the model state and its copies)
is most of the need, a smaller ``sampler.chunk_size`` or a larger ``sampler.thin``.

Disk. The store (``RunEstimate.store_bytes``, an upper bound: random draws barely
compress, to about 90 %) holds per chain ceil(num_samples / thin) field draws
(``RunEstimate.field_draw_bytes`` each: the store's own blocks of N float32 values,
``core.store.run_store.field_draw_disk_bytes``, each block file rounded up to 4 KiB) and
their P(k), and (num_warmup + num_samples) draws of STORE_BYTES_PER_DRAW bytes of
statistics and 8 bytes per sampled parameter; plus the moments, the observed maps and
the checkpoint. ``disk_problem`` refuses a new run whose store exceeds the free space
of its disk.

Grid. A field run needs every axis of at least MIN_AXIS = 3 cells (``grid_problem``).
The field's k = 0 mode is not random (its prior variance is 0), and along an axis of
n cells the grid resolves the frequencies m = 1 .. n // 2: n = 1 has none (the field
is constant along the axis), n = 2 only the Nyquist frequency m = 1 = n / 2, whose mode
is real and carries no phase (cos(pi j) = (-1)^j), so a 2 x 2 x 2 grid has 7 random
modes, all Nyquist modes of some axis, and 1 x 1 x 1 none. n = 3 is the smallest axis
with a full wave, 0 < k < k_Nyquist (3 x 3 x 3: 26 random modes in 3 k-shells).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from core.config.schema import PER_MODE_PRECONDITIONERS
from core.field.grid import Grid
from core.field.observations import settings_take_exact_slab, slab_rows
from core.run.engine_limits import (
    UNROLLED_BUFFERS_PER_STEP,
    UNROLLED_PROGRAM_STEP_BYTES,
    MiB,
    device_chain_groups,
    field_buffer_draws,
    stage2_apart,
    unrolls,
)
from core.samplers import SAMPLERS, sampler_info
from core.store.run_store import field_draw_disk_bytes

__all__ = ["ResourceError", "RunEstimate", "estimate_run", "estimate_for_config",
           "available_memory", "physical_memory", "memory_problem", "check_config",
           "grid_problem", "disk_problem", "run_problem", "host_memory_problem", "free_disk", "MIN_AXIS",
           "STORE_BYTES_PER_DRAW",
           "fft_rate", "fft_pairs", "gradient_seconds", "format_bytes", "format_seconds", "estimate_line",
           "ENGINE_IMPORT_BYTES", "PROGRAM_BYTES", "UNROLLED_PROGRAM_BASE_BYTES", "XLA_BUFFERS_PER_CHAIN",
           "XLA_SHARED_BUFFERS",
           "NUTS_BUFFERS_PER_CHAIN", "NUTS_PROGRAM_BYTES", "MICROCANONICAL_BUFFERS_PER_CHAIN",
           "MICROCANONICAL_SHARED_BUFFERS", "MICROCANONICAL_PROGRAM_BYTES", "GPU_RUNTIME_BYTES", "DEVICE_ARRAYS",
           "DEVICE_PROGRAMS", "SHARD_PLANES", "program_figures", "device_program_bytes"]

ENGINE_IMPORT_BYTES = 946 * MiB      # the engine process with TensorFlow and TFP imported (VmHWM,
#                                      measured 2026-12: 680 MiB before; the estimate read 10-31 % low)
PROGRAM_BYTES = SAMPLERS["hmc"].program_bytes   # XLA compiling and running the looped chunk program
UNROLLED_PROGRAM_BASE_BYTES = 290 * MiB   # the unrolled kernel's program: one step, and
#                                           engine_limits.UNROLLED_PROGRAM_STEP_BYTES per further step
#: per-sampler figures (XLA's buffers per chain and per run, the program, XLA's account of each
#: chunk program) live in the sampler registry (``core.samplers``); these names are HMC's, NUTS's
#: and MCLMC / MAMS's entries there
XLA_BUFFERS_PER_CHAIN = SAMPLERS["hmc"].buffers_per_chain
XLA_SHARED_BUFFERS = SAMPLERS["hmc"].shared_buffers
NUTS_BUFFERS_PER_CHAIN = SAMPLERS["nuts"].buffers_per_chain
NUTS_PROGRAM_BYTES = SAMPLERS["nuts"].program_bytes
MICROCANONICAL_BUFFERS_PER_CHAIN = SAMPLERS["mclmc"].buffers_per_chain
MICROCANONICAL_SHARED_BUFFERS = SAMPLERS["mclmc"].shared_buffers
MICROCANONICAL_PROGRAM_BYTES = SAMPLERS["mclmc"].program_bytes
#: XLA's own account of each chunk program's device buffers (bench/device_memory.py: 32^3, float32,
#: 1 and 2 chains, identity and diagonal preconditioners, 2026-12-03), by (algorithm, stage 2 apart
#: (``core.run.engine_limits.stage2_apart``)): the programs a run may compile, each (W, S, draws):
#: W grid-sized buffers per chain and S once per run, and whether the chunk's field draws
#: (ceil(chunk_size / thin) + 1 a chain) are in it too; the larger of two preconditioners' fits
DEVICE_PROGRAMS = {(name, apart): programs for name, info in SAMPLERS.items()
                   for apart, programs in info.device_programs.items()}
#: XLA's account of one device's program of a field cut over D devices (``bench/device_memory.py
#: --shard``, 16^3 and 32^3, 2 to 8 devices, slabs and pencils, 2026-12-06): 1 / D of the whole
#: program and, on every device, at most this many planes of the grid (HMC 6 to 8, MCLMC 1 to 2)
SHARD_PLANES = 8
#: r x r float64 matrices a chain and layout row holds where "conditional" is exact under a slab
#: (the density with its gradient and field, XLA's buffer assignment on this machine's CPU,
#: ``bench/slab_memory.py``: the program grows by 7.1 of them from r = 16 to 32 at 64^3; beside
#: the diagonal centre's program the slab's adds -6 to +77 MiB from 64^3 to 128^3, below this count)
SLAB_FACTOR_MATRICES = 8
#: Host memory per missing plane that the slab's exact conditional adds to a run's compiled
#: programs (each holds the density with its factor by halves): a whole MCLMC run's peak RSS
#: (``fieldscope run``, 2 chains, 20 + 20 steps) exceeded the same run's with the fourier
#: preconditioner by 568 MiB at 64^3 with 16 planes, 1252 MiB with 32, 1.0 GiB at 128^3 with 32,
#: where XLA's buffers differ by -6 to +77 MiB: so 40 MiB a plane (on a GPU, host memory too)
SLAB_PROGRAM_BYTES_PER_PLANE = 40 * 2**20
GPU_RUNTIME_BYTES = 2**30            # a GPU's CUDA context, cuFFT plans, allocator slack:
#                                      an assumption, not measured (no GPU lent so far)
#: the named arrays that live in the compute device's memory on a GPU (the rest are host's)
DEVICE_ARRAYS = ("model_state", "model_constants")
MIN_AXIS = 3                         # cells per axis of a field grid (module docstring)
STORE_BYTES_PER_DRAW = 64            # sample_stats of one draw of one chain, with headroom


class ResourceError(ValueError):
    """A run this machine cannot hold; the message names the need and what to change."""


# --------------------------------------------------------------------------- time


@lru_cache(maxsize=1)
def fft_rate() -> float:
    """Measured flop rate R of numpy's 3-D real FFT pair on this machine (module doc)."""
    n = 32
    x = np.random.default_rng(0).standard_normal((n, n, n))
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        np.fft.irfftn(np.fft.rfftn(x), s=x.shape, axes=(0, 1, 2))
        times.append(time.perf_counter() - t0)
    N = n ** 3
    return 5.0 * N * math.log2(N) / max(float(np.median(times)), 1e-9)


def fft_pairs(parameterisation: str) -> int:
    """FFT pairs per gradient of the log-density (see the module docstring)."""
    return 2 if parameterisation == "white_noise" else 1


def gradient_seconds(shape, chains: int, parameterisation: str) -> float:
    """t_gradient ~ chains * P * 5 N log2 N / R, all chains together (a lower bound)."""
    N = math.prod(shape)
    if N < 2:
        return 0.0
    return chains * fft_pairs(parameterisation) * 5.0 * N * math.log2(N) / fft_rate()


def estimate_line(estimate: dict) -> str:
    """The words for a run's estimate as the engine's "loading" status event carries it
    (``core.run.messages``: bytes, memory, available, run_seconds), for the CLI and the window."""
    free = estimate.get("available")
    return (f"estimate: about {format_bytes(estimate['bytes'])} of {estimate.get('memory', 'memory')}"
            + (f" ({format_bytes(free)} free)" if free else "")
            + f", at least {format_seconds(estimate['run_seconds'])} (FFT bound)")


# --------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class RunEstimate:
    """Memory (bytes) and time (seconds, lower bounds) of a field run; module doc."""

    shape: tuple[int, int, int]
    chains: int
    dtype: str
    algorithm: str
    leapfrog_steps: int          # L (HMC; NUTS: 0)
    arrays: dict[str, int] = field(default_factory=dict)
    xla_working_set: int = 0
    program: int = 0             # XLA's compiled program and runtime
    engine_import: int = ENGINE_IMPORT_BYTES
    gradient_seconds: float = 0.0
    gradients_per_step: int = 1  # HMC: L; NUTS: at least 1; MCLMC: 2; MAMS: at least 2
    total_steps: int = 0
    chunk_size: int = 25
    thin: int = 5
    field_buffer: int = 0        # bytes of the chunk's field draws (in arrays), all chains
    store_bytes: int = 0         # the run store on disk when the run is done
    field_draw_bytes: int = 0    # disk bytes of one stored field draw of one chain
    num_samples: int = 0
    unrolled: bool = False       # HMC with the unrolled leapfrog (small runs): memory grows with L

    device_program: int = 0      # on a GPU: the largest chunk program's buffers (DEVICE_PROGRAMS)
    setup: int = 0               # host arrays of the set-up only (loaded maps, store copies)
    gpu_host: dict[str, int] = field(default_factory=dict)   # host arrays at the chunk, on a GPU

    @property
    def runtime(self) -> int:
        return self.engine_import + self.program

    @property
    def total(self) -> int:
        """Peak resident memory of the engine process for this run on a CPU (``host_bytes``)."""
        return self.host_bytes("cpu")

    def device_bytes(self, device: str = "cpu") -> int:
        """Peak memory of the compute device: on a CPU the process's RSS (``total``); on a
        GPU the largest chunk program's buffers (``device_program``; for the unrolled HMC the
        model's tensors, its constants and XLA's working set) and the runtime's device part
        (GPU_RUNTIME_BYTES)."""
        if device != "gpu":
            return self.host_bytes("cpu")
        if self.device_program:
            return self.device_program + GPU_RUNTIME_BYTES
        return (sum(self.arrays[k] for k in DEVICE_ARRAYS if k in self.arrays)
                + self.xla_working_set + GPU_RUNTIME_BYTES)

    def host_bytes(self, device: str = "cpu") -> int:
        """Peak host memory (RSS) of the engine process: on a CPU everything, at the larger
        of the chunk's peak and the set-up's (module doc); on a GPU TensorFlow's runtime,
        the chunk's copies for the store and the checkpoint (``gpu_host``) or the set-up's
        loaded maps, whichever is larger."""
        if device == "gpu":
            return self.runtime + max(sum(self.gpu_host.values()), self.setup)
        chunk = sum(self.arrays.values()) + self.xla_working_set + self.program
        constants = self.arrays.get("model_constants", 0)
        return self.engine_import + max(chunk, self.setup + constants)

    def needed(self, include_import: bool = True) -> int:
        """``total`` (a CPU's one memory), less TensorFlow's import when an engine process
        already holds it (a GPU's two parts: ``device_bytes`` / ``host_bytes``)."""
        return self.total if include_import else self.total - self.engine_import

    @property
    def step_seconds(self) -> float:
        return self.gradient_seconds * self.gradients_per_step

    @property
    def run_seconds(self) -> float:
        return self.step_seconds * self.total_steps

    def describe(self) -> str:
        """One line: memory, its parts, and the time bounds."""
        parts = ", ".join(f"{name.replace('_', ' ')} {format_bytes(v)}"
                          for name, v in self.arrays.items())
        bound = sampler_info(self.algorithm).gradients_text
        return (f"memory ≈ {format_bytes(self.total)} (TensorFlow and XLA "
                f"{format_bytes(self.runtime)}, XLA buffers "
                f"{format_bytes(self.xla_working_set)}, {parts}); time {bound} "
                f"{format_seconds(self.gradient_seconds)} per gradient, "
                f"{format_seconds(self.run_seconds)} for the run (FFT bound)")


def xla_buffers_per_chain(algorithm: str) -> int:
    """W of the module docstring: XLA's grid-sized buffers per chain (looped kernels)."""
    return sampler_info(algorithm).buffers_per_chain


def xla_shared_buffers(algorithm: str) -> int:
    """S of the module docstring: XLA's grid-sized buffers once per run."""
    return sampler_info(algorithm).shared_buffers


def program_figures(algorithm: str, apart: bool, *, white_noise: bool = False,
                    preconditioner: str = "diagonal") -> tuple:
    """The registry's (W, S, draws) of each chunk program a run compiles: ``DEVICE_PROGRAMS`` by
    whether stage 2 is ``apart``, or for a white-noise latent ``white_noise_programs`` by
    preconditioner (any but the identity counted as the diagonal, whose stage 2 is always apart
    in the microcanonical kernels)."""
    info = sampler_info(algorithm)
    if not white_noise:
        return info.device_programs[apart]
    mass = "identity" if preconditioner == "identity" else "diagonal"
    return info.white_noise_programs[mass, apart or (info.microcanonical and mass == "diagonal")]


def device_program_bytes(algorithm: str, chains: int, n_values: int, itemsize: int, kept: int,
                         dense_modes: int = 0, *, white_noise: bool = False, shards: int = 1,
                         plane_values: int = 0, preconditioner: str = "diagonal") -> int:
    """The device memory of a looped run's largest chunk program (``DEVICE_PROGRAMS``; a
    white-noise latent's: the registry's ``white_noise_programs``, by ``preconditioner``, any but
    the identity counted as the diagonal): (W C + S) grid-sized buffers,
    the chunk's field draws where the program makes them, and the fourier preconditioner's dense
    block and its inverse (2 m^2 values). A field cut over ``shards`` devices (``field.shard``):
    each device's program, 1 / shards of the whole one's and SHARD_PLANES planes of the grid
    (``plane_values`` values each) that every device holds."""
    info = sampler_info(algorithm)
    programs = program_figures(algorithm, info.microcanonical and stage2_apart(chains, n_values),
                               white_noise=white_noise, preconditioner=preconditioner)
    c = int(chains)
    grid = int(n_values) * int(itemsize)
    largest = max((W * c + S + (kept * c if draws else 0)) * grid for W, S, draws in programs)
    if int(shards) > 1:
        largest = largest / int(shards) + SHARD_PLANES * plane_values * int(itemsize)
    return int(math.ceil(largest)) + 2 * int(dense_modes) ** 2 * int(itemsize)


def program_bytes(algorithm: str) -> int:
    """The compiled chunk program of a looped kernel, with XLA's runtime."""
    return sampler_info(algorithm).program_bytes


def estimate_run(shape, *, chains: int = 2, dtype: str = "float32", algorithm: str = "hmc",
                 num_leapfrog_steps: int = 10, chunk_size: int = 25, thin: int = 5,
                 num_warmup: int = 0, num_samples: int = 0,
                 parameterisation: str = "whitened", noise_map: bool = False,
                 truth: bool = True, dense_modes: int = 0, devices: int = 1, shards: int = 1,
                 preconditioner: str = "diagonal", hyper_sampled: bool = False,
                 interweave: bool = False, slab: tuple[int, int] | None = None,
                 box_size=None) -> RunEstimate:
    """The estimate for a field run on a grid of ``shape`` (see the module docstring). With the
    chains spread over ``devices`` (``sampler.devices``), the compute memory is counted for the
    chains the devices run (``device_chain_groups``: a lone chain runs twice): all of them in
    the one memory of a CPU's logical devices, the largest group's on each GPU. With the field
    cut over ``shards`` devices, each GPU's program is its share (``device_program_bytes``).
    ``hyper_sampled``: P(k) hyperparameters are sampled (MAMS's trajectories are longer then:
    ``core.samplers.SamplerInfo.gradients_per_step``; ``interweave``: one more a step with them).
    ``slab``: the data's (axis, missing planes) where their mask is a slab under which
    "conditional" is exact (``core.field.observations.exact_slab``), counted where the settings
    take that path (the whitened latent, sampled hyperparameters); ``box_size`` lays out its
    columns (``slab_factor_bytes``)."""
    shape = tuple(int(n) for n in shape)
    if not settings_take_exact_slab(preconditioner, parameterisation, hyper_sampled):
        slab = None
    if slab:
        dense_modes = 0                  # the dense block is not built there
    grid = Grid(shape, 1.0)
    b = np.dtype(dtype).itemsize
    groups = device_chain_groups(int(chains), int(devices))
    c_run, c, n = int(chains), sum(groups), grid.n_cells
    kept = field_buffer_draws(chunk_size, thin)
    model = grid.memory_estimate(chains=c, dtype=dtype, n_field_draws_kept=kept).total
    maps = 1 + 1 + int(noise_map) + int(truth)           # data, mask, noise, truth
    arrays = {
        "model_state": model,
        # data and 1 / noise (or the mask) as tensors; the fourier preconditioner's dense block
        # and its inverse (at most dense_modes^2 each: fewer modes may qualify)
        "model_constants": 2 * n * b + 2 * int(dense_modes) ** 2 * b,
        # the draws as the store takes them, the run's float64 moment totals, their mean / std
        # and float32 copies
        "chunk_copies": 2 * kept * c_run * n * 4 + 4 * n * 8 + 2 * n * 4,
    }
    slab_bytes = slab_factor_bytes(shape, slab, c, box_size) if slab else 0
    if slab:
        arrays["slab_factors"] = slab_bytes
    gpu_host = {    # on a GPU: the draws copied off the device, the moments (host memory), one checkpoint array
        "chunk_copies": 2 * kept * c_run * n * 4 + 4 * n * 8 + 2 * n * 4,
        "checkpoint": max(c_run * n * b, n * 8),
    }
    # the loaded maps and the store's observed_data copies; the dense block's float64 build
    # (the mode couplings, the precision, its factor and the inverse)
    setup = 2 * maps * n * 8 + 4 * int(dense_modes) ** 2 * 8
    info = sampler_info(algorithm)
    L = int(num_leapfrog_steps) if info.leapfrog_steps else 0
    unrolled = info.may_unroll and unrolls(L, c, n, b)
    if unrolled:       # the engine's choice (core.run.engine_limits.unrolls): L steps' buffers
        xla = UNROLLED_BUFFERS_PER_STEP * L * c * n * b
        program = UNROLLED_PROGRAM_BASE_BYTES + UNROLLED_PROGRAM_STEP_BYTES * (L - 1)
    else:
        xla = (xla_buffers_per_chain(algorithm) * c + xla_shared_buffers(algorithm)) * n * b
        program = program_bytes(algorithm)
    if slab:            # the programs that hold the slab's density (host memory)
        program += SLAB_PROGRAM_BYTES_PER_PLANE * int(slab[1])
    field_buffer = kept * c * n * b + 2 * kept * c_run * n * 4      # model state + chunk copies
    n_fields = -(-int(num_samples) // int(thin))
    n_shells = int(math.sqrt(sum((m // 2) ** 2 for m in shape))) + 2
    steps = int(num_warmup) + int(num_samples)
    draw_bytes = field_draw_disk_bytes(shape, 4)
    store = (c_run * n_fields * (draw_bytes + n_shells * 8)       # field draws and P(k)
             + c_run * steps * (STORE_BYTES_PER_DRAW + 8 * 3)      # stats, parameters
             + (2 + maps) * n * 8                                  # moments, observed maps
             + 2 * c_run * n * b + 2 * n * 8)                      # checkpoint
    return RunEstimate(
        shape=shape, chains=c_run, dtype=str(dtype), algorithm=algorithm, leapfrog_steps=L,
        arrays=arrays, xla_working_set=xla, program=program, unrolled=unrolled,
        device_program=0 if unrolled else device_program_bytes(
            algorithm, max(groups), n, b, kept, dense_modes, white_noise=parameterisation == "white_noise",
            shards=shards, plane_values=n // min(shape), preconditioner=preconditioner) + slab_bytes,
        gradient_seconds=gradient_seconds(shape, c, parameterisation),
        gradients_per_step=info.gradients_per_step(num_leapfrog_steps, hyper_sampled, interweave),
        total_steps=steps, chunk_size=int(chunk_size), thin=int(thin),
        field_buffer=field_buffer, store_bytes=store, field_draw_bytes=draw_bytes,
        num_samples=int(num_samples), setup=setup, gpu_host=gpu_host)


@lru_cache(maxsize=8)
def _slab_layout_rows(transverse: tuple[int, int], lengths: tuple[float, float]) -> int:
    k = Grid((1, *transverse), (1.0, *lengths)).k_magnitude_full()[0]
    return len(slab_rows(k))


def slab_factor_bytes(shape, slab: tuple[int, int], chains: int, box_size=None) -> int:
    """The slab's exact conditional's r x r factors (module doc), all ``chains`` together; the
    layout's rows from the box's transverse lengths (``box_size``: one length or three; default
    a cube: anisotropic cells make more rows)."""
    axis, planes = slab
    box = (1.0,) * 3 if box_size is None else tuple(np.broadcast_to(np.asarray(box_size, float), (3,)))
    rows = _slab_layout_rows(tuple(int(m) for i, m in enumerate(shape) if i != axis),
                             tuple(float(b) for i, b in enumerate(box) if i != axis))
    return SLAB_FACTOR_MATRICES * int(chains) * rows * int(planes) ** 2 * 8


def estimate_for_config(config, shape, devices: int | None = None, slab: tuple[int, int] | None = None) -> RunEstimate:
    """``estimate_run`` with the settings of a field ``core.config.RunConfig``; ``devices`` the
    devices its chains spread over (default: ``sampler.devices``, "all" counted as one: the
    engine, which sees the GPUs, passes their number). A field cut over the devices
    (``field.shard``) has every chain on every device: its host memory is counted whole (on a
    CPU its logical devices share one memory), each GPU's the device's share (``shards``).
    ``slab``: the data's (axis, missing planes) where their mask is such a slab
    (``core.io.exact_slab``; ``estimate_run``)."""
    s, f = config.sampler, config.field
    if devices is None:
        devices = s.devices if isinstance(s.devices, int) else 1
    shards = 1
    if f.shard != "none":
        devices, shards = 1, devices
    return estimate_run(shape, chains=s.chains, dtype=f.dtype, algorithm=s.algorithm, devices=devices,
                        shards=shards, preconditioner=s.preconditioner,
                        num_leapfrog_steps=s.num_leapfrog_steps, chunk_size=s.chunk_size,
                        thin=s.thin, num_warmup=s.num_warmup, num_samples=s.num_samples,
                        parameterisation=f.parameterisation,
                        noise_map=config.data.noise_map is not None, hyper_sampled=samples_hyperparameters(config),
                        interweave=s.interweave, slab=slab, box_size=config.grid.box_size,
                        dense_modes=s.dense_modes if s.preconditioner in PER_MODE_PRECONDITIONERS else 0)


def samples_hyperparameters(config) -> bool:
    """Whether a field config samples P(k) hyperparameters with the field."""
    from core.field.power_spectrum import sampled_hyperparameter_names

    return config.model.kind == "field" and bool(sampled_hyperparameter_names(config.prior))


def available_memory() -> int | None:
    """Bytes this machine can give a new process without swapping, or None if unknown.

    Linux: MemAvailable of /proc/meminfo. Elsewhere: free pages from ``os.sysconf``
    (an underestimate: it leaves out reclaimable caches).
    """
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                if line.startswith(b"MemAvailable:"):
                    parts = line.split()
                    return int(parts[1]) * (1024 if parts[2:3] == [b"kB"] else 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def physical_memory() -> int | None:
    """Bytes of RAM of this machine, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def memory_problem(estimate: RunEstimate, available: int | None = None, *,
                   include_import: bool = True, device: str = "cpu",
                   device_available: int | None = None) -> str | None:
    """A one-line refusal when the run cannot fit in ``available`` bytes of host memory
    (default: this machine's free memory now), else None. ``include_import=False`` for an
    engine process that has already imported TensorFlow (the desktop app's). With
    ``device = "gpu"`` the device's part (``device_bytes``) is checked against
    ``device_available`` (when known) and the host's part (``host_bytes``) against
    ``available``; the message names the memory that is short."""
    if available is None:
        available = available_memory()
    if device == "gpu":
        need_device = estimate.device_bytes("gpu")
        if device_available is not None and need_device > device_available:
            return _memory_text(estimate, need_device, device_available, "GPU (device) memory")
        need = estimate.host_bytes("gpu") - (0 if include_import else estimate.engine_import)
        if available is None or need <= available:
            return None
        return _memory_text(estimate, need, available, "host memory (beside the GPU's)")
    need = estimate.needed(include_import)
    if available is None or need <= available:
        return None
    return _memory_text(estimate, need, available, "memory (host RAM: the CPU computes)")


def _memory_text(estimate: RunEstimate, need: int, available: int, memory: str) -> str:
    """The refusal of ``memory_problem``: the need, the free ``memory``, what to change."""
    shape = " x ".join(str(n) for n in estimate.shape)
    if 2 * estimate.field_buffer >= need:
        # the chunk's field buffer is most of it: that is what to change
        kept = field_buffer_draws(estimate.chunk_size, estimate.thin)
        return (f"the run needs about {format_bytes(need)} of {memory} but this machine has "
                f"{format_bytes(available)} free: with sampler.chunk_size = "
                f"{estimate.chunk_size} and sampler.thin = {estimate.thin} each chunk holds "
                f"ceil(chunk_size / thin) + 1 = {kept} field draws of the {shape} grid per "
                f"chain ({format_bytes(estimate.field_buffer)} for {estimate.chains} "
                f"chain{'s' if estimate.chains != 1 else ''}); use a smaller sampler.chunk_size "
                f"or a larger sampler.thin")
    hints = []
    if estimate.chains > 1:
        hints.append("fewer chains")
    if estimate.dtype == "float64":
        hints.append("field.dtype = 'float32'")
    hints.append("a smaller grid")
    remedy = (", ".join(hints[:-1]) + " or " if len(hints) > 1 else "") + hints[-1]
    return (f"the run needs about {format_bytes(need)} ({shape} grid, {estimate.chains} "
            f"chain{'s' if estimate.chains != 1 else ''}, {estimate.dtype}, "
            f"{f'{estimate.leapfrog_steps} leapfrog steps' if estimate.leapfrog_steps else estimate.algorithm.upper()}) "
            f"of {memory} but this machine has "
            f"{format_bytes(available)} free; use {remedy}")


def grid_problem(shape) -> str | None:
    """A one-line refusal of a field grid with an axis of fewer than MIN_AXIS cells (see the
    module docstring), else None."""
    shape = tuple(int(n) for n in shape)
    if len(shape) == 3 and min(shape) >= MIN_AXIS:
        return None
    text = " x ".join(str(n) for n in shape)
    random_modes = max(math.prod(shape) - 1, 0)
    return (f"the grid {text} is too small to sample: every axis needs at least {MIN_AXIS} "
            f"cells (along an axis of 1 cell the field is constant, along one of 2 it has only "
            f"the phaseless Nyquist mode; {MIN_AXIS} cells resolve a full wave); this grid has "
            f"{random_modes} random Fourier mode{'s' if random_modes != 1 else ''} (k = 0 is "
            f"not random)")


def free_disk(path) -> int | None:
    """Free bytes on the disk that holds ``path`` (or its nearest existing parent)."""
    import shutil
    from pathlib import Path

    p = Path(os.path.abspath(os.fspath(path)))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def disk_problem(estimate: RunEstimate, run_dir, free: int | None = None) -> str | None:
    """A one-line refusal when the run's store cannot fit the free space of the disk of
    ``run_dir`` (default: measured now), else None."""
    if free is None:
        free = free_disk(run_dir)
    if free is None or estimate.store_bytes <= free:
        return None
    shape = " x ".join(str(n) for n in estimate.shape)
    n_fields = -(-estimate.num_samples // estimate.thin)
    return (f"the run's store would take about {format_bytes(estimate.store_bytes)} "
            f"(sampler.num_samples = {estimate.num_samples} with sampler.thin = "
            f"{estimate.thin}: {n_fields} field draws of the {shape} grid per chain, "
            f"{estimate.chains} chain{'s' if estimate.chains != 1 else ''}, and "
            f"{estimate.total_steps} draws of statistics) but the disk of {run_dir} has "
            f"{format_bytes(free)} free; use a smaller sampler.num_samples or a larger "
            f"sampler.thin, or another disk")


def host_memory_problem(config, shape, slab: tuple[int, int] | None = None) -> str | None:
    """The refusal of a run of ``config`` on a grid of ``shape`` that this machine cannot hold,
    for a window whose engine process has TensorFlow imported already, or None. A GPU computes
    where TensorFlow will see one: the host's part is checked here (the engine checks the
    device's part against the GPU's free memory when it starts). ``slab``: as ``estimate_run``'s."""
    try:
        estimate = estimate_for_config(config, shape, slab=slab)
    except ValueError:          # ConfigError, or a shape the grid refuses: reported elsewhere
        return None
    from core.run.tensorflow_env import nvidia_device_present

    device = "gpu" if nvidia_device_present() and os.environ.get("CUDA_VISIBLE_DEVICES") != "-1" else "cpu"
    return run_problem(estimate, include_import=False, device=device)   # grid, memory


def run_problem(estimate: RunEstimate, available: int | None = None, *,
                include_import: bool = True, run_dir=None, device: str = "cpu",
                device_available: int | None = None) -> str | None:
    """The first reason the run cannot go ahead: its grid (``grid_problem``), memory
    (``memory_problem``, for the compute ``device``), and with ``run_dir`` the store's
    disk (``disk_problem``)."""
    return (grid_problem(estimate.shape)
            or memory_problem(estimate, available, include_import=include_import,
                              device=device, device_available=device_available)
            or (disk_problem(estimate, run_dir) if run_dir is not None else None))


def check_config(config, shape, available: int | None = None, *,
                 include_import: bool = True, run_dir=None, device: str = "cpu",
                 device_available: int | None = None) -> RunEstimate:
    """The estimate of a field run; ResourceError when it cannot go ahead (``run_problem``)."""
    estimate = estimate_for_config(config, shape)
    problem = run_problem(estimate, available, include_import=include_import, run_dir=run_dir,
                          device=device, device_available=device_available)
    if problem is not None:
        raise ResourceError(problem)
    return estimate


# --------------------------------------------------------------------------- text


def format_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def format_seconds(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


# --------------------------------------------------------------------------- before TensorFlow


def data_shape_problem(config) -> tuple[tuple | None, str | None]:
    """(grid shape or None, the first problem or None) of a field config, from its data file's
    header alone (nothing is loaded; numpy only): what the command line refuses before
    TensorFlow loads. The shape is None for the integral model."""
    if config.model.kind != "field":
        return None, None
    from core import io as loaders

    try:
        info = loaders.array_info(config.data_path, config.data.key)
    except loaders.LoadError as err:
        return None, str(err)
    shape = tuple(info.shape or ())
    if len(shape) != 3 or 0 in shape:
        return None, None          # the loader's header checks name it, with every detail
    problem = grid_problem(shape)
    return shape, (f"{config.data_path}: {problem}" if problem else None)


def calibration_problem(config, shape, batch_chains: int, available: int | None = None) -> str | None:
    """A one-line refusal when a calibration batch of ``batch_chains`` chains (simulations per
    batch times the config's chains) on the grid ``shape`` cannot fit in memory (the batch is
    one program, like a run of that many chains), else None. The integral model (shape None)
    counts as a grid of one cell."""
    if shape is None:
        shape = (1, 1, 1)
        estimate = estimate_run(shape, chains=batch_chains, dtype="float64", chunk_size=1, thin=1,
                                num_warmup=0, num_samples=1, truth=False)
    else:
        # the batch's program and state (the draws it keeps are counted as one step's: a
        # lower bound, so that only a batch that surely cannot fit is refused)
        s, f = config.sampler, config.field
        estimate = estimate_run(shape, chains=batch_chains, dtype=f.dtype, algorithm=s.algorithm,
                                num_leapfrog_steps=s.num_leapfrog_steps, chunk_size=1, thin=1,
                                parameterisation=f.parameterisation, noise_map=config.data.noise_map is not None)
    problem = memory_problem(estimate, available)
    if problem is None:
        return None
    return (f"--batch: a batch of {batch_chains} chains does not fit: {problem}; give a smaller --batch "
            "(fewer simulations run at once)")

