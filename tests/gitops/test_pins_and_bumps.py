"""Pinned inputs and the scheduled bump pull request, through the real CLI and the Action's entrypoint.

`gym validate` notes the unpinned base model, `gym pin` pins it to the Hub double's commit, a new commit of the
base makes `gym outdated` report it, and the Action in ``mode: outdated`` (the scheduled workflow) opens one pull
request on the GitHub double that bumps the pin, with the plan (train → eval → gates against the champion →
card → deploy) as its comment. Its launch is then the normal approve → launch → gates path (tests/e2e/test_gates.py
runs that one with training). A second scheduled run leaves the open pull request alone; a token without
``contents: write`` is one sentence and no branch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.action.github_contents import GitHubWithContents
from tests.action.github_server import serve
from tests.e2e import loop as e2e
from tests.hub.hub_double import HubDouble

pytestmark = pytest.mark.slow
BASE = "acme/base"
CONFIG = """\
# the base is pinned by `gym pin`
[project]
name = "bumped"

[model]
name_or_path = "acme/base"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"

[eval]
tasks = ["gym_reverse"]

[eval.gates]
rules = ["gym_reverse.exact_match >= champion"]

[hub]
repo_id = "acme/bumped"
"""


@pytest.fixture
def hub() -> Iterator[HubDouble]:
    from huggingface_hub import HfApi

    with HubDouble(e2e.HF_TOKEN, e2e.free_port()) as double:
        api = HfApi(endpoint=double.url, token=e2e.HF_TOKEN)
        api.create_repo(BASE, private=False)
        api.upload_file(path_or_fileobj=b'{"model_type": "llama"}', path_in_repo="config.json", repo_id=BASE)
        yield double


def gym(workspace: Path, hub: HubDouble, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": e2e.venv_path(), "HOME": str(workspace), "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0",
           "HF_TOKEN": e2e.HF_TOKEN, "COLUMNS": "300", "XDG_CACHE_HOME": str(workspace / ".cache")}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "gym", *args], cwd=workspace, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def scheduled(tmp_path: Path, github: GitHubWithContents, hub: HubDouble, workspace: Path, name: str):
    env = e2e.action_env(tmp_path, github, {"schedule": "0 6 * * 1"}, name, "http://127.0.0.1:9", workspace,
                         GYM_INPUT_MODE="outdated", GYM_INPUT_CLOUD="false", HF_ENDPOINT=hub.url,
                         HF_HUB_OFFLINE="0", XDG_CACHE_HOME=str(tmp_path / "xdg"))  # fmt: skip
    env["GITHUB_EVENT_NAME"] = "schedule"
    return e2e.run_action(env, timeout=300)


@pytest.fixture
def github_server() -> Iterator[GitHubWithContents]:
    state = GitHubWithContents(token=e2e.GITHUB_TOKEN)
    server, _ = serve(state)
    yield state
    server.shutdown()
    server.server_close()


def test_a_new_base_revision_opens_one_bump_pull_request_with_its_gated_plan(
    tmp_path: Path, hub: HubDouble, github_server: GitHubWithContents
) -> None:
    from huggingface_hub import HfApi

    workspace = tmp_path / "repo"
    (workspace / "data").mkdir(parents=True)
    (workspace / "data" / "train.jsonl").write_text('{"instruction": "hi", "output": "hello"}\n')
    (workspace / "gym.toml").write_text(CONFIG)
    first = hub.state.sha(f"model:{BASE}")

    validated = gym(workspace, hub, "validate", "gym.toml")
    assert validated.returncode == 0, validated.stderr
    assert (
        "model.revision: acme/base is not pinned (revision 'main' moves when its owner pushes); `gym pin`"
        in (" ".join(validated.stderr.split()))
    )
    pinned = gym(workspace, hub, "pin", "gym.toml")
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    assert f"pinned model.revision  acme/base  main → {first[:12]}" in pinned.stdout
    text = (workspace / "gym.toml").read_text()
    assert f'revision = "{first}"' in text and text.startswith("# the base is pinned by `gym pin`")
    assert "is not pinned" not in gym(workspace, hub, "validate", "gym.toml").stderr

    HfApi(endpoint=hub.url, token=e2e.HF_TOKEN).upload_file(path_or_fileobj=b"{}", path_in_repo="generation_config.json",
                                                           repo_id=BASE)  # fmt: skip
    second = hub.state.sha(f"model:{BASE}")
    moved = gym(workspace, hub, "outdated", "gym.toml", "--json")
    assert json.loads(moved.stdout)["moved"] == [
        {"key": "model.revision", "repo": BASE, "old": first, "new": second}
    ]

    github_server.branches["main"]["gym.toml"] = text.encode()
    done = scheduled(tmp_path, github_server, hub, workspace, "weekly")
    assert done.returncode == 0, done.stdout + done.stderr
    (pull,) = github_server.opened
    assert (pull["head_ref"], pull["base"]) == ("gym/bump/gym", "main")
    assert f"model.revision  acme/base  {first[:12]} → {second[:12]}" in pull["body"]
    bumped = github_server.branches["gym/bump/gym"]["gym.toml"].decode()
    assert (
        bumped == text.replace(first, second) and github_server.branches["main"]["gym.toml"] == text.encode()
    )
    (comment,) = github_server.comments[pull["number"]]
    body = comment["body"]
    assert "plan only: a scheduled bump of gym.toml's pinned inputs; apply `gym:launch` to launch it" in body
    assert "train → eval → gates" in body and "bumped model.revision" in body
    assert f"gym.toml: opened #{pull['number']} (gym/bump/gym)" in done.stdout

    (workspace / "gym.toml").write_text(text)  # the next week's checkout: main still pins the first commit
    again = scheduled(tmp_path, github_server, hub, workspace, "next-week")
    assert again.returncode == 0 and len(github_server.opened) == 1
    assert (
        "gym.toml: the bump pull request of gym/bump/gym is open already; merge or close it first"
        in again.stdout
    )


def test_a_scheduled_run_without_write_permission_is_one_sentence(
    tmp_path: Path, hub: HubDouble, github_server: GitHubWithContents
) -> None:
    workspace = tmp_path / "repo"
    (workspace / "data").mkdir(parents=True)
    (workspace / "data" / "train.jsonl").write_text('{"instruction": "hi", "output": "hello"}\n')
    text = CONFIG.replace(
        'name_or_path = "acme/base"', f'name_or_path = "acme/base"\nrevision = "{"0" * 40}"'
    )
    (workspace / "gym.toml").write_text(text)
    github_server.branches["main"]["gym.toml"] = text.encode()
    github_server.scopes[e2e.GITHUB_TOKEN] = {"contents": "read", "pull-requests": "write"}
    done = scheduled(tmp_path, github_server, hub, workspace, "read-only")
    assert done.returncode == 1
    sentence = (
        "gym.toml: the github-token may not create the branch gym/bump/gym (GitHub answered 403 'Resource not "
        "accessible by integration'): the scheduled workflow's job needs `contents: write` and `pull-requests: "
        "write` under permissions:; nothing was changed"
    )
    assert f"::error::{sentence}" in done.stdout
    assert list(github_server.heads) == ["main"] and github_server.opened == []
    assert e2e.GITHUB_TOKEN not in done.stdout + done.stderr and "Traceback" not in done.stderr
