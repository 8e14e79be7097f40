"""`gym deploy`: push the model (adapter or merged) with its card, then create or update its Space.

The token is taken from ``--hf_token`` or the environment variable ``hub.token_env`` and handed only
to :class:`huggingface_hub.HfApi`. It is never printed, written or put in an exception: every Hub
error is re-raised as :class:`DeployError` with the token replaced by ``***``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gym.hub.space import SpaceSettings, render_space

MODEL_IGNORE = [
    "checkpoint-*/**",
    "runs/**",
    "optimizer.pt",
    "scheduler.pt",
    "rng_state*.pth",
    "training_args.bin",
]


class DeployError(RuntimeError):
    """A deploy problem, already phrased for the user and free of secrets."""


def scrub(text: str, *secrets: str | None) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


@dataclass
class DeployPlan:
    model_dir: Path
    model_repo: str
    push: str  # "adapter" | "merged" | "none"
    model_private: bool
    space: SpaceSettings | None
    space_private: bool
    dry_run: bool
    token: str | None = field(default=None, repr=False)
    token_env: str = "HF_TOKEN"

    @property
    def is_adapter(self) -> bool:
        return (self.model_dir / "adapter_config.json").is_file()

    def lines(self) -> list[str]:
        kind = "LoRA adapter" if self.is_adapter else "model"
        what = {"none": "not pushed", "merged": f"{kind} merged into its base"}.get(self.push, kind)
        out = [
            f"model  {self.model_dir} → {self.model_repo} ({what}, {'private' if self.model_private else 'public'})"
        ]
        if self.space:
            out.append(
                f"space  {self.space.space_repo} (gradio + OpenAI API, {self.space.backend}, "
                f"hardware {self.space.hardware}, secret ${self.space.api_key_env}"
                f"{'' if os.environ.get(self.space.api_key_env) else ' not set locally: API open'})"
            )
        out.append(f"token  {'from --hf_token' if self.token and self.token_env == '--hf_token' else '$' + self.token_env}"
                   f"{'' if self.token else ' (not set)'}")  # fmt: skip
        return out


def plan_deploy(
    config_path: Path | None,
    *,
    model_path: Path | None = None,
    repo_id: str | None = None,
    space_id: str | None = None,
    push_to_hub: bool = False,
    token_flag: str | None = None,
    dry_run: bool = False,
) -> DeployPlan:
    """Work out what to push where, from gym.toml and/or the flags, without touching the network."""
    config = None
    if config_path is None and model_path is None and Path("gym.toml").is_file():
        config_path = Path("gym.toml")
    if config_path is not None:
        from gym.config import ConfigError, config_from_args

        try:
            config = config_from_args(config_path)
        except ConfigError as error:
            raise DeployError("\n".join(str(issue) for issue in error.issues)) from None
    hub, space_cfg = (config.hub, config.space) if config else (None, None)
    model_dir = (model_path or (config.output_path if config else None) or Path()).resolve()
    if not model_dir.is_dir():
        raise DeployError(f"{model_dir} does not exist: train first, or pass --model_path")
    if hub is None and not push_to_hub and not dry_run:
        raise DeployError(
            "nothing to deploy: add a [hub] table to gym.toml or pass --push_to_hub (--dry-run previews)"
        )
    token_env = hub.token_env if hub else "HF_TOKEN"
    token = token_flag or os.environ.get(token_env) or None
    repo = repo_id or (hub.repo_id if hub else None)
    if repo is None:
        repo = f"{_whoami(token) if not dry_run else '<you>'}/{model_dir.name}"
    space_repo = space_id or (space_cfg.repo_id if space_cfg else f"{repo}-chat")
    space = SpaceSettings(
        model_repo=repo,
        space_repo=space_repo,
        hardware=space_cfg.hardware if space_cfg else "cpu-basic",
        backend=space_cfg.backend if space_cfg else "transformers",
        api_key_env=space_cfg.api_key_env if space_cfg else "GYM_API_KEY",
        # a training-free GRPO run's library travels with its Space
        experiences=str(model_dir / "experiences.json")
        if (model_dir / "experiences.json").is_file()
        else None,
    )
    return DeployPlan(
        model_dir=model_dir, model_repo=repo, push=hub.push if hub else "adapter",
        model_private=hub.private if hub else True, space=space,
        space_private=space_cfg.private if space_cfg else False, dry_run=dry_run,
        token=token, token_env="--hf_token" if token_flag else token_env,
    )  # fmt: skip


def _whoami(token: str | None) -> str:
    if not token:
        raise DeployError("no Hub token: set $HF_TOKEN (or hub.token_env) or pass --hf_token")
    from huggingface_hub import HfApi

    try:
        return HfApi(token=token).whoami()["name"]
    except Exception as error:  # noqa: BLE001 - re-raised without the token
        raise DeployError(
            scrub(f"cannot ask the Hub who you are: {type(error).__name__}: {error}", token)
        ) from None


def run_deploy(plan: DeployPlan, space_dir: Path | None = None, echo: Callable[[str], None] = print) -> None:
    """Render the Space, then (unless a dry run) push the model and the Space and configure it."""
    for line in plan.lines():
        echo(line)
    with tempfile.TemporaryDirectory(prefix="gym-space-") as scratch:
        folder = render_space(space_dir or Path(scratch) / "space", plan.space) if plan.space else None
        if plan.dry_run:
            where = f"; Space rendered in {folder}" if space_dir else ""
            echo(f"dry run: nothing was sent{where}")
            return
        if not plan.token:
            raise DeployError(f"no Hub token: set ${plan.token_env} or pass --hf_token")
        try:
            _push(plan, folder, Path(scratch), echo)
        except DeployError:
            raise
        except Exception as error:  # noqa: BLE001 - the Hub client's errors are shown scrubbed
            secret = os.environ.get(plan.space.api_key_env) if plan.space else None
            raise DeployError(scrub(f"{type(error).__name__}: {error}", plan.token, secret)) from None


def _push(plan: DeployPlan, space_folder: Path | None, scratch: Path, echo: Callable[[str], None]) -> None:
    from huggingface_hub import HfApi

    api = HfApi(token=plan.token)
    if plan.push != "none":
        source = plan.model_dir
        if plan.push == "merged" and plan.is_adapter:
            from gym.api.loading import merge_adapter

            echo("merging the adapter into its base ...")
            source = merge_adapter(plan.model_dir, scratch / "merged")
        api.create_repo(plan.model_repo, private=plan.model_private, exist_ok=True)
        api.upload_folder(repo_id=plan.model_repo, folder_path=source, ignore_patterns=MODEL_IGNORE,
                          commit_message="Upload model with gym deploy")  # fmt: skip
        echo(f"pushed {plan.model_repo}")
    if plan.space is None or space_folder is None:
        return
    repo = plan.space.space_repo
    api.create_repo(repo, repo_type="space", space_sdk="gradio", private=plan.space_private, exist_ok=True)
    api.upload_folder(
        repo_id=repo,
        repo_type="space",
        folder_path=space_folder,
        commit_message="Update Space with gym deploy",
    )
    secret = os.environ.get(plan.space.api_key_env)
    if secret:
        api.add_space_secret(repo, plan.space.api_key_env, secret, description="API key of the OpenAI routes")
        echo(f"set Space secret {plan.space.api_key_env}")
    api.request_space_hardware(repo, plan.space.hardware)
    echo(f"Space {repo} updated (hardware {plan.space.hardware}): https://huggingface.co/spaces/{repo}")
