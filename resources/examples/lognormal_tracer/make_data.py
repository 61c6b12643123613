"""Write counts.npz for the log-normal tracer example: a 16^3 Gaussian random field with the
config's power law, b1 = 1.5, nbar = 2, a slab of cells unobserved; seed 2."""
from pathlib import Path

import numpy as np


def gaussian_field(shape, box, amplitude, index, k_pivot, rng):
    """A Gaussian random field with P(k) = amplitude (k / k_pivot)^index (Fieldscope's convention)."""
    n_cells, volume = np.prod(shape), box**3
    k = np.sqrt(sum(np.meshgrid(*[(2 * np.pi * np.fft.fftfreq(n, box / n))**2 for n in shape[:2]],
                                (2 * np.pi * np.fft.rfftfreq(shape[2], box / shape[2]))**2, indexing="ij")))
    power = np.where(k > 0, amplitude * (np.where(k > 0, k, 1.0) / k_pivot)**index, 0.0)
    modes = np.fft.rfftn(rng.standard_normal(shape)) * np.sqrt(power * n_cells / volume)
    return np.fft.irfftn(modes, s=shape, axes=(0, 1, 2))


def make(folder=Path(__file__).parent, b1=1.5, nbar=2.0, seed=2):
    rng = np.random.default_rng(seed)
    field = gaussian_field((16, 16, 16), 64.0, 300.0, -1.5, 0.1, rng)
    counts = rng.poisson(nbar * np.exp(b1 * field)).astype(np.float64)
    mask = np.ones(counts.shape, bool)
    mask[:, :, :4] = False
    np.savez(Path(folder, "counts.npz"), data=counts, mask=mask, truth=field)


if __name__ == "__main__":
    make()
