"""core.run.resources refuses what cannot run: a grid too small to sample, a chunk buffer
that cannot fit (naming chunk_size and thin), a store its disk cannot hold."""

from __future__ import annotations

import math

from core.run import resources


def test_grids_with_an_axis_under_three_cells_are_refused_naming_the_minimum():
    for shape, modes in (((1, 1, 1), 0), ((2, 2, 2), 7), ((1, 64, 64), 4095)):
        text = resources.grid_problem(shape)
        grid = " x ".join(map(str, shape))
        assert text.startswith(f"the grid {grid} is too small to sample: every axis needs at "
                               "least 3 cells")
        assert f"this grid has {modes} random Fourier mode" in text
    for shape in ((3, 3, 3), (4, 3, 6), (5, 4, 3), (8, 8, 8)):      # the tests' small grids
        assert resources.grid_problem(shape) is None
    e = resources.estimate_run((2, 2, 2))
    assert resources.run_problem(e, available=2**50) == resources.grid_problem((2, 2, 2))


def test_a_huge_chunk_is_refused_naming_chunk_size_and_thin():
    e = resources.estimate_run((32, 32, 32), chains=2, chunk_size=10**6, thin=1)
    text = resources.memory_problem(e, available=8 * 2**30)
    assert "sampler.chunk_size = 1000000 and sampler.thin = 1" in text
    assert "ceil(chunk_size / thin) + 1 = 1000001 field draws of the 32 x 32 x 32 grid" in text
    assert text.endswith("use a smaller sampler.chunk_size or a larger sampler.thin")
    assert "fewer chains" not in text
    # the default chunk is no part of the advice
    small = resources.estimate_run((32, 32, 32), chains=2)
    assert "chunk_size" not in resources.memory_problem(small, available=small.total - 1)


def test_a_store_larger_than_the_free_disk_is_refused(tmp_path):
    e = resources.estimate_run((32, 32, 32), chains=2, num_warmup=1000, num_samples=10**7,
                               thin=5)
    assert e.store_bytes > 2 * 10**6 * 2 * 32**3 * 4         # 2e6 float32 fields per chain
    text = resources.disk_problem(e, tmp_path / "run", free=10 * 2**30)
    assert text.startswith(f"the run's store would take about {resources.format_bytes(e.store_bytes)} "
                           "(sampler.num_samples = 10000000 with sampler.thin = 5: 2000000 field "
                           "draws of the 32 x 32 x 32 grid per chain")
    assert f"the disk of {tmp_path / 'run'} has 10.0 GiB free" in text
    assert resources.disk_problem(e, tmp_path / "run", free=e.store_bytes) is None
    assert resources.free_disk(tmp_path / "not" / "yet") == resources.free_disk(tmp_path)
    # the engine checks it with the run directory's disk
    assert resources.run_problem(e, available=2**50, run_dir=tmp_path / "run") == \
        resources.disk_problem(e, tmp_path / "run") or resources.free_disk(tmp_path) > e.store_bytes


def test_one_141_gib_gpu_holds_512_cubed_with_4_chains_and_1024_cubed_with_1_by_the_estimate():
    """Issue #13's target, by XLA's own account of the chunk programs (DEVICE_PROGRAMS): the
    largest program's grid-sized buffers, 4 bytes each, the chunk's field draws where that
    program makes them (ceil(25 / 20) + 1 = 3 a chain) and the CUDA runtime."""
    gib = 2**30
    gpu = 141 * gib
    expected = {   # (W C + S + 3 C) grid-sized buffers of the largest program, hand-computed
        ("hmc", 4): 13.0 * 4 + 10.6 + 12, ("hmc", 1): 13.0 + 10.6 + 3,
        # MCLMC and MAMS: stage 2 in its own program at these sizes, the larger of the two
        ("mclmc", 4): max(13.8 * 4 + 8.8 + 12, 21.7 * 4 + 5.0), ("mclmc", 1): 21.7 + 5.0,
        ("mams", 4): max(17.5 * 4 + 4.1 + 12, 25.5 * 4 + 5.0), ("mams", 1): 25.5 + 5.0,
        ("nuts", 4): 41.5 * 4 + 8.1 + 12, ("nuts", 1): 41.5 + 8.1 + 3,
    }
    for (algorithm, chains), units in expected.items():
        side = 512 if chains == 4 else 1024
        e = resources.estimate_run((side,) * 3, chains=chains, algorithm=algorithm, chunk_size=25,
                                   thin=20, num_leapfrog_steps=10)
        program = e.device_bytes("gpu") - resources.GPU_RUNTIME_BYTES
        assert abs(program - units * side**3 * 4) <= 1, (algorithm, chains)
        fits = resources.memory_problem(e, available=2**50, device="gpu", device_available=gpu) is None
        assert fits == (algorithm != "nuts" or chains == 4), (algorithm, chains, program / gib)
    # stage 2 shares the other steps' program while that is small: an 8^3 MCLMC run has one
    small = resources.estimate_run((8,) * 3, chains=2, algorithm="mclmc", chunk_size=25, thin=20)
    assert small.device_bytes("gpu") - resources.GPU_RUNTIME_BYTES == math.ceil(
        (17.8 * 2 + 16.8 + 3 * 2) * 8**3 * 4)


def test_the_estimate_counts_each_devices_chains_when_they_spread():
    """``sampler.devices``: on a GPU the largest device's chains (a lone chain runs twice:
    ``device_chain_groups``), in a CPU's one memory every device's; the store keeps the run's."""
    from core.run.engine_limits import device_chain_groups

    assert device_chain_groups(4, 1) == [4]
    assert device_chain_groups(4, 2) == [2, 2]
    assert device_chain_groups(5, 2) == [3, 2]
    assert device_chain_groups(3, 2) == [2, 2]          # 2 + a lone chain run twice
    assert device_chain_groups(4, 4) == [2, 2, 2, 2]
    assert device_chain_groups(8, 4) == [2, 2, 2, 2]
    side = (256,) * 3
    kw = dict(algorithm="mclmc", chunk_size=25, thin=20)
    one = resources.estimate_run(side, chains=8, **kw)
    four = resources.estimate_run(side, chains=8, devices=4, **kw)
    two_each = resources.estimate_run(side, chains=2, **kw)
    assert four.device_bytes("gpu") == two_each.device_bytes("gpu") < one.device_bytes("gpu")
    assert four.host_bytes("cpu") == one.host_bytes("cpu")           # 8 chains in one memory either way
    assert four.store_bytes == one.store_bytes and four.chains == 8
    lone = resources.estimate_run(side, chains=4, devices=4, **kw)    # each device: its chain twice
    assert lone.device_bytes("gpu") == two_each.device_bytes("gpu")
    assert lone.arrays["model_state"] == one.arrays["model_state"]   # 4 devices x 2 copies computed
    assert lone.xla_working_set == one.xla_working_set
    assert lone.store_bytes == resources.estimate_run(side, chains=4, **kw).store_bytes      # 4 stored


def test_a_field_cut_over_devices_is_counted_per_device_and_meets_issue_34s_targets():
    """``field.shard``: each GPU holds 1 / D of the whole white-noise program and SHARD_PLANES
    planes (XLA's account of one device's program: tests/core/engine/test_sharded_memory.py), by
    the registry's white-noise figures; the host's memory and the store are the whole run's.
    Issue #34's targets: 2048^3 x 1 chain fits 8 devices of 141 GiB, 1024^3 x 4 chains fits 4,
    with HMC, MCLMC and MAMS (not NUTS: its tree holds 43 grid-sized buffers a chain)."""
    from core.config import config_from_dict

    gib, gpu = 2**30, 141 * 2**30
    for algorithm in ("hmc", "mclmc", "mams", "nuts"):
        for side, chains, devices in ((2048, 1, 8), (1024, 4, 4)):
            kw = dict(chains=chains, algorithm=algorithm, chunk_size=25, thin=20, parameterisation="white_noise")
            whole = resources.estimate_run((side,) * 3, **kw)
            cut = resources.estimate_run((side,) * 3, shards=devices, **kw)
            planes = resources.SHARD_PLANES * side**2 * 4
            assert cut.device_program == math.ceil(whole.device_program / devices + planes), (algorithm, side)
            assert cut.host_bytes("gpu") == whole.host_bytes("gpu") and cut.store_bytes == whole.store_bytes
            fits = resources.memory_problem(cut, available=2**50, device="gpu", device_available=gpu) is None
            assert fits == (algorithm != "nuts"), (algorithm, side, cut.device_bytes("gpu") / gib)
    # the config's way there: devices count shards, not chain groups; the identity mass's figures
    doc = {"model": {"kind": "field"}, "data": {"path": "d.npz", "noise_sigma": 0.5},
           "field": {"parameterisation": "white_noise", "shard": "pencil"},
           "sampler": {"algorithm": "hmc", "chains": 1, "devices": 8, "chunk_size": 25, "thin": 20}}
    config = config_from_dict(doc, ".")
    got = resources.estimate_for_config(config, (2048,) * 3)
    expected = resources.estimate_run((2048,) * 3, chains=1, algorithm="hmc", chunk_size=25, thin=20,
                                      parameterisation="white_noise", shards=8, preconditioner="identity")
    assert got.device_program == expected.device_program
    assert got.device_program == math.ceil((10.8 + 10.9 + 3) * 2048**3 * 4 / 8 + resources.SHARD_PLANES * 2048**2 * 4)


def test_the_slabs_exact_conditional_is_counted_where_the_settings_take_it():
    """Under a slab "conditional" builds r x r factors per row of columns and no dense block:
    the estimate adds them (``slab_factor_bytes``: SLAB_FACTOR_MATRICES float64 matrices a chain
    and row, rows of one |q| counted on the box's transverse plane) where the engine takes that
    path (the whitened latent, sampled hyperparameters), to the host's and the GPU's account."""
    from core.field.grid import Grid
    from core.field.observations import slab_rows

    kw = dict(chains=2, algorithm="mclmc", num_warmup=10, num_samples=10, preconditioner="conditional",
              hyper_sampled=True, dense_modes=512)
    plain = resources.estimate_run((64, 64, 64), **kw)
    slab = resources.estimate_run((64, 64, 64), slab=(0, 32), **kw)
    k = Grid((1, 64, 64), 1.0).k_magnitude_full()[0]
    rows = len(slab_rows(k))
    assert 64 * 64 / 8 <= rows < 64 * 64 / 4           # most |q| hold 4 or 8 columns
    factors = resources.SLAB_FACTOR_MATRICES * 2 * rows * 32**2 * 8
    assert slab.arrays["slab_factors"] == factors
    block = 2 * 512**2 * 4                                  # the dense block and its inverse, float32
    assert plain.arrays["model_constants"] - slab.arrays["model_constants"] == block      # not built
    assert slab.device_program - plain.device_program == factors - block
    assert slab.program - plain.program == resources.SLAB_PROGRAM_BYTES_PER_PLANE * 32     # host: its programs
    # an anisotropic box puts fewer columns on one |q|: more rows
    longer = resources.estimate_run((64, 64, 64), slab=(0, 32), box_size=(100.0, 100.0, 130.0), **kw)
    assert longer.arrays["slab_factors"] > 1.5 * factors
    for other in (dict(kw, preconditioner="fourier"), dict(kw, hyper_sampled=False),
                  dict(kw, parameterisation="white_noise")):
        assert "slab_factors" not in resources.estimate_run((64, 64, 64), slab=(0, 32), **other).arrays
