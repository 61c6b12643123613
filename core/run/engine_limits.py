"""Numbers the engine and its numpy-side clients share across the TensorFlow boundary.

The engine (``core.engine``, TensorFlow) sizes its kernels and buffers with these; the
resource estimate (``core.run.resources``), the Grid panel's memory line and the tests
compute the same sizes without importing TensorFlow. Defined once, here.
"""

from __future__ import annotations

__all__ = ["MAX_UNROLL", "field_buffer_draws"]

#: HMC runs with at most this many leapfrog steps get the unrolled kernel
#: (``core.engine.kernels.UnrolledHamiltonianMonteCarlo``); longer ones TFP's loop, which
#: keeps one step's buffers instead of all of them (compile time grows with the steps)
MAX_UNROLL = 64


def field_buffer_draws(chunk_size: int, thin: int) -> int:
    """Field draws per chain the engine's chunk buffer holds: ceil(chunk_size / thin) + 1.

    A chunk keeps every ``thin``-th post-warmup draw; where its first step falls on the
    thinning grid it keeps ceil(chunk_size / thin) of them, and the one extra slot keeps
    the buffer's size independent of where the chunk starts.
    """
    return -(-int(chunk_size) // int(thin)) + 1
