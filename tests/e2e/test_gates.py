"""Promotion gates end to end: a run reaches the Hub and its Space only when it beats what is deployed.

Three runs of one gym.toml on the doubles (Hub: huggingface_hub; GitHub: PyGithub through the action's
real entrypoint, ``cloud: false`` so `gym launch` runs on the runner): the first, with nothing deployed,
is promoted; the second, trained for fewer steps, scores a worse held-out loss than the champion, so its
pull request gets a failing status and a comment naming the gate, and neither `gym launch` nor `gym
deploy` changes the Hub (same commit ids); the third, trained longer, is promoted and its card names the
commit it replaced. `gym deploy --force` pushes the second one on purpose, and its card says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.action.github_server import serve
from tests.conftest import REPO
from tests.e2e import loop as e2e
from tests.hub.hub_double import HubDouble

pytestmark = pytest.mark.slow

MODEL, SPACE = "acme/gated-bot", "acme/gated-bot-chat"
GATE = "held-out.eval_loss <= champion"

CONFIG = """\
[project]
name = "gated-bot"

[model]
name_or_path = "builtin:tiny"
template = "chatml"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"
eval_fraction = 0.25

[train]
method = "sft"
adapter = "lora"
max_steps = {steps}
batch_size = 8
max_length = 64

[eval]
tasks = ["gym_reverse"]
limit = 2

[eval.gates]
rules = ["held-out.eval_loss <= base + 0.01", "{gate}", "gym_reverse.exact_match >= 0"]

[hub]
repo_id = "{model}"

[space]
repo_id = "{space}"
hf_token_env = "HF_READ_TOKEN"
hardware = "t4-small"  # GPU hardware: the Space serves the pushed weights (a CPU Space's GGUF is tests/hub's)
wait_minutes = 0  # checks the push; tests/hub/test_space_runtime_flow.py runs a pushed Space
"""

REPOSITORY = {
    "full_name": "acme/models",
    "name": "models",
    "default_branch": "main",
    "owner": {"login": "acme"},
}
PUSH = {"ref": "refs/heads/main", "before": "1" * 40, "after": "2" * 40, "repository": REPOSITORY}
PULL = {
    "action": "labeled", "number": 5, "label": {"name": "gym:launch"}, "repository": REPOSITORY,
    "pull_request": {"number": 5, "labels": [{"name": "gym:launch"}],
                     "head": {"ref": "worse", "sha": "a" * 40, "repo": REPOSITORY},
                     "base": {"ref": "main", "sha": "b" * 40, "repo": REPOSITORY}},
}  # fmt: skip


def write_config(workspace: Path, steps: int) -> None:
    text = CONFIG.format(steps=steps, gate=GATE, model=MODEL, space=SPACE)
    (workspace / "gym.toml").write_text(text)


def gym(workspace: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gym", *args], cwd=workspace, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip


def shas(hub: HubDouble) -> tuple[str, str]:
    """The commit ids the model repository and the Space are at."""
    return hub.state.sha(f"model:{MODEL}"), hub.state.sha(f"space:{SPACE}")


def held_out_loss(files: dict[str, bytes]) -> float:
    rows = json.loads(files["eval_results.json"])["results"]
    return next(r["value"] for r in rows if r["task"] == "held-out" and r["metric"] == "eval_loss")


def card_meta(files: dict[str, bytes]) -> dict:
    return yaml.safe_load(files["README.md"].decode().split("---")[1])


def test_only_a_run_that_passes_every_gate_reaches_the_hub_and_its_space(tmp_path: Path) -> None:
    workspace = tmp_path / "repo"
    (workspace / "data").mkdir(parents=True)
    rows = (REPO / "examples" / "quickstart" / "data" / "train.jsonl").read_text().splitlines()[:64]
    (workspace / "data" / "train.jsonl").write_text("\n".join(rows) + "\n")
    github = e2e.GitHubWithStatuses(token=e2e.GITHUB_TOKEN)
    server, _ = serve(github)
    hub = HubDouble(e2e.HF_TOKEN, e2e.free_port())
    shared = {
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "HF_ENDPOINT": "",
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "OMP_NUM_THREADS": "1",
        "HF_READ_TOKEN": e2e.READ_TOKEN,
        "GYM_API_KEY": e2e.API_KEY,
    }  # the action's runs get HF_TOKEN from its hf-token input (GYM_INPUT_HF_TOKEN) only
    try:
        with hub:
            shared["HF_ENDPOINT"] = hub.url

            def action(event: dict, name: str, steps: int) -> subprocess.CompletedProcess:
                write_config(workspace, steps)
                env = e2e.action_env(tmp_path, github, event, name, "http://127.0.0.1:9", workspace,
                                     GYM_INPUT_CLOUD="false", **shared)  # fmt: skip
                return e2e.run_action(env, timeout=600)

            # 1. push to main, nothing deployed yet: the champion gate does not apply, the others hold
            github.compares["1" * 40 + "..." + "2" * 40] = [("gym.toml", "modified")]
            first = action(PUSH, "push", steps=6)
            assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
            assert shas(hub) == (f"{1:040x}", f"{1:040x}")
            champion = dict(hub.state.files[f"model:{MODEL}"])
            gates = json.loads(champion["gate_results.json"])
            assert gates["passed"] is True and gates["champion"] is None
            assert [r["passed"] for r in gates["results"]] == [True, None, True]
            assert "No model to replace" in champion["README.md"].decode()
            assert [(s["state"], s["context"], s["sha"]) for s in github.statuses] == [
                ("success", "gym / gym.toml", "2" * 40)
            ]
            assert "gates: 2 of 2 gates pass" in github.statuses[0]["description"]

            # 2. a pull request that trains for one step: a worse held-out loss than the champion's
            github.pulls[5] = {"head_repo": "acme/models"}
            github.files[5] = [("gym.toml", "modified")]
            github.labels[5] = []
            github.roles["wendy"] = "write"
            github.apply_label(5, "gym:launch", "wendy")
            worse = action(PULL, "pull_request", steps=1)
            assert worse.returncode == 1, worse.stdout[-4000:] + worse.stderr[-4000:]
            status = github.statuses[-1]
            assert (status["state"], status["context"], status["sha"]) == (
                "failure",
                "gym / gym.toml",
                "a" * 40,
            )
            assert f"failed: {GATE} (short by" in status["description"]
            (comment,) = github.comments[5]
            body = comment["body"]
            assert "❌ promotion gates failed: not pushed" in body
            assert "train → eval → gates → card → deploy" in body  # the plan names the gates stage
            assert f"`{GATE}`" in body and "❌ fail (short by" in body
            assert f"champion `{MODEL}` at `{f'{1:040x}'[:12]}`" in body
            results = json.loads((workspace / "outputs" / "gated-bot" / "gate_results.json").read_text())
            failed = next(r for r in results["results"] if r["gate"] == GATE)
            assert failed["reference_value"] == pytest.approx(held_out_loss(champion), abs=1e-6)
            assert failed["value"] > failed["reference_value"] and failed["passed"] is False
            row = f"| `{GATE}` | champion {failed['reference_value']:.4f} | {failed['value']:.4f} | {failed['delta']:+.4f} |"
            assert row in body
            assert shas(hub) == (f"{1:040x}", f"{1:040x}")

            # the same config where it would push: `gym launch` and `gym deploy` leave the Hub as it is
            env = {**e2e.node_env(tmp_path, hub.url, tmp_path / "cache"), **shared, "HF_TOKEN": e2e.HF_TOKEN}
            launched = gym(workspace, env, "launch", "gym.toml")
            assert launched.returncode == 1, launched.stdout[-4000:] + launched.stderr[-4000:]
            # the pull request's run differs from this one only in what it publishes: nothing retrains
            assert "[train] already done" in launched.stdout and "[eval] already done" in launched.stdout
            assert f"promotion gate '{GATE}' failed (short by" in launched.stderr
            assert "Traceback" not in launched.stderr
            table = [line for line in launched.stdout.splitlines() if line.startswith(GATE)]
            assert len(table) == 1 and "❌ fail" in table[0]
            deployed = gym(workspace, env, "deploy", "gym.toml")
            assert deployed.returncode == 1 and f"promotion gate '{GATE}' failed" in deployed.stderr
            assert shas(hub) == (f"{1:040x}", f"{1:040x}")
            assert hub.state.files[f"model:{MODEL}"] == champion

            # `gym deploy --force` pushes it on purpose, and the card records that it was forced
            forced = gym(workspace, env, "deploy", "gym.toml", "--force")
            assert forced.returncode == 0, forced.stdout[-4000:] + forced.stderr[-4000:]
            assert shas(hub)[0] == f"{2:040x}"  # the Space's files are the same: the Hub makes no new commit
            card = hub.state.files[f"model:{MODEL}"]["README.md"].decode()
            assert "**Forced:** pushed with `gym deploy --force` although gates failed" in card
            assert f"Replaced the model `{MODEL}` held at commit `{1:040x}`" in card

            # 3. trained longer: better than the (forced) champion, promoted; its card names what it replaced
            write_config(workspace, steps=12)
            better = gym(workspace, env, "launch", "gym.toml")
            assert better.returncode == 0, better.stdout[-4000:] + better.stderr[-4000:]
            assert shas(hub)[0] == f"{3:040x}"
            promoted = hub.state.files[f"model:{MODEL}"]
            gates = json.loads(promoted["gate_results.json"])
            assert gates["passed"] is True and gates["champion"] == {"repo": MODEL, "sha": f"{2:040x}"}
            card = promoted["README.md"].decode()
            assert f"Replaced the model `{MODEL}` held at commit `{2:040x}`" in card and "Forced" not in card
            beaten = next(r for r in gates["results"] if r["gate"] == GATE)
            assert beaten["passed"] is True and beaten["value"] == pytest.approx(
                held_out_loss(promoted), abs=1e-6
            )
            assert beaten["reference_value"] == pytest.approx(
                failed["value"], abs=1e-6
            )  # the forced run's loss
            assert card_meta(promoted)["model-index"][0]["results"]
    finally:
        server.shutdown()
        server.server_close()
    for text in (first.stdout, worse.stdout, launched.stdout, launched.stderr, better.stdout):
        e2e.assert_no_secret("a command's output", text)
    for files in hub.state.files.values():
        for path, content in files.items():
            e2e.assert_no_secret(path, content)
