"""Every command and event between the engine and its clients, defined once.

numpy only: the engine (``core.engine``) builds these messages, the engine process
(``core.run.engine_process`` / ``core.engine.serve``) carries them through its pipe, and
the clients (``app.engine_client``, ``app.state.run_state``, the main window, the
command line's progress line) read them by these names.

Wire format. A message is a plain ``dict`` (a ``TypedDict`` below): it pickles cheaply
through a multiprocessing pipe and numpy arrays stay arrays. Build one with its
constructor (``chunk_event``, ``status_event``, ...), never as a literal; ``check_event``
tests an event against its definition (every field there, of its type and shape, nothing
else). Optional fields (``NotRequired``) are absent, never None.

Commands (client -> engine process), key ``cmd``::

    run      config_text, base_dir, run_dir, resume, num_samples,   start or resume a run
             accept_changed
    pause / resume / stop / exit                                    between chunks

Events (engine -> clients), key ``type``::

    ready    seconds                      the engine process imported TensorFlow
    status   status [, error, progress, estimate]
    chunk    one chunk's statistics and draws (``ChunkEvent``)
    error    message [, traceback]        a run could not start or failed
    done     status                       a run ended with this (final) status

Shapes in a chunk event, with C chains, n steps in the chunk, p parameters, a grid
(x, y, z) and K shells of P(k): ``stats[name]`` (C, n) for each of ``STAT_NAMES``;
``params[name]`` (C, n); ``latest_field`` (C, x, y, z) and ``latest_power`` (C, K) the
last field draw kept in the chunk and its P(k) (only when the chunk kept one);
``moments`` (mean (x, y, z) float32, std (x, y, z) float32, count) over every
post-warmup draw so far (field runs, once there is one); ``divergences`` the chunk's
divergent transitions (all chains), split into warmup steps (g < num_warmup: expected
while the step size adapts) and sampling steps (the ones that count); they add up to
``stats["diverging"].sum()``.
"""

# no ``from __future__ import annotations``: TypedDict reads NotRequired only from
# evaluated annotations (Python 3.11)
from typing import Literal, NotRequired, TypedDict

import numpy as np

from core.store.run_record import (
    LIVE_STATUSES,
    PROGRESS_KEYS,
    STAT_DTYPES,
    STAT_NAMES,
    STORE_STATUSES,
    Progress,
    new_progress,
)

__all__ = [
    # shared names
    "STAT_NAMES", "STAT_DTYPES", "PROGRESS_KEYS", "new_progress",
    "ENGINE_STATUSES", "PHASES", "FINAL_STATUSES", "STORE_STATUSES", "LIVE_STATUSES",
    # commands
    "RUN", "PAUSE", "RESUME", "STOP", "EXIT", "COMMANDS",
    "RunCommand", "ControlCommand", "run_command", "control_command",
    # events
    "READY", "STATUS", "CHUNK", "ERROR", "DONE", "EVENTS",
    "Progress", "Estimate", "Divergences", "ReadyEvent", "StatusEvent", "ChunkEvent", "ErrorEvent",
    "DoneEvent", "ready_event", "status_event", "chunk_event", "error_event", "done_event",
    "check_event",
]

# --------------------------------------------------------------------------- shared names

# What a run records (the per-step statistics, the progress counters, the store's statuses) is
# the run store's: ``core.store.run_record`` defines it (core.run imports core.store, never the
# other way round); the messages carry it under the same names.

#: what the engine reports in "status" events, in the order a run goes through them
#: ("running" after a pause ends)
ENGINE_STATUSES = ("loading", "compiling", "warmup", "sampling", "paused", "running",
                   "finished", "stopped", "failed")
#: the statuses that name a sampling phase (a client shows the run as running)
PHASES = ("warmup", "sampling")
#: how a run ends ("done" events, the store's last status)
FINAL_STATUSES = ("finished", "stopped", "failed")
# --------------------------------------------------------------------------- commands

RUN, PAUSE, RESUME, STOP, EXIT = "run", "pause", "resume", "stop", "exit"
COMMANDS = (RUN, PAUSE, RESUME, STOP, EXIT)


class RunCommand(TypedDict):
    """Start (``resume`` False) or continue a run of ``config_text`` into ``run_dir``;
    relative paths in the config are relative to ``base_dir``. ``num_samples``: a new
    total of post-warmup draws for a resumed run (None: as configured). ``accept_changed``: a
    resumed run goes on although an input file (data, mask, noise, P(k) table, model file)
    changed since it began, the change recorded in its store (``--accept-changed-data``)."""

    cmd: Literal["run"]
    config_text: str
    base_dir: str
    run_dir: str
    resume: bool
    num_samples: int | None
    accept_changed: bool


class ControlCommand(TypedDict):
    """pause, resume, stop (each honoured between chunks) or exit (the process ends)."""

    cmd: str


def run_command(config_text: str, base_dir, run_dir, resume: bool = False,
                num_samples: int | None = None, accept_changed: bool = False) -> RunCommand:
    return RunCommand(cmd=RUN, config_text=str(config_text), base_dir=str(base_dir),
                      run_dir=str(run_dir), resume=bool(resume), num_samples=num_samples,
                      accept_changed=bool(accept_changed))


def control_command(cmd: str) -> ControlCommand:
    if cmd not in (PAUSE, RESUME, STOP, EXIT):
        raise ValueError(f"unknown engine command {cmd!r}")
    return ControlCommand(cmd=cmd)


# --------------------------------------------------------------------------- events

READY, STATUS, CHUNK, ERROR, DONE = "ready", "status", "chunk", "error", "done"
EVENTS = (READY, STATUS, CHUNK, ERROR, DONE)


class Estimate(TypedDict):
    """A field run's resource estimate (``core.run.resources.RunEstimate``), sent with
    the "loading" status: bytes of memory, bytes available (None: unknown), which memory
    ("memory": a CPU's, one memory; "GPU memory": the device's part, the host's is checked
    too), the lower bounds in seconds of one gradient and of the run, and the one-line
    description."""

    bytes: int
    available: int | None
    memory: NotRequired[str]
    gradient_seconds: float
    run_seconds: float
    text: str


class Divergences(TypedDict):
    """A chunk's divergent transitions, summed over the chains: in its warmup steps and
    in its post-warmup (sampling) steps."""

    warmup: int
    sampling: int


class ReadyEvent(TypedDict):
    type: Literal["ready"]
    seconds: float          # how long importing TensorFlow and TFP took


class StatusEvent(TypedDict):
    type: Literal["status"]
    status: str                          # one of ENGINE_STATUSES
    error: NotRequired[str]              # "failed": why
    progress: NotRequired[Progress]      # "finished" / "stopped": the run's final counts
    estimate: NotRequired[Estimate]      # "loading" of a field run
    device: NotRequired[str]             # "compiling": where the sampler runs, in words


class ChunkEvent(TypedDict):
    type: Literal["chunk"]
    first_step: int          # global step index g of the chunk's first step
    n_steps: int
    phase: str               # "warmup" if every step of the chunk is warmup, else "sampling"
    stats: dict[str, np.ndarray]         # STAT_NAMES -> (C, n)
    params: dict[str, np.ndarray]        # parameter -> (C, n), constrained values
    steps_total: int         # num_warmup + num_samples
    progress: Progress       # the run's counts after this chunk (what the store holds)
    elapsed: float           # seconds this chunk took
    steps_per_second: float  # this chunk's rate; 0 where its time was mostly compiling a program
    total_elapsed: float     # seconds since this session of the run started
    divergences: Divergences             # this chunk's, warmup and sampling steps apart
    latest_field: NotRequired[np.ndarray]    # (C, x, y, z)
    latest_power: NotRequired[np.ndarray]    # (C, K)
    moments: NotRequired[tuple]              # (mean, std, count)


class ErrorEvent(TypedDict):
    type: Literal["error"]
    message: str
    traceback: NotRequired[str]          # an unexpected failure: where it happened


class DoneEvent(TypedDict):
    type: Literal["done"]
    status: str                          # one of FINAL_STATUSES


def ready_event(seconds: float) -> ReadyEvent:
    return ReadyEvent(type=READY, seconds=float(seconds))


def status_event(status: str, *, error: str | None = None, progress: dict | None = None,
                 estimate: Estimate | None = None, device: str | None = None) -> StatusEvent:
    """A "status" event; the optional fields are left out when not given."""
    event = StatusEvent(type=STATUS, status=str(status))
    if error is not None:
        event["error"] = str(error)
    if progress is not None:
        event["progress"] = Progress(**{key: int(progress[key]) for key in PROGRESS_KEYS})
    if estimate is not None:
        event["estimate"] = estimate
    if device is not None:
        event["device"] = str(device)
    return event


def chunk_event(*, first_step: int, n_steps: int, phase: str, stats: dict, params: dict,
                steps_total: int, progress: dict, elapsed: float, steps_per_second: float,
                total_elapsed: float, divergences: dict | None = None, latest_field=None,
                latest_power=None, moments: tuple | None = None) -> ChunkEvent:
    """A "chunk" event (shapes: module docstring); None leaves an optional field out.

    ``divergences``: ``{"warmup": w, "sampling": s}`` for the chunk (the engine counts them
    step by step); None counts ``stats["diverging"]`` as all in the chunk's ``phase``
    (right for the engine's chunks, which never straddle the end of warmup)."""
    if divergences is None:
        count = int(np.count_nonzero(stats["diverging"]))
        divergences = {"warmup": count if phase == "warmup" else 0,
                       "sampling": 0 if phase == "warmup" else count}
    event = ChunkEvent(type=CHUNK, first_step=int(first_step), n_steps=int(n_steps),
                       phase=str(phase), stats=dict(stats), params=dict(params),
                       steps_total=int(steps_total),
                       progress=Progress(**{key: int(progress[key]) for key in PROGRESS_KEYS}),
                       elapsed=float(elapsed), steps_per_second=float(steps_per_second),
                       total_elapsed=float(total_elapsed),
                       divergences=Divergences(warmup=int(divergences["warmup"]),
                                               sampling=int(divergences["sampling"])))
    if latest_field is not None:
        event["latest_field"] = latest_field
    if latest_power is not None:
        event["latest_power"] = latest_power
    if moments is not None:
        mean, std, count = moments
        event["moments"] = (mean, std, int(count))
    return event


def error_event(message: str, traceback: str | None = None) -> ErrorEvent:
    event = ErrorEvent(type=ERROR, message=str(message))
    if traceback is not None:
        event["traceback"] = str(traceback)
    return event


def done_event(status: str) -> DoneEvent:
    return DoneEvent(type=DONE, status=str(status))


# --------------------------------------------------------------------------- checking

_EVENT_TYPES = {READY: ReadyEvent, STATUS: StatusEvent, CHUNK: ChunkEvent, ERROR: ErrorEvent,
                DONE: DoneEvent}
_SCALARS = {"first_step": int, "n_steps": int, "steps_total": int, "seconds": float,
            "elapsed": float, "steps_per_second": float, "total_elapsed": float,
            "status": str, "phase": str, "message": str, "traceback": str, "error": str}


def check_event(event) -> None:
    """Raise ValueError naming what is wrong when ``event`` is not one of the events above:
    a field missing or not defined, a value of the wrong type, an array of the wrong
    shape (shapes: module docstring)."""
    if not isinstance(event, dict) or event.get("type") not in _EVENT_TYPES:
        raise ValueError(f"not an engine event: {event!r:.200}")
    kind = event["type"]
    definition = _EVENT_TYPES[kind]
    keys = set(event)
    missing = definition.__required_keys__ - keys
    extra = keys - definition.__required_keys__ - definition.__optional_keys__
    if missing or extra:
        raise ValueError(f"{kind} event: missing {sorted(missing)}, not defined {sorted(extra)}")
    for key, expected in _SCALARS.items():
        if key in event and not (isinstance(event[key], expected)
                                 and not isinstance(event[key], bool)):
            raise ValueError(f"{kind} event: {key} is {type(event[key]).__name__}, "
                             f"not {expected.__name__}")
    if kind == STATUS and event["status"] not in ENGINE_STATUSES:
        raise ValueError(f"status event: unknown status {event['status']!r}")
    if kind == DONE and event["status"] not in FINAL_STATUSES:
        raise ValueError(f"done event: {event['status']!r} is not a final status")
    if "progress" in event:
        progress = event["progress"]
        if set(progress) != set(PROGRESS_KEYS) or not all(
                isinstance(v, int) for v in progress.values()):
            raise ValueError(f"{kind} event: progress {progress!r} is not {PROGRESS_KEYS} as ints")
    if "estimate" in event and not (set(Estimate.__required_keys__) <= set(event["estimate"])
                                    <= set(Estimate.__annotations__)):
        raise ValueError(f"status event: estimate keys {sorted(event['estimate'])}")
    if kind == CHUNK:
        _check_chunk(event)


def _check_chunk(event) -> None:
    n = event["n_steps"]
    if event["phase"] not in PHASES:
        raise ValueError(f"chunk event: phase {event['phase']!r} is not one of {PHASES}")
    if set(event["stats"]) != set(STAT_NAMES):
        raise ValueError(f"chunk event: stats {sorted(event['stats'])}, not {sorted(STAT_NAMES)}")
    chains = None
    for group in ("stats", "params"):
        for name, value in event[group].items():
            if not isinstance(value, np.ndarray) or value.ndim != 2 or value.shape[1] != n:
                raise ValueError(f"chunk event: {group}[{name!r}] is not a (chains, {n}) array")
            chains = value.shape[0] if chains is None else chains
            if value.shape[0] != chains:
                raise ValueError(f"chunk event: {group}[{name!r}] has {value.shape[0]} chains, "
                                 f"not {chains}")
            want = STAT_DTYPES.get(name) if group == "stats" else None
            if want is not None and value.dtype != want:
                raise ValueError(f"chunk event: stats[{name!r}] is {value.dtype}, not {want}")
            if want is None and not np.issubdtype(value.dtype, np.floating):
                raise ValueError(f"chunk event: {group}[{name!r}] is {value.dtype}, not a float")
    div = event["divergences"]
    if (not isinstance(div, dict) or set(div) != set(Divergences.__required_keys__)
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in div.values())):
        raise ValueError(f"chunk event: divergences {div!r:.200} is not {{'warmup': n, 'sampling': n}} "
                         "with counts >= 0")
    flagged = int(np.count_nonzero(event["stats"]["diverging"]))
    if div["warmup"] + div["sampling"] != flagged:
        raise ValueError(f"chunk event: divergences {div['warmup']} (warmup) + {div['sampling']} "
                         f"(sampling) is not the {flagged} flagged in stats['diverging']")
    field = event.get("latest_field")
    if ("latest_field" in event) != ("latest_power" in event):
        raise ValueError("chunk event: latest_field and latest_power come together")
    if field is not None and (not isinstance(field, np.ndarray) or field.ndim != 4
                              or field.shape[0] != chains):
        raise ValueError(f"chunk event: latest_field is not a ({chains}, x, y, z) array")
    power = event.get("latest_power")
    if power is not None and (not isinstance(power, np.ndarray) or power.ndim != 2
                              or power.shape[0] != chains):
        raise ValueError(f"chunk event: latest_power is not a ({chains}, k) array")
    if "moments" in event:
        moments = event["moments"]
        ok = isinstance(moments, tuple) and len(moments) == 3
        if ok:
            mean, std, count = moments
            ok = (isinstance(mean, np.ndarray) and isinstance(std, np.ndarray)
                  and mean.ndim == 3 and mean.shape == std.shape
                  and mean.dtype == std.dtype == np.float32 and isinstance(count, int)
                  and (field is None or mean.shape == field.shape[1:]))
        if not ok:
            raise ValueError("chunk event: moments is not (mean (x, y, z) float32, "
                             "std (x, y, z) float32, count int)")
