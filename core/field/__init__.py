"""The field model in numpy: ``grid`` (k-vectors, shells), ``power_spectrum`` (P(k) families),
``power_estimator`` (shell-averaged P(k) of a field), ``observations`` (data, mask, noise,
likelihood kinds), ``synthetic`` (Gaussian random fields and demo data sets), ``mask_tools`` (masks from NaNs,
thresholds and boxes; the mask file next to a config).

Conventions (grid, P(k) normalisation, the k = 0 mode) are stated in ``grid`` and
``power_spectrum`` and in the README.
"""

__all__: list[str] = []
