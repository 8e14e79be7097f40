"""Lineage, history and rollback through the real CLI (`gym deploy`, `gym history`, `gym rollback`) and the real
huggingface_hub client, against the Hub double (which keeps every commit: tests/hub/hub_history.py).

A project in a git checkout (its remote URL carries a token, as actions/checkout leaves it) is promoted: the Hub
commit names the git commit, the card and eval_results.json record repository, commit, pull request and gym.toml,
and the Space is pinned to the Hub commit. A second push fails its gate and is forced; its card diffs its gym.toml
against the champion's. `gym rollback` restores the first promotion's files in a new Hub commit and points the
Space at it; `gym history` lists all three. Bad input is one sentence each and changes nothing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.conftest import free_port, server_env
from tests.hub.hub_double import HubDouble
from tests.hub.test_deploy import TOKEN

pytestmark = pytest.mark.slow
MODEL, SPACE = "acme/tiny-lora", "acme/tiny-lora-chat"
GIT_TOKEN = "ghs_" + "C" * 36  # in the remote URL: never in a card, a commit or the output
CONFIG = """\
[project]
name = "tiny-lora"
output_dir = "output/tiny-lora"

[model]
name_or_path = "builtin:tiny"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"

[eval]
tasks = ["gym_reverse"]

[eval.gates]
rules = ["gym_reverse.exact_match >= {floor}"]

[hub]
repo_id = "{model}"
private = false

[space]
repo_id = "{space}"
hardware = "t4-small"
wait_minutes = 0
"""


def git(folder: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e", "HOME": str(folder), "PATH": "/usr/bin:/bin"}  # fmt: skip
    done = subprocess.run(["git", *args], cwd=folder, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def gym(args: list[str], cache_root: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """The real `gym` command (python -m gym), online against the double."""
    return subprocess.run(
        [sys.executable, "-m", "gym", *args], cwd=cwd, capture_output=True, text=True, timeout=300,
        env=server_env(cache_root, HF_HUB_OFFLINE="0", COLUMNS="400", **env),
    )  # fmt: skip


def write_scores(model: Path, value: float) -> None:
    from gym.eval.report import EvalReport, TaskScore

    EvalReport(
        model=str(model), results=[TaskScore("gym_reverse", "exact_match", value, source="gym")]
    ).write(model)


def project(root: Path, lora_dir: Path, floor: float = 0.5) -> Path:
    """A git checkout holding gym.toml and the trained folder (outputs are ignored, as a project does)."""
    shutil.copytree(lora_dir, root / "output" / "tiny-lora")
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "data" / "train.jsonl").write_text('{"instruction": "hi", "output": "hello"}\n')
    (root / "gym.toml").write_text(CONFIG.format(floor=floor, model=MODEL, space=SPACE))
    (root / ".gitignore").write_text("output/\n")
    return root / "gym.toml"


def commits(hub: HubDouble, key: str = f"model:{MODEL}") -> list:
    return hub.state.history.commits.get(key, [])


def test_promotion_records_its_source_and_a_forced_push_is_rolled_back(lora_dir: Path, cache_root: Path,
                                                                        tmp_path: Path) -> None:  # fmt: skip
    root = tmp_path / "models"
    root.mkdir()
    config = project(root, lora_dir)
    model = root / "output" / "tiny-lora"
    git(root, "init", "-q", "-b", "main")
    git(root, "remote", "add", "origin", f"https://x-access-token:{GIT_TOKEN}@github.com/acme/models.git")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first")
    first_git = git(root, "rev-parse", "HEAD")
    with HubDouble(TOKEN, free_port()) as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN, "GYM_PULL_REQUEST": "5", "GITHUB_REF": ""}
        write_scores(model, 0.9)
        done = gym(["deploy", "gym.toml"], cache_root, root, **env)
        assert done.returncode == 0, done.stdout + done.stderr
        (first,) = commits(hub)
        assert first.title == f"Upload model with gym from {first_git[:12]}"
        assert f"Gym-Source-Commit: {first_git}" in first.message
        assert "Gym-Pull-Request: #5 https://github.com/acme/models/pull/5" in first.message
        assert "Gym-Source-Repository: https://github.com/acme/models\n" in first.message
        assert "Gym-Forced: no" in first.message and "Gym-Config: gym.toml" in first.message
        assert f"Hub commit {first.oid}" in done.stdout
        card = first.files["README.md"].decode()
        assert (
            "## Source" in card
            and f"[`{first_git[:12]}`](https://github.com/acme/models/commit/{first_git})" in card
        )
        assert "[#5](https://github.com/acme/models/pull/5)" in card
        source = json.loads(first.files["eval_results.json"])["source"]
        assert (source["commit"], source["pull_request"], source["config"]) == (first_git, 5, "gym.toml")
        assert source["config_text"] == config.read_text()
        space = hub.state.files[f"space:{SPACE}"]
        assert json.loads(space["gym_space.json"])["revision"] == first.oid
        assert (model / "README.md").read_text().count("## Source") == 0  # the run's folder is left as it was

        # a worse model, pushed with --force past its failing gate, from a changed gym.toml
        config.write_text(config.read_text().replace('name = "tiny-lora"', 'name = "tiny-lora-v2"'))
        git(root, "commit", "-q", "-am", "second")
        second_git = git(root, "rev-parse", "HEAD")
        write_scores(model, 0.1)
        refused = gym(["deploy", "gym.toml"], cache_root, root, **env)
        assert refused.returncode == 1 and len(commits(hub)) == 1
        forced = gym(["deploy", "gym.toml", "--force"], cache_root, root, **env)
        assert forced.returncode == 0, forced.stdout + forced.stderr
        second = commits(hub)[-1]
        assert (
            "Gym-Forced: yes" in second.message and "failed: gym_reverse.exact_match >= 0.5" in second.message
        )
        card = second.files["README.md"].decode()
        assert (
            '-name = "tiny-lora"\n+name = "tiny-lora-v2"' in card
        )  # the diff against the champion's gym.toml
        assert f"from {second_git[:12]}" in second.title

        listed = gym(["history", "gym.toml"], cache_root, root, **env)
        assert listed.returncode == 0, listed.stdout + listed.stderr
        rows = [line for line in listed.stdout.splitlines() if line[:12] in (first.oid[:12], second.oid[:12])]
        assert rows[0].startswith(second.oid[:12]) and "← serving" in rows[0] and " yes " in rows[0]
        assert f"{first_git[:12]} PR #5" in rows[1] and "1 of 1 gates pass" in rows[1]

        rolled = gym(["rollback", "gym.toml", "--reason", "forced past its gate"], cache_root, root, **env)
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        third = commits(hub)[-1]
        assert third.title == f"Roll back with gym to {first.oid[:12]}"
        assert (
            f"Gym-Rollback-From: {second.oid}" in third.message
            and "Gym-Reason: forced past its gate" in third.message
        )
        assert third.files == first.files  # main serves the first promotion's files again
        space = hub.state.files[f"space:{SPACE}"]
        assert json.loads(space["gym_space.json"])["revision"] == third.oid
        history = json.loads(gym(["history", "gym.toml", "--json"], cache_root, root, **env).stdout)
        assert [(h["kind"], h["serving"]) for h in history] == [
            ("rollback", True),
            ("push", False),
            ("push", False),
        ]

        # bad input: one sentence each, nothing changed
        before = len(commits(hub))
        never = gym(["rollback", "gym.toml", "--to", "f" * 40], cache_root, root, **env)
        assert never.returncode == 1
        assert never.stderr.strip() == (
            f"error {'f' * 40} was never promoted to {MODEL}: `gym rollback --to` takes one of the Hub commits "
            "`gym history` lists"
        )
        again = gym(["rollback", "gym.toml"], cache_root, root, **env)
        assert again.returncode == 1 and again.stderr.strip() == (
            f"error {MODEL} has no promotion before the one it serves ({first.oid[:12]}), so there is nothing "
            "earlier to roll back to; `gym history` lists its promotions"
        )
        back = gym(["rollback", "gym.toml", "--to", second.oid], cache_root, root, **env)  # forward again
        assert back.returncode == 0, back.stdout + back.stderr
        assert commits(hub)[-1].files == second.files and len(commits(hub)) == before + 1
        for done in (listed, rolled, never, again, back, forced):
            assert GIT_TOKEN not in done.stdout + done.stderr and "Traceback" not in done.stderr
        for files in (c.files for c in commits(hub)):
            assert all(GIT_TOKEN.encode() not in content for content in files.values())


def test_rollback_with_no_history_and_a_push_outside_git(
    lora_dir: Path, cache_root: Path, tmp_path: Path
) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    project(root, lora_dir, floor=0.0)
    write_scores(root / "output" / "tiny-lora", 0.5)
    with HubDouble(TOKEN, free_port()) as hub:
        env = {
            "HF_ENDPOINT": hub.url,
            "HF_TOKEN": TOKEN,
            "GITHUB_REF": "",
            "GIT_CEILING_DIRECTORIES": str(tmp_path),
        }
        empty = gym(["rollback", "gym.toml"], cache_root, root, **env)
        assert empty.returncode == 1 and empty.stderr.strip() == (
            f"error the model repository {MODEL} does not exist on the Hub, or $HF_TOKEN cannot read it: nothing "
            "was promoted there yet (`gym deploy` pushes the first model)"
        )
        done = gym(["deploy", "gym.toml"], cache_root, root, **env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "fatal" not in done.stdout + done.stderr and "not a git repository" not in done.stderr
        (pushed,) = commits(hub)
        assert pushed.title == "Upload model with gym (not in a git repository)"
        card = pushed.files["README.md"].decode()
        assert card.count("not in a git repository") == 1
        only = gym(["rollback", "gym.toml"], cache_root, root, **env)
        assert only.returncode == 1 and "has no promotion before the one it serves" in only.stderr
        assert len(commits(hub)) == 1


@pytest.fixture(scope="session")
def default_space_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv a transformers Space of this checkout builds, built before the rollback's bounded subprocess
    follows one (the Hub double reuses it by requirements; `make test` prebuilds it)."""
    from gym.hub.space import SpaceSettings, render_space
    from tests.space_runtime import space_python

    folder = render_space(tmp_path_factory.mktemp("space"), SpaceSettings("a/m", "a/m-chat", "t4-small"))
    return space_python(folder)


def scramble(model: Path) -> None:
    """Other weights for the same adapter: its LoRA matrices moved far by seeded noise."""
    import torch
    from safetensors.torch import load_file, save_file

    path = model / "adapter_model.safetensors"
    tensors = load_file(path)
    noise = torch.Generator().manual_seed(0)
    for name, tensor in tensors.items():
        if "lora_" in name:
            tensors[name] = tensor + torch.randn(tensor.shape, generator=noise) * 4.0
    save_file(tensors, path, metadata={"format": "pt"})


def test_a_rolled_back_space_runs_and_serves_the_earlier_promotions_weights(
    lora_dir: Path, cache_root: Path, tmp_path: Path, default_space_venv: Path
) -> None:
    """A good model is promoted, other weights are forced past the gate; `gym rollback` repins the Space, follows
    it until it runs, and its API then answers as `gym serve` does with the first weights, not the second."""
    import httpx
    from huggingface_hub import HfApi

    from gym.hub.space_runtime import space_url
    from tests.hub.test_space_runtime_flow import MESSAGE, served_answer
    from tests.space_runtime import api_answer

    root = tmp_path / "models"
    root.mkdir()
    config = project(root, lora_dir)
    model = root / "output" / "tiny-lora"
    worse = tmp_path / "worse"
    shutil.copytree(model, worse)
    scramble(worse)
    expected = served_answer(lora_dir, MODEL, MESSAGE, cache_root, 16)
    assert expected != served_answer(worse, MODEL, MESSAGE, cache_root, 16)  # the two can be told apart
    with HubDouble(TOKEN, free_port()) as hub:
        env = {
            "HF_ENDPOINT": hub.url,
            "HF_TOKEN": TOKEN,
            "GITHUB_REF": "",
            "GIT_CEILING_DIRECTORIES": str(tmp_path),
        }
        write_scores(model, 0.9)
        assert gym(["deploy", "gym.toml"], cache_root, root, **env).returncode == 0
        shutil.rmtree(model)
        shutil.copytree(worse, model)
        write_scores(model, 0.1)
        forced = gym(["deploy", "gym.toml", "--force"], cache_root, root, **env)
        assert forced.returncode == 0, forced.stdout + forced.stderr
        hub.state.run_spaces = True  # from here the double builds and runs what the Space repo holds
        hub.state.space_env = {"XDG_CACHE_HOME": str(cache_root)}
        config.write_text(config.read_text().replace("wait_minutes = 0", "wait_minutes = 4"))
        rolled = gym(["rollback", "gym.toml"], cache_root, root, **env)
        out = rolled.stdout + rolled.stderr
        assert rolled.returncode == 0, out[-4000:]
        restored = commits(hub)[-1]
        runtime = HfApi(endpoint=hub.url, token=TOKEN).get_space_runtime(SPACE)
        assert runtime.stage == "RUNNING", out[-4000:]
        url = space_url(runtime.raw, SPACE)
        assert f"Space {SPACE} RUNNING at {url}" in out
        assert httpx.get(url + "/gym/served", timeout=30).json() == {"model": MODEL, "revision": restored.oid}
        assert api_answer(url, "no-key-set", MODEL, MESSAGE, max_tokens=16) == expected
