"""The run configuration being edited: a plain-Python state object (no Qt, no TensorFlow).

The setup panels hold no settings of their own: every widget is bound to one key of a
``ConfigState`` and follows its callbacks (glue's viewer state / echo's callback
properties). The state saves and reads the TOML file the command line runs
(``core.config``), so a run set up by pointing and clicking and a run started from a
terminal are the same thing.

Keys are ``"table.name"`` paths of ``core.config``'s layout; a few are choices the
TOML spells differently:

    data.noise            "sigma" | "map": which of data.noise_sigma / data.noise_map
                          applies (the TOML holds exactly one of them)
    data.mask             "" = no mask
    grid.box_size         one number (a cube) or a list of three
    prior.<p>.sampled     for each hyperparameter p (amplitude, index, cutoff_scale; A, c,
    prior.<p>.value       sigma for the integral model): fixed (``value``) or sampled
    prior.<p>.dist        (``dist`` with ``loc``/``scale`` or ``low``/``high``). Both
    prior.<p>.loc ...     halves are kept, so ticking "sampled" off and on loses nothing.

Values are what the user typed, parsed as far as possible (``parse_number``): text that
is not a number stays a string, and validation names it. Only the keys that apply to
the chosen kinds are written (``document``); the others keep their values for when the
user switches back.

Validation (``validate``) runs ``core.config.config_from_dict`` and maps each
``ConfigError`` to the state key of the config key it carries (``state_key_of``); to report every bad key at once, not only the
first, a failing key is set back to its default in a scratch copy and the check is
repeated. ``check_files`` adds what only the files can tell (the data file exists and
holds the arrays named in data.key / data.mask / data.noise_map; the P(k) table reads),
from headers only and cached by modification time.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import tomllib
from pathlib import Path
from typing import Any, Callable, Iterable

from core import config as cfg
from core.field.power_spectrum import FIELD_HYPERPRIOR_KINDS, SPECTRA
from core.integral.spec import PARAMETERS as INTEGRAL_PARAMETERS
from core.io.regular_file import write_atomic
from core.priors import PRIOR_KINDS, SAMPLED_KINDS, Prior, parse_prior

__all__ = ["ConfigState", "parse_number", "format_value", "FIELD_HYPERPARAMETERS",
           "HYPER_PARTS", "SAMPLER_KEYS", "state_key_of", "prior_kinds"]

#: P(k) hyperparameters of the field model that may be sampled, by prior kind.
FIELD_HYPERPARAMETERS = {kind: tuple(SPECTRA[kind].parameters) for kind in SPECTRA}
#: Band powers' settings, carried through as the file has them (``document``).
BAND_KEYS = ("prior.n_bins", "prior.edges", "prior.band_power", "prior.random_walk_scale")
#: The sub-keys of one hyperparameter.
_PRIOR_PARAMETERS = tuple(dict.fromkeys(part for kind in SAMPLED_KINDS
                                        for part in PRIOR_KINDS[kind].parameters))
HYPER_PARTS = ("sampled", "value", "dist", *_PRIOR_PARAMETERS)   # ..., loc, scale, low, high
SAMPLER_KEYS = tuple(f"sampler.{name}" for name in cfg.config_to_dict(
    cfg.default_config())["sampler"])

_FIELD_DEFAULTS = cfg.config_to_dict(cfg.default_config("field"))
_INTEGRAL_DEFAULTS = cfg.config_to_dict(cfg.default_config("integral"))
_PYTHON_DEFAULTS = cfg.config_to_dict(cfg.default_config("python"))


def prior_kinds(name: str) -> tuple[str, ...]:
    """The ``core.priors`` kinds (dist names) parameter ``name`` may be sampled from: any
    for the integral model's A, c, sigma; ``FIELD_HYPERPRIOR_KINDS`` for P(k)."""
    return SAMPLED_KINDS if name in INTEGRAL_PARAMETERS else FIELD_HYPERPRIOR_KINDS


def parse_number(text):
    """What the user typed into a number field: an int, a float, or the stripped text.

    "3" -> 3, "0.5" / "1e-3" / "inf" -> float, "" or "abc" -> the text (validation then
    says what the key needs).
    """
    if not isinstance(text, str):
        return text
    s = text.strip()
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return s


def format_value(value) -> str:
    """A value as a number field shows it (floats with ``repr``: exact round trip)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def state_key_of(error: cfg.ConfigError) -> str:
    """The key of ``validate``'s result for a ``ConfigError``: its config key cut to
    "table.name" ("sampler.num_warmup" stays; "prior.A.dist" -> "prior.A", since one
    hyperparameter's sub-keys share one message); "config" for a problem with a whole
    table or the document (``error.key`` "sampler" or None)."""
    table, _, rest = (error.key or "").partition(".")
    return f"{table}.{rest.split('.')[0]}" if rest else "config"


def _hyper_keys(name: str) -> list[str]:
    return [f"prior.{name}.{part}" for part in HYPER_PARTS]


def _hyper_defaults(value) -> dict[str, Any]:
    """State sub-keys of one hyperparameter from its config value (number or table)."""
    out = {"sampled": False, "value": None, "dist": "normal",
           **{part: None for part in _PRIOR_PARAMETERS}}
    if isinstance(value, dict):
        out["sampled"] = True
        for part in ("dist", *_PRIOR_PARAMETERS):
            if part in value:
                out[part] = value[part]
        if "value" in value:        # {value = x} is a fixed prior written as a table
            out["sampled"] = False
            out["value"] = value["value"]
    else:
        out["value"] = value
    return out


def _build_defaults() -> dict[str, Any]:
    d = _FIELD_DEFAULTS
    values: dict[str, Any] = {
        "model.kind": "field",
        # a model file (core.engine.model_file): the scalar model's, or the field's likelihood's;
        # "parameters" overrides its PARAMETERS by name (a number or a prior table, as [parameters])
        "model.file": "",
        "model.dtype": "float32",
        "likelihood.file": "",
        "parameters": {},
        "data.path": "",
        "data.key": d["data"]["key"],
        "data.noise": "sigma",
        "data.noise_sigma": d["data"]["noise_sigma"],
        "data.noise_map": "",
        "data.mask": "",
        "grid.box_size": d["grid"]["box_size"],
        "grid.unit": d["grid"]["unit"],
        "prior.kind": d["prior"]["kind"],
        "prior.k_pivot": d["prior"]["k_pivot"],
        "prior.table": "",
        # band powers' settings (core.config.schema.PriorSection): carried as the file has them
        # (no panel edits them yet), so that opening and saving such a config loses nothing
        **{key: None for key in BAND_KEYS},
        "likelihood.kind": d["likelihood"]["kind"],
        "likelihood.smoothing_scale": d["likelihood"]["smoothing_scale"],
        "likelihood.field_mean": d["likelihood"]["field_mean"],
        "likelihood.mean_count": 1.0,           # core.config's default for poisson_lognormal
        "field.parameterisation": d["field"]["parameterisation"],
        "field.dtype": d["field"]["dtype"],
        "field.shard": d["field"]["shard"],
        "integral.refine": _INTEGRAL_DEFAULTS["integral"]["refine"],
    }
    for name, value in d["sampler"].items():
        values[f"sampler.{name}"] = value
    hyper = {"amplitude": d["prior"]["amplitude"], "index": d["prior"]["index"],
             "cutoff_scale": 0.0}                # core.config's default when the kind has it
    hyper.update(_INTEGRAL_DEFAULTS["prior"])
    for name, value in hyper.items():
        for part, v in _hyper_defaults(value).items():
            values[f"prior.{name}.{part}"] = v
    return values


#: What a file's omitted keys mean (``load_document`` resets to these; the sampler: HMC).
DEFAULTS = _build_defaults()
#: A new config's values: ``DEFAULTS`` with ``core.config.NEW_CONFIG_SAMPLERS["field"]`` (MCLMC
#: with the fourier preconditioner); every saved file says so.
NEW_DEFAULTS = {**DEFAULTS, **{f"sampler.{k}": v for k, v in cfg.NEW_CONFIG_SAMPLERS["field"].items()}}

#: Keys in the order the panels show them.
KEYS = tuple(DEFAULTS)


class ConfigState:
    """Every setting of a run, with callbacks on change. See the module docstring.

    ``state[key]`` reads, ``state[key] = value`` writes and calls the key's callbacks
    (``connect(key, fn)``: ``fn(value)``) if the value changed, then the callbacks of
    ``connect_any`` (``fn(changed_keys)``), once per ``batch()``.
    ``path`` is the config file (None until saved); relative paths in the config
    resolve against ``base_dir`` (the file's folder).
    """

    def __init__(self, base_dir=None):
        self._values: dict[str, Any] = dict(NEW_DEFAULTS)
        self._callbacks: dict[str, list[Callable[[Any], None]]] = {}
        self._any: list[Callable[[set[str]], None]] = []
        self._batch_depth = 0
        self._pending: set[str] = set()
        self.path: Path | None = None
        self.base_dir = Path(os.path.abspath(base_dir if base_dir is not None else os.getcwd()))
        self.ignored: list[str] = []       # what a loaded file held that the GUI does not edit
        self._saved: dict | None = self.document()
        self._file_cache: dict[tuple, Any] = {}

    # -- values and callbacks ---------------------------------------------------------------

    def __getitem__(self, key: str):
        return self._values[key]

    def __setitem__(self, key: str, value) -> None:
        self.set(key, value)

    def __contains__(self, key: str) -> bool:
        return key in self._values

    def keys(self) -> tuple[str, ...]:
        return KEYS

    def set(self, key: str, value) -> None:
        if key not in self._values:
            raise KeyError(f"unknown setting {key!r}")
        if isinstance(value, tuple):
            value = list(value)
        old = self._values[key]
        if type(old) is type(value) and old == value:
            return
        self._values[key] = value
        for fn in list(self._callbacks.get(key, ())):
            fn(value)
        self._pending.add(key)
        if not self._batch_depth:
            self._flush()

    def update(self, values: dict[str, Any]) -> None:
        with self.batch():
            for key, value in values.items():
                self.set(key, value)

    @contextlib.contextmanager
    def batch(self):
        """Group changes: ``connect_any`` callbacks run once, at the end."""
        self._batch_depth += 1
        try:
            yield self
        finally:
            self._batch_depth -= 1
            if not self._batch_depth:
                self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        changed, self._pending = self._pending, set()
        for fn in list(self._any):
            fn(changed)

    def connect(self, key: str, fn: Callable[[Any], None]) -> None:
        if key not in self._values:
            raise KeyError(f"unknown setting {key!r}")
        self._callbacks.setdefault(key, []).append(fn)

    def connect_any(self, fn: Callable[[set[str]], None]) -> None:
        self._any.append(fn)

    def disconnect_all(self) -> None:
        self._callbacks.clear()
        self._any.clear()

    def notify_all(self) -> None:
        """Run every callback as if every key had changed (after a file was loaded)."""
        for key, fns in list(self._callbacks.items()):
            for fn in list(fns):
                fn(self._values[key])
        self._pending.update(KEYS)
        if not self._batch_depth:
            self._flush()

    # -- hyperparameters ----------------------------------------------------------------------

    def hyper_names(self) -> tuple[str, ...]:
        """The hyperparameters that apply to the current model and prior kind."""
        if self["model.kind"] == "integral":
            return INTEGRAL_PARAMETERS
        if self["model.kind"] == "python":    # a model file's parameters: the Model file panel
            return ()
        return FIELD_HYPERPARAMETERS.get(self["prior.kind"], ())

    def samples_hyperparameters(self) -> bool:
        """Whether the field model's prior samples P(k) hyperparameters (band powers: their
        prior a distribution)."""
        if self["model.kind"] != "field":
            return False
        if self["prior.kind"] == "band_powers":
            return isinstance(self["prior.band_power"], dict)
        return any(self[f"prior.{name}.sampled"] for name in self.hyper_names())

    def set_sampled(self, name: str, sampled: bool) -> None:
        """Switch one hyperparameter between fixed and sampled, keeping both halves; a
        half that was never set starts from the other (a sampled prior centred on the
        fixed value, or a fixed value at the prior's centre)."""
        p = f"prior.{name}"
        with self.batch():
            if sampled and self[f"{p}.dist"] in ("normal",) and self[f"{p}.loc"] is None:
                value = self[f"{p}.value"]
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self[f"{p}.loc"] = float(value)
            if not sampled and self[f"{p}.value"] is None:
                centre = self.hyper_centre(name)
                if centre is not None:
                    self[f"{p}.value"] = centre
            self[f"{p}.sampled"] = bool(sampled)

    def hyper_value(self, name: str):
        """The config value of one hyperparameter: a number (fixed) or a prior table."""
        p = f"prior.{name}"
        if not self[f"{p}.sampled"]:
            return self[f"{p}.value"]
        dist = self[f"{p}.dist"]
        table: dict[str, Any] = {"dist": dist}
        # a dist this parameter does not take keeps loc and scale (validation names it)
        parts = PRIOR_KINDS[dist].parameters if dist in prior_kinds(name) else ("loc", "scale")
        for part in parts:
            if self[f"{p}.{part}"] is not None and self[f"{p}.{part}"] != "":
                table[part] = self[f"{p}.{part}"]
        return table

    def hyper_prior(self, name: str) -> Prior | None:
        """One parameter's prior as a ``core.priors`` object (``Fixed`` when fixed), or
        None while it is not valid."""
        try:
            return parse_prior(f"prior.{name}", self.hyper_value(name), prior_kinds(name))
        except (ValueError, TypeError):
            return None

    def hyper_centre(self, name: str) -> float | None:
        """A representative value: the fixed value, else the prior's median (None while
        the prior is not valid)."""
        prior = self.hyper_prior(name)
        return None if prior is None else float(prior.median())

    # -- the TOML document --------------------------------------------------------------------

    def document(self) -> dict[str, dict[str, Any]]:
        """The config as nested dicts with the keys that apply (core.config's layout)."""
        v = self._values
        kind = v["model.kind"]
        doc: dict[str, dict[str, Any]] = {"model": {"kind": kind}}
        if kind == "python":
            doc["model"].update(file=v["model.file"], dtype=v["model.dtype"])
            doc["data"] = {"path": v["data.path"]}
            if v["parameters"]:
                doc["parameters"] = copy.deepcopy(v["parameters"])
            doc["sampler"] = {key.split(".", 1)[1]: v[key] for key in SAMPLER_KEYS}
            return doc
        if kind == "integral":
            doc["data"] = {"path": v["data.path"]}
            doc["integral"] = {"refine": v["integral.refine"]}
            doc["prior"] = {name: self.hyper_value(name) for name in INTEGRAL_PARAMETERS}
        else:
            data: dict[str, Any] = {"path": v["data.path"], "key": v["data.key"]}
            if v["likelihood.kind"] == "python":       # the file's noise; a map is its data["noise"]
                if v["data.noise_map"] not in ("", None):
                    data["noise_map"] = v["data.noise_map"]
            elif v["likelihood.kind"] == "gaussian":
                if v["data.noise"] == "map":
                    data["noise_map"] = v["data.noise_map"]
                else:
                    data["noise_sigma"] = v["data.noise_sigma"]
            if v["data.mask"] not in ("", None):
                data["mask"] = v["data.mask"]
            doc["data"] = data
            doc["grid"] = {"box_size": copy.copy(v["grid.box_size"]), "unit": v["grid.unit"]}
            prior: dict[str, Any] = {"kind": v["prior.kind"]}
            if v["prior.kind"] == "table":
                prior["table"] = v["prior.table"]
            elif v["prior.kind"] == "band_powers":
                prior.update({key.split(".", 1)[1]: copy.deepcopy(v[key]) for key in BAND_KEYS
                              if v[key] is not None})
            else:
                prior["k_pivot"] = v["prior.k_pivot"]
                for name in FIELD_HYPERPARAMETERS.get(v["prior.kind"], ()):
                    prior[name] = self.hyper_value(name)
            doc["prior"] = prior
            if v["likelihood.kind"] == "python":
                lk: dict[str, Any] = {"kind": "python", "file": v["likelihood.file"]}
                if v["parameters"]:
                    doc["parameters"] = copy.deepcopy(v["parameters"])
            else:
                lk = {"kind": v["likelihood.kind"], "smoothing_scale": v["likelihood.smoothing_scale"],
                      "field_mean": v["likelihood.field_mean"]}
            if v["likelihood.kind"] == "poisson_lognormal":
                lk["mean_count"] = v["likelihood.mean_count"]
            doc["likelihood"] = lk
            doc["field"] = {"parameterisation": v["field.parameterisation"],
                            "dtype": v["field.dtype"], "shard": v["field.shard"]}
        doc["sampler"] = {key.split(".", 1)[1]: v[key] for key in SAMPLER_KEYS}
        return doc

    def load_document(self, raw: dict) -> None:
        """Set every key from a parsed TOML document (valid or not: what is wrong is
        reported by ``validate``). Keys the GUI does not edit are listed in ``ignored``."""
        values: dict[str, Any] = {}
        ignored: list[str] = []
        raw = raw if isinstance(raw, dict) else {}
        model = raw.get("model") if isinstance(raw.get("model"), dict) else {}
        kind = model.get("kind", "field")
        values["model.kind"] = kind if kind in cfg.MODEL_KINDS else "field"
        # reset what the file does not mention, so nothing of the previous config leaks in
        values.update({k: DEFAULTS[k] for k in KEYS if k != "model.kind"})
        if values["model.kind"] == "integral":
            for name, value in _INTEGRAL_DEFAULTS["sampler"].items():
                values[f"sampler.{name}"] = value
        for table, entries in raw.items():
            if not isinstance(entries, dict):
                ignored.append(table)
                continue
            if table == "parameters":         # a model file's overrides, name -> value
                values["parameters"] = copy.deepcopy(entries)
                continue
            for name, value in entries.items():
                key = f"{table}.{name}"
                if table == "prior" and (name in ("amplitude", "index", "cutoff_scale")
                                         or name in INTEGRAL_PARAMETERS):
                    for part, v in _hyper_defaults(value).items():
                        values[f"prior.{name}.{part}"] = v
                elif key == "data.noise_sigma":
                    values[key] = value
                    values["data.noise"] = "sigma"
                elif key == "data.noise_map":
                    values[key] = value
                    values["data.noise"] = "map"
                elif key == "model.kind":
                    continue
                elif key == "sampler.adapt_mass_matrix" and isinstance(value, bool):
                    # the older spelling of preconditioner = "diagonal" (core.config reads it
                    # so too); a preconditioner the file also gives wins
                    if value and "preconditioner" not in entries:
                        values["sampler.preconditioner"] = "diagonal"
                elif key in DEFAULTS and not key.startswith("prior.") and key != "data.noise" \
                        or key in ("prior.kind", "prior.k_pivot", "prior.table", *BAND_KEYS):
                    values[key] = value
                else:
                    ignored.append(key)
        if values["model.kind"] == "integral" and isinstance(raw.get("data"), dict) \
                and "noise_sigma" in raw["data"]:
            # core.config's shorthand: data.noise_sigma = s is prior.sigma = s (fixed)
            for part, v in _hyper_defaults(raw["data"]["noise_sigma"]).items():
                values[f"prior.sigma.{part}"] = v
        self.ignored = ignored
        with self.batch():
            for key in KEYS:
                self.set(key, values[key])

    # -- files --------------------------------------------------------------------------------

    @classmethod
    def from_file(cls, path) -> "ConfigState":
        """A state holding the config file ``path`` (which may be invalid: see ``validate``).

        Raises ``ConfigError`` naming the file when it cannot be read or is not TOML.
        """
        state = cls()
        state.load_file(path)
        return state

    def load_file(self, path) -> None:
        path = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
        text = cfg.read_config_text(path)     # size checked before reading; UTF-8
        self.load_text(text, base_dir=path.parent, source=str(path))
        self.path = path

    def load_text(self, text: str, base_dir, source: str | None = None) -> None:
        """Read TOML text; raises ConfigError for text that is not TOML at all or too large."""
        cfg.check_text_size(text, source)     # as parse_config: at most 1 MiB
        try:
            raw = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, ValueError, RecursionError) as exc:
            # parse_config words the same failure with the line and column
            try:
                cfg.parse_config(text, base_dir=base_dir, source=source)
            except cfg.ConfigError as err:
                raise err from None
            raise cfg.ConfigError(None, f"TOML syntax error: {exc}", source=source) from None
        self.base_dir = Path(os.path.abspath(os.fspath(base_dir)))
        self.path = None
        self._file_cache.clear()
        self.load_document(raw)
        self._saved = self.document()

    def reset(self, base_dir=None) -> None:
        """A new config's values (``NEW_DEFAULTS``), in no file, nothing modified; callbacks
        follow ``notify_all``, as after a load."""
        self._values = dict(NEW_DEFAULTS)
        self.path = None
        if base_dir is not None:
            self.base_dir = Path(os.path.abspath(os.fspath(base_dir)))
        self.ignored = []
        self._file_cache.clear()
        self._saved = self.document()

    def to_toml(self) -> str:
        """The TOML text of the config (``core.config.dump_config``: every key, stable
        order, short comments). Raises ConfigError naming the first bad key."""
        return cfg.dump_config(self.config())

    def save(self, path) -> Path:
        """Write the config to ``path`` (validated first; nothing is written when invalid).

        A data, table, mask or noise-map file path given relative to the old folder, or
        absolute inside the new one, is rewritten relative to the new file's folder.
        """
        from core.io import is_file_reference

        path = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
        self.config()                         # raises before anything changes
        new_base = path.parent
        with self.batch():
            for key in ("data.path", "prior.table", "data.mask", "data.noise_map", "model.file", "likelihood.file"):
                value = self[key]
                if key in ("data.mask", "data.noise_map") and not is_file_reference(value):
                    continue                  # an array in the data file, not a path
                if isinstance(value, str) and value:
                    self[key] = _relocate(value, self.base_dir, new_base)
        old_base = self.base_dir
        self.base_dir = new_base
        try:
            text = self.to_toml()
            # a temporary file of a random name, renamed over the config: a link planted at
            # either name is replaced, never written through (core.io.regular_file)
            write_atomic(path, text.encode("utf-8"))
        except (OSError, cfg.ConfigError):
            self.base_dir = old_base
            raise
        self.path = path
        self._saved = self.document()
        return path

    @property
    def modified(self) -> bool:
        """Whether the config differs from what was last loaded or saved."""
        return self.document() != self._saved

    def resolve(self, p: str) -> Path:
        path = Path(os.path.expanduser(p))
        return path if path.is_absolute() else self.base_dir / path

    # -- validation ---------------------------------------------------------------------------

    def config(self):
        """The validated ``core.config.RunConfig`` (raises ConfigError)."""
        return cfg.config_from_dict(self.document(), self.base_dir)

    def validate(self, files: bool = True) -> dict[str, str]:
        """{key: message} for every setting that is wrong (empty when the config is valid).

        Keys are state keys ("sampler.num_warmup"; "prior.index" for anything about that
        hyperparameter; "config" for a problem naming no key). Messages are core.config's
        and core.io' and name the key. ``files``: also check the files (see
        ``check_files``), once the config itself is valid.
        """
        errors: dict[str, str] = {}
        doc = self.document()
        defaults = {"integral": _INTEGRAL_DEFAULTS, "python": _PYTHON_DEFAULTS}.get(self["model.kind"],
                                                                                   _FIELD_DEFAULTS)
        for _ in range(64):
            try:
                cfg.config_from_dict(doc, self.base_dir)
                break
            except cfg.ConfigError as exc:
                message = str(exc)
                key = state_key_of(exc)
                if key in errors or key == "config":
                    errors.setdefault(key, message)
                    break
                errors[key] = message
                table, name = key.split(".", 1)
                if table in doc and name in doc[table]:
                    if name in defaults.get(table, {}):
                        doc[table][name] = copy.deepcopy(defaults[table][name])
                    elif key == "data.path":
                        doc[table][name] = "data.npz"
                    elif key == "prior.cutoff_scale":
                        doc[table][name] = 0.0
                    else:
                        del doc[table][name]
                else:
                    break
        if files and not errors:
            errors.update(self.check_files())
        return errors

    def model_file_key(self) -> str | None:
        """The state key naming the model file ("model.file", "likelihood.file"), or None."""
        if self["model.kind"] == "python":
            return "model.file"
        if self["model.kind"] == "field" and self["likelihood.kind"] == "python":
            return "likelihood.file"
        return None

    def model_source(self):
        """The model file read as text (``core.io.model_source``: never executed), or None."""
        from core.io.model_source import read_model_source

        key = self.model_file_key()
        if key is None or not self[key]:
            return None
        path = self.resolve(self[key])
        return self._cached(path, "model source", read_model_source)

    def model_file_errors(self) -> dict[str, str]:
        """What the model file's text says against the config: unreadable, a syntax error, no
        log_likelihood, a [parameters] name its PARAMETERS lacks."""
        key = self.model_file_key()
        source = self.model_source()
        if key is None or source is None:
            return {}
        if source.problem:
            return {key: f"{key}: {source.problem}"}
        if "log_likelihood" not in source.functions:
            return {key: f"{key}: {self[key]} defines no log_likelihood function"}
        errors = {}
        if source.parameters is not None:
            for name in self["parameters"]:
                if name not in source.parameters:
                    errors[f"parameters.{name}"] = (f"parameters.{name}: {self[key]} has no parameter {name!r} "
                                                    f"(its PARAMETERS: {', '.join(source.parameters) or 'none'})")
        return errors

    def _check_scalar_files(self) -> dict[str, str]:
        """``check_files`` of a model without a field: its data file (the integral model's series,
        a model file's named arrays) and its model file."""
        from core import io as loaders

        errors: dict[str, str] = {}
        path = self.resolve(self["data.path"])
        python = self["model.kind"] == "python"
        try:
            self._cached(path, "named" if python else "series",
                         loaders.load_named_arrays if python else loaders.load_series)
        except loaders.LoadError as exc:
            errors["data.path"] = f"data.path: {exc}"
        if python:
            errors.update(self.model_file_errors())
        return errors

    def check_files(self) -> dict[str, str]:
        """What the files say about a valid config: {key: message}. Reads headers only."""
        from core import io as loaders

        errors: dict[str, str] = {}
        if self["model.kind"] in ("python", "integral"):
            return self._check_scalar_files()
        path = self.resolve(self["data.path"])
        try:
            infos = self.array_listing()
        except loaders.LoadError as exc:
            errors["data.path"] = f"data.path: {exc}"
            infos = None
        if infos is not None:
            by_name = {info.name: info for info in infos}
            single = path.suffix.lower() == ".npy"
            key = self["data.key"]
            info = infos[0] if single and infos else by_name.get(key)
            if info is None:
                errors["data.key"] = (f"data.key: {path.name} has no array {key!r}; available: "
                                      f"{', '.join(repr(i.name) for i in infos) or 'none'}")
            elif info.shape is None or len(info.shape) != 3:
                errors["data.key"] = (f"data.key: array {info.name!r} has shape {info.shape}; "
                                      "the field model needs a 3-D grid")
            elif info.dtype.kind not in "biuf":
                errors["data.key"] = (f"data.key: array {info.name!r} has dtype {info.dtype}; "
                                      "a real (float or integer) array is needed")
            shape = info.shape if info is not None else None
            refs = [("data.mask", self["data.mask"])]
            if self["likelihood.kind"] == "gaussian" and self["data.noise"] == "map":
                refs.append(("data.noise_map", self["data.noise_map"]))
            for setting, ref in refs:
                if not ref or loaders.is_file_reference(ref):
                    continue        # a separate file: read by the engine when the run starts
                if single:
                    errors[setting] = (f"{setting}: the data file {path.name} is a single .npy "
                                       "array and holds no array named "
                                       f"{ref!r}; give a file such as \"mask.npy\"")
                elif ref not in by_name:
                    errors[setting] = (f"{setting}: {path.name} has no array {ref!r}; available: "
                                       f"{', '.join(repr(i.name) for i in infos)}")
                elif shape is not None and by_name[ref].shape not in (shape, ()):
                    errors[setting] = (f"{setting}: array {ref!r} has shape {by_name[ref].shape}, "
                                       f"the data {shape}")
            if shape is not None and len(shape) == 3 and "data.key" not in errors:
                from core.run.resources import host_memory_problem
                try:
                    config = self.config()
                except ValueError:          # a ConfigError: reported elsewhere
                    config = None
                problem = host_memory_problem(config, shape, self.exact_slab()) if config is not None else None
                if problem:
                    errors["grid.memory"] = f"grid: {problem}"
        if self["likelihood.kind"] == "python":
            errors.update(self.model_file_errors())
        if self["prior.kind"] == "table":
            table = self.resolve(self["prior.table"])
            try:
                self._cached(table, "table", loaders.load_power_table)
            except (loaders.LoadError, ValueError, OSError) as exc:
                errors["prior.table"] = f"prior.table: {exc}"
        return errors

    def _cached(self, path: Path, what: str, fn):
        try:
            st = os.stat(path)
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        key = (what, str(path), stamp)
        hit = self._file_cache.get(key)
        if hit is None:
            try:
                hit = ("ok", fn(str(path)))
            except Exception as exc:  # LoadError and friends: kept, so a bad file is read once
                hit = ("error", exc)
            if len(self._file_cache) > 64:
                self._file_cache.clear()
            self._file_cache[key] = hit
        if hit[0] == "error":
            raise hit[1]
        return hit[1]

    def array_listing(self):
        """``core.io`` ``ArrayInfo`` list of the data file (cached; LoadError)."""
        from core import io as loaders

        path = self.resolve(self["data.path"]) if self["data.path"] else None
        if path is None:
            raise loaders.LoadError("no data file chosen")
        return self._cached(path, "list", lambda p: loaders.loader_for(p).list_arrays(p))

    def data_shape(self) -> tuple[int, int, int] | None:
        """The grid shape: the shape of the data array, when the file and key are good."""
        try:
            infos = self.array_listing()
        except ValueError:
            return None
        if self.resolve(self["data.path"]).suffix.lower() == ".npy":
            info = infos[0] if infos else None
        else:
            info = next((i for i in infos if i.name == self["data.key"]), None)
        if info is None or info.shape is None or len(info.shape) != 3:
            return None
        return tuple(int(n) for n in info.shape)

    def exact_slab(self) -> tuple[int, int] | None:
        """With settings that take it (``settings_take_exact_slab``), (axis, missing planes) where
        the data's mask (NaN voxels too) is a slab where "conditional" is exact (``core.io.exact_slab``):
        the data read once a file (cached); None where it is not, or cannot be read."""
        from core.field.observations import settings_take_exact_slab
        from core.io import exact_slab
        if self["likelihood.kind"] != "gaussian" or self["data.noise"] == "map" or not settings_take_exact_slab(
                self["sampler.preconditioner"], self["field.parameterisation"], self.samples_hyperparameters()):
            return None
        try:
            what = " ".join(str(self[k]) for k in ("data.key", "data.mask", "data.noise", "likelihood.kind"))
            return self._cached(self.resolve(self["data.path"]), f"slab {what}", lambda _path: exact_slab(self.config()))
        except Exception:         # a config or a file not ready: the rule stays as it was
            return None

    def box_size(self) -> tuple[float, float, float] | None:
        """grid.box_size as three lengths, or None while it is not valid."""
        value = self["grid.box_size"]
        items = value if isinstance(value, list) else [value] * 3
        if len(items) != 3 or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                      and math.isfinite(x) and x > 0 for x in items):
            return None
        return tuple(float(x) for x in items)


def _relocate(p: str, old_base: Path, new_base: Path) -> str:
    """``p`` (relative to old_base, or absolute) relative to new_base when it lies inside
    it, else absolute."""
    path = Path(os.path.expanduser(p))
    absolute = path if path.is_absolute() else old_base / path
    absolute = Path(os.path.normpath(absolute))
    try:
        return absolute.relative_to(new_base).as_posix()
    except ValueError:
        return str(absolute)


def errors_for(errors: dict[str, str], keys: Iterable[str]) -> dict[str, str]:
    """The subset of ``errors`` whose key is one of ``keys`` or below one of them."""
    keys = tuple(keys)
    return {k: m for k, m in errors.items()
            if k in keys or any(k.startswith(prefix + ".") for prefix in keys)}
