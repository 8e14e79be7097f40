"""Who may spend money: the one function that turns the requested mode into the mode that runs.

GitOps means a pull request proposes a run, it does not pay for one. The rules, whatever the
``mode`` input says:

- a pull request from a fork never launches (validate and plan only, and it never reads a secret);
- a same-repository pull request launches only while a maintainer's label (``gym:launch``) is on
  it, as the API reports at run time (not the payload, which can be stale on a re-run);
- ``pull_request_target`` never launches: it runs with secrets next to code the PR author controls;
- ``auto`` launches on a push to the default branch and on a labelled same-repository PR, and
  plans everywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PullFacts:
    """What the API says about the pull request, read when the action runs."""

    number: int
    head_repo: str | None  # None when the fork was deleted
    base_repo: str
    labels: frozenset[str] = frozenset()

    @property
    def is_fork(self) -> bool:
        return self.head_repo is None or self.head_repo.lower() != self.base_repo.lower()


@dataclass(frozen=True)
class Decision:
    """The mode that runs and, for the comment, why it is that one."""

    mode: str  # validate | plan | launch
    reason: str

    @property
    def launches(self) -> bool:
        return self.mode == "launch"


def decide(
    requested: str,
    event_name: str,
    *,
    pull: PullFacts | None,
    label: str,
    default_branch_push: bool,
) -> Decision:
    """The effective mode for this event; security rules always win over the ``mode`` input."""
    if requested in ("validate", "plan"):
        return Decision(requested, f"mode = {requested}")
    if event_name == "pull_request_target":
        return Decision("plan", "pull_request_target never launches (it runs with secrets beside PR code)")
    if pull is not None:
        if pull.is_fork:
            return Decision("plan", "pull request from a fork: validate and plan only, no launch, no secrets")
        if label not in pull.labels:
            return Decision("plan", f"launch needs the `{label}` label, applied by a maintainer")
        return Decision("launch", f"same-repository pull request labelled `{label}`")
    if requested == "launch":
        return Decision("launch", "mode = launch")
    if default_branch_push:
        return Decision("launch", "push to the default branch")
    return Decision(
        "plan", f"auto mode plans on {event_name or 'this event'}; it launches on the default branch"
    )
