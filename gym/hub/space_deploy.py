"""The Space half of `gym deploy`, in the order that keeps a refusal cheap.

What the Hub can refuse about a Space (its owner's plan, its hardware, the token's rights) is settled
*before* the model is pushed: :func:`prepare_space` creates the Space on its hardware (or requests the
hardware of an existing one) first, so a 402 or 403 costs nothing and leaves nothing half-published.
:func:`publish_space` then uploads the rendered folder and sets the secrets; a failure there says that the
model was pushed and how to finish (``gym deploy --space-only``). Every Hub error becomes one sentence
naming the Space (:mod:`gym.hub.space_errors`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.hub.space_errors import describe_space_error, status_and_message

if TYPE_CHECKING:
    from gym.hub.push import DeployPlan


def _failed(plan: DeployPlan, error: BaseException, step: str, model_pushed: str | None) -> Exception:
    from gym.hub.push import DeployError, scrub

    assert plan.space is not None
    message = describe_space_error(error, step, plan.space.space_repo, token_env=plan.token_env.lstrip("-"),
                                   hardware=plan.space.hardware, model_pushed=model_pushed)  # fmt: skip
    return DeployError(scrub(message, plan.token, os.environ.get(plan.space.api_key_env)))


def prepare_space(api: Any, plan: DeployPlan, echo: Callable[[str], None]) -> None:
    """Create the Space on its hardware, or request that hardware for the Space that exists."""
    assert plan.space is not None
    repo, hardware = plan.space.space_repo, plan.space.hardware
    try:
        api.create_repo(repo, repo_type="space", space_sdk="gradio", private=plan.space_private,
                        space_hardware=hardware)  # fmt: skip
        echo(f"created Space {repo} on {hardware}")
        return
    except Exception as error:  # noqa: BLE001 - a 409 means it exists; the rest is told in one sentence
        if status_and_message(error)[0] != 409:
            raise _failed(plan, error, "create", None) from None
    try:
        api.request_space_hardware(repo, hardware)
    except Exception as error:  # noqa: BLE001
        raise _failed(plan, error, "hardware", None) from None


def publish_space(
    api: Any, plan: DeployPlan, folder: Path, echo: Callable[[str], None], model_pushed: str | None
) -> None:
    """Upload the rendered Space and set its secrets; then follow it until it runs (unless ``plan.wait`` is off)."""
    assert plan.space is not None
    repo = plan.space.space_repo
    step = "upload"
    try:
        api.upload_folder(
            repo_id=repo, repo_type="space", folder_path=folder, commit_message="Update Space with gym"
        )
        step = "secret"
        secret = os.environ.get(plan.space.api_key_env)
        if secret:
            api.add_space_secret(
                repo, plan.space.api_key_env, secret, description="API key of the API and chat"
            )
            echo(f"set Space secret {plan.space.api_key_env}")
        read_token = plan.space_token
        if read_token:
            api.add_space_secret(repo, "HF_TOKEN", read_token, description="Reads the private model")
            echo("set Space secret HF_TOKEN (reads the private model)")
    except Exception as error:  # noqa: BLE001
        raise _failed(plan, error, step, model_pushed) from None
    echo(f"Space {repo} updated (hardware {plan.space.hardware}): https://huggingface.co/spaces/{repo}")
    if plan.wait:  # a push is not a deploy: the Space must build, start and answer (gym/hub/space_runtime.py)
        from gym.hub.space_runtime import follow_space

        follow_space(api, repo, model=plan.space.listed_repo, timeout_s=plan.wait_timeout_s, echo=echo,
                     api_key=os.environ.get(plan.space.api_key_env) or None,
                     secrets=(plan.token, plan.space_token))  # fmt: skip
