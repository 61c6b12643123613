"""The kernels' change of variables x = S z, one rule for every part of the state.

A part's scale S is either a tensor of the part's shape (the diagonal: x = s * z, elementwise),
or, for a part of shape (chains, d), a (chains, d, d) lower-triangular factor L (the dense
metric: x = L z per chain, covariance L L^T; ``mass_matrix.adapted_scale``). The log-density in
z has gradient dlogp/dz = S^T dlogp/dx. Which form a part has is read from the ranks.
"""

from __future__ import annotations

import tensorflow as tf

__all__ = ["to_x", "to_z", "grad_to_x", "grad_to_z", "is_dense", "marginal_sd", "rescaled"]


def is_dense(s, part) -> bool:
    """Whether ``s`` (a scale, or Welford sums) is the matrix form for ``part``: one rank more."""
    return len(s.shape) == len(part.shape) + 1


def to_x(scale, z) -> list:
    """x = S z for each part."""
    return [tf.linalg.matvec(s, zi) if is_dense(s, zi) else s * zi for s, zi in zip(scale, z)]


def to_z(scale, x) -> list:
    """z = S^-1 x for each part."""
    return [tf.linalg.triangular_solve(s, xi[..., None], lower=True)[..., 0] if is_dense(s, xi) else xi / s
            for s, xi in zip(scale, x)]


def grad_to_z(scale, gx) -> list:
    """dlogp/dz = S^T dlogp/dx for each part."""
    return [tf.linalg.matvec(s, g, transpose_a=True) if is_dense(s, g) else s * g for s, g in zip(scale, gx)]


def grad_to_x(scale, gz) -> list:
    """dlogp/dx = S^-T dlogp/dz for each part."""
    return [tf.linalg.triangular_solve(s, g[..., None], lower=True, adjoint=True)[..., 0] if is_dense(s, g)
            else g / s for s, g in zip(scale, gz)]


def marginal_sd(s, part):
    """Each coordinate's sd in x under a unit-variance z: s itself, or the row norms of L."""
    return tf.sqrt(tf.reduce_sum(s * s, axis=-1)) if is_dense(s, part) else s


def rescaled(old, new, z, grads) -> tuple[list, list]:
    """The same x in the coordinates of ``new``: z' = S'^-1 S z and dlogp/dz' = S'^T S^-T dlogp/dz
    (diagonal parts as z s / s' and g s' / s)."""
    z_new, g_new = [], []
    for so, sn, zi, g in zip(old, new, z, grads):
        if is_dense(so, zi) or is_dense(sn, zi):
            z_new += to_z([sn], to_x([so], [zi]))
            g_new += grad_to_z([sn], grad_to_x([so], [g]))
        else:
            z_new.append(zi * so / sn)
            g_new.append(g * sn / so)
    return z_new, g_new
