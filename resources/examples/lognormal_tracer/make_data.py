"""Write counts.npz for the log-normal tracer example: a 16^3 Gaussian random field with the
config's power law (Fieldscope's own generator), b1 = 1.5, nbar = 2, a slab of cells unobserved;
seed 2."""
from pathlib import Path

import numpy as np

from core.field.grid import Grid
from core.field.power_spectrum import PowerLaw
from core.field.synthetic import gaussian_random_field


def make(folder=Path(__file__).parent, b1=1.5, nbar=2.0, seed=2):
    rng = np.random.default_rng(seed)
    field = gaussian_random_field(Grid((16, 16, 16), 64.0), PowerLaw(amplitude=300.0, index=-1.5, k_pivot=0.1), rng)
    counts = rng.poisson(nbar * np.exp(b1 * field)).astype(np.float64)
    mask = np.ones(counts.shape, bool)
    mask[:, :, :4] = False
    np.savez(Path(folder, "counts.npz"), data=counts, mask=mask, truth=field)


if __name__ == "__main__":
    make()
