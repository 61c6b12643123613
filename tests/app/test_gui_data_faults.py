"""Real data in the window (no engine): a FITS cube through the Data panel, large arrays
read off the GUI thread (stale results dropped), and a run too big for this machine
refused in the Grid panel before Start.

References: core.io (the array and its statistics), core.run.resources (the estimate
and its refusal text).
"""

from __future__ import annotations

import threading
import time

import numpy as np
from astropy.io import fits
from PySide6.QtWidgets import QFileDialog

import app.panels.data as panels
from core.io import inspect_array, loader_for
from core.run import resources
from support.gui import message_of, tiny_case


def write_fits_cube(path, cube, mask, cdelt=25.0, unit="Mpc/h"):
    header = fits.Header()
    for axis in (1, 2, 3):
        header[f"CDELT{axis}"] = cdelt
        header[f"CUNIT{axis}"] = unit
    fits.HDUList([fits.PrimaryHDU(cube, header=header),
                  fits.ImageHDU(mask.astype(np.uint8), name="MASK")]).writeto(path)


def test_a_fits_cube_is_read_off_the_gui_thread(make_window, qtbot, tmp_path, monkeypatch):
    window = make_window(tiny_case(tmp_path), engine=None)
    data = window.panel["data"]
    rng = np.random.default_rng(2)
    cube = rng.standard_normal((8, 10, 12)).astype(np.float32)
    mask = rng.random(cube.shape) < 0.9
    write_fits_cube(tmp_path / "cube.fits", cube, mask)
    threads = []
    real_read = panels._read_array

    def read(path, name):
        threads.append(threading.current_thread())
        return real_read(path, name)

    monkeypatch.setattr(panels, "_read_array", read)
    data.async_bytes = 0                     # every array counts as large
    data.open_file(tmp_path / "cube.fits")
    s = window.state
    assert s["data.key"] == "PRIMARY" and s["data.mask"] == "MASK"
    # numpy axis i is FITS axis 3 - i: box (8, 10, 12) * CDELT
    assert s["grid.box_size"] == [200.0, 250.0, 300.0] and s["grid.unit"] == "Mpc/h"
    assert data.note.text() == ("From the file: array 'PRIMARY', mask 'MASK', box size "
                                "[200.0, 250.0, 300.0], unit 'Mpc/h'.")
    qtbot.waitUntil(lambda: "shape (8, 10, 12)" in data.info.text(), timeout=10_000)
    assert threads and all(t is not threading.main_thread() for t in threads)
    assert {t.name for t in threads} == {"fieldscope-data"}     # the panel's LatestJob
    stats = inspect_array(loader_for(tmp_path / "cube.fits").load(tmp_path / "cube.fits").array)
    assert f"min {stats.min:.4g}, max {stats.max:.4g}" in data.info.text()
    assert "file's box (200, 250, 300) Mpc/h" in data.info.text()
    z = data.slider.value()
    np.testing.assert_array_equal(data.preview.image.image, cube[:, :, z].T)      # x across, y up
    assert window.errors == {}

    # a slow read of one file, then another file chosen: the first result is dropped
    other = rng.standard_normal((6, 6, 6))
    np.save(tmp_path / "other.npy", other)

    def slow_read(path, name):
        if path.endswith("cube.fits"):
            time.sleep(0.5)
        return real_read(path, name)

    monkeypatch.setattr(panels, "_read_array", slow_read)
    data._loaded_key = None
    data.refresh()                                # cube.fits again, slowly
    assert "reading 'PRIMARY'" in data.info.text()
    data.open_file(tmp_path / "other.npy")
    qtbot.waitUntil(lambda: "shape (6, 6, 6)" in data.info.text(), timeout=10_000)
    qtbot.wait(800)                               # the slow read has ended by now
    assert "shape (6, 6, 6)" in data.info.text()
    np.testing.assert_array_equal(data.preview.image.image,
                                  other[:, :, data.slider.value()].T.astype(np.float32))
    # what was taken from a file is said while that file is the config's, not after
    data.open_file(tmp_path / "cube.fits")
    assert data.note.text().startswith("From the file: ")
    window.open_config(tiny_case(tmp_path / "another"))
    assert data.note.text() == ""


def test_the_file_dialog_offers_fits(make_window, monkeypatch, tmp_path):
    window = make_window(tiny_case(tmp_path), engine=None)
    seen = []
    monkeypatch.setattr(QFileDialog, "getOpenFileName",
                        staticmethod(lambda *args: (seen.append(args[3]), ("", ""))[1]))
    window.panel["data"]._browse()
    assert "*.fits" in seen[0] and "*.fts" in seen[0] and "*.npz" in seen[0]


def test_a_run_that_cannot_fit_is_refused_in_the_grid_panel(make_window, tmp_path,
                                                            monkeypatch):
    config = tiny_case(tmp_path)
    window = make_window(config, engine=None)
    assert window.errors == {}
    grid_panel = window.panel["grid"]
    estimate = resources.estimate_for_config(window.state.config(), (8, 8, 8))
    need = estimate.needed(include_import=False)
    assert resources.format_bytes(need) in grid_panel.info.text()
    monkeypatch.setattr(resources, "available_memory", lambda: need - 1)
    window.validate()
    assert set(window.errors) == {"grid.memory"}
    text = message_of(window, "grid.memory")
    assert text.startswith("grid: the run needs about") and "8 x 8 x 8 grid, 2 chains" in text
    assert "fewer chains" in text and text in window.message_label.text()
    assert not window.can_start()
    monkeypatch.setattr(resources, "available_memory", lambda: need)
    window.validate()
    assert window.errors == {} and message_of(window, "grid.memory") == ""
