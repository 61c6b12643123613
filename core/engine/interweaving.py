"""Interweaving the field's two parameterisations for sampled P(k) hyperparameters (ASIS).

A sampler moves the state (v, eta) of the whitened latent u (``core.engine.field_density``):
the non-centred parameterisation, in which a hyperparameter can move only as far as the data
let every well-measured mode move with it. In the centred one the field's modes z are held
and the hyperparameters move given them: z_k = sqrt(S_k(eta)) u_k (k != 0), a real degree of
freedom per entry of the full grid, and

    p(eta | z) = p(eta) prod_{k != 0} N(z_k; 0, S_k(eta))

does not involve the data. Where the data pin the modes this conditional is narrow and nearly
independent of the last eta (cosmic variance), exactly where the non-centred sampler is
slowest; where the data say little the non-centred move is the fast one. Yu & Meng's
ancillarity-sufficiency interweaving strategy (ASIS, J. Comput. Graph. Stat. 20, 2011) alternates
the two: after each transition of the sampler, eta' is drawn from p(eta | z) with z held, and
the latent set to u' = z / sqrt(S(eta')) (u_0, the inert k = 0 entry, unchanged). The move is a
Gibbs step in the centred coordinates, so it leaves the posterior invariant whatever the
likelihood (Gaussian, counts, a model file's) and whatever the preconditioner (the state is
mapped to u and back: ``latent_of`` / ``state_of``, a bijection given eta).

S_k depends on k only through |k|, so p(eta | z) is a function of each shell's count n_s and
sum Q_s of z_k^2 (the shells: the distinct |k| of the grid; band powers' bins are unions of
them): the move itself takes no FFT and no gradient of the likelihood, but the maps between
the state and u (the conditional preconditioner's scale and centre), the sums Q and u' are passes
over the grid: at 32^3 on the CPU 2-3 gradients' time (docs/benchmarks.md). eta' | z is drawn by ``PROPOSALS`` Metropolis-Hastings steps, each proposing
from a Student-t (``PROPOSAL_DOF`` degrees of freedom) with the mode and curvature of p(eta | z)
found by ``NEWTON_STEPS`` damped Newton steps from the current point (each coordinate's step at
most ``NEWTON_TRUST``; the Hessian's eigenvalues bounded below), with the reverse proposal's
density from Newton steps from the proposed point, so that the step is exact even where Newton
has not converged. The t's tails let a chain leave a point far in a tail heavier than the
Gaussian's (with a Gaussian proposal a chain started 14 conditional sds off in the index stayed
there: acceptance 3e-15). The sampler's log-density and
gradient are then those of the moved state (one gradient evaluation per move, counted in the
step's ``n_steps``). The config allows it with samplers that have an accept step only
(``core.config.parse``): after the jump MCLMC's unadjusted steps ran away under a mask.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from core.engine import chain_seeds
from core.log_density import LOG_2PI

__all__ = ["Interweaving", "PROPOSALS", "PROPOSAL_DOF", "NEWTON_STEPS", "NEWTON_TRUST", "SEED_STREAM"]

PROPOSALS = 1
PROPOSAL_DOF = 4             # the proposal's Student-t degrees of freedom (heavy tails: module docstring)
NEWTON_STEPS = 4
NEWTON_TRUST = 1.0          # the largest Newton step in any coordinate of eta
_EIGEN_FLOOR = 1e-6          # the precision's eigenvalues, at least this times its largest
SEED_STREAM = 7919           # the move's seeds: fold_in(the step's chain seeds, this)


class Interweaving:
    """The centred move of a ``FieldPosterior`` with sampled hyperparameters and the whitened
    latent (module docstring): ``move(state_parts, seed) -> (state_parts, acceptance)``."""

    def __init__(self, posterior):
        if not posterior.sampled or posterior.parameterisation != "whitened":
            raise ValueError("interweaving needs sampled P(k) hyperparameters and the whitened latent")
        self.post = posterior
        g = posterior.grid
        k = g.k_magnitude_full()
        nonzero = k > 0
        k_min = k[nonzero].min()
        key = np.round((k / k_min) ** 2, 6)             # equal |k| equal key (float rounding aside)
        shells, inverse = np.unique(key[nonzero], return_inverse=True)
        shell_of = np.full(g.shape, len(shells), np.int64)       # k = 0: a last shell, dropped
        shell_of[nonzero] = inverse
        self.n_shells = len(shells)
        self._shell_of = tf.constant(shell_of.astype(np.int32))
        self._counts = tf.constant(np.bincount(inverse, minlength=len(shells)).astype(np.float64))
        k_shell = np.bincount(inverse, weights=k[nonzero]) / np.bincount(inverse)   # equal within a shell
        spec, rd = posterior.spectrum, posterior.dtype
        from core.field.power_spectrum import BandPowers, PowerLaw, PowerLawCutoff
        shape = (1, 1, self.n_shells)
        self._log_k_ratio = (tf.constant(np.log(k_shell / spec.k_pivot).reshape(shape), rd)
                             if isinstance(spec, (PowerLaw, PowerLawCutoff)) else None)
        self._k2 = tf.constant((k_shell ** 2).reshape(shape), rd)
        self._bins = (tf.constant(np.maximum(spec.bin_index(k_shell), 0).astype(np.int32).reshape(shape))
                      if isinstance(spec, BandPowers) else None)
        self._log_norm = math.log(posterior._norm)

    # -- the centred conditional ------------------------------------------------------

    def _log_s_shells(self, eta):
        """log S_s per shell, (chains, n_shells), in float64."""
        post = self.post
        theta = post.hyperparameters(eta)
        log_p = post._log_power_with(theta, self._log_k_ratio, self._k2, self._bins, eta)   # noqa: SLF001
        log_p = tf.broadcast_to(log_p, [tf.shape(eta)[0], 1, 1, self.n_shells])
        return tf.cast(tf.reshape(log_p, [tf.shape(eta)[0], self.n_shells]), tf.float64) + self._log_norm

    def log_conditional(self, eta, q):
        """log p(eta | z) up to a constant, (chains,): the hyperparameters' prior (with its
        Jacobian and any random walk) and each shell's n_s modes with sum of squares Q_s (``q``)."""
        log_s = self._log_s_shells(eta)
        modes = -0.5 * tf.reduce_sum(self._counts * (log_s + LOG_2PI) + q * tf.exp(-log_s), axis=-1)
        return tf.cast(self.post._hyper_log_prior(eta), tf.float64) + modes     # noqa: SLF001

    def _gradient_and_precision(self, eta, q):
        with tf.GradientTape() as outer:
            outer.watch(eta)
            with tf.GradientTape() as inner:
                inner.watch(eta)
                lp = self.log_conditional(eta, q)
            grad = tf.cast(inner.gradient(lp, eta), tf.float64)
        hessian = tf.cast(outer.batch_jacobian(grad, eta), tf.float64)
        precision = -0.5 * (hessian + tf.linalg.matrix_transpose(hessian))
        lam, vec = tf.linalg.eigh(precision)
        floor = _EIGEN_FLOOR * tf.reduce_max(tf.abs(lam), axis=-1, keepdims=True) + 1e-12
        lam = tf.maximum(lam, floor)
        return grad, lam, vec

    def laplace(self, eta, q):
        """(mode, precision's eigenvalues, eigenvectors) of the Gaussian reached by
        ``NEWTON_STEPS`` damped Newton steps on log p(. | z) from ``eta``."""
        dtype = eta.dtype

        def body(i, x):
            grad, lam, vec = self._gradient_and_precision(x, q)
            step = tf.linalg.matvec(vec, tf.linalg.matvec(vec, grad, adjoint_a=True) / lam)
            step = tf.clip_by_value(step, -NEWTON_TRUST, NEWTON_TRUST)
            ok = tf.reduce_all(tf.math.is_finite(step), axis=-1, keepdims=True)
            return i + 1, x + tf.cast(tf.where(ok, step, tf.zeros_like(step)), dtype)

        _, mode = tf.while_loop(lambda i, x: i < NEWTON_STEPS, body, (tf.constant(0), eta))
        _, lam, vec = self._gradient_and_precision(mode, q)
        return mode, lam, vec

    @staticmethod
    def _log_proposal(x, mode, lam, vec):
        """log of the multivariate Student-t density (``PROPOSAL_DOF``) centred at ``mode`` with
        precision V diag(lam) V^T, up to a constant the same for every centre and precision."""
        r = tf.linalg.matvec(vec, tf.cast(x - mode, tf.float64), adjoint_a=True)
        d = tf.cast(tf.shape(lam)[-1], tf.float64)
        r2 = tf.reduce_sum(lam * r * r, axis=-1)
        return 0.5 * tf.reduce_sum(tf.math.log(lam), axis=-1) - 0.5 * (PROPOSAL_DOF + d) * tf.math.log1p(r2 / PROPOSAL_DOF)

    def sample_given(self, eta, q, seed):
        """eta' from ``PROPOSALS`` Metropolis-Hastings steps on p(eta | z) from ``eta``, and the
        steps' mean acceptance probability, (chains,)."""
        accepted = tf.zeros(tf.shape(eta)[:1], tf.float64)
        lp = self.log_conditional(eta, q)
        for seed_i in chain_seeds.split(seed, PROPOSALS):
            noise_seed, accept_seed = chain_seeds.split(seed_i, 2)
            mode, lam, vec = self.laplace(eta, q)
            like = tf.zeros([eta.shape[0], eta.shape[1] + PROPOSAL_DOF], eta.dtype)
            noise = tf.cast(chain_seeds.normal(noise_seed, like), tf.float64)
            # a Student-t draw: a normal over sqrt(chi^2 / dof), chi^2 the sum of dof more normals' squares
            spread = tf.sqrt(PROPOSAL_DOF / tf.reduce_sum(noise[:, -PROPOSAL_DOF:] ** 2, axis=-1, keepdims=True))
            normal = noise[:, :-PROPOSAL_DOF]
            proposal = tf.cast(mode, tf.float64) + tf.linalg.matvec(vec, spread * normal / tf.sqrt(lam))
            proposal = tf.cast(proposal, eta.dtype)
            back_mode, back_lam, back_vec = self.laplace(proposal, q)
            lp_new = self.log_conditional(proposal, q)
            log_ratio = (lp_new - lp + self._log_proposal(eta, back_mode, back_lam, back_vec)
                         - self._log_proposal(proposal, mode, lam, vec))
            log_ratio = tf.where(tf.math.is_finite(log_ratio), log_ratio, -np.inf)
            p_accept = tf.minimum(tf.exp(log_ratio), 1.0)
            accept = chain_seeds.uniform(accept_seed, int(eta.shape[0]), tf.float64) < p_accept
            eta = tf.where(accept[:, None], proposal, eta)
            lp = tf.where(accept, lp_new, lp)
            accepted += p_accept / PROPOSALS
        return eta, accepted

    # -- the move -----------------------------------------------------------------------

    def _on_grid(self, log_per_shell, dtype):
        """exp of a per-shell value on the full grid, 1 at k = 0, (chains, n0, n1, n2)."""
        padded = tf.pad(tf.exp(log_per_shell), [[0, 0], [0, 1]], constant_values=1.0)     # k = 0's shell
        return tf.gather(tf.cast(padded, dtype), self._shell_of, axis=-1)

    def sqrt_s(self, eta, dtype):
        """sqrt(S_k(eta)) on the full grid, 1 at k = 0, (chains, n0, n1, n2)."""
        return self._on_grid(0.5 * self._log_s_shells(eta), dtype)

    def shell_sums(self, z):
        """Each shell's sum of z_k^2 over the full grid, (chains, n_shells), float64."""
        chains = tf.shape(z)[0]
        flat = tf.reshape(tf.cast(z, tf.float64) ** 2, [chains, -1])
        ids = tf.reshape(self._shell_of, [-1])
        sums = tf.transpose(tf.math.unsorted_segment_sum(tf.transpose(flat), ids, self.n_shells + 1))
        return sums[:, :-1]

    def move(self, parts, seed, post=None):
        """The state parts [v, eta] after the centred move (module docstring), and its
        acceptance (chains,); ``post`` the posterior whose state it is (a view's, against a
        calibration's data: its centre), the one built with by default."""
        post = self.post if post is None else post
        state, eta = parts
        u = post.latent_of(state, eta)
        log_s = self._log_s_shells(eta)
        q = self.shell_sums(u) * tf.exp(log_s)           # z = sqrt(S) u: S is one number a shell
        eta_new, acceptance = self.sample_given(eta, q, chain_seeds.fold_in(seed, SEED_STREAM))
        u_new = u * self._on_grid(0.5 * (log_s - self._log_s_shells(eta_new)), u.dtype)      # u_0 as it was
        return [post.state_of(u_new, eta_new), eta_new], acceptance
