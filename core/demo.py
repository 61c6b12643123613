"""The built-in demos: data files and configs for a field run and an integral-model run.

numpy only. ``write_demo(outdir)`` writes (never over a file it did not write, never through
a link: ``DemoError`` names what is in the way)

    demo_field.npz     a 32^3 Gaussian random field (power law with a cutoff) observed with
                       Gaussian noise through a mask (a slab plus random dropouts); holds
                       data, truth, mask, noise and the grid and prior as metadata
    field.toml         a config sampling it (whitened Fourier modes, the spectral index
                       sampled with a normal prior) with the sampler File > New from data
                       writes for it: a new config's (``core.config.NEW_CONFIG_SAMPLERS
                       ["field"]``: the conditional preconditioner, 1000 warmup steps, 2000
                       draws; the figures are there) with MAMS, as for any data whose mask
                       couples the modes while P(k) is sampled
                       (``core.config.schema.COUPLED_HYPER_SAMPLER``; MCLMC, unadjusted, is
                       biased there: ``core.store.advice``)
    field_exact.toml   the same data with every P(k) hyperparameter fixed at its true
                       value: the posterior is Gaussian and known exactly (the Wiener
                       filter), so the window's "Exact posterior" tab checks the sampler;
                       with P(k) fixed, a new config's sampler (MCLMC), as New from data
                       writes
    series.csv         the integral-model demo series (t, y)
    integral.toml      a config sampling A, c and sigma with HMC (8 leapfrog steps, diagonal
                       mass), not MCLMC or NUTS: on this 3-parameter posterior HMC
                       measured 0.024 ESS per post-warmup gradient (worst of A, c, sigma;
                       R-hat 1.006), NUTS 0.012, MCLMC 0.017 with 1000 warmup steps (R-hat
                       1.025) and unconverged with 300 (R-hat 1.09)
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from core import integral as im
from core.config.schema import COUPLED_HYPER_SAMPLER, NEW_CONFIG_SAMPLERS
from core.field.grid import Grid
from core.field.power_spectrum import PowerLawCutoff
from core.field.synthetic import dataset_bytes, make_dataset
from core.io.regular_file import describe_mode, read_regular, write_atomic
from core.io.series import series_csv_text

__all__ = [
    "DEMO_SHAPE", "DEMO_BOX", "DEMO_SPECTRUM", "DEMO_NOISE", "FIELD_TOML", "INTEGRAL_TOML",
    "DemoError", "demo_files", "field_toml", "write_demo"
]

DEMO_SHAPE = (32, 32, 32)
DEMO_BOX = 200.0
DEMO_SPECTRUM = dict(amplitude=2000.0, index=-1.5, k_pivot=0.1, cutoff_scale=4.0)
DEMO_NOISE = 0.5

FIELD_TOML = """\
# Fieldscope demo: a 32^3 Gaussian random field seen through noise and a mask.
[model]
kind = "field"

[data]
path = "demo_field.npz"
key = "data"
noise_sigma = {noise}
mask = "mask"

[grid]
box_size = {box}
unit = "Mpc/h"

[prior]
kind = "power_law_cutoff"
k_pivot = {k_pivot}
amplitude = {amplitude}
index = {{ dist = "normal", loc = -1.5, scale = 0.3 }}
cutoff_scale = {cutoff_scale}

[likelihood]
kind = "gaussian"

[field]
parameterisation = "whitened"
dtype = "float32"

[sampler]
algorithm = "{algorithm}"
num_warmup = 1000
num_samples = 2000
num_leapfrog_steps = 10
step_size = 0.05
target_accept = 0.75
preconditioner = "conditional"
dense_modes = 1024
chains = 2
seed = 42
thin = 20
chunk_size = 25
"""

INTEGRAL_TOML = """\
# Fieldscope demo: y(t) = c + integral_0^t exp(A s) ds with Gaussian noise.
[model]
kind = "integral"

[data]
path = "series.csv"

[integral]
refine = 8

[prior]
A = { dist = "normal", loc = 0.0, scale = 1.0 }
c = { dist = "normal", loc = 0.0, scale = 10.0 }
sigma = { dist = "halfnormal", scale = 2.0 }

[sampler]
algorithm = "hmc"
num_warmup = 300
num_samples = 1000
num_leapfrog_steps = 8
step_size = 0.01
target_accept = 0.8
preconditioner = "diagonal"
chains = 4
seed = 1
thin = 1
chunk_size = 100
"""


def field_toml() -> str:
    """field.toml's text (``FIELD_TOML`` with the demo's values)."""
    return FIELD_TOML.format(noise=DEMO_NOISE, box=DEMO_BOX, **DEMO_SPECTRUM,
                             algorithm=COUPLED_HYPER_SAMPLER["algorithm"])


class DemoError(ValueError):
    """The demo's folder holds a file the demo did not write (or a link, a folder) where one
    of its files goes; the message names it."""


def demo_files(seed: int = 2026) -> dict[str, bytes]:
    """File name -> bytes of every demo file (the same bytes for the same seed)."""
    grid = Grid(DEMO_SHAPE, DEMO_BOX, "Mpc/h")
    spectrum = PowerLawCutoff(**DEMO_SPECTRUM)
    dataset = make_dataset(grid, spectrum, DEMO_NOISE, mask="slab", mask_fraction=0.2,
                           dropout_fraction=0.05, seed=seed)
    field_text = field_toml()
    sampled = 'index = { dist = "normal", loc = -1.5, scale = 0.3 }'
    exact_text = field_text.replace(sampled, f"index = {DEMO_SPECTRUM['index']}").replace(
        "# Fieldscope demo: a 32^3 Gaussian random field seen through noise and a mask.",
        "# Fieldscope demo: the same field with P(k) fixed: a Gaussian posterior known exactly\n"
        "# (the Wiener filter; see the window's \"Exact posterior\" tab).").replace(
        f'algorithm = "{COUPLED_HYPER_SAMPLER["algorithm"]}"',    # P(k) fixed: a new config's sampler
        f'algorithm = "{NEW_CONFIG_SAMPLERS["field"]["algorithm"]}"')
    assert exact_text != field_text and sampled not in exact_text
    series = im.make_demo_series(seed)
    return {"demo_field.npz": dataset_bytes(dataset), "field.toml": field_text.encode(),
            "field_exact.toml": exact_text.encode(), "series.csv": series_csv_text(series.t, series.y).encode(),
            "integral.toml": INTEGRAL_TOML.encode()}


def _demo_problem(path: Path, data: bytes) -> str | None:
    """Why the demo may not write ``path`` (None: nothing there, or the demo's own bytes)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return f"{path}: {describe_mode(info.st_mode)} where the demo writes a file"
    try:
        same = info.st_size == len(data) and read_regular(path, follow_symlinks=False) == data
    except OSError as err:
        return f"{path}: cannot be read ({err.strerror or err})"
    return None if same else f"{path}: exists and is not the demo's (the demo never overwrites a file it did not write)"


def write_demo(outdir, seed: int = 2026) -> dict[str, Path]:
    """Write the demo data and configs into ``outdir`` (created if needed).

    Every file is checked before any is written: a file already there with other contents (a
    user's own ``field.toml``), a link or a folder in a demo file's place raises DemoError
    naming it, and nothing is written. Each file is written whole or not at all, never
    through a link (``core.io.regular_file.write_atomic``); one already holding the demo's
    bytes is left as it is."""
    out = Path(outdir)
    files = demo_files(seed)
    problems = [p for p in (_demo_problem(out / name, data) for name, data in files.items()) if p]
    if problems:
        raise DemoError("; ".join(problems) + "; choose another folder, or move these files away")
    out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        if not os.path.lexists(out / name):
            write_atomic(out / name, data, overwrite=False)
    return {"field_data": out / "demo_field.npz", "field_config": out / "field.toml",
            "exact_config": out / "field_exact.toml",
            "series": out / "series.csv", "integral_config": out / "integral.toml"}
