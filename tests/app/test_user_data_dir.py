"""The per-user data folder's fallback in the shared temporary folder
(app.state.session.user_data_dir): ``<tmp>/fieldscope-<uid>`` only when it is this user's own
0700 folder; a symlink, a 0777 folder or another user's folder is never used."""

from __future__ import annotations

import os
import stat
import tempfile

import pytest

from app.state.session import user_data_dir


@pytest.fixture
def shared_tmp(tmp_path, monkeypatch):
    """A data folder that cannot be created (its parent is a file) and a stand-in for /tmp."""
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "not-a-folder" / "data"))
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    return shared


def _private(path) -> bool:
    st = os.lstat(path)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700


def test_the_fallback_folder_is_created_private(shared_tmp):
    path = user_data_dir()
    assert path == shared_tmp / f"fieldscope-{os.getuid()}" and _private(path)
    assert user_data_dir() == path                       # and used again


def test_a_symlinked_fallback_folder_is_not_followed(shared_tmp, tmp_path):
    elsewhere = tmp_path / "someone-elses"
    elsewhere.mkdir()
    (shared_tmp / f"fieldscope-{os.getuid()}").symlink_to(elsewhere)
    path = user_data_dir()
    assert path.parent == shared_tmp and path.name.startswith("fieldscope-")
    assert not path.is_symlink() and _private(path) and path != shared_tmp / f"fieldscope-{os.getuid()}"
    assert user_data_dir() == path                       # one private folder per process
    (path / "demo").mkdir()
    assert list(elsewhere.iterdir()) == []


def test_a_world_writable_fallback_folder_is_not_used(shared_tmp):
    planted = shared_tmp / f"fieldscope-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)
    path = user_data_dir()
    assert path != planted and _private(path)


@pytest.mark.skipif(os.getuid() != 0, reason="giving a folder to another user needs root")
def test_another_users_fallback_folder_is_not_used(shared_tmp):
    planted = shared_tmp / f"fieldscope-{os.getuid()}"
    planted.mkdir(mode=0o700)
    os.chown(planted, 12345, 12345)
    path = user_data_dir()
    assert path != planted and _private(path)
