"""The ``fieldscope`` command line.

Subcommands import what they need lazily, so that ``fieldscope --help`` is instant and a
command that never samples (``summary``, ``demo``) never loads TensorFlow.

    fieldscope                           the desktop app on the built-in demo
    fieldscope gui [CONFIG | RUNDIR]     the desktop app (--run, --screenshot PNG --quit-after S)
    fieldscope check                     self-test of the differentiable FFT core
    fieldscope check-model CONFIG        a model file checked: loads, values, gradients vs finite differences
    fieldscope demo OUTDIR               write demo data and configs
    fieldscope run CONFIG --out RUNDIR   sample, with a progress line; Ctrl-C stops after the chunk
    fieldscope resume RUNDIR [--num-samples N] [--accept-changed-data]
    fieldscope summary RUNDIR [--csv FILE]
    fieldscope calibrate CONFIG --simulations N --out DIR [--draws M] [--batch S] [--simulate-with CONFIG2]
                         [--scheduler local:N | tcp://HOST:PORT]

``run`` and ``resume`` claim the run directory (``core.run.run_folder``: its writer lock, and
what it holds) before they load TensorFlow, so a wrong folder is refused at once. The engine
then runs in a worker thread while the main thread waits for it and handles signals: SIGINT
(Ctrl-C), SIGTERM and SIGHUP ask for a stop after the current chunk (checkpoint written,
status "stopped", lock released: exit status 0, as a finished run); a second signal stops at
once: the chunk in flight is abandoned, the store keeps every chunk before it (no write is cut
short: ``Control.writing``), its status says "stopped", the lock is released, and the process
exits with 128 + the signal's number. Either way the run resumes from its last checkpoint.

``calibrate`` (simulation-based calibration, ``core.engine.calibrate``) runs the same way, its
unit a batch of simulations instead of a chunk (a first signal before this session stored its
first batch stops at once: compiling a large batch takes minutes and waiting keeps nothing); the same command with the same settings
resumes a stopped calibration at its first unfinished batch. It ends with the table of
``core.calibration.verdict`` and exits 0 when every quantity passes, 1 when some fail. With
``--scheduler`` its batches run on a Dask cluster (``core.engine.calibrate_cluster``) and this
process writes the store; a stop cancels the queued batches.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

__all__ = ["main", "build_parser", "ProgressLine", "CalibrationProgress", "UserError", "STOP_SIGNALS"]

#: the signals that stop a run (the first after its chunk, a second at once)
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                     if hasattr(signal, name))


class UserError(Exception):
    """A problem with the user's input: printed as one line, exit status 2."""


def _quiet_tensorflow() -> None:
    # TensorFlow's C++ start-up chatter (CPU feature notices; cuInit errors on a machine
    # without a GPU) is not for end users: loaded here, quietly (core.run.tensorflow_env)
    from core.run.tensorflow_env import quiet_tensorflow, start_up_notices_filtered

    quiet_tensorflow()
    with start_up_notices_filtered():
        import core.engine.engine  # noqa: F401  (loads TensorFlow and TFP)


def _say(text: str, stream=None) -> None:
    """Write one line; a terminal that is gone (SIGHUP: EIO) or a closed pipe loses it."""
    stream = sys.stderr if stream is None else stream
    try:
        stream.write(text + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass


def _cmd_check(args: argparse.Namespace) -> int:
    _quiet_tensorflow()
    from core.engine import fft_check

    return fft_check.main()


def _cmd_check_model(args: argparse.Namespace) -> int:
    from core.config import uses_model_file

    config, _ = _read_config(args.config)
    if not uses_model_file(config):
        raise UserError(f"{args.config}: has no model file to check (model.kind = 'python' or "
                        "likelihood.kind = 'python' name one)")
    _quiet_tensorflow()
    _say(f"checking {config.model_file} ...")
    from core.engine.model_check import check_model

    report = check_model(config)
    for line in report.notes:
        _say(line, sys.stdout)
    for line in report.problems:
        _say(f"PROBLEM: {line}", sys.stdout)
    _say("model file OK" if report.ok else f"{len(report.problems)} problem{'s' if len(report.problems) > 1 else ''}",
         sys.stdout)
    return 0 if report.ok else 1


def _cmd_demo(args: argparse.Namespace) -> int:
    from core.demo import DemoError, write_demo

    try:
        paths = write_demo(args.outdir)
    except DemoError as err:
        raise UserError(str(err)) from None
    except OSError as err:
        raise UserError(f"{args.outdir}: cannot write the demo: {err.strerror or err}") from None
    print(f"demo written to {args.outdir}:")
    for path in paths.values():
        print(f"  {path}")
    print(f"run it with: fieldscope run {paths['field_config']} --out {os.path.join(args.outdir, 'run')}")
    return 0


class ProgressLine:
    """One status line, rewritten in place: phase, draws, draws/s, acceptance, divergences, ETA.

    Divergences: the post-warmup ones (``divergences``, what counts), then in brackets the
    warmup ones (``warmup_divergences``, expected while the step size adapts), from the chunk
    events' split (``core.run.messages.Divergences``).

    ``run_dir``: the run's directory; a resumed run's first chunk event (``first_step`` > 0)
    then counts the divergences its store holds before that step, so that the count goes on
    from the stored one instead of restarting at 0."""

    def __init__(self, stream=None, run_dir=None):
        self.stream = sys.stderr if stream is None else stream
        try:
            self.interactive = self.stream.isatty()
        except (OSError, ValueError):
            self.interactive = False
        self.run_dir = run_dir
        self.divergences = 0         # post-warmup
        self.warmup_divergences = 0
        self.counted = False         # the stored divergences before the first chunk are in
        self.last = ""

    def __call__(self, event: dict) -> None:
        """Take one engine event (``core.run.messages``)."""
        from core.run import messages as msgs

        kind = event["type"]
        if kind == msgs.STATUS:
            status = event["status"]
            estimate = event.get("estimate")
            if estimate:
                from core.run.resources import estimate_line

                self._write(estimate_line(estimate), final=True)
            if event.get("device"):
                self._write(f"device: {event['device']}", final=True)
            if status in ("loading", "compiling"):
                self._write(f"{status}...", final=not self.interactive)
            elif status == "failed":
                # the reason is printed once, as the command's one-line error
                if self.interactive and self.last:
                    self._write("", final=True)
            elif status in ("finished", "stopped", "paused"):
                self._write(status, final=True)
            return
        if kind != msgs.CHUNK:
            return
        stats = event["stats"]
        if not self.counted:
            self.counted = True
            if event["first_step"] > 0 and self.run_dir is not None:
                warmup, sampling = _stored_divergences(self.run_dir, event["first_step"])
                self.warmup_divergences += warmup
                self.divergences += sampling
        self.warmup_divergences += event["divergences"]["warmup"]
        self.divergences += event["divergences"]["sampling"]
        done = event["first_step"] + event["n_steps"]
        total = event["steps_total"]
        rate = event["steps_per_second"]
        eta = (total - done) / rate if rate > 0 else float("nan")
        width = 24
        filled = int(width * done / max(total, 1))
        bar = "#" * filled + "-" * (width - filled)
        line = (f"{event['phase']:8} [{bar}] {done}/{total}  {f'{rate:6.1f}' if rate > 0 else '     -'} draws/s  "
                f"acc {stats['acceptance_rate'].mean():.2f}  div {self.divergences}"
                f"{f' ({self.warmup_divergences} in warmup)' if self.warmup_divergences else ''}  "
                f"ETA {_clock(eta)}")
        self._write(line, final=not self.interactive)

    def _write(self, text: str, final: bool) -> None:
        try:
            if self.interactive:
                pad = max(0, len(self.last) - len(text))
                self.stream.write("\r" + text + " " * pad + ("\n" if final else ""))
                self.last = "" if final else text
            else:
                self.stream.write(text + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass     # the terminal is gone (SIGHUP): the run goes on, and stops as asked


def _stored_divergences(run_dir, before_step: int | None = None) -> tuple[int, int]:
    """Divergent transitions (all chains) a run store holds before step ``before_step``
    (None: all of them): (in warmup, post-warmup)."""
    from core.store.run_store import RunReader, RunStoreError

    try:
        reader = RunReader(run_dir)
        num_warmup = int(reader.attrs.get("num_warmup", 0))
        if before_step is None:
            before_step = num_warmup + int(reader.progress.get("draws", 0))
        warmup = int(reader.stat("diverging", warmup=True, stop=min(before_step, num_warmup)).sum())
        sampling = 0
        if before_step > num_warmup:
            sampling = int(reader.stat("diverging", stop=before_step - num_warmup).sum())
        return warmup, sampling
    except (RunStoreError, KeyError, ValueError):
        return 0, 0


def _clock(seconds: float) -> str:
    if not seconds == seconds or seconds == float("inf"):
        return "--:--"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class _EngineSession:
    """One run of the engine in this process: the claim of its run directory, the engine in
    a worker thread, and the stop signals (``STOP_SIGNALS``) handled in the main thread, as
    this module's description says. Use as a context manager (the handlers are restored and
    the claim released when it ends)."""

    #: what the engine finishes before it honours a first stop signal, and how to continue
    unit = "chunk"
    continue_with = "fieldscope resume {run_dir}"

    def __init__(self, run_dir):
        self.run_dir = Path(run_dir)
        self.claim = None            # core.run.run_folder.Claim
        self.control = None          # core.engine.engine.Control, once TensorFlow is loaded
        self.engine = None
        self.signals = 0
        self.done = False
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc):
        self.done = True
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        if self.claim is not None:
            self.claim.release()
        return False

    def _on_signal(self, signum, frame):
        if self.done:
            return
        self.signals += 1
        name = signal.Signals(signum).name
        if self.control is None:          # nothing runs yet (TensorFlow is loading): end now
            self._end_now(signum)
            return
        if self.signals == 1 and not self._first_signal_stops_now():
            self.control.stop = True
            self.control.pause = False
            _say(("\n" if sys.stderr.isatty() else "")
                 + f"fieldscope: {name}: stopping after the current {self.unit} (again to stop at once; "
                 "the run stays resumable)")
            return
        self._end_now(signum)

    def _first_signal_stops_now(self) -> bool:
        """Whether a first stop signal ends the process at once (nothing would be kept by waiting)."""
        return False

    def _end_now(self, signum) -> None:
        """Abandon the chunk in flight: wait for a store write in progress, write no more,
        record "stopped", release the lock, exit with 128 + ``signum``."""
        name = signal.Signals(signum).name
        if self.control is not None:
            # never released: the engine thread writes nothing after this
            self.control.writing.acquire(timeout=60)
        store = getattr(self.engine, "store", None)
        if store is not None:
            try:
                store.set_status("stopped")
            except Exception:            # a store that cannot be written: resume still works
                pass
            text = (f"stopped at once ({name}); the {self.unit} in flight was abandoned and everything "
                    f"before it is in {self.run_dir}. Continue with: "
                    + self.continue_with.format(run_dir=self.run_dir))
        else:
            text = f"stopped ({name}) before the run started; nothing was written to {self.run_dir}"
        if self.claim is not None:
            self.claim.release()
        abandon = getattr(self.engine, "abandon", None)
        if abandon is not None:          # a calibration's Dask workers: ended, not orphaned
            try:
                abandon()
            except Exception:
                pass
        from core.run.tensorflow_env import real_stderr_back

        real_stderr_back()       # TensorFlow may be loading with fd 2 caught: say it for real
        _say(("\n" if sys.stderr.isatty() else "") + f"fieldscope: {text}")
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        os._exit(128 + signum)

    def run(self, make_engine, call):
        """Load the engine, build it (``make_engine(Engine, control)``) and run ``call(engine)``
        in a worker thread; its result, or its exception raised here."""
        _quiet_tensorflow()
        from core.engine.engine import Control, Engine

        control = Control()
        self.engine = make_engine(Engine, control)
        self.control = control
        result = {}

        def work():
            try:
                result["status"] = call(self.engine)
            except BaseException as err:     # raised again in the main thread
                result["error"] = err

        thread = threading.Thread(target=work, name="fieldscope-engine", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.2)                 # signal handlers run in between
        self.done = True
        if "error" in result:
            raise result["error"]
        return result["status"]


def _engine_errors():
    from core.config import ConfigError
    from core.engine.engine import EngineError
    from core.store.run_store import RunStoreError

    return (ConfigError, EngineError, RunStoreError, ValueError)


def _cmd_run(args: argparse.Namespace) -> int:
    from core.config import ConfigError, parse_config, read_config_text
    from core.run import run_folder

    try:   # read once, size checked first: the text run is the text checked
        text = read_config_text(args.config)
        config = parse_config(text, base_dir=os.path.dirname(os.path.abspath(args.config)),
                              source=args.config)
    except ConfigError as err:
        raise UserError(str(err)) from None
    _refuse_early(config)
    config = _with_devices(config, args.devices)
    return _run_engine(args.out, run_folder.claim_new, config, text, lambda engine: engine.start())


_DEVICES_HELP = ("spread the chains over N devices (GPUs; on a CPU, N logical devices) or \"all\" GPUs, "
                 "instead of the config's sampler.devices: the draws are the same")


def _with_devices(config, option):
    """``config`` with ``--devices`` in place of its ``sampler.devices`` (the config text, which
    the run stores, is unchanged: the devices chains spread over do not change the draws; a field
    cut over devices, ``field.shard``, resumes only on as many as it ran on: the engine says so)."""
    if option is None:
        return config
    from dataclasses import replace

    from core.config import ConfigError, devices_setting

    value = option if option == "all" else (int(option) if option.strip().isdigit() else option)
    sharded = config.field is not None and config.field.shard != "none"
    try:
        devices = devices_setting(value, config.sampler.chains, sharded)
        if sharded and devices != "all" and devices < 2:
            raise ConfigError("sampler.devices", f"field.shard = {config.field.shard!r} cuts the field over "
                              f"2 or more devices, not {devices}")
    except ConfigError as err:
        raise UserError(str(err).replace("sampler.devices", "--devices", 1)) from None
    return replace(config, sampler=replace(config.sampler, devices=devices))


def _refuse_early(config) -> None:
    """What the data file's header shows to be wrong (a grid too small to sample, a file that
    cannot be read), refused before TensorFlow loads (it takes 10-20 s) and before anything
    is written."""
    from core.run import resources

    _, problem = resources.data_shape_problem(config)
    if problem is not None:
        raise UserError(problem)


def _cmd_resume(args: argparse.Namespace) -> int:
    from core.run import input_files, run_folder
    from core.store.checkpoint import check_checkpoint
    from core.store.run_store import stored_run_config

    try:
        config, text = stored_run_config(args.rundir)
        run_folder.check_num_samples(args.rundir, args.num_samples)
        check_checkpoint(args.rundir)          # a damaged one is named before TensorFlow loads
        # the data, mask, noise and P(k) files are those the run began with (or accepted)
        note = input_files.verify_inputs(args.rundir, config, accept=args.accept_changed_data)
    except _store_errors() as err:
        raise UserError(str(err)) from None
    _refuse_early(config)
    config = _with_devices(config, args.devices)
    if note:
        _say(f"fieldscope: {note}")

    def record(run_dir):
        if args.accept_changed_data:
            input_files.record_accepted(run_dir, config)

    return _run_engine(args.rundir, run_folder.claim_resume, config, text,
                       lambda engine: engine.resume(num_samples=args.num_samples), after_claim=record)


def _run_engine(run_dir, claim, config, text: str, action, after_claim=None) -> int:
    """Claim ``run_dir`` with ``claim`` (``core.run.run_folder``: before TensorFlow loads, so a
    wrong folder is refused at once), then (``after_claim(run_dir)``, the folder held) build
    the engine and run ``action(engine)`` in an ``_EngineSession``; returns the exit status."""
    from core.store.run_store import RunStoreError

    with _EngineSession(run_dir) as session:
        try:
            session.claim = claim(run_dir)
            if after_claim is not None:
                after_claim(run_dir)
        except RunStoreError as err:
            raise UserError(str(err)) from None
        if session.claim.note:
            _say(f"fieldscope: {session.claim.note}")
        try:
            status = session.run(
                lambda Engine, control: Engine(config, text, run_dir, control=control,
                                               emit=ProgressLine(run_dir=run_dir)),
                action)
        except _engine_errors() as err:
            raise UserError(str(err)) from None
        # the engine is done: a late signal (a second Ctrl-C after the stop completed) finds
        # nothing to stop and must not break the report with a traceback
        session.done = True
        return _report(status, run_dir)


def _store_errors():
    from core.config import ConfigError
    from core.store.run_store import RunStoreError

    return (ConfigError, RunStoreError, ValueError)


def _report(status: str, run_dir) -> int:
    """The last lines of ``run`` / ``resume``; 1 when the run finished but its chains do not
    sample (``core.store.run_summary.chain_warnings``: its draws are kept), else 0."""
    from core.store.run_store import RunStoreError
    from core.store.run_summary import stored_chain_warnings

    if status == "stopped":
        _say(f"stopped{_divergence_report(run_dir)}; everything so far is in {run_dir}. "
             f"Continue with: fieldscope resume {run_dir}",
             sys.stdout)
    else:
        _say(f"{status}: {run_dir}{_divergence_report(run_dir)}. Diagnostics: fieldscope summary {run_dir}",
             sys.stdout)
    try:
        warnings = stored_chain_warnings(run_dir)
    except RunStoreError:
        warnings = []
    for line in warnings:
        _say(f"warning: {line}", sys.stdout)
    return 1 if warnings and status == "finished" else 0


def _divergence_report(run_dir) -> str:
    """", 0 divergences (49 in warmup)": the run's stored divergences for the final line."""
    from core.store.run_summary import divergence_text

    warmup, sampling = _stored_divergences(run_dir)
    return f", {divergence_text(sampling, warmup)}"


def _cmd_summary(args: argparse.Namespace) -> int:
    from core.store.run_store import RunStoreError
    from core.store.run_summary import summarize_run

    try:
        summary = summarize_run(args.rundir)
    except RunStoreError as err:
        raise UserError(str(err)) from None
    print(summary.text())
    if args.csv:
        try:
            with open(args.csv, "w", encoding="utf-8") as fh:
                fh.write(summary.table_csv())
        except OSError as err:
            raise UserError(f"{args.csv}: cannot write the table: {err.strerror or err}") from None
        print(f"table written to {args.csv}")
    return 0


class CalibrationProgress:
    """The progress line of ``fieldscope calibrate``: batches, simulations, time per batch, ETA
    and the verdict so far; rewritten in place on a terminal, one line per batch otherwise."""

    def __init__(self, stream=None):
        self.line = ProgressLine(stream)

    def phase(self, text: str) -> None:
        self.line._write(f"calibrate: {text}", final=not self.line.interactive)

    def __call__(self, info: dict) -> None:
        self.line._write(f"calibrate: batch {info['batch']}/{info['batches']}, {info['simulations_done']}/"
                         f"{info['simulations']} simulations, {info['seconds']:.1f} s/batch, ETA "
                         f"{_clock(info['eta'])}  {info['verdict'].split(' [')[0]}",
                         final=not self.line.interactive or info["batch"] == info["batches"])


class _CalibrationSession(_EngineSession):
    unit = "batch"

    def __init__(self, out_dir, command: str):
        super().__init__(out_dir)
        self.continue_with = command

    def _first_signal_stops_now(self) -> bool:
        """Before this session's first batch is stored (compiling, which may take minutes, or the
        first batch) waiting keeps nothing: the first signal stops at once (issue #33)."""
        return getattr(self.engine, "batches_this_session", 1) == 0


def _read_config(path: str):
    from core.config import ConfigError, parse_config, read_config_text

    try:
        text = read_config_text(path)
        return parse_config(text, base_dir=os.path.dirname(os.path.abspath(path)), source=path), text
    except ConfigError as err:
        raise UserError(str(err)) from None


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from core.calibration import CalibrationReader, CalibrationStoreError, PlanError, plan_for_config
    from core.calibration.plan import check_simulate_with
    from core.calibration.store import STORE_NAME, plan_differences
    from core.run.input_files import model_file_sha256
    from core.store import run_lock

    config, text = _read_config(args.config)
    simulate, simulate_text = (None, "")
    if args.simulate_with:
        simulate, simulate_text = _read_config(args.simulate_with)
    out = Path(args.out)
    command = " ".join(["fieldscope calibrate", args.config, "--simulations", str(args.simulations), "--out",
                        str(out)] + (["--draws", str(args.draws)] if args.draws else [])
                       + (["--batch", str(args.batch)] if args.batch else [])
                       + (["--simulate-with", args.simulate_with] if args.simulate_with else [])
                       + (["--scheduler", args.scheduler] if args.scheduler else []))
    # everything that can be refused is refused before TensorFlow loads
    from core.calibration.cluster import parse_scheduler
    from core.run import resources

    try:
        scheduler = parse_scheduler(args.scheduler) if args.scheduler else None
        # the command's own settings first (they need no file), then the data's
        plan = plan_for_config(config, simulations=args.simulations, draws=args.draws, batch_size=args.batch)
        check_simulate_with(config, simulate, args.simulate_with)
        shape, problem = resources.data_shape_problem(config)
        if problem is not None:
            raise UserError(problem)
        problem = resources.calibration_problem(config, shape, plan.batch_size * plan.chains)
        if problem is not None:
            raise UserError(problem)
        if (out / STORE_NAME).exists():
            reader = CalibrationReader(out)
            differences = plan_differences(reader.attrs, text, simulate_text, plan, model_file_sha256(config))
            if differences:
                raise UserError(f"{out / STORE_NAME}: holds another calibration (it differs in "
                                f"{'; '.join(differences)}); choose another --out, or give the same "
                                "settings to resume it")
            if reader.progress["batches"] >= plan.batches:
                return _calibration_report(out)
            _say(f"fieldscope: resuming {out} at simulation {reader.simulations_done} of {plan.simulations}")
    except (PlanError, CalibrationStoreError) as err:
        raise UserError(str(err)) from None
    progress = CalibrationProgress()
    with _CalibrationSession(out, command) as session:
        try:
            session.claim = run_lock.acquire(out)
        except (run_lock.LockHeld, OSError) as err:
            raise UserError(str(err)) from None

        def make(Engine, control):
            from core.engine.calibrate import Calibrator

            return Calibrator(config, text, out, simulations=args.simulations, draws=args.draws,
                              batch_size=args.batch, simulate_config=simulate, simulate_text=simulate_text,
                              control=control, on_batch=progress, emit=progress.phase, scheduler=scheduler)

        try:
            status = session.run(make, lambda calibrator: calibrator.run())
        except (*_engine_errors(), PlanError, CalibrationStoreError, run_lock.LockHeld) as err:
            raise UserError(str(err)) from None
        session.done = True          # as for a run: a late signal does not break the report
        if status == "stopped":
            _say(f"stopped; the finished batches are in {out}. Continue with: {command}", sys.stdout)
            return 0
        return _calibration_report(out)


def _calibration_report(out) -> int:
    from core.calibration import CalibrationReader, CalibrationStoreError

    try:
        reader = CalibrationReader(out)
        verdict = reader.verdict()
    except CalibrationStoreError as err:
        raise UserError(str(err)) from None
    print(verdict.table())
    print(verdict.line())
    if not verdict.passed:
        hint = unadjusted_hint(reader.attrs.get("config", ""))
        if hint:
            print(hint)
    return 0 if verdict.passed else 1


def unadjusted_hint(config_text: str) -> str:
    """For a failed calibration of an unadjusted sampler (the registry's ``adjusted``): what
    the failure may be, and how to tell; "" otherwise."""
    import tomllib

    from core.samplers import SAMPLERS

    try:
        algorithm = tomllib.loads(config_text).get("sampler", {}).get("algorithm")
    except (tomllib.TOMLDecodeError, AttributeError):
        return ""
    info = SAMPLERS.get(algorithm) if isinstance(algorithm, str) else None
    if info is None or info.adjusted:
        return ""
    return (f"note: {info.label} has no accept step: its draws carry a small bias that falls with "
            "its step size, and a calibration of many simulations can see it (most often in "
            "loglik, which sums it over every voxel). Calibrate the same config with "
            "sampler.algorithm = \"mams\", \"hmc\" or \"nuts\" to tell that bias from a problem "
            "of the model.")


def _cmd_install_desktop(args: argparse.Namespace) -> int:
    from app import desktop

    try:
        done = desktop.uninstall() if args.uninstall else desktop.install()
    except desktop.DesktopError as err:
        raise UserError(str(err)) from None
    if args.uninstall:
        print("removed:" if done.files else f"nothing to remove under {desktop.data_home()}")
    else:
        print("wrote:")
    for path in done.files:
        print(f"  {path}")
    for cache in done.caches:
        print(f"refreshed {cache}")
    for note in done.notes:
        print(f"note: {note}")
    return 0


def _cmd_gui(args: argparse.Namespace) -> int:
    from app import gui

    return gui.run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fieldscope",
        description="Bayesian field inference with Hamiltonian Monte Carlo.",
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("gui", help="the desktop app: set up a run, launch it, watch it live")
    from app.gui import add_arguments  # argparse only; Qt is imported when it runs

    add_arguments(p)
    p.set_defaults(func=_cmd_gui)
    p = sub.add_parser("check", help="self-test of the differentiable FFT core")
    p.set_defaults(func=_cmd_check)
    p = sub.add_parser("check-model", help="check a config's model file before a run: loads it, evaluates it "
                       "at prior draws, compares its gradients with finite differences (exit 1: problems)")
    p.add_argument("config")
    p.set_defaults(func=_cmd_check_model)
    p = sub.add_parser("demo", help="write demo data and configs into a directory")
    p.add_argument("outdir")
    p.set_defaults(func=_cmd_demo)
    p = sub.add_parser("run", help="sample a config into a run directory")
    p.add_argument("config")
    p.add_argument("--out", required=True, help="run directory to create")
    p.add_argument("--devices", default=None, metavar="N|all", help=_DEVICES_HELP)
    p.set_defaults(func=_cmd_run)
    p = sub.add_parser("resume", help="continue a stopped run (or extend a finished one)")
    p.add_argument("rundir")
    p.add_argument("--num-samples", type=int, default=None, help="new total of post-warmup draws")
    p.add_argument("--accept-changed-data", action="store_true",
                   help="resume although a data, mask, noise, P(k) or model file differs from the one the "
                        "run began with (the change is recorded in the store)")
    p.add_argument("--devices", default=None, metavar="N|all", help=_DEVICES_HELP)
    p.set_defaults(func=_cmd_resume)
    p = sub.add_parser("summary", help="print the diagnostics table of a run")
    p.add_argument("rundir")
    p.add_argument("--csv", help="also write the diagnostics table (pooled and per chain) as CSV")
    p.set_defaults(func=_cmd_summary)
    p = sub.add_parser("calibrate", help="simulation-based calibration: simulate data from the config's prior, "
                       "sample each, check that the truths' ranks are uniform")
    p.add_argument("config")
    p.add_argument("--simulations", type=int, required=True, help="number of simulated data sets")
    p.add_argument("--out", required=True, help="directory for calibration.zarr (the same command resumes it)")
    p.add_argument("--draws", type=int, default=None,
                   help="posterior draws per simulation, all chains (default: up to 100, thinned evenly)")
    p.add_argument("--batch", type=int, default=None, help="simulations per compiled batch (default: about a tenth)")
    p.add_argument("--simulate-with", default=None, metavar="CONFIG2",
                   help="simulate the data with another config (same model and grid): tests a mis-specification")
    p.add_argument("--scheduler", default=None, metavar="local:N|tcp://HOST:PORT",
                   help="run the batches on a Dask cluster: local:N starts N worker processes here; "
                   "tcp://HOST:PORT is a running `dask scheduler` (workers with Fieldscope installed and the "
                   "config's files at the same paths); this process writes the store")
    p.set_defaults(func=_cmd_calibrate)
    p = sub.add_parser("install-desktop", help="add Fieldscope to this user's application menu "
                       "(launcher and icons under $XDG_DATA_HOME, default ~/.local/share)")
    p.add_argument("--uninstall", action="store_true", help="remove the launcher and icons it installed")
    p.set_defaults(func=_cmd_install_desktop)
    return parser


def _version() -> str:
    from core import __version__

    return f"fieldscope {__version__}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    if argv is None and not sys.argv[1:]:
        # `fieldscope` alone opens the desktop app on the demo (main([]) prints the help)
        from app import gui

        if gui.display_available():
            return gui.main([])
        parser.print_help()
        print("\n(no display found, so the desktop app was not opened; "
              "see `fieldscope gui --help`)")
        return 0
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except UserError as err:
        print(f"fieldscope: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _pipe_closed()


def _pipe_closed() -> int:
    """The reader of the output went away (``fieldscope summary RUN | head -1``): stop
    writing, quietly. What is still buffered goes to /dev/null (Python would report the
    failed flush at exit); 141 = 128 + SIGPIPE, what a shell tool exits with there."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 128 + 13


if __name__ == "__main__":
    sys.exit(main())
