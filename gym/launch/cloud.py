"""`gym launch --cloud`, `gym status`, `gym logs`: the only Gym module that imports SkyPilot.

SkyPilot's SDK talks to an API server (a local one it starts by itself, or the team's); every call
returns a request id that :func:`sky.stream_and_get` / :func:`sky.get` resolve. A dry run stops after
:meth:`sky.Task.from_yaml_config` has checked the task, so it needs neither a server nor credentials.

Secret values reach SkyPilot only as ``secrets_overrides``: they are neither in the dict the task is
parsed from (SkyPilot keeps that text as the "user-specified YAML" it sends along) nor in any script,
printed YAML or error message.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym import __version__
from gym.launch import sky_server
from gym.launch.node_extras import node_extras
from gym.launch.task import CloudPlan, LaunchError, build_plan, run_name, secret_values
from gym.launch.templates import dump_yaml

if TYPE_CHECKING:
    import sky

    from gym.config import GymConfig

REDACTED = "<redacted>"
Echo = Callable[[str], None]


@dataclass
class LaunchResult:
    """What a launch returned: the API request id and, once it resolved, the job id."""

    name: str
    managed: bool
    request_id: str | None = None
    job_id: int | None = None
    yaml: str | None = None


def scrub(text: str, secrets: Mapping[str, str]) -> str:
    """``text`` with every secret value replaced, for messages built from third-party exceptions."""
    for value in secrets.values():
        if value:
            text = text.replace(value, "***")
    return text


def _one_line(error: BaseException, secrets: Mapping[str, str]) -> str:
    """The first line of a third-party error, scrubbed of ``secrets`` and of the API server's credentials."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    message = lines[0] if lines else type(error).__name__
    return scrub(message, {**secrets, **sky_server.credentials()})


def _sky() -> Any:
    """SkyPilot's SDK, after an empty $SKYPILOT_API_SERVER_ENDPOINT (an unset repository secret) is dropped."""
    sky_server.drop_empty_endpoint()
    import sky

    return sky


def _is_gone(error: BaseException) -> bool:
    """SkyPilot's answer for a cluster that is torn down (or stopped): its jobs went with it."""
    from sky import exceptions

    return isinstance(error, (exceptions.ClusterDoesNotExist, exceptions.ClusterNotUpError))


def _missing_bucket(error: BaseException, bucket: str) -> str | None:
    """One sentence for SkyPilot's refusal of a checkpoint bucket that does not exist (it never creates one
    named as a ``source``: sky/data/storage.py, "Attempted to use a non-existent bucket as a source")."""
    from sky import exceptions

    if not bucket or not isinstance(error, exceptions.StorageBucketGetError):
        return None
    return (
        f"compute.checkpoint_bucket: SkyPilot found no bucket {bucket} ({_one_line(error, {})}); create it "
        "or fix the name in gym.toml (a bucket named as a source is never created), then launch again"
    )


def redacted_yaml(plan: CloudPlan, secrets: Mapping[str, str]) -> str:
    """The task as YAML, each secret shown by name with its value redacted."""
    data = copy.deepcopy(plan.task)
    if secrets:
        data["secrets"] = {name: REDACTED for name in secrets}
    return dump_yaml(data)


def to_sky_task(plan: CloudPlan, secrets: Mapping[str, str]) -> sky.Task:
    """Parse and validate the task with SkyPilot's own schema (no server, no credentials)."""
    sky = _sky()

    try:
        # from_yaml_config empties the dict it gets, and records it as the user's YAML: pass a copy that
        # holds no secret value, and the values as overrides.
        return sky.Task.from_yaml_config(copy.deepcopy(plan.task), secrets_overrides=list(secrets.items()))
    except Exception as error:  # SkyPilot raises ValueError, its own exceptions, schema errors
        raise LaunchError(f"SkyPilot rejected the task: {_one_line(error, secrets)}") from None


def _job_id(result: Any, managed: bool) -> int | None:
    """Pick the job id out of a launch request's return value ((job_ids, handle) or (job_id, handle))."""
    if not isinstance(result, (tuple, list)) or not result:
        return None
    first = result[0]
    if managed and isinstance(first, (list, tuple)):
        return first[0] if first else None
    return first if isinstance(first, int) else None


def _check_space_plan(config: GymConfig) -> None:
    """The Space's hardware against its owner's plan, here, before a cloud machine is paid for."""
    from gym.hub.plans import PlanError, check_space_plan

    try:
        check_space_plan(config)
    except PlanError as error:
        raise LaunchError(str(error)) from None


def launch_cloud(
    config: GymConfig,
    config_path: Path | None,
    *,
    dryrun: bool,
    flags: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    detach: bool = False,
    echo: Echo = print,
    warn: Echo = print,
    report_to: str | None = None,
) -> LaunchResult:
    """Launch ``config`` on the cloud through SkyPilot (or, with ``dryrun``, print the checked task).

    ``flags`` are the command-line overrides already applied to ``config``; the remote `gym launch`
    receives them too. ``report_to`` (a :class:`gym.launch.report.job.ReportTarget` as JSON) makes the job
    report back to its pull request itself, with ``$GYM_REPORT_TOKEN`` passed as a secret. Raises :class:`LaunchError` (one sentence, nothing sent) on a user mistake.
    """
    extras = ",".join(
        node_extras(config, report_back=bool(report_to))
    )  # action: PyGithub, for the report-back
    plan = build_plan(
        config, config_path, flags, pip_spec=f"zoo-gym[{extras}]=={__version__}", report_to=report_to, env=env
    )
    secrets, missing = secret_values(plan.secrets, env, require=not dryrun)
    _check_space_plan(config)
    for note in plan.notes:
        warn(f"note: {note}")
    result = LaunchResult(name=plan.name, managed=plan.managed)
    if dryrun:
        for spec in missing:
            warn(f"note: ${spec.name} is not set here; a real launch needs it ({spec.reason})")
        shown = {name: REDACTED for name in secrets}
        to_sky_task(plan, shown)  # validate with placeholders: a dry run never touches a secret value
        result.yaml = redacted_yaml(plan, shown)
        echo(result.yaml)
        return result

    task = to_sky_task(plan, secrets)
    sky = _sky()

    try:
        if plan.managed:
            request_id = sky.jobs.launch(task, name=plan.name)
        else:
            request_id = sky.launch(
                task,
                cluster_name=plan.name,
                idle_minutes_to_autostop=plan.autostop_minutes,
                down=True,
            )
        result.request_id = str(request_id)
        echo(
            f"submitted {'managed job' if plan.managed else 'cluster launch'} {plan.name}: request {request_id}"
        )
        if detach:
            echo(f"follow it with: sky api logs {request_id}")
            return result
        result.job_id = _job_id(sky.stream_and_get(request_id), plan.managed)
    except Exception as error:
        bucket = config.compute.checkpoint_bucket if config.compute is not None else ""
        missing = _missing_bucket(error, bucket.rstrip("/"))
        raise LaunchError(missing or f"cloud launch failed: {_one_line(error, secrets)}") from None
    where = "managed job" if plan.managed else f"job on cluster {plan.name}"
    echo(f"{where} id: {result.job_id}")
    target = f" {config_path}" if config_path is not None else ""
    echo(f"follow it with: gym logs{target}   (jobs and recoveries: gym status{target})")
    return result


# What each of SkyPilot's end states (other than SUCCEEDED) means for the run, for `gym status` and `gym logs`.
END_STATES = {
    "FAILED": "its run exited with an error on a node (the log shows where)",
    "FAILED_SETUP": "its setup failed: installing Gym on the node did not work (the log shows pip's error)",
    "FAILED_NO_RESOURCE": "it never started: no enabled cloud had the requested accelerators; add candidates "
    "to compute.accelerators or change compute.infra",
    "FAILED_PRECHECKS": "SkyPilot refused to start it (its checks of the task failed)",
    "FAILED_CONTROLLER": "SkyPilot's jobs controller failed while running it",
    "FAILED_DRIVER": "its driver process on the cluster failed",
    "CANCELLED": "it was cancelled",
}
# SkyPilot's log exit codes (sky.exceptions.JobExitCode) that carry no end state of their own.
NOT_FINISHED, NOT_FOUND = 101, 102


def ended_sentence(job_id: Any, status: str) -> str | None:
    """One sentence saying how the job ended, or None when it succeeded or has not ended."""
    meaning = END_STATES.get(status)
    return f"job {job_id} ended {status}: {meaning}" if meaning else None


def _run_name(config: GymConfig) -> tuple[str, bool]:
    if config.compute is None:
        raise LaunchError("this gym.toml has no [compute] table, so it has no cloud run to look at")
    return run_name(config), config.compute.managed


def _field(record: Any, key: str) -> Any:
    if isinstance(record, Mapping):
        return record.get(key)
    return getattr(record, key, None)


def cloud_status(config: GymConfig, *, echo: Echo = print) -> list[Any]:
    """Print the run's jobs from SkyPilot's queue (managed jobs queue, or the cluster's job queue)."""
    sky = _sky()

    name, managed = _run_name(config)
    try:
        if managed:
            records, *_ = sky.get(sky.jobs.queue_v2(refresh=False, name_match=name))
            records = [r for r in records if _field(r, "job_name") == name]
        else:
            records = sky.get(sky.queue(name))
    except Exception as error:
        if not managed and _is_gone(error):
            echo(f"no cluster {name} is up: it is torn down once its job has ended (compute.managed = false), "
                 "and its jobs with it; `gym launch --cloud` starts a new one")  # fmt: skip
            return []
        raise LaunchError(f"could not read the job queue of {name}: {_one_line(error, {})}") from None
    if not records:
        echo(f"no jobs found for {name}")
    for record in records:
        status = _field(record, "status")
        status = getattr(status, "value", status)
        line = f"{_field(record, 'job_id')}\t{name}\t{status}"
        if managed:
            line += f"\trecoveries: {_field(record, 'recovery_count') or 0}"
        echo(line)
        sentence = ended_sentence(_field(record, "job_id"), str(status))
        if sentence:
            echo(f"  {sentence}")
    return records


def wait_for_results(config: GymConfig, job_id: int, *, managed: bool = True) -> dict[str, Any] | None:
    """Follow the job's log until it ends; the eval results it printed (``gym launch`` with
    ``GYM_EMIT_RESULTS=1``, set by the train task), or None when it printed none (failed, no eval)."""
    sky = _sky()

    from gym.launch.results import results_from_lines

    name, _ = _run_name(config)
    try:
        if managed:
            lines = sky.jobs.tail_logs(job_id=job_id, follow=True, preload_content=False)
        else:
            lines = sky.tail_logs(name, job_id, True, preload_content=False)
        return results_from_lines(lines)
    except Exception as error:
        raise LaunchError(f"could not follow the logs of {name}: {_one_line(error, {})}") from None


def cloud_logs(config: GymConfig, *, job_id: int | None = None, follow: bool = True) -> int | None:
    """Tail the run's logs (the latest job unless ``job_id``); returns SkyPilot's exit code."""
    sky = _sky()

    name, managed = _run_name(config)
    try:
        if managed:
            return sky.jobs.tail_logs(name=None if job_id else name, job_id=job_id, follow=follow)
        return sky.tail_logs(name, job_id, follow)
    except Exception as error:
        raise LaunchError(f"could not read the logs of {name}: {_one_line(error, {})}") from None


def logs_outcome(config: GymConfig, code: int, job_id: int | None = None) -> str:
    """The sentence for a non-zero exit code of `gym logs`: how the job ended, read from SkyPilot's queue."""
    name, managed = _run_name(config)
    if code == NOT_FOUND:
        return f"no job found for {name}" + (f" with id {job_id}" if job_id is not None else "")
    if code == NOT_FINISHED:
        return f"the job of {name} has not ended yet; `gym logs` without --no-follow follows it to the end"
    if job_id is None:
        records = cloud_status(config, echo=lambda _: None)
        job_id = max((_field(r, "job_id") for r in records), default=None)
    found = job_status(name, int(job_id), managed=managed) if job_id is not None else None
    sentence = ended_sentence(job_id, found[0]) if found else None
    return sentence or f"the job of {name} did not succeed (SkyPilot exit code {code})"


def how_job_ended(name: str, job_id: int, *, managed: bool, settle_s: float = 15.0) -> str | None:
    """:func:`ended_sentence` for the job as SkyPilot's queue has it; None when it succeeded, has not
    ended or cannot be asked.

    Called when the job's log has ended: the queue may record the final state a moment later (or one
    request may fail on a busy server), so it is asked again, once a second, for up to ``settle_s``
    until it says the job ended.
    """
    import time

    deadline = time.monotonic() + settle_s
    while True:
        try:
            found = job_status(name, job_id, managed=managed)
        except LaunchError:
            found = None
        if (found is not None and found[1]) or time.monotonic() >= deadline:
            return ended_sentence(job_id, found[0]) if found else None
        time.sleep(1)


def find_job(name: str, job_id: int, *, managed: bool) -> Any | None:
    """SkyPilot's record of job ``job_id`` (whatever its name), or None when this server has none.

    A managed job is looked up by id in the jobs queue (the caller's own jobs, as SkyPilot shows them), a
    cluster job in the queue of cluster ``name``; a cluster that is torn down has no jobs. Raises
    :class:`LaunchError` (one sentence) when SkyPilot cannot be asked.
    """
    sky = _sky()

    try:
        if managed:
            records, *_ = sky.get(sky.jobs.queue_v2(refresh=False, job_ids=[int(job_id)]))
        else:
            records = sky.get(sky.queue(name))
    except Exception as error:
        if not managed and _is_gone(error):
            return None
        raise LaunchError(f"could not read the state of job {job_id}: {_one_line(error, {})}") from None
    return next((r for r in records or [] if _field(r, "job_id") == int(job_id)), None)


def _name_of(record: Any, name: str, managed: bool) -> str:
    return str(_field(record, "job_name") or "") if managed else name  # a cluster's jobs are the cluster's


def cancel_job(name: str, job_id: int, *, managed: bool) -> None:
    """Cancel job ``job_id`` named ``name``: a managed job by id (``sky.jobs.cancel``), or a job on the
    run's cluster; never a job of another name (the id may have been reused on another server).

    Used by the GitHub Action when a newer approved commit replaces a running job, so a pull request
    never has two paid jobs for one config. A job SkyPilot no longer knows (or whose cluster is gone)
    has nothing to cancel. Raises :class:`LaunchError` (one sentence) when the id belongs to another
    job, or SkyPilot refuses or cannot be reached; the caller then does not launch the replacement.
    """
    sky = _sky()

    record = find_job(name, job_id, managed=managed)
    if record is None:
        return
    other = _name_of(record, name, managed)
    if other != name:
        raise LaunchError(
            f"job {job_id} on this SkyPilot API server is `{other}`, not `{name}`: another run's job, so it "
            "is not cancelled"
        )
    try:
        if managed:
            sky.get(sky.jobs.cancel(job_ids=[int(job_id)]))
        else:
            sky.get(sky.cancel(name, job_ids=[int(job_id)]))
    except Exception as error:
        if not managed and _is_gone(error):
            return
        kind = "managed job" if managed else f"job on cluster {name}"
        raise LaunchError(f"could not cancel {kind} {job_id}: {_one_line(error, {})}") from None


def job_status(name: str, job_id: int, *, managed: bool) -> tuple[str, bool] | None:
    """SkyPilot's status of job ``job_id`` named ``name`` (e.g. ``RUNNING``) and whether it has ended;
    None when SkyPilot has no such job (none with that id, or its id is another job's now).

    Raises :class:`LaunchError` (one sentence) when SkyPilot cannot be asked.
    """
    record = find_job(name, job_id, managed=managed)
    if record is None or _name_of(record, name, managed) != name:
        return None
    status = _field(record, "status")
    ended = bool(status.is_terminal()) if hasattr(status, "is_terminal") else False
    return str(getattr(status, "value", status)), ended
