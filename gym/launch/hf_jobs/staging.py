"""What a Hugging Face job receives from the repository: one commit to a private dataset repo it mounts.

A job container starts empty; SkyPilot copies a workdir, Jobs do not. So before launching, Gym commits
what the run reads from disk (the gym.toml, every local dataset file or folder it names, and, for a Gym
version the package index does not hold, the wheel built from this checkout) to ``OWNER/gym-staging-NAME``
(private), and the job mounts that exact commit read-only. Hub datasets (``owner/name`` ids) are read by
the job directly and never uploaded. Paths outside the gym.toml's folder are refused: the job mirrors that
folder, so they would not resolve there.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym.config import GymConfig

WHEEL_DIR = ".gym-wheel"  # where a dev build's wheel sits in the staged folder
# What a wheel is not built from: the repository's history, venvs, tests, docs, caches, run outputs.
NOT_SOURCES = (".git", ".venv*", "tests", "bench", "build", "dist", "*.egg-info", "__pycache__", "*.pyc", "outputs",
               ".bench", "docs", ".ruff_cache", ".pytest_cache", ".hypothesis")  # fmt: skip


@dataclass(frozen=True)
class Staged:
    repo: str
    revision: str
    files: int
    size: int
    wheel: str | None  # the wheel's path in the repo, for a dev build


def _local_inputs(config: GymConfig, root: Path) -> list[Path]:
    """The files and folders of the run that live on this disk (Hub ids are read by the job itself)."""
    from gym.launch.task import LaunchError

    found: list[Path] = []
    for dataset in config.datasets:
        path = (root / dataset.path).resolve() if not Path(dataset.path).is_absolute() else Path(dataset.path)
        if not path.exists():
            continue  # a Hub dataset id, read in the job
        try:
            path.relative_to(root)
        except ValueError:
            raise LaunchError(
                f"dataset {dataset.path} is outside {root}: a Hugging Face job receives that folder only; "
                "move the data under it"
            ) from None
        found.append(path)
    return found


def _files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        out += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return out


def dev_wheel(out: Path) -> Path | None:
    """The wheel of this checkout when the installed Gym is not a release the index holds, else None."""
    from gym import __version__
    from gym.hub.space_code import is_released

    if is_released(__version__):
        return None
    checkout = Path(__file__).resolve().parents[3]
    if not (checkout / "pyproject.toml").is_file():
        return None  # an installed wheel of an unreleased version: nothing to build from
    source = out / "source"  # a copy: a build writes build/ and egg-info beside its sources
    shutil.copytree(checkout, source, ignore=shutil.ignore_patterns(*NOT_SOURCES))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(out), str(source)], capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        from gym.launch.task import LaunchError

        raise LaunchError(
            f"could not build Gym's wheel from {checkout}: {done.stderr.strip().splitlines()[-1:]}"
        )
    return next(out.glob("zoo_gym-*.whl"))


def stage(
    api: Any, config: GymConfig, config_path: Path, namespace: str, echo: Callable[[str], None]
) -> Staged:
    """Commit the run's inputs to ``NAMESPACE/gym-staging-PROJECT`` and return that commit."""
    from huggingface_hub import CommitOperationAdd

    root = config_path.resolve().parent
    inputs = _files(_local_inputs(config, root))
    operations = [CommitOperationAdd(path_in_repo="gym.toml", path_or_fileobj=str(config_path))]
    operations += [CommitOperationAdd(path_in_repo=p.relative_to(root).as_posix(), path_or_fileobj=str(p))
                   for p in inputs if p != config_path.resolve()]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="gym-wheel-") as scratch:
        wheel = dev_wheel(Path(scratch))
        wheel_path = f"{WHEEL_DIR}/{wheel.name}" if wheel else None
        if wheel is not None:
            operations.append(CommitOperationAdd(path_in_repo=wheel_path, path_or_fileobj=str(wheel)))
        size = sum(Path(op.path_or_fileobj).stat().st_size for op in operations)
        repo = f"{namespace}/gym-staging-{config.project.name}"
        echo(
            f"uploading the run's inputs to {repo} (private): {len(operations)} files, {size / 1e6:.1f} MB ..."
        )
        started = time.perf_counter()
        api.create_repo(repo, repo_type="dataset", private=True, exist_ok=True)
        commit = api.create_commit(repo, repo_type="dataset", operations=operations,
                                   commit_message=f"inputs of gym launch {config.project.name}")  # fmt: skip
    echo(f"uploaded in {time.perf_counter() - started:.1f} s (commit {commit.oid[:12]})")
    return Staged(repo, commit.oid, len(operations), size, wheel_path)
