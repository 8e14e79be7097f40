"""The experience library: numbered natural-language experiences, the operations that change it, and its files.

Training-free GRPO (arXiv 2510.08191) learns nothing but this list. It lives in
``<experience_lib_path>/step_NNNN.json`` (one per step, never rewritten) and ``latest.json`` (a copy of
the newest step). Every file is written to a temporary name, fsynced and renamed into place, so a
crash leaves either the previous file or the new one, never half of one; ``latest.json`` is written
last, so it always names a step whose own file is complete. Each file also records the model the
library was learned for and where in the data the run stood, which is what resume reads.

The consolidation rules are enforced here, in code, whatever the learner LLM answered: a DELETE of an
id wins over every UPDATE of it, several UPDATEs of one id become one, duplicate ADDs become one, and
operations on ids that do not exist (or that no group proposed to touch) are dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from gym.files import atomic_write_text

FORMAT = "gym.experiences/1"
LATEST = "latest.json"
STEP_FILE = re.compile(r"^step_(\d{4,})\.json$")
OPERATIONS = ("ADD", "UPDATE", "DELETE", "NONE")
OperationKind = Literal["ADD", "UPDATE", "DELETE", "NONE"]


@dataclass(frozen=True)
class Operation:
    """One proposed change: ADD ``text``, UPDATE experience ``id`` to ``text``, DELETE ``id``, or NONE."""

    kind: OperationKind
    id: int | None = None
    text: str = ""

    @classmethod
    def parse(cls, value: Any) -> Operation:
        """An operation from the learner's JSON; ValueError (one sentence) when it is not one."""
        if not isinstance(value, dict):
            raise ValueError(f"an operation must be an object, got {type(value).__name__}")
        kind = str(value.get("operation", value.get("op", ""))).strip().upper()
        if kind not in OPERATIONS:
            raise ValueError(f"unknown operation {kind!r}; expected one of {', '.join(OPERATIONS)}")
        raw_id = value.get("id")
        ident = None
        if raw_id is not None and str(raw_id).strip().lstrip("[").rstrip("]").isdigit():
            ident = int(str(raw_id).strip().lstrip("[").rstrip("]"))
        text = " ".join(str(value.get("content") or value.get("text") or "").split())
        if kind in ("UPDATE", "DELETE") and ident is None:
            raise ValueError(f"{kind} needs the id of an existing experience")
        if kind in ("ADD", "UPDATE") and not text:
            raise ValueError(f"{kind} needs the experience text in 'content'")
        return cls(kind, ident if kind in ("UPDATE", "DELETE") else None, text if kind != "DELETE" else "")

    def as_json(self) -> dict[str, Any]:
        return {"operation": self.kind, "id": self.id, "content": self.text}


def same_text(a: str, b: str) -> bool:
    """Two experiences are duplicates when they differ only in case, spacing or a final full stop."""

    def key(text: str) -> str:
        return " ".join(text.split()).casefold().rstrip(".")

    return key(a) == key(b)


def enforce_rules(merged: list[Operation], proposed: list[Operation], size: int) -> list[Operation]:
    """The operations to apply: ``merged`` (the consolidation reply) held to the rules by ``proposed``.

    Only ids 1..``size`` that some group proposed to UPDATE or DELETE may be touched; an id any group
    proposed to DELETE is deleted; of several UPDATEs of one id the last is kept (the consolidation
    call was asked to merge them into one); ADDs equal to each other or to an UPDATE are dropped.
    """
    touched = {op.id for op in proposed if op.kind in ("UPDATE", "DELETE")}
    deleted = {op.id for op in proposed if op.kind == "DELETE"}
    deleted |= {op.id for op in merged if op.kind == "DELETE" and op.id in touched}
    updates: dict[int, Operation] = {}
    adds: list[Operation] = []
    for op in merged:
        if op.kind == "UPDATE" and op.id in touched and op.id not in deleted and 1 <= op.id <= size:
            updates[op.id] = op
        elif op.kind == "ADD" and not any(same_text(op.text, seen.text) for seen in adds):
            adds.append(op)
    adds = [op for op in adds if not any(same_text(op.text, u.text) for u in updates.values())]
    deletes = [Operation("DELETE", i) for i in sorted(i for i in deleted if i is not None and 1 <= i <= size)]
    return deletes + [updates[i] for i in sorted(updates)] + adds


@dataclass
class Library:
    """The experiences (``experiences[i]`` has id ``i + 1``) and where the run that learned them stood."""

    experiences: list[str] = field(default_factory=list)
    step: int = 0
    epoch: int = 0  # position of the next batch to learn from: epoch and batch index within it
    batch: int = 0
    model: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)  # this step's counters
    totals: dict[str, Any] = field(default_factory=dict)  # counters of the whole run so far

    def enumerated(self) -> str:
        """``[1]. text`` lines, the form every prompt shows; ``(none yet)`` for an empty library."""
        return "\n".join(f"[{i}]. {text}" for i, text in enumerate(self.experiences, 1)) or "(none yet)"

    def apply(self, operations: list[Operation]) -> Library:
        """A new library with ``operations`` (already held to :func:`enforce_rules`) applied, ids renumbered."""
        deleted = {op.id for op in operations if op.kind == "DELETE"}
        updated = {op.id: op.text for op in operations if op.kind == "UPDATE"}
        kept = [updated.get(i, text) for i, text in enumerate(self.experiences, 1) if i not in deleted]
        for op in operations:
            if op.kind == "ADD" and not any(same_text(op.text, text) for text in kept):
                kept.append(op.text)
        return Library(kept, self.step, self.epoch, self.batch, self.model, {}, dict(self.totals))

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["experiences"] = [{"id": i, "text": t} for i, t in enumerate(self.experiences, 1)]
        return {"format": FORMAT, **data}

    @classmethod
    def from_json(cls, data: Any) -> Library:
        """A library from its JSON; a bare list of strings (hand-written) is accepted too."""
        if isinstance(data, list):
            data = {"experiences": data}
        if not isinstance(data, dict) or not isinstance(data.get("experiences"), list):
            raise ValueError("an experience library is a JSON object with an 'experiences' list")
        texts = [e["text"] if isinstance(e, dict) else e for e in data["experiences"]]
        if not all(isinstance(t, str) for t in texts):
            raise ValueError("every experience must be a string (or an object with a 'text' string)")
        fields = {k: data[k] for k in ("step", "epoch", "batch", "model", "stats", "totals") if k in data}
        return cls(experiences=list(texts), **fields)


def atomic_write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON so that ``path`` is always either the old file or the whole new one."""
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def step_path(folder: Path, step: int) -> Path:
    return folder / f"step_{step:04d}.json"


def save_step(folder: Path, library: Library) -> Path:
    """Write ``step_NNNN.json`` for ``library.step``, then ``latest.json``; returns the step file."""
    path = step_path(folder, library.step)
    data = library.as_json()
    atomic_write_json(path, data)
    atomic_write_json(folder / LATEST, data)
    return path


def load_library(path: str | Path) -> Library:
    """A library file, or a library folder's ``latest.json``; ValueError naming the file when unreadable."""
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / LATEST
    try:
        return Library.from_json(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise ValueError(f"no experience library at {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path} is not an experience library: {error}") from None


def resume_library(folder: Path) -> Library | None:
    """The library to continue from: the newest readable step file, else ``latest.json``, else None.

    Step files come first because a run killed between writing ``step_N`` and ``latest.json`` leaves
    the newer state only in the step file (both writes are atomic, so neither is ever partial).
    """
    candidates: list[Path] = []
    if folder.is_dir():
        steps = sorted((int(m[1]), p) for p in folder.iterdir() if (m := STEP_FILE.match(p.name)))
        candidates += [p for _, p in reversed(steps)]
    candidates += [folder / LATEST] if (folder / LATEST).is_file() else []
    for candidate in candidates:
        try:
            return load_library(candidate)
        except ValueError:
            continue
    return None
