"""Tabulated P(k) files (columns k, P), read as ``TabulatedPower`` with LoadError messages."""

from __future__ import annotations

from core.io.arrays import LoadError, _check_file, _short

__all__ = ['load_power_table']

def load_power_table(path):
    """``core.field.power_spectrum.TabulatedPower.from_file(path)`` with its errors as
    LoadError (they name the file and line)."""
    from core.field.power_spectrum import TabulatedPower

    path, _ = _check_file(path)
    try:
        return TabulatedPower.from_file(path)
    except MemoryError:
        raise LoadError(f"{path}: too large to read") from None
    except OSError as exc:
        raise LoadError(f"{path}: cannot read the file ({_short(exc)})") from None
    except ValueError as exc:
        message = _short(exc, 400)
        raise LoadError(message if path in message else f"{path}: {message}") from None
