"""What a Space installs to run Gym's serving code: the released package, or (a dev build) just that code.

A Space built from a released Gym lists ``zoo-gym[space]==<version>`` in its requirements: the package
index holds that exact code, so the Space folder carries none of it. A version the index does not hold (a
dev build, a local change) cannot be installed there, so the Space carries a copy of the modules serving
imports, found by following ``gym.*`` imports (including those inside functions) from the Space's entry
module, with the data files of their packages (chat templates); not the training, evaluation or launch code.

Whether a version is released is asked of the index's JSON API (``GYM_PACKAGE_INDEX``, default PyPI's),
with a short timeout; no answer means "not released" and the code is carried, which always works.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import urllib.request
from pathlib import Path

ENTRY_MODULES = ("gym.api.ui", "gym.api.factory")
PACKAGE = Path(__file__).resolve().parents[1]
INDEX = "https://pypi.org/pypi"
DISTRIBUTION = "zoo-gym"


def is_released(version: str, timeout: float = 5.0) -> bool:
    """Whether the package index serves ``zoo-gym==version`` (a dev or local version never is)."""
    if any(mark in version for mark in ("dev", "+")):
        return False
    index = os.environ.get("GYM_PACKAGE_INDEX", INDEX).rstrip("/")
    try:
        with urllib.request.urlopen(f"{index}/{DISTRIBUTION}/{version}/json", timeout=timeout) as answer:  # noqa: S310
            info = json.load(answer).get("info") or {}
        return info.get("version") == version
    except (OSError, ValueError):
        return False


def _module_file(name: str) -> Path | None:
    path = PACKAGE.parent.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _imports(path: Path, module: str) -> set[str]:
    """Every ``gym.*`` module (or name in one) that ``path`` imports, at its top or inside functions."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "gym")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            if base.split(".")[0] == "gym":
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def serving_modules() -> set[str]:
    """The ``gym`` modules the Space's app can import, with every package above them."""
    seen: set[str] = set()
    todo = list(ENTRY_MODULES)
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if path is None or name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:depth]) for depth in range(1, len(parts))]
        todo += _imports(path, name)
    return seen


def copy_serving_code(out: Path) -> int:
    """Write the serving modules (and their packages' data files) to ``out/gym``; the number of files."""
    target = out / "gym"
    shutil.rmtree(target, ignore_errors=True)
    copied = 0
    for name in sorted(serving_modules()):
        path = _module_file(name)
        assert path is not None
        destination = target / path.relative_to(PACKAGE)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, destination)
        copied += 1
        if path.name == "__init__.py":  # the package's data files: chat templates, tables
            for data in path.parent.iterdir():
                if data.is_file() and data.suffix not in (".py", ".pyc"):
                    shutil.copy2(data, destination.parent / data.name)
                    copied += 1
    return copied
