"""The validated arrays of a field run: data, mask, noise and truth, from the config's
references (see ``core.io`` for the reference rule).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from core.io.arrays import LoadedArray, LoadError
from core.io.formats import loader_for
from core.io.npy import NpyLoader

__all__ = ['FieldInputs', 'is_file_reference', 'load_field_inputs']

@dataclass(frozen=True, eq=False)
class FieldInputs:
    """The validated arrays of a field run (see ``load_field_inputs``).

    data         3-D real array: the file's float dtype kept (memory-mapped read-only
                 for a large .npy); integers kept as counts for poisson_lognormal,
                 converted to float64 for gaussian.
    mask         bool array of the data shape (True = observed), or None.
    noise_map    float64 array of the data shape, or None.
    noise_sigma  the scalar noise sd (config's data.noise_sigma, or a 0-d noise_map
                 array), or None.
    truth        the data file's "truth" array (same shape, real) when it has one.
    box_size_from_file, unit   what the data file says about its box, or None.
    notes        things the user may want to know (conversions, disagreements with the
                 config, a "truth" array that was not usable).
    """

    data: np.ndarray
    mask: np.ndarray | None
    noise_map: np.ndarray | None
    noise_sigma: float | None
    truth: np.ndarray | None
    box_size_from_file: tuple[float, float, float] | None
    unit: str | None
    data_path: str = ""
    notes: tuple[str, ...] = ()



# --------------------------------------------------------------------------- field runs


_REF_FILE = re.compile(r"^(?P<file>.+?\.(?:npy|npz|h5|hdf5|fits|fit|fts))(?::(?P<key>.*))?$",
                       re.IGNORECASE)


def is_file_reference(ref: str) -> bool:
    """Whether ``data.mask`` / ``data.noise_map`` text names a file ("mask.npy",
    "maps.fits:MASK") rather than an array in the data file (module docstring)."""
    return isinstance(ref, str) and _REF_FILE.match(ref) is not None


def _load_reference(config, data_path: str, ref: str, setting: str) -> LoadedArray:
    """Load ``data.mask`` / ``data.noise_map`` by the rule in the module docstring."""
    match = _REF_FILE.match(ref)
    if match is None:     # an array in the data file
        loader = loader_for(data_path)
        if isinstance(loader, NpyLoader):
            raise LoadError(f"{setting} = {ref!r}: the data file {data_path} is a single "
                            ".npy array, so it has no array of that name; give a file "
                            "(e.g. 'mask.npy', or 'other.npz:key')")
        try:
            return loader.load(data_path, ref, attributes=False)
        except LoadError as exc:
            raise LoadError(f"{setting} = {ref!r}: {exc} (a name is an array in the data "
                            "file; a file path must end in .npy, .npz, .h5, .hdf5 or "
                            ".fits, with ':key' to pick an array)") from None
    path = str(config.resolve_path(match.group("file")))
    key = match.group("key")
    loader = loader_for(path)
    if key is not None and not key:
        raise LoadError(f"{setting} = {ref!r}: nothing after ':'; give the array's name "
                        "or drop the ':'")
    if key is not None and isinstance(loader, NpyLoader):
        raise LoadError(f"{setting} = {ref!r}: a .npy file holds one array; drop ':{key}'")
    try:
        return loader.load(path, key, attributes=False)
    except LoadError as exc:
        raise LoadError(f"{setting} = {ref!r}: {exc}") from None


def _real_array(loaded: LoadedArray, setting: str, role: str) -> str:
    """Refuse dtypes that cannot be a real field; return where-text for messages."""
    where = f"{loaded.path}: array {loaded.name!r} ({setting})"
    dtype = loaded.array.dtype
    reasons = {
        "c": "is complex; Fieldscope's fields are real (save the real part, or the real-"
             "space field, as a float array)",
        "O": "holds Python objects",
        "U": "holds strings, not numbers", "S": "holds strings, not numbers",
        "V": "is a record / raw-bytes dtype, not numbers",
        "M": "holds dates, not numbers", "m": "holds time intervals, not numbers",
    }
    if dtype.kind in reasons:
        raise LoadError(f"{where}: dtype {dtype} {reasons[dtype.kind]}; {role} must be a "
                        "real (float or integer) array")
    return where


def _same_shape(where: str, arr: np.ndarray, shape, what: str):
    if arr.shape != shape:
        raise LoadError(f"{where}: shape {arr.shape} does not match the data shape {shape}"
                        f"; the {what} must have the data's shape")


def _field_data(loaded: LoadedArray, likelihood: str, notes: list[str]) -> np.ndarray:
    where = _real_array(loaded, "data.key", "the data")
    arr = loaded.array
    if arr.dtype.kind == "b":
        raise LoadError(f"{where}: dtype bool: true/false values look like a mask, not "
                        "measurements; set data.key to the measured values and data.mask to "
                        "this array")
    if arr.ndim != 3:
        hint = ""
        if arr.ndim > 3 and sum(n != 1 for n in arr.shape) <= 3:
            hint = ("; save it without its length-1 axes (such as a FITS cube's "
                    "degenerate Stokes or frequency axis)")
        raise LoadError(f"{where}: the field model needs a 3-D array (n0, n1, n2), got "
                        f"shape {arr.shape} ({arr.ndim}-D){hint}")
    if arr.size == 0:
        raise LoadError(f"{where}: shape {arr.shape} is empty (an axis of length 0)")
    if arr.dtype.kind in "iu":
        if likelihood == "poisson_lognormal":
            notes.append(f"data {loaded.name!r}: integer counts ({arr.dtype}) for the "
                         "poisson_lognormal likelihood")
        else:
            notes.append(f"data {loaded.name!r}: integers ({arr.dtype}) converted to float64")
            arr = arr.astype(np.float64)
    return arr


def _field_mask(loaded: LoadedArray, shape) -> np.ndarray:
    where = _real_array(loaded, "data.mask", "the mask")
    m = loaded.array
    _same_shape(where, m, shape, "mask")
    if m.dtype != bool:
        bad = ~((m == 0) | (m == 1))
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            raise LoadError(f"{where}: not boolean-like: {int(bad.sum())} value(s) are "
                            f"neither 0 nor 1 (first at {index}: {m[index].item()!r}); a mask is "
                            "bool (True = observed) or 0/1")
        m = m != 0
    else:
        m = np.asarray(m)
    if not m.any():
        raise LoadError(f"{where}: no voxel is observed (the mask is False everywhere; "
                        "True = observed)")
    return m


def _field_noise(loaded: LoadedArray, shape) -> tuple[np.ndarray | None, float | None]:
    where = _real_array(loaded, "data.noise_map", "the noise map")
    arr = loaded.array
    if arr.dtype.kind == "b":
        raise LoadError(f"{where}: dtype bool: a noise map holds noise sd values (numbers), "
                        "not true/false")
    if arr.ndim == 0:      # one sd for every voxel (the demo data sets store it so)
        sigma = float(arr)
        if not (math.isfinite(sigma) and sigma > 0):
            raise LoadError(f"{where}: the noise sd {sigma!r} must be positive and finite")
        return None, sigma
    _same_shape(where, arr, shape, "noise map (or a 0-d noise sd)")
    return np.asarray(arr, dtype=np.float64), None


def _find_truth(loader, path: str, key: str) -> str | None:
    if isinstance(loader, NpyLoader):
        return None
    names = {i.name.lower(): i.name for i in loader.list_arrays(path)}   # FITS: "TRUTH"
    parent = key.strip("/").rpartition("/")[0]
    for name in ([f"{parent}/truth"] if parent else []) + ["truth"]:
        if name in names and name != key.strip("/").lower():
            return names[name]
    return None


def load_field_inputs(config) -> FieldInputs:
    """Load and validate the arrays of a field run described by ``config``
    (a ``core.config.RunConfig`` with ``model.kind = "field"``).

    ``data.path`` resolves against the config file's folder and ``data.key`` picks the
    array; ``data.mask`` / ``data.noise_map`` follow the rule in the module docstring.
    Checks: data real and 3-D with no empty axis (bool, complex, object, string
    dtypes refused with the reason); mask and noise map of the data's shape, the mask
    0/1 or bool with at least one observed voxel. Value checks that depend on the
    likelihood (noise sd > 0 at observed voxels, counts >= 0, NaN handling) are left
    to ``core.field.observations.Observations.create``.
    """
    if getattr(getattr(config, "model", None), "kind", None) != "field":
        raise LoadError(f"config: load_field_inputs needs model.kind = 'field', got "
                        f"{getattr(getattr(config, 'model', None), 'kind', None)!r} "
                        "(use load_series_inputs for the integral model)")
    data_cfg = config.data
    path = str(config.data_path)
    loader = loader_for(path)
    likelihood = config.likelihood.kind if config.likelihood is not None else "gaussian"
    notes: list[str] = []
    loaded = loader.load(path, data_cfg.key)
    data = _field_data(loaded, likelihood, notes)

    mask = None
    if data_cfg.mask is not None:
        mask = _field_mask(_load_reference(config, path, data_cfg.mask, "data.mask"),
                           data.shape)
    noise_map, noise_sigma = None, data_cfg.noise_sigma
    if data_cfg.noise_map is not None:
        noise_map, noise_sigma = _field_noise(
            _load_reference(config, path, data_cfg.noise_map, "data.noise_map"), data.shape)

    truth = None
    truth_key = _find_truth(loader, path, loaded.name)
    if truth_key is not None:
        t = loader.load(path, truth_key, attributes=False).array
        if t.dtype.kind not in "iuf" or t.shape != data.shape:
            notes.append(f"array {truth_key!r} ({t.dtype} {t.shape}) is not a real array of "
                         f"the data shape {data.shape}; not shown as the truth")
        else:
            truth = t

    if loaded.box_size is not None and config.grid is not None and \
            tuple(loaded.box_size) != tuple(config.grid.box_size):
        notes.append(f"the data file's box_size {loaded.box_size} differs from grid.box_size "
                     f"{tuple(config.grid.box_size)} in the config")
    if loaded.unit is not None and config.grid is not None and config.grid.unit and \
            loaded.unit != config.grid.unit:
        notes.append(f"the data file's unit {loaded.unit!r} differs from grid.unit "
                     f"{config.grid.unit!r} in the config")
    return FieldInputs(data=data, mask=mask, noise_map=noise_map, noise_sigma=noise_sigma,
                       truth=truth, box_size_from_file=loaded.box_size, unit=loaded.unit,
                       data_path=path, notes=tuple(notes))


