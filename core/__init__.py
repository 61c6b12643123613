"""Fieldscope's numerical core.

Qt-free by design. Modules that the GUI process also uses (config, grid, spectra,
estimators, loaders, run-store reader, numpy references) must not import
TensorFlow at import time; TensorFlow lives in the modules that build densities,
transforms and samplers (``core.engine.fft`` among them).
"""

__version__ = "0.1.0"
