"""Tests for core.field.power_spectrum: formulas, tables, registry, hyperparameter prior kinds."""

import math
import warnings

import numpy as np
import pytest

from core.field.grid import Grid
from core.field.power_spectrum import (
    FIELD_HYPERPRIOR_KINDS,
    SPECTRA,
    BandPowers,
    PowerLaw,
    PowerLawCutoff,
    PowerSpectrum,
    TabulatedPower,
    band_edges,
    band_power_names,
    spectrum_from_config,
)
from core.priors import SAMPLED_KINDS


def test_power_law_formula_at_sample_points():
    spectrum = PowerLaw(amplitude=2.5e3, index=-1.5, k_pivot=0.2)
    for k in (0.01, 0.2, 0.37, 3.0):
        assert spectrum(np.array(k)) == pytest.approx(2.5e3 * (k / 0.2) ** -1.5, rel=1e-12)
    assert spectrum(0.2) == pytest.approx(2.5e3)
    k = np.array([0.05, 0.1, 0.4])
    np.testing.assert_allclose(spectrum.log_power(k), np.log(2.5e3) - 1.5 * np.log(k / 0.2),
                               rtol=1e-12)


def test_power_law_cutoff_formula_at_sample_points():
    spectrum = PowerLawCutoff(amplitude=40.0, index=0.8, k_pivot=1.0, cutoff_scale=1.7)
    for k in (0.05, 0.5, 1.0, 2.0):
        expected = 40.0 * k**0.8 * math.exp(-(k * 1.7) ** 2)
        assert spectrum(k) == pytest.approx(expected, rel=1e-12)
    plain = PowerLawCutoff(amplitude=40.0, index=0.8, k_pivot=1.0, cutoff_scale=0.0)
    np.testing.assert_allclose(plain([0.3, 2.0]), PowerLaw(40.0, 0.8, 1.0)([0.3, 2.0]))


@pytest.mark.parametrize("spectrum", [
    PowerLaw(1.0, -3.0, 0.1),
    PowerLaw(1.0, 2.0, 0.1),
    PowerLawCutoff(1.0, -2.0, 0.1, 5.0),
    TabulatedPower([0.1, 1.0], [10.0, 0.1]),
])
def test_zero_k_gives_zero_without_warnings(spectrum):
    k = np.array([[0.0, 0.5], [1.0, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = spectrum(k)
        logp = spectrum.log_power(k)
    assert p[0, 0] == 0.0 and p[1, 1] == 0.0
    assert np.all(np.isfinite(p)) and np.all(p[k > 0] > 0)
    assert logp[0, 0] == -np.inf and np.all(np.isfinite(logp[k > 0]))
    with pytest.raises(ValueError, match="-1.0"):
        spectrum(np.array([-1.0]))
    with pytest.raises(ValueError, match="nan"):
        spectrum(np.array([np.nan]))


def test_overrides_broadcast_and_unknown_names_rejected():
    spectrum = PowerLaw(amplitude=1.0, index=-2.0, k_pivot=1.0)
    amplitudes = np.array([1.0, 2.0, 4.0])[:, None]
    k = np.array([0.5, 1.0, 2.0])
    p = spectrum.evaluate(k, amplitude=amplitudes, index=-1.0)
    np.testing.assert_allclose(p, amplitudes * k[None, :] ** -1.0)
    with pytest.raises(ValueError, match="'k_pivot'"):
        spectrum.evaluate(k, k_pivot=2.0)       # a convention, not a hyperparameter
    with pytest.raises(ValueError, match="amplitude"):
        spectrum.evaluate(k, amplitude=-1.0)
    cutoff = PowerLawCutoff(1.0, 0.0, 1.0, 0.0)
    np.testing.assert_allclose(cutoff.evaluate(k, cutoff_scale=1.0), np.exp(-(k**2)))
    assert PowerLaw.parameters == ("amplitude", "index")
    assert PowerLawCutoff.parameters == ("amplitude", "index", "cutoff_scale")
    assert TabulatedPower.parameters == ()


@pytest.mark.parametrize("kwargs, name", [
    (dict(amplitude=0.0, index=1.0, k_pivot=1.0), "amplitude"),
    (dict(amplitude=1.0, index=float("nan"), k_pivot=1.0), "index"),
    (dict(amplitude=1.0, index=1.0, k_pivot=-1.0), "k_pivot"),
    (dict(amplitude="a lot", index=1.0, k_pivot=1.0), "amplitude"),
])
def test_bad_analytic_parameters(kwargs, name):
    with pytest.raises(ValueError, match=name):
        PowerLaw(**kwargs)


def test_table_exact_at_nodes_and_loglog_linear_between():
    k = np.array([0.01, 0.03, 0.1, 0.5, 2.0])
    p = np.array([300.0, 900.0, 2000.0, 150.0, 3.0])
    table = TabulatedPower(k, p)
    np.testing.assert_allclose(table(k), p, rtol=1e-12)
    # geometric midpoint of a segment: P is the geometric mean of the ends
    for i in range(len(k) - 1):
        mid = math.sqrt(k[i] * k[i + 1])
        assert table(mid) == pytest.approx(math.sqrt(p[i] * p[i + 1]), rel=1e-12)
        # any point: log P linear in log k
        t = 0.3
        kt = math.exp((1 - t) * math.log(k[i]) + t * math.log(k[i + 1]))
        pt = math.exp((1 - t) * math.log(p[i]) + t * math.log(p[i + 1]))
        assert table(kt) == pytest.approx(pt, rel=1e-12)
    # extrapolation continues the end segments as power laws
    slope_lo = math.log(p[1] / p[0]) / math.log(k[1] / k[0])
    slope_hi = math.log(p[-1] / p[-2]) / math.log(k[-1] / k[-2])
    assert table(0.001) == pytest.approx(p[0] * (0.001 / k[0]) ** slope_lo, rel=1e-12)
    assert table(10.0) == pytest.approx(p[-1] * (10.0 / k[-1]) ** slope_hi, rel=1e-12)


def test_registry_and_config_roundtrip(tmp_path):
    assert SPECTRA == {"power_law": PowerLaw, "power_law_cutoff": PowerLawCutoff,
                       "table": TabulatedPower, "band_powers": BandPowers}
    for spectrum in (PowerLaw(3.0, -2.0, 0.5), PowerLawCutoff(3.0, -2.0, 0.5, 4.0),
                     TabulatedPower([0.1, 0.2, 0.4], [1.0, 2.0, 0.5]),
                     BandPowers((0.1, 0.2, 0.4), (3.0, 1.0)), BandPowers((0.1, 0.2, 0.4), (3.0, 1.0), 0.5)):
        assert isinstance(spectrum, PowerSpectrum)
        assert SPECTRA[spectrum.kind] is type(spectrum)
        rebuilt = spectrum_from_config(spectrum.kind, spectrum.to_config())
        assert rebuilt == spectrum
    # files are core.io's (load_power_table): the numpy model reads none
    with pytest.raises(ValueError, match="unknown key 'path'"):
        spectrum_from_config("table", {"path": str(tmp_path / "t.txt")})
    with pytest.raises(ValueError, match="'gaussian'"):
        spectrum_from_config("gaussian", {})
    with pytest.raises(ValueError, match="'slope'"):
        spectrum_from_config("power_law", {"amplitude": 1, "slope": 2, "k_pivot": 1})
    with pytest.raises(ValueError, match="'k_pivot'"):
        spectrum_from_config("power_law", {"amplitude": 1, "index": 2})
    with pytest.raises(ValueError, match="config.toml"):
        spectrum_from_config("power_law", {"amplitude": -1, "index": 2, "k_pivot": 1},
                             source="config.toml")


# -- hyperparameter priors: their kinds (the priors themselves: tests/core/test_priors.py)


def test_field_hyperprior_kinds_are_registry_kinds():
    assert set(FIELD_HYPERPRIOR_KINDS) == {"normal", "lognormal", "uniform"}
    assert set(FIELD_HYPERPRIOR_KINDS) <= set(SAMPLED_KINDS)


# ---------------------------------------------------------------------------- band powers


def test_band_powers_are_piecewise_constant_with_clamped_ends():
    bands = BandPowers((0.1, 0.2, 0.4, 0.8), (5.0, 2.0, 1.0))
    assert bands.parameters == ("band_power_00", "band_power_01", "band_power_02")
    k = np.array([0.0, 0.05, 0.1, 0.199, 0.2, 0.5, 0.8, 3.0])
    np.testing.assert_array_equal(bands.bin_index(k), [-1, 0, 0, 0, 1, 2, 2, 2])
    np.testing.assert_allclose(bands(k), [0.0, 5.0, 5.0, 5.0, 2.0, 1.0, 1.0, 1.0], rtol=1e-15)
    # overrides broadcast against k, one bin at a time
    got = bands.evaluate(np.array([0.15, 0.3]), band_power_01=np.array([[7.0], [9.0]]))
    np.testing.assert_allclose(got, [[5.0, 7.0], [5.0, 9.0]], rtol=1e-15)
    with pytest.raises(ValueError, match="unknown hyperparameter 'amplitude'"):
        bands.evaluate(0.3, amplitude=1.0)
    with pytest.raises(ValueError, match="must be positive"):
        bands.evaluate(0.3, band_power_02=-1.0)


@pytest.mark.parametrize("edges, powers, walk, message", [
    ((0.1,), (), None, "at least 2"), ((0.2, 0.1), (1.0,), None, "strictly increasing"),
    ((0.0, 0.1), (1.0,), None, "positive"), ((0.1, 0.2, 0.3), (1.0,), None, "one power per bin"),
    ((0.1, 0.2), (0.0,), None, "positive and finite"), ((0.1, 0.2), (1.0,), -1.0, "random_walk_scale")])
def test_band_powers_reject_bad_input(edges, powers, walk, message):
    with pytest.raises(ValueError, match=message):
        BandPowers(edges, powers, walk)


def test_band_random_walk_prior_is_a_sum_of_normal_steps():
    from scipy import stats

    bands = BandPowers((0.1, 0.2, 0.4, 0.8), (5.0, 2.0, 1.0), random_walk_scale=0.3)
    log_p = np.array([[1.0, 0.5, 0.9], [0.0, 0.0, 0.0]])
    expected = stats.norm(0, 0.3).logpdf(np.diff(log_p, axis=-1)).sum(axis=-1)
    np.testing.assert_allclose(bands.log_random_walk_prior(log_p), expected, rtol=1e-13)
    np.testing.assert_array_equal(BandPowers((0.1, 0.2, 0.4), (1.0, 2.0)).log_random_walk_prior(log_p[:, :2]), 0.0)


@pytest.mark.parametrize("shape, box, n_bins", [((16, 16, 16), 64.0, 16), ((8, 8, 8), 10.0, 5),
                                                ((12, 10, 8), (30.0, 20.0, 10.0), 12), ((32, 32, 32), 100.0, 16)])
def test_default_band_edges_cover_every_mode_with_no_empty_bin(shape, box, n_bins):
    grid = Grid(shape, box)
    k = grid.k_magnitude_full()
    edges = band_edges(k, n_bins)
    assert edges.size == n_bins + 1 and np.all(np.diff(edges) > 0)
    assert edges[0] < k[k > 0].min() and edges[-1] > k.max()
    counts = np.histogram(k[k > 0], edges)[0]
    assert np.all(counts > 0) and counts.sum() == grid.n_cells - 1
    if shape == (32, 32, 32):     # enough distinct |k|: the upper bins are even in log k
        widths = np.diff(np.log(edges))[4:]
        assert widths.max() < 1.3 * widths.min()


def test_default_band_edges_need_enough_distinct_wavenumbers():
    k = Grid((4, 4, 4), 10.0).k_magnitude_full()
    distinct = np.unique(np.round(k[k > 0], 9)).size
    assert band_edges(k, distinct).size == distinct + 1
    with pytest.raises(ValueError, match=f"only {distinct} distinct"):
        band_edges(k, distinct + 1)


def test_band_power_names_sort_in_bin_order():
    assert band_power_names(3) == ["band_power_00", "band_power_01", "band_power_02"]
    names = band_power_names(120)
    assert names[-1] == "band_power_119" and sorted(names) == names


@pytest.mark.parametrize("walk", [None, 0.3])
def test_band_log_prior_is_the_density_the_bins_and_the_walk_give(walk):
    # log N(x; mean, cov) minus (each bin's normal log density + the random walk's) is one
    # constant over x: the same distribution, normalised
    from scipy.stats import multivariate_normal, norm

    from core.field.power_spectrum import band_log_prior

    mean, cov = band_log_prior(6, 2.0, 1.5, walk)
    bands = BandPowers(tuple(np.geomspace(0.1, 1.0, 7)), (1.0,) * 6, random_walk_scale=walk)
    x = np.random.default_rng(1).normal(2.0, 2.0, size=(20, 6))
    ours = multivariate_normal(mean, cov).logpdf(x)
    theirs = norm(2.0, 1.5).logpdf(x).sum(axis=1) + bands.log_random_walk_prior(x)
    assert np.ptp(ours - theirs) < 1e-10
    if walk is None:
        np.testing.assert_allclose(cov, np.eye(6) * 1.5 ** 2, atol=1e-14)
    else:                                  # the walk ties neighbours: narrower, correlated
        assert np.all(np.sqrt(np.diag(cov)) < 1.5) and cov[0, 1] > 0
