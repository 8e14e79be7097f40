"""The Action's two GitOps jobs that are not a config change: bump pull requests and rollbacks (gym/gitops/).

``mode: outdated`` (the example scheduled workflow, examples/workflows/gym-outdated.yml): for every config of
the checkout, `gym outdated` (:func:`gym.gitops.pins.outdated`); for each config whose pinned base model or
datasets moved on the Hub, one pull request on the branch ``gym/bump/<config>`` that bumps the pins, with
the plan as its sticky comment. The pull request then goes the normal way: a maintainer applies
``gym:launch``, the run is gated against the champion, and only a run that beats it reaches the Space on
merge. A config whose bump pull request is open already is left alone (one line says so).

``mode: rollback`` (``workflow_dispatch`` with the ``rollback-to`` and ``rollback-reason`` inputs): `gym
rollback` of every config, under the rule launches follow: the person who dispatched the run
(``GITHUB_ACTOR``) must have the write, maintain or admin role, read from the API at run time.

These calls need ``contents: write`` and ``pull-requests: write`` of the scheduled workflow's token; they are
not among the launch workflow's (:data:`action.ghapi.PERMISSIONS`), whose job never writes code. A 403 is
one sentence naming the permission, and nothing is left half-made (the branch is created last but one, the
pull request last).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from action.changes import configs_in_workspace, workspace_path
from action.context import ActionError, Context, public_env
from action.outputs import Redactor, annotation, write_outputs, write_summary
from action.policy import LAUNCH_ROLES, Decision

if TYPE_CHECKING:
    from action.ghapi import GitHubAPI

BRANCH_PREFIX = "gym/bump/"
WRITES = "`contents: write` and `pull-requests: write`"


def _forbidden(what: str, error: BaseException) -> str:
    status = getattr(error, "status", None)
    if status == 403:
        return (
            f"the github-token may not {what} (GitHub answered 403 'Resource not accessible by integration'): the "
            f"scheduled workflow's job needs {WRITES} under permissions:; nothing was changed"
        )
    return f"GitHub refused to {what} (HTTP {status}); nothing was changed"


def branch_for(relative: str) -> str:
    return BRANCH_PREFIX + (
        re.sub(r"[^A-Za-z0-9._-]+", "-", relative.removesuffix(".toml")).strip("-") or "gym"
    )


def open_bump_pulls(context: Context, api: GitHubAPI, env: Mapping[str, str], redactor: Redactor) -> int:
    """One bump pull request per config whose pins moved; 0 when all went well (or nothing moved)."""
    from action.run import process_config
    from gym.config import ConfigError, config_from_args
    from gym.gitops.pins import PinError, outdated, write_moves
    from gym.launch.report.render import render
    from gym.launch.report.sticky import Sticky

    lines: list[str] = []
    errors: list[str] = []  # the lines that are failures (error annotations, exit 1)
    hub_token = env.get("GYM_INPUT_HF_TOKEN") or None  # gated or private inputs are looked up with it
    redactor.add(hub_token or "")
    for relative in configs_in_workspace(context.workspace, context.inputs.configs):
        path = workspace_path(context.workspace, relative)
        try:
            config = config_from_args(path, [], env=public_env(env))
            moves, _ = outdated(config, token=hub_token)
        except (ConfigError, PinError) as error:
            errors.append(f"{relative}: {redactor(str(error).splitlines()[0])}")
            lines.append(errors[-1])
            continue
        if not moves:
            lines.append(f"{relative}: every pinned input is at the Hub's latest commit")
            continue
        branch = branch_for(relative)
        repo = api.repo
        owner = context.repository.split("/")[0]
        if list(repo.get_pulls(state="open", head=f"{owner}:{branch}")):
            lines.append(
                f"{relative}: the bump pull request of {branch} is open already; merge or close it first"
            )
            continue
        text = write_moves(path, moves)  # the runner's checkout now holds the bumped file: the plan reads it
        bumps = [move.line() for move in moves]
        try:
            base = repo.default_branch
            head_sha = repo.get_git_ref(f"heads/{base}").object.sha
            current = repo.get_contents(relative, ref=base)
            repo.create_git_ref(f"refs/heads/{branch}", head_sha)
        except Exception as error:  # noqa: BLE001 - PyGithub's GithubException: one sentence
            errors.append(f"{relative}: {_forbidden(f'create the branch {branch}', error)}")
            lines.append(errors[-1])
            continue
        try:
            commit = repo.update_file(relative, f"gym: bump the pinned inputs of {relative}", text,
                                      current.sha, branch=branch)["commit"]  # fmt: skip
            body = (
                "Bumps the Hub revisions this config trains on (`gym outdated --write`):\n\n"
                + "\n".join(f"- `{line}`" for line in bumps)
                + "\n\nA maintainer applies `gym:launch` to train it; its gates compare it with the champion."
            )
            pull = repo.create_pull(
                base=base, head=branch, title=f"gym: bump pinned inputs of {relative}", body=body
            )
        except Exception as error:  # noqa: BLE001
            errors.append(f"{relative}: {_forbidden(f'open the bump pull request from {branch}', error)}")
            lines.append(errors[-1])
            continue
        decision = Decision("plan", f"plan only: a scheduled bump of {relative}'s pinned inputs; apply "
                                    f"`{context.inputs.launch_label}` to launch it")  # fmt: skip
        outcome = process_config(relative, workspace=context.workspace, decision=decision, cloud=context.inputs.cloud,
                                 public=public_env(env), launch_env=None, launcher=_no_launch, from_pull_request=True,
                                 redactor=redactor)  # fmt: skip
        outcome.decisions = [decision.reason, *(f"bumped {line}" for line in bumps)]
        try:
            api.write_sticky(pull.number, Sticky(comment=None), redactor(render(outcome, sha=commit.sha)))
        except Exception as error:  # noqa: BLE001 - the pull request stands; its plan comment is missing
            errors.append(
                f"{relative}: opened #{pull.number} but could not comment its plan ({_forbidden('comment', error)})"
            )
            lines.append(errors[-1])
            continue
        lines.append(f"{relative}: opened #{pull.number} ({branch}): " + "; ".join(bumps))
    return _finish(context, lines, errors, redactor, "outdated")


def _no_launch(_request):  # noqa: ANN001, ANN202 - a bump pull request is only planned here
    raise ActionError("a bump pull request is planned, never launched, by the scheduled run")


def _finish(context: Context, lines: list[str], errors: list[str], redactor: Redactor, mode: str) -> int:
    """Print each line (a failure as an error annotation), write the job summary and the outputs."""
    for line in lines:
        print(annotation("error", redactor(line)) if line in errors else redactor(line))
    write_summary(
        context.summary_file, [f"### Gym {mode}\n\n" + "\n".join(f"- {line}" for line in lines)], redactor
    )
    write_outputs(
        context.output_file, {"results-json": "[]", "comment-url": "", "job-id": "", "mode": mode}, redactor
    )
    return 1 if errors else 0


def _role(api: GitHubAPI, actor: str) -> str:
    """``actor``'s role on the repository now (as the launch label's approver is read); "no" when unknown."""
    from github import GithubException

    if not actor:
        return "no"
    try:
        return str(api.repo.get_collaborator_role_name(actor))
    except GithubException:
        return "no"


def dispatched_rollback(context: Context, api: GitHubAPI, env: Mapping[str, str], redactor: Redactor) -> int:
    """`gym rollback` of every config, when the person who dispatched it may launch."""
    from gym.config import ConfigError, config_from_args
    from gym.gitops.rollback import RollbackError, rollback

    if context.event_name != "workflow_dispatch":
        raise ActionError(
            f"mode rollback runs only on workflow_dispatch, not on {context.event_name or 'this event'}"
        )
    actor = env.get("GITHUB_ACTOR", "") or str((context.event.get("sender") or {}).get("login") or "")
    role = _role(api, actor)
    if role not in LAUNCH_ROLES:
        errors = [
            f"rollback refused: @{actor or 'unknown'} has {role} permission (rolling back needs write, maintain or admin)"
        ]
        return _finish(context, errors, errors, redactor, "rollback")
    to = env.get("GYM_INPUT_ROLLBACK_TO", "").strip() or None
    reason = env.get("GYM_INPUT_ROLLBACK_REASON", "").strip() or f"workflow_dispatch by @{actor}"
    token = env.get("GYM_INPUT_HF_TOKEN") or None
    redactor.add(token or "")
    lines: list[str] = []
    errors: list[str] = []  # the lines that are failures (error annotations, exit 1)
    for relative in configs_in_workspace(context.workspace, context.inputs.configs):
        try:
            config = config_from_args(workspace_path(context.workspace, relative), [], env=public_env(env))
            done = rollback(
                config, to=to, reason=reason, token=token, echo=lambda text: print(redactor(text))
            )
        except (ConfigError, RollbackError) as error:
            errors.append(f"{relative}: {redactor(str(error).splitlines()[0])}")
            lines.append(errors[-1])
            continue
        lines.append(f"{relative}: @{actor} ({role}) rolled {done.repo} back to {done.serves[:12]} (Hub commit "
                     f"{done.commit[:12]}{', Space commit ' + done.space_commit[:12] if done.space_commit else ''})")  # fmt: skip
    return _finish(context, lines, errors, redactor, "rollback")
