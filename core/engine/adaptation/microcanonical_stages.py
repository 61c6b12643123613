"""What the staged tunings of MCLMC and MAMS share (``mclmc_tuning``, ``mams_tuning``): their
stages over warmup, the chunk stops where a stage's end is computed, the moments of z that a
variance stage gathers, and which tuning arrays a chunk program takes.

A tuning state is a dict of tensors (lists of tensors, one per state part) that the driver
passes into and out of each compiled chunk and checkpoints as it is. Per step the tuning
updates it from the kernel's statistics (``update``, inside the chunk); the transitions that
need a whole stage's figures run between chunks (``at_boundary``) at the steps where the driver
ends a chunk (``stops``).

Its grid-sized arrays go to the device only in the chunks that use them (``chunk_keys``, issue
#13): MCLMC's stage-3 projection scales as a read-only input (not returned, so not copied), and
the moments of z (two float64 arrays a chain) not at all where unused (MCLMC with a diagonal),
and on large runs only in stage 2, whose chunks then have a program of their own
(``core.run.engine_limits.stage2_apart``); the driver keeps the rest on the host and the
update skips what its chunk was not given.

Use: a subclass gives ``stage_points``, ``fresh`` and ``update``; construct it with the state's
parts (shapes), chains, dtype, ``num_warmup``, whether the diagonal is adapted, and the step
size per coordinate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from core.engine.microcanonical import n_dims, per_chain

__all__ = ["Stages", "StagedTuning", "tuning_scalars", "moment_update", "variances"]


@dataclass(frozen=True)
class Stages:
    warmup: int
    b1: int       # end of stage 1
    b2: int       # end of stage 2 (variances gathered over [b1, b2))
    b3: int       # end of the step-size tuning (MCLMC: after the re-tune with a diagonal)


def tuning_scalars(chains, value):
    return tf.fill([chains], tf.constant(value, tf.float64))


def moment_update(tune, z, weight):
    """Step-size-weighted running mean of z and z^2 per chain (BlackJAX's
    ``incremental_value_update``): tune's mom_w, mom_x, mom_xx."""
    w_old = tune["mom_w"]
    w_new = w_old + weight
    safe = tf.where(w_new > 0, w_new, tf.ones_like(w_new))
    mx, mxx = [], []
    for zi, ax, axx in zip(z, tune["mom_x"], tune["mom_xx"]):
        z64 = tf.cast(zi, tf.float64)
        wo, wn, wt = per_chain(w_old, z64), per_chain(safe, z64), per_chain(weight, z64)
        mx.append((wo * ax + wt * z64) / wn)
        mxx.append((wo * axx + wt * z64 * z64) / wn)
    return {**tune, "mom_w": w_new, "mom_x": mx, "mom_xx": mxx}


def variances(tune):
    """Per-chain variances of z from the weighted moments: list of (C, ...) float64 arrays."""
    return [np.maximum(np.asarray(b) - np.asarray(a) ** 2, 0.0) for a, b in zip(tune["mom_x"], tune["mom_xx"])]


class StagedTuning:
    """A staged tuning's settings and the stage machinery (module docstring)."""

    #: the moments of z gathered in stage 2 (float64, the grid's size a chain)
    MOMENT_KEYS = ("mom_x", "mom_xx")
    #: tuning arrays a chunk reads but never writes (set between chunks)
    READ_ONLY_KEYS: tuple[str, ...] = ()

    def __init__(self, parts_like, chains: int, dtype, num_warmup: int, diagonal: bool,
                 initial_step_per_coordinate: float, chains_per_posterior: int | None = None):
        # consecutive chains that sample one posterior (None: all; calibration's batch: each
        # simulation's chains), which MCLMC's sampling step size is shared by
        self.chains_per_posterior = int(chains_per_posterior or chains)
        if chains % self.chains_per_posterior:
            raise ValueError(f"{chains} chains are not groups of {self.chains_per_posterior}")
        self.chains = chains
        self.dtype = dtype
        self.dim = n_dims(parts_like)
        if self.dim < 2:
            raise ValueError("the microcanonical samplers need at least 2 coordinates")
        self.part_shapes = [tuple(p.shape[1:]) for p in parts_like]
        self.num_warmup = int(num_warmup)
        self.diagonal = bool(diagonal)
        # the config's step size is a move per coordinate, as for HMC (the unit velocity
        # spreads eps over d coordinates)
        self.initial_step = float(initial_step_per_coordinate) * math.sqrt(self.dim)
        self.stages = self.stage_points(self.num_warmup, self.diagonal)

    @staticmethod
    def stage_points(w: int, diagonal: bool) -> Stages:
        raise NotImplementedError

    @classmethod
    def plan(cls, num_warmup: int, diagonal: bool):
        """(the diagonal-mass window (first step, end) or None, the steps where a chunk must
        end so that ``at_boundary`` runs there)."""
        st = cls.stage_points(int(num_warmup), bool(diagonal))
        window = (st.b1, st.b2) if diagonal and st.b2 - st.b1 >= 2 else None
        return window, tuple(sorted({s for s in (st.b2, st.warmup) if 0 < s}))

    def mass_window(self):
        return self.plan(self.num_warmup, self.diagonal)[0]

    def complete(self, tune: dict) -> dict:
        """A tuning state restored from a checkpoint, with any keys a later version added."""
        return dict(tune)

    def stops(self) -> tuple[int, ...]:
        return self.plan(self.num_warmup, self.diagonal)[1]

    def uses_moments(self) -> bool:
        """Whether stage 2 gathers the moments of z (``moment_update``)."""
        return True

    def in_stage2(self, first: int, n: int) -> bool:
        """Whether the chunk of steps [first, first + n) overlaps stage 2 (a chunk never
        straddles its end, one of the ``stops``, so such a chunk ends in warmup)."""
        return first < self.stages.b2 and first + n > self.stages.b1

    #: tuning arrays recorded step by step, (steps, chains, ...): their chain axis is 1
    STEP_RECORDS: tuple[str, ...] = ()

    def chain_axis(self, key: str):
        """The chain axis of the tuning state's ``key``: None for what all chains share (the
        read-only keys), 1 for the step records, else 0."""
        return None if key in self.READ_ONLY_KEYS else 1 if key in self.STEP_RECORDS else 0

    def chunk_keys(self, stage2: bool | None) -> tuple[frozenset, frozenset]:
        """(held, read_only): the tuning keys a chunk program does not take (the driver keeps
        them on the host) and those it takes but does not return (a value returned unchanged
        is still a copy). ``stage2`` None: the one program of a run whose stage 2 has none of
        its own (it carries the moments throughout, if they are used); True / False: the
        program of the chunks that overlap stage 2 (the moments) or of the others (without
        them: they change in stage 2 only, and are read between chunks, at its end)."""
        moments = self.uses_moments() and stage2 is not False
        held = set() if moments else set(self.MOMENT_KEYS)
        read_only = set(self.READ_ONLY_KEYS)
        if stage2:                 # stage 2's chunks end before stage 3, which reads them
            held |= read_only
            read_only = set()
        return frozenset(held), frozenset(read_only)

    def moments_fresh(self):
        return {"mom_w": tuning_scalars(self.chains, 0.0),
                "mom_x": [tf.zeros([self.chains, *s], tf.float64) for s in self.part_shapes],
                "mom_xx": [tf.zeros([self.chains, *s], tf.float64) for s in self.part_shapes]}

    def with_stage2_moments(self, tune, step_index, z, weight):
        """``tune`` with z added to the moments where ``step_index`` is in stage 2 (a chunk
        program that carries them: ``chunk_keys``)."""
        if "mom_x" not in tune:
            return tune
        st = self.stages
        in_stage2 = tf.logical_and(step_index >= st.b1, step_index < st.b2)
        return tf.cond(in_stage2, lambda: moment_update(tune, z, weight), lambda: dict(tune))
