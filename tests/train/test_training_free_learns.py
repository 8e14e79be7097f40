"""Training-free GRPO demonstrably helps: a lesson that only the contrast of rollouts reveals is learned,
and `gym eval --experiences` scores the policy higher with the library than without it.

Two scripted OpenAI-compatible servers on 127.0.0.1 stand in for the two models of the method:
- the policy answers a reversal problem right every time when the lesson is in its system prompt;
  without it, its sampled answers per problem alternate between copying the letters (wrong, first)
  and reversing them (right), so greedy-like first answers are wrong and groups contain both rewards;
- the learner (its own endpoint, model and key: ``learner_api_base``) can only name the lesson from a
  group that holds a right and a wrong attempt: its summary echoes each attempt, and its advantage step
  compares the best and worst attempts against the problem. It proposes nothing the library (shown in
  its prompt) already says.
Everything between them is Gym's: `gym train` (prompts, rewards, library, files) and `gym eval`
(lm-eval's chat-completions client, the library in the system prompt).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gym.data.builtin_datasets import reverse_rows
from tests.train.scripted_server import ScriptedServer, scripted_server

REPO = Path(__file__).resolve().parents[2]
LESSON = "When asked to reverse letters, write them from the last to the first."
POLICY_KEY, LEARNER_KEY = "sk-policy-test-0001", "sk-learner-test-0002"


def letters(problem: str) -> list[str]:
    return problem.removeprefix("Reverse:").split()


def policy(messages: list[dict[str, Any]], server: ScriptedServer) -> str | int:
    """Right with the lesson in the system prompt; else wrong first, then alternating, per problem."""
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    problem = messages[-1]["content"]
    if not problem.startswith("Reverse:"):
        return 400  # the learner's calls must never reach the policy's endpoint
    right, wrong = " ".join(reversed(letters(problem))), " ".join(letters(problem))
    if LESSON in system:
        return right
    return [wrong, right][server.count(problem) % 2]


def learner(messages: list[dict[str, Any]], server: ScriptedServer) -> str | int:
    text = messages[-1]["content"]
    if text.startswith("## Task: summarise one attempt"):
        attempt = text.split("Attempt:\n", 1)[1].strip()
        return json.dumps({"summary": f"The attempt answered: {attempt}"})
    if text.startswith("## Task: extract experiences"):
        library = text.split("Current experience library:\n", 1)[1].split("\n\nProblem:", 1)[0]
        problem = re.search(r"Problem:\n(.*)\n", text)[1]
        graded = re.findall(r"Attempt \d+ \(reward ([\d.]+)\):\nThe attempt answered: (.*)", text)
        best = [a for r, a in graded if float(r) == 1.0]
        worst = [a for r, a in graded if float(r) == 0.0]
        reversed_answer = " ".join(reversed(letters(problem)))
        found = best and worst and best[0] == reversed_answer and worst[0] != reversed_answer
        if not found or LESSON in library:
            return json.dumps({"experiences": []})
        return json.dumps({"experiences": [LESSON]})
    if text.startswith("## Task: update the experience library"):
        library = text.split("Current experience library:\n", 1)[1].split("\n\nNewly", 1)[0]
        op = {"operation": "NONE"} if LESSON in library else {"operation": "ADD", "content": LESSON}
        return json.dumps({"operations": [op]})
    if text.startswith("## Task: consolidate library operations"):
        listed = re.search(r"<operations>\n(.*)\n</operations>", text, re.DOTALL)[1]
        unique = {json.dumps(op, sort_keys=True): op for op in json.loads(listed)}
        return json.dumps({"operations": list(unique.values())})
    return 400


def gym(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "POLICY_KEY": POLICY_KEY, "LEARNER_KEY": LEARNER_KEY,
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "gym", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


@pytest.mark.slow
def test_the_learned_library_raises_the_score(tmp_path: Path) -> None:
    rows = [{"prompt": r["instruction"], "answer": r["output"]} for r in reverse_rows("train", 4, seed=3)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with (
        scripted_server(policy, api_key=POLICY_KEY) as pol,
        scripted_server(learner, api_key=LEARNER_KEY) as lrn,
    ):
        lrn.model = "learner-model"
        (tmp_path / "gym.toml").write_text(
            f"""
[project]
name = "tf-learns"
output_dir = "out"
[model]
name_or_path = "builtin:tiny"
[[datasets]]
path = "data.jsonl"
format = "prompt"
[train]
method = "grpo"
batch_size = 2
epochs = 2
[train.grpo]
training_free = true
group_size = 4
api_base = "{pol.url}"
api_key_env = "POLICY_KEY"
learner_api_base = "{lrn.url}"
learner_model = "learner-model"
learner_api_key_env = "LEARNER_KEY"
concurrency = 4
request_timeout = 30
[eval]
tasks = ["gym_reverse"]
limit = 8
""",
            encoding="utf-8",
        )
        trained = gym(["train"], tmp_path)
        assert trained.returncode == 0, trained.stdout + trained.stderr
        library = json.loads((tmp_path / "experiences" / "latest.json").read_text())
        assert [e["text"] for e in library["experiences"]] == [LESSON]
        evaluated = gym(["eval", "--experiences", "experiences/latest.json", "--no-card"], tmp_path)
        assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr

    results = json.loads((tmp_path / "out" / "eval_results.json").read_text())
    (score,) = [r for r in results["results"] if r["metric"] == "exact_match"]
    assert score["value"] == 1.0 and score["base_value"] == 0.0, score  # with the library vs without it
    # Each endpoint got only its own calls, each with its own key; the keys are in no file or output.
    assert all(
        not m["body"]["messages"][-1]["content"].startswith("## Task") for m in pol.requests if m["body"]
    )
    learner_calls = [m for m in lrn.requests if m["body"]]
    assert learner_calls and all(m["body"]["model"] == "learner-model" for m in learner_calls)
    assert {m["headers"]["authorization"] for m in pol.requests} == {f"Bearer {POLICY_KEY}"}
    assert {m["headers"]["authorization"] for m in lrn.requests} == {f"Bearer {LEARNER_KEY}"}
    # Once the lesson was learned every later group was right throughout: nothing more to learn from.
    steps = json.loads((tmp_path / "out" / "train_results.json").read_text())["training_free"]["steps"]
    assert steps[0]["groups_kept"] == 2 and all(s["groups_kept"] == 0 for s in steps[1:]), steps
    outputs = trained.stdout + trained.stderr + evaluated.stdout + evaluated.stderr
    for secret in (POLICY_KEY, LEARNER_KEY):
        assert secret not in outputs
        for path in tmp_path.rglob("*"):
            if path.is_file():
                assert secret not in path.read_text(encoding="utf-8", errors="replace"), path


def test_keys_training_free_cannot_honour_are_refused(write_toml: Any) -> None:
    from gym.config import ConfigError, load_config

    path = write_toml(
        """
        [project]
        name = "tf"
        [model]
        name_or_path = "builtin:tiny"
        [[datasets]]
        path = "data.jsonl"
        format = "prompt"
        [train]
        method = "grpo"
        report_to = ["tensorboard"]
        gradient_accumulation_steps = 2
        [train.grpo]
        training_free = true
        learner_api_key_env = "LEARNER_KEY"
        """
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    assert re.search(r"gym\.toml:11:\d+: train\.report_to: training-free GRPO trains no weights", text), text
    assert re.search(r"gym\.toml:12:\d+: train\.gradient_accumulation_steps: training-free GRPO has no", text)
    assert re.search(r"gym\.toml:15:\d+: train\.grpo\.learner_api_key_env: .*learner_api_base", text)
