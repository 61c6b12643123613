"""The sharded 3-D real FFTs (``core.engine.sharded_fft``, issue #34) on 4 logical CPU devices:
forward, VJP and Hessian-vector product of rfft3d and irfft3d equal ``core.engine.fft``'s on the
whole grid to float64 round-off, for slabs (4) and pencils (2 x 2), even, odd, non-cubic and
unevenly split grids, with a batch axis; the spectrum's parts live on their devices; a grid axis
shorter than its device count is refused naming it. The regions the store writes a sharded
field's parts into are the parts ``cut`` makes (in this process: no device is needed).

The device split must come before TensorFlow starts, so the checks run in a fresh process
(``tests/support/sharded_fft_check.py``) and report their errors as JSON.
"""

from __future__ import annotations

import pytest

from support.fresh_process import json_report

TOLERANCE = 1e-13          # float64: the measured errors are 0 to 7e-16


@pytest.fixture(scope="module")
def report():
    return json_report("sharded_fft_check.py", timeout=540)


CASES = [f"{mesh} {grid}" for mesh in ("slab", "pencil")
         for grid in ("even 16^3", "odd 15^3", "non-cubic 12x10x6", "uneven 7x5x9")]


@pytest.mark.parametrize("case", CASES)
def test_sharded_transforms_and_their_derivatives_equal_the_whole_grids(report, case):
    result = report["cases"][case]
    for check in ("rfft3d", "irfft3d", "rfft3d vjp", "rfft3d hvp", "irfft3d vjp", "irfft3d hvp"):
        assert result[check] < TOLERANCE, (case, check, result[check])


def test_each_part_of_the_spectrum_is_on_its_device(report):
    assert len(report["devices"]) == 4
    for case in CASES:
        placed = [name.rsplit("/", 1)[-1] for name in report["cases"][case]["rfft3d devices"]]
        assert placed == ["device:CPU:0", "device:CPU:1", "device:CPU:2", "device:CPU:3"], (case, placed)


@pytest.mark.parametrize("case", CASES)
def test_the_first_devices_view_has_its_parts_shapes(report, case):
    """``ShardMesh.device_view`` (the per-device memory account): each transform of the first
    device's part alone gives the sharded transform's first part's shape, and so do the
    gradients of its input."""
    view = report["cases"][case]["device view"]
    assert view["parts"] == view["sharded"], case
    assert view["gradients"] == view["inputs"], case


def test_an_axis_shorter_than_its_devices_is_refused(report):
    assert "x axis (3) is shorter than the 4 devices" in report["refused"]["(3, 8, 8)"]
    assert "kz axis (3) is shorter than the 4 devices" in report["refused"]["(8, 8, 4)"]


@pytest.mark.parametrize("rows, shape", [((4, 1), (15, 15, 15)), ((2, 2), (7, 5, 9)), ((4, 2), (12, 10, 6))],
                         ids=["slabs 15^3", "pencils 7x5x9", "pencils 4x2 12x10x6"])
def test_the_stores_regions_are_the_cut_parts(rows, shape):
    """The regions the store writes a sharded field's parts into (``core.store.field_parts.regions_of``)
    hold exactly the parts ``sharded_fft.cut`` makes, in its order."""
    import numpy as np

    from core.engine.sharded_fft import ShardMesh, cut
    from core.store.field_parts import regions_of

    devices = [f"/CPU:{i}" for i in range(rows[0] * rows[1])]
    mesh = ShardMesh.slabs(devices, shape) if rows[1] == 1 else ShardMesh.pencils(devices, shape, *rows)
    whole = np.arange(2 * np.prod(shape)).reshape(2, *shape)
    parts = cut(whole, mesh)
    regions = regions_of(shape, rows)
    assert len(parts) == len(regions) == len(devices)
    for part, region in zip(parts, regions):
        assert np.array_equal(part, whole[(..., *region)])
