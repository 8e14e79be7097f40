"""``datasets.eval_fraction``: the held-out rows are evaluated before, during and after training, and the
numbers reach train_results.json, the progress bar, the model card and the eval table of the PR."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym.config import load_config
from gym.train.runner import run_training
from tests.train.test_methods import _jsonl, _pairs, kto_rows, preference_rows

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "cache"))


def _config(
    folder: Path, method: str, rows: list[dict], data_format: str, *, steps: int = 6, extra: str = ""
):
    _jsonl(folder / "data.jsonl", rows)
    (folder / "gym.toml").write_text(
        f"""
[project]
name = "t"
output_dir = "out"
[model]
name_or_path = "builtin:tiny"
template = "chatml"
[[datasets]]
path = "data.jsonl"
format = "{data_format}"
eval_fraction = 0.25
[train]
method = "{method}"
adapter = "full"
max_steps = {steps}
learning_rate = 1e-3
batch_size = 8
gradient_accumulation_steps = 1
max_length = 64
logging_steps = 1
save_steps = 100
eval_steps = 4
warmup_ratio = 0.0
lr_scheduler = "constant"
[eval]
tasks = ["gym_reverse"]
limit = 2
{extra}
"""
    )
    return load_config(folder / "gym.toml")


def test_sft_held_out_loss_reaches_results_card_and_pr_table(tmp_path: Path) -> None:
    rows = [{"instruction": q, "output": a} for q, a in _pairs(64)]
    config = _config(tmp_path, "sft", rows, "alpaca", steps=10)
    result = run_training(config, show_progress=False)
    recorded = json.loads((tmp_path / "out" / "train_results.json").read_text())
    held = recorded["eval"]
    assert held == result.eval and held["rows"] == 16
    assert [point["step"] for point in held["curve"]] == [0, 4, 8, 10]  # before, every eval_steps, at the end
    assert held["final"]["step"] == 10 and held["final"]["loss"] < held["initial"]["loss"]
    from gym.cli.train_commands import held_out as summary_line  # what `gym train` prints after training

    assert summary_line(held).startswith(f"held-out (16 rows): loss {held['initial']['loss']:.4g} → ")

    from gym.eval.report import EvalReport, results_table_markdown
    from gym.eval.runner import evaluate
    from gym.hub.card import build_card

    report = evaluate(config)  # lm-eval's gym_reverse plus the held-out rows recorded by training
    held_out = [row for row in report.results if row.task == "held-out"]
    assert [row.metric for row in held_out] == ["eval_loss"]
    assert held_out[0].value == pytest.approx(held["final"]["loss"])
    assert held_out[0].base_value == pytest.approx(held["initial"]["loss"]) and held_out[0].delta < 0
    assert held_out[0].higher_is_better is False and held_out[0].samples == 16
    table = results_table_markdown(EvalReport.from_dict(report.to_dict()))  # what the PR comment renders
    assert "| held-out | eval_loss | 16 |" in table
    card = str(build_card(report, config, model_dir=tmp_path / "out"))
    assert "| held-out eval loss |" in card and "→" in card and "| held-out rows | 16 |" in card


@pytest.mark.parametrize(
    ("method", "rows", "data_format", "expected"),
    [
        ("dpo", preference_rows, "preference", {"loss", "accuracy", "margin"}),
        ("rm", preference_rows, "preference", {"loss", "accuracy", "margin"}),
        ("kto", kto_rows, "kto", {"loss", "margin"}),
    ],
)
def test_preference_methods_report_held_out_reward_accuracy_and_margin(
    tmp_path: Path, method: str, rows, data_format: str, expected: set[str]
) -> None:
    result = run_training(_config(tmp_path, method, rows(), data_format), show_progress=False)
    held = result.eval
    assert held is not None and held["rows"] == 16
    assert expected <= set(held["final"]) and expected <= set(held["initial"] or {}), held["final"]
    assert [point["step"] for point in held["curve"]] == [0, 4, 6]
    if method == "dpo":  # the tiny model learns to rank the real answer over the wrong one in six steps
        assert held["final"]["margin"] > held["initial"]["margin"]
    from gym.eval.report import held_out_scores

    metrics = {row.metric for row in held_out_scores(result.__dict__)}
    assert "eval_loss" in metrics and ("reward_accuracy" in metrics) == ("accuracy" in expected)


def test_progress_bar_shows_the_held_out_numbers() -> None:
    from gym.train.progress import eval_text

    logs = {
        "eval_loss": 0.5,
        "eval_rewards/accuracies": 0.75,
        "eval_rewards/margins": 1.25,
        "eval_runtime": 3.0,
    }
    assert eval_text(logs) == "eval loss 0.5000 acc 0.7500 margin 1.2500"


def test_no_eval_fraction_means_no_evaluation(tmp_path: Path) -> None:
    rows = [{"instruction": q, "output": a} for q, a in _pairs(32)]
    config = _config(tmp_path, "sft", rows, "alpaca", steps=2)
    config.datasets[0].eval_fraction = 0.0
    result = run_training(config, show_progress=False)
    assert result.eval is None
    assert json.loads((tmp_path / "out" / "train_results.json").read_text())["eval"] is None


def test_grpo_held_out_prompts_are_scored(tmp_path: Path) -> None:
    rows = [{"prompt": f"Say ok {i}", "answer": "ok"} for i in range(32)]
    extra = "[train.grpo]\ngroup_size = 4\nmax_completion_length = 4\ntemperature = 1.0\nreward = ['exact_match']\n"
    config = _config(tmp_path, "grpo", rows, "prompt", steps=4, extra=extra)
    held = run_training(config, show_progress=False).eval
    assert held is not None and held["rows"] == 8
    assert [point["step"] for point in held["curve"]] == [0, 4]
    assert 0.0 <= held["final"]["reward"] <= 1.0 and "reward" in (held["initial"] or {})
