"""Shared test helpers: writing gym.toml files, the real-world fixtures in ../shared/fixtures."""

from __future__ import annotations

import os

# Two xdist workers on two cores: each torch process must use one intra-op thread. With the default
# (one per core) OpenMP threads of the two workers fight for the cores and tiny ops run ~30x slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
# Whether a Gym version is released is asked of the package index when a Space is rendered
# (gym/hub/space_code.py): the suite's index answers nothing (a refused loopback port), so Spaces carry the
# serving code unless a test starts an index of its own.
os.environ.setdefault("GYM_PACKAGE_INDEX", "http://127.0.0.1:9/pypi")

import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("GYM_FIXTURES_DIR") or REPO.parent / "shared" / "fixtures")

VALID = """\
[project]
name = "demo"

[model]
name_or_path = "builtin:tiny"
template = "chatml"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"

[train]
method = "sft"
adapter = "lora"
learning_rate = 2e-4
"""


# The files whose tests take a minute or more (docs/testing.md), longest first.
LONGEST_FILES = (
    "model/test_quantized.py",
    "e2e/test_loop.py",
    "webui/test_chat_images.py",
    "webui/test_webui_client.py",
    "webui/test_webui_page.py",
    "e2e/test_gates.py",
    "train/test_sft.py",
    "launch/test_job_states.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first, then the other files holding ``slow`` tests, each file's tests kept
    together (module fixtures are built once). With ``--dist worksteal`` (``make test``) the run then ends
    on short tests that an idle worker can take over, instead of one worker finishing a minute-long
    end-to-end test while the other waits."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    longest = {Path(__file__).parent / name: rank for rank, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: (longest.get(item.path, len(longest)), item.path not in slow_files))


@pytest.fixture
def fixtures_dir() -> Path:
    """../shared/fixtures, or a skip with the reason when this clone has no shared/ folder beside it."""
    if not FIXTURES.is_dir():
        pytest.skip(
            f"real-world fixtures not found at {FIXTURES} (they live in the project's shared/ folder)"
        )
    return FIXTURES


@pytest.fixture
def page():
    """A Playwright page in headless system Chromium (tests/browser.py); skipped, saying why, without one."""
    from tests.browser import open_page, unavailable

    reason = unavailable()
    if reason:
        pytest.skip(reason)
    with open_page() as opened:
        yield opened


@pytest.fixture
def write_toml(tmp_path: Path):
    """Write a gym.toml (dedented) into a temp folder and return its path."""

    def write(text: str, name: str = "gym.toml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write
