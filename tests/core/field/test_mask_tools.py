"""core.field.mask_tools: each tool against a mask built by hand; the .npy round trip; an
existing file is never replaced silently."""

from __future__ import annotations

import numpy as np
import pytest

from core.config import config_from_dict
from core.field.mask_tools import (
    MaskError,
    combine_masks,
    mask_from_boxes,
    mask_from_nans,
    mask_from_threshold,
    mask_path_for,
    observed_fraction,
    save_mask,
)
from core.io import load_field_inputs


def test_mask_from_nans_masks_nan_and_inf():
    data = np.zeros((3, 4, 5))
    data[0, 1, 2] = np.nan
    data[2, 3, 4] = np.inf
    data[1, 0, 0] = -np.inf
    expected = np.ones((3, 4, 5), dtype=bool)
    expected[0, 1, 2] = expected[2, 3, 4] = expected[1, 0, 0] = False
    np.testing.assert_array_equal(mask_from_nans(data), expected)
    assert mask_from_nans(np.arange(8).reshape(2, 2, 2)).all()       # integers: no NaN
    with pytest.raises(MaskError, match="complex"):
        mask_from_nans(np.zeros((2, 2, 2), complex))


def test_mask_from_threshold_bounds_inclusive_nan_never_observed():
    values = np.array([-2.0, -1.0, 0.0, 1.0, 2.0, np.nan, np.inf]).reshape(1, 1, 7)
    np.testing.assert_array_equal(mask_from_threshold(values, -1.0, 1.0).ravel(),
                                  [False, True, True, True, False, False, False])
    np.testing.assert_array_equal(mask_from_threshold(values, low=0.0).ravel(),
                                  [False, False, True, True, True, False, True])
    np.testing.assert_array_equal(mask_from_threshold(values, high=0).ravel(),
                                  [True, True, True, False, False, False, False])
    np.testing.assert_array_equal(mask_from_threshold(values).ravel(),
                                  [True] * 5 + [False, True])
    with pytest.raises(MaskError, match=r"low = 2.0 is above high = 1.0"):
        mask_from_threshold(values, 2.0, 1.0)
    with pytest.raises(MaskError, match="threshold high = 'x'"):
        mask_from_threshold(values, None, "x")
    with pytest.raises(MaskError, match="threshold low = nan"):
        mask_from_threshold(values, float("nan"))


def test_mask_from_boxes_index_ranges_and_slabs():
    shape = (4, 5, 6)
    expected = np.ones(shape, dtype=bool)
    expected[1:3, 0:2, 4:6] = False             # a box
    expected[:, :, 0] = False                   # a slab: plane k = 0 through all i, j
    got = mask_from_boxes(shape, [(1, 3, 0, 2, 4, 6), (None, None, None, None, 0, 1)])
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(mask_from_boxes(shape, []), np.ones(shape, dtype=bool))
    for box, match in (((0, 5, 0, 1, 0, 1), r"axis 0 range 0..5 .* <= 4"),
                       ((2, 2, 0, 1, 0, 1), r"axis 0 range 2..2"),
                       ((-1, 2, 0, 1, 0, 1), r"axis 0 range -1..2"),
                       ((0, 1, 0, 1, 0), "six indices"),
                       ((0, 1.5, 0, 1, 0, 1), r"box 1: i1 = 1.5")):
        with pytest.raises(MaskError, match=match):
            mask_from_boxes(shape, [box])


def test_combine_masks_is_and_none_is_everything_observed():
    a = np.array([True, True, False, False]).reshape(1, 1, 4)
    b = np.array([True, False, True, False]).reshape(1, 1, 4)
    np.testing.assert_array_equal(combine_masks(a, None, b).ravel(), [True, False, False, False])
    assert combine_masks(None, None) is None
    with pytest.raises(MaskError, match="shape"):
        combine_masks(a, np.ones((1, 1, 3), bool))
    assert observed_fraction(a) == 0.5 and observed_fraction(None) == 1.0


def test_save_mask_round_trip_next_to_the_config_and_loaded_by_the_run(tmp_path):
    data = np.random.default_rng(1).normal(size=(6, 5, 4))
    data[0, 0, 0] = np.nan
    np.save(tmp_path / "mydata.npy", data)
    mask = mask_from_nans(data) & mask_from_boxes(data.shape, [(0, 2, None, None, 1, 2)])
    target = mask_path_for(tmp_path / "survey.toml")
    assert target == tmp_path / "survey.mask.npy"
    assert save_mask(target, mask) == target
    back = np.load(target, allow_pickle=False)
    assert back.dtype == bool
    np.testing.assert_array_equal(back, mask)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []   # no temp left
    config = config_from_dict({"model": {"kind": "field"},
                               "data": {"path": "mydata.npy", "mask": target.name}}, tmp_path)
    np.testing.assert_array_equal(load_field_inputs(config).mask, mask)


def test_save_mask_refuses_to_replace_a_file_unless_asked(tmp_path):
    mask = np.ones((2, 2, 2), dtype=bool)
    target = tmp_path / "run.mask.npy"
    target.write_bytes(b"somebody's file")
    with pytest.raises(MaskError, match="a file of that name exists; not replaced"):
        save_mask(target, mask)
    assert target.read_bytes() == b"somebody's file"
    save_mask(target, ~np.eye(2, dtype=bool)[None].repeat(2, 0), overwrite=True)
    assert np.load(target).sum() == 4
    for bad, match in ((np.zeros((2, 2, 2), bool), "no voxel is observed"),
                       (np.ones((2, 2, 2)), "dtype float64")):
        with pytest.raises(MaskError, match=match):
            save_mask(tmp_path / "other.npy", bad)
    with pytest.raises(MaskError, match="must end in .npy"):
        save_mask(tmp_path / "mask.dat", mask)
    (tmp_path / "folder.npy").mkdir()
    with pytest.raises(MaskError, match="is a folder"):
        save_mask(tmp_path / "folder.npy", mask, overwrite=True)
