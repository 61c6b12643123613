"""Size limits of a config and the dtype range of its float settings (core.config.limits)."""

from __future__ import annotations

import time

import pytest

import core.config as C
from core.config import ConfigError
from core.config import limits as L

BASE = {"data": {"path": "d.npz"}}


def _error(document) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        C.config_from_dict(document)
    return info.value


def test_a_huge_config_file_is_refused_by_its_size_before_it_is_read(tmp_path):
    path = tmp_path / "huge.toml"
    with open(path, "wb") as handle:    # sparse: 4 GiB on the size, nothing on the disk
        handle.truncate(4 * 2**30)
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        C.load_config(path)
    assert time.perf_counter() - t0 < 1.0          # not read: 4 GiB would take seconds
    err = info.value
    assert err.key is None and err.source == str(path)
    assert str(err) == (f"{path}: config: the config is 4,294,967,296 bytes; a config may be "
                        "at most 1,048,576 bytes (1 MiB; a run's config is a few KiB: is this "
                        "the right file?)")
    # just at the limit it is read (and judged as TOML)
    path.write_bytes(b"#" * (L.MAX_CONFIG_BYTES - 1) + b"\n")
    assert "data.path: missing" in str(pytest.raises(ConfigError, C.load_config, path).value)


def test_a_50_mb_string_value_is_refused_before_toml_parses_it():
    text = '[data]\npath = "d.npz"\nkey = "' + "x" * 50_000_000 + '"\n'
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        C.parse_config(text, source="big.toml")
    assert time.perf_counter() - t0 < 2.0
    assert str(info.value).startswith("big.toml: config: the config is 50,000,031 bytes; a "
                                      "config may be at most 1,048,576 bytes")


@pytest.mark.parametrize("table,key,limit", [
    ("data", "key", L.MAX_STRING_CHARS), ("data", "path", L.MAX_PATH_CHARS),
    ("data", "mask", L.MAX_PATH_CHARS), ("grid", "unit", L.MAX_STRING_CHARS)])
def test_a_long_string_value_names_its_key_and_the_limit(table, key, limit):
    def doc(n):
        value = "a" * (n - 4) + ".npz"
        return {**BASE, table: {**BASE.get(table, {}), key: value}}

    C.config_from_dict(doc(limit))                   # at the limit: accepted
    err = _error(doc(limit + 1))
    what = "a file name" if limit == L.MAX_PATH_CHARS else "a string here"
    assert err.key == f"{table}.{key}"
    assert str(err) == f"{table}.{key}: is {limit + 1:,} characters long; {what} may have at " \
                       f"most {limit:,}"


def test_a_long_array_and_a_long_key_are_refused():
    err = _error({**BASE, "grid": {"box_size": [1.0] * 1000}})
    assert str(err) == "grid.box_size: is an array of 1,000 items; an array in a config may " \
                       "have at most 16"
    err = _error({**BASE, "sampler": {"k" * 5000: 1}})
    assert err.key == "sampler." + "k" * 5000 and "at most 1,024" in str(err)
    assert len(str(err)) < 10_100


@pytest.mark.parametrize("key,value,limit", [
    ("num_samples", 10**9, "10,000,000"), ("num_warmup", 10**9, "10,000,000"),
    ("chunk_size", 10**9, "10,000,000"), ("num_leapfrog_steps", 10**7, "2,048"),
    ("dense_modes", 10**5, "4,096")])
def test_huge_sampler_counts_are_refused_at_parse_time(key, value, limit):
    err = _error({**BASE, "sampler": {key: value}})
    assert err.key == f"sampler.{key}"
    assert str(err).startswith(f"sampler.{key}: may be at most {limit} (")
    assert str(err).endswith(f"got {value} (an integer)")
    assert "gradient evaluations" in str(err) or key in ("chunk_size", "dense_modes")
    top = int(limit.replace(",", ""))
    assert getattr(C.config_from_dict({**BASE, "sampler": {key: top}}).sampler, key) == top


def test_max_tree_depth_is_no_setting():
    err = _error({**BASE, "sampler": {"max_tree_depth": 10**6}})
    assert err.key == "sampler.max_tree_depth" and "unknown key 'max_tree_depth'" in str(err)


@pytest.mark.parametrize("table,key,value,problem", [
    ("sampler", "step_size", 1e300, "1e+300 overflows field.dtype = 'float32' (its largest "
     "value is 3.4e+38); use a smaller value or field.dtype = 'float64'"),
    ("sampler", "step_size", 1e-50, "1e-50 is too small for field.dtype = 'float32' (its "
     "smallest normal value is 1.18e-38; below it a value loses its precision or becomes 0); "
     "use a larger value or field.dtype = 'float64'"),
    ("grid", "box_size", 1e39, "1e+39 overflows field.dtype = 'float32'"),
    ("likelihood", "field_mean", -1e39, "-1e+39 overflows field.dtype = 'float32'"),
    ("data", "noise_sigma", 1e-30, "1e-30 is too small for field.dtype = 'float32': the "
     "likelihood weighs each residual by 1/noise_sigma^2 = 1e+60, above the dtype's largest "
     "value 3.4e+38; need noise_sigma >= 5.42e-20 or field.dtype = 'float64', or rescale the "
     "data"),
    ("prior", "amplitude", {"dist": "lognormal", "loc": 1e39, "scale": 1.0},
     "1e+39 overflows field.dtype = 'float32'"),
])
def test_a_float_setting_the_run_dtype_cannot_hold_is_refused(table, key, value, problem):
    doc = {**BASE, table: {**BASE.get(table, {}), key: value}}
    err = _error(doc)
    expected = f"{table}.{key}" + (".loc" if isinstance(value, dict) else "")
    assert err.key == expected and str(err).startswith(f"{expected}: {problem}")
    if key != "noise_sigma" or value > 1e-150:       # float64 holds them (1/1e-60 too)
        C.config_from_dict({**doc, "field": {"dtype": "float64"}})


def test_a_float64_noise_sigma_whose_inverse_square_overflows_is_refused():
    err = _error({"data": {"path": "d.npz", "noise_sigma": 1e-200}, "field": {"dtype": "float64"}})
    assert err.key == "data.noise_sigma" and "1/noise_sigma^2 = 10^400" in str(err)
    assert "need noise_sigma >= 7.46e-155, or rescale" in str(err)
