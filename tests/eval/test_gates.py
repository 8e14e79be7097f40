"""Gates against the champion on the Hub double (huggingface_hub), and the sentences a gate that cannot be
compared ends with: no champion scores, other settings, a metric the task did not produce."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from gym.config.gates import parse_gate
from gym.eval.gates import Champion, GateError, evaluate_gates
from gym.eval.report import EvalReport, TaskScore
from gym.hub.champion import read_champion
from tests.e2e.loop import free_port, venv_path
from tests.hub.hub_double import HubDouble

TOKEN = "hf_" + "G" * 34


def report(value: float, stderr: float | None = 0.03, limit: int = 100, samples: int = 100) -> EvalReport:
    row = TaskScore(task="mmlu", metric="acc", value=value, stderr=stderr, samples=samples, base_value=0.4,
                    delta=value - 0.4, higher_is_better=True, n_shot=5)  # fmt: skip
    return EvalReport(model="out", results=[row], base_model="base", num_fewshot=5, limit=limit)


def champion(value: float = 0.5, **kwargs: object) -> Champion:
    return Champion(repo="acme/bot", sha="c" * 40, report=report(value, stderr=0.04, **kwargs))  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "passed"), [(0.62, True), (0.58, False)])
def test_a_margin_beyond_noise_uses_the_stderr_of_the_difference(value: float, passed: bool) -> None:
    gates = [parse_gate("mmlu.acc >= champion + 2*stderr"), parse_gate("mmlu.acc >= base - 0.01")]
    result = evaluate_gates(gates, report(value), champion(), "acme/bot")
    first = result.results[0]
    stderr = math.sqrt(0.03**2 + 0.04**2)  # 0.05
    assert first.stderr == pytest.approx(stderr)
    assert first.bound == pytest.approx(0.5 + 2 * stderr)  # 0.6
    assert first.delta == pytest.approx(value - 0.5)
    assert first.margin == pytest.approx(value - 0.6)
    assert (first.passed, result.passed) == (passed, passed)
    assert result.results[1].bound == pytest.approx(0.39) and result.results[1].passed
    assert result.champion == {"repo": "acme/bot", "sha": "c" * 40}


def test_lower_is_better_passes_below_the_champion() -> None:
    row = TaskScore(task="held-out", metric="eval_loss", value=1.2, base_value=2.0, higher_is_better=False)
    mine = EvalReport(model="out", results=[row], limit=4)
    theirs = EvalReport(
        model="old", results=[TaskScore(task="held-out", metric="eval_loss", value=1.5)], limit=4
    )
    result = evaluate_gates(
        [parse_gate("held-out.eval_loss <= champion - 0.1")], mine, Champion("a/b", "1" * 40, theirs)
    )
    assert result.passed and result.results[0].margin == pytest.approx(1.4 - 1.2)


def test_a_champion_scored_with_other_settings_is_refused() -> None:
    with pytest.raises(GateError) as caught:
        evaluate_gates([parse_gate("mmlu.acc >= champion")], report(0.7, limit=50, samples=50), champion())
    assert str(caught.value) == (
        "gate 'mmlu.acc >= champion' is refused: the champion acme/bot@cccccccccccc was scored with different "
        "settings (limit 100 there and 50 here; samples 100 there and 50 here); score this run as the champion "
        "was (eval.limit, eval.num_fewshot, the same task data) or remove the gate"
    )


def test_a_metric_the_task_did_not_produce_names_those_it_did() -> None:
    with pytest.raises(GateError) as caught:
        evaluate_gates([parse_gate("mmlu.acc_norm >= 0.3")], report(0.7), None)
    assert (
        str(caught.value)
        == "gate 'mmlu.acc_norm >= 0.3': task 'mmlu' produced no 'acc_norm'; it produced acc"
    )


def test_gym_tasks_score_what_validation_says() -> None:
    from gym.config.gates import GYM_TASK_METRICS
    from gym.eval.builtin_tasks import BUILTIN_TASKS, reverse_task_config
    from gym.eval.vision_tasks import VISION_TASKS

    assert set(GYM_TASK_METRICS) == set(BUILTIN_TASKS) | set(VISION_TASKS)
    listed = reverse_task_config(Path("test.jsonl"))["metric_list"]
    assert GYM_TASK_METRICS["gym_reverse"] == {m["metric"]: m["higher_is_better"] for m in listed}


def test_a_margin_in_stderr_needs_a_stderr() -> None:
    with pytest.raises(GateError, match="asks for a margin in stderr, but mmlu.acc has no standard error"):
        evaluate_gates([parse_gate("mmlu.acc >= base + stderr")], report(0.7, stderr=None), None)


@pytest.fixture
def hub():
    with HubDouble(TOKEN, free_port()) as double:
        yield double


def push(hub: HubDouble, repo: str, files: dict[str, str]) -> None:
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(token=TOKEN, endpoint=hub.url)
    api.create_repo(repo, private=True)
    operations = [CommitOperationAdd(path, content.encode()) for path, content in files.items()]
    api.create_commit(repo, operations=operations, commit_message="a model")


def test_the_champion_is_the_card_at_the_repository_s_commit(hub: HubDouble, tmp_path: Path) -> None:
    from gym.hub.card import write_card

    repo = f"acme/bot-{uuid.uuid4().hex[:8]}"
    assert read_champion(repo, TOKEN, endpoint=hub.url) is None  # nothing deployed yet: a first deployment
    write_card(report(0.55), None, tmp_path)
    report(0.55).write(tmp_path)
    push(hub, repo, {p: (tmp_path / p).read_text() for p in ("README.md", "eval_results.json")})
    found = read_champion(repo, TOKEN, endpoint=hub.url)
    assert found is not None and found.sha == hub.state.sha(f"model:{repo}") == f"{1:040x}"
    assert [(r.task, r.metric, r.value, r.stderr, r.n_shot) for r in found.report.results] == [
        ("mmlu", "acc", 0.55, 0.03, 5)
    ]


def test_a_champion_whose_card_has_no_results_stops_gym_deploy_in_one_sentence(
    hub: HubDouble, tmp_path: Path
) -> None:
    push(hub, "acme/bot", {"README.md": "---\nlicense: mit\n---\n# bot\n\nNo scores here.\n"})
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"instruction": "hi", "output": "hello"}\n')
    (tmp_path / "gym.toml").write_text(
        '[project]\nname = "bot"\noutput_dir = "out"\n[model]\nname_or_path = "builtin:tiny"\n'
        '[[datasets]]\npath = "data/train.jsonl"\nformat = "alpaca"\n[eval]\ntasks = ["mmlu"]\n'
        '[eval.gates]\nrules = ["mmlu.acc >= champion"]\n[hub]\nrepo_id = "acme/bot"\n'
    )
    (tmp_path / "out").mkdir()
    report(0.7).write(tmp_path / "out")
    (tmp_path / "out" / "adapter_config.json").write_text("{}")
    before = (list(hub.state.commits), json.dumps({k: sorted(v) for k, v in hub.state.files.items()}))
    env = {"PATH": venv_path(), "HOME": str(tmp_path), "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": hub.url,
           "HF_HUB_OFFLINE": "0", "HF_TOKEN": TOKEN, "COLUMNS": "400"}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "gym", "deploy", "gym.toml"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "error: no champion to compare: the card of acme/bot has no eval results (model-index); push this run "
        "with `gym deploy --force` to replace it, or remove the champion gates from eval.gates.rules"
    )
    assert "Traceback" not in done.stdout + done.stderr and TOKEN not in done.stdout + done.stderr
    after = (list(hub.state.commits), json.dumps({k: sorted(v) for k, v in hub.state.files.items()}))
    assert after == before  # nothing pushed
    assert (tmp_path / "out" / "eval_results.json").is_file()  # nothing lost
