"""Numbers the engine and its numpy-side clients share across the TensorFlow boundary.

The engine (``core.engine``, TensorFlow) sizes its kernels and buffers with these; the
resource estimate (``core.run.resources``), the Grid panel's memory line and the tests
compute the same sizes without importing TensorFlow. Defined once, here.
"""

from __future__ import annotations

__all__ = ["MiB", "LEAPFROG_STEPS_PER_ITERATION", "UNROLL_BUDGET_BYTES", "UNROLLED_BUFFERS_PER_STEP",
           "UNROLLED_PROGRAM_STEP_BYTES", "STAGE2_PROGRAM_BYTES", "unrolled_extra_bytes", "unrolls",
           "stage2_apart", "field_buffer_draws", "device_chain_split", "device_chain_groups"]

#: bytes in a mebibyte (the unit of every memory figure here and in core.run.resources)
MiB = 2**20

#: leapfrog steps per iteration of the HMC step's while loop
#: (``core.engine.hmc.looped_leapfrog``): XLA reuses one iteration's
#: buffers, so its memory does not grow with the trajectory (issue #13)
LEAPFROG_STEPS_PER_ITERATION = 1

#: the unrolled leapfrog (``core.engine.hmc.unrolled_leapfrog``) keeps
#: about this many grid-sized buffers per chain per step, and its compiled program grows
#: by about UNROLLED_PROGRAM_STEP_BYTES per step (measured on CPU, docs/benchmarks.md)
UNROLLED_BUFFERS_PER_STEP = 24
UNROLLED_PROGRAM_STEP_BYTES = 15 * MiB

#: HMC is unrolled only while that costs at most this much memory beyond the looped kernel.
#: Measured on CPU (docs/benchmarks.md, issue #13): the while loop is 3-6 % slower at 64^3
#: and 96^3 (more on a loaded machine), so small runs keep the unrolled kernel; every larger
#: one (where the memory matters) gets the loop, whose memory is the same for every L
UNROLL_BUDGET_BYTES = 512 * MiB


def unrolled_extra_bytes(num_leapfrog_steps: int, chains: int, n_values: int, itemsize: int) -> int:
    """Memory the unrolled kernel needs beyond the looped one: L (24 C N b + 15 MiB), with
    N values per chain of b bytes each."""
    return int(num_leapfrog_steps) * (UNROLLED_BUFFERS_PER_STEP * int(chains) * int(n_values) * int(itemsize)
                                      + UNROLLED_PROGRAM_STEP_BYTES)


def unrolls(num_leapfrog_steps: int, chains: int, n_values: int, itemsize: int) -> bool:
    """Whether the engine unrolls the leapfrog loop of this HMC run (UNROLL_BUDGET_BYTES)."""
    return unrolled_extra_bytes(num_leapfrog_steps, chains, n_values, itemsize) <= UNROLL_BUDGET_BYTES


#: MCLMC / MAMS: a second compiled chunk program costs about this much more peak memory (host
#: memory: XLA compiling it while the run's arrays are resident; measured on CPU at 64^3 and
#: 128^3, docs/benchmarks.md)
STAGE2_PROGRAM_BYTES = 150 * MiB


def stage2_apart(chains: int, n_values: int) -> bool:
    """Whether an MCLMC / MAMS run that gathers the moments of z in stage 2 of its warmup gives
    the chunks of that stage a program of their own (``core.engine.microcanonical``'s
    ``chunk_keys``): the moments (two float64 arrays a chain, into and out of every chunk
    otherwise: 32 C N bytes) are then on the device in stage 2 only. Worth a second program
    where they outweigh its cost, STAGE2_PROGRAM_BYTES (from about 136^3 with two chains)."""
    return 32 * int(chains) * int(n_values) >= STAGE2_PROGRAM_BYTES


def field_buffer_draws(chunk_size: int, thin: int) -> int:
    """Field draws per chain the engine's chunk buffer holds: ceil(chunk_size / thin) + 1.

    A chunk keeps every ``thin``-th post-warmup draw; where its first step falls on the
    thinning grid it keeps ceil(chunk_size / thin) of them, and the one extra slot keeps
    the buffer's size independent of where the chunk starts.
    """
    return -(-int(chunk_size) // int(thin)) + 1


def device_chain_split(chains: int, devices: int) -> list[int]:
    """The run's chains each device takes when ``chains`` spread over ``devices``: consecutive
    groups, the first ``chains % devices`` one larger. One device: [chains]."""
    devices = max(1, min(int(devices), int(chains)))
    return [chains // devices + (1 if i < chains % devices else 0) for i in range(devices)]


def device_chain_groups(chains: int, devices: int) -> list[int]:
    """The chains each device runs (``core.engine.driver.DeviceSplit``): its share of
    ``device_chain_split``, a lone chain run twice (XLA compiles a lone chain's arithmetic unlike
    a batch's; the copy keeps the draws those of one device). One device: [chains]."""
    sizes = device_chain_split(chains, devices)
    return sizes if len(sizes) == 1 else [2 if k == 1 else k for k in sizes]
