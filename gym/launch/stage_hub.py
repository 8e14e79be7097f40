"""The Hub side of `gym launch`'s stage records: which commit a repository is at now.

The gates' result holds only against the champion commit it was computed on, so a rerun asks the Hub
which commit the ``[hub]`` repository is at and checks the gates again when it moved (unless it moved to
this launch's own push). A recorded push stands only while the model repository and the Space still
exist at the commits the deploy stage read right after pushing; otherwise the rerun pushes again,
the gates checked again right before the push. Commits are asked of the Hub through huggingface_hub
(``model_info``/``space_info``), not of the push code's internals, with a bounded wait.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym.config import GymConfig

HUB_TIMEOUT = 30.0  # seconds for one Hub answer about a commit


def hub_commit(repo: str, token: str | None, *, space: bool = False) -> str | None:
    """The commit ``repo`` (a model, or a Space) is at on the Hub now; None when it does not exist."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    api = HfApi(token=token)
    try:
        info = (
            api.space_info(repo, timeout=HUB_TIMEOUT) if space else api.model_info(repo, timeout=HUB_TIMEOUT)
        )
    except RepositoryNotFoundError:
        return None
    return info.sha


def champion_commit(repo: str, token: str | None) -> str | None:
    """The commit of the champion ``repo`` holds now; None while it holds no model card (it does not
    exist, or a first push created it and failed before any file landed: no champion yet either way)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        info = HfApi(token=token).model_info(repo, timeout=HUB_TIMEOUT)
    except RepositoryNotFoundError:
        return None
    return info.sha if any(s.rfilename == "README.md" for s in info.siblings or []) else None


def _unreachable(repo: str, error: Exception) -> str:
    status = getattr(getattr(error, "response", None), "status_code", None)
    how = f"HTTP {status}" if status else type(error).__name__
    return f"cannot ask the Hub which commit {repo} is at ({how})"


def _short(sha: Any) -> str:
    return str(sha)[:12] if sha else "absent"


def champion_change(config: GymConfig, recorded: dict[str, Any], state: dict[str, Any]) -> str | None:
    """Why gate results are no longer valid: the champion they were compared with is not the one now."""
    if "champion" not in recorded or config.hub is None:
        return None
    repo = config.hub.repo_id
    try:
        now = champion_commit(repo, os.environ.get(config.hub.token_env))
    except Exception as error:  # noqa: BLE001 - any failure: check the gates again, which says why
        return f"{_unreachable(repo, error)}; checking the gates again"
    deploy = state.get("stages", {}).get("deploy")
    pushed = (deploy.get("outputs") or {}).get("model") if isinstance(deploy, dict) else None
    if now == recorded["champion"] or (now is not None and now == pushed):  # unchanged, or this run's push
        return None
    return (
        f"the champion {repo} is at {_short(now)} now, not {_short(recorded['champion'])} as when the gates "
        "were checked; checking them again"
    )


def hub_change(config: GymConfig, previous: dict[str, Any]) -> str | None:
    """Why a recorded push no longer stands: the model repo or Space is gone or at another commit."""
    outputs = previous.get("outputs")
    outputs = outputs if isinstance(outputs, dict) else {}
    artifacts = previous.get("artifacts")
    artifacts = artifacts if isinstance(artifacts, dict) else {}
    token = os.environ.get(config.hub.token_env) if config.hub is not None else None
    for key, repo_key, space in (("model", "model_repo", False), ("space", "space_repo", True)):
        repo = artifacts.get(repo_key)
        if not isinstance(repo, str):
            continue
        kind = "Space" if space else "model repository"
        if key not in outputs:
            return f"this launch could not read which commit it pushed to {repo}; pushing again"
        try:
            now = hub_commit(repo, token, space=space)
        except Exception as error:  # noqa: BLE001 - one line, then the push says what the Hub answers
            return f"{_unreachable(repo, error)}; pushing again"
        if now is None and outputs[key] is not None:
            return f"the {kind} {repo} is gone from the Hub; pushing again"
        if now != outputs[key]:
            pushed = _short(outputs[key])
            return (
                f"the {kind} {repo} is at {_short(now)}, not {pushed} which this launch pushed; pushing again"
            )
    return None


def pushed_commits(config: GymConfig, artifacts: dict[str, Any]) -> dict[str, Any]:
    """The commits the Hub holds right after the push, asked of the Hub (not of the push's internals)."""
    assert config.hub is not None
    token = os.environ.get(config.hub.token_env)
    commits: dict[str, Any] = {}
    for key, repo_key, space in (("model", "model_repo", False), ("space", "space_repo", True)):
        repo = artifacts.get(repo_key)
        if isinstance(repo, str):
            with contextlib.suppress(Exception):  # left out: the next rerun says it cannot tell, and pushes
                commits[key] = hub_commit(repo, token, space=space)
    return commits


def recheck_gates_before_push(
    config: GymConfig, outcomes: dict[str, Any], gates_stage: Callable[..., Any], echo: Callable[[str], None]
) -> Any:
    """The gates checked again right before a push when this run skipped them as done (the champion is
    read again); None when there is nothing to check. Raises GatesFailed as the gates stage does."""
    hub = config.hub
    gates = outcomes.get("gates")
    if hub is None or hub.push == "none" or not config.eval.gates.gates or gates is None:
        return None
    if not gates.detail.startswith("already done"):
        return None
    echo("[gates] checking them again right before the push (the champion may have changed)")
    return gates_stage(config, echo)
