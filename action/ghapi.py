"""The few GitHub REST calls the action makes, through PyGithub.

Calls: get the repository, get the pull request (fork or not), list its files and labels, compare
the commits of a push, and list / create / edit issue comments for the one sticky comment per
config. The sticky comment is found by a hidden marker at the *start* of its body, so a reply that
quotes it (which starts with ``>``) is never mistaken for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from action.changes import ChangedFile
from action.context import ZERO_SHA, Context
from action.policy import PullFacts

if TYPE_CHECKING:
    from github.PullRequest import PullRequest
    from github.Repository import Repository


@dataclass(frozen=True)
class CommentResult:
    url: str
    created: bool


class GitHubAPI:
    """PyGithub against ``GITHUB_API_URL`` (github.com, GHES, or a test server on 127.0.0.1)."""

    def __init__(self, context: Context, token: str) -> None:
        from github import Auth, Github

        self._github = Github(base_url=context.api_url, auth=Auth.Token(token))
        self._name = context.repository
        self._repo: Repository | None = None
        self._pulls: dict[int, PullRequest] = {}

    @property
    def repo(self) -> Repository:
        if self._repo is None:
            self._repo = self._github.get_repo(self._name)
        return self._repo

    def _pull(self, number: int) -> PullRequest:
        if number not in self._pulls:
            self._pulls[number] = self.repo.get_pull(number)
        return self._pulls[number]

    def pull_facts(self, number: int) -> PullFacts:
        """Where the PR's head lives (this repository or a fork), as the API says now."""
        pull = self._pull(number)
        head_repo = pull.head.repo.full_name if pull.head.repo is not None else None
        return PullFacts(number=number, head_repo=head_repo, base_repo=self._name)

    def labels(self, number: int) -> frozenset[str]:
        """The labels on the PR right now (not the event payload's, which a re-run replays)."""
        return frozenset(label.name for label in self._pull(number).get_labels())

    def pull_files(self, number: int) -> list[ChangedFile]:
        return [ChangedFile(f.filename, f.status) for f in self._pull(number).get_files()]

    def push_files(self, before: str, after: str) -> list[ChangedFile]:
        """Files changed by a push: compare before...after, or the head commit alone for a new branch."""
        if not before or before == ZERO_SHA:
            files = self.repo.get_commit(after).files
        else:
            files = self.repo.compare(before, after).files
        return [ChangedFile(f.filename, f.status) for f in files]

    def upsert_comment(self, number: int, marker: str, body: str) -> CommentResult:
        """Edit the comment that starts with ``marker``, or create it: one comment per config, ever."""
        pull = self._pull(number)
        for comment in pull.get_issue_comments():
            if (comment.body or "").startswith(marker):
                if comment.body != body:
                    comment.edit(body)
                return CommentResult(comment.html_url, created=False)
        created = pull.create_issue_comment(body)
        return CommentResult(created.html_url, created=True)
