"""Helpers shared by the tests: GUI fixtures, fake runs, hand-written files."""
