"""Random numbers per chain: each chain draws from its own seed, so that what a chain draws does
not depend on which other chains share its program (issue #34: a run's chains spread over
several devices draw what they draw on one).

The driver gives each step a ``ChainSeeds``: the step's seed (``common``, shape (2,)), for the
few draws every chain shares (jittered HMC's trajectory length: the vectorised chains integrate
together), and each chain's seed (``chains``, shape (chains, 2)), fold_in(step seed, i) for
chain i of the run, whichever device runs it. The kernels' random numbers go through the
functions here, which take either a ``ChainSeeds`` (a chain's numbers from its seed alone,
stacked over the chains) or a plain stateless seed (one draw over the whole batch, as TFP's
kernels draw: ``core.engine.kernels``' TFP classes and the tests that compare with TFP). With
one chain and that chain's seed as the plain seed the two draw the same numbers, since a
stateless draw of shape (1, ...) is the draw of shape (...).
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf
from tensorflow_probability.python.internal import prefer_static as ps
from tensorflow_probability.python.internal import samplers

from core.engine import placement

__all__ = ["ChainSeeds", "for_chains", "split", "fold_in", "normal", "uniform", "common"]


class ChainSeeds(NamedTuple):
    """A step's seed and each chain's (module docstring)."""

    common: tf.Tensor     # (2,) int32
    chains: tf.Tensor     # (chains, 2) int32


def _n(seeds: ChainSeeds) -> int:
    return int(seeds.chains.shape[0])


def for_chains(seed, chain_ids) -> ChainSeeds:
    """The seeds of a step from its seed ``seed`` and the run's indices of the chains here
    (``chain_ids``: (chains,) int32, static length)."""
    seed = tf.convert_to_tensor(seed, tf.int32)
    return ChainSeeds(seed, tf.stack([tf.random.experimental.stateless_fold_in(seed, chain_ids[i])
                                      for i in range(int(chain_ids.shape[0]))]))


def split(seed, n: int) -> list:
    """``n`` seeds from ``seed``: TFP's ``split_seed`` of each chain's seed (and of the common one)."""
    if not isinstance(seed, ChainSeeds):
        return list(samplers.split_seed(seed, n=n))
    common = samplers.split_seed(seed.common, n=n)
    per_chain = [samplers.split_seed(seed.chains[i], n=n) for i in range(_n(seed))]
    return [ChainSeeds(common[j], tf.stack([s[j] for s in per_chain])) for j in range(n)]


def fold_in(seed, data) -> ChainSeeds | tf.Tensor:
    """``seed`` folded with ``data`` (an int32 scalar), each chain's and the common one."""
    if not isinstance(seed, ChainSeeds):
        return tf.random.experimental.stateless_fold_in(seed, data)
    return ChainSeeds(tf.random.experimental.stateless_fold_in(seed.common, data),
                      tf.stack([tf.random.experimental.stateless_fold_in(seed.chains[i], data)
                                for i in range(_n(seed))]))


def common(seed):
    """The seed of draws every chain shares."""
    return seed.common if isinstance(seed, ChainSeeds) else seed


def normal(seed, like, alg: str | None = None) -> tf.Tensor:
    """Standard normals shaped and typed as ``like`` (chains first); ``alg`` the generator
    (TFP's sampler, the default one, where None)."""
    dtype = like.dtype.base_dtype

    def draw(shape, s):
        if alg is None:
            return samplers.normal(shape=shape, dtype=dtype, seed=s)
        return tf.random.stateless_normal(shape, s, dtype=dtype, alg=alg)

    def draws():
        if not isinstance(seed, ChainSeeds):
            return draw(ps.shape(like), seed)
        shape = ps.shape(like)[1:]
        return tf.stack([draw(shape, seed.chains[i]) for i in range(_n(seed))])

    device = placement.device_of(like)      # a part of a sharded field: drawn where it is
    if not device:
        return draws()
    with tf.device(device):
        return draws()


def uniform(seed, chains: int, dtype) -> tf.Tensor:
    """One uniform on [0, 1) per chain, (chains,)."""
    if not isinstance(seed, ChainSeeds):
        return samplers.uniform([chains], dtype=dtype, seed=seed)
    return tf.stack([samplers.uniform([], dtype=dtype, seed=seed.chains[i]) for i in range(_n(seed))])
