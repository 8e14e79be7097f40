"""Lineage: what a model push records about where it came from, in the three places a reader looks.

- The **Hub commit**: its title names the git commit ("Upload model with gym from 1a2b3c4d5e6f"), its
  description carries ``Gym-*`` trailer lines (repository, commit, pull request, gym.toml, gates, forced,
  the commit it replaced) that `gym history` reads back from ``list_repo_commits`` alone.
- The **card** (README.md): a "Source" section with links to the commit and pull request, the gym.toml's
  path and its diff against the champion's (the model this push replaces), or "not in a git repository".
- **eval_results.json**: the same facts under ``source`` (with the gym.toml's text, so the next push can
  diff against it); readers of the file ignore keys they do not know.

The pushed copies are made in memory (the run's folder keeps its own files): a rerun of the same push
gives the same bytes, so the Hub sees no change.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym.hub.git_source import NOT_GIT, Source

PUSH_TITLE = "Upload model with gym"
ROLLBACK_TITLE = "Roll back with gym"
SOURCE_HEADING = "## Source"
MAX_DIFF_LINES = 80
TRAILER = "Gym-"


@dataclass(frozen=True)
class Stamp:
    """The pushed copies of README.md and eval_results.json, and the Hub commit's title and description."""

    files: dict[str, bytes]
    title: str
    description: str


def commit_title(source: Source) -> str:
    if not source.in_git:
        return f"{PUSH_TITLE} ({NOT_GIT})"
    return f"{PUSH_TITLE} from {source.commit[:12]}{' (uncommitted changes)' if source.dirty else ''}"  # type: ignore[index]


def trailers(source: Source, gates: Any = None) -> dict[str, str]:
    """The ``Gym-*`` lines of a push's commit description (``gates``: its GateReport, if it was gated)."""
    lines = {"Gym-Source-Repository": source.repository or "", "Gym-Source-Commit": source.commit or NOT_GIT}
    if source.dirty:
        lines["Gym-Source-Dirty"] = "yes"
    if source.pull_request is not None:
        lines["Gym-Pull-Request"] = f"#{source.pull_request} {source.pull_url or ''}".strip()
    if source.config_path:
        lines["Gym-Config"] = source.config_path
    if gates is not None:
        lines["Gym-Gates"] = gates.summary()
        lines["Gym-Forced"] = "yes" if gates.forced else "no"
        if gates.champion:
            lines["Gym-Replaces"] = str(gates.champion.get("sha") or "")
    return {key: value for key, value in lines.items() if value}


def render_trailers(lines: Mapping[str, str]) -> str:
    return "\n".join(f"{key}: {' '.join(str(value).split())}" for key, value in lines.items())


def parse_trailers(message: str) -> dict[str, str]:
    """The ``Gym-*: value`` lines of a commit description (later lines win); {} for any other text."""
    found = {}
    for line in (message or "").splitlines():
        key, sep, value = line.partition(": ")
        if sep and key.startswith(TRAILER) and key.replace("-", "").isalnum():
            found[key] = value.strip()
    return found


def config_diff(champion: Source | None, source: Source) -> list[str] | None:
    """The unified diff of the champion's gym.toml against this run's; None when either text is unknown."""
    if champion is None or champion.config_text is None or source.config_text is None:
        return None
    before = f"champion {champion.commit[:12]}" if champion.commit else "champion"
    after = f"this run {source.commit[:12]}" if source.commit else "this run"
    return list(difflib.unified_diff(champion.config_text.splitlines(), source.config_text.splitlines(),
                                     fromfile=f"{before}:{champion.config_path or 'gym.toml'}",
                                     tofile=f"{after}:{source.config_path or 'gym.toml'}", lineterm=""))  # fmt: skip


def source_section(source: Source, champion: Source | None = None) -> str:
    """The card's "Source" section."""
    from gym.markup import md_code, md_text

    if not source.in_git:
        return f"{SOURCE_HEADING}\n\nBuilt {NOT_GIT}: no commit or pull request is recorded for this model.\n"
    commit = source.commit or ""
    shown = f"[{md_code(commit[:12])}]({source.commit_url})" if source.commit_url else md_code(commit)
    rows = [
        ("repository", md_text(source.repository) if source.repository else "—"),
        ("commit", shown + (" (with uncommitted changes)" if source.dirty else "")),
        ("pull request", f"[#{source.pull_request}]({source.pull_url})" if source.pull_url else "—"),
        ("config", md_code(source.config_path) if source.config_path else "—"),
    ]
    text = f"{SOURCE_HEADING}\n\n| | |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows)
    diff = config_diff(champion, source)
    if diff is not None:
        if not diff:
            text += "\nThe config is the same as the champion's.\n"
        else:
            cut = diff[:MAX_DIFF_LINES]
            more = f"\n… {len(diff) - len(cut)} more lines\n" if len(diff) > len(cut) else ""
            body = "\n".join(line.replace("```", "'''") for line in cut)
            text += f"\nThe config against the champion's:\n\n```diff\n{body}\n```\n{more}"
    if source.repository:
        text += (
            f"\nReproduce: `git clone {source.repository} && git checkout {commit[:12]} && "
            f"gym launch {source.config_path or 'gym.toml'}`\n"
        )
    return text


def stamp(
    files: Mapping[str, Path], source: Source, *, gates: Any = None, champion: Source | None = None
) -> Stamp:
    """The lineage of a push of ``files`` (name -> local path): README.md and eval_results.json copies."""
    from gym.hub.card import with_section

    out: dict[str, bytes] = {}
    card = files.get("README.md")
    if card is not None and card.is_file():
        text = card.read_text(encoding="utf-8")
        out["README.md"] = with_section(text, source_section(source, champion)).encode("utf-8")
    results = files.get("eval_results.json")
    if results is not None and results.is_file():
        try:
            data = json.loads(results.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = None
        if isinstance(data, dict):  # a damaged file is the gates' business; it goes up as it is
            data["source"] = source.to_json()
            out["eval_results.json"] = (json.dumps(data, indent=2) + "\n").encode("utf-8")
    description = render_trailers(trailers(source, gates))
    return Stamp(files=out, title=commit_title(source), description=description)


def champion_source(repo: str, token: str | None) -> Source | None:
    """The source the model ``repo`` holds now recorded in its eval_results.json (None: none, or unreadable),
    read with the champion lookup's bounds."""
    from gym.hub.champion import read_repo_file

    try:
        data = json.loads(read_repo_file(repo, "eval_results.json", token))
    except Exception:  # noqa: BLE001 - no champion, an older Gym's file, the Hub away: the diff is left out
        return None
    return Source.from_json(data.get("source")) if isinstance(data, dict) else None


def push_stamp(plan: Any, files: Mapping[str, Path]) -> Stamp:
    """The lineage of `gym deploy`'s model push (``plan``: its :class:`gym.hub.push.DeployPlan`)."""
    from gym.eval.gates import GateReport
    from gym.hub.git_source import read_source

    config_path = plan.config.source if plan.config is not None else None
    source = read_source(config_path)
    gates = GateReport.read(plan.model_dir)
    champion = champion_source(plan.model_repo, plan.token) if source.in_git else None
    return stamp(files, source, gates=gates, champion=champion)
