"""The environment TensorFlow reads as it loads, set by the processes that import it (the
command line, the engine process) before they do.

TensorFlow's C++ start-up chatter (CPU feature notices: warnings) is not for end users, so
``TF_CPP_MIN_LOG_LEVEL`` is 2. On a machine with no NVIDIA device TensorFlow also logs
"failed call to cuInit" as an error on every run, which is noise there: then the level is 3.
Where a device exists (``/dev/nvidia*``) errors stay visible, since a CUDA error then means
a GPU that cannot be used. A value the user set is never changed, and no device is hidden.
"""

from __future__ import annotations

import glob
import os

__all__ = ["nvidia_device_present", "quiet_tensorflow"]

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
