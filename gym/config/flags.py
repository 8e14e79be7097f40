"""Command-line flags onto gym.toml keys, including the seed's LLaMA-Factory-style aliases.

``--learning_rate 1e-4``, ``--train.learning_rate=1e-4`` and ``--set train.learning_rate=1e-4`` all
override ``train.learning_rate``. Values are read as TOML literals (``3``, ``1e-4``, ``true``,
``["a", "b"]``) unless the key takes only text, so ``--template 123`` stays a string.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import tomlkit

from gym.config.errors import ConfigError
from gym.config.fields import accepts_only_strings, annotation_at, is_list_of_strings
from gym.config.llamafactory import ALIASES, BOOLEAN, CONVERTED, DPO_LOSSES, IGNORED
from gym.config.loader import COMMAND_LINE, Override
from gym.config.root import GymConfig
from gym.config.suggest import did_you_mean

KeyPath = tuple[str | int, ...]

ADAPTERS = ("lora", "qlora", "dora", "full", "freeze")
METHODS = ("sft", "pt", "dpo", "kto", "rm", "ppo", "grpo")
QUANTIZATION_BITS = {"4": "bnb-4bit", "8": "bnb-8bit"}
SPECIAL = (*CONVERTED, "set")


def parse_value(text: str, annotation: Any) -> Any:
    """A flag's text as the type its key expects."""
    if accepts_only_strings(annotation):
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":  # a quoted TOML string
            try:
                return tomlkit.parse(f"v = {text}").unwrap()["v"]
            except Exception:  # not valid TOML after all: keep it as typed
                return text
        return text
    if is_list_of_strings(annotation) and not text.startswith("["):
        return [part.strip() for part in text.split(",") if part.strip()]
    try:
        return tomlkit.parse(f"v = {text}").unwrap()["v"]
    except Exception:  # not a TOML literal: keep the text, validation says what was expected
        return text


def _dotted(name: str) -> KeyPath:
    return tuple(int(p) if p.isdigit() else p for p in name.split("."))


def _is_true(value: str) -> bool:
    return parse_value(value, bool) is True


def is_boolean_flag(name: str) -> bool:
    """True for options that may be given bare (``--bf16``, ``--train.packing``)."""
    if name in BOOLEAN:
        return True
    path = ALIASES.get(name) or (_dotted(name) if "." in name else None)
    return path is not None and annotation_at(GymConfig, tuple(p for p in path if p != "*")) is bool


class _Parser:
    def __init__(self, dataset_dir: str | None) -> None:
        self.overrides: list[Override] = []
        self.dataset_names: list[tuple[str, str]] = []
        self.dataset_dir = dataset_dir
        self.errors: list[str] = []
        self.notes: list[str] = []
        self.unknown: list[tuple[str, str]] = []  # (name, error message)
        self.handlers: dict[str, Callable[[str, str], None]] = {
            "finetuning_type": self.finetuning_type,
            "quantization_bit": self.quantization_bit,
            "use_dora": self.use_dora,
            "bf16": lambda value, flag: self.when_true(value, flag, ("model", "dtype"), "bfloat16"),
            "pure_bf16": lambda value, flag: self.when_true(value, flag, ("model", "dtype"), "bfloat16"),
            "fp16": lambda value, flag: self.when_true(value, flag, ("model", "dtype"), "float16"),
            "overwrite_output_dir": lambda value, flag: self.when_true(
                value, flag, ("train", "resume"), "never"
            ),
            "neat_packing": lambda value, flag: self.when_true(value, flag, ("train", "packing"), True),
            "pref_loss": self.pref_loss,
            "dataset": lambda value, flag: self.dataset_names.append((value, flag)),
            "dataset_dir": self.set_dataset_dir,
            "set": self.set_key,
        }

    def when_true(self, value: str, flag: str, path: KeyPath, target: Any) -> None:
        if _is_true(value):
            self.add(path, target, flag)

    def pref_loss(self, value: str, flag: str) -> None:
        if value not in DPO_LOSSES:
            self.errors.append(
                f"{flag}: Gym trains the preference losses {', '.join(DPO_LOSSES)}, got {value!r}"
            )
            return
        self.add(("train", "dpo", "loss_type"), DPO_LOSSES[value], flag)

    def add(self, path: KeyPath, text: str | Any, flag: str) -> None:
        value = (
            parse_value(text, annotation_at(GymConfig, tuple(p for p in path if p != "*")))
            if isinstance(text, str)
            else text
        )
        if path[-1] == "target_modules" and value in ("all", ["all"]):
            value = "all-linear"
        if path[-1] == "report_to" and value in ("none", ["none"]):
            value = []
        self.overrides.append(Override(path, value, flag))

    def finetuning_type(self, value: str, flag: str) -> None:
        if value in METHODS:  # the seed's `--finetuning_type grpo`
            self.add(("train", "method"), value, flag)
        else:
            self.add(("train", "adapter"), value, flag)

    def quantization_bit(self, value: str, flag: str) -> None:
        if value not in QUANTIZATION_BITS:
            self.errors.append(f"{flag}: expected 4 or 8, got {value!r}")
            return
        self.add(("model", "quantization"), QUANTIZATION_BITS[value], flag)
        self.add(("train", "adapter"), "qlora" if value == "4" else "lora", flag)

    def use_dora(self, value: str, flag: str) -> None:
        if _is_true(value):
            self.add(("train", "adapter"), "dora", flag)

    def set_dataset_dir(self, value: str, flag: str) -> None:
        self.dataset_dir = value

    def set_key(self, value: str, flag: str) -> None:
        key, sep, text = value.partition("=")
        if not sep:
            self.errors.append(f"{flag}: expected KEY=VALUE such as train.learning_rate=1e-4, got {value!r}")
            return
        self.add(_dotted(key.strip()), text.strip(), flag)

    def flag(self, name: str, value: str, flag: str) -> None:
        if name in self.handlers:
            self.handlers[name](value, flag)
        elif name in ALIASES:
            self.add(ALIASES[name], value, flag)
        elif name in IGNORED:
            note = f"{flag}: ignored ({IGNORED[name]})"
            if note not in self.notes:
                self.notes.append(note)
        elif "." in name:
            self.add(_dotted(name), value, flag)
        else:
            known = [*ALIASES, *SPECIAL, *IGNORED]
            self.unknown.append((name, f"{flag}: unknown option{did_you_mean(name, known)}"))


def parse_flags(
    argv: Sequence[str],
    dataset_dir: str | None = None,
    notes: list[str] | None = None,
    unknown: list[str] | None = None,
) -> list[Override]:
    """Overrides for the flags in ``argv``; every unknown or malformed flag is reported at once.

    ``notes`` (when given) receives one line per LLaMA-Factory option that was ignored. With
    ``unknown`` given, unknown option names are collected there instead of being errors.
    """
    parser = _Parser(dataset_dir)
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if not token.startswith("--") or token == "--":
            hint = (
                "the gym.toml path goes first" if token.endswith(".toml") else "options look like --key value"
            )
            parser.errors.append(f"{token}: unexpected argument ({hint})")
            continue
        name, sep, value = token[2:].partition("=")
        name = name.replace("-", "_") if "." not in name else name
        if not sep:
            next_is_value = index < len(argv) and not argv[index].startswith("--")
            if is_boolean_flag(name) and not (next_is_value and argv[index].lower() in ("true", "false")):
                value = "true"
            elif next_is_value:
                value = argv[index]
                index += 1
            else:
                parser.errors.append(f"--{name}: expects a value")
                continue
        parser.flag(name, value, f"--{name}")
    if parser.dataset_names:
        datasets: list[dict[str, Any]] = []
        for value, flag in parser.dataset_names:
            for name in (part.strip() for part in value.split(",") if part.strip()):
                try:
                    datasets.append(resolve_dataset(name, parser.dataset_dir))
                except ValueError as error:
                    parser.errors.append(f"{flag}: {error}")
        parser.overrides.insert(0, Override(("datasets",), datasets, parser.dataset_names[0][1]))
    if notes is not None:
        notes.extend(parser.notes)
    if unknown is not None:
        unknown.extend(name for name, _ in parser.unknown)
    else:
        parser.errors.extend(message for _, message in parser.unknown)
    if parser.errors:
        raise (
            ConfigError.single(COMMAND_LINE, "; ".join(parser.errors))
            if len(parser.errors) == 1
            else ConfigError(
                [ConfigError.single(COMMAND_LINE, message).issues[0] for message in parser.errors]
            )
        )
    return parser.overrides


def _from_dataset_info(name: str, entry: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A LLaMA-Factory ``dataset_info.json`` entry as a gym.toml ``[[datasets]]`` table."""
    columns = dict(entry.get("columns") or {})
    if "kto_tag" in columns:
        columns["label"] = columns.pop("kto_tag")
    tags = {key.removesuffix("_tag"): value for key, value in (entry.get("tags") or {}).items()}
    if entry.get("ranking"):
        fmt = "preference"
    elif "label" in columns:
        fmt = "kto"
    elif entry.get("formatting", "alpaca") == "sharegpt":
        fmt = "openai" if tags.get("role") == "role" and tags.get("content") == "content" else "sharegpt"
    elif set(columns) == {"prompt"}:
        fmt, columns = "text", {"text": columns["prompt"]}
    else:
        fmt = "alpaca"
    table: dict[str, Any] = {"name": name, "format": fmt}
    if "file_name" in entry:
        table["path"] = str((folder / entry["file_name"]).resolve())
    elif "hf_hub_url" in entry:
        table["hub"] = entry["hf_hub_url"]
    else:
        raise ValueError(
            f"dataset {name!r} in {folder / 'dataset_info.json'} has neither file_name nor hf_hub_url"
        )
    for key, target in (("subset", "subset"), ("split", "split"), ("num_samples", "max_samples")):
        if key in entry:
            table[target] = entry[key]
    if columns:
        table["columns"] = columns
    if tags:
        table["tags"] = tags
    return table


def resolve_dataset(name: str, dataset_dir: str | None) -> dict[str, Any]:
    """``--dataset NAME``: an entry of ``<dataset_dir>/dataset_info.json``, else a local file or folder."""
    from gym.config.paths import cut, name_too_long

    folder = Path(dataset_dir or "data")
    info_file = folder / "dataset_info.json"
    try:  # the file system refuses a name over 255 bytes with OSError: one sentence instead
        is_info, path = info_file.is_file(), Path(name).expanduser()
        exists = path.exists()
    except OSError:
        problem = name_too_long(str(folder)) or name_too_long(name)
        raise ValueError(problem or f"{cut(name)!r} cannot be looked up as a file") from None
    if is_info:
        try:
            info = json.loads(info_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(f"{info_file} is not valid JSON ({error})") from None
        if name in info:
            return _from_dataset_info(name, info[name], folder)
    if exists:
        from gym.config.sniff import SniffError, sniff_format

        try:
            fmt = sniff_format(path)
        except SniffError as error:
            raise ValueError(str(error)) from None
        return {
            "name": re.sub(r"\W+", "-", path.stem).strip("-") or "dataset",
            "path": str(path.resolve()),
            "format": fmt,
        }
    where = f"{info_file}" if info_file.is_file() else f"{folder}/dataset_info.json (not found)"
    raise ValueError(f"{cut(name)!r} is neither a dataset in {where} nor an existing file or folder")
