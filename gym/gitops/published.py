"""What a finished launch published, as links: the Hub commit of the model and the Space's commit, read from the
deploy stage's record in gym_state.json (:mod:`gym.launch.stage_hub` writes them right after the push). The
Action puts the line in its comment and job summary, so a pull request or push links the Hub commit it made."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym.config import GymConfig

HUB = "https://huggingface.co"


def published_line(config: GymConfig) -> str | None:
    """``published acme/x@1a2b3c4d5e6f (URL); Space acme/x-chat@… (URL)``, or None when nothing was pushed."""
    from gym.launch.state_file import load_state

    try:
        deploy: Any = load_state(config.output_path).get("stages", {}).get("deploy")
    except Exception:  # noqa: BLE001 - a damaged state file: the launch itself says so
        return None
    if not isinstance(deploy, dict):
        return None
    outputs, artifacts = deploy.get("outputs") or {}, deploy.get("artifacts") or {}
    parts = []
    for key, repo_key, prefix, label in (
        ("model", "model_repo", "", "published"),
        ("space", "space_repo", "spaces/", "Space"),
    ):
        repo, sha = artifacts.get(repo_key), outputs.get(key)
        if isinstance(repo, str) and isinstance(sha, str) and sha:
            parts.append(f"{label} {repo}@{sha[:12]} ({HUB}/{prefix}{repo}/commit/{sha})")
    return "; ".join(parts) or None
