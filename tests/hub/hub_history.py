"""The Hub double's git side: every commit kept with the files it left, so a repo can be read at a revision and
its history listed, as `gym history` and `gym rollback` read them.

What huggingface_hub sends and expects (huggingface_hub/hf_api.py and _commit_api.py, 1.x):

- ``list_repo_commits`` GETs ``/api/{type}s/{repo}/commits/{revision}`` and pages through it by the ``Link``
  header (``utils/_pagination.py``); each item is ``{"id", "title", "message", "authors": [{"user"}],
  "date"}``, newest first, as the Hub answers.
- ``model_info(revision=)`` GETs ``/api/models/{repo}/revision/{revision}``, ``list_repo_tree`` /
  ``snapshot_download`` ``/api/{type}s/{repo}/tree/{revision}``, ``hf_hub_download(revision=)``
  ``/{repo}/resolve/{revision}/{path}``: the double answers them from :func:`revision_view`, the files the
  named commit left (``main`` is the newest). An unknown revision is 404 with ``X-Error-Code:
  RevisionNotFound`` ("Invalid rev id: ..."), which huggingface_hub raises as ``RevisionNotFoundError``.
- ``create_commit(parent_commit=)`` puts ``parentCommit`` into the commit's header line (``_commit_api.py``,
  ``_payload_as_ndjson``); the Hub refuses a commit whose parent is no longer the head of the branch with
  412 "A commit has happened since. Please refresh and try again." (the precondition huggingface_hub#916
  added ``parent_commit`` for), and the double does the same (:meth:`History.refusal`).

Commit ids stay those of :meth:`tests.hub.hub_double.HubState.sha` (the number of commits, in hexadecimal), so
the tests that name them keep working; each commit here records its title, description (``message``),
author, date and a copy of the repo's files and LFS paths right after it.
"""

# no `from __future__ import annotations`: FastAPI must see the real Request type of the route below
import time
from dataclasses import dataclass, field
from typing import Any

PAGE = 50  # commits per page of /commits/{revision}; a longer history is read through the Link header
CONFLICT = "A commit has happened since. Please refresh and try again."


@dataclass(frozen=True)
class Commit:
    oid: str
    title: str
    message: str
    author: str
    date: str
    files: dict[str, bytes]
    lfs: frozenset[str]


@dataclass
class History:
    """The commits of every repo ("type:owner/name"), oldest first."""

    commits: dict[str, list[Commit]] = field(default_factory=dict)

    def record(self, key: str, oid: str, header: dict[str, Any], author: str, files: dict[str, bytes],
               lfs: set[str]) -> None:  # fmt: skip
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{len(self.commits.get(key, [])):03d}Z"
        self.commits.setdefault(key, []).append(
            Commit(
                oid=oid,
                title=str(header.get("summary") or ""),
                message=str(header.get("description") or ""),
                author=author,
                date=stamp,
                files=dict(files),
                lfs=frozenset(lfs),
            )  # fmt: skip
        )

    def refusal(self, key: str, header: dict[str, Any], head: str) -> tuple[int, str] | None:
        """The Hub's 412 when ``parentCommit`` names a commit that is no longer the head (short ids count)."""
        parent = header.get("parentCommit")
        if parent and not head.startswith(str(parent)):
            return 412, CONFLICT
        return None

    def find(self, key: str, revision: str) -> int | None:
        """The index of ``revision`` (``main``, a full or short commit id) among ``key``'s commits."""
        commits = self.commits.get(key, [])
        if revision in ("main", "refs/heads/main"):
            return len(commits) - 1
        for index, commit in enumerate(commits):
            if len(revision) >= 7 and commit.oid.startswith(revision):
                return index
        return None


def revision_view(state: Any, key: str, revision: str) -> tuple[dict[str, bytes], set[str], str] | None:
    """(files, LFS paths, commit id) of ``key`` at ``revision``; None when the repo has no such revision.

    ``main`` is what the repo holds now (also before its first commit, when the double holds no history)."""
    history: History = state.history
    if revision in ("main", "refs/heads/main"):
        return state.files.get(key, {}), state.lfs_files.get(key, set()), state.sha(key)
    index = history.find(key, revision)
    if index is None:
        return None
    commit = history.commits[key][index]
    return dict(commit.files), set(commit.lfs), commit.oid


def no_revision(error: Any, revision: str) -> Any:
    """The Hub's answer to a revision it does not know."""
    return error(404, f"Invalid rev id: {revision}", "RevisionNotFound")


def add_history_routes(app: Any, state: Any, *, readable: Any, missing: Any, error: Any) -> History:
    """Register ``GET /api/{type}s/{owner}/{name}/commits/{revision}``; returns the history the commit route
    records into (``state.history``)."""
    from fastapi import Request
    from fastapi.responses import JSONResponse

    history = History()

    async def commits(kind: str, owner: str, name: str, revision: str, request: Request, p: int = 0):
        key = f"{kind}:{owner}/{name}"
        allowed = readable(key, request)
        if isinstance(allowed, JSONResponse):
            return allowed
        if not allowed:
            return missing()
        found = history.find(key, revision)
        if found is None and revision not in ("main", "refs/heads/main"):
            return no_revision(error, revision)
        listed = list(reversed(history.commits.get(key, [])[: (found if found is not None else -1) + 1]))
        page = listed[p * PAGE : (p + 1) * PAGE]
        items = [{"id": c.oid, "title": c.title, "message": c.message, "date": c.date,
                  "authors": [{"user": c.author, "avatar": None}]} for c in page]  # fmt: skip
        headers = {}
        if (p + 1) * PAGE < len(listed):
            headers["Link"] = f'<{str(request.url).split("?")[0]}?p={p + 1}>; rel="next"'
        return JSONResponse(items, headers=headers)

    app.add_api_route("/api/{kind}s/{owner}/{name}/commits/{revision:path}", commits, methods=["GET"])
    return history
