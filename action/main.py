"""The action's entrypoint: event → configs to run → mode → validate/plan/launch → comment, summary, outputs.

:func:`main` takes the environment, the launcher and the job control as arguments, so tests drive the
real thing with event fixtures, a GitHub API server on 127.0.0.1 and a recording launcher (or the real
SkyPilot launcher and job control against a SkyPilot API double). Exit status: 0 when every config is valid (and, when
launching, launched); 1 otherwise, so the check fails on a broken gym.toml.

Every decision (why it launched, why not, which job it cancelled, which comments it ignored) is one
line, printed, in the comment and in the job summary.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from action.approval import ConfigStep, launched_state, refresh, step_for_config
from action.changes import ChangedFile, configs_in_workspace, select_configs
from action.context import ActionError, Context, is_secret_name, public_env
from action.ghapi import missing_permission
from action.launchers import JobControl, Launcher, ProviderJobs, default_launcher
from action.outputs import Redactor, annotation, write_outputs, write_summary
from action.policy import COMMENT_EVENTS, Decision, decide
from action.run import process_config
from gym.launch.report.outcome import ConfigOutcome, LaunchOutcome
from gym.launch.report.render import marker, render
from gym.launch.report.sticky import Sticky

if TYPE_CHECKING:
    from action.ghapi import GitHubAPI

TOKEN_ENV = "GYM_GITHUB_TOKEN"  # the github-token input; read-only on a fork's pull request
HF_TOKEN_INPUT = "GYM_INPUT_HF_TOKEN"  # the hf-token input; becomes HF_TOKEN for the launcher only


def _changed_files(context: Context, api: GitHubAPI) -> list[ChangedFile] | None:
    """The event's changed files from the API; None for events without a diff (workflow_dispatch...)."""
    if context.pull_number is not None:
        return api.pull_files(context.pull_number)
    if context.event_name == "push":
        return api.push_files(str(context.event.get("before") or ""), str(context.event.get("after") or ""))
    return None


def _head_sha(context: Context) -> str:
    """The commit this run is about: for a PR, the head the event saw (the one a label approved)."""
    pull = context.pull_request
    if pull:
        return str(pull.get("head", {}).get("sha") or "")
    return str(context.event.get("after") or context.extra.get("sha") or "")


def _decide(context: Context, api: GitHubAPI) -> Decision:
    """The policy's decision; who applied the label (and their role) is read from the API, at run time."""
    inputs = context.inputs
    label = inputs.launch_label
    pull = api.pull_facts(context.pull_number) if context.pull_number is not None else None
    approval = None
    labeled_now = (
        context.event.get("action") == "labeled"
        and str((context.event.get("label") or {}).get("name") or "") == label
    )
    if pull is not None and not pull.is_fork and inputs.mode in ("auto", "launch"):
        pull = dataclasses.replace(pull, labels=api.labels(pull.number))
        if labeled_now:
            approval = api.latest_label_event(pull.number, label)
    commenter = None
    comment = context.event.get("comment") or context.event.get("review") or {}
    if context.event_name in COMMENT_EVENTS and inputs.mode in ("auto", "launch") and comment.get("user"):
        commenter = api.commenter_approval(
            str(comment["user"].get("login") or ""), int(comment.get("id") or 0)
        )
    return decide(
        inputs.mode,
        context.event_name,
        pull=pull,
        label=label,
        default_branch_push=context.is_default_branch_push,
        labeled_now=labeled_now,
        approval=approval,
        head_sha=_head_sha(context),
        commenter=commenter,
    )


def _find_sticky(context: Context, api: GitHubAPI, relative: str) -> Sticky | None:
    """The action's own comment for ``relative`` (None outside a PR); unreadable comments count as none."""
    from github import GithubException

    if context.pull_number is None:
        return None
    try:
        return api.sticky(context.pull_number, marker(relative))
    except GithubException as error:
        why = missing_permission("sticky", error) or f"HTTP {error.status}"
        print(annotation("warning", f"could not read the pull request's comments ({why})"))
        return Sticky(comment=None)


def _post(context: Context, api: GitHubAPI, sticky: Sticky | None, body: str) -> str:
    """Create or update the action's own sticky comment; a read-only token (fork PR) is a warning."""
    from github import GithubException

    assert context.pull_number is not None and sticky is not None
    try:
        result = api.write_sticky(context.pull_number, sticky, body)
    except GithubException as error:
        head = ((context.pull_request or {}).get("head") or {}).get("repo") or {}
        if head.get("full_name") not in (None, context.repository):  # GitHub's rule, not the workflow's
            why = f"HTTP {error.status}: GitHub gives a pull request from a fork a read-only token"
        else:
            why = missing_permission("write_sticky", error) or f"HTTP {error.status}"
        message = f"could not comment on the pull request ({why}); the job summary has the same report"
        print(annotation("warning", message))
        return ""
    print(f"{'created' if result.created else 'updated'} comment {result.url}")
    return result.url


class _LabelUse:
    """Removes the launch label once its approval launched (once per run): the next commit needs a new one."""

    def __init__(self, api: GitHubAPI, context: Context, sha: str) -> None:
        self.api, self.context, self.sha = api, context, sha
        self.line = ""

    def use(self) -> None:
        number, label = self.context.pull_number, self.context.inputs.launch_label
        if self.line or number is None:
            return
        from github import GithubException

        try:
            self.api.remove_label(number, label)
        except GithubException as error:
            why = missing_permission("remove_label", error) or f"HTTP {error.status}"
            print(annotation("warning", f"could not remove the `{label}` label ({why})"))
            self.line = (
                f"the `{label}` label could not be removed (HTTP {error.status}); its approval is used up "
                f"all the same: it covered commit {self.sha[:12]} only"
            )
            return
        self.line = (
            f"removed the `{label}` label: its approval covered commit {self.sha[:12]} only; "
            "apply it again to approve a newer commit"
        )


def _report(
    context: Context,
    api: GitHubAPI,
    redactor: Redactor,
    sticky: Sticky | None,
    step: ConfigStep,
    outcome: ConfigOutcome,
    label_line: str,
    *more: str,
) -> tuple[str, str]:
    """Render one config's comment (its decisions, one line each) and post it on the PR: (url, body)."""
    outcome.decisions = [step.decision.reason, *step.lines]  # the policy's line, then this config's
    if label_line and outcome.launch is not None:
        outcome.decisions.append(label_line)
    outcome.decisions += more
    body = redactor(render(outcome, run_url=context.run_url, sha=_head_sha(context)))
    return (_post(context, api, sticky, body) if context.pull_number is not None else ""), body


def _launch_env(env: Mapping[str, str], redactor: Redactor) -> dict[str, str]:
    """The full environment for the launcher; from here on every secret value is redacted from output."""
    full = dict(env)
    hf_token = full.pop(HF_TOKEN_INPUT, "")
    if hf_token:  # the hf-token input wins over an HF_TOKEN the job may have set
        full["HF_TOKEN"] = hf_token
    for name, value in full.items():
        if is_secret_name(name):
            redactor.add(value)
    return full


def _impostor_line(sticky: Sticky, own: str) -> str:
    who = ", ".join(f"@{login} (comment {cid})" for cid, login in sticky.impostors)
    return (
        f"ignored {len(sticky.impostors)} comment(s) carrying this config's marker by {who}: "
        f"only comments written by @{own} are the action's own, so a new one is written"
    )


def _gate_status(context: Context, api: GitHubAPI, redactor: Redactor, outcome: ConfigOutcome) -> None:
    """A run with promotion gates sets the commit status ``gym / <config>``: success only when every gate holds.

    A job the action followed to its end that brought no results back (failed, cancelled, stopped by its
    TIMEOUT) sets ``error`` with how it ended, so a required check never waits on a run that is over."""
    from gym.launch.report.job import STATUS_CONTEXT, gate_status

    launch = outcome.launch
    status = gate_status(launch.results if launch is not None else None)
    if status is None and launch is not None and launch.job_id and not launch.results and context.inputs.wait:
        status = ("error", launch.detail[:140])  # GitHub keeps 140 characters of a description
    sha = _head_sha(context)
    if status is None or not sha:
        return
    from github import GithubException

    state, description = status
    try:
        api.set_status(
            sha, STATUS_CONTEXT.format(config=outcome.path), state, redactor(description), context.run_url
        )
    except GithubException as error:
        why = missing_permission("set_status", error) or f"HTTP {error.status}"
        context_name = STATUS_CONTEXT.format(config=outcome.path)
        print(annotation("error", f"could not set the commit status `{context_name}`: {why}"))
        return
    print(f"{outcome.path}: commit status {state}: {redactor(description)}")


def run(env: Mapping[str, str], launcher: Launcher, redactor: Redactor, jobs: JobControl) -> int:
    context = Context.from_env(env)
    token = env.get(TOKEN_ENV, "")
    redactor.add(token)
    if not token:
        raise ActionError(f"no GitHub token: pass the github-token input (${TOKEN_ENV} is empty)")
    from action.ghapi import GitHubAPI

    api = GitHubAPI(context, token, report_token=env.get("GYM_REPORT_TOKEN", ""))
    if context.inputs.mode in ("outdated", "rollback"):  # bump pull requests, a rollback (gym/gitops)
        from action.gitops_jobs import dispatched_rollback, open_bump_pulls

        job = open_bump_pulls if context.inputs.mode == "outdated" else dispatched_rollback
        return job(context, api, env, redactor)
    decision = _decide(context, api)
    print(f"mode: {decision.mode} ({decision.reason})")

    patterns = context.inputs.configs
    changed = _changed_files(context, api)
    configs = (
        select_configs(changed, patterns)
        if changed is not None
        else configs_in_workspace(context.workspace, patterns)
    )
    if not configs:
        note = f"No config matching {', '.join(patterns)} changed in this {context.event_name or 'run'}: nothing to do."
        print(note)
        write_summary(context.summary_file, [f"### Gym\n\n{note}\n"], redactor)
        skipped = {"results-json": "[]", "comment-url": "", "job-id": "", "mode": "skip"}
        write_outputs(context.output_file, skipped, redactor)
        return 0

    launch_env = _launch_env(env, redactor) if decision.launches else None
    public = public_env(env)
    head = _head_sha(context)
    done: list[tuple[Sticky | None, ConfigStep, ConfigOutcome]] = []
    label = _LabelUse(api, context, head)
    for relative in configs:
        sticky = _find_sticky(context, api, relative)
        previous = sticky.state if sticky is not None else None
        asked = ""
        if decision.launches and decision.approval is not None and previous is not None and previous.active:
            asked = refresh(jobs, previous)  # secrets and SkyPilot are only touched in an approved run
        step = step_for_config(decision, previous, head)
        if asked:
            step.lines.insert(0, asked)
        if sticky is not None and sticky.impostors:
            step.lines.append(_impostor_line(sticky, api.own_login))

        def cancel_previous(_: ConfigOutcome, step: ConfigStep = step) -> None:
            previous = step.cancel
            assert previous is not None
            jobs.cancel(previous)  # a LaunchError stops the launch: never two jobs side by side
            previous.state, previous.ended = "cancelled", True
            step.lines.append(
                f"cancelled the previous job {previous.job_id} (commit {previous.sha[:12]}) through "
                f"{previous.provider_name} before launching: one job per pull request and config"
            )

        def submitted(outcome: ConfigOutcome, launch: LaunchOutcome, step: ConfigStep = step,
                      sticky: Sticky | None = sticky) -> None:  # fmt: skip
            """Record the job in the comment before following it (a cancelled run still leaves it)."""
            outcome.launch = launch
            outcome.job = launched_state(step, outcome, head, wait=False)
            label.use()
            _report(
                context, api, redactor, sticky, step, outcome, label.line, "following the job until it ends"
            )
            outcome.launch = None  # the launcher's return value is the final word

        outcome = process_config(
            relative,
            workspace=context.workspace,
            decision=step.decision,
            cloud=context.inputs.cloud,
            wait=context.inputs.wait,
            public=public,
            launch_env=launch_env if step.decision.launches else None,
            launcher=launcher,
            from_pull_request=context.pull_number is not None,
            redactor=redactor,
            before_launch=cancel_previous if step.cancel is not None else None,
            on_submitted=submitted,
        )
        outcome.job = launched_state(step, outcome, head, wait=context.inputs.wait)
        done.append((sticky, step, outcome))

    if any(outcome.launch is not None for _, _, outcome in done):
        label.use()
    urls: list[str] = []
    bodies: list[str] = []
    for sticky, step, outcome in done:
        url, body = _report(context, api, redactor, sticky, step, outcome, label.line)
        for line in outcome.decisions[1:]:
            print(f"{outcome.path}: {line}")
        urls.append(url)
        bodies.append(body)

    for _, _, outcome in done:
        _gate_status(context, api, redactor, outcome)
    outcomes = [outcome for _, _, outcome in done]
    write_summary(context.summary_file, bodies, redactor)
    results = [o.as_json(url) for o, url in zip(outcomes, urls, strict=True)]
    outputs = {
        "results-json": json.dumps(results),
        "comment-url": ",".join(u for u in urls if u),
        "job-id": ",".join(str(r["job_id"]) for r in results if r["job_id"]),
        "mode": decision.mode,
    }
    write_outputs(context.output_file, outputs, redactor)
    return 0 if all(o.ok for o in outcomes) else 1


def main(
    env: Mapping[str, str] | None = None,
    launcher: Launcher | None = None,
    jobs: JobControl | None = None,
) -> int:
    """Run the action; ``env`` defaults to ``os.environ``, ``launcher`` to SkyPilot / the local runner,
    ``jobs`` (asking about and cancelling the job a newer approved commit replaces) to the provider that
    ran it (SkyPilot, or Hugging Face Jobs with the hf-token input)."""
    redactor = Redactor()
    env = os.environ if env is None else env
    try:
        return run(env, launcher or default_launcher, redactor, jobs or ProviderJobs(env))
    except ActionError as error:
        print(annotation("error", redactor(str(error))))
        return 1
    except Exception as error:  # API failures: one line, no traceback that could echo a token
        status = getattr(error, "status", None)
        if status == 401:  # GitHub checks the token on every call: nothing was read or written
            print(annotation("error", "GitHub refused the token of the github-token input (HTTP 401, bad "
                             "credentials): check the secret it comes from (the default is the workflow's github.token)"))  # fmt: skip
            return 1
        where = f" (HTTP {status})" if status else ""
        print(annotation("error", redactor(f"{type(error).__name__}{where}: {error}")[:1000]))
        return 1
