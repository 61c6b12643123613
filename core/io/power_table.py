"""Tabulated P(k) files (columns k, P): read here and built as
``core.field.power_spectrum.TabulatedPower`` (which reads no files), with LoadError
messages naming the file and line.
"""

from __future__ import annotations

from core.field.power_spectrum import TabulatedPower
from core.io.arrays import LoadError, _check_file, _short

__all__ = ['load_power_table', 'load_prior_table']


def _read_table(path: str) -> TabulatedPower:
    """Two columns k, P (whitespace or comma separated); '#' starts a comment (whole line
    or trailing); blank lines are skipped. ValueError naming the file and line."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except UnicodeDecodeError as exc:
        raise ValueError(f"power table {path!r}: not a text file ({exc.reason})") from None
    ks, ps, rows = [], [], []
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].replace(",", " ").strip()
        if not text:
            continue
        columns = text.split()
        if len(columns) != 2:
            raise ValueError(f"power table {path!r}, line {number}: expected 2 columns "
                             f"(k, P), found {len(columns)}: {line.strip()!r}")
        values = []
        for column in columns:
            try:
                values.append(float(column))
            except ValueError:
                raise ValueError(f"power table {path!r}, line {number}: {column!r} is "
                                 "not a number") from None
        ks.append(values[0])
        ps.append(values[1])
        rows.append(f"line {number}")
    return TabulatedPower(ks, ps, source=path, _rows=rows)


def load_power_table(path) -> TabulatedPower:
    """The ``TabulatedPower`` of a table file (see ``_read_table``); every problem is a
    LoadError naming the file (and the line)."""
    path, _ = _check_file(path)
    try:
        return _read_table(path)
    except MemoryError:
        raise LoadError(f"{path}: too large to read") from None
    except OSError as exc:
        raise LoadError(f"{path}: cannot read the file ({_short(exc)})") from None
    except ValueError as exc:
        message = _short(exc, 400)
        raise LoadError(message if path in message else f"{path}: {message}") from None


def load_prior_table(config) -> TabulatedPower | None:
    """The table a field config's ``prior.table`` names (resolved against the config
    file's folder), for ``core.field.power_spectrum.prior_spectrum``; None unless
    ``prior.kind == "table"``. LoadError when it cannot be read."""
    if config.prior.kind != "table":
        return None
    return load_power_table(config.resolve_path(config.prior.table))
