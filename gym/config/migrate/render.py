"""A :class:`Conversion` as gym.toml text: each value commented with the key it came from."""

from __future__ import annotations

from typing import Any

import tomlkit

from gym.config.migrate.convert import Conversion, first_of

TOOL_NAMES = {"llamafactory": "LLaMA-Factory", "axolotl": "axolotl", "trl": "TRL"}
ORDER = ("project", "model", "datasets", "train", "eval", "compute", "hub", "space")


def _comment(origin: str | None, key: str) -> str | None:
    return None if origin is None or origin == key else f"from {origin}"


def _table(data: dict[str, Any], conversion: Conversion, path: tuple) -> Any:
    table = tomlkit.table()
    subtables = []
    for key, value in data.items():
        if isinstance(value, dict) and path and path[0] != "datasets":
            subtables.append((key, value))
            continue
        item = tomlkit.item(value)
        if isinstance(value, dict):
            item = tomlkit.inline_table()
            item.update(value)
        note = _comment(conversion.origins.get((*path, key)), key)
        if note:
            item.comment(note)
        table.add(key, item)
    for key, value in subtables:
        table.add(key, _table(value, conversion, (*path, key)))
    return table


def render(conversion: Conversion) -> str:
    document = tomlkit.document()
    tool = TOOL_NAMES[conversion.tool]
    document.add(
        tomlkit.comment(f"gym.toml converted from {conversion.source.name} ({tool}) by `gym init --from`.")
    )
    document.add(
        tomlkit.comment("Check it with `gym validate`; every key is documented in docs/gym-toml.md.")
    )
    for title, items in ((f"Not carried over from the {tool} file:", conversion.not_carried),
                         ("Ignored (no meaning in Gym):", conversion.ignored)):  # fmt: skip
        if not items:
            continue
        document.add(tomlkit.comment(""))
        document.add(tomlkit.comment(title))
        shown, more = first_of(items)
        for key, reason in shown:
            document.add(tomlkit.comment(f"  {key}: {reason}"))
        if more:
            document.add(tomlkit.comment(f"  {more}"))
    document.add(tomlkit.nl())
    for section in sorted(conversion.data, key=lambda name: ORDER.index(name) if name in ORDER else 99):
        value = conversion.data[section]
        if section == "datasets":
            array = tomlkit.aot()
            for index, dataset in enumerate(value):
                array.append(_table(dataset, conversion, ("datasets", index)))
            document.add("datasets", array)
        else:
            document.add(section, _table(value, conversion, (section,)))
    return tomlkit.dumps(document)
