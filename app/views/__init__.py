"""Live pyqtgraph views of a run: slices, traces, sampler health, P(k), ... (``live.LiveViews``
combines them; ``registry.VIEWS`` lists them; ``base.RunView`` is what each one is).

Each view is a QWidget over one ``app.state.run_state.RunState``: it creates its plot items once
and, in ``refresh()``, feeds them with ``setData`` / ``setImage`` from the state's buffers,
only when the state's version counters moved. Images are row-major (set here, once, for the
whole process): ``image[row, column]`` with rows along the view's vertical axis.

The package itself imports no view: the setup panels use ``app.views.jobs`` without pulling
in the views, so a view that fails to import leaves the rest of the window working (the
main window imports ``app.views.live`` defensively).
"""

import pyqtgraph as pg

pg.setConfigOptions(imageAxisOrder="row-major", antialias=False)

__all__: list[str] = []
