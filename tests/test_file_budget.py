"""A line budget per source file: no ``.py`` file under core/, app/ or bench/ grows past
``BUDGET`` lines.

The files that were longer when the budget was set (#29) are listed in ``CEILINGS`` with
their size then: a ceiling may only go down. Split a file, then lower its ceiling to its new
size, or delete its entry once the file is within the budget (an entry for a file within
the budget, or for a file that is gone, fails the test so that the list keeps shrinking).
Never raise a ceiling or add a file: split the module instead (one concept per module).

Reads text only (no imports): milliseconds.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the folders whose Python files have a budget
PACKAGES = ("core", "app", "bench")
#: lines a source file may have
BUDGET = 800
#: today's longer files and their size when the budget was set: ceilings that may only go down
CEILINGS = {
    "app/state/run_state.py": 851,
    "app/views/volume.py": 811,
    "bench/sampler_efficiency.py": 820,
    "core/store/run_store.py": 990,
}


def line_counts(root: Path = ROOT) -> dict[str, int]:
    """{path relative to root (POSIX): number of lines} of every .py file under PACKAGES."""
    counts = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                counts[path.relative_to(root).as_posix()] = len(path.read_bytes().splitlines())
    return counts


def over_budget(counts: dict[str, int], budget: int = BUDGET, ceilings: dict[str, int] = CEILINGS) -> list[str]:
    """One line per file longer than its ceiling (listed) or than the budget (any other)."""
    problems = []
    for path, n in sorted(counts.items()):
        limit = ceilings.get(path, budget)
        if n > limit:
            kind = "its ceiling" if path in ceilings else "the budget"
            problems.append(f"{path}: {n} lines > {limit} ({kind}); split the module (one concept per module)")
    return problems


def stale_ceilings(counts: dict[str, int], budget: int = BUDGET, ceilings: dict[str, int] = CEILINGS) -> list[str]:
    """One line per ceiling that should go: its file is gone or within the budget."""
    problems = []
    for path, limit in sorted(ceilings.items()):
        if path not in counts:
            problems.append(f"{path}: listed in CEILINGS but gone; delete its entry")
        elif counts[path] <= budget:
            problems.append(f"{path}: {counts[path]} lines, within the budget of {budget}; delete its entry")
        elif limit <= budget:
            problems.append(f"{path}: a ceiling of {limit} is not above the budget; delete its entry")
    return problems


def test_every_source_file_is_within_its_line_budget():
    problems = over_budget(line_counts())
    assert not problems, "\n".join(problems)


def test_every_ceiling_names_a_file_still_over_the_budget():
    problems = stale_ceilings(line_counts())
    assert not problems, "\n".join(problems)


def test_the_budget_check_fails_when_a_file_grows(tmp_path):
    """A file one line past the budget, or one line past its ceiling, is reported; files at
    their limit are not; an entry for a file that shrank within the budget is stale."""
    (tmp_path / "core").mkdir()
    (tmp_path / "app").mkdir()
    (tmp_path / "bench").mkdir()
    (tmp_path / "core" / "at_budget.py").write_text("x = 1\n" * 10)
    (tmp_path / "app" / "grown.py").write_text("x = 1\n" * 11)
    (tmp_path / "bench" / "long.py").write_text("x = 1\n" * 15)
    (tmp_path / "bench" / "longer.py").write_text("x = 1\n" * 16)
    counts = line_counts(tmp_path)
    assert counts == {"app/grown.py": 11, "bench/long.py": 15, "bench/longer.py": 16, "core/at_budget.py": 10}
    ceilings = {"bench/long.py": 15, "bench/longer.py": 15, "core/at_budget.py": 12}
    problems = over_budget(counts, budget=10, ceilings=ceilings)
    assert [p.split(":")[0] for p in problems] == ["app/grown.py", "bench/longer.py"]
    assert "11 lines > 10 (the budget)" in problems[0] and "16 lines > 15 (its ceiling)" in problems[1]
    assert [p.split(":")[0] for p in stale_ceilings(counts, budget=10, ceilings=ceilings)] == ["core/at_budget.py"]
