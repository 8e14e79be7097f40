"""Who may spend money: the one function that turns the requested mode into the mode that runs.

GitOps means a pull request proposes a run and a maintainer pays for it. The rules, whatever the
``mode`` input says:

- a pull request from a fork never launches (validate and plan only, and it never reads a secret);
- a same-repository pull request launches only in the run that the launch label (``gym:launch``)
  itself triggered, and only when the person who applied it last (the latest ``labeled`` issue
  event, read from the API at run time) has the ``write``, ``maintain`` or ``admin`` role. ``triage``
  can label but not merge, so it cannot spend money either;
- that approval covers one commit, the head the label was applied to (the event's head SHA): a later
  push runs validate + plan only until a maintainer applies the label again. The action removes the
  label after it launched, and records the approval's event id in its own comment so the same approval
  never launches twice (see :mod:`action.approval`);
- ``pull_request_target`` never launches: it runs with secrets next to code the PR author controls;
- a comment event (``issue_comment`` and the review comments) launches only when its author has the
  ``write``, ``maintain`` or ``admin`` role, read from the API as for the label: anyone can comment;
- ``auto`` launches on a push to the default branch (merging is the maintainer's approval) and plans
  everywhere else.
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


LAUNCH_ROLES = frozenset({"admin", "maintain", "write"})
COMMENT_EVENTS = frozenset(
    {"issue_comment", "pull_request_review_comment", "pull_request_review", "discussion_comment"}
)
KNOWN_ROLES = LAUNCH_ROLES | {"triage", "read", "none"}


@dataclass(frozen=True)
class Approval:
    """The latest application of the launch label, as the API reports it when the action runs."""

    actor: str
    role: str  # admin | maintain | write | triage | read | a custom role (with its base permission)
    allowed: bool  # the role may approve spending
    event_id: int  # the `labeled` issue event: one approval, one launch


@dataclass(frozen=True)
class Decision:
    """The mode that runs and, for the comment, why it is that one (one line)."""

    mode: str  # validate | plan | launch
    reason: str
    approval: Approval | None = None

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
    labeled_now: bool = False,
    approval: Approval | None = None,
    head_sha: str = "",
    commenter: Approval | None = None,
) -> Decision:
    """The effective mode for this event; security rules always win over the ``mode`` input.

    ``labeled_now``: this run was triggered by applying ``label``. ``approval``: who applied it last.
    """
    if requested in ("validate", "plan"):
        return Decision(requested, f"{requested} only: mode = {requested}")
    if event_name == "pull_request_target":
        return Decision(
            "plan", "plan only: pull_request_target never launches (it runs with secrets beside PR code)"
        )
    if pull is not None:
        short = head_sha[:12] or "this commit"
        if pull.is_fork:
            return Decision("plan", "plan only: pull request from a fork (no launch, no secrets)")
        if not labeled_now:
            on = label in pull.labels
            why = (
                f"the `{label}` label on this PR approved an earlier commit" if on else f"no `{label}` label"
            )
            return Decision(
                "plan",
                f"plan only: commit {short} is not approved ({why}); "
                f"a maintainer applies `{label}` to approve it",
            )
        if approval is None:
            return Decision("plan", f"plan only: no `labeled` event for `{label}` found through the API")
        who = f"label `{label}` applied by @{approval.actor} who has {approval.role} permission"
        if not approval.allowed:
            return Decision(
                "plan",
                f"plan only: {who} (launching needs write, maintain or admin)",
                approval,
            )
        return Decision("launch", f"launch approved: {who}, for commit {short}", approval)
    if event_name in COMMENT_EVENTS:
        if commenter is None:
            return Decision("plan", f"plan only: no author found for the {event_name} event")
        who = f"{event_name} by @{commenter.actor} who has {commenter.role} permission"
        if not commenter.allowed:
            return Decision("plan", f"plan only: {who} (launching needs write, maintain or admin)", commenter)
        if requested == "launch":
            return Decision("launch", f"launch: mode = launch, {who}", commenter)
    if requested == "launch":
        return Decision("launch", "launch: mode = launch")
    if default_branch_push:
        return Decision("launch", "launch: push to the default branch")
    return Decision(
        "plan",
        f"plan only: auto mode plans on {event_name or 'this event'}; it launches on the default branch",
    )
