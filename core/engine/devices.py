"""Where the engine computes: the device TensorFlow places the sampler on, in words, and the
devices a run's chains spread over (``chain_devices``).

TensorFlow puts every op on the first visible GPU when it sees one (float32 and float64
FFTs run in cuFFT there; ``core.engine.fft`` projects the Hermitian planes that cuFFT
does not ignore), else on the CPU with its thread pool. ``compute_device()`` says which,
for the "compiling" status event: the CLI prints it, the window shows it in its status
bar, and the run store keeps it (attribute ``device``, rewritten by each session of a
resumed run), so that ``fieldscope summary`` says where a run's timings were measured.
"""

from __future__ import annotations

import os

import tensorflow as tf

__all__ = ["compute_device", "memory_kind", "gpu_free_memory", "hide_gpus", "chain_devices", "device_count", "DeviceError"]


def _gpu_name(device) -> str:
    try:
        details = tf.config.experimental.get_device_details(device)
    except (ValueError, RuntimeError):
        details = {}
    name = details.get("device_name") or device.name.replace("/physical_device:", "")
    capability = details.get("compute_capability")
    return f"{name} (compute capability {capability[0]}.{capability[1]})" if capability else name


def compute_device() -> str:
    """"GPU: NVIDIA H200 (compute capability 9.0)" (and "+ n more, unused" when several are
    visible: the engine uses the first), or "CPU (N threads)"."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        text = f"GPU: {_gpu_name(gpus[0])}"
        if len(gpus) > 1:
            text += f" (+ {len(gpus) - 1} more GPU{'s' if len(gpus) > 2 else ''}, unused)"
        return text
    threads = tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count() or 1
    return f"CPU ({threads} thread{'s' if threads != 1 else ''})"


def memory_kind() -> str:
    """Which memory estimate the run's check uses: "gpu" when TensorFlow computes on a
    GPU (``core.run.resources``: device and host parts), else "cpu" (one memory)."""
    return "gpu" if tf.config.list_physical_devices("GPU") else "cpu"


def gpu_free_memory() -> int | None:
    """Free bytes of the first GPU (nvidia-smi's memory.free), or None where it cannot say."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10)
        return int(out.stdout.split()[0]) * 2**20 if out.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def hide_gpus() -> bool:
    """Keep this process off the GPUs (a calibration's submitting process when Dask workers
    compute: TensorFlow would otherwise reserve most of a GPU's memory at its first op). True
    when done; False when TensorFlow had already started on its devices (then nothing changes)."""
    try:
        tf.config.set_visible_devices([], "GPU")
    except (RuntimeError, ValueError):
        return False
    return True


def device_count(requested: int | str) -> int:
    """How many devices ``sampler.devices`` names here: "all" is the GPUs (1 without one)."""
    if requested == "all":
        return max(1, len(tf.config.list_physical_devices("GPU")))
    return int(requested)


class DeviceError(RuntimeError):
    """Devices asked for that this process cannot give, with the reason."""


def chain_devices(requested: int | str) -> list[str]:
    """The devices a run's chains spread over (``sampler.devices``): "all" is every GPU (one
    device on a machine without one: the CPU's thread pool already uses every core); N is the
    first N GPUs, or on a machine without GPUs N logical CPU devices, which this process splits
    its CPU into (``tf.config.set_logical_device_configuration``, possible only before
    TensorFlow has started: the engine calls this before it builds the model). One device: [].
    """
    gpus = tf.config.list_physical_devices("GPU")
    n = device_count(requested)
    if n <= 1:
        return []
    if gpus:
        if n > len(gpus):
            raise DeviceError(f"sampler.devices = {n}, but this machine shows {len(gpus)} GPU"
                              f"{'s' if len(gpus) != 1 else ''}: ask for at most {len(gpus)}, or \"all\"")
        return [device.name for device in tf.config.list_logical_devices("GPU")[:n]]
    cpu = tf.config.list_physical_devices("CPU")[0]
    logical = tf.config.get_logical_device_configuration(cpu)
    if logical is None or len(logical) < n:
        try:
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
        except RuntimeError:
            have = len(logical or [None])
            raise DeviceError(f"sampler.devices = {n}: TensorFlow has already started in this process "
                              f"with {have} CPU device{'s' if have != 1 else ''}; run the config in "
                              "a fresh process (the window and fieldscope run always do)") from None
    return [device.name for device in tf.config.list_logical_devices("CPU")[:n]]
