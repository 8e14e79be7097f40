"""One config through the decided mode: validate → plan → launch, each step reported, none raising.

Validation and planning see :func:`action.context.public_env` only. The launch step alone gets the
full environment, and only when :func:`action.policy.decide` said ``launch``. A launch from a pull
request never pushes to the Hub (``hub.push = none``): the PR shows numbers, the merge publishes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from action.changes import workspace_path
from action.context import ActionError
from action.launchers import Launcher, LaunchRequest
from action.outputs import Redactor, annotation
from action.policy import Decision
from action.pricing import estimate
from gym.launch.report.outcome import ConfigOutcome, LaunchOutcome, PlanView

if TYPE_CHECKING:
    from gym.config import ConfigError, ConfigIssue, GymConfig

LOCAL_STAGES = ["train", "eval", "card", "deploy"]


def _space_plan_notes(config: GymConfig) -> list[str]:
    """The Space's hardware checked against its owner's plan before anything runs; a refusal stops the plan."""
    import os

    from gym.hub.plans import PlanError, check_space_plan
    from gym.launch.task import LaunchError

    if config.hub is None or config.space is None or config.hub.push == "none":
        return []
    try:
        note = check_space_plan(config)
    except PlanError as error:
        raise LaunchError(str(error)) from None
    if note is None and not os.environ.get(config.hub.token_env):
        return [f"Space hardware {config.space.hardware!r} is not checked against the owner's plan: "
                f"${config.hub.token_env} is not set for this step"]  # fmt: skip
    return [f"Space hardware {note}"] if note else []


def plan_view(
    config: GymConfig,
    path: Path,
    flags: list[str],
    *,
    cloud: bool,
    workspace: Path,
    env: Mapping[str, str] | None = None,
) -> PlanView:
    """The plan a reviewer sees; raises :class:`gym.launch.task.LaunchError` when it cannot launch.

    ``env`` (the public environment) names the repository (the SkyPilot job name is scoped to it and the
    config) and the SkyPilot API server: without one, the plan says that the job cannot be tracked by a
    later run."""
    from gym.hub.space import space_token_of
    from gym.launch.task import build_plan, check_dataset_files, secret_specs

    space_token = space_token_of(config.hub, config.space)
    space_notes = [f"the Space gets {space_token}"] if space_token else []
    space_notes += _space_plan_notes(config)
    from gym.eval.judge import plan_note

    judge_note = plan_note(config)  # [eval.judge]: the judge's call and token caps
    space_notes += [judge_note] if judge_note else []
    if not cloud:
        check_dataset_files(config)  # a Git LFS pointer instead of data: the checkout's `lfs: true`
        publishes = config.hub is not None or config.space is not None
        stages = LOCAL_STAGES if publishes else LOCAL_STAGES[:3]
        if config.eval.gates.rules:  # checked between eval and the card; a failed gate stops the push
            stages = [*stages[:2], "gates", *stages[2:]]
        secrets = [s.name for s in secret_specs(config)]
        return PlanView(target="runner", stages=stages, secrets=secrets, notes=space_notes)
    if config.compute is not None and config.compute.provider == "hf-jobs":
        from action.hf_jobs import plan_view as hf_jobs_plan

        return hf_jobs_plan(config, flags, env or {}, space_notes)
    plan = build_plan(config, path, flags, cwd=workspace, env=env)
    from gym.launch.sky_server import NO_TEAM_SERVER, is_team_server

    server_notes = [] if is_team_server(env) else [NO_TEAM_SERVER]
    resources = plan.task.get("resources", {})
    accelerators = [resources["accelerators"]] if "accelerators" in resources else []
    accelerators += [str(c.get("accelerators")) for c in resources.get("any_of", [])]
    names = [spec.name for spec in plan.secrets]
    try:
        from gym.launch.cloud import REDACTED, redacted_yaml

        task_yaml = redacted_yaml(plan, dict.fromkeys(names, REDACTED))
    except ImportError:  # PyYAML missing: the table still says everything that matters
        task_yaml = ""
    compute = config.compute
    num_nodes = int(plan.task.get("num_nodes") or 1)
    use_spot = bool(resources.get("use_spot"))
    price = estimate(
        [str(a) for a in accelerators], use_spot=use_spot, num_nodes=num_nodes, infra=resources.get("infra")
    )
    hours = compute.max_runtime_hours if compute is not None else 0
    if hours:
        runtime = (
            f"{hours:g} h, then the run is stopped (`compute.max_runtime_hours`; "
            "the clock restarts when a managed job recovers from preemption)"
        )
    else:
        runtime = (
            "no limit (`compute.max_runtime_hours = 0`): until train → eval → card end or it is cancelled"
        )
    if not plan.managed and compute is not None:
        runtime += f"; the cluster is torn down after {compute.autostop_minutes} idle minutes"
    return PlanView(
        target="cloud",
        price=price.summary(num_nodes, hours)
        + "".join(f"; {k}: {v}" for k, v in price.per_candidate.items()),
        max_runtime=runtime,
        name=plan.name,
        accelerators=[str(a) for a in accelerators],
        use_spot=use_spot,
        managed=plan.managed,
        num_nodes=num_nodes,
        infra=resources.get("infra"),
        secrets=names,
        notes=[*plan.notes, *server_notes, *space_notes],
        task_yaml=task_yaml,
    )


def _issues(error: ConfigError, relative: str, path: Path) -> list[ConfigIssue]:
    """The config's problems with the file named as in the repository, not as seen from the cwd."""
    fixed = []
    for issue in error.issues:
        same = issue.source not in ("", "command line") and Path(issue.source).resolve() == path
        fixed.append(dataclasses.replace(issue, source=relative) if same else issue)
    return fixed


def process_config(
    relative: str,
    *,
    workspace: Path,
    decision: Decision,
    cloud: bool,
    public: Mapping[str, str],
    launch_env: Mapping[str, str] | None,
    launcher: Launcher,
    from_pull_request: bool,
    redactor: Redactor,
    emit: Callable[[str], None] = print,
    wait: bool = False,
    before_launch: Callable[[ConfigOutcome], None] | None = None,
    on_submitted: Callable[[ConfigOutcome, LaunchOutcome], None] | None = None,
) -> ConfigOutcome:
    """Validate, plan and (when ``decision`` launches) launch one config; never raises.

    ``before_launch`` runs once the config is valid and planned, right before the launcher (the
    action cancels the job a new approval replaces there); a :class:`LaunchError` from it stops the
    launch and is reported. ``on_submitted`` hears of a cloud job before the launcher follows it.
    """
    from gym.config import ConfigError, config_from_args
    from gym.launch.task import LaunchError

    outcome = ConfigOutcome(path=relative, mode=decision.mode, reason=decision.reason)
    try:
        path = workspace_path(workspace, relative)
        config = config_from_args(path, [], env=public)
    except ActionError as error:
        outcome.error = str(error)
        emit(annotation("error", outcome.error))
        return outcome
    except ConfigError as error:
        for issue in _issues(error, relative, path):
            outcome.issues.append(redactor(str(issue)))
            message = redactor(f"{issue.key}: {issue.message}" if issue.key else issue.message)
            emit(annotation("error", message, file=issue.source if issue.source == relative else "",
                            line=issue.line, col=issue.column))  # fmt: skip
        return outcome
    emit(f"{relative}: valid")
    if decision.mode == "validate":
        return outcome

    flags: list[str] = []
    if from_pull_request and config.hub is not None and config.hub.push != "none":
        flags = ["--set", "hub.push=none"]
    try:
        outcome.plan = plan_view(config, path, flags, cloud=cloud, workspace=workspace, env=public)
    except LaunchError as error:
        outcome.error = redactor(str(error))
        emit(annotation("error", outcome.error, file=relative))
        return outcome
    if not decision.launches or launch_env is None:
        return outcome

    def echo(text: str) -> None:
        for line in redactor(str(text)).splitlines() or [""]:
            outcome.log.append(line)
            print(line, flush=True)

    try:
        config = config_from_args(path, flags, env=launch_env)  # ${VARS} expand as on a real run
        if before_launch is not None:
            before_launch(outcome)
        outcome.launch = launcher(
            LaunchRequest(
                config=config,
                config_path=path,
                flags=flags,
                cloud=cloud,
                env=launch_env,
                echo=echo,
                wait=wait,
                on_submitted=lambda launch: on_submitted(outcome, launch) if on_submitted else None,
            )  # fmt: skip
        )
    except (ConfigError, LaunchError) as error:
        outcome.error = redactor(str(error))
    except Exception as error:  # a launcher's failure is reported, never a traceback with secrets
        first = next((line for line in str(error).splitlines() if line.strip()), "")
        outcome.error = redactor(f"{type(error).__name__}: {first}".rstrip(": "))
    if outcome.error:
        emit(annotation("error", outcome.error, file=relative))
    return outcome
