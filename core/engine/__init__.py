"""The only package that imports TensorFlow and TensorFlow Probability.

``fft`` (3-D real FFTs with gradients), ``fft_composite`` and ``fft_check`` (an
independent composite FFT and the self-check of ``fieldscope check``), ``field_density``
and ``integral_density`` (the TF log-densities), ``models`` (config to model), ``kernels``
(HMC with a looped or unrolled leapfrog), ``engine`` (the sampling engine: chunks, adaptation,
checkpoints, events), ``serve`` (the child side of the engine process).

Importing the package itself imports nothing heavy; import the modules.
"""

__all__: list[str] = []
