"""The one gym.toml the web UI edits: read it, validate text the way `gym validate` does, save it.

No Gradio here. Validation is :func:`gym.config.loader.parse_toml` + :func:`build_config`, the
functions behind every command, so the UI shows the same ``file:line:col: key: message`` lines. Edits
from the form go through tomlkit, so comments and key order survive; saving refuses to overwrite a file
that could not be read or that changed on disk since it was opened, so nothing typed elsewhere is lost.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomlkit

from gym.files import atomic_write_text

if TYPE_CHECKING:
    from gym.config import GymConfig

# (label, dotted key) of the form fields; "datasets.0.path" is the first [[datasets]] table's key.
FORM_KEYS: list[tuple[str, str]] = [
    ("Model", "model.name_or_path"),
    ("Chat template", "model.template"),
    ("Dataset path", "datasets.0.path"),
    ("Dataset format", "datasets.0.format"),
    ("Method", "train.method"),
    ("Adapter", "train.adapter"),
    ("Learning rate", "train.learning_rate"),
    ("Epochs", "train.epochs"),
    ("Max steps (0: epochs)", "train.max_steps"),
    ("Batch size", "train.batch_size"),
    ("Max length", "train.max_length"),
    ("LoRA rank", "train.lora.r"),
    ("Eval tasks (comma separated)", "eval.tasks"),
    ("Accelerators (comma separated)", "compute.accelerators"),
    ("Hub repo id", "hub.repo_id"),
    ("Space repo id", "space.repo_id"),
]
LIST_KEYS = {"eval.tasks", "compute.accelerators"}


@dataclass
class Validation:
    """The outcome of validating editor text: every problem line, or the config it describes."""

    problems: list[str] = field(default_factory=list)
    config: GymConfig | None = None

    @property
    def ok(self) -> bool:
        return self.config is not None and not self.problems

    def markdown(self) -> str:
        if self.ok:
            return "✓ valid — the same check as `gym validate`"
        lines = "\n".join(self.problems)
        count = len(self.problems)
        return f"✗ {count} problem{'s' if count != 1 else ''} found\n\n```\n{lines}\n```"


class Workspace:
    """The gym.toml at ``path`` as the UI holds it: the text read from disk (None when unreadable)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).resolve()
        self.loaded_text: str | None = None
        self.load_error: str | None = None
        self.reload()

    @property
    def display(self) -> str:
        try:
            relative = os.path.relpath(self.path)
        except ValueError:
            return str(self.path)
        return str(self.path) if relative.startswith("..") else relative

    def reload(self) -> str:
        """Read the file again; the text (empty when it cannot be read, with ``load_error`` set)."""
        from gym.config.errors import ConfigError
        from gym.config.loader import read_toml

        self.load_error = None
        if not self.path.exists():
            self.loaded_text = ""  # a new file: saving creates it
            return ""
        try:
            self.loaded_text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            self.loaded_text = None
            try:
                read_toml(self.path)  # the loader's own sentence for why the file cannot be read
            except ConfigError as error:
                self.load_error = str(error)
            if self.load_error is None:
                self.load_error = f"{self.display}: cannot be read"
            return ""
        return self.loaded_text

    def editor_text(self) -> str:
        """What the editor opens with: the file, or `gym init`'s starter when there is no file yet."""
        if self.loaded_text == "" and not self.path.exists():
            import re

            from gym.config.starter import starter_toml

            name = re.sub(r"[^a-z0-9]+", "-", self.path.parent.name.lower()).strip("-")[:64] or "my-model"
            return starter_toml(name=name)
        return self.loaded_text or ""

    def unsaved(self, text: str) -> bool:
        """Whether the editor's ``text`` differs from the file (gr.Code trims outer whitespace; so does this)."""
        return self.loaded_text is None or text.strip() != self.loaded_text.strip()

    def validate(self, text: str) -> Validation:
        from gym.config.errors import ConfigError
        from gym.config.loader import build_config, parse_toml

        try:
            data, positions, source = parse_toml(text, self.display)
            config = build_config(data, source=source, positions=positions, config_path=self.path)
        except ConfigError as error:
            return Validation([str(issue) for issue in error.issues])
        outside = self._output_outside(config, positions, source)
        return Validation([outside], config) if outside else Validation(config=config)

    def _output_outside(self, config: GymConfig, positions: Any, source: str) -> str | None:
        """The problem line when the run would write outside this gym.toml's folder (a browser user edits
        the file: its output stays beside it unless ``project.allow_output_outside``)."""
        from gym.config.errors import ConfigIssue

        folder = self.path.resolve().parent
        if config.project.allow_output_outside or config.output_path.is_relative_to(folder):
            return None
        line, column = positions.find(("project", "output_dir"))
        return str(ConfigIssue(source, "project.output_dir", (
            f"{config.project.output_dir!r} is outside the folder of this gym.toml; the web UI "
            "writes only inside it (set project.allow_output_outside = true to allow it)"), line, column))  # fmt: skip

    def config(self) -> GymConfig:
        """The saved file's config (raises ConfigError): what `gym train` would run now."""
        from gym.config import config_from_args

        return config_from_args(self.path)

    def save(self, text: str) -> str:
        """Write ``text`` (only when it validates, and only over the version this UI read)."""
        if self.loaded_text is None:
            raise SaveError(
                f"not saved: {self.load_error or self.display + ' could not be read'}; "
                "fix the file's permissions or encoding and press Reload, so nothing in it is overwritten"
            )
        on_disk = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
        if on_disk != self.loaded_text:
            raise SaveError(
                f"not saved: {self.display} changed on disk since it was opened; "
                "press Reload to see it (your edits are still in the editor; copy them first)"
            )
        validation = self.validate(text)
        if not validation.ok:
            raise SaveError(f"not saved: {len(validation.problems)} problem(s); fix them first")
        if not self.unsaved(text) and self.path.exists():
            return f"saved {self.display} (no changes)"
        text = text.strip() + "\n"
        atomic_write_text(self.path, text)
        self.loaded_text = text
        return f"saved {self.display}"

    def diff(self, text: str) -> str:
        before = (self.loaded_text or "").strip().splitlines(keepends=True)
        lines = difflib.unified_diff(before, text.strip().splitlines(keepends=True), self.display + " (saved)",
                                     self.display + " (editor)")  # fmt: skip
        return "".join(lines) or "no changes"

    def command_line(self, text: str, command: str = "train") -> str:
        """The CLI line for the editor's content: `gym train FILE`, unsaved changes as override flags."""
        base = f"gym {command} {self.display}"
        try:
            saved = tomlkit.parse(self.loaded_text or "").unwrap()
            edited = tomlkit.parse(text).unwrap()
        except Exception:  # noqa: BLE001 - a syntax error: the validation panel says where
            return base
        flags = []
        for key, value in _changed(saved, edited):
            if value is None:
                return base + "   # unsaved changes remove keys: press Save, then run this"
            flags.append(_flag(key, value))
        return " ".join([base, *flags])


class SaveError(Exception):
    """Saving was refused; the message says why and what to do."""


def _flag(key: str, value: Any) -> str:
    """``--key=value`` quoted for a shell; text as typed (flags read strings verbatim), else a TOML literal."""
    import shlex

    text = value if isinstance(value, str) else tomlkit.item(value).as_string()
    return shlex.quote(f"--{key}={text}")


def _changed(before: Any, after: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, new value) of every leaf that differs; None for a removed key."""
    if isinstance(after, dict) and before is None:  # a new table: each of its keys is a flag
        before = {}
    if isinstance(before, dict) and isinstance(after, dict):
        changes = []
        for key in [*after, *(k for k in before if k not in after)]:
            changes += _changed(before.get(key), after.get(key), f"{prefix}{key}.")
        return changes
    same_tables = isinstance(before, list) and isinstance(after, list) and len(before) == len(after)
    if same_tables and all(isinstance(item, dict) for item in [*before, *after]):
        changes = []
        for index, (old, new) in enumerate(zip(before, after, strict=True)):
            changes += _changed(old, new, f"{prefix}{index}.")
        return changes
    if before == after:
        return []
    return [(prefix.rstrip("."), after)]


def form_values(text: str) -> list[Any]:
    """The value of each :data:`FORM_KEYS` key in ``text`` ('' when unset or unparsable)."""
    try:
        data = tomlkit.parse(text).unwrap()
    except Exception:  # noqa: BLE001
        return ["" for _ in FORM_KEYS]
    values = []
    for _, key in FORM_KEYS:
        node: Any = data
        for part in key.split("."):
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif isinstance(node, dict) and part in node:
                node = node[part]
            else:
                node = ""
                break
        values.append(", ".join(map(str, node)) if isinstance(node, list) else node)
    return values


def _typed(key: str, value: Any) -> Any:
    if key in LIST_KEYS:
        return [part.strip() for part in str(value).split(",") if part.strip()]
    if isinstance(value, float) and value.is_integer() and key.split(".")[-1] in (
        "max_steps", "batch_size", "max_length", "r",
    ):  # fmt: skip
        return int(value)
    return value


def apply_form(text: str, key: str, value: Any) -> str:
    """``text`` with ``key`` set to ``value`` (removed when blank), comments and order kept."""
    document = tomlkit.parse(text)
    parts = key.split(".")
    blank = value is None or (isinstance(value, str) and not value.strip())
    node: Any = document
    chain: list[tuple[Any, str | int]] = []  # (container, key) down to the table holding the key
    for part in parts[:-1]:
        if part.isdigit():
            index = int(part)
            if not isinstance(node, list) or index >= len(node):
                if blank:
                    return text
                raise SaveError(f"{key}: there is no [[{parts[0]}]] table {index}; add one in the editor")
            chain.append((node, index))
            node = node[index]
            continue
        if part not in node:
            if blank:
                return text
            node.add(part, tomlkit.table())
        chain.append((node, part))
        node = node[part]
    last = parts[-1]
    if not blank:
        node[last] = _typed(key, value)
        return tomlkit.dumps(document)
    if last in node:
        del node[last]
    for container, name in reversed(chain):  # a table left empty goes too ([hub] without repo_id is invalid)
        if isinstance(name, int) or len(container[name]) > 0:
            break
        del container[name]
    return tomlkit.dumps(document)
