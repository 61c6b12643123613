"""The architecture's import rules, checked on every module by importing it.

import-linter (``lint-imports``, in the test command) checks the same rules statically from
the source; this test checks what actually lands in ``sys.modules`` when each module is
imported in a fresh interpreter, which also catches imports made by third-party packages
on our behalf (a plotting library that pulls in Qt, a loader that pulls in TensorFlow).

- every ``core`` module outside ``core.engine``: no TensorFlow, no Qt/pyqtgraph/vispy;
- every ``core.engine`` module: no Qt/pyqtgraph/vispy;
- every ``app`` module but ``app.cli`` (and ``app.__main__``, which is ``app.cli``): no
  TensorFlow and no ``core.engine``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TENSORFLOW = ("tensorflow", "tensorflow_probability", "tf_keras")
QT = ("PySide6", "shiboken6", "pyqtgraph", "vispy", "OpenGL")

# One fresh interpreter per module (core.engine: one for the package): a module must be
# clean on its own, not only after its neighbours were imported. The modules of a package are listed by the parent
# process, without importing them.
PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted({m.split('.')[0] if not m.startswith('core.engine') else 'core.engine'
                         for m in sys.modules})))
"""


def modules(package: str) -> list[str]:
    base = ROOT / package
    names = []
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


def imported_roots(*module: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, *module], cwd=ROOT, capture_output=True,
                         text=True, timeout=300,
                         env={**os.environ, "QT_QPA_PLATFORM": "offscreen", "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.returncode == 0, f"importing {module} failed:\n{out.stderr[-2000:]}"
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


CORE = [m for m in modules("core") if not m.startswith("core.engine")]
ENGINE = [m for m in modules("core") if m.startswith("core.engine")]
APP = [m for m in modules("app") if m not in ("app.cli", "app.__main__")]


def test_the_module_lists_cover_the_tree():
    # A test over an empty list passes without checking anything: make sure it is not.
    assert "core.config.parse" in CORE and "core.io.hdf5" in CORE and "core.store.run_store" in CORE
    assert "core.engine.fft" in ENGINE and "core.engine.engine" in ENGINE
    assert "app.main_window" in APP and "app.views.volume" in APP and "app.panels.data" in APP
    assert len(CORE) + len(ENGINE) + len(APP) + 2 == len(modules("core")) + len(modules("app"))


def test_the_import_contracts_cover_every_core_package():
    """The TensorFlow contract lists core's packages one by one (core.engine is the
    exception): a package added later must be added there, or it would go unchecked."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    tf = next(c for c in contracts if "tensorflow" in c["forbidden_modules"]
              and c["source_modules"] != ["app"])
    tops = {".".join(m.split(".")[:2]) for m in CORE if m != "core"}
    assert tops == set(tf["source_modules"])


@pytest.mark.slow
@pytest.mark.parametrize("module", CORE)
def test_core_modules_import_neither_tensorflow_nor_qt(module):
    bad = imported_roots(module) & set(TENSORFLOW + QT)
    assert not bad, f"{module} imports {sorted(bad)}"


@pytest.mark.slow
def test_engine_modules_import_no_qt():
    # One interpreter for all of core.engine: each costs a TensorFlow import (~5 s), and
    # import-linter already attributes an offending import to its module statically.
    bad = imported_roots(*ENGINE) & set(QT)
    assert not bad, f"core.engine imports {sorted(bad)}"


@pytest.mark.slow
@pytest.mark.parametrize("module", APP)
def test_app_modules_import_neither_tensorflow_nor_the_engine(module):
    bad = imported_roots(module) & set(TENSORFLOW + ("core.engine",))
    assert not bad, f"{module} imports {sorted(bad)}"


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def test_every_public_module_declares_what_it_exports():
    """``__all__`` in every module of core and app (read from the source, nothing imported),
    and every name it lists exists in the module."""
    missing, unknown = [], []
    for module in modules("core") + modules("app"):
        if module.endswith("__main__"):
            continue
        path = ROOT / Path(*module.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        tree = ast.parse(path.read_text())
        exported = [node for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                    and any(getattr(t, "id", None) == "__all__"
                            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))]
        if not exported:
            missing.append(module)
            continue
        names = set(ast.literal_eval(exported[0].value))
        unknown += [f"{module}.{n}" for n in sorted(names - _top_level_names(tree))]
    assert not missing, f"modules without __all__: {missing}"
    assert not unknown, f"__all__ lists names the module does not define: {unknown}"
