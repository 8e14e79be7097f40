"""The one sticky comment per config: found by marker *and* author, with the action's state inside.

Anyone who can comment on a pull request can write a comment that starts with the hidden marker. So
a comment counts as the action's own only when it starts with the marker **and** was written by one of
the identities the action and its job write with: the action's token (:func:`own_login`: ``GET /user``, or
``github-actions[bot]`` for the Actions token, which may not call ``/user``; a GitHub App token names
its bot through the ``comment-author`` input) and the owner of ``GYM_REPORT_TOKEN``, the fine-grained token
a cloud job reports back with (a comment the job had to create is authored by that token's owner). Other comments that carry
the marker are never edited and nothing in them is read; the action writes a new comment instead.

The action keeps what it launched (commit, job id, approval) in a hidden, base64-encoded JSON line in
its own comment (:class:`RunState`). Only state read from a comment that passed the author check is
trusted, so a planted comment cannot make the action skip a launch or cancel someone else's job.

Reuse: :func:`find_or_create_sticky` is the whole find-or-write step (e.g. for a cloud job that
reports its own progress); :func:`find_sticky` and :func:`write_sticky` split it when the caller
must read the old state before it renders the new body. A caller that rewrites the body keeps the
state line (:func:`state_of` / :func:`with_state`), or the next run cannot tell what is running.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from github import Github
    from github.IssueComment import IssueComment
    from github.PullRequest import PullRequest

ACTIONS_BOT = "github-actions[bot]"  # the login of the token GitHub gives a workflow (GITHUB_TOKEN)
STATE_PREFIX = "<!-- gym-state "
STATE_LINE = re.compile(r"^<!-- gym-state ([A-Za-z0-9+/=]+) -->$", re.MULTILINE)
TERMINAL = ("finished", "ended", "cancelled", "failed")


@dataclass
class RunState:
    """What the action launched for one config of one pull request (kept in its sticky comment)."""

    sha: str  # the approved head commit the job runs
    job_id: str  # SkyPilot job id, or Hugging Face job id
    name: str  # SkyPilot job / cluster name; a Hugging Face job's gym-run label
    managed: bool
    approval: int  # id of the `labeled` issue event that approved it (one approval, one launch)
    approved_by: str = ""
    state: str = (
        "submitted"  # submitted | finished | ended | failed | cancelled, or SkyPilot's status (RUNNING...)
    )
    history: list[str] = field(default_factory=list)  # earlier jobs, one line each
    ended: bool = False  # the job is over (as last seen by the action): nothing to cancel
    provider: str = "skypilot"  # compute.provider of the job: "skypilot" | "hf-jobs"

    @property
    def provider_name(self) -> str:
        return {"skypilot": "SkyPilot", "hf-jobs": "Hugging Face Jobs"}.get(self.provider, self.provider)

    @property
    def active(self) -> bool:
        return not self.ended and self.state not in TERMINAL

    def line(self) -> str:
        """The hidden line a comment carries; base64 so no text in it can close the HTML comment."""
        raw = json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()
        return f"{STATE_PREFIX}{base64.b64encode(raw).decode()} -->"

    @classmethod
    def parse(cls, body: str) -> RunState | None:
        match = STATE_LINE.search(body or "")
        if not match:
            return None
        try:
            data: Any = json.loads(base64.b64decode(match.group(1), validate=True))
            return cls(**data) if isinstance(data, dict) else None
        except (binascii.Error, ValueError, TypeError):
            return None


@dataclass
class Sticky:
    """The result of looking for the sticky comment: the action's own (or None) and the impostors."""

    comment: IssueComment | None
    impostors: list[tuple[int, str]] = field(default_factory=list)  # (comment id, author) with the marker

    @property
    def state(self) -> RunState | None:
        return RunState.parse(self.comment.body) if self.comment is not None else None


@dataclass(frozen=True)
class StickyResult:
    url: str
    created: bool
    impostors: tuple[tuple[int, str], ...] = ()


def own_login(github: Github) -> str:
    """The login comments written with this token show: ``GET /user``, else the Actions bot.

    The token GitHub gives a workflow is an installation token, for which ``/user`` answers 403;
    its comments are written by ``github-actions[bot]``.
    """
    from github import GithubException

    try:
        return str(github.get_user().login)
    except GithubException as error:
        if error.status in (401, 403, 404):
            return ACTIONS_BOT
        raise


def _author(comment: IssueComment) -> str:
    return str(comment.user.login) if comment.user is not None else ""


def find_sticky(pull: PullRequest, marker: str, own: str | tuple[str, ...]) -> Sticky:
    """The first comment that starts with ``marker`` and was written by ``own`` (one login, or the several
    identities the action and its job write with); others are listed."""
    found = Sticky(comment=None)
    logins = {login.lower() for login in ((own,) if isinstance(own, str) else own)}
    for comment in pull.get_issue_comments():
        if not (comment.body or "").startswith(marker):
            continue
        if _author(comment).lower() in logins:
            if found.comment is None:
                found.comment = comment
        else:
            found.impostors.append((comment.id, _author(comment)))
    return found


def write_sticky(pull: PullRequest, sticky: Sticky, body: str) -> StickyResult:
    """Edit the action's own comment (only when the text changed), or create it."""
    impostors = tuple(sticky.impostors)
    if sticky.comment is not None:
        if sticky.comment.body != body:
            sticky.comment.edit(body)
        return StickyResult(sticky.comment.html_url, created=False, impostors=impostors)
    created = pull.create_issue_comment(body)
    sticky.comment = created  # the next write edits it rather than adding a second comment
    return StickyResult(created.html_url, created=True, impostors=impostors)


def find_or_create_sticky(
    pull: PullRequest, marker: str, own: str | tuple[str, ...], body: str
) -> StickyResult:
    """Write ``body`` (which must start with ``marker``) into the one comment ``own`` keeps for it."""
    if not body.startswith(marker):
        raise ValueError("the body of a sticky comment must start with its marker")
    return write_sticky(pull, find_sticky(pull, marker, own), body)


def state_of(body: str) -> RunState | None:
    return RunState.parse(body)


def with_state(body: str, state: RunState | None) -> str:
    """``body`` with its state line replaced by ``state``'s (appended after the first line if none)."""
    body = re.sub(STATE_LINE.pattern + r"\n?", "", body, flags=re.MULTILINE)
    if state is None:
        return body
    first, _, rest = body.partition("\n")
    return f"{first}\n{state.line()}\n{rest}"
