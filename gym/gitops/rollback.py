"""`gym rollback`: make the ``[hub]`` repository serve an earlier promoted model again, and its Space with it.

History is never rewritten: the rollback is a *new* Hub commit whose files are exactly those of the chosen
promotion (files it did not have are deleted), made with ``parent_commit`` = the commit read, so a push
that lands meanwhile makes the Hub refuse it (412) instead of being overwritten. Its description records
why (``--reason``), what it restores and from where (``Gym-Rollback-*`` trailers), so `gym history` shows it.

The Space serves a pinned model commit (``revision`` in its gym_space.json, written by `gym deploy`): the
rollback moves that pin to the new commit, which makes the Hub rebuild the Space, then follows it until it
runs and answers a chat request (:func:`gym.hub.space_runtime.follow_space`), as a deploy does.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.gitops.history import HistoryError, Promotion, read_history
from gym.gitops.hub_errors import how, status_of
from gym.hub.lineage import ROLLBACK_TITLE, render_trailers

if TYPE_CHECKING:
    from gym.config import GymConfig

SPACE_SETTINGS = "gym_space.json"


class RollbackError(RuntimeError):
    """One sentence for the user (never a token): what is wrong and what to do; nothing was changed unless it says so."""


@dataclass(frozen=True)
class Rollback:
    repo: str
    target: Promotion  # the promotion whose files are served again
    serves: str  # the pushed commit those files came from
    previous: str  # the commit main was at
    commit: str = ""  # the new Hub commit
    space_commit: str = ""


def choose_target(repo: str, head: str | None, promotions: list[Promotion], to: str | None) -> Promotion:
    """The promotion to restore: ``to`` (a Hub commit id, or its first 7+ digits), else the push before the
    one served now. :class:`RollbackError` when there is none."""
    pushes = [p for p in promotions if p.kind == "push"]
    if not pushes:
        raise RollbackError(
            f"{repo} has no model promoted by Gym, so there is nothing to roll back to; `gym deploy` pushes one"
        )
    served = next((p.restores for p in promotions if p.hub_commit == head), None)
    if to is not None:
        wanted = to.strip().lower()
        found = [p for p in promotions if len(wanted) >= 7 and p.hub_commit.startswith(wanted)]
        if len(found) > 1:
            raise RollbackError(f"{to} starts {len(found)} Hub commits of {repo}: give more of its digits")
        if not found:
            raise RollbackError(
                f"{to} was never promoted to {repo}: `gym rollback --to` takes one of the Hub commits "
                "`gym history` lists"
            )
        target = found[0]
        if target.restores == served:
            raise RollbackError(f"{repo} already serves {target.restores[:12]}: nothing to roll back")
        return target
    index = next((i for i, p in enumerate(pushes) if p.hub_commit == served), -1)
    if index + 1 >= len(pushes):
        only = pushes[index].hub_commit[:12] if index >= 0 else pushes[0].hub_commit[:12]
        raise RollbackError(
            f"{repo} has no promotion before the one it serves ({only}), so there is nothing earlier to roll back "
            "to; `gym history` lists its promotions"
        )
    return pushes[index + 1]


def rollback(
    config: GymConfig,
    *,
    to: str | None = None,
    reason: str = "",
    token: str | None = None,
    wait: bool = True,
    echo: Callable[[str], None] = print,
) -> Rollback:
    """Roll ``config``'s ``[hub]`` repository (and its ``[space]``) back; raises :class:`RollbackError`."""
    if config.hub is None:
        raise RollbackError("gym rollback needs a [hub] table naming the model repository (hub.repo_id)")
    repo, token_env = config.hub.repo_id, config.hub.token_env
    token = token or os.environ.get(token_env) or None
    if not token:
        raise RollbackError(
            f"no Hub token: set ${token_env} (hub.token_env) to a token that may write to {repo}"
        )
    try:
        head, promotions = read_history(repo, token, token_env)
    except HistoryError as error:
        raise RollbackError(str(error)) from None
    target = choose_target(repo, head, promotions, to)
    assert head is not None
    plan = Rollback(repo=repo, target=target, serves=target.restores, previous=head)
    from huggingface_hub import HfApi

    from gym.hub.push import scrub

    api = HfApi(token=token)
    try:
        commit = _restore(api, plan, reason, config)
    except RollbackError:
        raise
    except Exception as error:  # noqa: BLE001 - the Hub client's errors, phrased without the token
        raise RollbackError(scrub(_hub_failure(repo, error), token)) from None
    plan = Rollback(repo=repo, target=target, serves=target.restores, previous=head, commit=commit)
    echo(f"rolled {repo} back to {target.restores[:12]}: Hub commit {commit} (was {head[:12]})")
    if config.space is not None:
        space_commit = _repin_space(api, config, repo, commit, wait, echo)
        plan = Rollback(repo=repo, target=target, serves=target.restores, previous=head, commit=commit,
                        space_commit=space_commit)  # fmt: skip
    return plan


def _hub_failure(repo: str, error: BaseException) -> str:
    status = status_of(error)
    if status == 412:
        return f"{repo} changed while it was rolled back (a push landed): nothing was changed; run `gym rollback` again"
    if status in (401, 403):
        return f"the Hub refused to write to {repo} (HTTP {status}): the token needs write access to it; nothing was changed"
    return f"cannot roll {repo} back ({how(error)}); nothing was changed, retry later"


def _restore(api: Any, plan: Rollback, reason: str, config: GymConfig) -> str:
    """One commit that makes main hold the files of ``plan.target`` again; its id."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, snapshot_download

    from gym.hub.git_source import read_source

    source = read_source(config.source)
    with tempfile.TemporaryDirectory(prefix="gym-rollback-") as scratch:
        folder = Path(snapshot_download(plan.repo, revision=plan.target.hub_commit, local_dir=scratch,
                                        token=api.token))  # fmt: skip
        wanted = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                        if p.is_file() and ".cache" not in p.relative_to(folder).parts)  # fmt: skip
        current = api.list_repo_files(plan.repo)
        operations: list = [
            CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(folder / name)) for name in wanted
        ]
        operations += [CommitOperationDelete(path_in_repo=name) for name in current
                       if name not in wanted and name != ".gitattributes"]  # fmt: skip
        trailers = {
            "Gym-Rollback-To": plan.target.hub_commit,
            "Gym-Rollback-Serves": plan.serves,
            "Gym-Rollback-From": plan.previous,
            "Gym-Reason": reason.strip() or "none given",
            "Gym-Source-Commit": source.commit or "not in a git repository",
        }
        info = api.create_commit(
            plan.repo, operations=operations, parent_commit=plan.previous,
            commit_message=f"{ROLLBACK_TITLE} to {plan.serves[:12]}", commit_description=render_trailers(trailers),
        )  # fmt: skip
    return str(info.oid)


def _repin_space(
    api: Any, config: GymConfig, repo: str, commit: str, wait: bool, echo: Callable[[str], None]
) -> str:
    """Point the Space's gym_space.json at ``commit`` (the Hub rebuilds it), then follow it until it answers."""
    from huggingface_hub import CommitOperationAdd, hf_hub_download

    from gym.hub.push import DeployError, scrub

    assert config.space is not None
    space = config.space.repo_id
    secrets = (api.token, os.environ.get(config.space.api_key_env))
    try:
        settings = json.loads(Path(hf_hub_download(space, SPACE_SETTINGS, repo_type="space",
                                                    token=api.token)).read_text(encoding="utf-8"))  # fmt: skip
        if "/" not in str(settings.get("model", "")):
            raise RollbackError(
                f"{repo} was rolled back to Hub commit {commit[:12]}, but the Space {space} serves its own copy of the "
                "weights, not the model repository; give it a read token (space.hf_token_env) and run `gym deploy`"
            )
        settings["revision"] = commit
        text = (json.dumps(settings, indent=2) + "\n").encode("utf-8")
        info = api.create_commit(space, repo_type="space", commit_message=f"Serve {repo}@{commit[:12]} (gym rollback)",
                                 operations=[CommitOperationAdd(path_in_repo=SPACE_SETTINGS, path_or_fileobj=text)])  # fmt: skip
    except RollbackError:
        raise
    except Exception as error:  # noqa: BLE001
        raise RollbackError(scrub(
            f"{repo} was rolled back to Hub commit {commit[:12]}, but its Space {space} could not be pointed at it "
            f"({how(error)}); run `gym rollback --to {commit[:12]}` again "
            "or `gym deploy --space-only`", *secrets)) from None  # fmt: skip
    echo(f"Space {space} now serves {repo}@{commit[:12]} (Space commit {info.oid})")
    if wait and config.space.wait_minutes > 0:
        from gym.hub.space_runtime import follow_space

        try:
            follow_space(api, space, model=str(settings.get("served_model_name") or repo),
                         timeout_s=config.space.wait_minutes * 60, echo=echo,
                         api_key=os.environ.get(config.space.api_key_env) or None, secrets=secrets)  # fmt: skip
        except DeployError as error:
            raise RollbackError(str(error)) from None
    return str(info.oid)
