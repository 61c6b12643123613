"""The data a resumed run reads now against the data its store kept, for a store written
before input fingerprints were kept (``core.run.input_files``): such a store has no record of
its files, but it holds the observed data it sampled (``observed_data``), so a data file
replaced since is still told apart (issue #33: resume sampled another posterior, exit 0).

numpy and ``core.io`` only: ``resume`` checks it before TensorFlow loads.
"""

from __future__ import annotations

import numpy as np

from core.store.run_store import RunReader

__all__ = ["stored_data_changes"]

#: relative agreement that counts as the same data (the store keeps float64 of what was read)
RTOL = 1e-6


def _same(kept: np.ndarray, now: np.ndarray) -> bool:
    kept, now = np.asarray(kept, float), np.asarray(now, float)
    if kept.shape != now.shape:
        return False
    nan = np.isnan(kept)
    if not np.array_equal(nan, np.isnan(now)):
        return False
    return bool(np.allclose(kept[~nan], now[~nan], rtol=RTOL, atol=0.0))


def _field_now(config) -> dict[str, np.ndarray]:
    from core.field.observations import with_nonfinite_masked
    from core.io import load_field_inputs

    inputs = load_field_inputs(config)
    data = np.asarray(inputs.data, float)
    mask = with_nonfinite_masked(data, inputs.mask)
    mask = np.ones(data.shape, bool) if mask is None else np.asarray(mask, bool)
    return {"data": np.where(mask, data, np.nan), "mask": mask}


def _series_now(config) -> dict[str, np.ndarray]:
    from core.io import load_series_inputs

    series = load_series_inputs(config)
    return {"t": np.asarray(series.t, float), "y": np.asarray(series.y, float)}


def stored_data_changes(run_dir, config) -> list[str]:
    """One line per observed array (field: data, mask; integral: t, y) whose values the data
    file gives now differ from those the run's store kept; [] when they agree, or when the run
    has no such arrays (a model file's own data). A file that cannot be read now is a line."""
    reader = RunReader(run_dir)
    kind = getattr(config.model, "kind", None)
    names = {"field": ("data", "mask"), "integral": ("t", "y")}.get(kind)
    if names is None or getattr(config.model, "file", None):
        return []
    try:
        kept = {name: reader.observed(name) for name in names}
    except KeyError:                 # a store without them (a model file's own data)
        return []
    try:
        now = _field_now(config) if kind == "field" else _series_now(config)
    except (ValueError, OSError) as err:        # LoadError, ConfigError: they name the file
        return [f"the data cannot be read now ({err})"]
    path = config.data.path
    return [f"{path}: its {name} differ from the {name} the run's store kept (the run began with "
            "other data; this store is older than the input fingerprints)"
            for name in names if not _same(kept[name], now[name])]
