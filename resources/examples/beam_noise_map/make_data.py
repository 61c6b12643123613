"""Write sky.npz for the beam-and-noise-map example: a 16^3 Gaussian random field smoothed by a
beam of R = 1.5 cells, gain 1.2, noise sd 0.2 in one half of the box and 0.6 in the other; seed 3."""
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


def make(folder=Path(__file__).parent, gain=1.2, R=1.5, seed=3):
    rng = np.random.default_rng(seed)
    shape = (16, 16, 16)
    field = gaussian_field(shape, 64.0, 300.0, -1.5, 0.1, rng)
    k2 = sum(np.meshgrid(*[(2 * np.pi * np.fft.fftfreq(n))**2 for n in shape[:2]],
                         (2 * np.pi * np.fft.rfftfreq(shape[2]))**2, indexing="ij"))
    smooth = np.fft.irfftn(np.fft.rfftn(field) * np.exp(-0.5 * k2 * R**2), s=shape, axes=(0, 1, 2))
    noise = np.where(np.arange(16)[:, None, None] < 8, 0.2, 0.6) * np.ones(shape)
    data = gain * smooth + noise * rng.standard_normal(shape)
    np.savez(Path(folder, "sky.npz"), data=data, noise=noise, truth=field)


if __name__ == "__main__":
    make()
