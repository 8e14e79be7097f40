"""Reading a training YAML that may be hostile: bounded in bytes, in nodes after alias expansion, and
never from a FIFO or device (which would block ``gym init --from`` forever).

A 455-byte YAML of nested aliases ("billion laughs") stands for billions of values. PyYAML shares the
node of an anchor between its aliases, so composing it is cheap; what explodes is every walk over the
result afterwards. :class:`BoundedLoader` counts the values the document stands for, aliases expanded,
once it is composed and before anything is constructed, and refuses it past :data:`MAX_VALUES`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 1_000_000  # a training YAML is a few kilobytes
MAX_VALUES = 200_000  # scalars, lists and mappings, aliases expanded
SELF_REFERENCE = "an alias refers to the value that contains it; a training config has no cycles"


class TooLarge(ValueError):
    """The document stands for more values than :data:`MAX_VALUES` (or refers to itself); the sentence."""


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a document whose aliases expand past :data:`MAX_VALUES` values."""

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            expanded_size(node, MAX_VALUES)
        return node


def expanded_size(root: yaml.Node, limit: int) -> int:
    """How many values ``root`` stands for with every alias expanded, computed without expanding
    (each shared node is sized once); :class:`TooLarge` past ``limit`` or on a node inside itself."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_nodes: set[int] = set()
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = _children(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            if sizes[key] > limit:
                raise TooLarge(
                    f"its aliases expand to more than {limit:,} values; a training config has a few dozen"
                )
            continue
        if key in open_nodes:
            raise TooLarge(SELF_REFERENCE)
        open_nodes.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                raise TooLarge(SELF_REFERENCE)
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def read_bounded(
    path: Path, limit: int = MAX_BYTES, what: str = "a training YAML", kind: str = "a YAML file"
) -> str:
    """The text of ``path``: a regular file of at most ``limit`` bytes, opened without blocking.

    Raises OSError or ValueError (unreadable, not a regular file, too large; UnicodeDecodeError when it is
    not UTF-8) with a user-facing reason as its first argument, naming the file as ``kind`` and saying
    ``what`` is read up to ``limit``. Also reads DeepSpeed configs and eval_results.json.
    """
    cap = f"{limit / 1_000_000:g} MB"
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO opens at once, unread
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ValueError(f"is a folder, not {kind}")
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"is not a regular file (a pipe, socket or device); give the path of {kind}")
        if info.st_size > limit:
            raise ValueError(f"is {info.st_size:,} bytes; {what} is read only up to {cap}")
        with os.fdopen(fd, "rb", closefd=False) as stream:
            data = stream.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # grew since it was looked at
        raise ValueError(f"is more than {cap}; {what} is read only up to {cap}")
    return data.decode("utf-8")
