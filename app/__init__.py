"""Fieldscope's desktop application and command line.

The GUI process never imports TensorFlow: the sampler runs in its own spawned
engine process (TensorFlow and Mesa's software OpenGL crash when they share a
process, and a TensorFlow kernel abort must not take the GUI down). ``app.cli``
alone may run ``core.engine`` in-process (the headless ``fieldscope run``).

    state/      the GUI's model, plain Python: config state, run state
    panels/     the setup panels, one module per panel, and the binding helpers
    views/      the live views of a run, their jobs (worker threads) and style
    main_window.py, engine_client.py, gui.py, cli.py
"""

__all__: list[str] = []
