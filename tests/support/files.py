"""Data files written byte by byte, without the libraries the loaders use."""

from __future__ import annotations


def fits_card(key: str, value) -> bytes:
    """One 80-byte header card in FITS fixed format, written by hand (no astropy)."""
    if isinstance(value, bool):
        text = f"{'T' if value else 'F':>20}"
    elif isinstance(value, str):
        text = f"'{value:<8}'"
    else:
        text = f"{value!r:>20}"
    card = f"{key:<8}= {text}" if key != "END" else "END"
    return card.ljust(80).encode("ascii")


def fits_bytes(cards, payload: bytes) -> bytes:
    """A one-HDU FITS file: header cards, END, data, each padded to 2880 bytes."""
    header = b"".join(fits_card(k, v) for k, v in cards) + fits_card("END", None)
    header += b" " * (-len(header) % 2880)
    return header + payload + b"\0" * (-len(payload) % 2880)
