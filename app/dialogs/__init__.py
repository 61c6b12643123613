"""The main window's dialogs: questions (``questions``: every blocking question and file chooser
goes through one function there, so that a test answers it by patching that function), the
window-modal messages that never block (``messages``), Help > About (``about``)."""

__all__: list[str] = []
