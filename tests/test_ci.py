"""CI runs exactly the test command that README.md gives a newcomer."""

from __future__ import annotations

from tests.builders import REPOSITORY


def pytest_commands(text: str) -> list[str]:
    """The lines of ``text`` that run the test suite."""
    return [line.strip() for line in text.splitlines() if line.strip().startswith("python -m pytest")]


def test_ci_runs_the_readme_test_command() -> None:
    readme = pytest_commands((REPOSITORY / "README.md").read_text())
    assert len(readme) == 1, readme
    assert pytest_commands((REPOSITORY / ".ci" / "run").read_text()) == readme
