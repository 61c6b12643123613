"""A model file's data (``core.io.load_named_arrays``): CSV columns by header, .npz arrays by name."""

from __future__ import annotations

import numpy as np
import pytest

from core.io import LoadError, load_named_arrays


def test_csv_columns_and_npz_arrays_are_read_by_name(tmp_path):
    (tmp_path / "d.csv").write_text("t,y\n0,1.5\n1,2.5\n2,-3e-2\n")
    out = load_named_arrays(tmp_path / "d.csv")
    assert list(out) == ["t", "y"]
    np.testing.assert_array_equal(out["y"], [1.5, 2.5, -0.03])
    np.savez(tmp_path / "d.npz", counts=np.arange(6).reshape(2, 3), w=np.ones(2, np.float32))
    out = load_named_arrays(tmp_path / "d.npz")
    assert out["counts"].dtype == np.float64 and out["counts"].shape == (2, 3)


@pytest.mark.parametrize("text, words", [
    ("", "the file is empty"),
    ("\n\n", "empty file; expected a header"),
    ("t,1y\n0,1\n", "column name '1y' is not a Python identifier"),
    ("t,t\n0,1\n", "a column name is repeated"),
    ("t,y\n0,1\n2\n", "line 3: expected 2 fields (t,y), got 1"),
    ("t,y\n0,abc\n", "line 2: column 'y': 'abc' is not a number"),
    ("t,y\n", "no data rows after the header"),
])
def test_bad_csv_files_are_refused_with_file_and_line(tmp_path, text, words):
    (tmp_path / "d.csv").write_text(text)
    with pytest.raises(LoadError) as err:
        load_named_arrays(tmp_path / "d.csv")
    assert str(err.value).startswith(str(tmp_path / "d.csv")) and words in str(err.value), str(err.value)


def test_an_npz_of_strings_and_a_fifo_are_refused(tmp_path):
    import os

    np.savez(tmp_path / "s.npz", names=np.array(["a", "b"]))
    with pytest.raises(LoadError, match="'names' has dtype <U1"):
        load_named_arrays(tmp_path / "s.npz")
    os.mkfifo(tmp_path / "f.csv")
    with pytest.raises(LoadError, match="f.csv"):
        load_named_arrays(tmp_path / "f.csv")
