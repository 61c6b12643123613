"""The environment TensorFlow reads as it loads, set by the processes that import it (the
command line, the engine process) before they do.

TensorFlow's C++ start-up chatter (CPU feature notices: warnings) is not for end users, so
``TF_CPP_MIN_LOG_LEVEL`` is 2. On a machine with no NVIDIA device TensorFlow also logs
"failed call to cuInit" as an error on every run, which is noise there: then the level is 3.
Where a device exists (``/dev/nvidia*``) errors stay visible, since a CUDA error then means
a GPU that cannot be used. A value the user set is never changed, and no device is hidden.

A few lines are written while TensorFlow loads, before its logging reads that level (absl's
"All log messages before absl::InitializeLog()", the oneDNN notice, "Could not find cuda
drivers"): ``import_tensorflow`` catches what the import writes to the process's standard
error (file descriptor 2, where the C++ code writes) and passes on every line but those.
"""

from __future__ import annotations

import glob
import os
import re
import sys
import tempfile

__all__ = ["nvidia_device_present", "quiet_tensorflow", "import_tensorflow", "START_UP_NOISE"]

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


def import_tensorflow(pattern: str = NVIDIA_DEVICES) -> None:
    """Import tensorflow and tensorflow_probability with ``quiet_tensorflow``'s level and
    without TensorFlow's start-up notices (``START_UP_NOISE``); anything else the import
    writes to standard error (a real warning or error) is passed on. An import that fails
    raises as usual, after what it wrote is passed on."""
    quiet_tensorflow(pattern=pattern)
    if "tensorflow" in sys.modules:
        import tensorflow_probability  # noqa: F401
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):     # no usable fd 2: import as it is
        import tensorflow  # noqa: F401
        import tensorflow_probability  # noqa: F401
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
            import tensorflow_probability  # noqa: F401
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
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
