"""The periodic 3-D grid a field lives on: shape, box, wavevectors, shells, memory.

Conventions (shared by every module of Fieldscope)
--------------------------------------------------
Grid. Shape (n0, n1, n2), N = n0 * n1 * n2 cells, box lengths (L0, L1, L2) in the
user's length unit, volume V = L0 * L1 * L2, cell size d_i = L_i / n_i. The box is
periodic.

Wavevectors. Angular wavenumbers, per axis in numpy ``fftfreq`` order:

    k_i = 2 pi * fftfreq(n_i, d=L_i / n_i)       (k_i = 2 pi m / L_i, m = 0, 1, ..., -1)

with the last axis in ``rfftfreq`` order on the half grid. The fundamental
wavenumber is k_f,i = 2 pi / L_i and the Nyquist wavenumber k_Ny,i = pi n_i / L_i.

Half-spectrum layout. numpy's ``rfftn`` layout: shape (n0, n1, n2 // 2 + 1), the last
axis halved. A stored mode's multiplicity w is 1 on the self-conjugate planes (last
index 0, and n2 / 2 when n2 is even: their conjugate twins are stored too) and 2
elsewhere (the twin is not stored). sum(w) over the half grid = N.

Power spectrum. With delta_tilde(k) = (V / N) * DFT(delta)(k), DFT the unnormalised
forward transform (``numpy.fft.fftn``), <|delta_tilde(k)|^2> = V P(|k|); so one DFT
mode has <|DFT(delta)_k|^2> = P(k) N^2 / V and the real-space variance is
(1 / V) * sum_k P(k) over the full grid. The k = 0 mode is not part of the random
field (its prior variance is 0: the field mean is fixed at 0), so a zero-mean real
field has N - 1 real degrees of freedom.

Shells. Shell i holds the modes with edges[i] <= |k| < edges[i + 1]; the last shell
is closed on the right (edges[-2] <= |k| <= edges[-1]). The k = 0 mode is in no
shell. Modes outside [edges[0], edges[-1]] are in no shell (index -1).

This module is numpy-only (the GUI process imports it; no TensorFlow, no Qt).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields

import numpy as np

__all__ = ["Grid", "MemoryEstimate"]


def _format_tuple(values) -> str:
    """'(a, b, c)' for error messages, whatever the input's type."""
    try:
        items = list(values)
    except TypeError:
        return repr(values)
    return "(" + ", ".join(repr(v) if isinstance(v, str) else str(v) for v in items) + ")"


def _is_real_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _parse_shape(shape) -> tuple[int, int, int]:
    if isinstance(shape, (str, bytes)) or np.ndim(shape) != 1:
        raise ValueError(f"grid shape {shape!r}: needs three positive integers (n0, n1, n2)")
    items = list(shape)
    text = _format_tuple(items)
    if len(items) != 3:
        raise ValueError(f"grid shape {text}: needs three axes (n0, n1, n2), got {len(items)}")
    out = []
    for n in items:
        if not isinstance(n, numbers.Integral) or isinstance(n, bool):
            raise ValueError(f"grid shape {text}: {n!r} is not an integer number of cells")
        if n < 1:
            raise ValueError(f"grid shape {text}: every axis needs at least 1 cell")
        out.append(int(n))
    return tuple(out)


def _parse_box_size(box_size) -> tuple[float, float, float]:
    if isinstance(box_size, (str, bytes)):
        raise ValueError(f"box size {box_size!r}: needs one number or three numbers")
    if np.ndim(box_size) == 0:
        items = [box_size] * 3
        text = repr(box_size)
    else:
        if np.ndim(box_size) != 1:
            raise ValueError(f"box size {box_size!r}: needs one number or three numbers")
        items = list(box_size)
        text = _format_tuple(items)
        if len(items) != 3:
            raise ValueError(f"box size {text}: needs one number or three numbers, "
                             f"got {len(items)}")
    out = []
    for length in items:
        if not _is_real_number(length):
            raise ValueError(f"box size {text}: {length!r} is not a number")
        if not (math.isfinite(float(length)) and float(length) > 0.0):
            raise ValueError(f"box size {text}: every length must be positive and finite")
        out.append(float(length))
    return tuple(out)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes held by the main arrays of a sampling run (an estimate, see below).

    Every entry is in bytes; ``total`` is their sum. The estimate counts the arrays
    that scale with the grid and that a run holds at the same time; it leaves out
    framework overhead (TensorFlow's allocator pools, XLA buffers, autodiff
    intermediates of the density, CUDA context), which commonly adds tens of percent
    and can, in a badly fused graph, double the peak. Use it to warn before a run
    that cannot fit, not as a promise that one will.
    """

    field_state: int
    momentum: int
    gradient: int
    half_spectrum: int
    fft_workspace: int
    running_stats: int
    kept_draws: int

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self))

    def as_dict(self) -> dict[str, int]:
        """Every entry and ``total``, in bytes."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["total"] = self.total
        return out

    def describe(self) -> str:
        """A few lines of text, in MiB, for a status bar or log."""
        lines = [f"{name.replace('_', ' ')}: {value / 2**20:.1f} MiB"
                 for name, value in self.as_dict().items()]
        return "\n".join(lines)


@dataclass(frozen=True)
class Grid:
    """A periodic 3-D grid: shape (n0, n1, n2) and box lengths (L0, L1, L2).

    ``box_size`` accepts one number (a cubic box) or three; ``unit`` is the name of the
    length unit (free text, for labels only). Invalid values raise ``ValueError`` with
    a message naming the value. See the module docstring for the conventions.
    """

    shape: tuple[int, int, int]
    box_size: tuple[float, float, float]
    unit: str = ""

    def __post_init__(self):
        object.__setattr__(self, "shape", _parse_shape(self.shape))
        object.__setattr__(self, "box_size", _parse_box_size(self.box_size))
        if not isinstance(self.unit, str):
            raise ValueError(f"grid unit {self.unit!r}: must be a string")

    # -- sizes ----------------------------------------------------------------

    @property
    def n_cells(self) -> int:
        """N = n0 * n1 * n2."""
        return math.prod(self.shape)

    @property
    def volume(self) -> float:
        """V = L0 * L1 * L2, in unit^3."""
        return math.prod(self.box_size)

    @property
    def cell_size(self) -> tuple[float, float, float]:
        """d_i = L_i / n_i per axis."""
        return tuple(length / n for length, n in zip(self.box_size, self.shape))

    @property
    def cell_volume(self) -> float:
        """V / N."""
        return self.volume / self.n_cells

    @property
    def half_shape(self) -> tuple[int, int, int]:
        """Shape of the half spectrum (rfftn layout): (n0, n1, n2 // 2 + 1)."""
        n0, n1, n2 = self.shape
        return (n0, n1, n2 // 2 + 1)

    @property
    def n_half_modes(self) -> int:
        """Number of stored modes in the half spectrum."""
        return math.prod(self.half_shape)

    @property
    def n_independent_modes(self) -> int:
        """Real degrees of freedom of a zero-mean real field: N - 1."""
        return self.n_cells - 1

    # -- wavevectors ----------------------------------------------------------

    @property
    def k_fundamental(self) -> tuple[float, float, float]:
        """k_f,i = 2 pi / L_i per axis."""
        return tuple(2.0 * math.pi / length for length in self.box_size)

    @property
    def k_nyquist(self) -> tuple[float, float, float]:
        """k_Ny,i = pi n_i / L_i per axis."""
        return tuple(math.pi * n / length for n, length in zip(self.shape, self.box_size))

    @property
    def k_max(self) -> float:
        """The largest |k| on the grid (the corner mode)."""
        k_axis_max = [2.0 * math.pi * (n // 2) / length
                      for n, length in zip(self.shape, self.box_size)]
        return math.sqrt(sum(k * k for k in k_axis_max))

    def _k_axis(self, axis: int) -> np.ndarray:
        n, length = self.shape[axis], self.box_size[axis]
        return 2.0 * np.pi * np.fft.fftfreq(n, d=length / n)

    def k_axes_full(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-axis k (fftfreq order) as three broadcastable arrays, full grid.

        Shapes (n0, 1, 1), (1, n1, 1), (1, 1, n2).
        """
        k0, k1, k2 = (self._k_axis(a) for a in range(3))
        return k0[:, None, None], k1[None, :, None], k2[None, None, :]

    def k_axes_half(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-axis k as three broadcastable arrays in the rfftn (half) layout.

        Shapes (n0, 1, 1), (1, n1, 1), (1, 1, n2 // 2 + 1); the last axis is
        2 pi * rfftfreq(n2, d=L2 / n2).
        """
        n2, length2 = self.shape[2], self.box_size[2]
        k0, k1 = self._k_axis(0), self._k_axis(1)
        k2 = 2.0 * np.pi * np.fft.rfftfreq(n2, d=length2 / n2)
        return k0[:, None, None], k1[None, :, None], k2[None, None, :]

    def k_magnitude_half(self) -> np.ndarray:
        """|k| on the half grid, shape ``half_shape``, float64."""
        k0, k1, k2 = self.k_axes_half()
        return np.sqrt(k0 * k0 + k1 * k1 + k2 * k2)

    def k_magnitude_full(self) -> np.ndarray:
        """|k| on the full grid, shape ``shape``, float64 (fftn layout)."""
        k0, k1, k2 = self.k_axes_full()
        return np.sqrt(k0 * k0 + k1 * k1 + k2 * k2)

    def multiplicity_half(self, broadcast: bool = True) -> np.ndarray:
        """Multiplicity w of each stored half-spectrum mode (1 or 2), float64.

        w = 1 on the self-conjugate planes (last index 0, and n2 / 2 for even n2),
        2 elsewhere; sum(w) over the half grid = N. With ``broadcast`` the result has
        shape ``half_shape``; without, shape (n2 // 2 + 1,) (it depends only on the
        last index and broadcasts against half-grid arrays).
        """
        n2 = self.shape[2]
        w = np.full(n2 // 2 + 1, 2.0)
        w[0] = 1.0
        if n2 % 2 == 0:
            w[-1] = 1.0
        if broadcast:
            return np.broadcast_to(w, self.half_shape).copy()
        return w

    # -- shells ---------------------------------------------------------------

    def shell_edges(self, n_bins: int | None = None, kmin: float | None = None,
                    kmax: float | None = None) -> np.ndarray:
        """Edges of spherical |k| shells, float64, length n_bins + 1.

        Defaults: ``kmin`` = min(k_fundamental) / 2 (so the smallest nonzero modes are
        in the first shell and k = 0 in none; for a cubic box shell i is centred on
        (i + 1) k_f); ``kmax`` = the largest |k| on the grid (``k_max``; a 1 x 1 x 1
        grid, which has no mode but the mean, gets one empty shell).

        With ``n_bins`` None the shells have width max(k_fundamental) and there are
        as many as needed to pass kmax: edges kmin + i * width, i = 0 .. n_bins, with
        n_bins = floor((kmax - kmin) / width) + 1 (the last edge lies beyond kmax).
        With the default kmax no such shell is empty: one step along axis i changes
        |k| by at most k_f,i <= width, so a walk from the corner mode to k = 0 lands
        in every interval of that width. With ``n_bins`` given the edges are
        ``linspace(kmin, kmax, n_bins + 1)``.
        """
        if n_bins is not None and (not isinstance(n_bins, numbers.Integral)
                                   or isinstance(n_bins, bool) or n_bins < 1):
            raise ValueError(f"shell n_bins {n_bins!r}: must be a positive integer")
        lo = 0.5 * min(self.k_fundamental) if kmin is None else kmin
        hi = self.k_max if kmax is None else kmax
        if kmax is None and hi <= lo:      # a 1 x 1 x 1 grid: one (empty) shell
            hi = lo + max(self.k_fundamental)
        for name, value in (("kmin", lo), ("kmax", hi)):
            if not _is_real_number(value) or not math.isfinite(value) or value < 0:
                raise ValueError(f"shell {name} {value!r}: must be a finite number >= 0")
        lo, hi = float(lo), float(hi)
        if not hi > lo:
            raise ValueError(f"shell range kmin={lo!r}, kmax={hi!r}: kmax must exceed kmin")
        if n_bins is None:
            width = max(self.k_fundamental)
            n_bins = int(math.floor((hi - lo) / width)) + 1
            return lo + width * np.arange(n_bins + 1, dtype=np.float64)
        return np.linspace(lo, hi, int(n_bins) + 1)

    @staticmethod
    def _check_edges(edges) -> np.ndarray:
        edges = np.asarray(edges, dtype=np.float64)
        if edges.ndim != 1 or edges.size < 2:
            raise ValueError(f"shell edges {edges!r}: need a 1-D array of at least 2 values")
        if not np.all(np.isfinite(edges)) or np.any(edges < 0):
            raise ValueError(f"shell edges {edges!r}: must be finite and >= 0")
        if np.any(np.diff(edges) <= 0):
            raise ValueError(f"shell edges {edges!r}: must be strictly increasing")
        return edges

    def shell_index_half(self, edges) -> np.ndarray:
        """Shell index of every half-grid mode (int64, shape ``half_shape``).

        Index i means edges[i] <= |k| < edges[i + 1] (the last shell closed on the
        right); -1 means in no shell. The k = 0 mode is always -1.
        """
        edges = self._check_edges(edges)
        return _shell_index(self.k_magnitude_half(), edges)

    def shell_index_full(self, edges) -> np.ndarray:
        """As ``shell_index_half`` for the full grid (fftn layout)."""
        edges = self._check_edges(edges)
        return _shell_index(self.k_magnitude_full(), edges)

    # -- memory ---------------------------------------------------------------

    def memory_estimate(self, chains: int = 1, dtype="float32",
                        n_field_draws_kept: int = 0) -> MemoryEstimate:
        """Estimate the bytes the main arrays of an HMC run on this grid hold.

        With b the bytes of one real value of ``dtype`` (float32: 4, float64: 8),
        C = ``chains``, N cells and H = n0 * n1 * (n2 // 2 + 1) half-spectrum modes:

            field_state    2 C N b     current position and leapfrog proposal
            momentum         C N b
            gradient       2 C N b     gradient at the current state (kept by the
                                       kernel) and at the proposal
            half_spectrum  2 C H 2b    forward half spectrum and its cotangent
            fft_workspace    C H 2b    one half-spectrum-sized scratch per transform
            running_stats  2 N b       the chunk's sums of the field's deviations from
                                       its fixed mean and of their squares (the run's
                                       float64 totals are host memory, not counted here)
            kept_draws     D C N b     D = ``n_field_draws_kept`` draws per chain

        An estimate: see ``MemoryEstimate`` for what it leaves out.
        """
        if not isinstance(chains, numbers.Integral) or isinstance(chains, bool) or chains < 1:
            raise ValueError(f"chains {chains!r}: must be a positive integer")
        if (not isinstance(n_field_draws_kept, numbers.Integral)
                or isinstance(n_field_draws_kept, bool) or n_field_draws_kept < 0):
            raise ValueError(f"n_field_draws_kept {n_field_draws_kept!r}: "
                             "must be an integer >= 0")
        try:
            dt = np.dtype(dtype)
        except TypeError:
            dt = None
        if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ValueError(f"dtype {dtype!r}: must be float32 or float64")
        b = dt.itemsize
        c, n, h = int(chains), self.n_cells, self.n_half_modes
        return MemoryEstimate(
            field_state=2 * c * n * b,
            momentum=c * n * b,
            gradient=2 * c * n * b,
            half_spectrum=2 * c * h * 2 * b,
            fft_workspace=c * h * 2 * b,
            running_stats=2 * n * b,
            kept_draws=int(n_field_draws_kept) * c * n * b,
        )


def _shell_index(k: np.ndarray, edges: np.ndarray) -> np.ndarray:
    n_bins = edges.size - 1
    index = np.searchsorted(edges, k, side="right").astype(np.int64) - 1
    index[k == edges[-1]] = n_bins - 1           # last shell closed on the right
    index[(index < 0) | (index >= n_bins)] = -1
    index[k == 0.0] = -1                         # the mean is not part of the field
    return index
