"""gym.toml → a SkyPilot task (as the dict a task YAML parses to), without importing SkyPilot.

Kept free of ``import sky`` so every rule here is tested in milliseconds and every mistake is
reported before SkyPilot (or a network call) is involved. Secrets are only ever *named* here; their
values are read in :mod:`gym.launch.cloud` and handed to SkyPilot as ``secrets``, never as ``envs``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.launch.templates import template

if TYPE_CHECKING:
    from gym.config import GymConfig

CHECKPOINT_MOUNT = "/checkpoints"
# SkyPilot's plain MOUNT supports neither appends nor random writes (docs: reference/storage.html, "Storage
# modes"), and Gym appends to progress.jsonl at every step and replaces its state files with os.replace.
# MOUNT_CACHED (rclone with --vfs-cache-mode full) writes to local disk first and "supports all write
# operations", uploading each file once it is closed, in the order files were written.
CHECKPOINT_MODE = "MOUNT_CACHED"
# The stores whose SkyPilot class has no mount_cached_command (sky/data/storage.py): IBM COS and native OCI.
NO_CACHED_MOUNT = ("cos", "oci")
REPORT_TARGET_ENV = "GYM_REPORT_TO"  # where the job reports back (not secret); see report/job.py
REPORT_TOKEN_ENV = "GYM_REPORT_TOKEN"  # the token it reports with: a SkyPilot secret only

# Environment variables each experiment tracker needs on the remote machine: (required, optional).
# Optional ones (project names, URIs) travel as secrets too: a tracking URI can embed credentials.
TRACKER_ENV: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "wandb": (("WANDB_API_KEY",), ("WANDB_PROJECT", "WANDB_ENTITY", "WANDB_BASE_URL")),
    "comet_ml": (("COMET_API_KEY",), ("COMET_PROJECT_NAME", "COMET_WORKSPACE")),
    "swanlab": (("SWANLAB_API_KEY",), ("SWANLAB_PROJECT",)),
    "mlflow": (
        (),
        (
            "MLFLOW_TRACKING_URI",
            "MLFLOW_TRACKING_TOKEN",
            "MLFLOW_TRACKING_USERNAME",
            "MLFLOW_TRACKING_PASSWORD",
        ),
    ),
}


class LaunchError(Exception):
    """A problem with the run that is reported as one sentence, before anything is sent to a cloud."""


@dataclass(frozen=True)
class SecretSpec:
    """An environment variable the remote run needs, and why (for the message when it is missing)."""

    name: str
    required: bool
    reason: str


@dataclass
class CloudPlan:
    """Everything `gym launch --cloud` sends: the task dict (no secret values) and how to launch it."""

    name: str
    managed: bool
    task: dict[str, Any]
    secrets: list[SecretSpec]
    autostop_minutes: int
    notes: list[str] = field(default_factory=list)


def secret_specs(config: GymConfig) -> list[SecretSpec]:
    """The secrets the run needs, named by the config (hub.token_env, space.api_key_env, trackers, GRPO)."""
    specs: dict[str, SecretSpec] = {}

    def add(name: str, required: bool, reason: str) -> None:
        old = specs.get(name)
        if old is None or (required and not old.required):
            specs[name] = SecretSpec(name, required, reason)

    hub = config.hub
    if hub is not None:
        add(hub.token_env, hub.push != "none", f"hub.token_env (pushing to {hub.repo_id})")
    else:
        add("HF_TOKEN", False, "downloading gated models from the Hub")
    if config.space is not None:
        add(config.space.api_key_env, False, "space.api_key_env")
        if config.space.hf_token_env and hub is not None and hub.push != "none":
            add(
                config.space.hf_token_env,
                hub.private,
                "space.hf_token_env (the Space reads the private model)",
            )
    for tracker in config.train.report_to:
        required, optional = TRACKER_ENV.get(tracker, ((), ()))
        for name in required:
            add(name, True, f"train.report_to = {tracker!r}")
        for name in optional:
            add(name, False, f"train.report_to = {tracker!r}")
    if config.train.grpo.api_key_env:
        add(config.train.grpo.api_key_env, True, "train.grpo.api_key_env")
    judge = config.eval.judge
    if judge is not None and judge.api_key_env:
        add(judge.api_key_env, True, f"eval.judge.api_key_env (the judge {judge.model})")
    return list(specs.values())


def resources(config: GymConfig) -> dict[str, Any]:
    """``[compute]`` → SkyPilot ``resources``: several accelerators become ``any_of`` candidates."""
    compute = config.compute
    assert compute is not None
    result: dict[str, Any] = {}
    if compute.infra:
        result["infra"] = compute.infra
    result["use_spot"] = compute.use_spot
    result["disk_size"] = compute.disk_size
    if len(compute.accelerators) == 1:
        result["accelerators"] = compute.accelerators[0]
    else:
        result["any_of"] = [{"accelerators": name} for name in compute.accelerators]
    if not compute.managed:
        result["autostop"] = {"idle_minutes": compute.autostop_minutes, "down": True}
    return result


def choose_workdir(config_path: Path | None, cwd: Path) -> Path:
    """The folder synced to the cloud: the current one when it holds gym.toml, else gym.toml's folder."""
    if config_path is None:
        return cwd
    resolved = config_path.resolve()
    return cwd if resolved.is_relative_to(cwd) else resolved.parent


def check_dataset_files(config: GymConfig) -> None:
    """Every local dataset is data, not a Git LFS pointer left by a checkout without LFS."""
    from gym.launch.workdir_sync import lfs_pointer, lfs_sentence

    for index, dataset in enumerate(config.datasets):
        if dataset.path is None or Path(dataset.path).expanduser().is_absolute():
            continue
        path = config.resolve_path(dataset.path)
        pointer = lfs_pointer(path) if path.exists() else None
        if pointer is not None:
            shown = (
                dataset.path
                if pointer == path
                else f"{dataset.path} ({pointer.relative_to(path).as_posix()})"
            )
            raise LaunchError(lfs_sentence(f"datasets.{index}.path", shown))


def _check_data_is_synced(config: GymConfig, workdir: Path) -> None:
    """Each local dataset lies in the workdir and survives SkyPilot's ignore rules (.skyignore/.gitignore)."""
    from gym.launch.workdir_sync import check_synced, excluded_paths

    rules: tuple[set[str], str] | None = None
    for index, dataset in enumerate(config.datasets):
        if dataset.path is None or Path(dataset.path).expanduser().is_absolute():
            continue  # absolute paths name a place on the remote machine
        path = config.resolve_path(dataset.path)
        if not path.is_relative_to(workdir):
            raise LaunchError(
                f"datasets.{index}.path: {dataset.path} lies outside {workdir}, the folder synced to the "
                "cloud; move the data under it, or launch from a folder that contains both"
            )
        rules = rules or excluded_paths(workdir)
        sentence = check_synced(f"datasets.{index}.path", path, workdir, *rules)
        if sentence:
            raise LaunchError(sentence)
    check_dataset_files(config)


def _git(args: Sequence[str], cwd: Path) -> str:
    try:
        done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def repository_of(folder: Path, env: Mapping[str, str] | None = None) -> str:
    """``owner/name`` of the repository: $GITHUB_REPOSITORY in the Action, else the origin remote of the
    checkout (any credentials in its URL dropped); '' outside a repository with a remote."""
    env = os.environ if env is None else env
    if env.get("GITHUB_REPOSITORY"):
        return env["GITHUB_REPOSITORY"].lower()
    url = re.sub(r"^[a-z+]+://[^@/]*@", "", _git(["remote", "get-url", "origin"], folder))
    match = re.search(r"github\.com[:/]([^/]+/[^/]+?)(?:\.git)?/*$", url)
    return (match.group(1) if match else url).lower()


def run_name(config: GymConfig, env: Mapping[str, str] | None = None) -> str:
    """The SkyPilot job (or cluster) name of this config: ``gym-<project>-<8 hex>``, the hex naming the
    repository and the config's path in it, so configs of other repositories (or other folders) on a shared
    team API server never share a name, and the Action finds and cancels only its own config's jobs."""
    base = f"gym-{config.project.name}"
    source = config.source
    if source is None:
        return base
    top = _git(["rev-parse", "--show-toplevel"], source.parent)
    relative = source.relative_to(top).as_posix() if top and source.is_relative_to(top) else source.name
    scope = f"{repository_of(source.parent, env)}:{relative}"
    return f"{base}-{hashlib.sha256(scope.encode()).hexdigest()[:8]}"


def _check_bucket(bucket: str) -> None:
    scheme = bucket.partition("://")[0]
    if bucket and scheme in NO_CACHED_MOUNT:
        raise LaunchError(
            f"compute.checkpoint_bucket: SkyPilot cannot mount {scheme}:// buckets with a local write cache "
            "(MOUNT_CACHED), and its plain MOUNT supports neither the appends to progress.jsonl nor the "
            "file replacements Gym's checkpoints need; use an s3://, gs://, r2:// or Azure bucket"
        )


def remote_flags(config: GymConfig, flags: Sequence[str]) -> list[str]:
    """The command-line flags the remote `gym launch` gets: the user's, then the checkpoint folder."""
    result = list(flags)
    compute = config.compute
    if compute is not None and compute.checkpoint_bucket:
        result += ["--output_dir", f"{CHECKPOINT_MOUNT}/{config.project.name}"]
    return result


def build_plan(
    config: GymConfig,
    config_path: Path | None,
    flags: Sequence[str] = (),
    *,
    cwd: Path | None = None,
    pip_spec: str | None = None,
    report_to: str | None = None,
    env: Mapping[str, str] | None = None,
) -> CloudPlan:
    """Fill the train template from the config; raises :class:`LaunchError` on what cannot be launched."""
    compute = config.compute
    if compute is None:
        raise LaunchError(
            "gym launch --cloud needs a [compute] table in gym.toml (accelerators, infra, ...); "
            "add one, e.g. [compute] accelerators = ['A100:1']"
        )
    cwd = (cwd or Path.cwd()).resolve()
    workdir = choose_workdir(config_path, cwd)
    _check_data_is_synced(config, workdir)
    _check_bucket(compute.checkpoint_bucket)
    name = run_name(config, env)

    task = template("train")
    task["name"] = name
    task["workdir"] = str(workdir)
    task["num_nodes"] = compute.num_nodes
    task["resources"] = resources(config)
    envs = task["envs"]
    envs["GYM_CONFIG"] = (
        config_path.resolve().relative_to(workdir).as_posix() if config_path is not None else ""
    )
    envs["GYM_FLAGS"] = shlex.join(remote_flags(config, flags))
    if pip_spec:
        envs["GYM_PIP_SPEC"] = pip_spec
        envs["GYM_EXTRAS"] = pip_spec.partition("[")[2].partition("]")[0]  # a Gym checkout installs the same
    specs = secret_specs(config)
    if report_to:  # the job reports back to its PR itself (report/job.py): where, and the token as a secret
        envs[REPORT_TARGET_ENV] = report_to
        specs.append(
            SecretSpec(REPORT_TOKEN_ENV, True, "reporting the finished run back to the pull request")
        )
    if compute.max_runtime_hours:
        envs["GYM_MAX_RUNTIME_S"] = str(max(1, round(compute.max_runtime_hours * 3600)))
    if compute.checkpoint_bucket:
        task["file_mounts"] = {
            CHECKPOINT_MOUNT: {"source": compute.checkpoint_bucket.rstrip("/"), "mode": CHECKPOINT_MODE}
        }

    notes = []
    if compute.managed and not compute.checkpoint_bucket:
        notes.append(
            "compute.checkpoint_bucket is not set: a preempted managed job restarts from scratch "
            "(its checkpoints live on the lost machine)"
        )
    if compute.checkpoint_bucket and config.train.resume == "never":
        notes.append("train.resume = 'never': a recovered job ignores the checkpoints in the bucket")
    if compute.use_spot and not compute.managed:
        notes.append("compute.use_spot without managed = true: a preempted cluster is not recovered")
    return CloudPlan(
        name=name,
        managed=compute.managed,
        task=task,
        secrets=specs,
        autostop_minutes=compute.autostop_minutes,
        notes=notes,
    )


def secret_values(
    specs: Sequence[SecretSpec], env: Mapping[str, str] | None = None, *, require: bool = True
) -> tuple[dict[str, str], list[SecretSpec]]:
    """Read the secrets from the environment: (values of those set, required ones that are missing).

    With ``require`` a missing required secret raises :class:`LaunchError` naming the variable (never a
    value).
    """
    env = os.environ if env is None else env
    values: dict[str, str] = {}
    missing: list[SecretSpec] = []
    for spec in specs:
        value = env.get(spec.name, "")
        if value:
            values[spec.name] = value
        elif spec.required:
            missing.append(spec)
    if missing and require:
        names = ", ".join(f"${spec.name} ({spec.reason})" for spec in missing)
        raise LaunchError(f"set {names} in your environment; the cloud run needs it as a secret")
    return values, missing
