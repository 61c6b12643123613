"""Finished runs that look like sampled ones, written without TensorFlow: data, config and a
run store (``core.store``'s writer, chunk by chunk as the engine appends) whose traces,
parameters, field draws and P(k) have the shapes and ranges of a real run of the demo.

For tests of what the views draw (tick labels, legends, titles), which need axes that span
what a real run spans: log-density falling into its typical set, gradient norms over two
decades, step sizes adapting over more than one, divergences in warmup and after it, field
draws around the truth with the data's P(k). ``field_run`` samples the demo's P(k) (its
``index`` and ``amplitude``, or nothing with ``exact``: the Wiener posterior is then known);
``integral_run`` is the integral-model demo (A, c, sigma, four chains); ``calibration_store``
a finished simulation-based calibration of the field run (``core.calibration``'s writer).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.config import config_from_dict, dump_config
from core.demo import DEMO_NOISE, DEMO_SPECTRUM, INTEGRAL_TOML
from core.field.grid import Grid
from core.field.power_estimator import measure_power
from core.field.power_spectrum import PowerLawCutoff
from core.field.synthetic import make_dataset, save_dataset
from core.integral import make_demo_series
from core.integral.series import DEMO_PARAMETERS
from core.io import save_series_csv
from core.store.run_record import STAT_DTYPES, STAT_NAMES, new_progress
from core.store.run_store import ChunkRecord, RunStoreWriter

__all__ = ["calibration_store", "field_run", "integral_run", "sampler_stats"]

FIELD_SHAPE = (16, 16, 16)
#: half the demo's box on half its grid: the same k range (0.03 to 1 h/Mpc)
FIELD_BOX = 100.0


def sampler_stats(rng, chains: int, warmup: int, samples: int, *, typical_lp: float) -> dict:
    """name -> (chains, warmup + samples) statistics as a sampler records them: lp rising to
    ``typical_lp``, gradient norms falling over two decades, step sizes adapting from 8 to
    about 200 in warmup, a few divergences (most in warmup)."""
    total = warmup + samples
    t = np.arange(total, dtype=float)[None, :]
    scale = 1.0 + 0.1 * np.arange(chains)[:, None]
    noise = rng.normal(size=(chains, total))
    grow = np.minimum(t / (0.6 * warmup), 1.0)
    stats = {
        "lp": typical_lp - abs(typical_lp) * 0.15 * np.exp(-t / 15.0) + 10.0 * noise,
        "grad_norm": (80.0 + 2500.0 * np.exp(-t / 10.0)) * np.exp(0.15 * rng.normal(size=(chains, total))),
        "acceptance_rate": np.clip(np.where(t < warmup, 0.3 + 0.7 * grow, 0.9)
                                   + 0.05 * rng.normal(size=(chains, total)), 0.0, 1.0),
        "step_size": 8.0 * (25.0 * scale) ** grow,
        "energy_error": 0.1 * rng.normal(size=(chains, total)),
        "diverging": np.zeros((chains, total), bool),
        "n_steps": np.full((chains, total), 10, np.int32),
    }
    stats["trajectory_length"] = 10.0 * stats["step_size"]
    stats["diverging"][0, rng.choice(warmup, 6, replace=False)] = True
    stats["diverging"][chains - 1, warmup + np.array([samples // 3, 2 * samples // 3])] = True
    return {name: np.asarray(stats[name], STAT_DTYPES.get(name, np.float64)) for name in STAT_NAMES}


def _ar1(rng, chains: int, total: int, start: float, loc: float, sd: float) -> np.ndarray:
    """Autocorrelated chains from ``start`` into N(loc, sd^2)."""
    x = np.empty((chains, total))
    x[:, 0] = start
    for i in range(1, total):
        x[:, i] = loc + 0.8 * (x[:, i - 1] - loc) + 0.6 * sd * rng.normal(size=chains)
    return x


def _write_store(run_dir, config_path: Path, *, model_kind: str, stats: dict, params: dict,
                 warmup: int, samples: int, thin: int, observed: dict, field=None) -> Path:
    """A finished run store: one chunk of warmup, two of sampling. ``field``: (grid, kept
    field draws (chains, n_field, *shape)) of a field run."""
    chains = next(iter(stats.values())).shape[0]
    extra = {}
    if field is not None:
        grid, _ = field
        ref = measure_power(np.zeros(grid.shape), grid)
        extra = dict(grid_shape=grid.shape, k_centres=ref.k, k_counts=ref.counts)
    writer = RunStoreWriter.create(run_dir, config_text=config_path.read_text(), config_dir=config_path.parent,
                                   model_kind=model_kind, chains=chains, num_warmup=warmup, num_samples=samples,
                                   thin=thin, param_names=list(params), observed=observed, **extra)
    writer.set_status("running")
    progress = dict(new_progress())
    cuts = (0, warmup, warmup + samples // 2, warmup + samples)
    for first, stop in zip(cuts[:-1], cuts[1:]):
        part = slice(first, stop)
        empty = {name: value[:, :0] for name, value in stats.items()}
        if stop <= warmup:
            record = ChunkRecord({k: v[:, part] for k, v in stats.items()}, empty,
                                 {k: v[:, part] for k, v in params.items()}, {k: v[:, :0] for k, v in params.items()})
            progress["warmup_draws"] = stop
        else:
            record = ChunkRecord(empty, {k: v[:, part] for k, v in stats.items()},
                                 {k: v[:, :0] for k, v in params.items()}, {k: v[:, part] for k, v in params.items()})
            progress["draws"] = stop - warmup
            if field is not None:
                _add_fields(record, field, first - warmup, stop - warmup, thin)
                progress["field_draws"] = len(range(0, stop - warmup, thin))
        progress["chunks"] += 1
        writer.append(record, dict(progress))
    writer.set_status("finished")
    return Path(run_dir)


def _add_fields(record: ChunkRecord, field, first: int, stop: int, thin: int) -> None:
    grid, draws = field
    index = np.arange(first, stop)
    index = index[index % thin == 0]
    kept = draws[:, index // thin]
    record.fields = kept.astype(np.float32)
    record.powers = measure_power(kept.astype(np.float64), grid).power
    record.field_draw_index = index
    upto = draws[:, : (stop - 1) // thin + 1].reshape(-1, *grid.shape)
    record.moments = (upto.mean(axis=0), upto.std(axis=0, ddof=1), int(stop) * draws.shape[0])


def field_run(folder, *, exact: bool = False, bands: int = 0, chains: int = 2, warmup: int = 200,
              samples: int = 400, thin: int = 10, seed: int = 7) -> Path:
    """The demo's field run on a 16^3 grid (data file, config, finished store in
    ``folder/run``); with ``exact`` every P(k) hyperparameter is fixed; with ``bands`` the prior
    is that many band powers (edges from the grid), each sampled. Returns the run directory."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    grid = Grid(FIELD_SHAPE, FIELD_BOX, "Mpc/h")
    dataset = make_dataset(grid, PowerLawCutoff(**DEMO_SPECTRUM), DEMO_NOISE, mask="slab", mask_fraction=0.2,
                           dropout_fraction=0.05, seed=seed)
    save_dataset(folder / "field.npz", dataset)
    prior = {"kind": "power_law_cutoff", **DEMO_SPECTRUM}
    if bands:
        prior = {"kind": "band_powers", "n_bins": bands,
                 "band_power": {"dist": "lognormal", "loc": float(np.log(500.0)), "scale": 2.0}}
    elif not exact:
        prior["index"] = {"dist": "normal", "loc": -1.5, "scale": 0.3}
        prior["amplitude"] = {"dist": "lognormal", "loc": float(np.log(2000.0)), "scale": 0.5}
    document = {"model": {"kind": "field"},
                "data": {"path": "field.npz", "key": "data", "noise_sigma": DEMO_NOISE, "mask": "mask"},
                "grid": {"box_size": FIELD_BOX, "unit": "Mpc/h"}, "prior": prior,
                "likelihood": {"kind": "gaussian"},
                "sampler": {"algorithm": "mclmc", "num_warmup": warmup, "num_samples": samples, "chains": chains,
                            "thin": thin, "chunk_size": 25}}
    config = folder / "field.toml"
    config.write_text(dump_config(config_from_dict(document, base_dir=folder)))
    total = warmup + samples
    stats = sampler_stats(rng, chains, warmup, samples, typical_lp=-4100.0)
    params = {}
    if bands:
        params = {f"band_power_{b:02d}": _ar1(rng, chains, total, 2000.0, 1500.0 / (b + 1), 30.0)
                  for b in range(bands)}
    elif not exact:
        params = {"index": _ar1(rng, chains, total, -1.2, -1.5, 0.05),
                  "amplitude": _ar1(rng, chains, total, 3500.0, 2000.0, 150.0)}
    n_fields = len(range(0, samples, thin))
    truth = np.asarray(dataset.truth, np.float64)
    draws = 0.9 * truth + 0.3 * rng.normal(size=(chains, n_fields, *FIELD_SHAPE))
    observed = {"data": (["x", "y", "z"], np.where(dataset.mask, dataset.data, np.nan)),
                "mask": (["x", "y", "z"], np.asarray(dataset.mask)),
                "noise": (["x", "y", "z"], np.full(FIELD_SHAPE, DEMO_NOISE)),
                "truth": (["x", "y", "z"], truth)}
    return _write_store(folder / "run", config, model_kind="field", stats=stats, params=params, warmup=warmup,
                        samples=samples, thin=thin, observed=observed, field=(grid, draws))


def integral_run(folder, *, chains: int = 4, warmup: int = 300, samples: int = 1000, seed: int = 3) -> Path:
    """The integral-model demo (``core.demo``'s config and series): A, c and sigma around
    the values the series was made with. Returns the run directory (``folder/run``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    series = make_demo_series(seed)
    save_series_csv(folder / "series.csv", series.t, series.y)
    config = folder / "integral.toml"
    config.write_text(INTEGRAL_TOML)
    total = warmup + samples
    stats = sampler_stats(rng, chains, warmup, samples, typical_lp=-75.0)
    sds = {"A": 0.002, "c": 0.05, "sigma": 0.04}
    params = {name: _ar1(rng, chains, total, value * 1.5, value, sds[name])
              for name, value in DEMO_PARAMETERS.items()}
    observed = {"t": (["time"], np.asarray(series.t, np.float64)), "y": (["time"], np.asarray(series.y, np.float64))}
    return _write_store(folder / "run", config, model_kind="integral", stats=stats, params=params, warmup=warmup,
                        samples=samples, thin=1, observed=observed)


def calibration_store(folder, *, simulations: int = 200, draws: int = 100, seed: int = 5) -> Path:
    """A finished calibration of the field run (its P(k) index, log-likelihood, every k shell
    of the 16^3 grid and a few voxels), ranks uniform as a calibrated pipeline gives them.
    Returns the folder (``CalibrationView``'s ``out_dir``)."""
    from core.calibration import CalibrationWriter, make_plan

    folder = Path(folder)
    rng = np.random.default_rng(seed)
    grid = Grid(FIELD_SHAPE, FIELD_BOX, "Mpc/h")
    k = measure_power(np.zeros(grid.shape), grid).k
    voxels = [(1, 1, 1), (8, 8, 8)]
    names = (["index", "loglik"] + [f"power_k{i:02d}" for i in range(len(k))]
             + [f"voxel_{x}_{y}_{z}" for x, y, z in voxels])
    plan = make_plan(simulations=simulations, draws=draws, chains=2, num_samples=1000, seed=seed,
                     batch_size=simulations // 2)
    writer = CalibrationWriter.create(folder, config_text="[model]\n", config_dir=folder, simulate_text="",
                                      plan=plan, quantities=names, model_kind="field", grid_shape=(3, 3, 3),
                                      k=list(k), voxels=voxels)
    for b in range(2):
        n = plan.kept(b)
        first = b * plan.batch_size
        writer.append({"rank": rng.integers(0, plan.draws + 1, (n, len(names))),
                       "truth": np.zeros((n, len(names))), "posterior_mean": np.zeros((n, len(names))),
                       "posterior_sd": np.ones((n, len(names))), "divergences": np.zeros(n, np.int32),
                       "acceptance": np.full(n, 0.8), "simulation": np.arange(first, first + n),
                       "voxel_rank": rng.integers(0, plan.draws + 1, (n, 3, 3, 3))}, b + 1, 10.0)
    writer.set_status("finished")
    return folder
