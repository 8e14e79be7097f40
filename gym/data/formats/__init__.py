"""Row-format converters, one per gym.toml ``format``, in a plain dict filled by :func:`register_format`.

A converter takes one raw row (a dict from `datasets`) and the dataset's :class:`Context`, and returns
an :class:`~gym.data.example.Example` or raises :class:`~gym.data.report.BadRow`. It never drops a row
itself: the loader decides what to do with bad rows and reports them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gym.data.example import Example
from gym.data.formats.alpaca import convert_alpaca
from gym.data.formats.base import Context
from gym.data.formats.chat import convert_openai, convert_sharegpt
from gym.data.formats.pairwise import convert_kto, convert_preference
from gym.data.formats.plain import convert_prompt, convert_text

Converter = Callable[[dict[str, Any], Context], Example]

FORMATS: dict[str, Converter] = {}


def register_format(name: str, converter: Converter) -> None:
    """Add (or replace) the converter used for ``format = name``."""
    FORMATS[name] = converter


def get_converter(name: str) -> Converter:
    """The converter for a format name; a KeyError lists the registered names."""
    try:
        return FORMATS[name]
    except KeyError:
        raise KeyError(f"unknown dataset format {name!r}; registered: {', '.join(sorted(FORMATS))}") from None


for _name, _converter in (
    ("alpaca", convert_alpaca),
    ("sharegpt", convert_sharegpt),
    ("openai", convert_openai),
    ("preference", convert_preference),
    ("kto", convert_kto),
    ("text", convert_text),
    ("prompt", convert_prompt),
):
    register_format(_name, _converter)

__all__ = ["FORMATS", "Context", "Converter", "get_converter", "register_format"]
