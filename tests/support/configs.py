"""Run configs for tests, built as documents and written by ``core.config`` (never hand-written
TOML, so that they stay valid when the schema moves)."""

from __future__ import annotations

from core.config import config_from_dict, dump_config

__all__ = ["field_config_text"]


def field_config_text(*, box_size, prior: dict, unit: str | None = None, data: dict | None = None,
                      field: dict | None = None, sampler: dict | None = None) -> str:
    """The TOML text of a field run on "data.npz" (noise sd 0.5, the file's "mask" array unless
    ``data`` says otherwise), every other key at its default."""
    grid = {"box_size": box_size, **({"unit": unit} if unit is not None else {})}
    document = {"model": {"kind": "field"},
                "data": {"path": "data.npz", "noise_sigma": 0.5, "mask": "mask", **(data or {})},
                "grid": grid, "prior": prior}
    for name, table in (("field", field), ("sampler", sampler)):
        if table:
            document[name] = table
    return dump_config(config_from_dict(document))
