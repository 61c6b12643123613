"""A model file read as text, never executed: its PARAMETERS table when the file writes it as a
literal (``ast.literal_eval``), its functions' names. For the window (which never imports
TensorFlow, nor runs a user's code); ``core.engine.model_file`` loads and runs the file.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from core.io.regular_file import NotRegularFile, read_regular

__all__ = ["ModelSource", "read_model_source", "MODEL_SOURCE_MAX_BYTES"]

MODEL_SOURCE_MAX_BYTES = 4 << 20


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
        text = read_regular(path, max_bytes=MODEL_SOURCE_MAX_BYTES).decode("utf-8")
    except FileNotFoundError:
        return ModelSource(None, (), f"{path}: the model file does not exist")
    except NotRegularFile as exc:
        return ModelSource(None, (), f"{path}: {exc.strerror or exc}")
    except (OSError, UnicodeDecodeError) as exc:
        return ModelSource(None, (), f"{path}: cannot read the model file ({exc})")
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
