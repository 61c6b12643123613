"""Write sky.npz for the beam-and-noise-map example: a 16^3 Gaussian random field with the
config's power law (Fieldscope's own generator) smoothed by a beam of R = 1.5 cells, gain 1.2,
noise sd 0.2 in one half of the box and 0.6 in the other; seed 3."""
from pathlib import Path

import numpy as np

from core.field.grid import Grid
from core.field.power_spectrum import PowerLaw
from core.field.synthetic import gaussian_random_field, gaussian_smooth


def make(folder=Path(__file__).parent, gain=1.2, R=1.5, seed=3):
    rng = np.random.default_rng(seed)
    grid = Grid((16, 16, 16), 64.0)
    field = gaussian_random_field(grid, PowerLaw(amplitude=300.0, index=-1.5, k_pivot=0.1), rng)
    smooth = gaussian_smooth(field, grid, R * 64.0 / 16)      # R cells in the box's length unit
    noise = np.where(np.arange(16)[:, None, None] < 8, 0.2, 0.6) * np.ones(grid.shape)
    data = gain * smooth + noise * rng.standard_normal(grid.shape)
    np.savez(Path(folder, "sky.npz"), data=data, noise=noise, truth=field)


if __name__ == "__main__":
    make()
