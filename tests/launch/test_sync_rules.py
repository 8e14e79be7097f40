"""Data the cloud machine would not receive is refused at plan time: SkyPilot's ignore rules and Git LFS pointers.

SkyPilot syncs the workdir without what ``sky.data.storage_utils.get_excluded_files`` lists: a
``.skyignore`` alone when there is one, else git's ignored untracked files (a tracked file is synced
even when a pattern matches it). `gym launch --cloud --dryrun` (the plan; no server is contacted) applies
the same rules and stops with one sentence; the rules agree with SkyPilot's own function on each case
here, and the SkyPilot double's nodes receive exactly what that function lets through.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gym.launch.workdir_sync import excluded_entry, excluded_paths

from .cloud_run import gym
from .conftest import COMPUTE

LFS_TEXT = (
    "version https://git-lfs.github.com/spec/v1\n"
    "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n"
)


def _git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, timeout=60)


def _plan(path: Path, sky_env: dict[str, str]) -> subprocess.CompletedProcess:
    return gym(["launch", "--cloud", "--dryrun", "gym.toml"], path.parent, sky_env, timeout=120)


def test_a_gitignored_data_folder_is_refused_and_a_tracked_one_passes(project, sky_env) -> None:
    path = project(COMPUTE)
    folder = path.parent
    _git(folder, "init", "-q")
    (folder / ".gitignore").write_text("data/\n")
    refused = _plan(path, sky_env)
    _git(folder, "add", "-f", "data/train.jsonl")  # tracked: SkyPilot syncs it whatever .gitignore says
    tracked = _plan(path, sky_env)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().endswith(
        "datasets.0.path: data/train.jsonl is excluded by .gitignore (data/), and SkyPilot does not sync what "
        ".gitignore excludes, so the cloud machine would not receive the dataset; commit the data (git add -f), "
        "or add a .skyignore without that pattern (SkyPilot then reads it instead of .gitignore)"
    ), refused.stderr
    assert refused.stdout == ""  # no task printed: nothing would be sent
    assert tracked.returncode == 0, tracked.stderr


def test_a_skyignore_replaces_gitignore(project, sky_env) -> None:
    path = project(COMPUTE)
    folder = path.parent
    _git(folder, "init", "-q")
    (folder / ".gitignore").write_text("data/\n")
    (folder / ".skyignore").write_text("# only logs stay behind\n*.log\n")
    passes = _plan(path, sky_env)
    (folder / ".skyignore").write_text("/data\n")
    refused = _plan(path, sky_env)
    assert passes.returncode == 0, passes.stderr
    assert refused.returncode == 1
    assert "datasets.0.path: data/train.jsonl is excluded by .skyignore (data)" in refused.stderr
    assert "remove the pattern from .skyignore (which SkyPilot reads instead of .gitignore)" in refused.stderr


def test_a_git_lfs_pointer_instead_of_data_is_refused_with_the_fix(project, sky_env) -> None:
    path = project(COMPUTE)
    (path.parent / "data" / "train.jsonl").write_text(LFS_TEXT)
    done = _plan(path, sky_env)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().endswith(
        "datasets.0.path: data/train.jsonl is a Git LFS pointer file, not the data (the checkout did not fetch "
        "LFS files); in the workflow set `lfs: true` on the actions/checkout step, or run `git lfs pull` here"
    ), done.stderr


CASES = {
    "gitignore folder": ({".gitignore": "data/\n"}, True),
    "gitignore glob, one file tracked": ({".gitignore": "*.jsonl\n"}, True),
    "skyignore anchored": ({".gitignore": "data/\n", ".skyignore": "/data/train.jsonl\n"}, True),
    "skyignore anywhere": ({".skyignore": "train.jsonl\n# comment\n"}, True),
    "not a repository": ({".gitignore": "data/\n"}, False),
}


@pytest.mark.parametrize("case", CASES)
def test_gyms_rules_match_skypilots_and_the_double_syncs_by_them(case: str, tmp_path: Path) -> None:
    from sky.data.storage_utils import get_excluded_files

    from .sky_nodes import synced_copy

    files, repository = CASES[case]
    work = tmp_path / "work"
    for name in ("data/train.jsonl", "data/test.jsonl", "notes/run.log", "gym.toml"):
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text("x\n")
    for name, text in files.items():
        (work / name).write_text(text)
    if repository:
        _git(work, "init", "-q")
        _git(work, "add", "-f", "data/test.jsonl")
    ours, _ = excluded_paths(work)
    theirs = set(get_excluded_files(str(work)))
    assert {p.rstrip("/") for p in ours} == {p.rstrip("/") for p in theirs}, (ours, theirs)
    synced_copy(work, tmp_path / "node")
    node = tmp_path / "node"
    received = {
        p.relative_to(node).as_posix() for p in node.rglob("*") if p.is_file() and ".git" not in p.parts
    }
    every = {p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert received == {name for name in every if excluded_entry(name, ours) is None}, (received, ours)
    assert ("data/train.jsonl" in received) is (case == "not a repository")
