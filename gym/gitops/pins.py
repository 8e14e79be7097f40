"""Pinned inputs: the Hub revisions of the base model and datasets a gym.toml trains on, and when they move.

A Hub id with ``revision = "main"`` (the default) trains on whatever its owner pushed last: the same
commit of gym.toml can give another model tomorrow. `gym pin` writes the commit each input is at now into
gym.toml (``model.revision``, ``datasets[].revision``), editing only those values (tomlkit keeps comments
and layout); `gym validate` notes every Hub input that is not pinned to a commit; `gym outdated` compares
the pins with what the Hub serves now (and the lm-eval that scored the last run with the one installed),
and with ``--write`` bumps them, which is what the scheduled workflow's pull request contains.

Hub lookups go through :class:`huggingface_hub.HfApi` (``model_info`` / ``dataset_info`` with a
``revision``), with the token in ``hub.token_env`` when it is set (gated and private inputs need it).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym.config import GymConfig

COMMIT = re.compile(r"[0-9a-f]{40}")


class PinError(RuntimeError):
    """One sentence: which input could not be looked up or which file not written, and what to do."""


@dataclass(frozen=True)
class Input:
    """A Hub input of the config: its gym.toml key, repository, kind and the revision it names."""

    key: str  # "model.revision" or "datasets.N.revision"
    repo: str
    kind: str  # "model" | "dataset"
    revision: str | None

    @property
    def pinned(self) -> bool:
        return bool(self.revision and COMMIT.fullmatch(self.revision))


@dataclass(frozen=True)
class Move:
    """An input whose revision differs from the Hub's: ``old`` in gym.toml, ``new`` on the Hub."""

    input: Input
    new: str

    def line(self) -> str:
        old = self.input.revision or "main"
        return (
            f"{self.input.key}  {self.input.repo}  {old[:12] if self.input.pinned else old} → {self.new[:12]}"
        )


def hub_inputs(config: GymConfig) -> list[Input]:
    """The Hub model and datasets ``config`` reads (builtin models, folders and local files are not)."""
    from gym.hub.card import _hub_id

    found = []
    model = config.model.name_or_path
    if _hub_id(model):
        found.append(Input("model.revision", model, "model", config.model.revision))
    for index, dataset in enumerate(config.datasets):
        if dataset.hub:
            found.append(Input(f"datasets.{index}.revision", dataset.hub, "dataset", dataset.revision))
    return found


def unpinned_notes(config: GymConfig) -> list[str]:
    """`gym validate`'s note for each Hub input not pinned to a commit."""
    return [
        f"{item.key}: {item.repo} is not pinned (revision {item.revision or 'main'!r} moves when its owner pushes); "
        "`gym pin` writes the commit it is at now"
        for item in hub_inputs(config)
        if not item.pinned
    ]


def hub_commit(item: Input, token: str | None, revision: str | None = None) -> str:
    """The commit ``item``'s repository is at on the Hub, at ``revision`` (default: what the input names)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    from gym.gitops.hub_errors import how

    api = HfApi(token=token or None)
    wanted = revision or item.revision or "main"
    try:
        info = (api.model_info if item.kind == "model" else api.dataset_info)(item.repo, revision=wanted)
    except RevisionNotFoundError:
        raise PinError(
            f"{item.key}: {item.repo} has no revision {wanted!r} on the Hub; fix {item.key}"
        ) from None
    except RepositoryNotFoundError:
        raise PinError(
            f"{item.key}: the {item.kind} {item.repo} does not exist on the Hub or needs a token; check its name or "
            "set the token (hub.token_env)"
        ) from None
    except Exception as error:  # noqa: BLE001 - one sentence, never the token
        raise PinError(
            f"{item.key}: cannot look up {item.repo} on the Hub ({how(error)}); retry later"
        ) from None
    if not isinstance(info.sha, str) or not COMMIT.fullmatch(info.sha):
        raise PinError(f"{item.key}: the Hub did not say which commit {item.repo} is at; retry later")
    return info.sha


def token_for(config: GymConfig) -> str | None:
    return os.environ.get(config.hub.token_env if config.hub else "HF_TOKEN") or None


def pins(config: GymConfig) -> list[Move]:
    """`gym pin`: the commit each unpinned input's revision (branch or tag) is at now."""
    token = token_for(config)
    moves = []
    for item in hub_inputs(config):
        if not item.pinned:
            moves.append(Move(item, hub_commit(item, token)))
    return moves


def outdated(config: GymConfig, token: str | None = None) -> tuple[list[Move], list[Input]]:
    """`gym outdated`: (pinned inputs whose repository's main moved since, inputs not pinned at all)."""
    token = token or token_for(config)
    moves, loose = [], []
    for item in hub_inputs(config):
        if not item.pinned:
            loose.append(item)
            continue
        latest = hub_commit(item, token, revision="main")
        if latest != item.revision:
            moves.append(Move(item, latest))
    return moves, loose


def lm_eval_note(config: GymConfig) -> str | None:
    """A line when the lm-eval installed is not the one that scored the last run (its scores may move)."""
    from importlib.metadata import PackageNotFoundError, version

    from gym.eval.report import RESULTS_FILE, EvalReport

    path = config.output_path / RESULTS_FILE
    if not config.eval.tasks or not path.is_file():
        return None
    try:
        scored = EvalReport.read(path).lm_eval_version
        installed = version("lm_eval")
    except (ValueError, PackageNotFoundError):
        return None
    if not scored or scored == installed:
        return None
    return f"lm-eval {scored} scored the last run, {installed} is installed: its task versions may score differently"


def write_moves(path: Path, moves: list[Move]) -> str:
    """Write each move's revision into gym.toml at ``path`` (layout and comments kept); the new text."""
    import tomlkit

    try:
        document: Any = tomlkit.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise PinError(f"cannot read {path} ({type(error).__name__}); nothing was written") from None
    for move in moves:
        parts = move.input.key.split(".")
        try:
            table = document["model"] if parts[0] == "model" else document["datasets"][int(parts[1])]
        except (KeyError, IndexError, TypeError):
            raise PinError(
                f"{path}: cannot find the table of {move.input.key} to write the pin into (is {move.input.repo} "
                "given by a flag?); set it by hand, nothing was written"
            ) from None
        table["revision"] = move.new
    text = tomlkit.dumps(document)
    path.write_text(text, encoding="utf-8")
    return text
