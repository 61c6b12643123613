"""The GUI's model, plain Python (no Qt widgets, no TensorFlow): ``config_state`` (the run
config being edited, with its errors per key) and ``run_state`` (the buffers of a run's
draws and statistics, fed by engine events or a run store).
"""

__all__: list[str] = []
