"""The action's entrypoint: event → configs to run → mode → validate/plan/launch → comment, summary, outputs.

:func:`main` takes the environment and the launcher as arguments, so tests drive the real thing with
event fixtures, a GitHub API server on 127.0.0.1 and a recording launcher. Exit status: 0 when every
config is valid (and, when launching, launched); 1 otherwise, so the check fails on a broken gym.toml.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from action.changes import ChangedFile, configs_in_workspace, select_configs
from action.context import ActionError, Context, is_secret_name, public_env
from action.launchers import Launcher, default_launcher
from action.outcome import ConfigOutcome
from action.outputs import Redactor, annotation, write_outputs, write_summary
from action.policy import Decision, decide
from action.render import marker, render
from action.run import process_config

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


def _decide(context: Context, api: GitHubAPI) -> Decision:
    """The policy's decision; labels are read from the API only for a same-repository PR that may launch."""
    inputs = context.inputs
    pull = api.pull_facts(context.pull_number) if context.pull_number is not None else None
    if pull is not None and not pull.is_fork and inputs.mode in ("auto", "launch"):
        pull = dataclasses.replace(pull, labels=api.labels(pull.number))
    return decide(
        inputs.mode,
        context.event_name,
        pull=pull,
        label=inputs.launch_label,
        default_branch_push=context.is_default_branch_push,
    )


def _post(context: Context, api: GitHubAPI, outcome: ConfigOutcome, body: str) -> str:
    """Create or update the sticky comment; a read-only token (fork PR) is a warning, not a failure."""
    from github import GithubException

    assert context.pull_number is not None
    try:
        result = api.upsert_comment(context.pull_number, marker(outcome.path), body)
    except GithubException as error:
        message = f"could not comment on the pull request (HTTP {error.status}); the job summary has the same report"
        print(annotation("warning", message))
        return ""
    print(f"{'created' if result.created else 'updated'} comment {result.url}")
    return result.url


def _head_sha(context: Context) -> str:
    pull = context.pull_request
    if pull:
        return str(pull.get("head", {}).get("sha") or "")
    return str(context.event.get("after") or context.extra.get("sha") or "")


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


def run(env: Mapping[str, str], launcher: Launcher, redactor: Redactor) -> int:
    context = Context.from_env(env)
    token = env.get(TOKEN_ENV, "")
    redactor.add(token)
    if not token:
        raise ActionError(f"no GitHub token: pass the github-token input (${TOKEN_ENV} is empty)")
    from action.ghapi import GitHubAPI

    api = GitHubAPI(context, token)
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
    outcomes: list[ConfigOutcome] = []
    urls: list[str] = []
    bodies: list[str] = []
    for relative in configs:
        outcome = process_config(
            relative,
            workspace=context.workspace,
            decision=decision,
            cloud=context.inputs.cloud,
            wait=context.inputs.wait,
            public=public,
            launch_env=launch_env,
            launcher=launcher,
            from_pull_request=context.pull_number is not None,
            redactor=redactor,
        )
        body = redactor(render(outcome, run_url=context.run_url, sha=_head_sha(context)))
        urls.append(_post(context, api, outcome, body) if context.pull_number is not None else "")
        outcomes.append(outcome)
        bodies.append(body)

    write_summary(context.summary_file, bodies, redactor)
    results = [o.as_json(url) for o, url in zip(outcomes, urls, strict=True)]
    job_ids = [o.launch.job_id for o in outcomes if o.launch and o.launch.job_id]
    outputs = {
        "results-json": json.dumps(results),
        "comment-url": ",".join(u for u in urls if u),
        "job-id": ",".join(job_ids),
        "mode": decision.mode,
    }
    write_outputs(context.output_file, outputs, redactor)
    return 0 if all(o.ok for o in outcomes) else 1


def main(env: Mapping[str, str] | None = None, launcher: Launcher | None = None) -> int:
    """Run the action; ``env`` defaults to ``os.environ``, ``launcher`` to SkyPilot / the local runner."""
    redactor = Redactor()
    try:
        return run(os.environ if env is None else env, launcher or default_launcher, redactor)
    except ActionError as error:
        print(annotation("error", redactor(str(error))))
        return 1
    except Exception as error:  # API failures: one line, no traceback that could echo a token
        status = getattr(error, "status", None)
        where = f" (HTTP {status})" if status else ""
        print(annotation("error", redactor(f"{type(error).__name__}{where}: {error}")[:1000]))
        return 1
