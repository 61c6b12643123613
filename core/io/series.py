"""1-D series files (.csv .txt .dat, columns t, y[, f]) for the integral model."""

from __future__ import annotations

import math
import os

import numpy as np

from core.io.arrays import LoadError, _check_file, _hint, _short

__all__ = ['SERIES_EXTENSIONS', 'load_series', 'load_series_inputs']

SERIES_EXTENSIONS = (".csv", ".txt", ".dat")   # core.config.INTEGRAL_DATA_EXTENSIONS

# --------------------------------------------------------------------------- series, tables


def _first_content_line(text: str) -> str | None:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return stripped
    return None


def _series_whitespace(path: str, text: str):
    """Whitespace-separated t y [f] columns: '#' comments, an optional header line
    't y' or 't y f', the rules of ``load_series_csv`` otherwise."""
    from core.integral import Series

    header = None
    columns: list[list[float]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        cells = line.split("#", 1)[0].split()
        if not cells:
            continue
        if header is None:
            try:
                [float(c) for c in cells]
            except ValueError:
                if cells not in (["t", "y"], ["t", "y", "f"]):
                    raise LoadError(f"{path}, line {number}: header must be 't y' or "
                                    f"'t y f' (or no header), got {' '.join(cells)!r}") \
                        from None
                header = cells
                columns = [[] for _ in header]
                continue
            if len(cells) not in (2, 3):
                raise LoadError(f"{path}, line {number}: expected 2 or 3 columns (t y [f]), "
                                f"got {len(cells)}")
            header = ["t", "y", "f"][:len(cells)]
            columns = [[] for _ in header]
        if len(cells) != len(header):
            raise LoadError(f"{path}, line {number}: expected {len(header)} columns "
                            f"({' '.join(header)}), got {len(cells)}")
        for name, cell, column in zip(header, cells, columns):
            try:
                value = float(cell)
            except ValueError:
                raise LoadError(f"{path}, line {number}: column {name!r}: {cell!r} is not a "
                                "number") from None
            if not math.isfinite(value):
                raise LoadError(f"{path}, line {number}: column {name!r}: {cell!r} is not "
                                "finite")
            column.append(value)
        t = columns[0]
        if len(t) >= 2 and not t[-1] > t[-2]:
            raise LoadError(f"{path}, line {number}: t = {t[-1]!r} does not increase "
                            f"(previous t = {t[-2]!r})")
    if not columns or len(columns[0]) < 2:
        raise LoadError(f"{path}: need at least 2 data rows (t y [f]), got "
                        f"{len(columns[0]) if columns else 0}")
    arrays = [np.array(c) for c in columns]
    return Series(arrays[0], arrays[1], arrays[2] if len(arrays) == 3 else None)


def load_series(path):
    """A 1-D series (``core.integral.Series``) from .csv / .txt / .dat.

    A file whose first non-comment line has a comma is CSV and read by
    ``core.integral.load_series_csv`` (header 't,y' or 't,y,f' required);
    otherwise columns are whitespace-separated (see ``_series_whitespace``).
    """
    name = os.fspath(path)
    if not name.lower().endswith(SERIES_EXTENSIONS):
        suffix = os.path.splitext(name)[1].lower()
        raise LoadError(f"{name}: extension {suffix or '(none)'!r} is not a series file; "
                        f"accepted: {', '.join(SERIES_EXTENSIONS)}")
    path, _ = _check_file(name)
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except MemoryError:
        raise LoadError(f"{path}: too large to read") from None
    except OSError as exc:
        raise LoadError(f"{path}: cannot read the file ({_short(exc)})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LoadError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})"
                        f"{_hint(path, ())}") from None
    if "\x00" in text:
        raise LoadError(f"{path}: contains NUL bytes; not a text file{_hint(path, ())}")
    first = _first_content_line(text)
    if first is None:
        raise LoadError(f"{path}: no data (only blank or '#' comment lines); expected a "
                        "header 't,y' or 't,y,f' and rows")
    if "," not in first:
        return _series_whitespace(path, text)
    import csv

    from core.integral import load_series_csv  # imports scipy: only when needed
    try:
        return load_series_csv(path)
    except MemoryError:
        raise LoadError(f"{path}: too large to read") from None
    except (ValueError, OSError, csv.Error) as exc:
        message = str(exc) if str(exc).startswith(path) else f"{path}: {_short(exc)}"
        if text.startswith("\ufeff"):
            message += " (the file starts with a byte-order mark; save it without one)"
        raise LoadError(message) from None


def load_series_inputs(config):
    """The integral model's series: ``data.path`` of ``config`` (model.kind
    "integral"), resolved against the config file's folder; see ``load_series``."""
    if getattr(getattr(config, "model", None), "kind", None) != "integral":
        raise LoadError(f"config: load_series_inputs needs model.kind = 'integral', got "
                        f"{getattr(getattr(config, 'model', None), 'kind', None)!r} "
                        "(use load_field_inputs for the field model)")
    return load_series(config.data_path)


