"""``fieldscope check-model``: a model file checked before it runs.

``check_model(config)`` loads the file (its errors name file:line), builds the model, and then,
at the chains' starting point and at draws from the prior:

* evaluates every term of the log-density (``density_terms``: each parameter's value and prior,
  the field's prior, the model file's log-likelihood) and names the first that is NaN or
  infinite, with the parameter values where it is;
* compares the gradient of the model file's ``log_likelihood`` with central finite differences
  in float64 (the file's function called with float64 tensors; a file that computes in float32
  only is compared in float32, with a looser tolerance, and says so): per scalar parameter, and
  for a field model's likelihood along random directions of the field. A disagreement names
  the parameter (or the field), both values and their ratio; a ratio near the grid's cell count
  N or 1 / N is named as the classic mistake (an FFT gradient without its 1 / N, the first seed
  question's 262144 at 64^3); a missing gradient (no path through TensorFlow operations) is named;
* times one compiled gradient of the whole log-density (one chain).

``Report.problems`` holds one line per problem (exit 1), ``Report.notes`` what was measured.
The engine runs the cheap part (``quick``: the starting point, the gradients there) before every
run of a config with a model file, so a wrong gradient never reaches the sampler unnoticed.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

from core.engine.model_file import ModelFileError, OverTime, load_model_file, where

__all__ = ["Report", "check_model", "check_built", "CHECK_SECONDS"]

#: how long check-model lets the model file's code run (loading, tracing, evaluating) in all
CHECK_SECONDS = 300
_TOLERANCE = {tf.float64: 1e-4, tf.float32: 5e-2}
_STEP = {tf.float64: 1e-5, tf.float32: 3e-3}


@dataclass
class Report:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class _TimeLimit:
    """``CHECK_SECONDS`` for the user's code, where a signal can stop it (the main thread)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.active = threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGALRM")

    def _expired(self, signum, frame):
        raise OverTime(f"the model file's code ran for more than {self.seconds:.0f} s")

    def __enter__(self):
        if self.active:
            self._old = signal.signal(signal.SIGALRM, self._expired)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc):
        if self.active:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old)
        return False


def check_model(config, *, draws: int = 3, directions: int = 3, seed: int = 0,
                seconds: float = CHECK_SECONDS) -> Report:
    """The full check of ``config``'s model file (module docstring)."""
    from core.engine.models import build_model
    from core.io import LoadError

    report = Report()
    path = config.model_file
    kind = "scalar" if config.model.kind == "python" else "field"
    limit = _TimeLimit(seconds)
    try:
        with limit:
            model_file = load_model_file(path, kind, config.parameters)
            report.notes.append(f"{path}: loaded (SHA-256 {model_file.sha256[:12]}...); parameters: "
                                f"{_describe_parameters(model_file.parameters)}")
            model = build_model(config, model_file)
            check_built(model, report, draws=draws, directions=directions, seed=seed)
            if report.ok:
                report.notes.append(_time_gradient(model))
    except ModelFileError as err:
        report.problems.append(str(err))
    except OverTime as err:
        report.problems.append(f"{where(err, path)}: {err} (stopped there); a run evaluates the gradient "
                               "thousands of times: make one evaluation take well under a second")
    except (LoadError, ValueError) as err:
        report.problems.append(str(err))
    return report


def _describe_parameters(parameters) -> str:
    if not parameters:
        return "none"
    return ", ".join(f"{n} = {p.value!r}" if p.is_fixed else f"{n} ~ {p.dist}" for n, p in parameters.items())


def check_built(model, report: Report, *, draws: int = 1, directions: int = 2, seed: int = 0) -> Report:
    """The checks of a built model (its model file loaded): ``draws`` points (the chains' start
    and prior draws), the log-density's terms and the likelihood's gradients at each."""
    points = _points(model, draws, seed)
    for label, parts in points:
        bad = _nonfinite(model, parts, label)
        if bad:
            report.problems.append(bad)
            return report
    gradients = _GradientCheck(model, report)
    for label, parts in points:
        gradients.at(label, parts, directions, seed)
        if report.problems:
            break
    if not report.problems:
        report.notes.append(f"gradients agree with finite differences ({gradients.precision}) at "
                            f"{len(points)} point{'s' if len(points) > 1 else ''}: {gradients.checked}")
    return report


def _points(model, draws: int, seed: int):
    """[(label, parts)]: the chains' starting point, then draws - 1 draws from the prior."""
    out = [("the chains' starting point", model.initial_state(1, seed))]
    for k in range(1, draws):
        out.append((f"prior draw {k}", model.prior_draw(seed + k)))
    return out


def _values_text(model, parts) -> str:
    values = np.asarray(model.params(parts), np.float64).reshape(-1)
    return ", ".join(f"{n} = {v:.6g}" for n, v in zip(model.param_names, values))


def _nonfinite(model, parts, label) -> str | None:
    for term, hint, values, _ in model.density_terms(parts):
        v = float(np.asarray(values, np.float64).reshape(-1)[0])
        if not np.isfinite(v):
            at = _values_text(model, parts)
            return f"at {label}{f' ({at})' if at else ''}: {term} is {v!r}; {hint}"
    return None


class _GradientCheck:
    """The model file's log_likelihood against central finite differences (module docstring)."""

    def __init__(self, model, report: Report):
        self.model, self.report = model, report
        self.mf = model.model_file
        self.dtype = tf.float64
        self.precision = "float64"
        self.checked = ""

    def _call(self, field_x, values, data, dtype):
        mf = self.mf
        if field_x is None:
            return mf.log_likelihood(values, data, dtype=dtype)
        return mf.log_likelihood(field_x, values, data, dtype=dtype)

    def _arguments(self, parts, dtype):
        model = self.model
        user = model.user
        u = model.file_coordinates(parts)
        field_x = tf.cast(model.field(parts)[0], dtype) if model.has_field else None
        values = {n: tf.cast(v[0], dtype) for n, v in user.values(u).items()}
        data = {n: tf.cast(a, dtype) for n, a in model.data.items()}
        return field_x, values, data

    def _function(self, parts):
        """f(field, values) in float64, or in the model's dtype when the file cannot compute in
        float64 (then said once in the notes)."""
        if self.dtype == tf.float64:
            field_x, values, data = self._arguments(parts, tf.float64)
            try:
                self._call(field_x, values, data, tf.float64)
            except ModelFileError as err:
                if self.model.dtype == tf.float64:
                    raise
                self.dtype, self.precision = self.model.dtype, "float32: the file does not compute in float64"
                self.report.notes.append(f"{self.mf.path}: log_likelihood fails with float64 arguments "
                                         f"({err}); its gradients are compared in float32, with a looser tolerance")
        field_x, values, data = self._arguments(parts, self.dtype)
        return field_x, values, lambda x, v: self._call(x, v, data, self.dtype)

    def at(self, label, parts, directions: int, seed: int):
        field_x, values, f = self._function(parts)
        dtype = self.dtype
        names = list(self.model.user.names)
        with tf.GradientTape() as tape:
            watched = [values[n] for n in names] + ([field_x] if field_x is not None else [])
            tape.watch(watched)
            lp = f(field_x, values)
        grads = tape.gradient(lp, watched, unconnected_gradients=tf.UnconnectedGradients.NONE)
        step, checked = _STEP[dtype], []
        for i, name in enumerate(names):
            x = values[name]
            h = step * max(1.0, abs(float(x)))
            up = dict(values, **{name: x + h})
            down = dict(values, **{name: x - h})
            fd = (float(f(field_x, up)) - float(f(field_x, down))) / (2 * h)
            autodiff = None if grads[i] is None else float(grads[i])
            self._compare(f"with respect to {name}", label, [(autodiff, fd)], float(lp))
            checked.append(name)
        if field_x is not None:
            rng = np.random.default_rng(seed)
            scale = float(tf.math.reduce_std(field_x)) or 1.0
            g = grads[len(names)]
            pairs = []
            for _ in range(directions):
                d = tf.constant(rng.standard_normal(field_x.shape.as_list()), dtype)
                h = step * scale
                fd = (float(f(field_x + h * d, values)) - float(f(field_x - h * d, values))) / (2 * h)
                pairs.append((None if g is None else float(tf.reduce_sum(g * d)), fd))
            self._compare(f"with respect to the field (along {directions} random direction"
                          f"{'s' if directions > 1 else ''})", label, pairs, float(lp),
                          n_cells=int(np.prod(field_x.shape)))
            checked.append(f"the field along {directions} random direction{'s' if directions > 1 else ''}")
        self.checked = ", ".join(checked)

    def _compare(self, what, label, pairs, value, n_cells=None):
        """One problem line when any (autodiff, finite difference) pair of ``pairs`` disagrees."""
        head = f"{self.mf.path}: the gradient of log_likelihood {what} at {label}"
        bad = [(a, fd) for a, fd in pairs if not self._agrees(a, fd, value)]
        if not bad:
            return
        if any(a is None for a, _ in bad):
            fd = next(fd for a, fd in bad if a is None)
            self.report.problems.append(
                f"{head} is missing (no path through TensorFlow operations: numpy, .numpy(), "
                f"tf.stop_gradient or an op without a gradient?), while finite differences give {fd:.6g}")
            return
        shown = "; ".join(f"autodiff {a:.6g}, finite differences {fd:.6g}" for a, fd in bad[:2])
        text = f"{head} disagrees with finite differences{'' if len(pairs) == 1 else f' ({len(bad)} of {len(pairs)})'}: {shown}"
        ratios = [a / fd for a, fd in bad if fd != 0.0 and np.isfinite(a)]
        if ratios and all(r < 0 and abs(abs(r) - 1) < 0.05 for r in ratios):
            text += " (the wrong sign)"
        elif ratios:
            low, high = min(ratios, key=abs), max(ratios, key=abs)
            factor = f"{low:.4g}" if abs(high / low - 1) < 0.05 else f"{low:.4g} to {high:.4g}"
            text += f" (autodiff is {factor} times the finite difference"
            typical = float(np.exp(np.mean(np.log(np.abs(ratios)))))
            if n_cells and n_cells / 4 <= typical <= 4 * n_cells:
                text += (f", of the order of N = {n_cells}, the grid's cell count: an FFT's gradient without "
                         "its normalisation, as a tf.custom_gradient of irfft3d returning rfft3d(dy) gives")
            elif n_cells and 1 / (4 * n_cells) <= typical <= 4 / n_cells:
                text += f", of the order of 1 / N (N = {n_cells}): an FFT's gradient normalised twice?"
            text += ")"
        self.report.problems.append(text)

    def _agrees(self, autodiff, fd, value) -> bool:
        if autodiff is None:
            return abs(fd) <= 1e-8 * max(1.0, abs(value))
        if not np.isfinite(autodiff):
            return False
        size = max(abs(autodiff), abs(fd))
        return size <= 1e-10 * max(1.0, abs(value)) or abs(autodiff - fd) <= _TOLERANCE[self.dtype] * size


def _time_gradient(model) -> str:
    parts = [tf.convert_to_tensor(p, model.dtype) for p in model.initial_state(1, 0)]

    @tf.function(jit_compile=True, autograph=False)
    def grad(parts):
        with tf.GradientTape() as tape:
            tape.watch(parts)
            lp = model.target_log_prob_fn(*parts)
        return lp, tape.gradient(lp, parts)

    t0 = time.perf_counter()
    grad(parts)
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        out = grad(parts)
        float(out[0][0])
        times.append(time.perf_counter() - t0)
    one = float(np.median(times))
    return (f"one gradient of the log-density (1 chain, compiled): {one * 1e3:.3g} ms "
            f"(compiling: {compile_s:.2g} s)")
