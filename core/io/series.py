"""1-D series files (.csv .txt .dat, columns t, y[, f]) for the integral model: the one
reader and writer of the format.

Two spellings of the same table, told apart by the first line that is not blank or a
``#`` comment: with a comma it is CSV, otherwise whitespace-separated columns.

    CSV          header ``t,y`` or ``t,y,f`` required; rows of that many fields; blank
                 rows skipped; quoting as in the ``csv`` module.
    whitespace   ``#`` starts a comment (whole line or trailing); an optional header
                 ``t y`` or ``t y f``; without one, the first row says whether f is given.

Both: every value a finite number, t strictly increasing, at least 2 rows. Errors are
``LoadError`` naming the file and line; the two spellings word the columns their own
way ("fields (t,y)" / "columns (t y)").
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from core.io.arrays import LoadError, _check_file, _hint, _short

__all__ = ['SERIES_EXTENSIONS', 'Series', 'load_named_arrays', 'series_column', 'load_series', 'load_series_inputs',
           'save_series_csv']

#: the series files this module reads (core.config.INTEGRAL_DATA_EXTENSIONS)
SERIES_EXTENSIONS = (".csv", ".txt", ".dat")


class Series(NamedTuple):
    """A 1D data series: times t, observations y, optional f column (None: f = 1)."""

    t: np.ndarray
    y: np.ndarray
    f: np.ndarray | None = None


def series_column(name: str, value) -> np.ndarray:
    """A column of a series (t, y or f) as a read-only one-dimensional float64 array of finite
    numbers; ValueError naming the column, and the first bad value and its index, otherwise.
    The one check of a series' values: ``save_series_csv`` writes what
    ``core.integral.IntegralModelSpec`` (which checks its data with it) accepts."""
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: not an array of numbers ({exc})") from None
    if arr.ndim != 1:
        raise ValueError(f"{name}: must be one-dimensional, got shape {arr.shape}")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{name}: value {float(arr[bad[0]])!r} at index {bad[0]} is not finite")
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class _Spelling:
    """How one spelling of a series file words its rows in messages."""

    separator: str              # joins header names: "t,y" / "t y"
    cells: str                  # what a row holds: "fields" / "columns"
    header_required: bool
    rows_hint: str              # after "need at least 2 data rows"


_CSV = _Spelling(",", "fields", True, "")
_WHITESPACE = _Spelling(" ", "columns", False, " (t y [f])")
_HEADERS = (["t", "y"], ["t", "y", "f"])


def _csv_rows(text: str):
    """(line, cells) of the non-blank CSV rows (cells as written)."""
    for number, row in enumerate(csv.reader(io.StringIO(text, newline="")), start=1):
        if row and any(cell.strip() for cell in row):
            yield number, row


def _whitespace_rows(text: str):
    """(line, cells) of the lines with something left after their ``#`` comment."""
    for number, line in enumerate(text.splitlines(), start=1):
        cells = line.split("#", 1)[0].split()
        if cells:
            yield number, cells


def _is_numeric_row(cells) -> bool:
    try:
        [float(c) for c in cells]
    except ValueError:
        return False
    return True


def _cell_value(cell: str, where: str) -> float:
    """The finite number a cell holds; LoadError "<where>: '<cell>' is not a number" (or finite)."""
    try:
        value = float(cell)
    except ValueError:
        raise LoadError(f"{where}: {cell.strip()!r} is not a number") from None
    if not math.isfinite(value):
        raise LoadError(f"{where}: {cell.strip()!r} is not finite")
    return value


def _parse_series(path: str, rows, spelling: _Spelling) -> Series:
    """The series of ``rows`` ((line, cells) pairs) under the rules of the module docstring."""
    sep = spelling.separator
    header = None
    columns: list[list[float]] = []
    seen_any = False
    for number, cells in rows:
        if header is None:
            seen_any = True
            names = [c.strip() for c in cells]
            if spelling.header_required or not _is_numeric_row(cells):
                if names not in _HEADERS:
                    header_text = sep.join(names) if spelling.header_required else \
                        " ".join(cells)
                    optional = "" if spelling.header_required else " (or no header)"
                    raise LoadError(f"{path}, line {number}: header must be 't{sep}y' or "
                                    f"'t{sep}y{sep}f'{optional}, got {header_text!r}")
                header = names
                columns = [[] for _ in header]
                continue
            if len(cells) not in (2, 3):
                raise LoadError(f"{path}, line {number}: expected 2 or 3 columns (t y [f]), "
                                f"got {len(cells)}")
            header = ["t", "y", "f"][:len(cells)]
            columns = [[] for _ in header]
        if len(cells) != len(header):
            raise LoadError(f"{path}, line {number}: expected {len(header)} {spelling.cells} "
                            f"({sep.join(header)}), got {len(cells)}")
        for name, cell, column in zip(header, cells, columns):
            column.append(_cell_value(cell, f"{path}, line {number}: column {name!r}"))
        t = columns[0]
        if len(t) >= 2 and not t[-1] > t[-2]:
            raise LoadError(f"{path}, line {number}: t = {t[-1]!r} does not increase "
                            f"(previous t = {t[-2]!r})")
    if not seen_any and spelling.header_required:
        raise LoadError(f"{path}: empty file; expected a header 't,y' or 't,y,f'")
    if not columns or len(columns[0]) < 2:
        raise LoadError(f"{path}: need at least 2 data rows{spelling.rows_hint}, got "
                        f"{len(columns[0]) if columns else 0}")
    arrays = [np.array(c) for c in columns]
    return Series(arrays[0], arrays[1], arrays[2] if len(arrays) == 3 else None)


def _first_content_line(text: str) -> str | None:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return stripped
    return None


def load_series(path) -> Series:
    """A 1-D series from .csv / .txt / .dat (see the module docstring); LoadError naming
    the file (and line) for anything else."""
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
        return _parse_series(path, _whitespace_rows(text), _WHITESPACE)
    try:
        return _parse_series(path, _csv_rows(text), _CSV)
    except MemoryError:
        raise LoadError(f"{path}: too large to read") from None
    except (LoadError, csv.Error) as exc:
        message = str(exc) if str(exc).startswith(path) else f"{path}: {_short(exc)}"
        if text.startswith("\ufeff"):
            message += " (the file starts with a byte-order mark; save it without one)"
        raise LoadError(message) from None


def save_series_csv(path, t, y, f=None) -> None:
    """Write ``t,y`` (or ``t,y,f``) with a header line and 17 significant digits (floats
    with ``repr``: ``load_series`` reads back exactly the same numbers)."""
    text = series_csv_text(t, y, f)
    with open(path, "w", newline="") as fh:
        fh.write(text)


def series_csv_text(t, y, f=None) -> str:
    """The text ``save_series_csv`` writes."""
    import io

    t = series_column("t", t)
    y = series_column("y", y)
    cols = [t, y]
    header = ["t", "y"]
    if f is not None:
        cols.append(series_column("f", f))
        header.append("f")
    for name, col in zip(header[1:], cols[1:]):
        if col.size != t.size:
            raise ValueError(f"{name}: length {col.size} does not match t (length {t.size})")
    out = io.StringIO(newline="")
    w = csv.writer(out)
    w.writerow(header)
    for row in zip(*cols):
        w.writerow([repr(float(v)) for v in row])
    return out.getvalue()


def load_series_inputs(config) -> Series:
    """The integral model's series: ``data.path`` of ``config`` (model.kind
    "integral"), resolved against the config file's folder; see ``load_series``."""
    if getattr(getattr(config, "model", None), "kind", None) != "integral":
        raise LoadError(f"config: load_series_inputs needs model.kind = 'integral', got "
                        f"{getattr(getattr(config, 'model', None), 'kind', None)!r} "
                        "(use load_field_inputs for the field model)")
    return load_series(config.data_path)


def load_named_arrays(path) -> dict[str, np.ndarray]:
    """A model file's data (``[model] kind = "python"``): name -> float64 array. A .csv's header
    names its columns (each a Python identifier; every cell a finite number); an .npz gives
    each of its arrays (real or integer numbers). LoadError naming the file (and line)."""
    name = os.fspath(path)
    lower = name.lower()
    if lower.endswith(".npz"):
        return _npz_arrays(name)
    if not lower.endswith(".csv"):
        suffix = os.path.splitext(name)[1].lower()
        raise LoadError(f"{name}: extension {suffix or '(none)'!r} is not a model's data file; "
                        "accepted: .csv (a header naming the columns), .npz")
    path, _ = _check_file(name)
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LoadError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except OSError as exc:
        raise LoadError(f"{path}: cannot read the file ({_short(exc)})") from None
    try:
        return _csv_columns(path, text.removeprefix("\ufeff"))
    except csv.Error as exc:
        raise LoadError(f"{path}: {_short(exc)}") from None


def _npz_arrays(name: str) -> dict[str, np.ndarray]:
    from core.io.formats import LOADERS

    loader, out = LOADERS[".npz"], {}
    for info in loader.list_arrays(name):
        array = loader.load(name, info.name, attributes=False).array
        if array.dtype.kind not in "iuf":
            raise LoadError(f"{name}: array {info.name!r} has dtype {array.dtype}; a model's data are real numbers")
        out[info.name] = np.asarray(array, np.float64)
    if not out:
        raise LoadError(f"{name}: holds no arrays")
    return out


def _csv_columns(path: str, text: str) -> dict[str, np.ndarray]:
    rows = _csv_rows(text)
    header = next(rows, None)
    if header is None:
        raise LoadError(f"{path}: empty file; expected a header naming the columns, then rows")
    names = [c.strip() for c in header[1]]
    bad = [c for c in names if not c.isidentifier()]
    if bad:
        raise LoadError(f"{path}, line {header[0]}: column name {bad[0]!r} is not a Python identifier "
                        "(the header names the columns: data[name] in the model file)")
    if len(set(names)) != len(names):
        raise LoadError(f"{path}, line {header[0]}: a column name is repeated ({', '.join(names)})")
    columns: list[list[float]] = [[] for _ in names]
    for number, cells in rows:
        if len(cells) != len(names):
            raise LoadError(f"{path}, line {number}: expected {len(names)} fields ({','.join(names)}), "
                            f"got {len(cells)}")
        for column, cell, values in zip(names, cells, columns):
            values.append(_cell_value(cell, f"{path}, line {number}: column {column!r}"))
    if not columns[0]:
        raise LoadError(f"{path}: no data rows after the header")
    return {column: np.array(values) for column, values in zip(names, columns)}
