"""The samplers' kernels: one file each, found through the sampler registry (``core.samplers``).

A kernel is what the driver (``core.engine.driver``) needs of an algorithm, and the driver knows
no algorithm by name. Two families carry what their members share:

* ``DualAveragingKernel`` (``dual_averaging_kernel.py``): an algorithm's pure step
  (``core.engine.hmc``, ``core.engine.nuts``: ``step(seed, state, step_size) -> (state, info)``)
  composed with dual averaging of each chain's step size (``core.engine.adaptation.dual_averaging``:
  one update from each step's acceptance), the initial step searched at the fresh state and again
  when the diagonal is set (HMC: ``hmc.py``, NUTS: ``nuts.py``, jittered HMC: ``hmc_jittered.py``);
* ``MicrocanonicalKernel`` (``microcanonical_kernel.py``): MCLMC (``mclmc.py``) and MAMS
  (``mams.py``), each its pure kernel (``init`` / ``build_kernel``: ``step(seed, state, params)
  -> (state, info)``, on the dynamics of ``core.engine.microcanonical``) composed with its staged
  tuning (``core.engine.adaptation.mclmc_tuning``, ``mams_tuning``).

Every kernel has (``d`` the driver, ``st`` its state dict, ``da`` the tuning state: a dict of
tensors, carried through the chunks and the checkpoint):

    plan(num_warmup, diagonal)                classmethod -> (diagonal window or None, chunk stops)
    fresh(parts, tlp, grads, scale, seed, data) -> (da, watch_step)
    start(view, state, tlp, grads, da, read_only, scale)
                                              -> (results, step); step(state, results, seed, g)
                                                 -> (state, results, statistics, gradient)
    field_now(results)                        the field at the state when the step computed it, else None
    relocated(view, results, state, scale)    -> (results, lp): the carry at a state the driver moved
                                                 to (``sampler.interweave``: core.engine.interweaving)
    finish(results, da, read_only)            -> (tlp, grads, da) at the chunk's end
    chunk_runner(chunk, call)                 -> run_chunk(st, first, n, data, observed): its programs
    after_rescale(st, data)                   the diagonal was just set: restart its tuning
    at_boundary(st)                           between chunks: its stage transitions
    checkpoint(da, put, arrays) -> meta       its tuning state into a checkpoint, and
    restore(arrays, meta, get) -> da          back
"""

from __future__ import annotations

import importlib

from core.samplers import sampler_info

__all__ = ["kernel_class"]


def kernel_class(algorithm: str):
    """The kernel class of ``algorithm`` (its registry entry's "module:Class")."""
    module, name = sampler_info(algorithm).kernel.split(":")
    return getattr(importlib.import_module(module), name)
