"""Guards on the project's own promises: CI calls make, the README opens with the two commands and names
every extra, and the user docs read as a manual (no work-log words, no paths outside the repository)
whose relative links all resolve."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO


def test_ci_calls_make_test() -> None:
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_readme_opens_with_the_two_commands() -> None:
    head = (REPO / "README.md").read_text().split("\n## ")[0]
    assert "make demo" in head and "make test" in head


# Words of a work log, not of a user's manual, and paths that exist only on one machine.
_LOG_WORDS = re.compile(
    r"\bsittings?\b|\bthis session\b|\bhelper sessions?\b|/work/|\.\./shared\b|/tmp/prompts", re.I
)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_readme_and_docs_read_as_a_manual() -> None:
    found = [
        f"{page.relative_to(REPO)}:{number}: {match.group(0)!r}"
        for page in _pages()
        for number, line in enumerate(page.read_text().splitlines(), start=1)
        for match in _LOG_WORDS.finditer(line)
    ]
    assert not found, "work-log words or machine paths in the user docs:\n" + "\n".join(found)


def test_log_word_check_catches_what_it_is_for() -> None:
    assert _LOG_WORDS.search("measured in the fourth sitting") and _LOG_WORDS.search("see /work/shared/x")
    assert not _LOG_WORDS.search("a requests.Session keeps the connection; pytest's session fixture")


def test_every_relative_markdown_link_resolves() -> None:
    broken = []
    for page in _pages():
        for target in _LINK.findall(page.read_text()):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # https:, mailto:, in-page anchors
            path, _, anchor = target.partition("#")
            file = page.parent / path
            if not file.exists() or (anchor and anchor not in _anchors(file)):
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, "links to files or headings that do not exist:\n" + "\n".join(broken)


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+\s+(.+)$", page.read_text(), re.M) if page.suffix == ".md" else []
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_readme_install_names_every_extra() -> None:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    install = (REPO / "README.md").read_text().split("\n## Install", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in extras if name != "test" and f"| `{name}` |" not in install]
    assert not missing, f"extras without a row in the README's Install table: {missing}"


def test_docs_index_lists_every_page() -> None:
    index = (REPO / "docs" / "index.md").read_text()
    pages = sorted(page.name for page in (REPO / "docs").glob("*.md") if page.name != "index.md")
    unlisted = [name for name in pages if f"]({name})" not in index]
    assert not unlisted, f"docs/index.md has no line for {unlisted}: add one saying what each page covers"
