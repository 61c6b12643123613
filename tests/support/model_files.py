"""The model-file examples of ``resources/examples``, copied into a test's folder with their data."""

from __future__ import annotations

from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "resources" / "examples"


def copy_example(name: str, folder: Path) -> Path:
    """The example ``name`` copied into ``folder`` with its data made there (its make_data.py);
    returns its config's path."""
    for path in (EXAMPLES / name).iterdir():
        if path.is_file():
            (folder / path.name).write_text(path.read_text())
    namespace = {"__file__": str(folder / "make_data.py")}
    exec(compile((folder / "make_data.py").read_text(), str(folder / "make_data.py"), "exec"), namespace)
    namespace["make"](folder)
    return folder / "config.toml"
