"""A scientist's own model in a Python file: loading it, its parameters, calling it per state,
and naming the file and line of whatever goes wrong.

The file contract (README, "Your own model"): a module with ``log_likelihood`` (of
``(field, params, data)`` for a field model's likelihood, ``likelihood.kind = "python"``; of
``(params, data)`` for a scalar model, ``model.kind = "python"``), optional ``PARAMETERS``
(name -> a number, fixed, or a prior table of ``core.priors``'s kinds) and optional
``simulate``. The functions are written for ONE state; Fieldscope maps them over chains with
``tf.map_fn`` (a loop inside the compiled program): ``tf.vectorized_map`` was measured to drop a
user's ``tf.custom_gradient`` (it gave the identity's gradient), which would hide exactly the
wrong gradient ``fieldscope check-model`` must find.

Loading (``load_model_file``) first registers the gradients of ``tf.signal.rfft3d``,
``irfft3d``, ``rfftnd`` and ``irfftnd`` (``core.engine.fft.register_gradients``), reads the
file (``core.io.model_source.read_model_text``: a regular file, never a FIFO or a device), compiles and executes it as a module of its
own (its folder first on ``sys.path`` while it loads, so it may import its neighbours). The
user's functions run as plain Python at trace time (``tf.autograph.experimental.do_not_convert``):
what they raise carries their own file and line, which ``where`` finds.

Every failure is a ``ModelFileError`` whose message is one line: ``FILE:LINE: what``
(a syntax error, an exception at import or inside ``log_likelihood``, ``sys.exit``, a missing
function, a wrong return shape or dtype, an unknown parameter).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
import sys
import traceback
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import tensorflow as tf

from core.engine import fft
from core.engine.prior_density import tf_prior
from core.io.model_source import ModelSourceError, read_model_text
from core.priors import SAMPLED_KINDS, PriorError, parse_prior

__all__ = ["ModelFileError", "OverTime", "ModelFile", "UserParameters", "load_model_file", "where", "per_chain", "failure_of",
           "ARGUMENTS"]

#: the arguments of each function, per model kind ("field": a field model's likelihood file)
ARGUMENTS = {"field": {"log_likelihood": ("field", "params", "data"), "simulate": ("field", "params", "seed")},
             "scalar": {"log_likelihood": ("params", "data"), "simulate": ("params", "seed")}}


class ModelFileError(RuntimeError):
    """A model file that cannot be loaded or run: one line, ``FILE:LINE: what`` where known."""


class OverTime(Exception):
    """Raised into the user's code when a time limit set around it expires (check-model)."""


def where(exc: BaseException, path) -> str:
    """``FILE:LINE`` of the innermost frame of ``exc``'s traceback inside the model file ``path``
    (or the file named in a TensorFlow runtime error's "defined at" trace), else ``FILE``."""
    path = os.path.abspath(os.fspath(path))
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.abspath(frame.filename) == path:
            line = frame.lineno
    if line is None and isinstance(exc, SyntaxError) and exc.filename and \
            os.path.abspath(exc.filename) == path:
        line = exc.lineno
    if line is None:        # a compiled program's error names the op's Python frames in its text
        found = re.findall(r'File "([^"]+)", line (\d+)', str(exc))
        lines = [int(n) for f, n in found if os.path.abspath(f) == path]
        line = lines[-1] if lines else None
    return f"{path}:{line}" if line is not None else path


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if isinstance(exc, tf.errors.OpError):
        first = (exc.message or "").strip().splitlines()[0] if exc.message else first
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def user_failure(exc: BaseException, path, doing: str) -> ModelFileError:
    """The error of ``exc`` raised by the user's code while ``doing`` (e.g. "in log_likelihood")."""
    if isinstance(exc, ModelFileError):
        return exc
    if isinstance(exc, SystemExit):
        return ModelFileError(f"{where(exc, path)}: the model file called sys.exit({exc.code!r}) {doing}; "
                              "a model file defines functions and must not exit")
    return ModelFileError(f"{where(exc, path)}: {_one_line(exc)} ({doing})")


@dataclass
class ModelFile:
    """A loaded model file: its text and SHA-256 (stored with a run), its functions and the
    merged parameters (name -> float, fixed, or a ``core.priors`` object, in the file's order)."""

    path: Path
    text: str
    sha256: str
    kind: str
    log_likelihood_fn: Callable
    simulate_fn: Callable | None
    parameters: dict

    def call(self, fn_name: str, *args):
        """Call the user's ``fn_name`` on one state; its own exceptions become ``ModelFileError``."""
        fn = self.log_likelihood_fn if fn_name == "log_likelihood" else self.simulate_fn
        try:
            return fn(*args)
        except (KeyboardInterrupt, ModelFileError, OverTime):
            raise
        except BaseException as exc:          # noqa: BLE001 - SystemExit too: one line, never an exit
            raise user_failure(exc, self.path, f"in {fn_name}") from None

    def log_likelihood(self, *args, dtype) -> tf.Tensor:
        """The user's log_likelihood on one state, checked: a scalar tensor of ``dtype``."""
        value = self.call("log_likelihood", *args)
        try:
            value = tf.convert_to_tensor(value)
        except (TypeError, ValueError) as exc:
            raise ModelFileError(f"{self.path}: log_likelihood returned {type(value).__name__}, not a "
                                 f"tensor ({exc})") from None
        if value.shape.rank != 0:
            raise ModelFileError(f"{self.path}: log_likelihood returned shape {tuple(value.shape)}, not a "
                                 "scalar (sum the terms: tf.reduce_sum)")
        if value.dtype != dtype:
            raise ModelFileError(f"{self.path}: log_likelihood returned {value.dtype.name}, the model runs "
                                 f"in {tf.as_dtype(dtype).name} (its params and data arrive in that dtype)")
        return value


def _execute(path: Path, text: str) -> types.ModuleType:
    try:
        code = compile(text, str(path), "exec")
    except SyntaxError as exc:
        raise ModelFileError(f"{path}:{exc.lineno}: SyntaxError: {exc.msg}") from None
    except ValueError as exc:                 # e.g. NUL bytes in the source
        raise ModelFileError(f"{path}: cannot compile the model file ({exc})") from None
    module = types.ModuleType(f"fieldscope_model_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}")
    module.__file__ = str(path)
    folder = str(path.parent)
    sys.path.insert(0, folder)
    try:
        exec(code, module.__dict__)           # noqa: S102 - the user's own model, run at their request
    except (KeyboardInterrupt, OverTime):
        raise
    except BaseException as exc:              # noqa: BLE001
        raise user_failure(exc, path, "while loading the model file") from None
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    return module


def _function(module, path: Path, name: str, kind: str, required: bool):
    fn = getattr(module, name, None)
    expected = ARGUMENTS[kind][name]
    signature = f"def {name}({', '.join(expected)})"
    if fn is None:
        if required:
            raise ModelFileError(f"{path}: defines no {name}; a model file needs {signature}")
        return None
    if not callable(fn):
        raise ModelFileError(f"{path}: {name} is a {type(fn).__name__}, not a function ({signature})")
    try:
        inspect.signature(fn).bind(*expected)
    except TypeError:
        line = getattr(getattr(fn, "__code__", None), "co_firstlineno", None)
        at = f"{path}:{line}" if line else str(path)
        raise ModelFileError(f"{at}: {name} must take {len(expected)} arguments ({signature})") from None
    except ValueError:
        pass                                  # a builtin without a signature: called as it is
    return tf.autograph.experimental.do_not_convert(fn)


def _parameters(module, path: Path, overrides) -> dict:
    raw = getattr(module, "PARAMETERS", {})
    if not isinstance(raw, dict):
        raise ModelFileError(f"{path}: PARAMETERS is a {type(raw).__name__}, not a dict of name -> number "
                             "or prior table")
    out = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ModelFileError(f"{path}: PARAMETERS key {name!r} is not a Python identifier")
        try:
            out[name] = parse_prior(f"PARAMETERS[{name!r}]", value, SAMPLED_KINDS)
        except PriorError as exc:
            raise ModelFileError(f"{path}: {exc}") from None
    for name, value in (overrides or {}).items():
        if name not in out:
            raise ModelFileError(f"parameters.{name}: {path.name} has no parameter {name!r} (its PARAMETERS: "
                                 f"{', '.join(out) or 'none'})")
        out[name] = parse_prior(f"parameters.{name}", value, SAMPLED_KINDS)
    return out


def load_model_file(path, kind: str, overrides=None) -> ModelFile:
    """Load the model file ``path`` for a ``kind`` ("field" or "scalar") model, its PARAMETERS
    overridden by the config's ``[parameters]`` (``overrides``). ``ModelFileError`` otherwise."""
    fft.register_gradients()      # tf.signal's 3D / N-D real FFTs differentiable inside the file
    path = Path(os.path.abspath(os.fspath(path)))
    try:
        text = read_model_text(path)
    except ModelSourceError as exc:
        raise ModelFileError(str(exc)) from None
    module = _execute(path, text)
    return ModelFile(path=path, text=text, sha256=hashlib.sha256(text.encode()).hexdigest(), kind=kind,
                     log_likelihood_fn=_function(module, path, "log_likelihood", kind, True),
                     simulate_fn=_function(module, path, "simulate", kind, False),
                     parameters=_parameters(module, path, overrides))


class UserParameters:
    """A model file's parameters in the sampler's coordinates: the sampled ones (in the file's
    order) as an unconstrained vector u, each with ``core.engine.prior_density``'s twin of its
    prior (log p(x(u)) + log |dx/du| in closed form), the fixed ones as constants."""

    def __init__(self, parameters: dict, dtype):
        self.dtype = dtype
        self.fixed = {n: p.value for n, p in parameters.items() if p.is_fixed}
        self.sampled = [(n, p) for n, p in parameters.items() if not p.is_fixed]
        self.names = [n for n, _ in self.sampled]
        self.all_names = list(parameters)
        self._twins = [tf_prior(p, dtype) for _, p in self.sampled]

    def __len__(self) -> int:
        return len(self.sampled)

    def centre(self) -> list[float]:
        """Where the chains start (before their jitter): each prior's median, unconstrained."""
        return [p.unconstrained_median() for _, p in self.sampled]

    def log_prior(self, u) -> tf.Tensor:
        """(..., d) -> (...): the priors with their Jacobians; -inf where x(u) overflows."""
        total = tf.zeros(tf.shape(u)[:-1], self.dtype)
        for i in range(len(self._twins)):
            total = total + self.log_prior_of(i, u[..., i])
        return total

    def log_prior_of(self, i: int, u_i) -> tf.Tensor:
        """The i-th sampled parameter's prior term at its coordinate ``u_i``."""
        twin = self._twins[i]
        _, ok = twin.forward(u_i)
        return tf.where(ok, twin.log_prob(u_i), tf.constant(-float("inf"), self.dtype))

    def values(self, u) -> dict[str, tf.Tensor]:
        """(..., d) -> name -> (...) values of every parameter (fixed ones broadcast)."""
        batch = tf.shape(u)[:-1]
        out = {}
        for name in self.all_names:
            if name in self.fixed:
                out[name] = tf.fill(batch, tf.constant(self.fixed[name], self.dtype))
            else:
                i = self.names.index(name)
                out[name] = self._twins[i].forward(u[..., i])[0]
        return out

    def stacked(self, u) -> tf.Tensor:
        """(..., d) -> (..., d): the sampled parameters' values (the recorded draws)."""
        values = self.values(u)
        return tf.stack([values[n] for n in self.names], axis=-1)

    def draw(self, n: int, seed) -> tf.Tensor:
        """(n, d) unconstrained prior draws, stateless-seeded (``seed``: an int or a [2] seed tensor)."""
        pair = tf.constant([seed, 17], tf.int32) if isinstance(seed, int) else seed
        seeds = tf.random.split(pair, max(len(self.sampled), 1))
        columns = []
        for i, twin in enumerate(self._twins):
            x = twin.distribution().sample(n, seed=seeds[i])
            columns.append(twin.bijector().inverse(x))
        return tf.stack(columns, axis=-1) if columns else tf.zeros([n, 0], self.dtype)


def per_chain(fn: Callable, elems, dtype) -> tf.Tensor:
    """``fn`` (one state's arguments -> a scalar) over the leading axis of ``elems``, a
    (chains,) tensor of ``dtype``: a loop in the program, so the user's gradients are kept
    (``fn`` runs as plain Python at trace time: not converted by autograph)."""
    return tf.map_fn(tf.autograph.experimental.do_not_convert(fn), elems,
                     fn_output_signature=tf.TensorSpec([], dtype))


def failure_of(exc: BaseException, model_file: ModelFile | None) -> ModelFileError | None:
    """The one-line ``ModelFileError`` behind ``exc`` when the model file caused it: itself, one
    that autograph wrapped while tracing (its message holds "ModelFileError: ..."), or a
    runtime error of the compiled program whose op was defined in the model file; else None."""
    if isinstance(exc, ModelFileError):
        return exc
    text = str(exc)
    if "ModelFileError: " in text:
        return ModelFileError(text.rsplit("ModelFileError: ", 1)[1].strip().splitlines()[0])
    if model_file is not None and str(model_file.path) in text + "".join(traceback.format_tb(exc.__traceback__)):
        return user_failure(exc, model_file.path, "while the compiled program ran")
    return None
