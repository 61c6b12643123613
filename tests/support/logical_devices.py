"""For the checks that run in a fresh process: the CPU split into logical devices before
TensorFlow starts (importing this module does it; ``SPLIT`` devices), and the relative error
they report."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

SPLIT = 4
tf.get_logger().setLevel("ERROR")       # each case traces its own functions: no retracing notes
tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                           [tf.config.LogicalDeviceConfiguration()] * SPLIT)
DEVICES = [d.name for d in tf.config.list_logical_devices("CPU")]


def rel(a, b) -> float:
    """max |a - b| / max |b|."""
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))
