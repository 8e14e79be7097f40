"""The few GitHub REST calls the action makes, through PyGithub.

Calls: get the repository, get the pull request (fork or not), list its files and labels, compare
the commits of a push, and list / create / edit issue comments for the one sticky comment per
config (see :mod:`gym.launch.report.sticky`: marker at the start *and* the token's own author), read who
applied the launch label last and with which role, and remove the label once its approval is used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit

from action.changes import ChangedFile
from action.context import ZERO_SHA, Context
from action.policy import KNOWN_ROLES, LAUNCH_ROLES, Approval, PullFacts
from gym.launch.report.sticky import Sticky, StickyResult, find_sticky, own_login, write_sticky

if TYPE_CHECKING:
    from github.PullRequest import PullRequest
    from github.Repository import Repository


Call = TypeVar("Call", bound=Callable)
# The repository permission each call needs of the workflow's token, as a `permissions:` block names it.
# The example workflow's lint (tests/action/test_lint.py) derives the block it must grant from this table.
PERMISSIONS: dict[str, tuple[str, str]] = {}
FORBIDDEN = "Resource not accessible by integration"  # GitHub's 403 for a token that lacks a permission


def needs(scope: str, level: str) -> Callable[[Call], Call]:
    """Record that a :class:`GitHubAPI` call needs ``scope: level`` (e.g. ``statuses: write``)."""

    def mark(call: Call) -> Call:
        PERMISSIONS[call.__name__] = (scope, level)
        return call

    return mark


def required_permissions() -> dict[str, str]:
    """The ``permissions:`` block that covers every call the action makes (write where any call writes)."""
    block: dict[str, str] = {}
    for scope, level in PERMISSIONS.values():
        if block.get(scope) != "write":
            block[scope] = level
    return dict(sorted(block.items()))


def missing_permission(call: str, error: BaseException) -> str | None:
    """The sentence for a 403 that means the token lacks the permission ``call`` needs, else None."""
    data = getattr(error, "data", None)
    message = data.get("message", "") if isinstance(data, dict) else str(data or "")
    if getattr(error, "status", None) != 403 or FORBIDDEN not in message or call not in PERMISSIONS:
        return None
    scope, level = PERMISSIONS[call]
    return (
        f"the workflow's token lacks `{scope}: {level}` (GitHub answered 403 {FORBIDDEN!r}): add it to the job's "
        "`permissions:` block (see examples/workflows/gym.yml)"
    )


class GitHubAPI:
    """PyGithub against ``GITHUB_API_URL`` (github.com, GHES, or a test server on 127.0.0.1)."""

    def __init__(self, context: Context, token: str, report_token: str = "") -> None:
        from github import Auth, Github

        # PyGithub spaces requests out (0.25 s, 1 s between writes) for GitHub's secondary rate limits;
        # an API on this machine (a caching proxy, the tests' recording server) has none to respect.
        local = urlsplit(context.api_url).hostname in ("127.0.0.1", "localhost", "::1")
        pace = {"seconds_between_requests": 0, "seconds_between_writes": 0} if local else {}
        self._github = Github(base_url=context.api_url, auth=Auth.Token(token), **pace)
        self._connect = lambda other: Github(base_url=context.api_url, auth=Auth.Token(other), **pace)
        self._name = context.repository
        self._repo: Repository | None = None
        self._pulls: dict[int, PullRequest] = {}
        self._own: str | None = None
        self._author = context.inputs.comment_author
        self._report_token = report_token
        self._identities: tuple[str, ...] | None = None

    @property
    def repo(self) -> Repository:
        if self._repo is None:
            self._repo = self._github.get_repo(self._name)
        return self._repo

    def _pull(self, number: int) -> PullRequest:
        if number not in self._pulls:
            self._pulls[number] = self.repo.get_pull(number)
        return self._pulls[number]

    @needs("pull-requests", "read")
    def pull_facts(self, number: int) -> PullFacts:
        """Where the PR's head lives (this repository or a fork), as the API says now."""
        pull = self._pull(number)
        head_repo = pull.head.repo.full_name if pull.head.repo is not None else None
        return PullFacts(number=number, head_repo=head_repo, base_repo=self._name)

    @needs("pull-requests", "read")
    def labels(self, number: int) -> frozenset[str]:
        """The labels on the PR right now (not the event payload's, which a re-run replays)."""
        return frozenset(label.name for label in self._pull(number).get_labels())

    @needs("pull-requests", "read")
    def pull_files(self, number: int) -> list[ChangedFile]:
        return [ChangedFile(f.filename, f.status) for f in self._pull(number).get_files()]

    @needs("contents", "read")
    def push_files(self, before: str, after: str) -> list[ChangedFile]:
        """Files changed by a push: compare before...after, or the head commit alone for a new branch."""
        if not before or before == ZERO_SHA:
            files = self.repo.get_commit(after).files
        else:
            files = self.repo.compare(before, after).files
        return [ChangedFile(f.filename, f.status) for f in files]

    @property
    def own_login(self) -> str:
        """Who comments written with this token are by (see :func:`gym.launch.report.sticky.own_login`)."""
        if self._own is None:
            self._own = self._author or own_login(self._github)
        return self._own

    @property
    def identities(self) -> tuple[str, ...]:
        """Whose comments with the marker are the action's: its token's identity and, when the job reports
        back with ``GYM_REPORT_TOKEN``, that token's owner (a comment the job created is authored by it)."""
        if self._identities is None:
            found = [self.own_login]
            if self._report_token:
                with contextlib.suppress(Exception):  # an unusable report token adds no identity
                    found.append(own_login(self._connect(self._report_token)))
            self._identities = tuple(dict.fromkeys(found))
        return self._identities

    @needs("pull-requests", "read")
    def sticky(self, number: int, marker: str) -> Sticky:
        return find_sticky(self._pull(number), marker, self.identities)

    @needs("pull-requests", "write")
    def write_sticky(self, number: int, sticky: Sticky, body: str) -> StickyResult:
        return write_sticky(self._pull(number), sticky, body)

    @needs("statuses", "write")
    def set_status(self, sha: str, context: str, state: str, description: str, target_url: str = "") -> None:
        """A commit status (``gym / <config>``) that branch protection can require."""
        self.repo.get_commit(sha).create_status(
            state=state, target_url=target_url, description=description[:140], context=context
        )

    @needs("pull-requests", "read")
    def latest_label_event(self, number: int, label: str) -> Approval | None:
        """Who applied ``label`` last (the latest ``labeled`` issue event) and their role now.

        The role comes from the collaborator permission API at run time: ``role_name`` tells
        ``maintain`` from ``write`` and ``triage`` from ``read``; a custom role falls back to its base
        ``permission`` (``admin``/``write`` may launch).
        """

        latest = None
        for event in self._pull(number).get_issue_events():
            if event.event == "labeled" and event.label is not None and event.label.name == label:
                latest = event
        if latest is None or latest.actor is None:
            return None
        return self._approval(str(latest.actor.login), int(latest.id))

    @needs("pull-requests", "read")
    def commenter_approval(self, login: str, comment_id: int) -> Approval:
        """The role of who wrote the comment that triggered this run (a comment event asking to launch)."""
        return self._approval(login, comment_id)

    def _approval(self, actor: str, event_id: int) -> Approval:
        """``actor``'s role now and whether it may approve spending (``event_id``: what approved)."""
        from github import GithubException

        try:
            role = self.repo.get_collaborator_role_name(actor)
        except GithubException as error:
            if error.status != 404:
                raise
            # the account is gone or unknown to the repository: no role at all
            return Approval(actor=actor, role="no", allowed=False, event_id=event_id)
        except KeyError:  # an older GitHub Enterprise Server answers without role_name
            role = "unnamed role"
        allowed = role in LAUNCH_ROLES
        if role not in KNOWN_ROLES:
            base = self.repo.get_collaborator_permission(actor)
            allowed = base in ("admin", "write")
            role = f"{role} (based on {base})"
        return Approval(actor=actor, role=role, allowed=allowed, event_id=event_id)

    @needs("pull-requests", "write")
    def remove_label(self, number: int, label: str) -> None:
        self._pull(number).remove_from_labels(label)
