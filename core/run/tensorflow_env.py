"""The environment TensorFlow reads as it loads, set by the processes that import it (the
command line, the engine process) before they do.

TensorFlow's C++ start-up chatter (CPU feature notices: warnings) is not for end users, so
``TF_CPP_MIN_LOG_LEVEL`` is 2. On a machine with no NVIDIA device TensorFlow also logs
"failed call to cuInit" as an error on every run, which is noise there: then the level is 3.
Where a device exists (``/dev/nvidia*``) errors stay visible, since a CUDA error then means
a GPU that cannot be used. A value the user set is never changed, and no device is hidden.

A few lines are written while TensorFlow loads, before its logging reads that level (absl's
"All log messages before absl::InitializeLog()", the oneDNN notice, "Could not find cuda
drivers"): ``start_up_notices_filtered`` catches what the import writes to the process's standard
error (file descriptor 2, where the C++ code writes) and passes on every line but those.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import sys
import tempfile

__all__ = ["nvidia_device_present", "quiet_tensorflow", "start_up_notices_filtered", "real_stderr_back",
           "START_UP_NOISE"]

#: lines TensorFlow writes while it loads that say nothing to a user (matched anywhere in a line)
START_UP_NOISE = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|oneDNN custom operations are on"
    r"|Could not find cuda drivers on your machine, GPU will not be used"
    r"|This TensorFlow binary is optimized to use available CPU instructions"
    r"|To enable the following instructions: .* in other operations, rebuild TensorFlow")

NVIDIA_DEVICES = "/dev/nvidia*"


def nvidia_device_present(pattern: str = NVIDIA_DEVICES) -> bool:
    """Whether the machine has an NVIDIA device node (a GPU TensorFlow might use)."""
    return bool(glob.glob(pattern))


def quiet_tensorflow(environ=None, pattern: str = NVIDIA_DEVICES) -> str:
    """Set ``TF_CPP_MIN_LOG_LEVEL`` in ``environ`` (``os.environ``) unless it is set already;
    returns the level in force. Call before TensorFlow is imported."""
    environ = os.environ if environ is None else environ
    level = "2" if nvidia_device_present(pattern) else "3"
    return environ.setdefault("TF_CPP_MIN_LOG_LEVEL", level)



#: the real standard error's descriptor while ``start_up_notices_filtered`` catches fd 2
_real_stderr: int | None = None


def real_stderr_back() -> None:
    """Point fd 2 at the real standard error again at once, if a filter is catching it: for a
    process about to end while TensorFlow loads (a stop signal), so that its last words show."""
    if _real_stderr is not None:
        try:
            sys.stderr.flush()
            os.dup2(_real_stderr, 2)
        except (OSError, ValueError):
            pass


@contextlib.contextmanager
def start_up_notices_filtered():
    """Catch what the block writes to the process's standard error (file descriptor 2, where
    TensorFlow's C++ code writes) and pass on every line but ``START_UP_NOISE``: wrap the
    first import of TensorFlow (``with start_up_notices_filtered(): import tensorflow``, in
    ``core.engine``: only it imports TensorFlow). An exception in the block propagates, after
    what it wrote is passed on."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):     # no usable fd 2: nothing to filter
        yield
        return
    global _real_stderr
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        _real_stderr = saved
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            _real_stderr = None
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            text = caught.read().decode("utf-8", "replace")
            kept = [line for line in text.splitlines() if line.strip() and not START_UP_NOISE.search(line)]
            if kept:
                try:
                    sys.stderr.write("\n".join(kept) + "\n")
                    sys.stderr.flush()
                except (OSError, ValueError):
                    pass
