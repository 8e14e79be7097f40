"""Every import points down the layers, and no two rooms import each other.

A room is the first package under ``gym/`` (``gym/data/``, ``gym/api/``...) or the ``action/`` package.
Top-level modules such as ``gym/files.py`` are shared utilities below every room. The graph is built
with ``ast`` from the source, lazy imports inside functions and ``TYPE_CHECKING`` blocks included,
so a dependency cannot hide in a function body.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.conftest import REPO

# Lowest first: a room may import its own modules and those of rooms before it.
ORDER = (
    "config", "data", "model", "train", "eval", "engine", "api", "export", "hub", "launch", "gitops", "webui",
    "action", "cli",
)  # fmt: skip
ENTRY_POINTS = {"gym.__main__"}  # `python -m gym` starts the command line: above every room
# (importing file, imported module) -> why it is allowed. Keep it empty; every entry is a debt.
ALLOWED: dict[tuple[str, str], str] = {}


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str | None:
    """The room of a module; None for shared top-level modules (``gym.files``) and for other packages."""
    parts = module.split(".")
    if parts[0] == "action":
        return "action"
    if parts[0] == "gym" and len(parts) > 2:
        return parts[1]
    if parts[0] == "gym" and len(parts) == 2 and (REPO / "gym" / parts[1]).is_dir():
        return parts[1]
    return None


def _imports(path: Path) -> list[tuple[str, int]]:
    """Every module ``path`` imports (absolute and relative), with its line."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.append((".".join([*base, node.module] if node.module else base), node.lineno))
            elif node.module:
                found.append((node.module, node.lineno))
    return [(name, line) for name, line in found if name.split(".")[0] in ("gym", "action")]


def _edges() -> list[tuple[str, int, str, str, str]]:
    """``(file, line, imported module, from room, to room)`` for every import that crosses rooms."""
    edges = []
    for path in sorted([*(REPO / "gym").rglob("*.py"), *(REPO / "action").rglob("*.py")]):
        source = _room(_module(path))
        if _module(path) in ENTRY_POINTS:
            continue
        for name, line in _imports(path):
            target = _room(name)
            if target != source:
                edges.append(
                    (str(path.relative_to(REPO)), line, name, source or "shared", target or "shared")
                )
    return edges


def _rank(room: str) -> int:
    return -1 if room == "shared" else ORDER.index(room)


def test_every_room_has_a_place_in_the_order() -> None:
    rooms = {room for edge in _edges() for room in edge[3:]} - {"shared"}
    assert not rooms - set(ORDER), f"rooms missing from ORDER in tests/test_imports.py: {rooms - set(ORDER)}"


def test_every_import_points_down() -> None:
    upward = [
        f"{file}:{line}: {source} imports {name} ({target} is above {source})"
        for file, line, name, source, target in _edges()
        if target in ORDER and _rank(target) > _rank(source) and (file, name) not in ALLOWED
    ]
    assert not upward, "imports that point up the layers:\n" + "\n".join(upward)


def test_no_two_rooms_import_each_other() -> None:
    """A circle through rooms (even through allowed imports) is named with one import of each step."""
    graph: dict[str, dict[str, str]] = defaultdict(dict)
    for file, line, name, source, target in _edges():
        graph[source].setdefault(target, f"{file}:{line} imports {name}")
    circles: dict[frozenset[str], str] = {}
    for start in sorted(graph):
        path = _path_back(graph, start)
        rooms = frozenset(step for step, _ in path)
        if path and rooms not in circles:
            steps = " -> ".join([start, *[step for step, _ in path]])
            circles[rooms] = steps + "".join(f"\n  {where}" for _, where in path)
    assert not circles, "rooms on a circle:\n" + "\n".join(circles.values())


def _path_back(graph: dict[str, dict[str, str]], start: str) -> list[tuple[str, str]]:
    """The steps ``(room, where)`` of a path from ``start`` back to itself; empty when there is none."""
    stack = [(start, [])]
    seen = set()
    while stack:
        room, path = stack.pop()
        for target, where in graph.get(room, {}).items():
            if target == start:
                return [*path, (target, where)]
            if target not in seen:
                seen.add(target)
                stack.append((target, [*path, (target, where)]))
    return []


def test_the_checker_sees_lazy_imports() -> None:
    """Imports inside function bodies count: training's model-layer answer for image rows is one."""
    edges = {(file, name, source, target) for file, _, name, source, target in _edges()}
    assert ("gym/train/runner.py", "gym.model.vision", "train", "model") in edges
    assert (
        _room("gym.files") is None
        and _room("gym.launch.local") == "launch"
        and _room("action.main") == "action"
    )
