"""The integral model's demo series: data simulated from the model itself.

Series files (``Series``, reading and writing) are ``core.io.series``'s.
"""

from __future__ import annotations

import numpy as np

from core.integral.quadrature import closed_form_mean
from core.io.series import Series

__all__ = ['DEMO_PARAMETERS', 'make_demo_series']

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
