"""The field's exact conditional posterior under a slab mask: "conditional" made exact (TensorFlow).

Where a Gaussian likelihood with one noise level sees whole planes along one axis a and misses
the others (a slab mask, ``core.field.observations.slab_axis``), the field's posterior given the
spectrum splits into small independent problems. The orthonormal 2-D Hartley transform H2 over
the two other axes (cas(q . y) / sqrt(n_b n_c), its own inverse) turns the field into columns
along a, one per transverse wavevector q: given P(k) the columns are independent, each a
stationary series whose covariance is the circulant of the spectrum at |(k_a, q)|, and the
mask, which depends on x_a only, acts inside each column.

So ``FieldPosterior``'s "conditional" preconditioner, which centres and scales each Fourier mode
by the diagonal estimate of its conditional posterior (exact without a mask), is replaced here
by the exact conditional, column by column. With the whitened latent u, z = Phi(u) =
H2(sqrt(N) J u) (J the unit-spectrum map ``FieldPosterior.unit_map``; sqrt(N) J and H2 are
orthogonal, so z ~ N(0, I) under the prior and |z| = |u|); per column q, with G the circulant
along a whose symbol is w_k = B(k) sqrt(S_k(eta)) at k = (k_a, q) (the beam B and S_k as in
``core.engine.field_density``), the smoothed field's column is G z / sqrt(N), and

    P = I + A^T A,   A = G[observed planes] / (sqrt(N) sigma),   t = A^T d / sigma,
    z = mu + L v,    mu = P^-1 t,   L L^T = P^-1,

d the column of H2(data - mean) on the observed planes and v the sampler's state (grid-shaped,
its columns taken the same way). Then, for every v and eta,

    log p(v, eta) = -|z|^2 / 2 + log L(d | z) + log |det L| + log p(eta) + const
                  = log N(v; 0, I) + log p(d | eta) + log p(eta):

the state's field part is standard normal whatever the spectrum, and the sampler moves the
hyperparameters on their marginal posterior, as if the field were integrated out (issue #30's
"exact marginalisation", inside the joint sampler: the field's draws come with it). The density
is computed in that second form: its gradient in v is -v and in eta the marginal likelihood's.

Everything per column is cheap because P is a circulant less a low-rank term: with
Delta = I + G^T G / (N sigma^2) (the circulant of symbol delta = 1 + w^2 / (N sigma^2)) and B
the rows of G / (sqrt(N) sigma) on the r *missing* planes, P = Delta - B^T B. With
Y = Delta^-1/2 B^T, E = Y^T Y (r x r) and W the Cholesky factor of I - E:

    t^T P^-1 t = |a|^2 + |W^-1 Y^T a|^2,  a = Delta^-1/2 t;    log det P = sum log delta + 2 sum log W_ii;
    L = Delta^-1/2 S,  S = I + Y W^-T (I + W)^-1 Y^T,   S^-1 = I - Y (I + W)^-T Y^T

(S S^T = (I - Y Y^T)^-1: T = I - Y (I + W)^-1 Y^T has T T^T = I - Y Y^T, and S = T^-T). The
circulants are applied by 1-D FFTs along a; the r x r factor W, its inverse and that of I + W
are computed by halves down to unrolled blocks of ``FACTOR_LEAF`` rows (XLA's own Cholesky on the
CPU took 44 ms for 270 32 x 32 matrices; unrolled whole, the factor's compilation grew as fast as
410 s at r = 64), all in float64. Columns with the same |q| share their factors; they are laid
out in rows of at most ``core.field.observations.SLAB_SLOTS`` columns of one |q| (padded with
zero columns, whose z is 0), each row with its factors.

Used by ``FieldPosterior`` for "conditional" with the whitened latent, sampled P(k)
hyperparameters, a Gaussian likelihood with one noise level and a slab mask of at most
``MAX_SLAB_MISSING_PLANES`` missing planes (``applies``); elsewhere "conditional" is the diagonal one.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from core.engine.fft import half_spectrum_weights
from core.field.observations import settings_take_exact_slab, slab_axis, slab_decouples, slab_rows
from core.field.power_spectrum import BandPowers, PowerLaw, PowerLawCutoff
from core.log_density import LOG_2PI

__all__ = ["SlabConditional", "applies"]

# The r x r factors are computed by halves down to blocks of this many rows, unrolled
# (compilation of the density with its gradient: 5 s for the factor at r = 16, 23 s at 64;
# unrolled whole, 14.5 s and 410 s).
FACTOR_LEAF = 4


def applies(post) -> bool:
    """Whether ``post`` (a ``FieldPosterior`` being built) gets the slab's exact conditional
    (``core.field.observations.slab_decouples``: the rule the config's advice reads too)."""
    obs = post.observations
    return (settings_take_exact_slab("conditional" if post.centred else "", post.parameterisation, post.sampled)
            and slab_decouples(obs.mask, obs.kind, obs.uniform_noise is not None))


def _complex(x: tf.Tensor) -> tf.Tensor:
    """x + 0i (not tf.cast, whose gradient warns that it drops an imaginary part)."""
    return tf.complex(x, tf.zeros_like(x))


def _hartley2(f: tf.Tensor) -> tf.Tensor:
    """The orthonormal 2-D Hartley transform over the last two axes (its own inverse)."""
    n = int(f.shape[-1]) * int(f.shape[-2])
    spectrum = tf.signal.fft2d(_complex(f))
    return (tf.math.real(spectrum) - tf.math.imag(spectrum)) / math.sqrt(n)


def _entries(matrices: tf.Tensor, r: int) -> list[list[tf.Tensor]]:
    """The r x r entries of ``matrices`` (leading batch axes) as nested lists [row][column]:
    unstacked, not sliced (a slice's gradient is a zero-padded copy of the whole matrix)."""
    return [tf.unstack(row, num=r, axis=-1) for row in tf.unstack(matrices, num=r, axis=-2)]


def _cholesky(m: tf.Tensor, r: int) -> tf.Tensor:
    """The lower Cholesky factor of the symmetric positive definite r x r matrices ``m``
    (leading batch axes), column by column, unrolled."""
    m_cols = tf.unstack(m, num=r, axis=-1)
    cols, col_entries = [], []
    for j in range(r):
        v = m_cols[j]
        for k in range(j):
            v = v - cols[k] * col_entries[k][j][..., None]
        entries = tf.unstack(v, num=r, axis=-1)
        pivot = tf.sqrt(tf.maximum(entries[j], 1e-300))
        col_entries.append([tf.zeros_like(pivot)] * j + [pivot] + [e / pivot for e in entries[j + 1:]])
        cols.append(tf.stack(col_entries[j], axis=-1))
    return tf.stack(cols, axis=-1)


def _solve_lower(lower: tf.Tensor, b: tf.Tensor, r: int) -> tf.Tensor:
    """x with lower x = b for b of shape (..., K, r): the matrices (..., r, r) act on b's last
    axis, broadcast over K; unrolled substitution."""
    entry = _entries(lower, r)
    rhs = tf.unstack(b, num=r, axis=-1)
    x = [None] * r
    for i in range(r):
        acc = rhs[i]
        for k in range(i):
            acc = acc - entry[i][k][..., None] * x[k]
        x[i] = acc / entry[i][i][..., None]
    return tf.stack(x, axis=-1)


def _blocks(m: tf.Tensor, h: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """The blocks A (h x h), B (below A) and C of the r x r matrices ``m`` (split, not sliced: a
    split's gradient is a concatenation)."""
    top, bottom = tf.split(m, [h, m.shape[-2] - h], axis=-2)
    a, _ = tf.split(top, [h, m.shape[-1] - h], axis=-1)
    b, c = tf.split(bottom, [h, m.shape[-1] - h], axis=-1)
    return a, b, c


def _lower_of(a: tf.Tensor, b: tf.Tensor, c: tf.Tensor) -> tf.Tensor:
    """The lower block-triangular matrix [[A, 0], [B, C]]."""
    zeros = tf.zeros_like(tf.linalg.matrix_transpose(b))
    return tf.concat([tf.concat([a, zeros], axis=-1), tf.concat([b, c], axis=-1)], axis=-2)


def _leaf_inverse(lower: tf.Tensor, r: int) -> tf.Tensor:
    eye = tf.broadcast_to(tf.eye(r, dtype=lower.dtype), tf.shape(lower))
    return tf.linalg.matrix_transpose(_solve_lower(lower, eye, r))        # rows of the solve: L^-T


def _cholesky_inverse(m: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(L, L^-1), L the lower Cholesky factor of the symmetric positive definite r x r matrices
    ``m`` (leading batch axes), by halves: [[A, B^T], [B, C]] has L = [[L1, 0], [X, L2]] with
    X = B L1^-T and L2 L2^T = C - X X^T, L^-1 = [[L1^-1, 0], [-L2^-1 X L1^-1, L2^-1]]; blocks of
    at most ``FACTOR_LEAF`` rows unrolled. The graph grows as r log r (the unrolled factor's as r^2:
    its compilation took 14.5 s at r = 16 and 410 s at 64 inside the density)."""
    r = int(m.shape[-1])
    if r <= FACTOR_LEAF:
        lower = _cholesky(m, r)
        return lower, _leaf_inverse(lower, r)
    a, b, c = _blocks(m, r // 2)
    l1, l1_inv = _cholesky_inverse(a)
    x = tf.matmul(b, l1_inv, transpose_b=True)
    l2, l2_inv = _cholesky_inverse(c - tf.matmul(x, x, transpose_b=True))
    return _lower_of(l1, x, l2), _lower_of(l1_inv, -tf.matmul(l2_inv, tf.matmul(x, l1_inv)), l2_inv)


def _lower_inverse(t: tf.Tensor) -> tf.Tensor:
    """T^-1 for the lower-triangular r x r matrices ``t``, by halves as ``_cholesky_inverse``."""
    r = int(t.shape[-1])
    if r <= FACTOR_LEAF:
        return _leaf_inverse(t, r)
    a, b, c = _blocks(t, r // 2)
    a_inv, c_inv = _lower_inverse(a), _lower_inverse(c)
    return _lower_of(a_inv, -tf.matmul(c_inv, tf.matmul(b, a_inv)), c_inv)


class SlabConditional:
    """The exact conditional change of variables for ``post`` (module docstring)."""

    def __init__(self, post):
        grid, obs = post.grid, post.observations
        self.post = post
        a = slab_axis(obs.mask)
        self.axis = a
        self.perm = [a] + [i for i in range(3) if i != a]           # grid axes -> (a, b, c)
        self.inverse_perm = [int(i) for i in np.argsort(self.perm)]
        k_moved = np.moveaxis(grid.k_magnitude_full(), a, 0)           # (n_a, n_b, n_c)
        self.shape_t = k_moved.shape
        planes = np.moveaxis(obs.mask, a, 0).all(axis=(1, 2))
        self.observed, self.missing = np.flatnonzero(planes), np.flatnonzero(~planes)
        self.r = self.missing.size
        self.sigma = float(obs.uniform_noise)
        self.n_cells = grid.n_cells
        self._noise_norm = grid.n_cells * self.sigma**2                    # N sigma^2
        self._log_norm = math.log(post._norm)     # noqa: SLF001  S_k = P(k) N^2 / V
        first = self._layout(k_moved[0].reshape(-1))
        self._spectrum_inputs(k_moved.reshape(self.shape_t[0], -1)[:, first].T)
        self._plane_constants(planes)

    def _layout(self, q) -> np.ndarray:
        """The columns laid out (row, slot) with padding (``core.field.observations.slab_rows``:
        a row holds columns of one |q|, so the row shares their factors) -> each row's first column."""
        n_cols = q.size
        rows = slab_rows(q)
        self.n_rows, self.slots = len(rows), max(cols.size for cols in rows)
        slot_column = np.full((self.n_rows, self.slots), n_cols)     # n_cols: a zero column
        position = np.empty(n_cols, np.int64)
        for row, cols in enumerate(rows):
            slot_column[row, :cols.size] = cols
            position[cols] = row * self.slots + np.arange(cols.size)
        self._slot_column = tf.constant(slot_column.reshape(-1), tf.int32)
        self._position = tf.constant(position, tf.int32)
        self._counts = tf.constant([float(cols.size) for cols in rows], tf.float64)
        return np.array([cols[0] for cols in rows])

    def _spectrum_inputs(self, k_row) -> None:
        """The spectrum's inputs at |k| of each row's modes along a, (n_rows, n_a, 1), and the beam."""
        post, obs = self.post, self.post.observations
        nonzero = k_row > 0
        safe = np.where(nonzero, k_row, 1.0)[..., None]
        spec, rd = post.spectrum, post.dtype
        analytic, bands = isinstance(spec, (PowerLaw, PowerLawCutoff)), isinstance(spec, BandPowers)
        self._log_k_ratio = tf.constant(np.log(safe / spec.k_pivot), rd) if analytic else None
        self._k2 = tf.constant(safe**2, rd)
        self._bins = (tf.constant(np.maximum(spec.bin_index(k_row), 0)[..., None].astype(np.int32))
                      if bands else None)
        self._nonzero = tf.constant(nonzero.astype(np.float64), tf.float64)
        beam = (np.ones_like(k_row) if obs.smoothing_scale is None
                else np.exp(-0.5 * (k_row * obs.smoothing_scale)**2))
        self._beam = tf.constant(beam, tf.float64)

    def _plane_constants(self, planes) -> None:
        """What the missing and observed planes make constant: products in place of gathers."""
        na, nb, nc = self.shape_t
        miss, nh = self.missing, na // 2 + 1
        # the circulant's entries on the missing planes, c[(i - j) mod n_a], as a product with c
        # (a gather's gradient is a scatter: slow under XLA on the CPU)
        self._pairs_mm = tf.constant(np.eye(na)[(miss[:, None] - miss[None, :]).reshape(-1) % na].T, tf.float64)
        # rfft of a column held on the missing planes, and irfft read on them, as products
        phase = np.exp(-2j * np.pi * np.outer(miss, np.arange(nh)) / na)           # (r, n_a // 2 + 1)
        weight = half_spectrum_weights(na)
        self._to_half = {dt: tf.constant(phase, dt) for dt in (tf.complex64, tf.complex128)}
        self._from_half = {dt: tf.constant((np.conj(phase) * weight / na).T, dt) for dt in (tf.complex64, tf.complex128)}
        self._parseval = tf.constant(weight / na, tf.float64)             # e^T C e = sum weight g |e_k|^2 / n_a
        self._observed_rows = tf.constant(planes.astype(np.float64), tf.float64)
        self._lik_const = float(-self.observed.size * nb * nc * (math.log(self.sigma) + 0.5 * LOG_2PI))

    # -- columns ----------------------------------------------------------------

    def columns(self, grid_field: tf.Tensor) -> tf.Tensor:
        """(chains, n0, n1, n2) -> (chains, n_rows, slots, n_a): the columns along a (the field
        as given: no transform), per |q| and slot, zero in the padding."""
        na = self.shape_t[0]
        moved = tf.transpose(grid_field, [0, *(1 + p for p in self.perm[1:]), 1 + self.perm[0]])
        flat = tf.reshape(moved, [tf.shape(moved)[0], -1, na])                    # (chains, cols, n_a)
        flat = tf.concat([flat, tf.zeros_like(flat[:, :1])], axis=1)
        padded = tf.gather(flat, self._slot_column, axis=1)
        return tf.reshape(padded, [tf.shape(flat)[0], self.n_rows, self.slots, na])

    def grid_of(self, cols: tf.Tensor) -> tf.Tensor:
        """The inverse of ``columns`` (padding dropped)."""
        na, nb, nc = self.shape_t
        flat = tf.reshape(cols, [tf.shape(cols)[0], -1, na])
        moved = tf.reshape(tf.gather(flat, self._position, axis=1), [tf.shape(cols)[0], nb, nc, na])
        order = [*self.perm[1:], self.perm[0]]                  # moved's axes: (b, c, a)
        return tf.transpose(moved, [0] + [1 + order.index(g) for g in range(3)])

    def in_column_space(self, grid_field: tf.Tensor) -> tf.Tensor:
        """H2 over the axes other than a, then ``columns``."""
        moved = tf.transpose(grid_field, [0, *(1 + p for p in self.perm)])            # (chains, a, b, c)
        return self.columns(tf.transpose(_hartley2(moved), [0, *(1 + p for p in self.inverse_perm)]))

    def from_column_space(self, cols: tf.Tensor) -> tf.Tensor:
        """The inverse of ``in_column_space``."""
        moved = tf.transpose(self.grid_of(cols), [0, *(1 + p for p in self.perm)])
        return tf.transpose(_hartley2(moved), [0, *(1 + p for p in self.inverse_perm)])

    def data_term(self, data) -> tf.Tensor:
        """The data as every density reads them: the rfft along a of e, the columns of
        H2(data - mean) / sigma on the observed planes (0 on the missing ones and in the
        padding), (rows, n_rows, slots, n_a // 2 + 1) complex, for data of shape (rows, n0, n1,
        n2) (a run's: one row; a calibration batch's: one a simulation). Computed once."""
        mask = tf.constant(self.post.observations.mask, tf.bool)
        residual = tf.cast(data, tf.float64) - self.post.observations.field_mean
        residual = tf.where(mask, residual, tf.zeros_like(residual))          # masked (maybe NaN): 0
        return self._rfft(self.in_column_space(residual) * self._observed_rows / self.sigma)

    # -- the factors --------------------------------------------------------------

    def _symbol(self, eta):
        """w = B(k) sqrt(S_k(eta)) on each row's modes along a, (chains, n_rows, n_a), float64."""
        post = self.post
        theta = post.hyperparameters(eta)
        log_p = post._log_power_with(theta, self._log_k_ratio, self._k2, self._bins, eta)[..., 0]   # noqa: SLF001
        log_s = tf.cast(log_p, tf.float64) + self._log_norm
        return self._beam * tf.exp(0.5 * log_s) * self._nonzero

    def _half(self, symbol):
        """A symmetric symbol's half (n_a // 2 + 1), complex, broadcasting over the slots."""
        return _complex(symbol[..., None, :self.shape_t[0] // 2 + 1])

    def _missing_rows(self, spectrum):
        """irfft(spectrum) on the missing planes: (..., n_a // 2 + 1) complex -> (..., r)."""
        return tf.math.real(tf.matmul(spectrum, self._from_half[spectrum.dtype]))

    def _embedded(self, values):
        """rfft of the column that holds ``values`` (..., r) on the missing planes, 0 elsewhere."""
        values = _complex(values)
        return tf.matmul(values, self._to_half[values.dtype])

    def factors(self, eta) -> dict:
        """Per chain and row: w, delta, y = w / sqrt(delta N sigma^2), W (the Cholesky factor of
        H_mm = I - E, H the circulant of 1 / delta) and log det P (module docstring)."""
        w = self._symbol(eta)
        delta = 1.0 + w * w / self._noise_norm
        f = {"w": w, "delta": delta, "y": w / tf.sqrt(delta * self._noise_norm)}
        log_det = tf.reduce_sum(tf.math.log(delta), axis=-1)
        if self.r:
            na = self.shape_t[0]
            h = tf.signal.irfft(_complex(1.0 / delta)[..., :na // 2 + 1], fft_length=[na])
            h_mm = tf.reshape(tf.matmul(h, self._pairs_mm), [*h.shape[:-1], self.r, self.r])
            f["W"], f["W_inv"] = _cholesky_inverse(h_mm)
            log_det += 2.0 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(f["W"])), axis=-1)
        f["log_det"] = log_det
        return f

    def _with_k(self, f) -> dict:
        """``f`` with K = W^-T (I + W)^-1 and (I + W)^-T (r x r), for the state's map."""
        if self.r and "K" not in f:
            plus_inv = _lower_inverse(f["W"] + tf.eye(self.r, dtype=tf.float64))        # (I + W)^-1
            f["plus_inv_t"] = tf.linalg.matrix_transpose(plus_inv)
            f["K"] = tf.matmul(f["W_inv"], plus_inv, transpose_a=True)
        return f

    def _inner_hat(self, f, data_hat, v_hat):
        """rfft of R e + v (R = L^T A^T: L^T t = S^T Delta^-1/2 t, module docstring) column by
        column: e y + v + Ym K^T Ym^T (e y), in Fourier space along a."""
        inner = data_hat * self._half(f["y"])
        if self.r:
            p = self._missing_rows(data_hat * self._half(f["y"] * f["y"]))           # Ym^T Yo d
            inner += self._embedded(tf.linalg.matvec(f["K"][..., None, :, :], p, transpose_a=True)) \
                * self._half(f["y"])
        return inner + v_hat

    def _z_hat(self, f, inner_hat, symbol):
        """rfft of circ(symbol) Delta^-1/2 S x for x = irfft(inner_hat): L x with symbol 1, the
        smoothed field's G L x with symbol w."""
        root = tf.math.rsqrt(f["delta"])
        out = inner_hat * self._half(symbol * root)
        if self.r:
            q = self._missing_rows(inner_hat * self._half(f["y"]))                    # Ym^T x
            out += self._embedded(tf.linalg.matvec(f["K"][..., None, :, :], q)) * self._half(symbol * root * f["y"])
        return out

    def _rfft(self, x):
        return tf.signal.rfft(x, fft_length=[self.shape_t[0]])

    def _irfft(self, x):
        return tf.signal.irfft(x, fft_length=[self.shape_t[0]])

    # -- the maps and the density ---------------------------------------------------

    def _z(self, v, eta, data_term):
        f = self._with_k(self.factors(eta))
        inner = self._inner_hat(f, data_term, self._rfft(self.columns(tf.cast(v, tf.float64))))
        return self._irfft(self._z_hat(f, inner, tf.ones_like(f["w"]))), f

    def latent(self, v, eta, data_term) -> tf.Tensor:
        """u = Phi^T(z): the whitened latent of the state v, z = L (R e + v)."""
        z, _ = self._z(v, eta, data_term)
        unit_field = self.from_column_space(z)                                     # sqrt(N) J u
        spectrum = tf.signal.fft3d(tf.cast(unit_field, tf.complex128))
        u = (tf.math.real(spectrum) + tf.math.imag(spectrum)) / math.sqrt(self.n_cells)
        return tf.cast(u, self.post.dtype)

    def state(self, u, eta, data_term) -> tf.Tensor:
        """v for the whitened latent u: L^-1 z - R e = S^-1 Delta^1/2 z - R e, z = Phi(u)."""
        f = self._with_k(self.factors(eta))
        z = self.in_column_space(self.post.unit_map(tf.cast(u, tf.float64)) * math.sqrt(self.n_cells))
        scaled = self._rfft(z) * self._half(tf.sqrt(f["delta"]))
        if self.r:
            q = self._missing_rows(scaled * self._half(f["y"]))
            scaled -= self._embedded(tf.linalg.matvec(f["plus_inv_t"][..., None, :, :], q)) * self._half(f["y"])
        v_hat = scaled - self._inner_hat(f, data_term, tf.zeros_like(scaled))
        return tf.cast(self.grid_of(self._irfft(v_hat)), self.post.dtype)

    def _log_marginal(self, f, data_term):
        """log p(d | eta) per chain: -1/2 sum_q e_q^T C^-1 e_q - 1/2 sum log det C + const, with
        C^-1 = H_oo - H_om H_mm^-1 H_mo (the observed block of H, the inverse of the circulant
        I + G^T G / (N sigma^2), less the missing planes' Schur complement); e^T H e by Parseval."""
        data_hat = data_term
        power = tf.reduce_sum(tf.math.real(data_hat * tf.math.conj(data_hat)), axis=-2) * self._parseval
        inverse = 1.0 / f["delta"]
        quad = tf.reduce_sum(inverse[..., :self.shape_t[0] // 2 + 1] * power, axis=[-2, -1])
        if self.r:
            b = tf.matmul(self._missing_rows(data_hat * self._half(inverse)), f["W_inv"], transpose_b=True)
            quad -= tf.reduce_sum(b * b, axis=[-3, -2, -1])
        return -0.5 * quad - 0.5 * tf.reduce_sum(f["log_det"] * self._counts, axis=-1) + self._lik_const

    def log_density(self, v, eta, data_term, with_signal: bool = False):
        """(log N(v; 0, I) + log p(d | eta), per chain; the signal (smoothed field + mean) or None):
        the field's share of log p(v, eta), the hyperparameters' prior not included."""
        f = self.factors(eta)
        v64 = tf.cast(v, tf.float64)
        lp = (-0.5 * tf.reduce_sum(v64 * v64, axis=[-3, -2, -1]) - 0.5 * self.n_cells * LOG_2PI
              + self._log_marginal(f, data_term))
        signal = None
        if with_signal:       # an output, not differentiated: in the state's precision
            rd = self.post.dtype
            f = {key: tf.cast(value, rd) for key, value in self._with_k(f).items() if key in ("y", "delta", "w", "K")}
            data = tf.cast(data_term, tf.complex64 if rd == tf.float32 else tf.complex128)
            inner = self._inner_hat(f, data, self._rfft(self.columns(tf.cast(v, rd))))
            cols = self._irfft(self._z_hat(f, inner, f["w"])) / math.sqrt(self.n_cells)
            signal = self.from_column_space(cols) + tf.constant(self.post.observations.field_mean, rd)
        return tf.cast(lp, self.post.dtype), signal

    def log_prior(self, v, eta, data_term):
        """The field prior's share of the change of variables at (v, eta): log N(z; 0, I) + log
        |det L| (so that with the likelihood at the field it sums to ``log_density``)."""
        z, f = self._z(v, eta, data_term)
        lp = (-0.5 * tf.reduce_sum(z * z, axis=[-3, -2, -1]) - 0.5 * self.n_cells * LOG_2PI
              - 0.5 * tf.reduce_sum(f["log_det"] * self._counts, axis=-1))
        return tf.cast(lp, self.post.dtype)
