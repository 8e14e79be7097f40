"""Turn pydantic's validation errors into one human sentence each, at the key the user must change."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

from gym.config.fields import model_at
from gym.config.suggest import did_you_mean

Path = tuple[str | int, ...]
SECRET_KEY_WORDS = ("token", "secret", "password", "api_key", "apikey", "key")


def describe(value: Any) -> str:
    """A short TOML-flavoured rendering of a found value: ``"abc"``, ``-0.1``, ``true``, ``an array``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        # Never cut here: a cut secret escapes redaction. ConfigIssue redacts, then shortens.
        return f"the string {json.dumps(value, ensure_ascii=False)}"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array" if value else "an empty array"
    return type(value).__name__


def _number_hint(value: Any) -> str:
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return ""
        return " (write numbers without quotes)"
    return ""


def _expected_names(expected: str) -> list[str]:
    return re.findall(r"'([^']*)'", expected)


def clean_loc(loc: tuple[Any, ...]) -> tuple[Path, bool]:
    """Drop pydantic's union/function markers from a location; report whether it names a dict key."""
    path: list[str | int] = []
    is_key = False
    for part in loc:
        if part == "[key]":
            is_key = True
        elif isinstance(part, int) or not any(c in str(part) for c in "[]()"):
            path.append(part)
    return tuple(path), is_key


def sentence(error: dict[str, Any], root: type[BaseModel]) -> str:
    """The message for one pydantic error (the location is reported separately)."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    path, is_key = clean_loc(error["loc"])
    name = str(path[-1]) if path else ""
    got = describe(value)

    if kind == "missing":
        section = model_at(root, path)
        if section is not None and path and name == "datasets":
            return "at least one [[datasets]] table is required"
        if section is not None:
            return f"required table [{'.'.join(map(str, path))}] is missing"
        return f"required key '{name}' is missing"
    if kind == "extra_forbidden":
        parent = model_at(root, path[:-1])
        allowed = list(parent.model_fields) if parent is not None else []
        message = f"unknown key '{name}'{did_you_mean(name, allowed)}"
        if any(word in name.lower() for word in SECRET_KEY_WORDS):
            message += "; secrets never go into gym.toml: name the environment variable that holds them"
        elif allowed:
            message += f"; allowed keys: {', '.join(allowed)}"
        return message
    if kind == "literal_error":
        names = _expected_names(str(ctx.get("expected", "")))
        if is_key:
            return f"unknown key {value!r}{did_you_mean(str(value), names)}; expected one of {ctx.get('expected')}"
        return f"expected one of {ctx.get('expected')}, got {got}{did_you_mean(str(value), names)}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        symbol = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[
            kind
        ]
        bound = next(iter(ctx.values()))
        bound = f"{bound:g}" if isinstance(bound, float) else bound
        return f"expected a number {symbol} {bound}, got {got}"
    if kind in ("int_type", "int_parsing"):
        return f"expected an integer, got {got}{_number_hint(value)}"
    if kind == "int_from_float":
        return f"expected an integer, got {got}"
    if kind in ("float_type", "float_parsing"):
        return f"expected a number, got {got}{_number_hint(value)}"
    if kind in ("bool_type", "bool_parsing"):
        hint = " (write true or false without quotes)" if str(value).lower() in ("true", "false") else ""
        return f"expected true or false, got {got}{hint}"
    if kind == "string_type":
        return f"expected a string, got {got} (put text in quotes)"
    if kind == "list_type":
        return f'expected an array such as ["a", "b"], got {got}'
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"expected a table, got {got}"
    if kind == "too_short":
        return f"expected at least {ctx.get('min_length', 1)} item(s), got {got}"
    if kind == "too_long":
        return f"expected at most {ctx.get('max_length')} item(s)"
    if kind == "string_too_short":
        return f"expected a non-empty string, got {got}"
    if kind == "finite_number":
        return f"expected a finite number, got {got}"
    message = str(error.get("msg", "invalid value"))
    return message.removeprefix("Value error, ")
