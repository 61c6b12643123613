"""The window's session, plain Python (no Qt): the config being edited and where it lives,
whether it changed since it was loaded or saved, where its runs go, and File > Recent.

``Session(config, recent)`` wraps the ``ConfigState`` the panels edit; the main window holds
one and asks it, never the file system, where things go:

    session.path, session.modified    the config file (None until saved) and its changes
    session.title()                   "field.toml *" (the window's title)
    session.new_run_dir()             <config folder>/runs/<config name>-<YYYYmmdd-HHMMSS>; a
                                      config not saved yet runs in
                                      $XDG_DATA_HOME/fieldscope/runs/<data stem>-<timestamp>
    session.save_as_default()         where File > Save config as... starts
    session.recent                    ``RecentFiles``: the configs and run folders opened

``RecentFiles`` keeps its list in any store with ``value(key, default)``, ``setValue(key,
value)``, ``remove(key)`` and ``sync()`` (the window passes its ``QSettings``; a test may pass
``MemoryStore``). The built-in demos (``DEMOS``, ``demo_path``) and the per-user data folder
(``user_data_dir``) live here too: they are where a session's files come from and go.
"""

from __future__ import annotations

import datetime as _dt
import os
import stat
import tempfile
from pathlib import Path

from app.state.config_state import ConfigState

__all__ = ["Session", "RecentFiles", "MemoryStore", "MAX_RECENT", "DEMOS", "demo_path",
           "default_run_dir", "save_as_default", "user_data_dir", "config_for_data_file", "VOXEL_UNIT"]

#: the unit of a box measured in voxels (a data file that states no box size)
VOXEL_UNIT = "voxel"

#: File > Recent keeps this many configs and run directories
MAX_RECENT = 10
RECENT_KEY = "recent/paths"

#: the built-in demos (File > Demos): menu text -> config file in the demo folder
DEMOS = {"Field, P(k) index sampled": "field.toml",
         "Field, P(k) fixed (exact answer known)": "field_exact.toml",
         "Integral model (1-D series)": "integral.toml"}


# -- the per-user data folder -----------------------------------------------------------------

def user_data_dir() -> Path:
    """Fieldscope's per-user data folder ($XDG_DATA_HOME/fieldscope, or
    ~/.local/share/fieldscope; a temporary folder when neither is writable)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    path = Path(base) / "fieldscope"
    try:
        path.mkdir(parents=True, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    return _private_temp_dir()


#: rejected shared-temp folder -> the private one made instead (one per process)
_PRIVATE_TEMP: dict[str, Path] = {}


def _is_private_dir(path: Path) -> bool:
    """A real folder (not a symlink) owned by this user with mode 0700."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    owner_ok = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    return stat.S_ISDIR(st.st_mode) and owner_ok and stat.S_IMODE(st.st_mode) == 0o700


def _private_temp_dir() -> Path:
    """``<tmp>/fieldscope-<uid>``, created 0700; if it already exists and is not this user's
    private folder (another user's, a symlink, group/world accessible: someone else could
    plant or read files there), a fresh ``tempfile.mkdtemp(prefix="fieldscope-")`` instead."""
    path = Path(tempfile.gettempdir()) / f"fieldscope-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    try:
        path.mkdir(mode=0o700)
        os.chmod(path, 0o700)      # exactly 0700 whatever the umask (lstat'ed just below)
    except OSError:
        pass                       # there already (checked below), or not creatable
    if _is_private_dir(path):
        return path
    made = _PRIVATE_TEMP.get(str(path))
    if made is None or not _is_private_dir(made):
        made = _PRIVATE_TEMP[str(path)] = Path(tempfile.mkdtemp(prefix="fieldscope-"))
    return made


def demo_path(name: str) -> Path:
    """A file of the built-in demo (``core.demo.write_demo``), written into the per-user
    data folder on first use (and again when one of its files is missing)."""
    from core.demo import write_demo

    folder = user_data_dir() / "demo"
    wanted = ("demo_field.npz", "series.csv", *DEMOS.values())
    if not all((folder / f).exists() for f in wanted):
        write_demo(folder)
    return folder / name


# -- where a config's files go ----------------------------------------------------------------

def default_run_dir(state: ConfigState, now: _dt.datetime | None = None) -> Path:
    """A new run directory for ``state``: <config folder>/runs/<config name>-<timestamp>; for a
    config not saved to a file, <per-user data folder>/runs/<data file's stem>-<timestamp>
    (never a folder next to data the user did not ask to write into). Creates its parent."""
    now = now or _dt.datetime.now()
    stamp = now.strftime("%Y%m%d-%H%M%S")
    if state.path is not None:
        name, base = state.path.stem, state.base_dir / "runs"
    else:
        data = state["data.path"]
        name = Path(data).stem if isinstance(data, str) and Path(data).stem else "untitled"
        base = user_data_dir() / "runs"
    try:
        base.mkdir(parents=True, exist_ok=True)
        writable = os.access(base, os.W_OK)
    except OSError:
        writable = False
    if not writable:
        base = user_data_dir() / "runs"
        base.mkdir(parents=True, exist_ok=True)
    run_dir = base / f"{name}-{stamp}"
    n = 2
    while run_dir.exists():
        run_dir = base / f"{name}-{stamp}-{n}"
        n += 1
    return run_dir


def save_as_default(state: ConfigState) -> Path:
    """Where File > Save config as... starts: the config's own file; for a config not saved
    yet (File > New from data), ``<data stem>.toml`` next to its data file."""
    data = state["data.path"]
    if state.path is None and isinstance(data, str) and data:
        target = state.resolve(data)
        return target.with_name(f"{target.stem}.toml")
    return state.path or state.base_dir / "config.toml"


def config_for_data_file(path, key=None):
    """File > New from data's config: ``(DataConfig, TOML text)`` from
    ``core.config.from_data.config_for_data``; when the file states no box size, the text
    measures the box in voxels (box size = the grid's shape, unit ``VOXEL_UNIT``), so that the
    data are shown at once and the user gives the real size when they can. Raises what
    ``config_for_data`` raises (``core.io.LoadError``, ``ConfigError``, ``OSError``)."""
    import tomllib

    from core.config import config_from_dict, dump_config
    from core.config.from_data import config_for_data
    from core.io import array_info

    result = config_for_data(path, key)
    text = result.text()
    if result.box_size is None:
        document = tomllib.loads(text)
        shape = tuple(array_info(path, result.document["data"]["key"]).shape)
        document["grid"]["box_size"] = float(shape[0]) if len(set(shape)) == 1 else [float(n) for n in shape]
        document["grid"]["unit"] = VOXEL_UNIT
        text = dump_config(config_from_dict(document, base_dir=Path(path).parent))
    return result, text


# -- File > Recent ----------------------------------------------------------------------------

class MemoryStore(dict):
    """A settings store in memory, with ``QSettings``' four methods that ``RecentFiles`` uses."""

    def value(self, key, default=None):
        return self.get(key, default)

    def setValue(self, key, value) -> None:   # noqa: N802  (QSettings' name)
        self[key] = value

    def remove(self, key) -> None:
        self.pop(key, None)

    def sync(self) -> None:
        pass


class RecentFiles:
    """The configs and run directories opened, newest first, at most ``MAX_RECENT``, kept under
    ``RECENT_KEY`` of ``store`` (a zero-argument callable giving the store, read afresh each
    time, so that two windows share one list)."""

    def __init__(self, store):
        self._store = store

    def paths(self) -> list[Path]:
        """The list, newest first; a stored value that is not a list of paths counts as empty."""
        value = self._store().value(RECENT_KEY, [])
        if isinstance(value, str):          # QSettings gives a one-element list back as a str
            value = [value]
        if not isinstance(value, (list, tuple)):
            return []
        paths: list[Path] = []
        for item in value:
            if isinstance(item, str) and item and Path(item) not in paths:
                paths.append(Path(item))
        return paths[:MAX_RECENT]

    def _write(self, paths) -> None:
        store = self._store()
        store.setValue(RECENT_KEY, [str(p) for p in list(paths)[:MAX_RECENT]])
        store.sync()

    def add(self, path) -> None:
        """Put ``path`` first (resolved; a path that cannot be resolved is left out)."""
        try:
            path = Path(path).expanduser().resolve()
        except (OSError, RuntimeError, TypeError):
            return
        self._write([path] + [p for p in self.paths() if p != path])

    def remove(self, path) -> None:
        self._write([p for p in self.paths() if p != Path(path)])

    def clear(self) -> None:
        store = self._store()
        store.remove(RECENT_KEY)
        store.sync()


# -- the session ------------------------------------------------------------------------------

class Session:
    """The config being edited (``config``, the panels' ``ConfigState``) and what the window
    needs to know about it; see the module docstring."""

    def __init__(self, config: ConfigState, recent: RecentFiles | None = None):
        self.config = config
        self.recent = recent if recent is not None else RecentFiles(lambda s=MemoryStore(): s)

    @property
    def path(self) -> Path | None:
        """The config file, None until it is saved."""
        return self.config.path

    @property
    def modified(self) -> bool:
        """Whether the config differs from what was last loaded or saved."""
        return self.config.modified

    def name(self) -> str:
        return self.path.name if self.path is not None else "untitled"

    def title(self) -> str:
        """The window title's part: the file's name (or "untitled"), " *" when modified."""
        return self.name() + (" *" if self.modified else "")

    def new_run_dir(self, now: _dt.datetime | None = None) -> Path:
        return default_run_dir(self.config, now)

    def save_as_default(self) -> Path:
        return save_as_default(self.config)

    def steps_total(self) -> int:
        """Warmup and sampling steps of a run of this config (0 while they are not numbers)."""
        w, n = self.config["sampler.num_warmup"], self.config["sampler.num_samples"]
        return int(w) + int(n) if isinstance(w, int) and isinstance(n, int) else 0

    def run_meta(self, run_dir, preview_meta: dict) -> dict:
        """``RunState.reset`` metadata of a new run of this config in ``run_dir`` (the views
        are set up from it before the engine's first event)."""
        from core.config import ConfigError

        s = self.config
        meta = {**preview_meta, "chains": s["sampler.chains"], "num_warmup": s["sampler.num_warmup"],
                "num_samples": s["sampler.num_samples"], "thin": s["sampler.thin"],
                "steps_total": self.steps_total(), "model_kind": s["model.kind"],
                "run_dir": str(run_dir), "status": "created"}
        try:
            meta["config_text"] = s.to_toml()
            meta["config_dir"] = str(s.base_dir)
        except ConfigError:
            pass
        if s["model.kind"] == "field":
            meta["grid_shape"] = s.data_shape()
        return meta

    def config_beside(self, data_path) -> Path | None:
        """``<data stem>.toml`` next to a data file, when it exists (and is not the data)."""
        data_path = Path(data_path)
        candidate = data_path.with_suffix(".toml")
        return candidate if candidate != data_path and candidate.is_file() else None
