"""A run's checkpoint: everything a resumed run needs to draw exactly what the run straight
through would have drawn, by name.

``save(run_dir, st, kernel, config_text)`` writes the driver's state dict ``st`` (its parts named
in ``core.engine.driver``'s docstring) with the run's float64 field moments and progress;
``load(run_dir, kernel, sampler)`` reads it back as such a dict, and the record (``meta``). The file
is ``core.store.checkpoint``'s (written atomically, read only as a regular file).

Format ``FORMAT`` (1), named arrays (``i`` the state part):

    state_i, grads_i, tlp          the kernel's position z, its gradient and log-density
    scale_i                        the diagonal's scale (x = scale * z)
    mass_count, mass_mean_i, mass_m2_i    each chain's Welford sums over the metric's window
    mom_count, mom_sum, mom_sumsq  the run's float64 totals of the field draws (a field cut over
                                   devices: mom_sum_k, mom_sumsq_k a part, the record's
                                   moment_grid and moment_regions saying where each lies)
    watch_step                     the step size the warmup watch measures a collapse against
    ...                            the kernel's tuning state (``checkpoint`` / ``restore`` of
                                   its class in ``core.engine.samplers``)

and the record: format, step, progress, n_parts, config_digest (the first 16 hex digits of the
config text's SHA-256: resume refuses another config), and the kernel's own entries.
"""

from __future__ import annotations

import hashlib

import numpy as np
import tensorflow as tf

from core.store.checkpoint import read_checkpoint, write_checkpoint
from core.store.field_parts import FieldParts

__all__ = ["FORMAT", "CheckpointError", "config_digest", "save", "load"]

FORMAT = 1


class CheckpointError(ValueError):
    """A checkpoint this version cannot resume from, with the reason."""


def config_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def save(run_dir, st: dict, kernel, config_text: str) -> None:
    arrays = {}

    def put(prefix, tensors):
        for i, v in enumerate(tensors):
            arrays[f"{prefix}_{i}"] = v      # converted as written (write_checkpoint)

    put("state", st["state"])
    put("grads", st["grads"])
    arrays["tlp"] = np.asarray(st["tlp"])
    tuning_meta = kernel.checkpoint(st["da"], put, arrays)
    put("scale", st["scale"])
    count, mean, m2 = st["mass_acc"]
    arrays["mass_count"] = np.asarray(count)
    put("mass_mean", mean)
    put("mass_m2", m2)
    arrays["mom_count"], total, total_sq = st["moments"]
    moment_parts = {}
    if isinstance(total, FieldParts):           # a field cut over devices: its totals a part at a time
        put("mom_sum", total.parts)
        put("mom_sumsq", total_sq.parts)
        moment_parts = {"moment_grid": list(total.grid),
                        "moment_regions": [[[r.start, r.stop] for r in region] for region in total.regions]}
    else:
        arrays["mom_sum"], arrays["mom_sumsq"] = total, total_sq
    arrays["watch_step"] = np.asarray(st["watch_step"])
    meta = {"format": FORMAT, "step": st["step"], "progress": st["progress"],
            "n_parts": len(st["state"]), "config_digest": config_digest(config_text), **moment_parts, **tuning_meta}
    write_checkpoint(run_dir, arrays, meta)


def load(run_dir, kernel, sampler) -> tuple[dict, dict]:
    """(the driver's state dict with moments and progress, the record); CheckpointError for a
    checkpoint of another format, an incomplete or a damaged one."""
    arrays, meta = read_checkpoint(run_dir)
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{run_dir}: the checkpoint was written by another version of "
                              "Fieldscope and cannot be resumed by this one")
    try:
        return _state(arrays, meta, kernel, sampler), meta
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{run_dir}: the checkpoint is incomplete or damaged ({err}); "
                              "the run cannot be resumed") from None


def _state(arrays, meta, kernel, sampler) -> dict:
    n = meta["n_parts"]

    def get(prefix, dtype=None):
        return [tf.constant(arrays[f"{prefix}_{i}"], dtype) for i in range(n)]

    state = get("state")

    def per_chain(parts):
        # the Welford sums are each chain's, (chains, ...) a part (a dense part's m2 (chains, d,
        # d)); checkpoints from before issue #34 hold each posterior's pooled sums, (groups, ...)
        # (before #29 a run's one group as (...)): each chain takes its group's
        parts = [p[None] if len(p.shape) == len(s.shape) - 1 else p for p, s in zip(parts, state)]
        return [tf.repeat(p, s.shape[0] // p.shape[0], axis=0) for p, s in zip(parts, state)]

    st = dict(state=state, grads=get("grads"), tlp=tf.constant(arrays["tlp"]), scale=get("scale"),
              mass_acc=(tf.constant(arrays["mass_count"]), per_chain(get("mass_mean")), per_chain(get("mass_m2"))),
              moments=(np.float64(arrays["mom_count"]), *_moment_totals(arrays, meta)),
              step=int(meta["step"]), progress=dict(meta["progress"]), seed=sampler.seed,
              # checkpoints from before the step-size search: the config's step size
              watch_step=np.asarray(arrays["watch_step"]) if "watch_step" in arrays
              else np.full(sampler.chains, sampler.step_size))
    st["da"] = kernel.restore(arrays, meta, get)
    return st


def _moment_totals(arrays, meta) -> tuple:
    """The run's float64 totals of x and x^2: whole arrays, or ``FieldParts`` where a field cut
    over devices saved them a part at a time (meta's moment_regions)."""
    if "moment_regions" not in meta:
        return np.array(arrays["mom_sum"], np.float64), np.array(arrays["mom_sumsq"], np.float64)
    regions = tuple(tuple(slice(int(a), int(b)) for a, b in region) for region in meta["moment_regions"])
    grid = tuple(int(n) for n in meta["moment_grid"])
    return tuple(FieldParts(grid, regions, tuple(np.array(arrays[f"{name}_{i}"], np.float64)
                                                 for i in range(len(regions))))
                 for name in ("mom_sum", "mom_sumsq"))
