"""transformers' KV-cache classes are touched in one module, and its growing layer stores what
transformers' own layer stores."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE_NAMES = {"DynamicCache", "DynamicLayer", "Cache", "StaticCache", "DynamicSlidingWindowLayer"}


def _touches(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("transformers"):
            if node.module.endswith("cache_utils") or {a.name for a in node.names} & CACHE_NAMES:
                lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr == "cache_utils":
            lines.append(node.lineno)
    return lines


def test_only_cache_compat_imports_transformers_cache_classes() -> None:
    allowed = REPO / "gym" / "engine" / "cache_compat.py"
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted((REPO / "gym").rglob("*.py"))
        if path != allowed
        for line in _touches(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not found, f"import transformers' cache classes through gym/engine/cache_compat.py: {found}"
    assert _touches(ast.parse(allowed.read_text(encoding="utf-8")))  # the check can see an import


def test_growing_layer_holds_what_a_dynamic_layer_holds() -> None:
    torch = pytest.importorskip("torch")
    from transformers.cache_utils import DynamicLayer

    from gym.engine.cache_compat import growing_layer_class, is_plain_layer, replace_kv

    torch.manual_seed(0)
    plain, growing = DynamicLayer(), growing_layer_class(2)()
    first = torch.randn(3, 2, 5, 4), torch.randn(3, 2, 5, 4)
    plain.update(*first)
    replace_kv(growing, *first)
    for _ in range(4):  # past the 2 spare columns: the buffer is rebuilt on the way
        step = torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 4)
        expected = plain.update(*step)
        got = growing.update(*step)
        assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    assert growing.keys.shape == (3, 2, 9, 4) and torch.equal(growing.values, plain.values)
    assert is_plain_layer(plain) and not is_plain_layer(growing)
