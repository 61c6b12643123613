"""The desktop app and the command line read a config through core.config's size check:
a huge file is refused by its size before it is read, in one message naming the file."""

from __future__ import annotations

import time

import pytest

from app import cli
from app.state.config_state import ConfigState
from core.config import ConfigError


@pytest.fixture
def huge(tmp_path):
    path = tmp_path / "huge.toml"
    with open(path, "wb") as handle:     # sparse: 4 GiB on the size, nothing on the disk
        handle.truncate(4 * 2**30)
    return path


def test_the_gui_refuses_a_huge_config_file_without_reading_it(huge):
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        ConfigState.from_file(huge)
    assert time.perf_counter() - t0 < 1.0
    assert str(info.value).startswith(f"{huge}: config: the config is 4,294,967,296 bytes; a "
                                      "config may be at most 1,048,576 bytes")
    state = ConfigState()
    text = '[data]\npath = "d.npz"\nkey = "' + "x" * 50_000_000 + '"\n'
    with pytest.raises(ConfigError, match="the config is 50,000,031 bytes"):
        state.load_text(text, base_dir=huge.parent, source="big.toml")


def test_the_cli_refuses_a_huge_config_file_in_one_line(huge, tmp_path, capsys):
    t0 = time.perf_counter()
    assert cli.main(["run", str(huge), "--out", str(tmp_path / "run")]) == 2
    assert time.perf_counter() - t0 < 5.0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"fieldscope: {huge}: config: the config is 4,294,967,296 bytes; a config may "
                   "be at most 1,048,576 bytes (1 MiB; a run's config is a few KiB: is this the "
                   "right file?)"]
    assert not (tmp_path / "run").exists()
