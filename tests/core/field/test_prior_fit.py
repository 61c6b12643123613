"""core.field.prior_fit: the hyperparameters of P(k) fitted to synthetic data of known spectrum.

Each recovery test draws Gaussian fields with ``core.field.synthetic.make_dataset`` over fixed
seeds and checks the z-scores (fit - truth) / stated error: every |z| < 3, and their RMS over
the seeds in [0.5, 2] (the stated uncertainty neither too small nor inflated).
"""

import math

import numpy as np
import pytest

from core.field.grid import Grid
from core.field.observations import Observations
from core.field.power_estimator import measure_power
from core.field.power_spectrum import PowerLaw, PowerLawCutoff
from core.field.prior_fit import PriorFitError, fit_power_spectrum, mask_floor
from core.field.synthetic import make_dataset, make_mask

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
    assert 0 < fit.used.sum() < fit.used.size            # the noise-dominated shells dropped
    assert "dropped" in fit.message
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
