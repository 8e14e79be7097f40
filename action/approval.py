"""One approval, one launch, one job: what a launch-approved run does for each config.

The policy (:func:`action.policy.decide`) says whether this run may launch at all: a maintainer's
label applied to the head commit this run is about. Per config, the action's own sticky comment says
what that config already has (:class:`gym.launch.report.sticky.RunState`), and this module decides:

- the same commit already has a job (a re-run of the workflow) → no second launch; the comment
  reports that job. Unless that job stopped short (its timeout, an error, a cancel) and a maintainer
  approved the commit again (a new label event): then it launches again, and a checkpoint volume resumes it;
- this approval (the ``labeled`` event id) already launched an earlier commit → no launch;
- an older commit's job that SkyPilot still reports as running (asked in launch-approved runs only,
  :func:`refresh`) → it is cancelled through SkyPilot first (a newer
  approved commit replaces it: one job per pull request and config, never two billing side by side).
  The action does not wait for the old job instead: its commit is no longer what the PR proposes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from action.launchers import JobControl
from action.policy import Decision
from gym.launch.report.outcome import ConfigOutcome
from gym.launch.report.sticky import RunState
from gym.launch.task import LaunchError


@dataclass
class ConfigStep:
    """The decision for one config, the job it had before, and the job to cancel before launching."""

    decision: Decision
    previous: RunState | None
    cancel: RunState | None = None
    lines: list[str] = field(default_factory=list)  # more decisions, one line each


def step_for_config(decision: Decision, previous: RunState | None, head: str) -> ConfigStep:
    approval = decision.approval
    if not decision.launches or approval is None:  # plan, validate, or a push to the default branch
        step = ConfigStep(decision, previous)
        if previous is not None and previous.sha != head:
            step.lines.append(
                f"the job shown below ran commit {previous.sha[:12]}, not {head[:12] or 'this commit'}"
            )
        return step
    again = previous is not None and previous.sha == head and previous.approval != approval.event_id
    if again and stopped_short(previous):  # a timeout, a failure, a cancel: a new approval launches it again
        line = (
            f"job {previous.job_id} for commit {head[:12]} stopped before the end ({previous.state}); this "
            f"approval (label applied by @{approval.actor}) launches it again: with "
            "compute.checkpoint_volume it resumes from its last checkpoint"
        )
        return ConfigStep(decision, previous, lines=[line])
    if previous is not None and previous.sha == head:
        why = (
            f"no second launch: job {previous.job_id} for commit {head[:12]} already exists "
            f"(state: {previous.state}); a re-run reports it"
        )
        return ConfigStep(dataclasses.replace(decision, mode="plan"), previous, lines=[why])
    if previous is not None and previous.approval == approval.event_id:
        why = (
            f"no launch: this approval (label applied by @{approval.actor}) was used for commit "
            f"{previous.sha[:12]} (job {previous.job_id}); apply the label again to approve {head[:12]}"
        )
        return ConfigStep(dataclasses.replace(decision, mode="plan"), previous, lines=[why])
    if previous is not None and not previous.active:
        line = f"the previous job {previous.job_id} (commit {previous.sha[:12]}) already ended ({previous.state}): nothing to cancel"
        return ConfigStep(decision, previous, lines=[line])
    return ConfigStep(decision, previous, cancel=previous)


SUCCESS_WORDS = (
    "COMPLETED",
    "SUCCEEDED",
)  # how Hugging Face Jobs and SkyPilot name a job that ran to its end


def stopped_short(state: RunState) -> bool:
    """Whether the recorded job ended without running to its end (timeout, error, cancel, gone)."""
    if state.active:
        return False
    return state.state not in ("finished", "ended") and not any(word in state.state for word in SUCCESS_WORDS)


def launched_state(step: ConfigStep, outcome: ConfigOutcome, head: str, *, wait: bool) -> RunState | None:
    """The state the comment keeps: the new job when this run launched one, else the previous job."""
    launch = outcome.launch
    if launch is None:
        return step.previous
    approval = step.decision.approval
    plan = outcome.plan
    ended = bool(launch.results) or wait or not launch.job_id  # followed to its end, or ran on this runner
    if launch.results:
        state = "finished"
    elif ended:
        state = "ended" if outcome.ok else "failed"
    else:
        state = "submitted"
    previous = step.previous
    history = list(previous.history) if previous is not None else []
    if previous is not None:
        history.append(f"job {previous.job_id} · commit {previous.sha[:12]} · {previous.state}")
    return RunState(
        sha=head,
        job_id=launch.job_id or "this runner",
        name=plan.name if plan is not None else "",
        managed=bool(plan.managed) if plan is not None else False,
        provider=plan.provider if plan is not None and plan.target == "cloud" else "skypilot",
        approval=approval.event_id if approval is not None else 0,
        approved_by=approval.actor if approval is not None else "",
        state=state,
        history=history[-10:],
        ended=ended,
    )


def refresh(jobs: JobControl, previous: RunState) -> str:
    """Ask the provider (SkyPilot, Hugging Face Jobs) for the previous job's state now (only in a
    launch-approved run); one line."""
    try:
        found = jobs.status(previous)
    except LaunchError as error:
        return f"{error}; its state as last recorded: {previous.state}"
    if found is None:
        previous.state, previous.ended = "not found", True
        gone = "" if previous.managed else " (its cluster is torn down)"
        return (
            f"{previous.provider_name} has no job {previous.job_id} named `{previous.name}` (commit {previous.sha[:12]}) any "
            f"more{gone}: nothing to cancel"
        )
    previous.state, previous.ended = found
    return f"{previous.provider_name} reports job {previous.job_id} (commit {previous.sha[:12]}) as {previous.state}"
