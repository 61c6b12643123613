"""The architecture's import rules, checked on every module by importing it.

import-linter (``lint-imports``, in the test command) checks the same rules statically from
the source; this test checks what actually lands in ``sys.modules`` when each module is
imported on its own (a fork of an interpreter that imported only the third-party packages the
rule allows), which also catches imports made by third-party packages
on our behalf (a plotting library that pulls in Qt, a loader that pulls in TensorFlow).

- every ``core`` module outside ``core.engine``: no TensorFlow, no Qt/pyqtgraph/vispy;
- every ``core.engine`` module: no Qt/pyqtgraph/vispy;
- every ``app`` module but ``app.cli`` (and ``app.__main__``, which is ``app.cli``): no
  TensorFlow and no ``core.engine``.
"""

from __future__ import annotations

import ast
import functools
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

# Each module is imported on its own in a child forked from a parent that has imported only
# third-party packages its rule allows (numpy, scipy, zarr, numcodecs; for app also Qt,
# pyqtgraph and vispy): a module must be clean on its own, not only after its neighbours
# were imported. The parent's own modules are checked too, so a preloaded package that
# pulled in a forbidden one fails every module's test. A fork costs milliseconds a module
# where a fresh interpreter cost 1-3 s (84 s for the whole file). The modules of a package
# are listed by the test process, without importing them.
PROBE = """
import importlib, json, os, sys
preload, names = [n for n in sys.argv[1].split(",") if n], sys.argv[2:]
for name in preload:
    importlib.import_module(name)

def roots():
    return sorted({m.split('.')[0] if not m.startswith('core.engine') else 'core.engine'
                   for m in sys.modules})

out = {"": roots()}
for name in names:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(name)
            result = {"roots": roots()}
        except BaseException as exc:
            result = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        text = fh.read()
    os.waitpid(pid, 0)
    out[name] = json.loads(text) if text else {"error": "the importing process died"}
print(json.dumps(out))
"""
CORE_PRELOAD = ("numpy", "scipy", "scipy.ndimage", "scipy.special", "zarr", "numcodecs")
APP_PRELOAD = CORE_PRELOAD + ("PySide6.QtCore", "PySide6.QtGui", "PySide6.QtWidgets", "pyqtgraph", "vispy")


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


def _run(code: str, *args: str):
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=600,
                         env={**os.environ, "QT_QPA_PLATFORM": "offscreen", "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.returncode == 0, f"importing {args[1:]} failed:\n{out.stderr[-2000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


@functools.cache
def probe(names: tuple[str, ...], preload: tuple[str, ...]) -> dict:
    """{module: {"roots": top-level packages in sys.modules after importing it alone} or
    {"error": why it failed}; "": the roots of the parent after its preload}."""
    return _run(PROBE, ",".join(preload), *names)


def roots_of(module: str, names, preload) -> set[str]:
    found = probe(tuple(names), tuple(preload))
    assert "error" not in found[module], f"importing {module} failed: {found[module]['error']}"
    return set(found[module]["roots"])


def imported_roots(*module: str) -> set[str]:
    """The roots after importing all of ``module`` together in one fresh interpreter (the
    probe's parent, with them as its preload and no child)."""
    return set(_run(PROBE, ",".join(module))[""])


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
def test_the_probe_sees_what_a_module_pulls_in_and_the_preloads_are_clean():
    """The forked probe reports TensorFlow for an engine module and Qt for a view; a module
    probed after the engine's shows no TensorFlow (each child starts from the parent's state);
    the parent's preloaded packages pull in nothing that a rule forbids."""
    names = ("core.config.parse", "core.engine.fft", "core.store.run_store")
    found = probe(names, CORE_PRELOAD)
    assert "tensorflow" in set(found["core.engine.fft"]["roots"])
    assert not set(found[names[0]]["roots"]) & set(TENSORFLOW + QT)
    assert not set(found[names[2]]["roots"]) & set(TENSORFLOW)      # imported after the engine's child
    assert not set(probe(("app.views.volume",), APP_PRELOAD)[""]) & set(TENSORFLOW + ("core.engine",))
    assert not set(found[""]) & set(TENSORFLOW + QT)
    assert "PySide6" in set(probe(("app.views.volume",), CORE_PRELOAD)["app.views.volume"]["roots"])


@pytest.mark.slow
@pytest.mark.parametrize("module", CORE)
def test_core_modules_import_neither_tensorflow_nor_qt(module):
    bad = roots_of(module, CORE, CORE_PRELOAD) & set(TENSORFLOW + QT)
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
    bad = roots_of(module, APP, APP_PRELOAD) & set(TENSORFLOW + ("core.engine",))
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
