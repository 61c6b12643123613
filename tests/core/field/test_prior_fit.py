"""core.field.prior_fit: the hyperparameters of P(k) fitted to synthetic data of known spectrum.

Each recovery test draws Gaussian fields with ``core.field.synthetic.make_dataset`` over fixed
seeds and checks the z-scores (fit - truth) / stated error: every |z| < 3, and their RMS over
the seeds in [0.5, 2] (the stated uncertainty neither too small nor inflated).
"""

import itertools
import math

import numpy as np
import pytest

from core.field.grid import Grid
from core.field.observations import Observations
from core.field.power_estimator import measure_power
from core.field.power_spectrum import PowerLaw, PowerLawCutoff
from core.field.prior_fit import PriorFitError, fit_families, fit_power_spectrum, mask_floor, mask_mixing
from core.field.synthetic import gaussian_random_field, gaussian_smooth, make_dataset, make_mask

GRID = Grid((32, 32, 32), 100.0)
TRUE = PowerLaw(amplitude=200.0, index=-2.0, k_pivot=0.3)
SEEDS = range(20)


def z_scores(spectrum, grid, sigma, kind="power_law", seeds=SEEDS, noise_map=None, **mask):
    rows = []
    for seed in seeds:
        noise = sigma if noise_map is None else noise_map
        ds = make_dataset(grid, spectrum, noise, seed=seed, **mask)
        kwargs = {"noise_map": noise_map} if noise_map is not None else {"noise_sigma": sigma}
        obs = Observations.create(ds.data, mask=ds.mask, **kwargs)
        fit = fit_power_spectrum(obs, grid, kind, spectrum.k_pivot,
                                 start={"amplitude": 1.0, "index": -1.0})
        rows.append([(fit.values[n] - getattr(spectrum, n)) / fit.errors[n] for n in fit.names])
    return np.array(rows), fit


def assert_honest(z):
    assert np.all(np.abs(z) < 3.0), z
    rms = np.sqrt(np.mean(z ** 2, axis=0))
    assert np.all((rms > 0.5) & (rms < 2.0)), rms


def test_recovers_amplitude_and_index_through_noise_and_a_25_percent_mask():
    z, fit = z_scores(TRUE, GRID, 1.0, mask="slab", mask_fraction=0.25)
    assert_honest(z)
    assert fit.observed_fraction == pytest.approx(0.75)
    assert fit.noise_power == pytest.approx(1.0 * GRID.cell_volume)
    # every non-empty shell is in the likelihood, the noise-dominated ones too (they pin N);
    # the old fit dropped those below 3 sd of excess, so leftover noise there became signal
    assert np.array_equal(fit.used, fit.counts > 0)
    assert not fit.flagged and fit.warning == ""
    assert fit.covariance.shape == (2, 2) and fit.dof == fit.used.sum() - 2


def test_recovers_amplitude_and_index_without_noise_or_mask():
    z, fit = z_scores(TRUE, GRID, 1e-4)
    assert_honest(z)
    assert fit.used.all() or fit.used.sum() >= fit.used.size - 2
    # nearly noiseless: the error of the amplitude is the cosmic variance of ~N modes
    assert fit.errors["amplitude"] / fit.values["amplitude"] < 0.05


def test_random_dropouts_white_floor_is_modelled():
    # a scattered mask puts a flat share d of the power into every shell; dividing by f alone
    # reads that floor as signal and flattens the fitted index by many sigma
    mask = make_mask(GRID, "none", dropout_fraction=0.25, rng=1)
    assert mask_floor(mask, GRID) == pytest.approx(0.25, abs=0.03)
    assert mask_floor(make_mask(GRID, "slab", 0.25), GRID) < 0.01
    z, fit = z_scores(TRUE, GRID, 1.0, seeds=range(8), mask="none", dropout_fraction=0.25)
    assert np.all(np.abs(z) < 3.0), z
    assert "flat 25%" in fit.message


def test_noise_map_subtracts_the_mean_variance_of_the_observed_voxels():
    # half the box at sd 0.5, half at 2: <sigma^2> = 2.125, not <sigma>^2 = 1.5625
    noise = np.full(GRID.shape, 0.5)
    noise[:, :16] = 2.0
    z, fit = z_scores(TRUE, GRID, None, seeds=range(8), noise_map=noise)
    assert fit.noise_power == pytest.approx(2.125 * GRID.cell_volume)
    assert np.all(np.abs(z) < 3.0), z


def test_noise_power_is_sigma_squared_times_the_cell_volume():
    # the estimator's normalisation on a non-cubic grid: pure white noise measures N flat
    grid = Grid((16, 20, 24), (50.0, 60.0, 35.0))
    noise = 1.7 * np.random.default_rng(3).standard_normal(grid.shape)
    measured = measure_power(noise, grid)
    mean = np.average(measured.power, weights=measured.counts)
    assert mean == pytest.approx(1.7 ** 2 * grid.cell_volume, rel=0.02)
    obs = Observations.create(noise, noise_sigma=1.7)
    with pytest.raises(PriorFitError, match="usable"):      # nothing above the noise
        fit_power_spectrum(obs, grid, "power_law", 0.3)


def test_generic_over_families_power_law_cutoff():
    true = PowerLawCutoff(amplitude=200.0, index=-1.0, k_pivot=0.3, cutoff_scale=2.0)
    z, fit = z_scores(true, GRID, 0.3, kind="power_law_cutoff", seeds=range(8), mask="none")
    assert fit.names == ("amplitude", "index", "cutoff_scale")
    assert fit.coordinates == ("log", "identity", "nonnegative")
    assert np.all(np.abs(z) < 3.0), z


def test_refuses_a_family_with_more_parameters_than_usable_shells():
    grid = Grid((4, 4, 4), 100.0)         # 4 shells on the whole grid
    true = PowerLawCutoff(amplitude=1e4, index=-1.0, k_pivot=0.1, cutoff_scale=1.0)
    ds = make_dataset(grid, true, 30.0, seed=0)
    obs = Observations.create(ds.data, noise_sigma=30.0)
    with pytest.raises(PriorFitError) as err:
        fit_power_spectrum(obs, grid, "power_law_cutoff", 0.1)
    text = str(err.value)
    assert "3 hyperparameters" in text and "usable P(k) shell" in text


def test_refuses_what_it_cannot_fit():
    ds = make_dataset(GRID, TRUE, 1.0, seed=0)
    obs = Observations.create(ds.data, noise_sigma=1.0)
    with pytest.raises(PriorFitError, match="prior.kind = 'table'.*no hyperparameters"):
        fit_power_spectrum(obs, GRID, "table", 0.3)
    with pytest.raises(PriorFitError, match="unknown P\\(k\\) family"):
        fit_power_spectrum(obs, GRID, "powr_law", 0.3)
    counts = Observations.create(np.ones(GRID.shape), kind="poisson_lognormal", mean_count=1.0)
    with pytest.raises(PriorFitError, match="likelihood.kind = 'poisson_lognormal'"):
        fit_power_spectrum(counts, GRID, "power_law", 0.3)


def test_fixed_hyperparameter_is_held_and_the_rest_fitted():
    ds = make_dataset(GRID, TRUE, 1.0, seed=4)
    obs = Observations.create(ds.data, noise_sigma=1.0)
    fit = fit_power_spectrum(obs, GRID, "power_law", 0.3, fixed={"index": -2.0})
    assert fit.names == ("amplitude",)
    assert fit.spectrum.index == -2.0
    assert math.isfinite(fit.errors["amplitude"])
    assert abs(fit.values["amplitude"] - 200.0) < 3 * fit.errors["amplitude"]


def smooth_case(sigma_set, n=32):
    """Issue 32's case, smaller: white noise smoothed over 2 cells (P = A exp(-(k R)^2),
    R = 2 cells = 4, index 0), unit variance, plus white noise of sd 0.3, a cube of NaN."""
    rng = np.random.default_rng(0)
    grid = Grid((n,) * 3, 2.0 * n)
    signal = gaussian_smooth(rng.standard_normal(grid.shape), Grid((n,) * 3, float(n)), 2.0)
    data = (signal / signal.std() + 0.3 * rng.standard_normal(grid.shape)).astype(np.float32)
    data[12:20, 12:20, 12:20] = np.nan
    ok = np.isfinite(data)
    return Observations.create(np.where(ok, data, 0.0), mask=ok, noise_sigma=sigma_set), grid


def test_issue_32_leftover_noise_is_flagged_and_the_free_noise_fit_recovers_the_truth():
    # the noise set 0.29 for a true 0.30: the old fit dropped the noise-dominated shells and
    # read the leftover noise at high k as signal (a power law of index ~ -7, chi^2 / dof
    # ~ 160, never flagged; the cutoff family stuck at R ~ 0.7)
    obs, grid = smooth_case(0.29)
    choice = fit_families(obs, grid, 0.3)
    assert choice.chosen == "power_law_cutoff"
    law, cutoff = choice.fits["power_law"], choice.fits["power_law_cutoff"]
    assert law.flagged and law.chi2_per_dof > 10 and "does not describe" in law.warning
    assert cutoff.flagged and "the noise level set is the likely cause" in cutoff.warning
    assert law.bic - cutoff.bic > 100

    free = fit_families(obs, grid, 0.3, noise="fit")
    fit = free.best
    assert free.chosen == "power_law_cutoff" and not fit.flagged and fit.noise_fitted
    truth = {"index": 0.0, "cutoff_scale": 4.0}
    for name, value in truth.items():
        assert abs(fit.values[name] - value) < 3 * fit.errors[name], (name, fit.values)
    assert abs(fit.noise_sigma - 0.3) < 4 * fit.noise_sigma_error and fit.noise_sigma_error < 0.003
    # the noise set right: the cutoff fit is not flagged and agrees
    right = fit_power_spectrum(smooth_case(0.3)[0], grid, "power_law_cutoff", 0.3)
    assert not right.flagged
    for name, value in truth.items():
        assert abs(right.values[name] - value) < 3 * right.errors[name], (name, right.values)


def test_mask_mixing_is_the_mean_of_the_masked_power_of_a_shell_spectrum():
    # column j of M: the masked, zero-filled field's shell power / f for P = 1 on shell j;
    # checked against the average over draws of such fields (no mask: M = 0)
    grid = Grid((12, 12, 12), 12.0)
    edges = grid.shell_edges()
    assert np.abs(mask_mixing(np.ones(grid.shape, bool), grid, edges)).max() < 1e-12
    mask = make_mask(grid, "slab", 0.25)
    mixing = mask_mixing(mask, grid, edges)
    j = 2
    lo, hi = edges[j], edges[j + 1]

    def shell_spectrum(k):
        return np.where((k >= lo) & (k < hi), 1.0, 0.0)

    rng = np.random.default_rng(0)
    draws = []
    for _ in range(400):
        field = gaussian_random_field(grid, shell_spectrum, rng) * mask
        draws.append(measure_power(field, grid, edges).power / mask.mean())
    mean = np.mean(draws, axis=0)
    sd = np.std(draws, axis=0) / math.sqrt(len(draws))
    expected = mixing[:, j] + (np.arange(edges.size - 1) == j)
    ok = sd > 0
    assert np.all(np.abs(mean[ok] - expected[ok]) < 4 * sd[ok] + 1e-9), (mean, expected)
    assert expected[j] < 0.95 and expected[j - 1] > 0.01      # the slab moves power across


SPECTRA_SWEEP = {
    "power_law": PowerLaw(amplitude=200.0, index=-2.0, k_pivot=0.3),
    "cutoff": PowerLawCutoff(amplitude=200.0, index=-1.0, k_pivot=0.3, cutoff_scale=2.0),
    "band-limited": PowerLawCutoff(amplitude=300.0, index=2.0, k_pivot=0.3, cutoff_scale=4.0),
}
MASK_SWEEP = ({"mask": "none"}, {"mask": "slab", "mask_fraction": 0.25},
              {"mask": "sphere", "mask_fraction": 0.2}, {"mask": "none", "dropout_fraction": 0.2})


def test_z_of_every_hyperparameter_over_many_data_sets_spectra_masks_and_noise_levels():
    # 48 data sets (3 spectra x 4 masks x 2 noise levels x noise given / fitted) on a 24^3
    # grid; bench/prior_fit.py runs the same over hundreds
    grid = Grid((24, 24, 24), 75.0)
    z, flagged, wrong = [], 0, []
    for (label, truth), mask, (sigma, noise), in itertools.product(
            SPECTRA_SWEEP.items(), MASK_SWEEP, ((0.3, "given"), (1.0, "fit"))):
        seed = len(z)
        ds = make_dataset(grid, truth, sigma, seed=seed, **mask)
        obs = Observations.create(ds.data, mask=ds.mask,
                                  noise_sigma=sigma if noise == "given" else 1.2 * sigma)
        choice = fit_families(obs, grid, 0.3, noise=noise)
        fit = choice.fits[truth.kind]
        flagged += fit.flagged
        row = [(fit.values[n] - getattr(truth, n)) / fit.errors[n] for n in fit.names]
        if noise == "fit":
            row.append((fit.noise_sigma - sigma) / fit.noise_sigma_error)
        z.extend(row)
        if truth.kind == "power_law_cutoff" and choice.chosen != truth.kind:
            wrong.append((label, mask))
    z = np.abs(np.array(z))
    assert np.mean(z < 3.0) >= 0.99, np.sort(z)[-5:]
    assert 0.5 < np.sqrt(np.mean(z ** 2)) < 1.5
    assert flagged == 0
    assert not wrong                      # a cutoff is always told from a power law here
