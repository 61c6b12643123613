"""Make the README's screenshots of the first hour: a data file opened with New from data (its
data, mask and noise in the big views before any run) and the Prior panel's fit to the data.

Everything shown is computed: a 32^3 Gaussian field (power law, index -2) drawn by
``core.field.synthetic``, seen through noise sd 0.5 and a 25 % slab mask, saved with its box size
as an .npz; the window is the real MainWindow (no engine: nothing is run). Needs a display:
``xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python docs/screenshots.py [OUTDIR]``
(default OUTDIR: docs/). The window's remembered layout is not used (a private settings folder).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _wait(app, condition, timeout=60.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise SystemExit("docs/screenshots.py: timed out waiting for the window")
        app.processEvents()
        time.sleep(0.02)


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs"
    work = Path(tempfile.mkdtemp(prefix="fieldscope-shots-"))
    os.environ["XDG_CONFIG_HOME"] = str(work / "config")
    os.environ["XDG_DATA_HOME"] = str(work / "data")

    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow
    from core.field.grid import Grid
    from core.field.power_spectrum import PowerLaw
    from core.field.synthetic import make_dataset, save_dataset

    grid = Grid((32, 32, 32), 200.0, "Mpc/h")
    dataset = make_dataset(grid, PowerLaw(amplitude=300.0, index=-2.0, k_pivot=0.1), 0.5,
                           mask="slab", mask_fraction=0.25, seed=3)
    data_path = work / "survey.npz"
    save_dataset(data_path, dataset)

    app = QApplication.instance() or QApplication(sys.argv[:1])
    window = MainWindow(engine=None, remember_layout=False)
    window.resize(1500, 950)
    window.show()
    assert window.new_from_data(data_path), window.last_message
    for dialog in QApplication.topLevelWidgets():       # the notes' information box
        if dialog is not window and dialog.isVisible():
            dialog.close()
    window.views.show_tab("Slices")
    _wait(app, lambda: window.run_state.is_preview)       # the data read, shown before any run
    for _ in range(50):
        app.processEvents()
        time.sleep(0.02)
    window.views.show_tab("P(k)")
    for _ in range(50):
        app.processEvents()
        time.sleep(0.02)
    out.mkdir(parents=True, exist_ok=True)
    window.grab().save(str(out / "screenshot_data_first.png"))

    prior = window.panel["prior"]
    next(d for d in window.docks if d.objectName() == "dock_prior").raise_()
    prior.fit_to_data()
    _wait(app, lambda: prior.fit_result is not None)
    for _ in range(30):
        app.processEvents()
        time.sleep(0.02)
    window.grab().save(str(out / "screenshot_prior_fit.png"))
    print(f"docs/screenshots.py: wrote {out / 'screenshot_data_first.png'} and "
          f"{out / 'screenshot_prior_fit.png'}")
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
