"""Each device's memory of a field cut over devices, by XLA's own account (issue #34): the chunk
programs of one device of the mesh (``ShardMesh.device_view``: its part of the field, each
all-to-all a local stand-in with the collective's shapes), compiled by XLA for one device and
read from XLA's buffer assignment (``bench/device_memory.py``'s runs, each a fresh engine process
with XLA's dump on), fall as 1 / D of the unsharded program from 1 to 4 devices, slabs and
pencils, up to the few numbers every device holds; the estimate (``core.run.resources``, with
``shards``) is within 10 % of that account.

16^3, float32, white noise, MCLMC and HMC (its leapfrog looped, as large runs have it), one chain
(the draws of a chunk in the program).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from core.run import resources

# loaded from its file: bench/ on sys.path would put its scripts' names (hmc, scale, ...) there
_SPEC = importlib.util.spec_from_file_location(
    "device_memory", Path(__file__).resolve().parents[3] / "bench" / "device_memory.py")
dm = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = dm
_SPEC.loader.exec_module(dm)

N = 16
# each case an engine process with XLA's dump (~40 s on 2 cores): 2 slabs are measured by
# bench/device_memory.py --shard (docs/benchmarks.md), not here
MESHES = {"mclmc": (("slab", 1), ("slab", 4), ("pencil", 4)), "hmc": (("slab", 1), ("pencil", 4))}


@pytest.fixture(scope="module")
def account(tmp_path_factory):
    """(algorithm, shard, devices) -> the largest chunk program of one device, in whole-grid
    buffers (N^3 float32 values)."""
    data = tmp_path_factory.mktemp("data")
    dm.cases.write_data(data, N)
    out = {}
    for algorithm, meshes in MESHES.items():
        for shard, devices in meshes:
            programs = dm.run_case(dict(size=N, chains=1, algorithm=algorithm, preconditioner="identity",
                                        apart=False, looped=True, shard=shard, devices=devices, data_dir=str(data),
                                        run_dir=str(data / "unused")))
            out[algorithm, shard, devices] = max(p["total"] for p in programs.values())
    return out


@pytest.mark.parametrize("algorithm", sorted(MESHES))
def test_each_devices_program_is_a_share_of_the_whole(account, algorithm):
    whole = account[algorithm, "slab", 1]
    plane = 1 / N                                   # a plane of the grid, in whole-grid buffers
    for shard, devices in MESHES[algorithm][1:]:
        share = account[algorithm, shard, devices]
        # 1 / D of the whole, plus what every device holds: a few planes (measured at most 7.4
        # of them here, HMC on 4 pencils); one more whole-grid buffer would be 16 planes
        assert whole / devices <= share <= whole / devices + 10 * plane, (algorithm, shard, devices, share, whole)


@pytest.mark.parametrize("algorithm", sorted(MESHES))
def test_the_estimate_of_each_device_is_within_ten_percent_of_xlas_account(account, algorithm):
    kept = dm.field_buffer_draws(dm.CHUNK, dm.THIN)
    for shard, devices in MESHES[algorithm]:
        # the looped program, as runs too large to unroll HMC's leapfrog have it (the estimate's
        # device_program for them)
        got = resources.device_program_bytes(algorithm, 1, N**3, 4, kept, white_noise=True, shards=devices,
                                             plane_values=N**2, preconditioner="identity") / (4 * N**3)
        measured = account[algorithm, shard, devices]
        assert abs(got / measured - 1) < 0.10, (algorithm, shard, devices, got, measured)
