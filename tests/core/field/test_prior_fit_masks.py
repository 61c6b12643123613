"""core.field.prior_fit under a mask: the mean of the masked shell power where P falls steeply
across a shell, and errors that include how the mask couples the shells.

Each check is against an independent reference: the average and the scatter of masked
Gaussian fields drawn with ``core.field.synthetic`` (the mean, the mocks), and the spread of
the fitted values over data sets of known truth (the errors).
"""

import math
import warnings

import numpy as np

from core.field import prior_fit
from core.field.grid import Grid
from core.field.mask_mixing import mask_mixing
from core.field.observations import Observations
from core.field.power_estimator import (
    expected_shell_power,
    masked_data_field,
    masked_mean_power,
    measure_power,
    mock_shell_powers,
)
from core.field.power_spectrum import PowerLawCutoff
from core.field.prior_fit import fit_power_spectrum
from core.field.synthetic import gaussian_random_field, make_dataset, make_mask

SMALL = Grid((16, 16, 16), 50.0)


def steep(k):
    """White noise smoothed over 2 cells: P falls by e^-1.6 across a shell near k = 1 / R."""
    return 1e4 * np.exp(-(k * 6.25) ** 2)


def masked_draws(grid, spectrum, mask, n, sigma=0.0, seed=0):
    """Shell power / f of ``n`` masked fields (plus white noise of sd ``sigma``), as the data's."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        field = gaussian_random_field(grid, spectrum, rng) + sigma * rng.standard_normal(grid.shape)
        filled, fraction = masked_data_field(field, mask)
        out.append(measure_power(filled, grid).power / fraction)
    return np.array(out)


def test_masked_mean_power_is_the_mean_of_masked_draws_where_the_shell_mixing_is_off():
    # the shell mixing takes P constant within each shell: under a hole, with P falling by
    # e^-1.6 across a shell, the leak from a shell's near side is larger and the mixing's
    # mean is off by up to 10 % (many standard errors); the window convolved with P is not
    mask = make_mask(SMALL, "sphere", 0.2)
    draws = masked_draws(SMALL, steep, mask, 400)
    mean, se = draws.mean(axis=0), draws.std(axis=0) / math.sqrt(len(draws))
    exact = masked_mean_power(steep(SMALL.k_magnitude_half()), mask, SMALL)
    own = expected_shell_power(steep, SMALL).power
    mixed = own + mask_mixing(mask, SMALL, SMALL.shell_edges()) @ np.nan_to_num(own)
    ok = se > 0
    assert np.all(np.abs(mean - exact)[ok] < 4 * se[ok]), ((mean - exact) / se)
    assert np.max(np.abs(mean - mixed)[ok] / se[ok]) > 6
    # P constant within each shell: the two agree to rounding
    index = SMALL.shell_index_half(SMALL.shell_edges())
    flat = np.where(index >= 0, 1.0 + np.maximum(index, 0), 0.0)
    levels = 1.0 + np.arange(SMALL.shell_edges().size - 1)
    assert np.allclose(masked_mean_power(flat, mask, SMALL), levels + mask_mixing(
        mask, SMALL, SMALL.shell_edges()) @ levels, rtol=1e-10)


def test_mock_shell_powers_scatter_as_the_masked_data_do():
    # the mocks (single precision, the noise drawn with the signal) against masked fields
    # drawn by core.field.synthetic: mean and sd of every shell, and the correlation of
    # neighbouring shells that the hole's leak makes
    mask = make_mask(SMALL, "sphere", 0.2)
    draws = masked_draws(SMALL, steep, mask, 400, sigma=0.1, seed=1)
    power = steep(SMALL.k_magnitude_half())
    mocks = mock_shell_powers(power, 0.1, mask, SMALL, 400, np.random.default_rng(2))
    mocks_map = mock_shell_powers(power, np.full(SMALL.shape, 0.1), mask, SMALL, 400,
                                  np.random.default_rng(3))
    se = draws.std(axis=0) / math.sqrt(len(draws))
    ok = se > 0
    for m in (mocks, mocks_map):
        assert np.all(np.abs(m.mean(axis=0) - draws.mean(axis=0))[ok] < 4 * math.sqrt(2) * se[ok])
        ratio = m.std(axis=0)[ok] / draws.std(axis=0)[ok]
        assert np.all((ratio > 0.8) & (ratio < 1.25)), ratio
    corr_draws = np.corrcoef(draws[:, ok].T)
    corr_mocks = np.corrcoef(mocks[:, ok].T)
    assert np.max(np.abs(np.diag(corr_draws, 1) - np.diag(corr_mocks, 1))) < 0.25
    assert np.max(np.diag(corr_draws, 1)) > 0.3           # the shells are not independent


def hole_case(seed, grid):
    radius = 2 * grid.cell_size[0]
    truth = PowerLawCutoff(amplitude=8 * math.pi ** 1.5 * radius ** 3, index=0.0, k_pivot=0.3,
                           cutoff_scale=radius)
    ds = make_dataset(grid, truth, 0.1, seed=seed, mask="sphere", mask_fraction=0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obs = Observations.create(ds.data, mask=ds.mask, noise_sigma=0.12)
    return obs, truth


def test_errors_under_a_hole_match_the_spread_of_fits_over_data_sets():
    # smoothed white noise under a 20 % hole, little noise: the hole's edges leak the low-k
    # modes' fluctuations into the noise-dominated shells that pin the noise, and together.
    # The Fisher errors (the shells taken as independent) are too small there (the noise sd's
    # z scatter 1.6 times wider than they say); the sandwich errors from mocks are not
    grid = Grid((20, 20, 20), 62.5)
    z, z_fisher, ratio = [], [], []
    for seed in range(30):
        obs, truth = hole_case(seed, grid)
        fit = fit_power_spectrum(obs, grid, "power_law_cutoff", 0.3, noise="fit")
        fisher = fit_power_spectrum(obs, grid, "power_law_cutoff", 0.3, noise="fit", mocks=0)
        assert fit.mocks == prior_fit.MOCKS and "mock data sets" in fit.message
        assert fisher.mocks == 0 and fisher.values == fit.values
        z.append([(fit.values["index"] - truth.index) / fit.errors["index"],
                  (fit.noise_sigma - 0.1) / fit.noise_sigma_error])
        z_fisher.append((fisher.noise_sigma - 0.1) / fisher.noise_sigma_error)
        ratio.append(fit.noise_sigma_error / fisher.noise_sigma_error)
    z = np.array(z)
    rms = np.sqrt(np.mean(z ** 2, axis=0))
    assert np.all((rms > 0.7) & (rms < 1.35)), rms
    assert np.all(np.abs(z) < 3.5), z
    assert np.sqrt(np.mean(np.square(z_fisher))) > 1.35
    assert np.mean(ratio) > 1.3


def test_mock_errors_repeat_and_are_left_out_where_they_do_not_apply(monkeypatch):
    grid = Grid((16, 16, 16), 50.0)
    obs, _ = hole_case(0, grid)
    first = fit_power_spectrum(obs, grid, "power_law_cutoff", 0.3, noise="fit")
    again = fit_power_spectrum(obs, grid, "power_law_cutoff", 0.3, noise="fit")
    assert first.errors == again.errors and first.mocks == prior_fit.MOCKS   # seeded by the data
    assert np.all(np.isfinite(first.power_error[first.used]))
    # no mask: the shells are independent, the Fisher errors exact, no mocks
    ds = make_dataset(grid, PowerLawCutoff(amplitude=1e4, index=0.0, k_pivot=0.3,
                                           cutoff_scale=6.25), 0.1, seed=0)
    unmasked = fit_power_spectrum(Observations.create(ds.data, noise_sigma=0.1), grid,
                                  "power_law_cutoff", 0.3)
    assert unmasked.mocks == 0 and "mock" not in unmasked.message
    # a grid above MOCK_MAX_CELLS keeps the Fisher errors and says what they leave out
    monkeypatch.setattr(prior_fit, "MOCK_MAX_CELLS", 1000)
    large = fit_power_spectrum(obs, grid, "power_law_cutoff", 0.3, noise="fit")
    assert large.mocks == 0 and "can be too small" in large.message
    assert large.values == first.values


def test_a_positive_hyperparameter_s_interval_is_symmetric_in_its_log():
    grid = Grid((16, 16, 16), 50.0)
    obs, _ = hole_case(0, grid)
    fit = fit_power_spectrum(obs, grid, "power_law_cutoff", 0.3, noise="fit")
    for name, coordinate in zip(fit.names, fit.coordinates):
        x, sd = fit.values[name], fit.errors[name]
        low, high = fit.interval(name)
        if coordinate == "log":              # amplitude, cutoff scale: x ×/÷ exp(sd(log x))
            assert math.isclose(math.log(high / x), sd / x) and math.isclose(math.log(x / low), sd / x)
            assert high - x > x - low > 0
        else:                                # the index: x ± sd
            assert math.isclose(high - x, sd) and math.isclose(x - low, sd)
    assert set(fit.coordinates) >= {"log", "identity"}
