"""Benchmark: sampled P(k) hyperparameters, with the run settings a new config writes.

MCMC earns its cost where the spectrum is not known: its hyperparameters are sampled with the
field. This benchmark runs the real engine (``core.engine.engine.Engine``, in this process) with
the sampler settings of a new field config (``core.config.NEW_CONFIG_SAMPLERS["field"]``: its
algorithm, warmup, draws and thinning; 2 chains) and with each preconditioner / algorithm given
by ``--samplers`` instead of the default's, on several posteriors, side by side in one run, and
reports for every sampled hyperparameter

    R-hat       rank-normalised split R-hat over the chains (``core.store.diagnostics``)
    ESS         bulk and tail ESS over every post-warmup draw of both chains (the engine keeps
                every draw of a hyperparameter; thinning applies to the field only)
    /1000 grad  bulk ESS per 1000 post-warmup gradient evaluations of all chains
    err/sd      |posterior mean - exact mean| / exact sd, where the exact posterior exists
    sd ratio    sample sd / exact sd
and the warmup's gradient evaluations. Exact answers: ``core.reference.hyper_posterior`` (the
field integrated out analytically; quadrature over the hyperparameters) for Gaussian data with
one noise level and no mask or a slab mask.

The cases (``CASES``; data drawn in the run, fixed seeds):

    hi_sn        32^3 power law, the field's sd 1, noise 0.1: index sampled, no mask
    lo_sn        the same field under noise 2 (noise-dominated): index sampled, no mask
    bands16      the hi_sn field under noise 0.5: band powers, 16 bins from the grid's shells, each
                 lognormal(log of the prior's power at the bin, 2), a random walk of 0.5 in log P
                 (exact: ``band_posterior``, a forward-backward pass over per-bin grids)
    slab2        32^3 power law with a cutoff, noise 0.3, 25 % slab masked: index and
                 amplitude sampled (priors' medians at the truth)
    slab2_off    slab2 with the priors' medians away from the truth: amplitude e times it,
                 index 0.5 above (where a run starts and the "conditional" centre is exact)
    slab64       slab2's model on a 64^3 grid with 40 % of the planes masked (26: the slab's
                 exact conditional with an r x r factor past the unrolled one's old 16)
    noisemap     the hi_sn field under a noise sd rising from 0.2 to 0.6 across x: index sampled
                 (no exact answer: a noise map couples the modes)
    poisson      Poisson-lognormal counts, mean 2 a voxel, of a field of sd 0.5: index sampled
                 (no exact answer)
    hi_sn64      hi_sn on a 64^3 grid
    pair         the hi_sn field under noise 0.3: index and amplitude sampled (lognormal(log of
                 the truth, 1)), no mask; correlated -0.98 in the exact posterior (the pivot at
                 the grid's low end)
    lo_slab      lo_sn's field and noise (2) through slab2's 25 % slab: index sampled
    bands16_slab bands16 through the 25 % slab (no exact answer: the mask couples the bins)
    user48       issue #30's reproduction: a 48^3 float32 field of Gaussian-smoothed white noise
                 (smoothing 2 cells) scaled to sd 1, noise 0.3, a 12^3 cube of NaN; the config
                 File > New from data writes for it (``core.config.from_data``: the best-fitting
                 family, its index sampled), the noise sd given as 0.3. No exact answer (a cube
                 is not a slab): R-hat and ESS only.

Peers (``--peers blackjax/nuts blackjax/mclmc``): BlackJAX NUTS (window adaptation, the new
config's warmup steps) and BlackJAX MCLMC (its own tuner) on the identical density written in
JAX (``bench/blackjax_peers.py``, checked against Fieldscope's at six points first), in a process
of their own, with as many post-warmup gradients per chain as the first sampler of ``--samplers``
used; the cases whose density the JAX twin knows: a power law, with or without a fixed cutoff,
its index and / or amplitude sampled, or band powers (lognormal bins, with or without the random
walk), Gaussian noise of one sd or a noise map, or Poisson-lognormal counts, any mask and NaN
voxels (every case).

Usage: python bench/hyper_efficiency.py [--cases hi_sn lo_sn slab2 user48]
       [--samplers mclmc/fourier mclmc/conditional nuts/conditional mams/conditional+interweave]
       [--peers blackjax/nuts blackjax/mclmc] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))     # bench/sampler_efficiency.py's peers

CHAINS = 2
BOX = 200.0
K_PIVOT = 0.1
DATA_SEED = 30
DEFAULT_SAMPLERS = ("mclmc/fourier", "mclmc/conditional", "nuts/conditional")


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    n: int


CASES = {
    "hi_sn": Case("hi_sn", "index, no mask, noise 0.1", 32),
    "lo_sn": Case("lo_sn", "index, no mask, noise 2", 32),
    "bands16": Case("bands16", "16 band powers, no mask, noise 0.5", 32),
    "slab2": Case("slab2", "index + amplitude, cutoff, 25 % slab, noise 0.3", 32),
    "slab2_off": Case("slab2_off", "slab2 with the priors' medians off the truth (amplitude x e, index +0.5)", 32),
    "slab64": Case("slab64", "index + amplitude, cutoff, 40 % slab (26 planes), noise 0.3, 64^3", 64),
    "user48": Case("user48", "issue #30: 48^3 smoothed noise, 12^3 NaN cube, New from data", 48),
    "noisemap": Case("noisemap", "index, no mask, a noise map from 0.2 to 0.6 across x", 32),
    "poisson": Case("poisson", "index, Poisson-lognormal counts (mean 2 a voxel), field sd 0.5", 32),
    "hi_sn64": Case("hi_sn64", "index, no mask, noise 0.1, 64^3", 64),
    "pair": Case("pair", "index + amplitude, no mask, noise 0.3", 32),
    "lo_slab": Case("lo_slab", "index, 25 % slab, noise 2 (noise-dominated and masked)", 32),
    "bands16_slab": Case("bands16_slab", "16 band powers, 25 % slab, noise 0.5", 32),
}


def _unit_variance_amplitude(grid, spectrum_of) -> float:
    """A such that the prior's real-space variance (1/V) sum_{k != 0} P(k) is 1."""
    k = grid.k_magnitude_full()
    k = k[k > 0]
    return float(grid.volume / np.sum(spectrum_of(1.0).evaluate(k)))


def write_case(case: Case, folder: Path) -> dict:
    """The case's data file in ``folder`` and its config document (without [sampler])."""
    from core.field.grid import Grid
    from core.field.power_spectrum import PowerLaw, PowerLawCutoff
    from core.field.synthetic import make_dataset, save_dataset

    folder.mkdir(parents=True, exist_ok=True)
    if case.name == "user48":
        return _write_user48(folder)
    grid = Grid((case.n,) * 3, BOX)
    if case.name in ("noisemap", "poisson"):
        return _write_noise_map_or_counts(case, grid, folder)
    if case.name in ("slab2", "slab2_off", "slab64"):
        def spectrum_of(a):
            return PowerLawCutoff(amplitude=a, index=-1.5, k_pivot=K_PIVOT, cutoff_scale=4.0)
        noise, mask = 0.3, "slab"
    else:
        def spectrum_of(a):
            return PowerLaw(amplitude=a, index=-2.0, k_pivot=K_PIVOT)
        noise = {"hi_sn": 0.1, "hi_sn64": 0.1, "lo_sn": 2.0, "lo_slab": 2.0, "bands16": 0.5,
                 "bands16_slab": 0.5, "pair": 0.3}[case.name]
        mask = "slab" if case.name.endswith("slab") else "none"
    amplitude = _unit_variance_amplitude(grid, spectrum_of)
    save_dataset(folder / "data.npz", make_dataset(grid, spectrum_of(amplitude), noise, mask=mask,
                                                   mask_fraction=0.4 if case.name == "slab64" else 0.25,
                                                   seed=DATA_SEED))
    data = {"path": "data.npz", "key": "data", "noise_sigma": noise}
    if mask != "none":
        data["mask"] = "mask"
    prior = {"kind": "power_law", "k_pivot": K_PIVOT, "amplitude": amplitude,
             "index": {"dist": "normal", "loc": -2.0, "scale": 0.5}}
    if case.name.startswith("bands16"):
        prior = {"kind": "band_powers", "n_bins": 16, "random_walk_scale": 0.5,
                 "band_power": {"dist": "lognormal", "loc": math.log(amplitude), "scale": 2.0}}
    if case.name == "pair":
        prior["amplitude"] = {"dist": "lognormal", "loc": math.log(amplitude), "scale": 1.0}
    if case.name in ("slab2", "slab2_off", "slab64"):
        off = case.name == "slab2_off"        # the prior medians (where a run starts) off the truth
        prior = {"kind": "power_law_cutoff", "k_pivot": K_PIVOT, "cutoff_scale": 4.0,
                 "amplitude": {"dist": "lognormal", "loc": math.log(amplitude) + off, "scale": 1.0},
                 "index": {"dist": "normal", "loc": -1.5 + 0.5 * off, "scale": 0.5}}
    return {"model": {"kind": "field"}, "data": data, "grid": {"box_size": BOX}, "prior": prior,
            "likelihood": {"kind": "gaussian"}, "field": {"parameterisation": "whitened", "dtype": "float32"}}


def _write_noise_map_or_counts(case: Case, grid, folder: Path) -> dict:
    """noisemap: the hi_sn field under a noise sd rising from 0.2 to 0.6 across x; poisson:
    counts ~ Poisson(2 exp(s)), s of sd 0.5. The index sampled in both."""
    from core.field.power_spectrum import PowerLaw
    from core.field.synthetic import gaussian_random_field

    def spectrum_of(a):
        return PowerLaw(amplitude=a, index=-2.0, k_pivot=K_PIVOT)

    rng = np.random.default_rng(DATA_SEED)
    amplitude = _unit_variance_amplitude(grid, spectrum_of)
    prior = {"kind": "power_law", "k_pivot": K_PIVOT, "index": {"dist": "normal", "loc": -2.0, "scale": 0.5}}
    if case.name == "noisemap":
        field = gaussian_random_field(grid, spectrum_of(amplitude), rng)
        noise = np.broadcast_to(np.linspace(0.2, 0.6, grid.shape[0])[:, None, None], grid.shape).copy()
        np.savez(folder / "data.npz", data=field + noise * rng.standard_normal(grid.shape), noise=noise)
        data, likelihood = {"path": "data.npz", "key": "data", "noise_map": "noise"}, {"kind": "gaussian"}
    else:
        amplitude *= 0.25                                   # field variance 0.25
        field = gaussian_random_field(grid, spectrum_of(amplitude), rng)
        np.savez(folder / "data.npz", data=rng.poisson(2.0 * np.exp(field)).astype(np.float64))
        data, likelihood = {"path": "data.npz", "key": "data"}, {"kind": "poisson_lognormal", "mean_count": 2.0}
    return {"model": {"kind": "field"}, "data": data, "grid": {"box_size": BOX},
            "prior": {**prior, "amplitude": amplitude}, "likelihood": likelihood,
            "field": {"parameterisation": "whitened", "dtype": "float32"}}


def _write_user48(folder: Path) -> dict:
    from scipy.ndimage import gaussian_filter

    from core.config.from_data import config_for_data

    rng = np.random.default_rng(DATA_SEED)
    field = gaussian_filter(rng.standard_normal((48, 48, 48)), 2.0, mode="wrap")
    field /= field.std()
    data = (field + 0.3 * rng.standard_normal(field.shape)).astype(np.float32)
    data[18:30, 18:30, 18:30] = np.nan
    path = folder / "user48.npy"
    np.save(path, data)
    document = config_for_data(path, box_size=48.0, unit="Mpc/h").document
    document["data"]["noise_sigma"] = 0.3
    document.pop("sampler", None)
    return document


def _config(document: dict, folder: Path):
    from core.config import config_from_dict, dump_config, parse_config

    text = dump_config(config_from_dict(document, folder))
    return parse_config(text, base_dir=folder), text


def run_one(document: dict, folder: Path, algorithm: str, preconditioner: str, seed: int,
            interweave: bool | None = None) -> dict:
    """One engine run with the new-config sampler settings, ``algorithm`` and ``preconditioner``
    (and ``sampler.interweave`` where given)."""
    from core.config import NEW_CONFIG_SAMPLERS
    from core.engine.engine import Engine
    from core.store.run_store import RunReader

    sampler = {**NEW_CONFIG_SAMPLERS["field"], "algorithm": algorithm, "preconditioner": preconditioner,
               "chains": CHAINS, "seed": seed}
    if interweave is not None:
        sampler["interweave"] = interweave
    config, text = _config({**document, "sampler": sampler}, folder)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{algorithm}-{preconditioner}-", dir=folder))
    t0 = time.perf_counter()
    Engine(config, text, run_dir, emit=lambda event: None).start()
    reader = RunReader(run_dir)
    return {"params": {name: reader.param(name) for name in reader.param_names},
            "grads": int(reader.stat("n_steps").sum()),
            "warmup_grads": int(reader.stat("n_steps", warmup=True).sum()),
            "seconds": time.perf_counter() - t0}


def hyper_rows(result: dict, exact) -> list[dict]:
    from core.store.diagnostics import ess_bulk, ess_tail, rhat

    rows = []
    for name, draws in result["params"].items():
        row = {"name": name, "rhat": float(rhat(draws)), "ess_bulk": float(ess_bulk(draws)),
               "ess_tail": float(ess_tail(draws)), "mean": float(draws.mean()), "sd": float(draws.std())}
        row["per_1000"] = 1000.0 * row["ess_bulk"] / result["grads"]
        if exact is not None:
            row["err_sd"] = abs(row["mean"] - exact.mean[name]) / exact.sd[name]
            row["sd_ratio"] = row["sd"] / exact.sd[name]
        rows.append(row)
    return rows


def exact_for(document: dict, folder: Path):
    from core.reference.hyper_posterior import hyper_posterior_for_config

    config, _ = _config({**document, "sampler": {"algorithm": "hmc"}}, folder)
    try:
        return hyper_posterior_for_config(config)
    except ValueError as err:           # a mask that is not a slab, a noise map: no exact answer
        print(f"  (no exact answer: {err})")
        return None


def peer_inputs(document: dict, folder: Path, seed: int) -> Path | None:
    """The inputs of bench/blackjax_peers.py for a case whose density its JAX twin knows (the
    module docstring), else None: the data, the whitened map's constants (from the case's
    document, not read from Fieldscope), the sampled hyperparameters in Fieldscope's order with
    their priors in the unconstrained coordinate, and Fieldscope's log-density and gradient at
    six check points (``sampler_efficiency.density_checkpoints``)."""
    from blackjax_peers import checkpoint_arrays
    from sampler_efficiency import density_checkpoints

    from core.engine.models import build_model
    from core.field.grid import Grid

    prior, data, likelihood = document["prior"], document["data"], document["likelihood"]
    poisson = likelihood["kind"] == "poisson_lognormal"
    if (prior["kind"] not in ("power_law", "power_law_cutoff", "band_powers")
            or not ("noise_sigma" in data or "noise_map" in data or poisson)
            or likelihood["kind"] not in ("gaussian", "poisson_lognormal")):
        return None
    config, _ = _config({**document, "sampler": {"chains": CHAINS, "seed": seed}}, folder)
    names = list(build_model(config).param_names)
    values, mask, noise = _peer_data(folder, data)
    grid = Grid(values.shape, document["grid"].get("box_size", BOX))
    k = grid.k_magnitude_half()
    bands = prior["kind"] == "band_powers"
    fixed = {} if bands else {name: prior[name] for name in ("amplitude", "index") if not isinstance(prior[name], dict)}
    # the unconstrained coordinates: the index itself (normal), log A and log P_b (lognormal)
    loc = [(prior["band_power"] if bands else prior[name])["loc"] for name in names]
    scale = [(prior["band_power"] if bands else prior[name])["scale"] for name in names]
    log_norm = math.log(grid.n_cells**2 / grid.volume) + math.log(fixed.get("amplitude", 1.0))
    log_shape = -np.square(k * prior["cutoff_scale"]) if prior["kind"] == "power_law_cutoff" else np.zeros(k.shape)
    arrays = {"data": np.where(mask, values, 0.0), "inv_sigma": np.where(mask, 1.0 / noise, 0.0),
              "lik_const": np.array(-np.sum(np.where(mask, np.log(noise) + 0.5 * math.log(2 * math.pi), 0.0))),
              "log_k_ratio": np.log(np.where(k > 0, k, 1.0) / prior.get("k_pivot", 1.0)), "nonzero": (k > 0).astype(float),
              "log_shape": log_shape, "log_norm": np.array(log_norm), "index": np.array(fixed.get("index", 0.0)),
              "hyper_names": np.array(names, str), "hyper_loc": np.array(loc, float),
              "hyper_scale": np.array(scale, float)}
    if poisson:           # counts: the mask and nbar; the normalisation -sum log(c!) over the observed
        from scipy.special import gammaln

        arrays.update(log_nbar=np.array(math.log(likelihood["mean_count"])), mask=mask.astype(float),
                      inv_sigma=np.zeros(values.shape), lik_const=np.array(-np.sum(gammaln(values[mask] + 1.0))))
    if bands:
        arrays.update(_band_arrays(config, grid, k))
    arrays.update(checkpoint_arrays(density_checkpoints(config)))
    path = folder / "peer.npz"
    np.savez(path, **arrays)
    return path


def _peer_data(folder: Path, data: dict):
    """(values, mask, noise sd: a number or a map) of a case's data file (.npz or .npy), its NaN
    voxels masked as a run masks them."""
    path = folder / data["path"]
    if path.suffix == ".npy":
        values, arrays = np.load(path).astype(float), {}
    else:
        with np.load(path) as archive:
            arrays = {key: np.asarray(archive[key]) for key in archive.files}
        values = arrays[data["key"]].astype(float)
    mask = arrays[data["mask"]].astype(bool) if "mask" in data else np.ones(values.shape, bool)
    mask &= np.isfinite(values)
    noise = (arrays[data["noise_map"]].astype(float) if "noise_map" in data
             else float(data.get("noise_sigma", 1.0)))                     # counts: no noise
    return np.where(mask, values, 0.0), mask, np.where(mask, noise, 1.0)


def _band_arrays(config, grid, k) -> dict:
    """Band powers for the JAX twin: each half-grid mode's bin (0 at k = 0, whose S_0 is 0, as
    the engine's), every bin's name and log power (a fixed bin keeps its own) and the random
    walk's scale (0: none), from the spectrum the engine and the exact posterior build."""
    from core.field.power_spectrum import hyperparameter_priors, prior_spectrum

    priors = hyperparameter_priors(config.prior)
    spectrum = prior_spectrum(config.prior, None, {name: p.median() for name, p in priors.items()}, grid=grid)
    return {"bin_half": np.maximum(spectrum.bin_index(k), 0), "band_names": np.array(spectrum.parameters, str),
            "band_log_powers": np.log(np.asarray(spectrum.powers)),
            "random_walk_scale": np.array(spectrum.random_walk_scale or 0.0)}


def peer_results(name: str, document: dict, folder: Path, peers: list[str], budget: int, seed: int) -> dict:
    """{peer: {"params": {name: draws (chains, n)}, "grads", "warmup_grads", "seconds"}} of the
    BlackJAX peers on the case, or {"skipped": why}."""
    from sampler_efficiency import run_peers

    from core.config import NEW_CONFIG_SAMPLERS

    inputs = peer_inputs(document, folder, seed)
    if inputs is None:
        return {"skipped": "the JAX twin knows power laws and band powers under Gaussian noise of one sd only"}
    spec = [{"name": name, "inputs": str(inputs), "peers": peers, "budget": budget,
             "num_warmup": NEW_CONFIG_SAMPLERS["field"]["num_warmup"], "seed": seed}]
    results = run_peers(spec, folder, timeout=3600)
    if "error" in results:
        return {"skipped": results["error"]}
    check = results[name].pop("check")
    print(f"  peers: {check['versions']}; density check: {check['text']}")
    if check.get("refused"):
        return {"skipped": f"the density check refused them: {check['text']}"}
    with np.load(inputs) as archive:
        names = [str(n) for n in archive["hyper_names"]]
    # the peers' chains are in the unconstrained coordinates: the amplitude's is log A, a band's log P_b
    return {peer: {"params": {n: (np.exp if n == "amplitude" or n.startswith("band_power") else np.asarray)(
                                  res["hyper_chain"][..., i])
                              for i, n in enumerate(names)}, "grads": res["grads"],
                   "warmup_grads": res["warmup_grads"], "seconds": res["wall"]}
            for peer, res in results[name].items()}


def _print_rows(label: str, rows: list[dict], result: dict) -> None:
    for row in rows:
        print(f"  {label:<20} {row['name']:<10} {row['rhat']:6.3f} {row['ess_bulk']:7.0f} "
              f"{row['ess_tail']:7.0f} {row['per_1000']:10.2f} {row.get('err_sd', math.nan):7.2f} "
              f"{row.get('sd_ratio', math.nan):8.3f} {result['warmup_grads']:12d} {result['seconds']:6.0f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--samplers", nargs="+", default=list(DEFAULT_SAMPLERS),
                        help="algorithm/preconditioner pairs, +interweave or +no-interweave to set "
                             "sampler.interweave (the rest: a new config's settings)")
    parser.add_argument("--peers", nargs="*", default=[], choices=["blackjax/nuts", "blackjax/mclmc"],
                        help="BlackJAX peers on the same density (the cases the JAX twin knows)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    import tensorflow as tf
    import tensorflow_probability as tfp

    from core.config import NEW_CONFIG_SAMPLERS

    print(f"TensorFlow {tf.__version__}, TFP {tfp.__version__}; {CHAINS} chains; new-config settings "
          f"{NEW_CONFIG_SAMPLERS['field']}")
    out = {}
    with tempfile.TemporaryDirectory(prefix="hyper-efficiency-") as tmp:
        for name in args.cases:
            case = CASES[name]
            folder = Path(tmp) / name
            document = write_case(case, folder)
            print(f"\n[{name}] {case.title}; prior {json.dumps(document['prior'])}")
            exact = exact_for(document, folder)
            if exact is not None:
                print("  exact: " + ", ".join(f"{n} {exact.mean[n]:.4g} +- {exact.sd[n]:.3g}" for n in exact.names))
            print(f"  {'sampler':<20} {'param':<10} {'R-hat':>6} {'bulk':>7} {'tail':>7} {'/1000 grad':>10} "
                  f"{'err/sd':>7} {'sd ratio':>8} {'warmup grads':>12} {'s':>6}")
            budget = None
            for label in args.samplers:
                algorithm, _, preconditioner = label.partition("/")
                preconditioner, plus, switch = preconditioner.partition("+")
                interweave = None if not plus else {"interweave": True, "no-interweave": False}.get(switch)
                if plus and interweave is None:
                    parser.error(f"--samplers {label}: after + write interweave or no-interweave")
                result = run_one(document, folder, algorithm, preconditioner or "identity", args.seed, interweave)
                budget = budget or result["grads"] // CHAINS
                rows = hyper_rows(result, exact)
                out.setdefault(name, {})[label] = {"rows": rows, "grads": result["grads"],
                                                   "warmup_grads": result["warmup_grads"],
                                                   "seconds": result["seconds"]}
                _print_rows(label, rows, result)
            if args.peers:
                peers = peer_results(name, document, folder, args.peers, budget, args.seed)
                if "skipped" in peers:
                    print(f"  peers: skipped ({peers['skipped']})")
                    peers = {}
                for label, result in peers.items():
                    rows = hyper_rows(result, exact)
                    out.setdefault(name, {})[label] = {"rows": rows, "grads": result["grads"],
                                                       "warmup_grads": result["warmup_grads"],
                                                       "seconds": result["seconds"]}
                    _print_rows(label, rows, result)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
