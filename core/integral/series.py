"""The integral model's data series: ``Series``, the demo series, CSV write and read.
"""

from __future__ import annotations

import csv
import math
import os
from typing import NamedTuple

import numpy as np

from core.integral.quadrature import closed_form_mean
from core.integral.spec import _float_vector

__all__ = ['Series', 'DEMO_PARAMETERS', 'make_demo_series', 'save_series_csv', 'load_series_csv']

class Series(NamedTuple):
    """A 1D data series: times t, observations y, optional f column (None: f = 1)."""

    t: np.ndarray
    y: np.ndarray
    f: np.ndarray | None = None


DEMO_PARAMETERS = {"A": 0.3, "c": 1.0, "sigma": 0.5}


def make_demo_series(seed: int = 0, n: int = 100, t_max: float = 10.0,
                     A: float = DEMO_PARAMETERS["A"], c: float = DEMO_PARAMETERS["c"],
                     sigma: float = DEMO_PARAMETERS["sigma"]) -> Series:
    """t = linspace(0, t_max, n), y = c + expm1(A t)/A + Normal(0, sigma^2) noise, f = 1.

    Defaults reproduce the user's setup (100 points on [0, 10]) with A = 0.3, c = 1,
    sigma = 0.5, so y rises from ~1 to ~68. Deterministic for a given seed.
    """
    if n < 2:
        raise ValueError(f"n: need at least 2 points, got {n!r}")
    if not sigma > 0:
        raise ValueError(f"sigma: must be > 0, got {sigma!r}")
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, t_max, n)
    y = closed_form_mean(t, A, c) + sigma * rng.standard_normal(n)
    return Series(t, y, None)


def save_series_csv(path, t, y, f=None) -> None:
    """Write ``t,y`` (or ``t,y,f``) with a header line and 17 significant digits."""
    t = _float_vector("t", t)
    y = _float_vector("y", y)
    cols = [t, y]
    header = ["t", "y"]
    if f is not None:
        cols.append(_float_vector("f", f))
        header.append("f")
    for name, col in zip(header[1:], cols[1:]):
        if col.size != t.size:
            raise ValueError(f"{name}: length {col.size} does not match t (length {t.size})")
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for row in zip(*cols):
            w.writerow([repr(float(v)) for v in row])


def load_series_csv(path) -> Series:
    """Read a ``t,y[,f]`` CSV file (header required; blank lines skipped).

    Raises ValueError naming the file and line for a bad header, a wrong number of
    fields, a value that is not a finite number, or times that do not increase.
    """
    name = os.fspath(path)
    with open(path, newline="") as fh:
        rows = [(i, row) for i, row in enumerate(csv.reader(fh), start=1)
                if row and any(cell.strip() for cell in row)]
    if not rows:
        raise ValueError(f"{name}: empty file; expected a header 't,y' or 't,y,f'")
    line, header = rows[0]
    header = [h.strip() for h in header]
    if header not in (["t", "y"], ["t", "y", "f"]):
        raise ValueError(f"{name}, line {line}: header must be 't,y' or 't,y,f', "
                         f"got {','.join(header)!r}")
    cols = [[] for _ in header]
    for line, row in rows[1:]:
        if len(row) != len(header):
            raise ValueError(f"{name}, line {line}: expected {len(header)} fields "
                             f"({','.join(header)}), got {len(row)}")
        for j, cell in enumerate(row):
            try:
                v = float(cell)
            except ValueError:
                raise ValueError(f"{name}, line {line}: column {header[j]!r}: "
                                 f"{cell.strip()!r} is not a number") from None
            if not math.isfinite(v):
                raise ValueError(f"{name}, line {line}: column {header[j]!r}: "
                                 f"{cell.strip()!r} is not finite")
            cols[j].append(v)
        t_col = cols[0]
        if len(t_col) >= 2 and not t_col[-1] > t_col[-2]:
            raise ValueError(f"{name}, line {line}: t = {t_col[-1]!r} does not increase "
                             f"(previous t = {t_col[-2]!r})")
    if len(cols[0]) < 2:
        raise ValueError(f"{name}: need at least 2 data rows, got {len(cols[0])}")
    arrays = [np.array(c) for c in cols]
    return Series(arrays[0], arrays[1], arrays[2] if len(arrays) == 3 else None)
