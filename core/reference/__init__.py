"""Exact answers the samplers are checked against: ``wiener`` (the Gaussian posterior of a
field: closed form, conjugate gradients, dense reference, posterior samples) and
``field_posterior`` (that posterior for a run's config, in the stored field's space).
"""

__all__: list[str] = []
