"""What the runner tells the action: the event, the repository, the inputs and the files to write.

Everything comes from environment variables GitHub sets (``GITHUB_*``) and the ones ``action.yml``
sets from the inputs (``GYM_INPUT_*``). Inputs arrive through ``env:`` rather than being pasted into a
script with ``${{ }}``, so a hostile branch name or config path is data, never shell code.

Secrets are not read here. :func:`public_env` is the environment with every secret-looking name left
out *without reading its value*: validation and planning see only that, so a gym.toml from a pull
request cannot expand ``${HF_TOKEN}`` into a comment; only the launch path reads secrets.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODES = ("auto", "validate", "plan", "launch", "outdated", "rollback")  # the last two: action/gitops_jobs.py
DEFAULT_LABEL = "gym:launch"
ZERO_SHA = "0" * 40

# Names whose values count as secrets: never given to config expansion, never read outside a launch.
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW|CREDENTIAL|API_KEY|ACCESS_KEY|PRIVATE|SESSION"
    r"|^(AWS|AZURE|GOOGLE|GCP|GCLOUD|HF|HUGGING|WANDB|COMET|SWANLAB|MLFLOW|LAMBDA|RUNPOD|KUBE)_",
    re.IGNORECASE,
)


class ActionError(Exception):
    """A problem with how the action was set up (inputs, event, files): one sentence, exit 1."""


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def public_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without secret-looking names; secret values are never read (only their names)."""
    return {name: env[name] for name in env if not is_secret_name(name)}


def _split(value: str) -> tuple[str, ...]:
    parts = [part.strip() for part in re.split(r"[\n,]", value)]
    return tuple(part for part in parts if part)


@dataclass(frozen=True)
class Inputs:
    """The action's inputs (see action.yml), checked."""

    configs: tuple[str, ...] = ("gym.toml",)  # paths or glob patterns, relative to the workspace
    mode: str = "auto"
    cloud: bool = True
    launch_label: str = DEFAULT_LABEL
    wait: bool = True  # cloud runs: follow the job to its end and post its eval table
    comment_author: str = ""  # who the token comments as, when GET /user cannot say (GitHub App tokens)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Inputs:
        mode = env.get("GYM_INPUT_MODE", "auto").strip().lower() or "auto"
        if mode not in MODES:
            raise ActionError(f"input mode: expected one of {', '.join(MODES)}, got {mode!r}")
        cloud = env.get("GYM_INPUT_CLOUD", "true").strip().lower() or "true"
        if cloud not in ("true", "false"):
            raise ActionError(f"input cloud: expected true or false, got {cloud!r}")
        configs = _split(env.get("GYM_INPUT_CONFIG", "gym.toml")) or ("gym.toml",)
        label = env.get("GYM_INPUT_LAUNCH_LABEL", "").strip() or DEFAULT_LABEL
        wait = env.get("GYM_INPUT_WAIT", "true").strip().lower() or "true"
        if wait not in ("true", "false"):
            raise ActionError(f"input wait: expected true or false, got {wait!r}")
        author = env.get("GYM_INPUT_COMMENT_AUTHOR", "").strip().removeprefix("@")
        if author and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]*(\[bot\])?", author):
            raise ActionError(
                f"input comment-author: expected a GitHub login such as my-app[bot], got {author!r}"
            )
        return cls(
            configs=configs,
            mode=mode,
            cloud=cloud == "true",
            launch_label=label,
            wait=wait == "true",
            comment_author=author,
        )


@dataclass
class Context:
    """The run: event name and payload, repository, API address, where outputs and the summary go."""

    event_name: str
    event: dict[str, Any]
    repository: str
    api_url: str
    server_url: str
    run_id: str
    workspace: Path
    inputs: Inputs
    output_file: Path | None = None
    summary_file: Path | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Context:
        event_path = env.get("GITHUB_EVENT_PATH", "")
        try:
            event = json.loads(Path(event_path).read_text(encoding="utf-8")) if event_path else {}
        except (OSError, ValueError) as error:
            raise ActionError(
                f"cannot read the event payload GITHUB_EVENT_PATH={event_path}: {error}"
            ) from None
        repository = env.get("GITHUB_REPOSITORY", "") or event.get("repository", {}).get("full_name", "")
        if not repository:
            raise ActionError("GITHUB_REPOSITORY is not set: run this inside a GitHub Actions job")
        output, summary = env.get("GITHUB_OUTPUT", ""), env.get("GITHUB_STEP_SUMMARY", "")
        return cls(
            event_name=env.get("GITHUB_EVENT_NAME", ""),
            event=event,
            repository=repository,
            api_url=env.get("GITHUB_API_URL", "https://api.github.com").rstrip("/"),
            server_url=env.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/"),
            run_id=env.get("GITHUB_RUN_ID", ""),
            workspace=Path(env.get("GITHUB_WORKSPACE", "") or ".").resolve(),
            inputs=Inputs.from_env(env),
            output_file=Path(output) if output else None,
            summary_file=Path(summary) if summary else None,
            extra={"ref": env.get("GITHUB_REF", ""), "sha": env.get("GITHUB_SHA", "")},
        )

    @property
    def pull_request(self) -> dict[str, Any] | None:
        if self.event_name in ("pull_request", "pull_request_target"):
            return self.event.get("pull_request") or None
        return None

    @property
    def pull_number(self) -> int | None:
        pull = self.pull_request
        return int(pull["number"]) if pull and "number" in pull else None

    @property
    def run_url(self) -> str:
        return f"{self.server_url}/{self.repository}/actions/runs/{self.run_id}" if self.run_id else ""

    @property
    def default_branch(self) -> str:
        return str(self.event.get("repository", {}).get("default_branch") or "main")

    @property
    def is_default_branch_push(self) -> bool:
        return self.event_name == "push" and self.event.get("ref") == f"refs/heads/{self.default_branch}"
