"""Band powers: an engine run against the exact per-bin posterior (core.reference.hyper_posterior).

A field case of tests/support/engine_cases.py (power law, sigma 0.5, box 64) with [prior] kind =
"band_powers" (4 bins from the grid, lognormal(log 100, 2) per bin, random walk 0.5), run by the engine;
prints per bin the MCMC mean and sd against the exact ones and z = (mean - exact) / exact sd.
Takes minutes (compilation dominates on a tiny grid), hence a bench, not a test.
Usage: python bench/band_powers_check.py ALGORITHM PRECONDITIONER WARMUP SAMPLES GRID_N CHUNK
(e.g. hmc fourier 150 300 8 150)
"""
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, "tests")
from core.config import config_from_dict, dump_config
from core.reference.hyper_posterior import hyper_posterior_for_config
from core.store.run_store import RunReader
from support.engine_cases import field_case_document, run, write_field_case

alg, pre, warm, samp, shape = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
tmp = Path(tempfile.mkdtemp())
write_field_case(tmp, shape=(shape,)*3)
doc = field_case_document(warmup=warm, samples=samp, algorithm=alg, dtype="float64")
doc["prior"] = {"kind": "band_powers", "n_bins": 4, "band_power": {"dist": "lognormal", "loc": math.log(100.0), "scale": 2.0},
                "random_walk_scale": 0.5}
doc["sampler"].pop("adapt_mass_matrix"); doc["sampler"]["preconditioner"] = pre
doc["sampler"]["chains"] = 2; doc["sampler"]["chunk_size"] = int(sys.argv[6])
config = config_from_dict(doc, base_dir=tmp); text = dump_config(config)
t = time.time(); exact = hyper_posterior_for_config(config); print("exact", time.time() - t, exact.method)
t = time.time(); status, _ = run(config, text, tmp / "run"); print(status, "engine s", time.time() - t)
r = RunReader(tmp / "run")
for name in r.param_names:
    draws = r.param(name)
    m = draws.mean(); z = (m - exact.mean[name]) / exact.sd[name]
    print(name, f"mcmc {m:.4g} sd {draws.std():.4g} exact {exact.mean[name]:.4g} sd {exact.sd[name]:.4g} z {z:+.3f}")
