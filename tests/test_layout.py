"""Guards on the project's own promises: templates listed in config match the README's claims, CI calls make."""

from __future__ import annotations

from tests.conftest import REPO


def test_ci_calls_make_test() -> None:
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_readme_opens_with_the_two_commands() -> None:
    head = (REPO / "README.md").read_text().split("\n## ")[0]
    assert "make demo" in head and "make test" in head
