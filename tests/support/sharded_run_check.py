"""Runs for ``tests/core/engine/test_sharded_run.py`` in a fresh process: the engine on configs
with ``field.shard`` over ``sampler.devices = 4``, 4 logical CPU devices (the engine splits the
CPU itself, as for any run; the split must come before TensorFlow starts). Prints JSON.

``wiener``: a 32^3 field under a 25 % slab mask, cut in 4 slabs, MCLMC, against the exact
Wiener posterior (mean by conjugate gradients, sd from 64 exact draws), with the store's P(k) of
a draw against ``core.field.power_estimator`` on that draw and the census of the unplaced
part-sized ops of every program the driver traced. ``resume``: a 16^3 field in 2 x 2 pencils, its
spectral index sampled, HMC with the diagonal adapted in warmup, stopped and resumed against one run straight through, and
resumed on 2 devices (refused: its checkpoint holds 4 parts)."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.config import config_from_dict, dump_config  # noqa: E402
from core.engine.engine import Engine  # noqa: E402
from core.field.power_estimator import measure_power  # noqa: E402
from core.reference.wiener import wiener_posterior  # noqa: E402
from core.store.run_store import RunReader, stored_run_config  # noqa: E402
from support.engine_cases import field_case_document, prior_mode_variance, write_field_case  # noqa: E402
from support.sharded_density_check import unplaced_grid_ops  # noqa: E402  (splits the CPU in 4)


def _sharded(folder, shard, shape, **overrides):
    """(config, text, dataset, grid, spectrum) of ``support.engine_cases``' masked field case with
    its field cut as ``shard`` over 4 devices (white noise: the latent cut as the field is)."""
    _, _, dataset, grid, spectrum = write_field_case(folder, shape=shape, mask=True, **overrides)
    doc = field_case_document(True, **overrides)
    doc["field"].update(parameterisation="white_noise", shard=shard)
    doc["sampler"]["devices"] = 4
    config = config_from_dict(doc, base_dir=folder)
    return config, dump_config(config), dataset, grid, spectrum


def _census(engine, part_cells: int) -> dict:
    """program -> the unplaced part-sized op types of its graphs (``unplaced_grid_ops``)."""
    out = {}
    for i, program in enumerate(engine.driver.programs):
        found = set()
        for concrete in program.traced._list_all_concrete_functions():   # noqa: SLF001
            found.update(unplaced_grid_ops(concrete.graph, part_cells))
        out[str(i)] = sorted(found)
    return out


def wiener(folder: Path) -> dict:
    config, text, data, grid, spectrum = _sharded(
        folder, "slab", (32, 32, 32), algorithm="mclmc", warmup=500, samples=1000, chains=2, thin=10,
        chunk=100, mass=False)
    events = []
    engine = Engine(config, text, folder / "run", emit=events.append)
    t0 = time.perf_counter()
    status = engine.start()
    seconds = time.perf_counter() - t0
    reader = RunReader(folder / "run")
    mean, std, count = reader.field_moments()
    exact = wiener_posterior(np.where(data.mask, data.data, 0.0), prior_mode_variance(grid, spectrum), 0.5,
                             mask=data.mask, std="sample", n_samples=64, rng=np.random.default_rng(0))
    z = (mean - exact.mean) / exact.std
    ratio = std / exact.std
    k, counts, power = reader.powers()
    draw = reader.field_draws(chain=1, draws=slice(-1, None))[0]
    expected = measure_power(draw.astype(np.float64), grid).power
    part_cells = 2 * 8 * 32 * 32        # a part of the field, both chains
    return {"status": status, "seconds": seconds, "count": int(count), "cg converged": bool(exact.converged),
            "rms z of the mean": float(np.sqrt(np.mean(z**2))), "max |z|": float(np.max(np.abs(z))),
            "median sd ratio": float(np.median(ratio)),
            "power of a stored draw": float(np.max(np.abs(power[1, -1] - expected)) / np.max(np.abs(expected))),
            "stored draws": list(reader.field_draws().shape), "device": reader.root.attrs.get("device", ""),
            "programs": _census(engine, part_cells)}


def resume(folder: Path) -> dict:
    # the spectral index sampled: eta rides beside the parts (whole, on no device of the mesh)
    settings = dict(algorithm="hmc", warmup=60, samples=60, chains=2, thin=5, chunk=20, leapfrog=6,
                    index={"dist": "normal", "loc": -1.5, "scale": 0.3})
    out = {}
    for name in ("straight", "resumed"):
        where = folder / name
        where.mkdir()
        config, text, *_ = _sharded(where, "pencil", (16, 16, 16), **settings)
        if name == "straight":
            out[name] = Engine(config, text, where / "run").start()
            continue
        from core.engine.engine import Control
        control = Control()

        def emit(event, control=control):
            if event.get("type") == "chunk" and event["progress"]["draws"] >= 20:
                control.stop = True
        first = Engine(config, text, where / "run", emit=emit, control=control).start()
        config2, text2 = stored_run_config(where / "run")
        out[name] = [first, Engine(config2, text2, where / "run").resume()]
    # resumed on 2 devices: the checkpoint holds 4 parts, refused by name
    import dataclasses

    from core.engine.engine import EngineError
    config2, text2 = stored_run_config(folder / "straight" / "run")
    fewer = dataclasses.replace(config2, sampler=dataclasses.replace(config2.sampler, devices=2))
    try:
        Engine(fewer, text2, folder / "straight" / "run").resume(num_samples=120)
        out["on 2 devices"] = "resumed"
    except EngineError as err:
        out["on 2 devices"] = str(err)
    a, b = RunReader(folder / "straight" / "run"), RunReader(folder / "resumed" / "run")
    differ = [name for name in ("lp", "step_size", "grad_norm", "acceptance_rate")
              for w in (True, False) if not np.array_equal(a.stat(name, w), b.stat(name, w))]
    differ += [f"param {name}" for name in a.param_names for w in (True, False)
               if not np.array_equal(a.param(name, w), b.param(name, w))]
    out["params"] = list(a.param_names)
    if not np.array_equal(a.field_draws(), b.field_draws()):
        differ.append("field_draws")
    if not np.array_equal(a.field_moments()[0], b.field_moments()[0]):
        differ.append("field moments")
    out.update(differ=differ, draws=int(a.stat("lp", False).size), device=a.root.attrs.get("device", ""))
    return out


def main() -> None:
    what = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        result = {"wiener": wiener, "resume": resume}[what](Path(tmp))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
