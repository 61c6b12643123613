"""A fresh run config for a data file: defaults that fit the file, nothing of another config.

``config_for_data(path, key=None, *, box_size=None, unit=None)`` reads the file's header and
metadata through ``core.io`` and returns ``DataConfig(document, notes)``: ``document`` the
config as nested dicts in ``core.config``'s layout (``core.config.config_from_dict`` validates
it, ``text()`` writes it as TOML with ``core.config.to_toml``), ``notes`` one line for every
choice the user may want to check. Relative paths in the document are relative to the data
file's folder (the config is meant to be saved next to the data: ``<data stem>.toml``).

What is chosen, in order:

data.key      the array given; else the only 3-D real array that is not a mask, noise or
              truth; else the one named data, field, density, delta, map, cube, signal
              (case-insensitive); else a ``LoadError`` listing the 3-D arrays.
data.mask     an array of the file named mask, observed, valid, footprint or selection, of
              the data's shape, bool or 0/1 with a voxel observed; no mask otherwise. NaN or
              infinite data values need no mask: the likelihood masks them
              (``core.field.observations``), and a note says how many.
noise         an array named noise, noise_map, sigma, noise_sd, rms or error: of the data's
              shape, ``data.noise_map`` (a 0-d one, ``data.noise_sigma``); else a number under
              one of those names in the file's metadata (``LoadedArray.attrs``); else an
              estimate, stated as one in the notes (``estimate_noise_sigma``) and written
              unrounded: the white floor N of the data's P(k) in voxel units (box = shape, so
              N = sigma^2), fitted jointly with the signal's P(k) by
              ``core.field.prior_fit.fit_families`` (every family, a gamma likelihood of the
              shell powers, the mask's shell mixing) when the chosen family's fit is not
              flagged and gives sigma to better than 25 %; else sigma = 1.4826 MAD(h), h the
              second differences x[i-1] - 2 x[i] + x[i+1] along each axis over sqrt(6) (white
              noise of sd sigma gives h of sd sigma; signal on the voxel scale adds to it, so
              it is an upper bound).
grid          box_size and unit from the file (``LoadedArray.box_size`` / ``unit``: .npz
              members, HDF5 attributes, FITS CDELT/CUNIT) unless given; when neither,
              ``grid.box_size`` is left out (``DataConfig.box_size`` is None) and the caller
              asks the user (the desktop app does).
prior         With a box size: k_pivot a round number near sqrt(k_f k_Ny) (inside the
              data's k range, so that amplitude and index are not strongly correlated); every
              family fitted to the data's P(k) (``core.field.prior_fit.fit_families``; the
              noise fitted again when it was estimated, held when the file states it) and the
              one of lowest BIC written: the index sampled, normal(fitted, 0.5), the others
              fixed at their fitted values (rounded to their errors). When no fit is possible
              or the best one is flagged (chi^2 / dof >> 1: no family describes the data), a
              power law with index normal(-2, 0.5) and the amplitude that gives the prior the
              data's variance less the noise's, with a note that says why. Without a box
              size: ``core.config``'s defaults, and a note.
likelihood, field, sampler   ``core.config.new_config``'s values (the sampler: MCLMC with
              the conditional preconditioner, ``NEW_CONFIG_SAMPLERS["field"]``), but MAMS
              (``COUPLED_HYPER_SAMPLER``) where P(k) hyperparameters are sampled and a mask,
              NaN voxels or a noise map couple the Fourier modes, with a note that says why;
              a mask (NaN voxels included) of whole planes along one axis with one noise
              level couples nothing under the conditional preconditioner, which is exact
              there (``core.field.observations.slab_decouples``): MCLMC stays, with a note.

numpy only at import (scipy's optimiser is imported with ``core.field.prior_fit`` when a prior
is fitted). Problems with the file raise ``core.io.LoadError`` naming the file and the array.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from core.config.parse import config_from_dict, new_config
from core.config.schema import COUPLED_HYPER_SAMPLER, FIELD_DATA_EXTENSIONS
from core.config.writer import config_to_dict, to_toml
from core.field.observations import slab_decouples

__all__ = ["DataConfig", "config_for_data", "estimate_noise_sigma", "is_data_file",
           "DATA_NAMES", "MASK_NAMES", "NOISE_NAMES"]

#: names (lower case) that say an array is the data, when a file holds several 3-D arrays
DATA_NAMES = ("data", "field", "density", "delta", "map", "cube", "signal", "primary")
#: names of a mask array (True / 1 = observed)
MASK_NAMES = ("mask", "observed", "valid", "footprint", "selection")
#: names of a noise map (array) or noise sd (number, array or metadata)
NOISE_NAMES = ("noise", "noise_map", "sigma", "noise_sigma", "noise_sd", "rms", "error")
_TRUTH_NAMES = ("truth", "true", "signal_true")
#: MAD to sd for a normal variable
_MAD_TO_SD = 1.482602218505602
#: at most this many second differences per axis go into the noise estimate (evenly spaced)
_MAX_ESTIMATE_SAMPLES = 4_000_000
#: the index prior's width around the fitted index (core.config's default width)
_INDEX_SCALE = 0.5


class DataConfig(NamedTuple):
    """``config_for_data``'s result: the config document and the notes about its choices."""

    document: dict[str, dict[str, Any]]
    notes: tuple[str, ...]

    @property
    def box_size(self):
        """The box size the document holds (a number or three), None when the file states none."""
        return self.document["grid"].get("box_size")

    def text(self) -> str:
        """The document as TOML, the notes as comments at the top."""
        lines = ["# Fieldscope run configuration, made from the data file "
                 f"{_comment(self.document['data']['path'])} (File > New from data)"]
        lines += [f"# - {_comment(note)}" for note in self.notes]
        body = to_toml(self.document)
        if self.box_size is None:
            body = body.replace("[grid]\n", "[grid]\n# box_size = ...  # not stated by the data "
                                "file: the box's side length (one number or three)\n", 1)
        return "\n".join(lines) + "\n\n" + body


def _comment(text: str) -> str:
    """``text`` for one TOML comment line: a newline or another control character (a file
    name may hold one) written as its escape, ``\\n``, so that it cannot end the comment."""
    return "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii")
                   for c in str(text))


def is_data_file(path) -> bool:
    """Whether ``path`` names a gridded data file by its extension (.npy .npz .h5 .hdf5 .fits
    .fit .fts) rather than a config or a run directory."""
    return os.path.splitext(os.fspath(path))[1].lower() in FIELD_DATA_EXTENSIONS


def _named(infos, names) -> list:
    """The arrays whose name (its last path part, lower case) is one of ``names``, in
    ``names`` order."""
    by_name: dict[str, Any] = {}
    for info in infos:
        by_name.setdefault(info.name.strip("/").rpartition("/")[2].lower(), info)
    return [by_name[n] for n in names if n in by_name]


def _is_field_array(info) -> bool:
    return info.shape is not None and len(info.shape) == 3 and info.dtype.kind in "iuf" \
        and math.prod(info.shape) > 0


def _pick_data(path: str, infos, key) -> str | None:
    """The data array's key (None: the loader's own choice, for a .npy)."""
    if key is not None:
        return key
    if len(infos) == 1:
        return infos[0].name
    cubes = [i for i in infos if _is_field_array(i)]
    roles = {i.name for i in _named(cubes, MASK_NAMES + NOISE_NAMES + _TRUTH_NAMES)}
    plain = [i for i in cubes if i.name not in roles]
    if len(plain) == 1:
        return plain[0].name
    named = _named(plain or cubes, DATA_NAMES)
    if named:
        return named[0].name
    from core.io.arrays import LoadError

    listing = ", ".join(f"{i.name!r} {i.shape}" for i in (plain or cubes)[:12]) or "none"
    raise LoadError(f"{path}: holds {len(plain or cubes)} 3-D arrays and none is named "
                    f"{', '.join(DATA_NAMES[:-1])}; choose the data array ({listing})")


def _round(value: float, digits: int = 2) -> float:
    """``value`` to ``digits`` significant digits."""
    if not math.isfinite(value) or value == 0:
        return float(value)
    return float(round(value, digits - 1 - math.floor(math.log10(abs(value)))))


def _round_to_error(value: float, error: float) -> float:
    """``value`` to two significant digits of ``error`` (three of ``value`` when the error is
    not finite)."""
    if not math.isfinite(value) or value == 0:
        return float(value)
    if math.isfinite(error) and error > 0:
        return float(round(value, 1 - math.floor(math.log10(error))))
    return _round(value, 3)


def _noise_from_power(x: np.ndarray, ok: np.ndarray) -> tuple[float, float] | None:
    """(sigma, its sd) from the white floor of the data's P(k) (module docstring), or None
    when no family fits without a flag or the fit does not constrain the noise."""
    from core.field.grid import Grid
    from core.field.observations import Observations
    from core.field.prior_fit import PriorFitError, fit_families

    if min(x.shape) < 4:
        return None
    grid = Grid(x.shape, [float(n) for n in x.shape])       # voxel units: N = sigma^2
    values = np.where(ok, x, 0.0)
    start = _noise_from_differences(x, ok) or float(np.std(values[ok])) or 1.0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            observations = Observations.create(values, mask=ok, noise_sigma=start)
        choice = fit_families(observations, grid, 0.25, noise="fit")
    except (PriorFitError, ValueError):
        return None
    fit = choice.best
    if fit.flagged or not (math.isfinite(fit.noise_sigma_error)
                           and fit.noise_sigma_error < 0.25 * fit.noise_sigma):
        return None
    return fit.noise_sigma, fit.noise_sigma_error


def _noise_from_differences(x: np.ndarray, ok: np.ndarray) -> float | None:
    """1.4826 MAD of the second differences over sqrt(6) (module docstring), or None."""
    parts = []
    for axis in range(x.ndim):
        n = x.shape[axis]
        if n < 3:
            continue

        def cut(a, start, stop, axis=axis):
            index = [slice(None)] * a.ndim
            index[axis] = slice(start, stop)
            return a[tuple(index)]

        with np.errstate(invalid="ignore", over="ignore"):
            h = cut(x, 0, n - 2) - 2.0 * cut(x, 1, n - 1) + cut(x, 2, n)
        h = h[cut(ok, 0, n - 2) & cut(ok, 1, n - 1) & cut(ok, 2, n)]
        if h.size > _MAX_ESTIMATE_SAMPLES:
            h = h[:: h.size // _MAX_ESTIMATE_SAMPLES + 1]
        parts.append(h)
    if not parts or not sum(p.size for p in parts):
        return None
    h = np.concatenate(parts) / math.sqrt(6.0)
    sigma = _MAD_TO_SD * float(np.median(np.abs(h - np.median(h))))
    return sigma if math.isfinite(sigma) and sigma > 0 else None


def estimate_noise_sigma(data, observed=None) -> tuple[float, str] | None:
    """(sigma, how) for the white noise of ``data`` (module docstring): NaN, infinite and
    unobserved (``observed`` False) voxels are left out; ``how`` says which estimate. None
    when neither estimate is possible (no scatter at all, too few voxels)."""
    x = np.asarray(data, dtype=np.float64)
    ok = np.isfinite(x)
    if observed is not None:
        ok &= np.asarray(observed, bool)
    if not ok.any():
        return None
    estimate = _noise_from_power(x, ok)
    if estimate is not None:
        sigma, error = estimate
        return sigma, (f"the white floor of the data's P(k), fitted jointly with the signal's "
                       f"P(k) (a gamma likelihood of the shell powers; sd of the estimate "
                       f"{error:.2g})")
    sigma = _noise_from_differences(x, ok)
    if sigma is not None:
        return sigma, ("1.4826 x the MAD of the data's second differences; signal on the voxel "
                       "scale counts as noise there, so it is an upper bound")
    return None


def _boolean_like(array: np.ndarray) -> bool:
    if array.dtype == bool:
        return True
    if array.dtype.kind not in "iuf":
        return False
    return bool(np.all((array == 0) | (array == 1)))


def _find_mask(loader, path: str, infos, shape, notes: list[str]):
    """(key, mask array) of a usable mask array in the file, or (None, None)."""
    for info in _named(infos, MASK_NAMES):
        if info.shape is None or tuple(info.shape) != shape:
            notes.append(f"array {info.name!r} {info.shape} is not used as the mask: it does not "
                         f"have the data's shape {shape}")
            continue
        mask = loader.load(path, info.name, attributes=False).array
        if not _boolean_like(mask):
            notes.append(f"array {info.name!r} is not used as the mask: its values are not "
                         "true/false or 0/1")
            continue
        if not np.any(mask):
            notes.append(f"array {info.name!r} is not used as the mask: no voxel is observed in "
                         "it (true = observed)")
            continue
        return info.name, np.asarray(mask) != 0
    return None, None


def _find_noise(loader, path: str, infos, attrs: dict, shape, observed, notes: list[str]):
    """("noise_map", key) or ("noise_sigma", value) from the file, or None."""
    for info in _named(infos, NOISE_NAMES):
        if info.shape == () and info.dtype.kind in "iuf":
            value = float(loader.load(path, info.name, attributes=False).array)
            if math.isfinite(value) and value > 0:
                notes.append(f"noise: the file's {info.name!r} = {value!r} (one sd for every voxel)")
                return "noise_sigma", value
            notes.append(f"array {info.name!r} = {value!r} is not used as the noise sd: it is not "
                         "positive and finite")
            continue
        if info.shape is None or tuple(info.shape) != shape or info.dtype.kind not in "iuf":
            notes.append(f"array {info.name!r} ({info.dtype} {info.shape}) is not used as the "
                         f"noise map: it is not a real array of the data's shape {shape}")
            continue
        noise = np.asarray(loader.load(path, info.name, attributes=False).array)
        with np.errstate(invalid="ignore"):
            bad = observed & ~(np.isfinite(noise) & (noise > 0))
        if bad.any():
            notes.append(f"array {info.name!r} is not used as the noise map: {int(bad.sum())} "
                         "observed voxel(s) have a noise sd that is not positive and finite")
            continue
        notes.append(f"noise: the noise map {info.name!r} of the file (each voxel's sd)")
        return "noise_map", info.name
    by_name = {str(k).lower(): (k, v) for k, v in attrs.items()}
    for name in NOISE_NAMES:
        if name not in by_name:
            continue
        k, value = by_name[name]
        if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) \
                and math.isfinite(float(value)) and float(value) > 0:
            notes.append(f"noise: the file's metadata {k!r} = {float(value)!r} (one sd for every "
                         "voxel)")
            return "noise_sigma", float(value)
    return None


def _pivot(grid) -> float:
    """A round k_pivot near the geometric mean of the grid's fundamental and Nyquist k."""
    k_f = min(grid.k_fundamental)
    k_ny = max(grid.k_nyquist)
    return _round(math.sqrt(k_f * k_ny), 1)


def _amplitude_for_variance(grid, k_pivot: float, index: float, variance: float) -> float:
    """The power law's amplitude whose field has real-space ``variance``: (1/V) sum_k P(k)
    over the grid's modes but k = 0 (core.field's normalisation)."""
    k = grid.k_magnitude_full()
    k = k[k > 0]
    unit_variance = float(np.sum((k / k_pivot) ** index)) / grid.volume
    return variance / unit_variance


def _fit_prior(document: dict, base_dir: str, notes: list[str], noise_estimated: bool) -> None:
    """Set document["prior"] from a fit to the data's P(k) (module docstring)."""
    from core.field.prior_fit import fit_families
    from core.io.arrays import LoadError
    from core.io.field_inputs import load_observations

    prior = document["prior"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # NaN voxels: said in the notes already
        config = config_from_dict(document, base_dir)
        _, observations, grid = load_observations(config)
    values = observations.data[observations.mask]
    if values.size and np.all(values == values.flat[0]):
        # nothing fluctuates: no field, no P(k) and no amplitude can be made from them
        raise LoadError(f"{config.data_path}: the observed data are constant ({float(values.flat[0]):g} at every "
                        "observed voxel): they hold no fluctuations to infer a field from; check data.key "
                        "(is this a mask or a noise map?) and the file")
    k_pivot = _pivot(grid)
    prior["k_pivot"] = k_pivot
    try:
        # an estimated noise level is fitted again with the signal; a stated one is held
        choice = fit_families(observations, grid, k_pivot,
                              noise="fit" if noise_estimated else "given")
        fit = choice.best
        if fit.flagged:
            raise ValueError(f"{fit.kind} was the best family ({choice.message}) but its fit is "
                             f"flagged, not used: {fit.warning}")
        values = {n: _round_to_error(fit.values[n], fit.errors[n]) for n in fit.names}
        if not (math.isfinite(values["amplitude"]) and values["amplitude"] > 0
                and math.isfinite(values["index"])):
            raise ValueError(f"the fit gave amplitude {values['amplitude']!r}, index "
                             f"{values['index']!r}")
    except (ValueError, LoadError) as exc:
        observed = observations.mask
        data_values = observations.data[observed]
        noise_var = float(np.mean(observations.noise[observed] ** 2))
        variance = float(np.var(data_values)) - noise_var
        if not variance > 0:
            variance = max(float(np.var(data_values)), noise_var)
        index = -2.0
        amplitude = _round(_amplitude_for_variance(grid, k_pivot, index, variance), 2)
        if not (math.isfinite(amplitude) and amplitude > 0):
            raise LoadError(f"{config.data_path}: no prior amplitude can be made from the data (the data's "
                            f"variance less the noise's gives {amplitude!r}); give prior.amplitude "
                            "yourself") from None
        prior.update(kind="power_law", amplitude=amplitude,
                     index={"dist": "normal", "loc": index, "scale": _INDEX_SCALE})
        prior.pop("cutoff_scale", None)
        notes.append(f"prior: the fit to the data's P(k) failed ({exc}); a broad default instead: "
                     f"power law with index normal({index}, {_INDEX_SCALE}) and amplitude {amplitude} "
                     f"at k_pivot = {k_pivot} (the data's variance less the noise's)")
        return
    prior["kind"] = fit.kind
    prior.update(values)
    prior["index"] = {"dist": "normal", "loc": values["index"], "scale": _INDEX_SCALE}
    if fit.kind != "power_law_cutoff":
        prior.pop("cutoff_scale", None)
    fixed = ", ".join(f"{n} {values[n]} ± {_round(fit.errors[n])}" for n in fit.names
                      if n != "index")
    notes.append(f"prior: {fit.kind} fitted to the data's P(k) ({choice.message}; {fit.message}; "
                 f"chi²/dof = {fit.chi2_per_dof:.2f}): {fixed} (fixed) and index {values['index']} ± "
                 f"{_round(fit.errors['index'])} (sampled, normal({values['index']}, {_INDEX_SCALE})) "
                 f"at k_pivot = {k_pivot}")


def config_for_data(path, key=None, *, box_size=None, unit=None) -> DataConfig:
    """A config for the data file ``path`` (module docstring). ``key`` picks the data array
    (default: chosen from the file); ``box_size`` (one number or three) and ``unit`` override
    what the file says. Raises ``core.io.LoadError`` for a file that cannot be the data of a
    field run, ``ConfigError`` for a bad ``box_size`` or ``unit``."""
    from core.io.arrays import LoadError
    from core.io.field_inputs import check_data_header
    from core.io.formats import loader_for
    from core.io.npy import NpyLoader

    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    loader = loader_for(path)
    infos = loader.list_arrays(path)
    data_key = _pick_data(path, infos, key)
    loaded = loader.load(path, data_key)
    array = loaded.array
    check_data_header(f"{path}: array {loaded.name!r}", array.shape, array.dtype)
    shape = tuple(array.shape)
    notes: list[str] = []
    if len(infos) > 1 and key is None:
        notes.append(f"data: the array {loaded.name!r} {shape} of {len(infos)} in the file")

    base_dir = str(Path(path).parent)
    document = config_to_dict(new_config("field", data_path=Path(path).name,
                                             base_dir=base_dir))
    data = document["data"]
    if not isinstance(loader, NpyLoader):
        data["key"] = loaded.name

    finite = np.isfinite(array) if array.dtype.kind == "f" else np.ones(shape, bool)
    mask_key, mask = (None, None) if isinstance(loader, NpyLoader) else \
        _find_mask(loader, path, infos, shape, notes)
    observed = finite if mask is None else finite & mask
    if mask_key is not None:
        data["mask"] = mask_key
        notes.append(f"mask: the file's array {mask_key!r} ({int(mask.sum())} of {mask.size} "
                     "voxels observed)")
    n_bad = int(finite.size - finite.sum())
    if n_bad == finite.size or not observed.any():
        raise LoadError(f"{path}: array {loaded.name!r}: no observed voxel with a finite value; "
                        "the data carry no information")
    if n_bad:
        notes.append(f"{n_bad} voxel(s) of the data are NaN or infinite: they are masked "
                     "automatically (treated as unobserved; no mask setting is needed)")

    noise_estimated = False
    noise = None if isinstance(loader, NpyLoader) else \
        _find_noise(loader, path, infos, loaded.attrs, shape, observed, notes)
    data.pop("noise_sigma", None)
    if noise is not None:
        data[noise[0]] = noise[1]
    else:
        estimate = estimate_noise_sigma(array, observed)
        if estimate is None:
            data["noise_sigma"] = 1.0
            notes.append("noise: the file holds no noise level and the data show no scatter to "
                         "estimate one from; data.noise_sigma = 1.0 is a placeholder: set the "
                         "real noise level")
        else:
            data["noise_sigma"] = float(estimate[0])        # unrounded: see issue 32
            notes.append(f"noise: data.noise_sigma = {data['noise_sigma']!r} is an ESTIMATE (the "
                         f"file states no noise level) from {estimate[1]}; set the real noise "
                         "level if you know it")
            noise_estimated = True
    if array.dtype.kind in "iu":
        notes.append(f"data: integers ({array.dtype}); for counts, likelihood.kind = "
                     "'poisson_lognormal' may suit them better than the gaussian default")

    grid = document["grid"]
    if box_size is not None:
        grid["box_size"] = list(box_size) if isinstance(box_size, (list, tuple)) else box_size
        source = "given"
    elif loaded.box_size is not None:
        sizes = loaded.box_size
        grid["box_size"] = sizes[0] if sizes[0] == sizes[1] == sizes[2] else list(sizes)
        source = "from the data file"
    else:
        del grid["box_size"]
        source = None
    if unit is not None:
        grid["unit"] = unit
    elif loaded.unit is not None and box_size is None:
        grid["unit"] = loaded.unit
    if source is None:
        note = loaded.attrs.get("box_note") if isinstance(loaded.attrs, dict) else None
        notes.append("grid.box_size: the data file does not state its box size"
                     + (f" ({note})" if note else "") + "; set it (the side length of the box "
                     "the data cover, in your length unit)")
        notes.append("prior: core.config's default power law; fit it to the data (Prior panel) "
                     "once the box size is set")
    else:
        notes.append(f"grid: box size {grid['box_size']}{' ' + grid['unit'] if grid['unit'] else ''} "
                     f"({source})")
        config_from_dict(document, base_dir)          # a bad box_size / unit: its own message
        _fit_prior(document, base_dir, notes, noise_estimated)
    noise_map = noise is not None and noise[0] == "noise_map"
    coupling = [what for what, there in (("mask", mask_key is not None), ("NaN voxels", n_bad > 0),
                                         ("noise map", noise_map)) if there]
    if coupling and document["sampler"].get("preconditioner") == "conditional" \
            and slab_decouples(observed, "gaussian", not noise_map):
        notes.append("sampler: MCLMC with the conditional preconditioner: the data miss whole planes "
                     "along one axis (a slab), where that preconditioner is exact, so nothing couples the "
                     "Fourier modes for the sampler (bench/hyper_efficiency.py, 16 band powers under a "
                     "25 % slab: R-hat <= 1.002, 250-307 effective samples per 1000 gradients a bin, "
                     "7-9x MAMS's)")
        coupling = []
    _sampler_for(document, coupling, notes)
    config_from_dict(document, base_dir)              # the document is always a valid config
    return DataConfig(document, tuple(notes))


def _sampler_for(document: dict, coupling: list[str], notes: list[str]) -> None:
    """``COUPLED_HYPER_SAMPLER`` over the new config's sampler where the prior samples P(k)
    hyperparameters and ``coupling`` (what in the data couples the Fourier modes) is not empty."""
    sampled = [name for name, value in document["prior"].items() if isinstance(value, dict) and "dist" in value]
    if not (sampled and coupling):
        return
    document["sampler"].update(COUPLED_HYPER_SAMPLER)
    verb = "couples" if coupling in (["mask"], ["noise map"]) else "couple"
    notes.append(f"sampler: MAMS (Metropolis-adjusted), not MCLMC, since P(k) is sampled "
                 f"({', '.join(sampled)}) and the data's {' and '.join(coupling)} {verb} the Fourier "
                 "modes: there MCLMC's draws of P(k) came out 0.2-0.4 posterior sd off the exact "
                 "answer (it has no accept step), MAMS's on it (bench/hyper_efficiency.py); MCLMC "
                 "(Sampler panel) gives ~6x the effective samples per gradient where that bias is "
                 "acceptable")
