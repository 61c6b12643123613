"""Where a sharded field's arithmetic runs (issue #34, item 2): on the device of the part it
works on, without the sampler's code naming devices.

TensorFlow puts an op no one placed on the default device (the first GPU, or CPU:0): a
sampler's update of a part, the gradient ops a tape makes of a part's arithmetic, a random draw
of a part's shape. For a field cut over devices that would gather every part on the first one.
So, inside ``tf.function``:

- ``placed_by_inputs()`` is the scope of a graph device function: an op no one placed runs where
  its placed inputs are, or where they disagree where the largest of them is (through
  identities: a custom gradient's ``IdentityN`` joins tensors of several devices, each output
  its input's);
- a loop's variables enter its body unplaced (the body is a function of its own), so
  ``while_loop`` (``tf.while_loop``'s drop-in, which the engine's loops use) places them again
  at the top of the body, on the devices the values had outside (``pinned``, ``devices_of``); a
  loop whose values are on no device is unchanged;
- a value a loop body or a branch captures from outside is where it was outside, and a
  conditional's output where its branch made it;
- a draw of a part's shape is made on the part's device (``core.engine.chain_seeds``), and so
  is a buffer made for it (``zeros``).

Outside a sharded run the values are on no device (an eager constant a function captures is
on the default one, where its ops run anyway), so the draws are those of plain
``tf.while_loop`` and ``tf.zeros`` (the 45 draw digests are unchanged).
"""

from __future__ import annotations

import contextlib
import threading

import tensorflow as tf

__all__ = ["follow_inputs", "placed_by_inputs", "device_of", "devices_of", "pinned", "while_loop", "zeros",
           "zeros_like", "value_and_gradient", "program", "in_program", "on_device_of"]


def device_of(tensor) -> str:
    """Where ``tensor`` was placed in the graph being traced: its op's device, or through
    identities, loops and conditionals the device of the tensor it passes on ("" for none, and
    for eager tensors, which are where they are)."""
    if tf.executing_eagerly() or not hasattr(tensor, "op"):
        return ""
    op = tensor.op
    if op.device:
        return op.device
    if op.type == "Placeholder":        # a value a loop body or a branch captured from outside
        outside = _captured(tensor.graph).get(tensor.name)
        if outside is None:
            return ""
        return device_of(outside) if hasattr(outside, "op") else outside.device     # an eager constant
    if op.type in ("If", "StatelessIf"):   # a conditional's output: where its branch made it
        branch = getattr(op.graph, "_functions", {}).get(op.get_attr("then_branch").name)
        return device_of(branch.graph.outputs[tensor.value_index]) if hasattr(branch, "graph") else ""
    if op.type not in _PASSING or not op.inputs:
        return ""
    return device_of(op.inputs[0 if op.type == "Identity" else tensor.value_index])


def _captured(graph) -> dict:
    """A function graph's captures: the name of the placeholder inside -> the tensor outside."""
    return {inside.name: outside for outside, inside in getattr(graph, "captures", ())
            if isinstance(outside, tf.Tensor)}


def on_device_of(like):
    """A scope whose ops run on ``like``'s device (none where it has none): a draw for a part."""
    device = device_of(like)
    return tf.device(device) if device else contextlib.nullcontext()


def zeros(shape, dtype, like) -> tf.Tensor:
    """``tf.zeros(shape, dtype)`` made on ``like``'s device (a buffer for a part of a sharded field;
    a constant would otherwise be made on the default device)."""
    device = device_of(like)
    if not device:
        return tf.zeros(shape, dtype)
    with tf.device(device):
        return tf.zeros(shape, dtype)


def zeros_like(like) -> tf.Tensor:
    """``tf.zeros_like(like)`` on ``like``'s device."""
    return zeros(like.shape if like.shape.is_fully_defined() else tf.shape(like), like.dtype, like)


#: ops whose output i is their input i passed on (a loop's: its variables after the last turn)
_PASSING = ("Identity", "IdentityN", "While", "StatelessWhile")


def follow_inputs(op) -> str:
    """A graph device function: an op no one placed runs where its placed inputs are; where they
    disagree, where its largest one is (a part times a per-chain number runs on the part's
    device, the number copied there), "" (TensorFlow's default) where none is placed."""
    if op.device:
        return op.device
    placed = [(d, t) for d, t in zip(map(device_of, op.inputs), op.inputs) if d]
    if len({d for d, _ in placed}) <= 1:
        return placed[0][0] if placed else ""
    return max(placed, key=lambda dt: _elements(dt[1]))[0]


def _elements(tensor) -> int:
    """The number of elements of ``tensor``'s static shape (0 where it is not known)."""
    shape = tensor.shape
    return shape.num_elements() if shape.rank is not None and shape.is_fully_defined() else 0


def placed_by_inputs():
    """The scope of ``follow_inputs`` in the graph being traced (loop bodies inherit it)."""
    return tf.compat.v1.get_default_graph().device(follow_inputs)


def devices_of(values) -> list[str]:
    """``device_of`` each tensor of the nest ``values``, flattened."""
    return [device_of(t) if isinstance(t, tf.Tensor) else "" for t in tf.nest.flatten(values)]


def pinned(values, devices):
    """The nest ``values`` with each tensor whose entry of ``devices`` (``devices_of`` of the
    values outside a loop) names one passed through an identity there: a loop body's variables
    placed again. Unchanged where no device is named."""
    if not any(devices):
        return values
    flat = tf.nest.flatten(values)
    out = []
    for value, device in zip(flat, devices):
        if device and isinstance(value, tf.Tensor):
            with tf.device(device):
                value = tf.identity(value)
        out.append(value)
    return tf.nest.pack_sequence_as(values, out)


def while_loop(cond, body, loop_vars, **kwargs):
    """``tf.while_loop(cond, body, loop_vars, **kwargs)`` whose body sees each variable on the
    device it had outside the loop (the same graph as ``tf.while_loop``'s where none had one)."""
    devices = devices_of(loop_vars)
    if not any(devices):
        return tf.while_loop(cond, body, loop_vars, **kwargs)
    return tf.while_loop(cond, lambda *args: body(*pinned(args, devices)), loop_vars, **kwargs)


def value_and_gradient(fn, *state):
    """``fn(*state)`` and its gradient in each state part, the gradient's ops (a tape places none)
    following the parts' devices: a sharded density as a sampler calls it, inside ``tf.function``."""
    with placed_by_inputs():
        with tf.GradientTape() as tape:
            tape.watch(state)
            value = fn(*state)
        return value, tape.gradient(value, list(state))


_TRACING = threading.local()


def in_program() -> bool:
    """Whether a ``program`` (a graph without XLA) is being traced in this thread: what exists only
    under XLA (the Threefry generator) is not for it."""
    return getattr(_TRACING, "depth", 0) > 0


def program(fn):
    """``fn`` compiled for values on several devices: a TensorFlow graph (``tf.function`` without
    XLA, which compiles a program for one device), traced under ``placed_by_inputs`` with each
    argument pinned to the device its value is on at the call that traces it (its ops, and the
    ops that follow them, then run there). ``.traced`` is the ``tf.function`` (its graphs)."""
    where: list = []

    def traced(*args):
        _TRACING.depth = getattr(_TRACING, "depth", 0) + 1
        try:
            with placed_by_inputs():
                return fn(*pinned(args, where[-1]))
        finally:
            _TRACING.depth -= 1
    graph = tf.function(traced, autograph=False)

    def call(*args):
        where.append([t.device if isinstance(t, tf.Tensor) else "" for t in tf.nest.flatten(args)])
        del where[:-1]
        return graph(*args)
    call.traced = graph
    return call
