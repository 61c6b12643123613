"""Engine events of a fake run, built exactly as ``core.engine.recorder.Recorder.record`` builds them
(with the constructors of ``core.run.messages``)."""

from __future__ import annotations

import numpy as np

from core.run.engine_limits import field_buffer_draws
from core.run.messages import chunk_event, new_progress
from core.store.run_record import zero_stats


def fake_run(chains=2, num_warmup=40, num_samples=60, chunk_size=16, thin=3, grid=(6, 5, 4),
             param_names=("index", "amplitude"), seed=0, first_step=0, dtype=np.float32):
    """The "chunk" events of a run, and everything it drew (for the expected values).

    Returns (events, info); info["chunk_fields"][c] is (fields, powers, field draw index)
    of chunk c, or None, as the engine hands them to the run store.

    Mirrors Driver.run_chunk (core.engine.driver) / Recorder.record: traces come out of the compiled chunk as
    (chunk_size, chains) arrays of which the first n are used, parameters as
    (chunk_size, chains, p); every thin-th post-warmup field is kept in a
    (max_fields, chains, *grid) buffer; moments run over every post-warmup draw.
    """
    rng = np.random.default_rng(seed)
    total = num_warmup + num_samples
    max_fields = field_buffer_draws(chunk_size, thin)
    events, kept_fields, kept_steps, chunk_fields = [], [], [], []
    count, s1, s2 = 0.0, np.zeros(grid), np.zeros(grid)
    progress = dict(new_progress())
    g = first_step
    while g < total:
        stop = min([s for s in (num_warmup, total) if s > g] + [g + chunk_size])
        first, n = g, stop - g
        traces = {name: rng.normal(size=(chunk_size, chains)).astype(dtype)
                  for name in ("lp", "acceptance_rate", "step_size", "energy_error", "grad_norm",
                               "trajectory_length")}
        traces["grad_norm"] = np.abs(traces["grad_norm"]) + 1
        traces["acceptance_rate"] = rng.uniform(size=(chunk_size, chains)).astype(dtype)
        traces["diverging"] = rng.uniform(size=(chunk_size, chains)) < 0.1
        traces["n_steps"] = rng.integers(1, 20, size=(chunk_size, chains)).astype(np.int32)
        params = rng.normal(size=(chunk_size, chains, len(param_names))).astype(dtype)
        field_buf = np.zeros((max_fields, chains, *grid), dtype)
        power_buf = np.zeros((max_fields, chains, 3), dtype)
        n_fields = 0
        for t in range(n):
            step = first + t
            if step >= num_warmup:
                x = rng.normal(size=(chains, *grid)).astype(dtype)
                count += chains
                s1 += x.sum(axis=0)
                s2 += (x.astype(np.float64) ** 2).sum(axis=0)
                if (step - num_warmup) % thin == 0:
                    field_buf[n_fields] = x
                    power_buf[n_fields] = rng.uniform(size=(chains, 3))
                    n_fields += 1
                    kept_fields.append(x)
                    kept_steps.append(step)
        # --- as Recorder.record ---
        steps = np.arange(first, first + n)
        warm = steps < num_warmup
        stats = {name: np.asarray(v)[:n].T for name, v in traces.items()}
        par = np.asarray(params)[:n]
        latest_field = latest_power = moments = None
        if n_fields:
            fields = np.asarray(field_buf)[:n_fields].transpose(1, 0, 2, 3, 4)
            powers = np.asarray(power_buf)[:n_fields].transpose(1, 0, 2).astype(np.float64)
            latest_field, latest_power = fields[:, -1], powers[:, -1]
            post_steps = steps[~warm] - num_warmup
            chunk_fields.append((fields, powers, post_steps[post_steps % thin == 0]))
        else:
            chunk_fields.append(None)
        if count > 0:
            mean = s1 / count
            std = np.sqrt(np.maximum(s2 / count - mean**2, 0.0) * count / max(count - 1, 1))
            moments = (mean.astype(np.float32), std.astype(np.float32), int(count))
        progress = dict(progress, warmup_draws=progress["warmup_draws"] + int(warm.sum()),
                        draws=progress["draws"] + int((~warm).sum()),
                        field_draws=progress["field_draws"] + n_fields, chunks=progress["chunks"] + 1)
        events.append(chunk_event(
            first_step=first, n_steps=n, phase="warmup" if warm.all() else "sampling",
            stats=stats, params={nm: par[:, :, i].T for i, nm in enumerate(param_names)},
            steps_total=total, progress=progress, elapsed=0.1, steps_per_second=n / 0.1,
            divergences={"warmup": int(stats["diverging"][:, warm].sum()),
                         "sampling": int(stats["diverging"][:, ~warm].sum())},
            total_elapsed=0.1 * (progress["chunks"]), latest_field=latest_field,
            latest_power=latest_power, moments=moments))
        g = stop
    return events, {"kept_fields": kept_fields, "kept_steps": kept_steps, "chunk_fields": chunk_fields}


def meta_for(chains=2, num_warmup=40, num_samples=60, thin=3, grid=(6, 5, 4),
             param_names=("index", "amplitude"), **extra):
    return {"chains": chains, "param_names": list(param_names), "grid_shape": grid,
            "num_warmup": num_warmup, "num_samples": num_samples, "thin": thin, **extra}


def feed(state, events):
    for event in events:
        state.on_event(event)


def view_chunk(first_step: int, *, chains: int = 2, n_steps: int = 1, phase: str = "sampling",
               params: dict | None = None, latest_field=None, moments=None) -> dict:
    """A complete "chunk" event for view tests that care about one part of it (the moments,
    the latest field, some parameter draws): zero traces of the right dtypes and shapes,
    ``params`` as given ((chains, n_steps) arrays), everything else as the engine sends it."""
    stats = zero_stats(chains, n_steps)
    progress = dict(new_progress())
    progress["warmup_draws" if phase == "warmup" else "draws"] = first_step + n_steps
    return chunk_event(first_step=first_step, n_steps=n_steps, phase=phase, stats=stats,
                       params=dict(params or {}), steps_total=first_step + n_steps, progress=progress,
                       elapsed=0.0, steps_per_second=0.0, total_elapsed=0.0,
                       latest_field=latest_field, moments=moments)


def stored_run(run_dir, config_path, status, *, warmup=6, samples=4, chains=2, grid=(8, 8, 8),
               error="", checkpoint=False):
    """A run store as the engine leaves one (``core.store``'s writer, no TensorFlow): the config
    at ``config_path``, one chunk of ``warmup`` warmup draws and one of ``samples`` draws (zero
    statistics), its final ``status`` ("finished", "stopped", "failed", ...) and, with
    ``checkpoint``, a checkpoint file (which makes a stopped run one to continue). Returns the
    run directory."""
    from pathlib import Path

    from core.store.checkpoint import write_checkpoint
    from core.store.run_store import ChunkRecord, RunStoreWriter

    config_path = Path(config_path)
    names = ["index"]
    writer = RunStoreWriter.create(run_dir, config_text=config_path.read_text(), config_dir=config_path.parent,
                                   model_kind="field", chains=chains, num_warmup=warmup,
                                   num_samples=samples, thin=1, param_names=names, observed={},
                                   grid_shape=grid, k_centres=np.array([0.1, 0.2]), k_counts=np.array([6, 20]))

    def stats(n):
        return zero_stats(chains, n)

    def params(n):
        return {name: np.zeros((chains, n)) for name in names}

    progress = dict(new_progress(), warmup_draws=warmup, chunks=1)
    writer.append(ChunkRecord(stats(warmup), stats(0), params(warmup), params(0)), progress)
    progress = dict(progress, draws=samples, chunks=2)
    writer.append(ChunkRecord(stats(0), stats(samples), params(0), params(samples)), progress)
    writer.set_status(status, error)
    if checkpoint:
        write_checkpoint(run_dir, {}, {"progress": progress})
    return Path(run_dir)
