"""Pages checked as a person sees them: Playwright driving the system's headless Chromium.

Browsers cannot be downloaded here, so Playwright is pointed at the installed Chromium with
``executable_path``. Only loopback pages are opened; the profile is fresh and temporary.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"  # screenshots kept after the run
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-default-apps", "--disable-extensions"]  # fmt: skip


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def unavailable() -> str | None:
    """Why a browser test cannot run here, or None when it can."""
    if chromium_path() is None:
        return (
            "headless Chromium is not installed (Debian package 'chromium'; `make test` installs it as root)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (pip install playwright; the test extra has it)"
    return None


@contextmanager
def open_page(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A Playwright page in a fresh headless Chromium, closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(60_000)
            yield page
        finally:
            browser.close()


def screenshot(page: Any, name: str) -> Path:
    """Save a full-page PNG under tests/artifacts/ and return its path."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    return path
