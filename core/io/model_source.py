"""A model file read as text, never executed: its PARAMETERS table when the file writes it as a
literal (``ast.literal_eval``), its functions' names. For the window (which never imports
TensorFlow, nor runs a user's code); ``core.engine.model_file`` loads and runs the file.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from core.io.regular_file import NotRegularFile, read_regular

__all__ = ["ModelSource", "ModelSourceError", "read_model_source", "read_model_text", "MODEL_SOURCE_MAX_BYTES"]

MODEL_SOURCE_MAX_BYTES = 4 << 20


class ModelSourceError(ValueError):
    """A model file that cannot be read as text; the message names it (one line)."""


def read_model_text(path) -> str:
    """The text of the model file ``path``: a regular file (never a FIFO or a device) of at most
    ``MODEL_SOURCE_MAX_BYTES``, UTF-8; ``ModelSourceError`` naming what is wrong otherwise. The
    one reader of a model file's bytes (the window's ``read_model_source`` and the engine's loader)."""
    try:
        raw = read_regular(path, max_bytes=MODEL_SOURCE_MAX_BYTES)
    except FileNotFoundError:
        raise ModelSourceError(f"{path}: the model file does not exist") from None
    except NotRegularFile as exc:
        raise ModelSourceError(f"{path}: {exc.strerror or exc} (a model file is a regular file of at most "
                               f"{MODEL_SOURCE_MAX_BYTES >> 20} MiB)") from None
    except OSError as exc:
        raise ModelSourceError(f"{path}: cannot read the model file ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelSourceError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None


@dataclass(frozen=True)
class ModelSource:
    """What the text of a model file says: ``parameters`` (name -> a number or a prior table, as
    written; None when PARAMETERS is computed, not a literal), the functions it defines, and
    ``problem`` (one line: unreadable, a syntax error) or None."""

    parameters: dict | None
    functions: tuple[str, ...]
    problem: str | None = None


def read_model_source(path) -> ModelSource:
    try:
        text = read_model_text(path)
    except ModelSourceError as exc:
        return ModelSource(None, (), str(exc))
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        return ModelSource(None, (), f"{path}:{exc.lineno}: SyntaxError: {exc.msg}")
    except ValueError as exc:
        return ModelSource(None, (), f"{path}: {exc}")
    functions = tuple(node.name for node in tree.body if isinstance(node, ast.FunctionDef))
    parameters: dict | None = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []
        if any(isinstance(t, ast.Name) and t.id == "PARAMETERS" for t in targets):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                parameters = None          # computed: check-model lists what it becomes
                continue
            parameters = value if isinstance(value, dict) else None
    return ModelSource(parameters, functions)
