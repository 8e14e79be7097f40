"""Look up the schema by dotted path: which keys a table allows, which type a key expects.

Used for "did you mean" on unknown keys and to parse command-line flag values into the type of the
key they override.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Union

from pydantic import BaseModel

Path = tuple[str | int, ...]


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """Pydantic models reachable through Optional/list/dict wrappers of an annotation."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found.extend(_models_in(arg))
    return found


def model_at(root: type[BaseModel], path: Path) -> type[BaseModel] | None:
    """The section model whose keys live at ``path`` (list indices skipped), or None."""
    model: type[BaseModel] | None = root
    for part in path:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        models = _models_in(field.annotation)
        model = models[0] if models else None
    return model


def annotation_at(root: type[BaseModel], path: Path) -> Any:
    """The type annotation of the key at ``path``, or None when the path is not in the schema."""
    if not path:
        return root
    parent = model_at(root, path[:-1])
    if parent is None or not isinstance(path[-1], str):
        return None
    field = parent.model_fields.get(path[-1])
    return field.annotation if field is not None else None


def accepts_only_strings(annotation: Any) -> bool:
    """True when every non-None form of the annotation is a string (str or a Literal of strings)."""
    origin = typing.get_origin(annotation)
    if annotation is str:
        return True
    if origin is Literal:
        return all(isinstance(arg, str) for arg in typing.get_args(annotation))
    if origin in (Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return bool(args) and all(accepts_only_strings(arg) for arg in args)
    if origin is typing.Annotated:
        return accepts_only_strings(typing.get_args(annotation)[0])
    return False


def is_list_of_strings(annotation: Any) -> bool:
    """True when the annotation is a list whose items are strings."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return any(is_list_of_strings(arg) for arg in typing.get_args(annotation))
    return typing.get_origin(annotation) is list and accepts_only_strings(typing.get_args(annotation)[0])
