"""What a chunk leaves: the store's record and the clients' event (the recorder of a run).

``Recorder.record`` turns a chunk of the driver's output (every step's statistics and
parameters, the kept field draws and their P(k)) into the ``core.store.run_store.ChunkRecord``
the store appends and the fields of the chunk event (``core.run.messages.chunk_event``), and
advances the run's progress; ``fold_moments`` adds a chunk's field sums to the run's float64
totals. numpy on the host: nothing here runs in the compiled chunk.
"""

from __future__ import annotations

import numpy as np

from core.store.field_parts import FieldParts
from core.store.run_store import ChunkRecord

__all__ = ["Recorder"]


class Recorder:
    def __init__(self, model, schedule, thin: int):
        self.model, self.schedule, self.thin = model, schedule, int(thin)

    def fold_moments(self, moments, sums):
        """The run's float64 totals (count, sum of x, sum of x^2: host numpy arrays, updated in
        place) with a chunk's sums added (count, sum of x - m, sum of (x - m)^2 with m =
        field_mean, in the model's dtype). Only the chunk's sums are on the device: a chunk of
        at most chunk_size x chains draws rounds in float32 at ~1e-7 of its sum, the totals
        keep float64, and the device does not hold the totals' 2 N 8 bytes (#13). A field cut
        over devices has them in parts (``FieldParts``), folded a part at a time."""
        count, total, total_sq = moments
        k = float(np.asarray(sums[0]))
        if not self.model.has_field or k == 0:
            return moments
        m = float(self.model.observations.field_mean)
        if isinstance(total, FieldParts):
            for t, q, (_, s1), (_, s2) in zip(total.parts, total_sq.parts, sums[1].each(), sums[2].each()):
                _fold(t, q, s1, s2, k, m)
        else:
            _fold(total, total_sq, sums[1], sums[2], k, m)
        return count + k, total, total_sq

    def record(self, first, n, traces, params, field_buf, power_buf, n_fields, st):
        """The chunk's ``ChunkRecord`` for the store and the fields of its chunk event
        (``core.run.messages.chunk_event``, less the timing); updates ``st["progress"]``."""
        sched = self.schedule
        steps = np.arange(first, first + n)
        warm = steps < sched.num_warmup
        stats = {name: np.asarray(v)[:n].T for name, v in traces.items()}   # (chains, n)
        par = np.asarray(params)[:n]                                          # (n, chains, p)
        names = self.model.param_names
        record = ChunkRecord(
            warmup_stats={k: v[:, warm] for k, v in stats.items()},
            stats={k: v[:, ~warm] for k, v in stats.items()},
            warmup_params={nm: par[warm, :, i].T for i, nm in enumerate(names)},
            params={nm: par[~warm, :, i].T for i, nm in enumerate(names)})
        prog = st["progress"]
        n_post = int((~warm).sum())
        event = {"first_step": first, "n_steps": n, "phase": "warmup" if warm.all() else "sampling",
                 "stats": {k: v for k, v in stats.items()},
                 "params": {nm: par[:, :, i].T for i, nm in enumerate(names)},
                 "steps_total": sched.total,
                 # warmup divergences are expected while the step size adapts; the sampling ones count
                 "divergences": {"warmup": int(stats["diverging"][:, warm].sum()),
                                 "sampling": int(stats["diverging"][:, ~warm].sum())}}
        if self.model.has_field and n_fields:
            powers = np.asarray(power_buf)[:n_fields].transpose(1, 0, 2).astype(np.float64)
            post_steps = steps[~warm] - sched.num_warmup
            index = post_steps[post_steps % self.thin == 0]
            if isinstance(field_buf, FieldParts):      # read from each device as the store writes it
                fields = field_buf.map(lambda a: a[:n_fields].transpose(1, 0, 2, 3, 4))
                # its parts' last draw indexed where they are (a device's tensor): one draw copied
                last = tuple(part[n_fields - 1] for part in field_buf.parts)
                event["latest_field"] = FieldParts(field_buf.grid, field_buf.regions, last).whole()
            else:
                fields = np.asarray(field_buf)[:n_fields].transpose(1, 0, 2, 3, 4)
                event["latest_field"] = fields[:, -1]
            record.fields, record.powers, record.field_draw_index = fields, powers, index
            event["latest_power"] = powers[:, -1]
        if self.model.has_field:
            count, total, total_sq = st["moments"]
            count = float(np.asarray(count))
            if count > 0:
                if isinstance(total, FieldParts):
                    pairs = [_mean_std(t, q, count) for t, q in zip(total.parts, total_sq.parts)]
                    mean, std = (FieldParts(total.grid, total.regions, tuple(p[i] for p in pairs)) for i in (0, 1))
                    record.moments = (mean, std, int(count))
                    mean, std = mean.whole(), std.whole()       # the window's events carry whole fields
                else:
                    mean, std = _mean_std(np.asarray(total), np.asarray(total_sq), count)
                    record.moments = (mean, std, int(count))
                event["moments"] = (mean.astype(np.float32), std.astype(np.float32), int(count))
        prog.update(warmup_draws=prog["warmup_draws"] + int(warm.sum()), draws=prog["draws"] + n_post,
                    field_draws=prog["field_draws"] + (n_fields if self.model.has_field else 0),
                    chunks=prog["chunks"] + 1)
        event["progress"] = dict(prog)
        return record, event



def _fold(total, total_sq, s1, s2, k: float, m: float) -> None:
    """``fold_moments`` on one array (or part): sum x = sum (x - m) + k m, sum x^2 = sum (x - m)^2
    + 2 m sum (x - m) + k m^2, in place."""
    s1 = np.asarray(s1).astype(np.float64)
    total += s1
    if m:
        total += k * m
        s1 *= 2.0 * m
        total_sq += s1
        total_sq += k * m * m
    del s1
    total_sq += np.asarray(s2).astype(np.float64)


def _mean_std(total, total_sq, count: float):
    """The draws' mean and sd (n - 1) from their float64 totals."""
    mean = total / count
    return mean, np.sqrt(np.maximum(total_sq / count - mean**2, 0.0) * count / max(count - 1, 1))
