"""Help > About and Help > Documentation: what Fieldscope runs on, and where its README is.

``versions(opengl)`` lists the versions About shows (TensorFlow's read from its package
metadata: the GUI process never imports TensorFlow); ``about_text(opengl)`` is About's text;
``documentation_url()`` the README of this source tree, else the project's URL.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QUrl

__all__ = ["versions", "about_text", "documentation_url", "opengl_text"]

#: where the documentation lives when the source tree's README is not at hand
_README = Path(__file__).resolve().parents[2] / "README.md"


def documentation_url() -> QUrl:
    """Help > Documentation: the README of this source tree, else the project's URL from the
    installed package's metadata (empty when neither is known)."""
    if _README.is_file():
        return QUrl.fromLocalFile(str(_README))
    try:
        from importlib.metadata import PackageNotFoundError, metadata

        meta = metadata("fieldscope")
    except (ImportError, PackageNotFoundError):
        return QUrl()
    for entry in meta.get_all("Project-URL") or []:
        url = entry.split(",", 1)[-1].strip()
        if url:
            return QUrl(url)
    home = meta.get("Home-page")
    return QUrl(home) if home else QUrl()


def _package_version(name: str) -> str:
    """An installed distribution's version from its metadata (nothing is imported)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def versions(opengl: str = "not yet initialised") -> dict[str, str]:
    """What Help > About lists. TensorFlow's version is read from its metadata: the GUI
    process never imports TensorFlow (it runs in the engine process)."""
    import platform

    import numpy
    import PySide6
    from PySide6.QtCore import qVersion

    from core import __version__

    return {"Fieldscope": __version__, "TensorFlow": _package_version("tensorflow"),
            "TensorFlow Probability": _package_version("tensorflow-probability"),
            "Qt": qVersion(), "PySide6": PySide6.__version__,
            "Python": platform.python_version(), "numpy": numpy.__version__, "OpenGL": opengl}


def about_text(opengl: str = "not yet initialised") -> str:
    rows = versions(opengl)
    lines = [f"Fieldscope {rows.pop('Fieldscope')}", "Bayesian field inference with Hamiltonian Monte Carlo.", ""]
    lines += [f"{name}: {value}" for name, value in rows.items()]
    return "\n".join(lines)


def opengl_text(views) -> str:
    """The 3D view's OpenGL renderer, when its vispy canvas exists (its context was probed
    then: nothing is created here); ``views``: the window's ``LiveViews`` or None."""
    try:
        view = views.view("3D volume") if views is not None else None
    except KeyError:
        view = None
    from app.views.base import LazyView

    if isinstance(view, LazyView):      # built when its tab is first shown
        view = view.view
    if view is None or getattr(view, "canvas", None) is None:
        problem = getattr(view, "problem", "") if view is not None else ""
        return f"unavailable ({problem})" if problem else "not yet initialised"
    from app.views.volume import gl_renderer

    return gl_renderer() or "unknown"
