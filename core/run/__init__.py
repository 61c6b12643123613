"""What the engine and its clients share, TensorFlow-free: ``resources`` (memory and time
estimates of a run) and ``engine_process`` (the engine in its own spawned process, driven
through a pipe).
"""

__all__: list[str] = []
