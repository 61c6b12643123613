"""Fieldscope's numerical core.

Every subpackage but ``core.engine`` is numpy/scipy only, and none imports Qt (the
import-linter contracts in pyproject.toml enforce both):

    config/     the run config: schema, parse (ConfigError names the key), TOML writer
    field/      the field model in numpy: grid, P(k) families, P(k) estimator,
                observations, synthetic data
    integral/   the 1-D integral model: quadrature, spec + overflow guard, reference
                posterior, discretisation report
    reference/  exact answers: the Wiener filter, the field's exact posterior of a run
    io/         data files, one module per format; a run's inputs; series; P(k) tables
    store/      the run store (writer, reader), run lock, run summary, MCMC diagnostics
    run/        what engine and clients share: resource estimates, the spawned engine process
    demo.py     the built-in demos
    engine/     the only TensorFlow/TFP package: FFTs and their gradients, densities,
                kernels, the sampling engine
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
