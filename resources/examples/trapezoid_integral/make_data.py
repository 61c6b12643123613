"""Write series.csv for the trapezoid-integral example: A = 0.1, noise variance 0.25, seed 1."""
from pathlib import Path

import numpy as np


def make(folder=Path(__file__).parent, A=0.1, variance=0.25, seed=1):
    t = np.linspace(0.0, 10.0, 100)
    integrals = np.cumsum(0.5 * (t[1] - t[0]) * (np.exp(A * t[:-1]) + np.exp(A * t[1:])))
    y = integrals + np.sqrt(variance) * np.random.default_rng(seed).standard_normal(99)
    Path(folder, "series.csv").write_text("y\n" + "".join(f"{float(v)!r}\n" for v in y))


if __name__ == "__main__":
    make()
