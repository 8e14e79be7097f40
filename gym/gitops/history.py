"""`gym history`: the promotions of a ``[hub]`` repository, read from its Hub commits alone.

Each model push Gym makes is one Hub commit whose title starts with "Upload model with gym" and whose
description carries ``Gym-*`` trailers (:mod:`gym.hub.lineage`); each rollback one titled "Roll back with
gym". ``HfApi.list_repo_commits`` gives them all, newest first, in one paged request: no file is downloaded.
Commits made by anything else (an edit on the website, another tool) are not promotions and are skipped;
the repository's newest commit is still what it serves, and is marked so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gym.gitops.hub_errors import how
from gym.hub.git_source import NOT_GIT
from gym.hub.lineage import PUSH_TITLE, ROLLBACK_TITLE, parse_trailers


class HistoryError(RuntimeError):
    """One sentence for the user: what could not be read, and what to do."""


@dataclass(frozen=True)
class Promotion:
    """One Hub commit Gym made: a push (``kind`` "push") or a rollback ("rollback")."""

    hub_commit: str
    date: datetime | None
    title: str
    kind: str
    trailers: dict[str, str] = field(default_factory=dict)

    @property
    def source(self) -> str:
        """The git commit (and pull request) it came from, or what a rollback restored."""
        if self.kind == "rollback":
            return f"rollback to {self.trailers.get('Gym-Rollback-To', '?')[:12]}"
        commit = self.trailers.get("Gym-Source-Commit")
        if commit is None:
            return "—" if self.title == PUSH_TITLE else self.title.removeprefix(PUSH_TITLE).strip(" ()")
        shown = commit[:12] if commit != NOT_GIT else NOT_GIT
        if self.trailers.get("Gym-Source-Dirty") == "yes":
            shown += " (uncommitted changes)"
        pull = self.trailers.get("Gym-Pull-Request", "").split(" ")[0]
        return f"{shown} PR {pull}" if pull else shown

    @property
    def gates(self) -> str:
        if self.kind == "rollback":
            return self.trailers.get("Gym-Reason", "") or "—"
        return self.trailers.get("Gym-Gates", "no gates")

    @property
    def forced(self) -> bool:
        return self.trailers.get("Gym-Forced") == "yes"

    @property
    def restores(self) -> str:
        """The pushed commit whose files this promotion serves (a rollback: the one it restored)."""
        return (
            self.trailers.get("Gym-Rollback-Serves", self.hub_commit)
            if self.kind == "rollback"
            else self.hub_commit
        )


def kind_of(title: str) -> str | None:
    if title.startswith(PUSH_TITLE):
        return "push"
    if title.startswith(ROLLBACK_TITLE):
        return "rollback"
    return None


def read_history(
    repo: str, token: str | None, token_env: str = "HF_TOKEN"
) -> tuple[str | None, list[Promotion]]:
    """(the commit the repo's main is at, its promotions newest first); (None, []) when it has no commit.

    Raises :class:`HistoryError` when the repository cannot be read."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        commits = HfApi(token=token or None).list_repo_commits(repo)
    except RepositoryNotFoundError:
        raise HistoryError(
            f"the model repository {repo} does not exist on the Hub, or ${token_env} cannot read it: nothing was "
            "promoted there yet (`gym deploy` pushes the first model)"
        ) from None
    except Exception as error:  # noqa: BLE001 - one sentence, never the token
        raise HistoryError(
            f"cannot read the commits of {repo} from the Hub ({how(error)}); retry later"
        ) from None
    head = commits[0].commit_id if commits else None
    promotions = [
        Promotion(
            hub_commit=c.commit_id,
            date=c.created_at,
            title=c.title,
            kind=kind,
            trailers=parse_trailers(c.message),
        )  # fmt: skip
        for c in commits
        if (kind := kind_of(c.title or "")) is not None
    ]
    return head, promotions


def history_lines(repo: str, head: str | None, promotions: list[Promotion]) -> list[str]:
    """The table `gym history` prints: one promotion a line, newest first, the one served marked."""
    if not promotions:
        return [f"{repo}: no promotion by Gym yet"]
    rows = [("HUB COMMIT", "DATE", "SOURCE", "GATES / REASON", "FORCED", "")]
    for item in promotions:
        date = item.date.strftime("%Y-%m-%d %H:%M") if item.date else "—"
        mark = "← serving" if item.hub_commit == head else ""
        rows.append(
            (item.hub_commit[:12], date, item.source, item.gates, "yes" if item.forced else "no", mark)
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return [f"{repo}: {len(promotions)} promotion(s), newest first"] + [
        "  ".join(cell.ljust(width) for cell, width in zip(row, [*widths, 0], strict=True)).rstrip()
        for row in rows
    ]


def as_json(promotions: list[Promotion], head: str | None) -> list[dict[str, Any]]:
    return [
        {"hub_commit": p.hub_commit, "date": p.date.isoformat() if p.date else None, "kind": p.kind,
         "title": p.title, "serving": p.hub_commit == head, "forced": p.forced, "trailers": p.trailers}
        for p in promotions
    ]  # fmt: skip
