"""Launch, follow and cancel a run on Hugging Face Jobs through huggingface_hub's client (``run_job`` & co).

The job's command installs Gym in the image (the released ``zoo-gym[train,eval]==VERSION``, or the staged
wheel of a dev build), copies the mounted inputs to a writable folder and runs ``gym launch`` on them: the
same stages as on a SkyPilot node. Secrets are passed *by name* from this environment (the Hub token, the
Space's API key, the report-back token...) and never printed: the dry run shows their names only. Jobs are
found again by their labels (``gym-project``), so ``gym status``/``gym logs`` and a later launch see the
runs an earlier machine started.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.launch.hf_jobs.flavors import account_problem, gpu_count, hub_flavors, price_line

if TYPE_CHECKING:
    from gym.config import GymConfig

INPUTS = "/gym-inputs"  # the staged commit, read-only
CHECKPOINTS = "/checkpoints"  # compute.checkpoint_volume, read-write
GPU_IMAGE = "pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime"
CPU_IMAGE = "python:3.12"
DEFAULT_TIMEOUT = "30 minutes"  # what the Hub stops a job after when it names no timeout
ENDED = {"COMPLETED", "ERROR", "CANCELED", "DELETED"}
Echo = Callable[[str], None]


@dataclass
class JobSpec:
    """What ``run_job`` receives; ``secrets`` holds names here, values only at launch."""

    image: str
    command: list[str]
    flavor: str
    env: dict[str, str] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)
    timeout: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    volumes: list[dict[str, Any]] = field(default_factory=list)

    def lines(self, hours: float) -> list[str]:
        out = [f"image    {self.image}", f"flavor   {price_line(self.flavor, hours)}",
               f"timeout  {self.timeout or DEFAULT_TIMEOUT + ' (the Hub default: set compute.max_runtime_hours)'}",
               f"command  {' '.join(self.command)}", f"secrets  {', '.join(self.secrets) or '(none)'} (by name)",
               f"labels   {json.dumps(self.labels, sort_keys=True)}"]  # fmt: skip
        out += [f"volume   {v['type']} {v['source']} -> {v['mountPath']} ({'read-only' if v.get('readOnly') else 'read-write'})"
                for v in self.volumes]  # fmt: skip
        return out


def _run_command(
    config: GymConfig, flags: Sequence[str], wheel: str | None, env: Mapping[str, str] | None = None
) -> list[str]:
    from gym import __version__
    from gym.launch.node_extras import node_extras
    from gym.launch.task import remote_flags

    extras = ",".join(node_extras(config, report_back="GYM_REPORT_TO" in (env or {})))
    package = f"{INPUTS}/{wheel}[{extras}]" if wheel else f"zoo-gym[{extras}]=={__version__}"
    volume = config.compute is not None and config.compute.checkpoint_volume
    output = ["--output_dir", f"{CHECKPOINTS}/{config.project.name}"] if volume else []
    gym = ["gym", "launch", "gym.toml", *remote_flags(config, flags), *output]
    work = '"${TMPDIR:-/tmp}/gym-job"'  # the mount is read-only: the run works on a copy
    script = (f"set -e; python -m pip install -q {shlex.quote(package)}; cp -r {INPUTS} {work}; cd {work}; "
              f"exec {' '.join(shlex.quote(a) for a in gym)}")  # fmt: skip
    return ["bash", "-c", script]


def build_spec(config: GymConfig, flags: Sequence[str], staged_repo: str, revision: str, wheel: str | None,
               secrets: Sequence[str], env: Mapping[str, str] | None = None,
               labels: Mapping[str, str] | None = None) -> JobSpec:  # fmt: skip
    compute = config.compute
    assert compute is not None and compute.provider == "hf-jobs"
    volumes = [
        {
            "type": "dataset",
            "source": staged_repo,
            "mountPath": INPUTS,
            "revision": revision,
            "readOnly": True,
        }
    ]
    if compute.checkpoint_volume:
        volumes.append({"type": "bucket", "source": compute.checkpoint_volume.partition(":")[2],
                        "mountPath": CHECKPOINTS, "readOnly": False})  # fmt: skip
    hours = compute.max_runtime_hours
    return JobSpec(
        image=GPU_IMAGE if gpu_count(compute.flavor) else CPU_IMAGE,
        command=_run_command(config, flags, wheel, env),
        flavor=compute.flavor,
        env={"HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONUNBUFFERED": "1", **(env or {})},
        secrets=list(dict.fromkeys(secrets)),
        timeout=f"{int(hours * 3600)}s" if hours else None,
        labels={"gym-project": config.project.name, **(labels or {})},
        volumes=volumes,
    )


def _api(token: str | None) -> Any:
    from huggingface_hub import HfApi

    return HfApi(token=token)


def _phrase(error: BaseException, doing: str) -> str:
    from gym.hub.space_errors import describe_hub_error

    return describe_hub_error(error, doing, "HF_TOKEN")


def launch_hf_job(config: GymConfig, config_path: Path, *, dryrun: bool, flags: Sequence[str] = (),
                  env: Mapping[str, str] | None = None, echo: Echo = print, warn: Echo = print,
                  extra_env: Mapping[str, str] | None = None, report_to: str | None = None,
                  emit_results: bool = False) -> Any:  # fmt: skip
    """Stage the inputs, then run the job (or, with ``dryrun``, print its spec and price and send nothing).

    The job carries the label ``gym-run`` = :func:`gym.launch.task.run_name` (repository + config), by which a
    later run (the Action's) tells its own job from any other. ``report_to`` (a report target as JSON) makes
    the job post its results to the pull request itself, with ``$GYM_REPORT_TOKEN`` as a secret by name;
    ``emit_results`` makes it print them as one marked log line for a follower (:mod:`gym.launch.results`).
    """
    from huggingface_hub import Volume

    from gym.launch.hf_jobs.staging import stage
    from gym.launch.results import ENV as EMIT_ENV
    from gym.launch.task import (
        REPORT_TARGET_ENV,
        REPORT_TOKEN_ENV,
        LaunchError,
        SecretSpec,
        run_name,
        secret_specs,
    )

    source = env if env is not None else os.environ
    token_env = config.hub.token_env if config.hub else "HF_TOKEN"
    token = source.get(token_env) or source.get("HF_TOKEN")
    specs = [s for s in secret_specs(config) if s.name not in (token_env, "HF_TOKEN")]
    job_env = dict(extra_env or {})
    if report_to:
        job_env[REPORT_TARGET_ENV] = report_to
        specs.append(
            SecretSpec(REPORT_TOKEN_ENV, True, "reporting the finished run back to the pull request")
        )
    if emit_results:
        job_env[EMIT_ENV] = "1"
    labels = {"gym-run": run_name(config, source)}
    missing = [s.name for s in specs if s.required and not source.get(s.name)]
    names = ["HF_TOKEN", *(s.name for s in specs if dryrun or source.get(s.name))]
    compute = config.compute
    assert compute is not None
    if dryrun:
        spec = build_spec(
            config,
            flags,
            "<you>/gym-staging-" + config.project.name,
            "<commit>",
            None,
            names,
            job_env,
            labels,
        )
        for line in spec.lines(compute.max_runtime_hours):
            echo(line)
        echo("dry run: nothing was uploaded or launched")
        return None
    if not token:
        raise LaunchError(f"no Hub token: set ${token_env}; Hugging Face Jobs bills the token's account")
    if missing:
        raise LaunchError(f"${missing[0]} is not set here: the job gets it as a secret by name")
    api = _api(token)
    problem = account_problem(api)
    if problem:
        raise LaunchError(problem)
    offered = hub_flavors(api)
    if offered is not None and compute.flavor not in offered:
        raise LaunchError(f"compute.flavor = {compute.flavor!r} is not offered to this account by Hugging Face Jobs now "
                          f"(it offers {', '.join(sorted(offered)) or 'nothing'})")  # fmt: skip
    try:
        namespace = api.whoami()["name"]
        staged = stage(api, config, config_path, namespace, echo)
        spec = build_spec(config, flags, staged.repo, staged.revision, staged.wheel, names, job_env, labels)
        values = {n: (token if n == "HF_TOKEN" else source[n]) for n in spec.secrets}
        job = api.run_job(image=spec.image, command=spec.command, env=spec.env, secrets=values, flavor=spec.flavor,
                          timeout=spec.timeout, labels=spec.labels, namespace=namespace,
                          volumes=[Volume(**v) for v in spec.volumes])  # fmt: skip
    except LaunchError:
        raise
    except Exception as error:  # noqa: BLE001 - one sentence, no token
        raise LaunchError(_phrase(error, "launching the Hugging Face job")) from None
    echo(f"Hugging Face job {job.id} on {spec.flavor}: {job.url}")
    if not compute.max_runtime_hours:
        warn(
            f"note: the job stops after {DEFAULT_TIMEOUT} (the Hub's default); set compute.max_runtime_hours for longer"
        )
    return job


def _jobs(config: GymConfig, api: Any) -> list[Any]:
    return [j for j in api.list_jobs() if (j.labels or {}).get("gym-project") == config.project.name]


def ended_sentence(job: Any) -> str | None:
    """How a job ended, in one sentence (None while it runs); a timeout is named as such."""
    stage = str(getattr(job.status, "stage", "") or "")
    message = str(getattr(job.status, "message", "") or "")
    if stage not in ENDED:
        return None
    if stage == "ERROR" and "timeout" in message.lower():
        return (
            f"job {job.id} hit its TIMEOUT ({message}); launch again to resume from compute.checkpoint_volume"
        )
    if stage == "COMPLETED":
        return f"job {job.id} COMPLETED"
    return f"job {job.id} {stage}" + (f": {message}" if message else "")


def hf_status(config: GymConfig, *, echo: Echo = print) -> list[Any]:
    from gym.launch.task import LaunchError

    api = _api(None)
    try:
        jobs = _jobs(config, api)
    except Exception as error:  # noqa: BLE001
        raise LaunchError(_phrase(error, "listing Hugging Face jobs")) from None
    if not jobs:
        echo(f"no Hugging Face job of {config.project.name} (label gym-project)")
    for job in jobs:
        stage = job.status.stage if job.status else "?"
        echo(
            f"{job.id}  {stage:<10} {job.flavor or '':<12} {job.created_at or ''}  {ended_sentence(job) or ''}".rstrip()
        )
    return jobs


def hf_logs(
    config: GymConfig, *, job_id: str | None = None, follow: bool = True, echo: Echo = print
) -> str | None:
    """Stream a job's log (the latest of the project unless ``job_id``); how it ended, or None if it runs."""
    from gym.launch.task import LaunchError

    api = _api(None)
    try:
        if job_id is None:
            jobs = _jobs(config, api)
            if not jobs:
                raise LaunchError(
                    f"no Hugging Face job of {config.project.name} to show; `gym launch --cloud` starts one"
                )
            job_id = max(jobs, key=lambda j: str(j.created_at or "")).id
        for line in api.fetch_job_logs(job_id=job_id, follow=follow):
            echo(line)
        return ended_sentence(api.inspect_job(job_id=job_id))
    except LaunchError:
        raise
    except Exception as error:  # noqa: BLE001
        raise LaunchError(_phrase(error, f"reading the log of Hugging Face job {job_id}")) from None


def cancel_hf_job(job_id: str, token: str | None = None) -> None:
    _api(token).cancel_job(job_id=job_id)
