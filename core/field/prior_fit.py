"""A prior from the data: fit a P(k) family's hyperparameters to the data's P(k) (numpy/scipy).

Conventions: those of ``core.field.grid`` and ``core.field.power_spectrum`` (angular k,
P in unit^3, <|DFT(delta)_k|^2> = P(k) N^2 / V); the data's shell power is measured with
``core.field.power_estimator.measure_power``, the estimator every view uses.

The data's P(k), corrected
--------------------------
Gaussian likelihood, d = B s + n on the observed voxels (mask m, observed fraction
f = mean(m)), B the optional beam exp(-(k R_b)^2 / 2), n white noise of sd sigma_i:

1. The field measured is m (d - dbar): observed voxels minus their mean dbar (so the mean
   leaves no imprint of the mask), masked voxels 0.
2. Mask. The masked field's power is the true one convolved with the mask's window
   |W(q)|^2 = |DFT(m)(q)|^2 / N_cells^2, whose sum over q is f (Parseval). Split the
   window into a part concentrated at small q (large masked regions: a slab, a sphere, a
   survey footprint; total weight f - w) and a flat floor (scattered single voxels, e.g.
   random dropouts: total weight w, estimated as N_cells times the median of |W(q)|^2
   over the modes above half the Nyquist wavenumber, divided by ln 2, the median of an
   exponential variable of mean 1). Where P is smooth on the scale of
   the concentrated part,

       P_hat / f ~ (1 - w / f) P(k) + (w / f) <P>,   <P> = (1 / N_cells) sum_q P(q),

   so the measured power is divided by f and the model carries the white floor (for
   random dropouts of probability d alone, w / f = d: P_hat / f = (1 - d) P + d <P>).
   The approximation: the concentrated part still couples neighbouring shells at low k,
   where P is steep compared with the window's width; it is not deconvolved.
3. Noise. White noise of sd sigma_i on the observed voxels adds, after step 2, the flat
   N = <sigma_i^2>_observed V / N_cells (sigma^2 times the cell volume for a uniform sd:
   a white field of variance sigma^2 has <|DFT|^2> = N_cells sigma^2, and the estimator
   multiplies by V / N_cells^2). P_tot = P_hat / f. The data's P(k) as shown is
   P_data = (P_tot - N - (w / f) <B^2 P_fit>) / ((1 - w / f) <B^2>_shell).

Poisson counts are refused: their power is that of exp(s) - 1 plus shot noise, not P(k)
of the field s, and undoing the log-normal transform is not attempted here.

The fit
-------
Shells whose excess P_tot - N is not above ``min_snr`` times its sd are dropped (noise
dominated or empty). For each kept shell i with c_i full-grid modes,

    y_i = log(P_tot,i - N),   Var[y_i] = (2 / (f c_i)) ((P_i + N) / P_i)^2

(the relative variance of a Gaussian shell estimate is 2 / c, ``power_estimator``; the
mask leaves about f c independent modes; subtracting the noise scales the error of the
log by (P + N) / P). y_i is compared with the model

    mu_i(theta) = log[(1 - w / f) <B^2 P(k; theta)>_shell + (w / f) <B^2 P(theta)>]

(<.>_shell the mode average over the shell, exact; <.> over every mode of the grid)

by weighted least squares, sum_i (y_i + Var[y_i] / 2 - mu_i)^2 / Var[y_i] (the half
variance removes the bias of the log, E[log X] ~ log E[X] - Var / 2). The variances are
first computed with P_i from the data, then once more with the fitted P_i. The fit
moves in theta: log x for a hyperparameter the family declares positive, x for a finite
one, x >= 0 (a bound) for a non-negative one (read from the family's rules in
``SPECTRA``, so every family is handled alike). cov(theta) = (J^T J)^-1 with J the
Jacobian of the weighted residuals at the optimum (the stated errors are the model's,
not rescaled by chi^2, which is reported); the covariance of the hyperparameters is
D cov(theta) D with D = diag(dx / dtheta).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np
from scipy.optimize import least_squares

from core.field.grid import Grid
from core.field.observations import Observations
from core.field.power_estimator import masked_data_field, measure_power
from core.field.power_spectrum import SPECTRA, PowerSpectrum, spectrum_from_config

__all__ = ["FitResult", "PriorFitError", "fit_power_spectrum", "free_parameters", "mask_floor"]

#: The default threshold: a shell is used when P_tot - N exceeds this many sd.
MIN_SNR = 3.0


class PriorFitError(ValueError):
    """The data or the family cannot be fitted; the message says which setting and why."""


@dataclass(frozen=True)
class FitResult:
    """The fitted hyperparameters and the data's corrected P(k) (see the module docstring).

    kind, names         the family and its fitted hyperparameters (registry order)
    values, errors      {name: x}, {name: sd of x}; inf where the data do not constrain x
    covariance          (p, p) covariance of the hyperparameters, in ``names`` order
    fit_covariance      the same in the fit's coordinates (log x for a positive x)
    coordinates         ("log", "identity", ...) per name: the fit's coordinate
    spectrum            the family at the fitted values (k_pivot as given)
    k, counts           every shell's mode-averaged k and full-grid mode count
    power               the data's P(k) per shell, noise, mask floor and beam removed
                        (P_data of the module docstring); NaN where empty
    power_error         its sd, P_tot sqrt(2 / (f c)) / ((1 - w / f) <B^2>)
    used                bool per shell: the shells the fit used
    noise_power         N (unit^3), observed_fraction f
    mask_floor          w / f: the mask window's flat share (0 for large masked regions)
    chi2, dof           the fit's chi^2 and degrees of freedom (shells used - p)
    message             one line: shells used and dropped, and why
    """

    kind: str
    names: tuple[str, ...]
    values: dict
    errors: dict
    covariance: np.ndarray
    fit_covariance: np.ndarray
    coordinates: tuple[str, ...]
    spectrum: PowerSpectrum
    k: np.ndarray
    counts: np.ndarray
    power: np.ndarray
    power_error: np.ndarray
    used: np.ndarray
    noise_power: float
    observed_fraction: float
    mask_floor: float
    chi2: float
    dof: int
    message: str


def free_parameters(kind: str) -> tuple[str, ...]:
    """The hyperparameters of family ``kind`` a fit can move (``SPECTRA[kind].parameters``)."""
    if kind not in SPECTRA:
        raise PriorFitError(f"prior.kind = {kind!r}: unknown P(k) family (known: "
                            f"{', '.join(SPECTRA)})")
    return tuple(SPECTRA[kind].parameters)


def _rule(kind: str, name: str) -> str:
    # each family states its parameters' ranges once, in its parameter_rules (power_spectrum.py)
    return SPECTRA[kind].parameter_rules.get(name, "finite")


class _ShellModel:
    """<B^2 P(k)>_shell for a spectrum, from the distinct |k| of the shells' modes."""

    def __init__(self, grid: Grid, edges: np.ndarray, beam_scale: float | None):
        k = grid.k_magnitude_half().ravel()
        index = grid.shell_index_half(edges).ravel()
        weight = grid.multiplicity_half().ravel()
        inside = index >= 0
        k, index, weight = k[inside], index[inside], weight[inside]
        self.k_unique, inverse = np.unique(k, return_inverse=True)
        inverse = inverse.ravel()
        self.n_bins = edges.size - 1
        self.weight = np.bincount(inverse, weights=weight)
        shell_of = np.zeros(self.k_unique.size, dtype=np.int64)
        shell_of[inverse] = index
        self.shell_of = shell_of
        self.counts = np.bincount(shell_of, weights=self.weight, minlength=self.n_bins)
        b2 = (np.ones_like(self.k_unique) if not beam_scale
              else np.exp(-(self.k_unique * beam_scale) ** 2))
        self.weight_b2 = self.weight * b2
        self.beam2 = self.average(np.ones_like(self.k_unique))
        self.n_cells = grid.n_cells

    def mean_all(self, p_unique: np.ndarray) -> float:
        """(1 / N_cells) sum over every mode of B^2 p(|k|) (the shells hold all but k = 0)."""
        return float(np.dot(self.weight_b2, p_unique)) / self.n_cells

    def average(self, p_unique: np.ndarray) -> np.ndarray:
        """(1 / c) sum_modes B^2 p(|k|) per shell (NaN for an empty shell)."""
        sums = np.bincount(self.shell_of, weights=self.weight_b2 * p_unique,
                           minlength=self.n_bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.counts > 0, sums / np.maximum(self.counts, 1), np.nan)


def mask_floor(mask: np.ndarray, grid: Grid) -> float:
    """w / f: the flat share of the mask's window (module docstring, step 2), in [0, 1).

    |W(q)|^2 = |DFT(m)(q)|^2 / N^2 sums to f over the grid; its flat floor w is N / ln 2 times
    the median of |W(q)|^2 over the half-grid modes with |q| above half the smallest Nyquist
    wavenumber (a large masked region's window has fallen off there; scattered voxels'
    has not).
    """
    m = np.asarray(mask, dtype=np.float64)
    fraction = float(m.mean())
    if fraction >= 1.0 or fraction <= 0.0:
        return 0.0
    window = np.abs(np.fft.rfftn(m)) ** 2 / grid.n_cells ** 2
    high = grid.k_magnitude_half() > 0.5 * min(grid.k_nyquist)
    if not high.any():
        return 0.0
    # a flat floor's |W(q)|^2 are exponentially distributed (|a complex Gaussian|^2):
    # the median is ln 2 times the mean
    floor = float(np.median(window[high])) / math.log(2.0) * grid.n_cells
    return min(max(floor / fraction, 0.0), 0.99)


def fit_power_spectrum(observations: Observations, grid: Grid, kind: str, k_pivot: float, *,
                       start: Mapping[str, float] | None = None,
                       fixed: Mapping[str, float] | None = None, edges=None,
                       min_snr: float = MIN_SNR) -> FitResult:
    """Fit family ``kind``'s hyperparameters to the data's P(k) (module docstring).

    ``k_pivot`` is the family's fixed pivot; ``start`` optional starting values
    ({name: x}, e.g. the config's current centres); ``fixed`` hyperparameters held at the
    given values (the others are fitted); ``edges`` the shells (default
    ``grid.shell_edges()``). Raises ``PriorFitError`` for a likelihood or family this fit
    cannot handle and for data with fewer usable shells than free hyperparameters.
    """
    names_all = free_parameters(kind)
    if not names_all:
        raise PriorFitError(f"prior.kind = {kind!r}: this P(k) family has no hyperparameters "
                            "to fit (choose a parametric family such as power_law)")
    fixed = dict(fixed or {})
    unknown = [name for name in fixed if name not in names_all]
    if unknown:
        raise PriorFitError(f"{kind}: unknown hyperparameter {unknown[0]!r} (this family has "
                            f"{', '.join(names_all)})")
    names = tuple(name for name in names_all if name not in fixed)
    if not names:
        raise PriorFitError(f"{kind}: every hyperparameter is held fixed; nothing to fit")
    if observations.kind != "gaussian":
        raise PriorFitError(f"likelihood.kind = {observations.kind!r}: the fit to the data's "
                            "P(k) needs the gaussian likelihood (the power of counts is that of "
                            "exp(s) - 1 plus shot noise, not P(k) of the field)")
    if observations.data.shape != grid.shape:
        raise PriorFitError(f"data shape {observations.data.shape} does not match the grid "
                            f"{grid.shape}")
    if not (isinstance(min_snr, (int, float)) and math.isfinite(min_snr) and min_snr >= 0):
        raise PriorFitError(f"min_snr = {min_snr!r}: must be a finite number >= 0")
    edges = np.asarray(grid.shell_edges() if edges is None else edges, dtype=np.float64)

    field, fraction = masked_data_field(observations.data, observations.mask)
    measured = measure_power(field, grid, edges)
    counts = measured.counts
    shells = _ShellModel(grid, edges, observations.smoothing_scale)
    noise = observations.noise
    noise_power = float(np.mean(noise[observations.mask] ** 2) * grid.cell_volume)
    n_eff = counts * fraction
    floor = mask_floor(observations.mask, grid)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_tot = measured.power / fraction
        rel = np.sqrt(2.0 / n_eff)
        excess = p_tot - noise_power
        power_error = p_tot * rel / ((1.0 - floor) * shells.beam2)
        used = (counts > 0) & np.isfinite(excess) & (excess > 0) & (excess > min_snr * p_tot * rel)
    n_used = int(used.sum())
    n_empty = int(np.sum(counts == 0))
    dropped = int(counts.size - n_empty - n_used)
    shell_text = (f"{n_used} of {counts.size - n_empty} shells used"
                  + (f"; {dropped} dropped (data P(k) minus the noise not above {min_snr:g} sd)"
                     if dropped else ""))
    if n_used < len(names):
        raise PriorFitError(f"{kind}: {len(names)} hyperparameters ({', '.join(names)}) but "
                            f"only {n_used} usable P(k) shell(s) ({shell_text}): the data are too "
                            "noisy or too small to fit this family")

    coordinates = tuple("log" if _rule(kind, n) == "positive" else
                        "nonnegative" if _rule(kind, n) == "nonnegative" else "identity"
                        for n in names)
    y = np.log(excess[used])
    c_eff = n_eff[used]
    k_used = measured.k[used]
    template = spectrum_from_config(kind, _complete(kind, k_pivot, names_all, fixed, start))
    fixed_values = {n: float(v) for n, v in fixed.items()}

    def to_values(theta):
        return {n: (math.exp(t) if c == "log" else float(t))
                for n, c, t in zip(names, coordinates, theta)}

    def model_all(theta):
        logp = template.log_power(shells.k_unique, **to_values(theta), **fixed_values)
        with np.errstate(under="ignore"):
            p = np.exp(logp)
        return (1.0 - floor) * shells.average(p) + floor * shells.mean_all(p)

    def model(theta):
        return model_all(theta)[used]

    theta = np.array([_start_coordinate(c, getattr(template, n), k_used)
                      for n, c in zip(names, coordinates)])
    lower = np.array([0.0 if c == "nonnegative" else -np.inf for c in coordinates])
    signal = excess[used]                 # pass 1: P from the data itself
    for _ in range(2):
        var = (2.0 / c_eff) * ((signal + noise_power) / signal) ** 2
        sd = np.sqrt(var)
        target = y + 0.5 * var

        def residuals(t, target=target, sd=sd):
            with np.errstate(divide="ignore"):
                return (target - np.log(model(t))) / sd

        result = least_squares(residuals, theta, bounds=(lower, np.inf), method="trf",
                               x_scale="jac")
        theta = result.x
        signal = model(theta)          # pass 2: P from the fit
    chi2 = float(np.sum(result.fun ** 2))
    jac = np.asarray(result.jac, dtype=np.float64)
    fit_cov, unconstrained = _covariance(jac)
    values = to_values(theta)
    slope = np.array([values[n] if c == "log" else 1.0 for n, c in zip(names, coordinates)])
    cov = fit_cov * np.outer(slope, slope)
    errors = {n: (math.inf if bad else float(math.sqrt(max(cov[i, i], 0.0))))
              for i, (n, bad) in enumerate(zip(names, unconstrained))}
    message = shell_text
    loose = [n for n, bad in zip(names, unconstrained) if bad]
    if loose:
        message += f"; not constrained by the data: {', '.join(loose)}"
    if not result.success:
        message += f"; the optimiser stopped early ({result.message})"
    spectrum = spectrum_from_config(kind, _complete(kind, k_pivot, names_all,
                                                    {**fixed_values, **values}, None))
    with np.errstate(under="ignore"):
        p_fit = np.exp(spectrum.log_power(shells.k_unique))
    with np.errstate(invalid="ignore", divide="ignore"):
        power = (excess - floor * shells.mean_all(p_fit)) / ((1.0 - floor) * shells.beam2)
    if floor > 0.01:
        message += (f"; the mask's scattered voxels put a flat {floor:.0%} of the power into "
                    "every shell (modelled)")
    return FitResult(kind=kind, names=names, values=values, errors=errors, covariance=cov,
                     fit_covariance=fit_cov, coordinates=coordinates, spectrum=spectrum,
                     k=measured.k, counts=counts, power=power, power_error=power_error,
                     used=used, noise_power=noise_power, observed_fraction=fraction,
                     mask_floor=floor,
                     chi2=chi2, dof=n_used - len(names), message=message)


def _complete(kind, k_pivot, names_all, values, start) -> dict:
    """Constructor arguments of family ``kind``: values, else start, else a neutral default."""
    params = {"k_pivot": k_pivot}
    for name in names_all:
        value = values.get(name) if name in values else (start or {}).get(name)
        rule = _rule(kind, name)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if ok and rule == "positive":
            ok = value > 0
        if ok and rule == "nonnegative":
            ok = value >= 0
        params[name] = float(value) if ok else (1.0 if rule == "positive" else 0.0)
    try:
        return dict(spectrum_from_config(kind, params).to_config())
    except ValueError as exc:
        raise PriorFitError(f"prior.k_pivot = {k_pivot!r}: {exc}") from None


def _start_coordinate(coordinate: str, value: float, k_used: np.ndarray) -> float:
    if coordinate == "log":
        return math.log(value)
    if coordinate == "nonnegative" and value <= 0:
        # at 0 a scale such as R in exp(-(k R)^2) has no gradient: start inside the range,
        # at a length the shells resolve
        return 0.3 / float(np.median(k_used))
    return float(value)


def _covariance(jac: np.ndarray) -> tuple[np.ndarray, list[bool]]:
    """(J^T J)^-1 and which coordinates the data do not constrain (a null direction)."""
    p = jac.shape[1]
    norms = np.sqrt(np.sum(jac ** 2, axis=0))
    scale = np.where(norms > 0, norms, 1.0)
    scaled = jac / scale
    u, s, vt = np.linalg.svd(scaled, full_matrices=False)
    good = s > 1e-10 * max(s.max(initial=0.0), 1e-300)
    inv = (vt[good].T / s[good] ** 2) @ vt[good]
    cov = inv / np.outer(scale, scale)
    unconstrained = [bool(norms[i] == 0 or np.any(np.abs(vt[~good, i]) > 1e-6)) for i in range(p)]
    for i, bad in enumerate(unconstrained):
        if bad:
            cov[i, :] = cov[:, i] = np.nan
    return cov, unconstrained
