"""Runs on disk: ``run_store`` (the Zarr store in ArviZ layout: writer, reader, checkpoints;
the reader owns the layout), ``run_lock`` (one writer per run directory), ``run_summary``
(the summary table of a run) and ``diagnostics`` (R-hat, ESS, field and k-shell summaries).
"""

__all__: list[str] = []
