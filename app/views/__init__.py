"""Live pyqtgraph views of a run: slices, traces, sampler health (``LiveViews`` combines them).

Each view is a QWidget over one ``app.state.run_state.RunState``: it creates its plot items once
and, in ``refresh()``, feeds them with ``setData`` / ``setImage`` from the state's buffers,
only when the state's version counters moved. Images are row-major (set here, once, for the
whole process): ``image[row, column]`` with rows along the view's vertical axis.
"""

import pyqtgraph as pg

pg.setConfigOptions(imageAxisOrder="row-major", antialias=False)

from app.views.health import HealthView  # noqa: E402
from app.views.live import LiveViews  # noqa: E402
from app.views.slices import SlicesView  # noqa: E402
from app.views.traces import TracesView  # noqa: E402

__all__ = ["HealthView", "LiveViews", "SlicesView", "TracesView"]
