"""[eval.judge] end to end: `gym launch` judges a tuned quickstart model, gates on it, pushes, and refuses worse.

The judge is tests/eval/judge_double.py on 127.0.0.1 (OpenAI chat completions, through Gym's ``openai``
client), preferring the answer closer to the reference; the Hub is tests/hub/hub_double.py. Three runs of
one gym.toml that teaches builtin:tiny to reverse letters (examples/quickstart), with no lm-eval task, so the
judge is the only score:

1. trained a few steps, nothing deployed: the champion gate does not apply, it is pushed (with
   judge_answers.jsonl, the answers the next run is judged against);
2. trained properly: it beats its base (win rate near 1, the gate ``judge.winrate_vs_base >= 0.55``) and the
   champion's recorded answers; promoted, and its card's model-index carries the judge's numbers; `gym eval`
   again issues no judge call (the cache); the PR comment shows the judge rows and folded examples;
3. trained a few steps again: worse than the champion, refused in one sentence, the Hub unchanged;

and a judge that answers HTTP 500 or garbage stops `gym launch` before the push, in one sentence.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gym.data.builtin_datasets import reverse_rows
from tests.conftest import REPO
from tests.e2e import loop as e2e
from tests.eval.judge_double import JudgeDouble
from tests.hub.hub_double import HubDouble

pytestmark = pytest.mark.slow

MODEL = "acme/judged-reverse"
CONFIG = """\
[project]
name = "judged"

[model]
name_or_path = "builtin:tiny"
template = "chatml"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"

[train]
method = "sft"
adapter = "full"
max_steps = {steps}
learning_rate = 3e-3
lr_scheduler = "cosine"
warmup_ratio = 0.1
batch_size = 32
max_length = 64

[eval.gates]
rules = {rules}

[eval.judge]
base_url = "{url}"
model = "judge-1"
prompts = "eval/judge.jsonl"
pairwise = ["base", "champion"]
rubric = ["correctness"]
max_calls = 200

[eval.judge.generation]
max_tokens = 24

[hub]
repo_id = "{model}"
"""
CHAMPION_GATE = "judge.winrate_vs_champion >= 0.55"
BASE_GATE = "judge.winrate_vs_base >= 0.55"
GOOD_STEPS, WEAK_STEPS = 400, 2


def write_config(workspace: Path, url: str, steps: int, rules: list[str]) -> None:
    text = CONFIG.format(steps=steps, rules=json.dumps(rules), url=url, model=MODEL)
    (workspace / "gym.toml").write_text(text)


def gym(workspace: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gym", *args], cwd=workspace, env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip


def results(workspace: Path) -> dict:
    return json.loads((workspace / "outputs" / "judged" / "eval_results.json").read_text())


def judge_row(data: dict, metric: str) -> dict:
    return next(r for r in data["results"] if r["task"] == "judge" and r["metric"] == metric)


def test_gym_launch_judges_gates_and_pushes_only_the_better_model(tmp_path: Path) -> None:
    workspace = tmp_path / "repo"
    (workspace / "data").mkdir(parents=True)
    (workspace / "eval").mkdir()
    rows = (REPO / "examples" / "quickstart" / "data" / "train.jsonl").read_text()
    (workspace / "data" / "train.jsonl").write_text(rows)
    prompts = [
        {"prompt": r["instruction"], "reference": r["output"]} for r in reverse_rows("test", n=12, seed=3)
    ]
    (workspace / "eval" / "judge.jsonl").write_text("".join(json.dumps(p) + "\n" for p in prompts))
    hub = HubDouble(e2e.HF_TOKEN, e2e.free_port())
    with hub, JudgeDouble() as judge:
        env = {**e2e.node_env(tmp_path, hub.url, tmp_path / "cache"), "XDG_CACHE_HOME": str(tmp_path / "xdg"),
               "HF_HOME": str(tmp_path / "hf"), "HF_TOKEN": e2e.HF_TOKEN}  # fmt: skip

        # 1. a weak first model, nothing deployed: the champion gate does not apply
        write_config(workspace, judge.url, WEAK_STEPS, [CHAMPION_GATE])
        first = gym(workspace, env, "launch", "gym.toml")
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
        pushed = hub.state.files[f"model:{MODEL}"]
        assert "judge_answers.jsonl" in pushed and hub.state.sha(f"model:{MODEL}") == f"{1:040x}"
        gates = json.loads(pushed["gate_results.json"])
        assert gates["champion"] is None and [r["passed"] for r in gates["results"]] == [None]

        # 2. trained properly: beats its base and the champion; promoted
        write_config(workspace, judge.url, GOOD_STEPS, [BASE_GATE, CHAMPION_GATE])
        good = gym(workspace, env, "launch", "gym.toml")
        assert good.returncode == 0, good.stdout[-4000:] + good.stderr[-4000:]
        data = results(workspace)
        base, champion = judge_row(data, "winrate_vs_base"), judge_row(data, "winrate_vs_champion")
        assert base["value"] >= 0.9 and champion["value"] >= 0.9, (base, champion)
        assert base["samples"] == len(prompts) and data["judge"]["pairwise"]["base"]["unparsed"] == 0
        correctness = judge_row(data, "correctness")
        assert correctness["value"] > correctness["base_value"] and correctness["delta"] > 3
        assert data["judge"]["prompt_versions"] == {"pairwise": "pairwise_v1", "rubric": "rubric_v1"}
        assert data["judge"]["generation"] == {"temperature": 0.0, "max_tokens": 24, "seed": 0}
        assert hub.state.sha(f"model:{MODEL}") == f"{2:040x}"
        promoted = hub.state.files[f"model:{MODEL}"]
        card = promoted["README.md"].decode()
        meta = yaml.safe_load(card.split("---")[1])
        index = {(m["type"], m["value"]) for r in meta["model-index"][0]["results"] for m in r["metrics"]}
        assert ("winrate_vs_base", round(base["value"], 6)) in index
        assert "**LLM judge:** `judge-1`" in card and f"Replaced the model `{MODEL}` held at commit" in card

        # the pull request's comment: the judge rows, its plan line and the folded examples
        from action.run import plan_view
        from gym.config import config_from_args
        from gym.launch.report.outcome import ConfigOutcome, LaunchOutcome
        from gym.launch.report.render import render
        from gym.launch.results import run_results

        config = config_from_args(workspace / "gym.toml")
        outcome = ConfigOutcome(path="gym.toml", mode="launch", reason="labelled",
                                plan=plan_view(config, workspace / "gym.toml", [], cloud=False, workspace=workspace),
                                launch=LaunchOutcome(detail="done", results=run_results(workspace / "outputs" / "judged")))  # fmt: skip
        body = render(outcome)
        assert f"| judge | winrate_vs_base | {len(prompts)} |" in body and "| vs champion |" in body
        assert "prompts where the models disagreed most</summary>" in body
        assert f"{len(prompts)} prompts need {6 * len(prompts)} judge calls before the cache" in body

        # `gym eval` again: every judgment is in the cache (the champion is compared at the gates, not here)
        calls = judge.calls
        again = gym(workspace, env, "eval", "gym.toml")
        assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
        assert judge.calls == calls
        assert results(workspace)["judge"]["usage"]["calls"] == 0

        # 3. weak again: worse than the champion, refused; the Hub keeps its commit
        write_config(workspace, judge.url, WEAK_STEPS, [CHAMPION_GATE])
        worse = gym(workspace, env, "launch", "gym.toml")
        assert worse.returncode == 1, worse.stdout[-4000:] + worse.stderr[-4000:]
        assert f"promotion gate '{CHAMPION_GATE}' failed (short by" in worse.stderr
        assert "Traceback" not in worse.stderr and hub.state.sha(f"model:{MODEL}") == f"{2:040x}"
        assert judge_row(results(workspace), "winrate_vs_champion")["value"] < 0.2

        # a judge that fails stops the run before the push, in one sentence
        for mode, sentence in (
            ("error", f"the judge judge-1 at {judge.url} answered HTTP 500 (3 tries)"),
            ("garbage", f"the judge judge-1 at {judge.url} gave no readable verdict in"),
        ):
            judge.mode = mode
            (workspace / "outputs" / "judged" / "judge_cache.jsonl").unlink(missing_ok=True)
            failed = gym(workspace, env, "launch", "gym.toml")
            assert failed.returncode == 1 and sentence in failed.stderr, failed.stderr[-3000:]
            assert "Traceback" not in failed.stderr and hub.state.sha(f"model:{MODEL}") == f"{2:040x}"
        for text in (first.stdout, good.stdout, worse.stderr, body):
            e2e.assert_no_secret("a command's output", text)
