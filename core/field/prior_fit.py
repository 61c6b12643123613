"""A prior from the data: fit P(k) families' hyperparameters (and the noise) to the data's P(k).

numpy / scipy only. Conventions: those of ``core.field.grid`` and ``core.field.power_spectrum``
(angular k, P in unit^3, <|DFT(delta)_k|^2> = P(k) N^2 / V); the data's shell power is
measured with ``core.field.power_estimator.measure_power``, the estimator every view uses.
``fit_power_spectrum`` fits one family, ``fit_families`` every one and chooses by the BIC;
``noise="fit"`` fits the white-noise power jointly, ``noise="given"`` holds it.

The data: d = B s + n on the observed voxels (mask m, f = mean(m)), B the optional beam
exp(-(k R_b)^2 / 2), n white noise of sd sigma_i. The field measured is m (d - dbar); its
shell power over f is x_i for shell i of c_i full-grid modes. Its mean:

    mu_i = <B^2 P(k; theta)>_i + sum_j (M - 1)_ij <B^2 P(k; theta)>_j + delta_i + N

<.>_i the exact average over the shell's modes; N = <sigma_i^2>_observed V / N_cells (white
noise on the observed voxels stays white). M is the mask's mixing of shells (``mask_mixing``,
exact on the periodic grid for P constant within each shell): the power a slab's or a hole's
hard edges move from the high-power low-k shells into every other one, and the flat floor of
scattered voxels. Where P falls steeply across a shell (a cutoff) its near side leaks more:
delta_i, the exact mean (``masked_mean_power``) less the mixing model's, is computed at the
fit and held while refitting (``LEAK_ITERATIONS`` times): the mean is exact at the fit.
Without a mask M = 1, delta = 0. Grids above ``MIXING_MAX_CELLS`` use a flat floor instead, (1 - w) <B^2 P>_i
+ w <B^2 P>, w = ``mask_floor``: right for scattered voxels, blind to the leak.

The fit: a shell of c Gaussian modes has a power mu chi^2_c / c; a mask leaves about
n_i = f c_i independent modes (the FKP factor). Each x_i is taken as Gamma(shape n_i / 2,
mean mu_i), so -log L(theta, N) = sum_i (n_i / 2) (log mu_i + x_i / mu_i) + const over every
non-empty shell (the noise-dominated ones pin N; none is dropped by a threshold). theta is
log x for a positive hyperparameter, x for a finite one, x >= 0 (a bound) for a non-negative
one (the family's rules in ``SPECTRA``), and log N when the noise is fitted. Several starts
(indices and cutoff scales spanning the data's k range, and the caller's; the amplitude
matched to the data at each), the best kept; each a trust-region least-squares fit of the
deviance residuals r_i = sign(x_i - mu_i) sqrt(n_i (x_i / mu_i - 1 - log(x_i / mu_i))).

The errors: without a mask the shells are independent and the gamma likelihood exact:
cov = F^-1, F_ab = sum_i (n_i / 2) d_a log mu_i d_b log mu_i the Fisher information. Under a
mask the shells are not independent: the window couples neighbours, and the fluctuations of
the few high-power low-k modes leak into every shell above (under a slab or a hole, shells
where the leak is a good part of the power scatter up to 1.5 times more than n_i says, and
together), so F^-1 is too small. The errors are then the sandwich F^-1 Cov(g) F^-1, g =
sum_i (n_i / 2) (x_i - mu_i) / mu_i^2 d mu_i / dtheta the score, its covariance over ``MOCKS``
mock data sets at the fit (``mock_shell_powers``; seeded by the data, so a fit repeats), good
to 1 / sqrt(2 (MOCKS - 1)) = 7 %; above ``MOCK_MAX_CELLS`` cells F^-1, and the message says so.
N is marginalised; an error is inf in a null direction of F (a cutoff scale fitted at 0). A
positive x's error is x sd(log x), its likelihood near Gaussian in log x: ``FitResult.interval``
gives x ×/÷ exp(sd(log x)) (a symmetric ± understates the low side).

The flag: chi^2 is the deviance sum r_i^2 (the likelihood-ratio chi^2; Pearson's for many
modes, without the few-mode shells' long tails), dof = shells - fitted parameters. A fit is
FLAGGED when chi^2 / dof > 1.5 and its chance is below 1e-3: the family does not describe the
data's P(k) within the modes' scatter (a wrong shape, the noise level wrong so that leftover
or missing noise at high k reads as signal, or a mask / beam not described). A flagged fit's
numbers are not estimates of anything; the Prior panel does not use one as prior centres
without the user's word. With the noise given, a flagged fit is refitted with the noise free;
when that one is not flagged, the message says the noise level is the likely cause. A fit
that improves -2 log L over the noise alone by less than the 1e-3 quantile of chi^2 (as many
dof as hyperparameters) is refused (``PriorFitError``): no signal above the noise.

The data's P(k) as shown: P_data,i = (x_i - N - leak_i) / (d_i <B^2>_i), d_i the share of its
own power shell i keeps (1 + M_ii; 1 - w), leak_i what it receives from the others by the fit;
its sd that of x_i over the mocks (else mu_i sqrt(2 / n_i)) over d_i <B^2>_i. Poisson counts
are refused: their power is that of exp(s) - 1 plus shot noise.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
from scipy.optimize import least_squares
from scipy.stats import chi2 as chi2_distribution

from core.field.grid import Grid
from core.field.mask_mixing import MIXING_MAX_CELLS, mask_floor, mask_mixing
from core.field.observations import Observations
from core.field.power_estimator import masked_data_field, masked_mean_power, measure_power, mock_shell_powers
from core.field.power_spectrum import SPECTRA, PowerSpectrum, spectrum_from_config

__all__ = ["FitResult", "FamilyChoice", "PriorFitError", "fit_power_spectrum", "fit_families",
           "free_parameters", "fittable_families", "mask_floor", "NOISE_MODES"]

#: how the white-noise power is treated: held at the observations' noise, or fitted jointly
NOISE_MODES = ("given", "fit")
#: a fit is flagged when chi^2 / dof exceeds this ...
FLAG_RATIO = 1.5
#: ... and chi^2 is this improbable under the model
FLAG_P_VALUE = 1e-3
#: a signal is detected when -2 log L improves over the noise alone beyond this chance
DETECTION_P_VALUE = 1e-3
#: mock data sets drawn for the errors under a mask (module docstring) ...
MOCKS = 100
#: ... on grids up to this many cells (beyond, the Fisher errors, and the message says so)
MOCK_MAX_CELLS = 64 ** 3
#: refits with the within-shell leak correction (module docstring)
LEAK_ITERATIONS = 2


class PriorFitError(ValueError):
    """The data or the family cannot be fitted; the message says which setting and why."""


@dataclass(frozen=True)
class FitResult:
    """The fitted hyperparameters and the data's corrected P(k) (see the module docstring).

    kind, names         the family and its fitted hyperparameters (registry order)
    values, errors      {name: x}, {name: sd of x}; inf where the data do not constrain x
    covariance          (p, p) covariance of the hyperparameters, in ``names`` order (the
                        noise marginalised when fitted)
    fit_covariance      the same in the fit's coordinates (log x for a positive x)
    coordinates         ("log", "identity", "nonnegative") per name: the fit's coordinate
    spectrum            the family at the fitted values (k_pivot as given)
    k, counts           every shell's mode-averaged k and full-grid mode count
    power               the data's P(k) per shell, noise, mask floor and beam removed
                        (P_data of the module docstring); NaN where empty
    power_error         its sd (over the mocks; else from the fitted mean)
    used                bool per shell: the shells in the likelihood (every non-empty one)
    noise_power         N (unit^3): fitted or given; noise_power_error its sd (0 when given)
    noise_sigma         sqrt(N / cell volume): the noise sd N stands for (the rms sd of the
                        observed voxels); noise_sigma_error its sd (0 when given)
    noise_fitted        whether N was fitted (noise="fit")
    observed_fraction   f; mask_floor w (0 for large masked regions)
    chi2, dof           the deviance chi^2 of the shells against the fit, shells - parameters
    p_value             P(chi^2_dof >= chi2)
    log_likelihood      the gamma log-likelihood at the optimum (constants included)
    n_parameters        parameters fitted (hyperparameters, plus 1 with the noise)
    aic, bic            -2 log L + 2 p, -2 log L + p log(shells)
    flagged             chi^2 / dof far above 1 (module docstring): not to be used unasked
    warning             "" or what the flag means for this fit, in one paragraph
    starts              (starting points tried, how many reached the best -log L within 0.5)
    message             one line: shells used, mask floor, what is not constrained, the errors
    mocks               mock data sets the errors (and power_error) are from; 0: the Fisher
                        information (exact without a mask)
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
    noise_power_error: float
    noise_sigma: float
    noise_sigma_error: float
    noise_fitted: bool
    observed_fraction: float
    mask_floor: float
    chi2: float
    dof: int
    p_value: float
    log_likelihood: float
    n_parameters: int
    aic: float
    bic: float
    flagged: bool
    warning: str
    starts: tuple[int, int]
    message: str
    mocks: int = 0

    @property
    def chi2_per_dof(self) -> float:
        return self.chi2 / self.dof if self.dof > 0 else math.nan

    def interval(self, name: str) -> tuple[float, float]:
        """One sd: x ×/÷ exp(sd(log x)) for a positive x (module docstring), else x ± sd."""
        x, sd = self.values[name], self.errors[name]
        if self.coordinates[self.names.index(name)] == "log" and math.isfinite(sd) and x > 0:
            return x * math.exp(-sd / x), x * math.exp(sd / x)
        return x - sd, x + sd


@dataclass(frozen=True)
class FamilyChoice:
    """``fit_families``' answer: every family's fit, and the one the criterion prefers.

    fits        {kind: FitResult} of the families that could be fitted
    failures    {kind: message} of those that could not
    chosen      the kind with the lowest BIC (None when no family could be fitted)
    message     one line: the families' BIC differences and the choice
    """

    fits: dict
    failures: dict
    chosen: str | None
    message: str
    criterion: str = field(default="bic")

    @property
    def best(self) -> FitResult | None:
        return None if self.chosen is None else self.fits[self.chosen]


def free_parameters(kind: str) -> tuple[str, ...]:
    """The hyperparameters of family ``kind`` a fit can move (``SPECTRA[kind].parameters``)."""
    if kind not in SPECTRA:
        raise PriorFitError(f"prior.kind = {kind!r}: unknown P(k) family (known: "
                            f"{', '.join(SPECTRA)})")
    return tuple(SPECTRA[kind].parameters)


def fittable_families() -> tuple[str, ...]:
    """The registry's families with hyperparameters to fit (every one but a table)."""
    return tuple(kind for kind, cls in SPECTRA.items() if cls.parameters)


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

    def signal(self, p_unique: np.ndarray, mixing, floor: float) -> np.ndarray:
        """The signal's share of every shell's mean power: with the mask's ``mixing`` matrix
        M, <B^2 P>_i + sum_j (M - 1)_ij <B^2 P>_j; without it, the flat-floor model
        (1 - w) <B^2 P>_i + w <B^2 P> (module docstring)."""
        own = self.average(p_unique)
        if mixing is None:
            return (1.0 - floor) * own + floor * self.mean_all(p_unique)
        return own + mixing @ np.nan_to_num(own)

    def mean_all(self, p_unique: np.ndarray) -> np.ndarray:
        """(1 / N_cells) sum over every mode of B^2 p(|k|) (the shells hold all but k = 0);
        ``p_unique`` (..., n_unique)."""
        return np.asarray(p_unique @ self.weight_b2 / self.n_cells)

    def average(self, p_unique: np.ndarray) -> np.ndarray:
        """(1 / c) sum_modes B^2 p(|k|) per shell (NaN for an empty shell)."""
        sums = np.bincount(self.shell_of, weights=self.weight_b2 * p_unique,
                           minlength=self.n_bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.counts > 0, sums / np.maximum(self.counts, 1), np.nan)


@dataclass(frozen=True)
class _Shells:
    """The measured shells of one data set (shared by every family's fit)."""

    grid: Grid
    model: _ShellModel
    k: np.ndarray
    counts: np.ndarray
    x: np.ndarray            # shell power / f
    half_modes: np.ndarray   # n_i / 2 (0 for an unused shell)
    used: np.ndarray
    fraction: float
    floor: float
    mixing: np.ndarray | None    # M - 1, or None (the flat-floor model)
    noise_power: float       # from the observations (the start when fitted)
    observed: np.ndarray     # the mask the field was measured with
    noise_sd: np.ndarray     # the observations' per-voxel noise sd
    edges: np.ndarray
    beam_scale: float | None


def _measure(observations: Observations, grid: Grid, edges) -> _Shells:
    if observations.kind != "gaussian":
        raise PriorFitError(f"likelihood.kind = {observations.kind!r}: the fit to the data's "
                            "P(k) needs the gaussian likelihood (the power of counts is that of "
                            "exp(s) - 1 plus shot noise, not P(k) of the field)")
    if observations.data.shape != grid.shape:
        raise PriorFitError(f"data shape {observations.data.shape} does not match the grid "
                            f"{grid.shape}")
    edges = np.asarray(grid.shell_edges() if edges is None else edges, dtype=np.float64)
    field_, fraction = masked_data_field(observations.data, observations.mask)
    measured = measure_power(field_, grid, edges)
    counts = measured.counts
    with np.errstate(invalid="ignore", divide="ignore"):
        x = measured.power / fraction
    used = (counts > 0) & np.isfinite(x)
    half_modes = np.where(used, 0.5 * np.maximum(counts * fraction, 1.0), 0.0)
    noise_power = float(np.mean(observations.noise[observations.mask] ** 2) * grid.cell_volume)
    masked = fraction < 1.0
    mixing = (mask_mixing(observations.mask, grid, edges)
              if masked and grid.n_cells <= MIXING_MAX_CELLS else None)
    observed = np.isfinite(observations.data) & observations.mask
    return _Shells(grid, _ShellModel(grid, edges, observations.smoothing_scale), measured.k,
                   counts, np.where(used, x, np.nan), half_modes, used, fraction,
                   mask_floor(observations.mask, grid) if masked else 0.0, mixing, noise_power,
                   observed, observations.noise, edges, observations.smoothing_scale)


def fit_power_spectrum(observations: Observations, grid: Grid, kind: str, k_pivot: float, *,
                       start: Mapping[str, float] | None = None,
                       fixed: Mapping[str, float] | None = None, edges=None,
                       noise: str = "given", mocks: int | None = None) -> FitResult:
    """Fit family ``kind``'s hyperparameters to the data's P(k) (module docstring).

    ``k_pivot`` is the family's fixed pivot; ``start`` optional starting values ({name: x},
    e.g. the config's current centres; tried besides the fit's own starts); ``fixed``
    hyperparameters held at the given values (the others are fitted); ``edges`` the shells
    (default ``grid.shell_edges()``); ``noise`` "given" (N from the observations' noise) or
    "fit" (N fitted jointly); ``mocks`` the mock data sets for the errors under a mask
    (default ``MOCKS`` on grids up to ``MOCK_MAX_CELLS``, else 0: the Fisher errors). Raises
    ``PriorFitError`` for a likelihood or family this fit cannot handle, for too few shells and
    for data with no signal above the noise.
    """
    if noise not in NOISE_MODES:
        raise PriorFitError(f"noise = {noise!r}: must be one of {', '.join(NOISE_MODES)}")
    _check_family(kind, fixed)
    shells = _measure(observations, grid, edges)
    return _fit(shells, kind, k_pivot, start, fixed, noise, mocks)


def fit_families(observations: Observations, grid: Grid, k_pivot: float, *,
                 kinds=None, start: Mapping[str, Mapping[str, float]] | None = None,
                 edges=None, noise: str = "given", mocks: int | None = None) -> FamilyChoice:
    """Fit every family in ``kinds`` (default ``fittable_families()``) and choose the one of
    lowest BIC. ``start`` {kind: {name: x}} optional starts per family; the other arguments
    as ``fit_power_spectrum``'s. A family that cannot be fitted is listed in ``failures``;
    ``PriorFitError`` when none can (its message)."""
    if noise not in NOISE_MODES:
        raise PriorFitError(f"noise = {noise!r}: must be one of {', '.join(NOISE_MODES)}")
    kinds = tuple(fittable_families() if kinds is None else kinds)
    for kind in kinds:
        _check_family(kind, None)
    shells = _measure(observations, grid, edges)
    fits, failures = {}, {}
    for kind in kinds:
        try:
            fits[kind] = _fit(shells, kind, k_pivot, (start or {}).get(kind), None, noise, mocks)
        except PriorFitError as exc:
            failures[kind] = str(exc)
    if not fits:
        raise PriorFitError("; ".join(failures.values()))
    chosen = min(fits, key=lambda kind: fits[kind].bic)
    best = fits[chosen].bic
    others = ", ".join(f"{kind} +{fits[kind].bic - best:.1f}" for kind in fits if kind != chosen)
    message = (f"{chosen} chosen by BIC" + (f" (BIC differences: {others})" if others else "")
               + "".join(f"; {kind} not fitted: {text}" for kind, text in failures.items()))
    return FamilyChoice(fits, failures, chosen, message)


def _check_family(kind: str, fixed) -> None:
    names_all = free_parameters(kind)
    if not names_all:
        raise PriorFitError(f"prior.kind = {kind!r}: this P(k) family has no hyperparameters "
                            "to fit (choose a parametric family such as power_law)")
    unknown = [name for name in (fixed or {}) if name not in names_all]
    if unknown:
        raise PriorFitError(f"{kind}: unknown hyperparameter {unknown[0]!r} (this family has "
                            f"{', '.join(names_all)})")
    if len(fixed or {}) == len(names_all):
        raise PriorFitError(f"{kind}: every hyperparameter is held fixed; nothing to fit")


class _Likelihood:
    """-log L(theta) of the module docstring, its deviance residuals and their Jacobian, for
    one family on one data set (d log P / d theta by central differences of the family's
    ``log_power``, so that every family of the registry is handled alike).

    theta = the fitted hyperparameters in their coordinates (a non-negative one divided by
    ``scale``), then log N when the noise is fitted.
    """

    STEP = 1e-5

    def __init__(self, shells: _Shells, template: PowerSpectrum, names, coordinates,
                 fixed_values, fit_noise: bool, scales):
        self.shells, self.template = shells, template
        self.names, self.coordinates = tuple(names), tuple(coordinates)
        self.fixed_values, self.fit_noise = dict(fixed_values), fit_noise
        self.scales = np.asarray(scales, dtype=np.float64)
        self.used = shells.used
        self.a = shells.half_modes[self.used]
        self.x = shells.x[self.used]
        self.correction = 0.0             # the within-shell leak correction (module docstring)

    def power_half(self, theta) -> np.ndarray:
        """B^2 P(|k|) of the signal at ``theta`` on the half grid (every mode)."""
        k = self.shells.grid.k_magnitude_half()
        with np.errstate(over="ignore", under="ignore"):
            p = np.exp(np.minimum(self.template.log_power(k, **self.values(theta),
                                                          **self.fixed_values), 700.0))
        scale = self.shells.beam_scale
        return p * np.exp(-(k * scale) ** 2) if scale else p

    def values(self, theta) -> dict:
        """The hyperparameters at ``theta`` ({name: x})."""
        out = {}
        for name, coordinate, t, scale in zip(self.names, self.coordinates, theta, self.scales):
            out[name] = (math.exp(t) if coordinate == "log" else
                         max(float(t), 0.0) * float(scale) if coordinate == "nonnegative" else float(t))
        return out

    def noise_power(self, theta) -> float:
        return math.exp(theta[-1]) if self.fit_noise else self.shells.noise_power

    def signal(self, theta, derivatives: bool = True):
        """(S_i, dS_i / dtheta_j) over the used shells: S the signal part of mu."""
        p = len(self.names)
        theta = np.asarray(theta, dtype=np.float64)
        rows = [theta[:p]]
        steps = []
        if derivatives:
            for j in range(p):
                h = self.STEP
                up, down = theta[:p].copy(), theta[:p].copy()
                up[j] += h
                if self.coordinates[j] == "nonnegative" and theta[j] < h:
                    steps.append(h)               # one-sided at the bound
                else:
                    down[j] -= h
                    steps.append(2 * h)
                rows += [up, down]
        batch = np.array(rows)
        overrides = {}
        for j, (name, coordinate, scale) in enumerate(zip(self.names, self.coordinates,
                                                          self.scales)):
            col = batch[:, j]
            overrides[name] = (np.exp(col) if coordinate == "log" else
                               np.maximum(col, 0.0) * scale if coordinate == "nonnegative"
                               else col)[:, None]
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            logp = self.template.log_power(self.shells.model.k_unique[None, :], **overrides,
                                           **self.fixed_values)
            logp = np.minimum(logp, 700.0)
            p0 = np.exp(logp[0])
        model, w, mixing = self.shells.model, self.shells.floor, self.shells.mixing
        signal = model.signal(p0, mixing, w)[self.used] + self.correction
        if not derivatives:
            return signal, None
        grads = []
        for j in range(p):
            dlogp = (logp[1 + 2 * j] - logp[2 + 2 * j]) / steps[j]
            dp = np.where(np.isfinite(dlogp), p0 * dlogp, 0.0)
            grads.append(model.signal(dp, mixing, w)[self.used])
        return signal, np.array(grads).T

    def mean(self, theta, derivatives: bool = True):
        """(mu_i, dmu_i / dtheta) over the used shells."""
        signal, dsignal = self.signal(theta, derivatives)
        n = self.noise_power(theta)
        mu = signal + n
        if not derivatives:
            return mu, None
        if self.fit_noise:
            dsignal = np.column_stack([dsignal, np.full(mu.shape, n)])
        return mu, dsignal

    def __call__(self, theta) -> float:
        """-log L(theta) without its constant (sum_i a_i (log mu_i + x_i / mu_i))."""
        mu, _ = self.mean(theta, derivatives=False)
        if not np.all(np.isfinite(mu)) or np.any(mu <= 0):
            return 1e300
        return float(np.sum(self.a * (np.log(mu) + self.x / mu)))

    def deviance_residuals(self, theta):
        """r_i = sign(x_i - mu_i) sqrt(2 a_i (x_i / mu_i - 1 - log(x_i / mu_i))): sum r^2 is
        2 (-log L) up to a constant, so least squares on r is the maximum-likelihood fit."""
        mu, _ = self.mean(theta, derivatives=False)
        return self._residuals(mu)

    def _residuals(self, mu):
        if not np.all(np.isfinite(mu)) or np.any(mu <= 0):
            return np.full(self.x.shape, 1e150)
        u = self.x / mu
        return np.sign(u - 1.0) * np.sqrt(np.maximum(2.0 * self.a * (u - 1.0 - np.log(u)), 0.0))

    def deviance_jacobian(self, theta):
        mu, dmu = self.mean(theta)
        if not np.all(np.isfinite(mu)) or np.any(mu <= 0):
            return np.zeros((self.x.size, len(theta)))
        r = self._residuals(mu)
        small = np.abs(r) < 1e-8
        with np.errstate(divide="ignore", invalid="ignore"):
            dr = np.where(small, -np.sqrt(self.a) * self.x / mu ** 2,
                          self.a * (1.0 / mu - self.x / mu ** 2) / np.where(small, 1.0, r))
        jac = dr[:, None] * dmu
        return np.where(np.isfinite(jac), jac, 0.0)

    def log_likelihood(self, mu) -> float:
        """The gamma log-likelihood, constants included (comparable across families)."""
        a, x = self.a, self.x
        from scipy.special import gammaln
        return float(np.sum(a * np.log(a / mu) - gammaln(a) + (a - 1) * np.log(x) - a * x / mu))

    def fisher(self, theta) -> np.ndarray:
        """sqrt(n_i / 2) d log mu_i / dtheta: J with J^T J the Fisher information."""
        mu, dmu = self.mean(theta)
        return np.sqrt(self.a)[:, None] * dmu / mu[:, None]


def _fit(shells: _Shells, kind: str, k_pivot: float, start, fixed, noise: str,
         mocks: int | None = None) -> FitResult:
    names_all = free_parameters(kind)
    fixed = {n: float(v) for n, v in (fixed or {}).items()}
    names = tuple(name for name in names_all if name not in fixed)
    fit_noise = noise == "fit"
    n_par = len(names) + fit_noise
    n_used = int(shells.used.sum())
    if n_used <= n_par:
        raise PriorFitError(f"{kind}: {len(names)} hyperparameters ({', '.join(names)})"
                            + (" and the noise" if fit_noise else "") + f" but only {n_used} "
                            "usable P(k) shell(s): the data are too small to fit this family")
    coordinates = tuple("log" if _rule(kind, n) == "positive" else
                        "nonnegative" if _rule(kind, n) == "nonnegative" else "identity"
                        for n in names)
    k_used = shells.k[shells.used]
    k_lo, k_hi = float(k_used.min()), float(k_used.max())
    length = 1.0 / math.sqrt(k_lo * k_hi)        # a non-negative hyperparameter's unit (a length)
    scales = [length if c == "nonnegative" else 1.0 for c in coordinates]
    template = spectrum_from_config(kind, _complete(kind, k_pivot, names_all, fixed, start))
    like = _Likelihood(shells, template, names, coordinates, fixed, fit_noise, scales)

    starts = _starts(like, kind, names, coordinates, start, length, k_lo, k_hi)
    # log N floored at 1e-6 of the least shell power (unmeasurable below; kept from underflow)
    lower = np.array([0.0 if c == "nonnegative" else -np.inf for c in coordinates]
                     + ([math.log(1e-6 * max(float(np.min(like.x)), 1e-300))] if fit_noise else []))
    results = [r for r in (_solve(like, theta0, lower) for theta0 in starts) if r is not None]
    if not results:
        raise PriorFitError(f"{kind}: the fit failed from every start ({len(starts)} tried)")
    best_value, theta = min(results, key=lambda r: r[0])
    agree = sum(value <= best_value + 0.5 for value, _ in results)
    best_value, theta = _correct_leak(like, best_value, theta, lower)

    mu, _ = like.mean(theta, derivatives=False)
    chi2 = float(np.sum(like._residuals(mu) ** 2))
    dof = n_used - n_par
    p_value = float(chi2_distribution.sf(chi2, dof))
    loglike = like.log_likelihood(mu)

    _check_detection(like, best_value, kind, names, fit_noise, n_used)

    err = _uncertainty(like, theta, mocks)
    values = like.values(theta)
    noise_power = like.noise_power(theta)
    noise_sigma = math.sqrt(noise_power / shells.grid.cell_volume)
    message = _message(shells, names, fit_noise, err, agree, len(results))
    spectrum = spectrum_from_config(kind, _complete(kind, k_pivot, names_all,
                                                    {**fixed, **values}, None))
    power, power_error = _data_power(like, theta, err["sd_x"])
    flagged = bool(dof > 0 and chi2 / dof > FLAG_RATIO and p_value < FLAG_P_VALUE)
    warning = ""
    if flagged:
        warning = _flag_text(shells, kind, k_pivot, start, fixed, fit_noise, chi2, dof, p_value,
                             k_used, like.a, like.x, mu, mocks)
    return FitResult(kind=kind, names=names, values=values, errors=err["errors"],
                     covariance=err["cov"], fit_covariance=err["fit_cov"],
                     coordinates=coordinates, spectrum=spectrum, k=shells.k,
                     counts=shells.counts, power=power, power_error=power_error,
                     used=shells.used.copy(), noise_power=noise_power,
                     noise_power_error=noise_power * err["sd_log_noise"], noise_sigma=noise_sigma,
                     noise_sigma_error=0.5 * noise_sigma * err["sd_log_noise"],
                     noise_fitted=fit_noise, observed_fraction=shells.fraction,
                     mask_floor=shells.floor, chi2=chi2, dof=dof, p_value=p_value,
                     log_likelihood=loglike, n_parameters=n_par,
                     aic=-2.0 * loglike + 2.0 * n_par,
                     bic=-2.0 * loglike + n_par * math.log(n_used), flagged=flagged,
                     warning=warning, starts=(len(starts), agree), message=message,
                     mocks=err["mocks"])


def _solve(like: _Likelihood, theta0, lower):
    """(-log L, theta) of the trust-region fit from ``theta0``; None where it fails."""
    try:
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            result = least_squares(like.deviance_residuals, np.maximum(theta0, lower),
                                   jac=like.deviance_jacobian, bounds=(lower, np.inf),
                                   method="trf", x_scale="jac", max_nfev=300)
    except (ValueError, FloatingPointError, OverflowError, np.linalg.LinAlgError):
        return None
    value = like(result.x)
    return (value, result.x) if np.isfinite(value) and value < 1e299 else None


def _correct_leak(like: _Likelihood, best_value, theta, lower):
    """The fit refitted with the mean's within-shell leak correction (module docstring):
    the exact masked mean at the fit less the mixing model's, held while refitting."""
    shells = like.shells
    for _ in range(LEAK_ITERATIONS if shells.mixing is not None else 0):
        like.correction = 0.0
        model, _ = like.signal(theta, derivatives=False)
        exact = masked_mean_power(like.power_half(theta), shells.observed, shells.grid, shells.edges)
        like.correction = np.where(np.isfinite(exact[like.used] - model), exact[like.used] - model, 0.0)
        best_value, theta = _solve(like, theta, lower) or (best_value, theta)
    return like(theta), theta


def _uncertainty(like: _Likelihood, theta, mocks: int | None) -> dict:
    """The errors (module docstring): the inverse Fisher information, or under a mask the
    sandwich F^-1 Cov(score) F^-1 with the score's covariance from mock data sets."""
    shells = like.shells
    mocks = MOCKS if mocks is None and shells.grid.n_cells <= MOCK_MAX_CELLS else int(mocks or 0)
    mocks = mocks if shells.fraction < 1.0 and mocks >= 3 else 0
    cov_all, unconstrained_all = _covariance(like.fisher(theta))
    sd_x = None
    if mocks:
        mu, dmu = like.mean(theta)
        score = (like.a / mu ** 2)[:, None] * dmu          # d(-log L) / dtheta = -score^T (x - mu)
        seed = int.from_bytes(hashlib.sha1(like.x.tobytes()).digest()[:8], "little")
        noise_sd = shells.noise_sd * math.sqrt(like.noise_power(theta) / shells.noise_power)  # the map, at N
        x = mock_shell_powers(like.power_half(theta), noise_sd, shells.observed, shells.grid, mocks,
                              np.random.default_rng(seed), shells.edges)
        u = (x[:, like.used] - x[:, like.used].mean(axis=0)) @ score
        inverse = np.nan_to_num(cov_all)
        cov_all = np.where(np.isnan(cov_all), np.nan, inverse @ (u.T @ u / (mocks - 1)) @ inverse)
        sd_x = np.std(x, axis=0, ddof=1)
    p, values, unscale = len(like.names), like.values(theta), np.asarray(like.scales)
    slope = np.array([values[n] if c == "log" else s if c == "nonnegative" else 1.0
                      for n, c, s in zip(like.names, like.coordinates, like.scales)])
    cov = cov_all[:p, :p] * np.outer(slope, slope)
    sd = [math.inf if bad else math.sqrt(max(cov_all[i, i], 0.0)) for i, bad in enumerate(unconstrained_all)]
    return {"errors": {n: float(sd[i] * abs(slope[i])) if math.isfinite(sd[i]) else math.inf
                       for i, n in enumerate(like.names)},
            "cov": cov, "fit_cov": cov_all[:p, :p] * np.outer(unscale, unscale),   # x = scale theta
            "unconstrained": unconstrained_all, "sd_log_noise": sd[-1] if like.fit_noise else 0.0,
            "mocks": mocks, "sd_x": sd_x}


def _message(shells: _Shells, names, fit_noise, err: dict, agree: int, n_results: int) -> str:
    loose = [n for n, bad in zip(list(names) + ["the noise"] * fit_noise, err["unconstrained"]) if bad]
    notes = [f"{int(shells.used.sum())} P(k) shells, noise {'fitted' if fit_noise else 'given'}",
             loose and f"not constrained by the data: {', '.join(loose)}",
             shells.floor > 0.01 and f"the mask's scattered voxels put a flat {shells.floor:.0%} of "
             "the power into every shell (modelled)",
             agree < n_results and f"{agree} of {n_results} starts reached the best fit",
             err["mocks"] and f"errors from {err['mocks']} mock data sets under the mask (good to "
             f"~{1 / math.sqrt(2 * err['mocks'] - 2):.0%})",
             shells.fraction < 1 and not err["mocks"] and "errors from the Fisher information (no "
             "mocks on a grid this large): they leave out how the mask couples the shells, so they "
             "can be too small"]
    return "; ".join(note for note in notes if note)


def _data_power(like: _Likelihood, theta, sd_x):
    """P_data and its sd (module docstring): the data's own-shell power, the fitted noise
    and leak removed; the sd from the mocks where there are some, else from the modes."""
    shells = like.shells
    model, w = shells.model, shells.floor
    p_unique = np.exp(np.minimum(like.template.log_power(
        model.k_unique, **like.values(theta), **like.fixed_values), 700.0))
    own = model.average(p_unique)
    signal = model.signal(p_unique, shells.mixing, w)
    signal[shells.used] += like.correction
    noise_power = like.noise_power(theta)
    # the data's own-shell power: the shell keeps a share d_i of its own power and receives
    # leak_i from the others (by the fit); P_data = (x - N - leak) / (d <B^2>)
    kept = (1.0 + np.diag(shells.mixing)) if shells.mixing is not None else \
        np.full(own.shape, 1.0 - w)
    with np.errstate(invalid="ignore", divide="ignore"):
        leak = signal - kept * own
        power = (shells.x - noise_power - leak) / (kept * model.beam2)
        sd = ((signal + noise_power) / np.sqrt(np.where(shells.used, shells.half_modes, np.nan))
              if sd_x is None else np.where(shells.used, sd_x, np.nan))
    return power, sd / (kept * model.beam2)


def _starts(like: _Likelihood, kind, names, coordinates, start, length, k_lo, k_hi):
    """Starting points: every combination of a few indices and cutoff scales spanning the
    data's k range (and the caller's start), the amplitude matched to the data at each."""
    options = []
    for name, coordinate in zip(names, coordinates):
        given = (start or {}).get(name)
        ok = isinstance(given, (int, float)) and not isinstance(given, bool) \
            and math.isfinite(given)
        if coordinate == "identity":
            grid = [-3.0, 0.0, 2.0] + ([float(given)] if ok else [])
        elif coordinate == "nonnegative":
            grid = list(np.geomspace(0.5 / k_hi, 0.5 / k_lo, 3) / length) \
                + ([float(given) / length] if ok and given > 0 else [])
        else:
            grid = [math.log(given) if ok and given > 0 else 0.0]
        options.append(sorted(set(grid)))
    x = like.x
    n_data = like.shells.noise_power
    if like.fit_noise:
        top = like.shells.k[like.used] >= np.quantile(like.shells.k[like.used], 0.75)
        n_data = float(np.median(x[top]))
    excess = x - n_data
    starts = []
    for combo in itertools.product(*options):
        theta = np.array(combo, dtype=np.float64)
        if "amplitude" in names:
            i = names.index("amplitude")
            theta[i] = 0.0
            full = np.append(theta, math.log(n_data)) if like.fit_noise else theta
            signal, _ = like.signal(full, derivatives=False)
            good = (excess > 0) & (signal > 0) & np.isfinite(signal)
            if good.any():
                theta[i] = float(np.median(np.log(excess[good]) - np.log(signal[good])))
            else:
                theta[i] = math.log(max(float(np.median(x)), 1e-300))
            theta[i] = float(np.clip(theta[i], -650.0, 650.0))
        if like.fit_noise:
            theta = np.append(theta, math.log(n_data))
        starts.append(theta)
    return starts


def _check_detection(like: _Likelihood, best_value, kind, names, fit_noise, n_used) -> None:
    """PriorFitError when the signal is not detected above the noise (module docstring)."""
    a, x = like.a, like.x
    n = float(np.sum(a * x) / np.sum(a)) if fit_noise else like.shells.noise_power
    noise_only = float(np.sum(a * (np.log(n) + x / n)))
    improvement = 2.0 * (noise_only - best_value)
    if chi2_distribution.sf(max(improvement, 0.0), len(names)) >= DETECTION_P_VALUE:
        raise PriorFitError(
            f"{kind}: {len(names)} hyperparameters ({', '.join(names)}) but no usable P(k) "
            f"shell: the data's power in its {n_used} shells is consistent with the noise "
            f"alone (-2 log L improves by {improvement:.1f} only): the data are too noisy or "
            "too small to fit this family" + ("" if fit_noise else ", or the noise level set "
                                             "is too high"))


def _flag_text(shells, kind, k_pivot, start, fixed, fit_noise, chi2, dof, p_value, k_used,
               a, x, mu, mocks) -> str:
    """What a flagged fit means, for this fit (module docstring)."""
    contribution = 2.0 * a * (x / mu - 1.0 - np.log(x / mu))
    high = k_used > np.median(k_used)
    where = ("mostly at high k, where the noise dominates" if contribution[high].sum()
             > 0.7 * contribution.sum() else "mostly at low k" if contribution[~high].sum()
             > 0.7 * contribution.sum() else "at all k")
    text = (f"chi²/dof = {chi2 / dof:.3g} ({chi2:.1f} for {dof}; chance {p_value:.1g}), misfit "
            f"{where}: the {kind} family does not describe the data's P(k) within the modes' "
            "scatter: the shape is wrong (try another family), or the noise level is wrong "
            "(leftover or missing noise at high k is read as signal), or the mask or beam is "
            "not as set. The values and errors are not estimates of the truth; do not use them "
            "as prior centres unless you know why.")
    if not fit_noise:
        try:
            free = _fit(shells, kind, k_pivot, start, fixed, "fit", mocks)
        except PriorFitError:
            return text
        if not free.flagged:
            given = math.sqrt(shells.noise_power / shells.grid.cell_volume)
            text += (f" With the noise level fitted too, chi²/dof = {free.chi2_per_dof:.3g} and "
                     f"the noise sd is {free.noise_sigma:.6g} ± {free.noise_sigma_error:.2g} "
                     f"(rms over the observed voxels; set: {given:.6g}): the noise level set "
                     "is the likely cause.")
    return text


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


def _covariance(jac: np.ndarray) -> tuple[np.ndarray, list[bool]]:
    """(J^T J)^-1 and which coordinates the data do not constrain (a null direction)."""
    p = jac.shape[1]
    norms = np.sqrt(np.sum(jac ** 2, axis=0))
    scale = np.where(norms > 0, norms, 1.0)
    scaled = jac / scale
    u, s, vt = np.linalg.svd(scaled, full_matrices=False)
    good = s > 1e-7 * max(s.max(initial=0.0), 1e-300)
    inv = (vt[good].T / s[good] ** 2) @ vt[good]
    cov = inv / np.outer(scale, scale)
    unconstrained = [bool(norms[i] == 0 or np.any(np.abs(vt[~good, i]) > 1e-6)) for i in range(p)]
    for i, bad in enumerate(unconstrained):
        if bad:
            cov[i, :] = cov[:, i] = np.nan
    return cov, unconstrained
