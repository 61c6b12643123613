"""The validated arrays of a field run: data, mask, noise and truth, from the config's
references (see ``core.io`` for the reference rule).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from core.io.arrays import ArrayInfo, LoadedArray, LoadError
from core.io.formats import array_info, loader_for
from core.io.npy import NpyLoader

__all__ = ['FieldInputs', 'check_data_header', 'is_file_reference', 'load_field_inputs', 'load_observations',
           'load_reference']

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


def referenced_file(ref: str) -> str | None:
    """The file name a ``data.mask`` / ``data.noise_map`` text names (without ':KEY'), or None
    for an array in the data file."""
    match = _REF_FILE.match(ref) if isinstance(ref, str) else None
    return None if match is None else match.group("file")


class _Reference(NamedTuple):
    """Where ``data.mask`` / ``data.noise_map`` (or the data) points: resolved, not read."""

    loader: object
    path: str
    key: str | None
    setting: str        # the config key ("data.mask"), or "" for the data itself
    ref: str
    embedded: bool      # an array in the data file (a name, not a file)

    def wrap(self, exc: LoadError) -> LoadError:
        if not self.setting:
            return exc
        if self.embedded:
            return LoadError(f"{self.setting} = {self.ref!r}: {exc} (a name is an array in "
                             "the data file; a file path must end in .npy, .npz, .h5, .hdf5 "
                             "or .fits, with ':key' to pick an array)")
        return LoadError(f"{self.setting} = {self.ref!r}: {exc}")

    def header(self) -> ArrayInfo:
        """The array's header (shape, dtype); no data read."""
        try:
            return array_info(self.path, self.key)
        except LoadError as exc:
            raise self.wrap(exc) from None

    def load(self, attributes: bool = False) -> LoadedArray:
        try:
            return self.loader.load(self.path, self.key, attributes=attributes)
        except LoadError as exc:
            raise self.wrap(exc) from None


def _reference(config, data_path: str, ref: str, setting: str) -> _Reference:
    """Resolve ``data.mask`` / ``data.noise_map`` by the rule in the module docstring."""
    match = _REF_FILE.match(ref)
    if match is None:     # an array in the data file
        loader = loader_for(data_path)
        if isinstance(loader, NpyLoader):
            raise LoadError(f"{setting} = {ref!r}: the data file {data_path} is a single "
                            ".npy array, so it has no array of that name; give a file "
                            "(e.g. 'mask.npy', or 'other.npz:key')")
        return _Reference(loader, data_path, ref, setting, ref, True)
    path = str(config.resolve_path(match.group("file")))
    key = match.group("key")
    loader = loader_for(path)
    if key is not None and not key:
        raise LoadError(f"{setting} = {ref!r}: nothing after ':'; give the array's name "
                        "or drop the ':'")
    if key is not None and isinstance(loader, NpyLoader):
        raise LoadError(f"{setting} = {ref!r}: a .npy file holds one array; drop ':{key}'")
    return _Reference(loader, path, key, setting, ref, False)


_NOT_REAL = {
    "c": "is complex; Fieldscope's fields are real (save the real part, or the real-"
         "space field, as a float array)",
    "O": "holds Python objects",
    "U": "holds strings, not numbers", "S": "holds strings, not numbers",
    "V": "is a record / raw-bytes dtype, not numbers",
    "M": "holds dates, not numbers", "m": "holds time intervals, not numbers",
}


def _where(path: str, name: str, setting: str) -> str:
    return f"{path}: array {name!r} ({setting})"


def _real_dtype(where: str, dtype: np.dtype, role: str) -> None:
    """Refuse dtypes that cannot be a real field."""
    if dtype.kind in _NOT_REAL:
        raise LoadError(f"{where}: dtype {dtype} {_NOT_REAL[dtype.kind]}; {role} must be a "
                        "real (float or integer) array")


def _real_array(loaded: LoadedArray, setting: str, role: str) -> str:
    """Refuse dtypes that cannot be a real field; return where-text for messages."""
    where = _where(loaded.path, loaded.name, setting)
    _real_dtype(where, loaded.array.dtype, role)
    return where


def _same_shape(where: str, shape, data_shape, what: str):
    if tuple(shape) != tuple(data_shape):
        raise LoadError(f"{where}: shape {tuple(shape)} does not match the data shape "
                        f"{tuple(data_shape)}; the {what} must have the data's shape")


def check_data_header(where: str, shape, dtype: np.dtype) -> None:
    """What the data's header alone shows to be wrong (dtype, dimensions)."""
    _real_dtype(where, dtype, "the data")
    if dtype.kind == "b":
        raise LoadError(f"{where}: dtype bool: true/false values look like a mask, not "
                        "measurements; set data.key to the measured values and data.mask to "
                        "this array")
    if len(shape) != 3:
        hint = ""
        if len(shape) > 3 and sum(n != 1 for n in shape) <= 3:
            hint = ("; save it without its length-1 axes (such as a FITS cube's "
                    "degenerate Stokes or frequency axis)")
        raise LoadError(f"{where}: the field model needs a 3-D array (n0, n1, n2), got "
                        f"shape {tuple(shape)} ({len(shape)}-D){hint}")
    if math.prod(shape) == 0:
        raise LoadError(f"{where}: shape {tuple(shape)} is empty (an axis of length 0)")


def _check_mask_header(where: str, shape, dtype: np.dtype, data_shape) -> None:
    _real_dtype(where, dtype, "the mask")
    _same_shape(where, shape, data_shape, "mask")


def _check_noise_header(where: str, shape, dtype: np.dtype, data_shape) -> None:
    _real_dtype(where, dtype, "the noise map")
    if dtype.kind == "b":
        raise LoadError(f"{where}: dtype bool: a noise map holds noise sd values (numbers), "
                        "not true/false")
    if len(shape) != 0:      # a 0-d array is one sd for every voxel
        _same_shape(where, shape, data_shape, "noise map (or a 0-d noise sd)")


def _field_data(loaded: LoadedArray, likelihood: str, notes: list[str]) -> np.ndarray:
    where = _where(loaded.path, loaded.name, "data.key")
    arr = loaded.array
    check_data_header(where, arr.shape, arr.dtype)
    if arr.dtype.kind in "iu":
        if likelihood == "poisson_lognormal":
            notes.append(f"data {loaded.name!r}: integer counts ({arr.dtype}) for the "
                         "poisson_lognormal likelihood")
        else:
            notes.append(f"data {loaded.name!r}: integers ({arr.dtype}) converted to float64")
            arr = arr.astype(np.float64)
    return arr


def _field_mask(loaded: LoadedArray, shape) -> np.ndarray:
    where = _where(loaded.path, loaded.name, "data.mask")
    m = loaded.array
    _check_mask_header(where, m.shape, m.dtype, shape)
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
    where = _where(loaded.path, loaded.name, "data.noise_map")
    arr = loaded.array
    _check_noise_header(where, arr.shape, arr.dtype, shape)
    if arr.ndim == 0:      # one sd for every voxel (the demo data sets store it so)
        sigma = float(arr)
        if not (math.isfinite(sigma) and sigma > 0):
            raise LoadError(f"{where}: the noise sd {sigma!r} must be positive and finite")
        return None, sigma
    return np.asarray(arr, dtype=np.float64), None


def _check_noise_values(where: str, noise: np.ndarray, data: np.ndarray,
                        mask: np.ndarray | None) -> None:
    """Every observed voxel (in the mask, with finite data) needs a noise sd > 0 (the
    gaussian likelihood divides by it); masked voxels may hold anything."""
    observed = np.isfinite(data)
    if mask is not None:
        observed &= mask
    bad = observed & ~(np.isfinite(noise) & (noise > 0))
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise LoadError(f"{where}: {int(bad.sum())} observed voxel(s) have a noise sd that is "
                        f"not positive and finite (first at {index}: {float(noise[index])!r}); "
                        "a noise map holds each voxel's noise sd (> 0), masked voxels may "
                        "hold anything")


def _find_truth(loader, path: str, key: str) -> str | None:
    if isinstance(loader, NpyLoader):
        return None
    names = {i.name.lower(): i.name for i in loader.list_arrays(path)}   # FITS: "TRUTH"
    parent = key.strip("/").rpartition("/")[0]
    for name in ([f"{parent}/truth"] if parent else []) + ["truth"]:
        if name in names and name != key.strip("/").lower():
            return names[name]
    return None


def load_field_inputs(config, loaded: LoadedArray | None = None) -> FieldInputs:
    """Load and validate the arrays of a field run described by ``config``
    (a ``core.config.RunConfig`` with ``model.kind = "field"``).

    ``loaded``: the data array as the caller already read it from the config's data file
    and key (the GUI's Data panel): it is checked like a fresh read and not read again.

    ``data.path`` resolves against the config file's folder and ``data.key`` picks the
    array; ``data.mask`` / ``data.noise_map`` follow the rule in the module docstring.
    Checks: data real and 3-D with no empty axis (bool, complex, object, string
    dtypes refused with the reason); mask and noise map of the data's shape, the mask
    0/1 or bool with at least one observed voxel; for the gaussian likelihood, a noise
    map's sd > 0 and finite at every observed voxel (in the mask, finite data). Every
    array's shape and dtype are checked from its header before any array is read.
    Other value checks that depend on the likelihood (counts >= 0, NaN handling) are
    left to ``core.field.observations.Observations.create``.
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

    # Every header first: an array of the wrong shape is refused before any array is read
    # (a 34 KB sparse HDF5 mask or a small compressed .npz member can unpack to gigabytes).
    head = array_info(path, data_cfg.key)
    check_data_header(_where(path, head.name, "data.key"), head.shape, head.dtype)
    shape = tuple(head.shape)
    refs = {}
    for setting, ref, check in (("data.mask", data_cfg.mask, _check_mask_header),
                                ("data.noise_map", data_cfg.noise_map, _check_noise_header)):
        if ref is None:
            continue
        refs[setting] = r = _reference(config, path, ref, setting)
        info = r.header()
        check(_where(r.path, info.name, setting), info.shape, info.dtype, shape)
    truth_key = _find_truth(loader, path, head.name)
    if truth_key is not None:     # optional: a truth that cannot be used is a note
        try:
            info = array_info(path, truth_key)
        except LoadError as exc:
            notes.append(f"array {truth_key!r} is not shown as the truth: {exc}")
            truth_key = None
        else:
            if info.dtype.kind not in "iuf" or tuple(info.shape) != shape:
                notes.append(f"array {truth_key!r} ({info.dtype} {info.shape}) is not a real "
                             f"array of the data shape {shape}; not shown as the truth")
                truth_key = None

    if loaded is None or Path(loaded.path).resolve() != Path(path).resolve():
        loaded = loader.load(path, data_cfg.key)
    data = _field_data(loaded, likelihood, notes)
    mask = None
    if "data.mask" in refs:
        mask = _field_mask(refs["data.mask"].load(), data.shape)
    noise_map, noise_sigma = None, data_cfg.noise_sigma
    if "data.noise_map" in refs:
        noise = refs["data.noise_map"].load()
        noise_map, noise_sigma = _field_noise(noise, data.shape)
        if noise_map is not None and likelihood == "gaussian":
            _check_noise_values(_where(noise.path, noise.name, "data.noise_map"), noise_map,
                                data, mask)
    truth = None
    if truth_key is not None:
        t = loader.load(path, truth_key, attributes=False).array
        if t.dtype.kind in "iuf" and t.shape == data.shape:
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




def load_reference(config, setting: str) -> LoadedArray:
    """The array ``data.mask`` or ``data.noise_map`` (``setting``) of ``config`` names, as
    stored: its header checked against the data's (dtype real, the data's shape; a 0-d
    noise sd allowed) before it is read, its values not checked (``load_field_inputs``
    does that). For tools that build a mask from a noise map a run would refuse."""
    checks = {"data.mask": _check_mask_header, "data.noise_map": _check_noise_header}
    if setting not in checks:
        raise LoadError(f"config: {setting!r} is not a reference (data.mask or data.noise_map)")
    ref = getattr(config.data, setting.split(".", 1)[1])
    if not ref:
        raise LoadError(f"{setting}: not set")
    path = str(config.data_path)
    head = array_info(path, config.data.key)
    r = _reference(config, path, ref, setting)
    info = r.header()
    checks[setting](_where(r.path, info.name, setting), info.shape, info.dtype, tuple(head.shape))
    return r.load(attributes=False)


def exact_slab(config) -> tuple[int, int] | None:
    """(axis, missing planes) where a field config's data with its mask (NaN voxels masked too)
    and noise are a slab under which the conditional preconditioner is exact
    (``core.field.observations.exact_slab``: the engine's rule, read before a run), else None.
    Raises LoadError as ``load_field_inputs``."""
    from core.field.observations import exact_slab as rule
    from core.field.observations import with_nonfinite_masked

    inputs = load_field_inputs(config)
    return rule(with_nonfinite_masked(inputs.data, inputs.mask), config.likelihood.kind, inputs.noise_map is None)


def load_observations(config):
    """The data of a field run as its likelihood sees them: ``(inputs, observations, grid)``
    with ``inputs`` from ``load_field_inputs(config)``, ``observations`` a
    ``core.field.observations.Observations`` built with the config's likelihood (its kind,
    mask, noise map or noise sd, field mean, smoothing scale, mean count) and ``grid`` the
    data's ``core.field.grid.Grid``. The one place a config becomes Observations (the
    engine's model and the Prior panel's fit both use it)."""
    from core.field.grid import Grid
    from core.field.observations import Observations

    inputs = load_field_inputs(config)
    lik = config.likelihood
    kwargs = dict(kind=lik.kind, mask=inputs.mask, field_mean=lik.field_mean,
                  smoothing_scale=lik.smoothing_scale or None, name=str(config.data_path))
    if lik.kind == "gaussian":
        if inputs.noise_map is not None:
            kwargs["noise_map"] = inputs.noise_map
        else:  # from the config, or a single number stored as the noise map
            kwargs["noise_sigma"] = (inputs.noise_sigma if inputs.noise_sigma is not None
                                     else config.data.noise_sigma)
    elif lik.kind == "python":      # the model file's own noise; a noise map is its data["noise"]
        if inputs.noise_map is not None:
            kwargs["noise_map"] = inputs.noise_map
    else:
        kwargs["mean_count"] = lik.mean_count
    observations = Observations.create(inputs.data, **kwargs)
    return inputs, observations, Grid(inputs.data.shape, config.grid.box_size, config.grid.unit)
