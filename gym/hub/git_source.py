"""Where a run came from: the git repository, commit and pull request that produced it, and its gym.toml.

Every fact is asked of ``git`` itself (a subprocess, in the gym.toml's folder) with its error output thrown
away: a run outside a git checkout, or on a machine without git, prints nothing and is recorded as
:data:`NOT_GIT`, which the card says once. A checkout with uncommitted changes is recorded as such (the
commit alone would not reproduce it).

The Action knows what git cannot: on a push to the default branch the pull request that was merged, and on
a cloud node (which gets the gym.toml's folder, not the repository) the commit. It passes them as
``GYM_SOURCE_REPOSITORY``, ``GYM_SOURCE_COMMIT`` and ``GYM_PULL_REQUEST``; GitHub's own ``GITHUB_REF``
(``refs/pull/N/merge``) names the pull request of a ``pull_request`` run.

A remote URL is recorded without its user part: ``https://x-access-token:SECRET@github.com/o/r`` (what
actions/checkout leaves with persisted credentials) becomes ``https://github.com/o/r``.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NOT_GIT = "not in a git repository"
MAX_CONFIG_BYTES = 64_000  # a gym.toml is a few kilobytes; its text travels in eval_results.json
GIT_TIMEOUT_S = 10
COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class Source:
    """The run's origin; ``commit`` None means :data:`NOT_GIT` (and nothing else is known from git)."""

    repository: str | None = None  # https URL of the repository
    commit: str | None = None
    dirty: bool = False  # uncommitted changes to tracked files
    pull_request: int | None = None
    config_path: str | None = None  # the gym.toml, relative to the repository's root (else its name)
    config_text: str | None = None

    @property
    def in_git(self) -> bool:
        return self.commit is not None

    @property
    def pull_url(self) -> str | None:
        if self.pull_request is None or not self.repository:
            return None
        return f"{self.repository}/pull/{self.pull_request}"

    @property
    def commit_url(self) -> str | None:
        if not self.commit or not self.repository:
            return None
        return f"{self.repository}/commit/{self.commit}"

    def to_json(self) -> dict[str, Any]:
        """What eval_results.json records under ``source``."""
        return {
            "repository": self.repository,
            "commit": self.commit or NOT_GIT,
            "dirty": self.dirty,
            "pull_request": self.pull_request,
            "pull_request_url": self.pull_url,
            "config": self.config_path,
            "config_text": self.config_text,
        }

    @classmethod
    def from_json(cls, data: Any) -> Source | None:
        """The source an eval_results.json recorded (None for anything else: an older Gym wrote none)."""
        if not isinstance(data, dict):
            return None
        commit = data.get("commit")
        pull = data.get("pull_request")
        text = data.get("config_text")

        def string(value: Any) -> str | None:
            return value if isinstance(value, str) else None

        return cls(
            repository=string(data.get("repository")),
            commit=commit if isinstance(commit, str) and COMMIT.fullmatch(commit) else None,
            dirty=data.get("dirty") is True,
            pull_request=pull if isinstance(pull, int) and not isinstance(pull, bool) and pull > 0 else None,
            config_path=string(data.get("config")),
            config_text=text if isinstance(text, str) and len(text) <= MAX_CONFIG_BYTES else None,
        )


def git(folder: Path, *args: str) -> str | None:
    """``git args`` run in ``folder``: its stripped output, or None when it fails (nothing is printed)."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=folder, capture_output=True, text=True, timeout=GIT_TIMEOUT_S,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):  # no git, a folder that is gone, a hung filesystem
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def https_url(remote: str | None) -> str | None:
    """``remote`` as the https URL a browser opens, without any user or token in it; None if not a URL."""
    if not remote:
        return None
    remote = remote.strip()
    scp = re.fullmatch(r"[\w.-]+@([\w.-]+):(.+)", remote)  # git@github.com:owner/repo.git
    if scp:
        host, path = scp.groups()
    else:
        match = re.fullmatch(r"(?:https?|ssh|git)://(?:[^@/]*@)?([^/:]+)(?::\d+)?/(.+)", remote)
        if not match:
            return None
        host, path = match.groups()
    path = path.removesuffix("/").removesuffix(".git")
    return f"https://{host}/{path}"


def _pull_request(env: Mapping[str, str]) -> int | None:
    given = env.get("GYM_PULL_REQUEST", "").strip().lstrip("#")
    if given.isdigit() and int(given) > 0:
        return int(given)
    ref = re.fullmatch(r"refs/pull/(\d+)/(?:merge|head)", env.get("GITHUB_REF", ""))
    return int(ref.group(1)) if ref else None


def _config(config_path: Path | None, top: Path | None) -> tuple[str | None, str | None]:
    """(the gym.toml's path as the repository names it, its text with secrets redacted)."""
    if config_path is None or not config_path.is_file():
        return None, None
    from gym.config.errors import redact

    path = config_path.resolve()
    shown = path.relative_to(top).as_posix() if top is not None and path.is_relative_to(top) else path.name
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_CONFIG_BYTES + 1)
    except OSError:
        return shown, None
    if len(raw) > MAX_CONFIG_BYTES:
        return shown, None
    return shown, redact(raw.decode("utf-8", "replace"))


def read_source(config_path: Path | None, env: Mapping[str, str] | None = None) -> Source:
    """The :class:`Source` of a run of ``config_path`` (its folder is asked; the cwd without a config)."""
    env = os.environ if env is None else env
    folder = config_path.resolve().parent if config_path is not None else Path.cwd()
    top_text = git(folder, "rev-parse", "--show-toplevel") if folder.is_dir() else None
    top = Path(top_text).resolve() if top_text else None
    commit = git(folder, "rev-parse", "--verify", "HEAD") if top is not None else None
    repository = https_url(git(folder, "config", "--get", "remote.origin.url")) if top is not None else None
    dirty = bool(git(folder, "status", "--porcelain", "--untracked-files=no")) if commit else False
    given = env.get("GYM_SOURCE_COMMIT", "").strip().lower()
    if commit is None and COMMIT.fullmatch(given):  # a cloud node: the Action said which commit it ran
        commit = given
    if not repository:
        repository = https_url(env.get("GYM_SOURCE_REPOSITORY")) or _github_repository(env)
    path, text = _config(config_path, top)
    return Source(repository=repository if commit else None, commit=commit, dirty=dirty,
                  pull_request=_pull_request(env) if commit else None, config_path=path, config_text=text)  # fmt: skip


def _github_repository(env: Mapping[str, str]) -> str | None:
    server, name = env.get("GITHUB_SERVER_URL", ""), env.get("GITHUB_REPOSITORY", "")
    return f"{server.rstrip('/')}/{name}" if server and re.fullmatch(r"[\w.-]+/[\w.-]+", name) else None
