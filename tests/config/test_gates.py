"""``[eval.gates]`` mistakes: each rule reported at its own line and column as one sentence, all at once."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gym.cli import app
from gym.config import ConfigError, load_config
from gym.config.gates import parse_gate

HEAD = """\
[project]
name = "demo"

[model]
name_or_path = "builtin:tiny"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"
eval_fraction = 0.1

[hub]
repo_id = "acme/demo"

[eval]
tasks = ["gym_reverse", "mmlu", "tasks/mine.yaml"]

[eval.gates]
rules = [
"""  # rules start on line 20

LOCAL_TASK = """\
task: my_qa
dataset_path: json
output_type: generate_until
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
  - metric: !function metrics.custom
"""

# (rule, words of its one-sentence message): rules that name what the run does not score, or the wrong way
WRONG = [
    ("gym_revers.exact_match >= 0.9", "this run scores no task 'gym_revers'; it scores 'gym_reverse', 'mmlu', 'my_qa', 'held-out'"),
    ("gym_reverse.acc >= base", "task 'gym_reverse' produces exact_match, not 'acc'"),
    ("my_qa.f1 >= 0.5", "task 'my_qa' produces exact_match, not 'f1'"),
    ("held-out.eval_loss >= champion", "lower eval_loss is better, so '>=' would keep the worse model; write '<='"),
    ("mmlu.acc <= base", "higher acc is better, so '<=' would keep the worse model; write '>='"),
]  # fmt: skip
# rules that cannot be read (reported before the rules are checked against the tasks)
MALFORMED = [
    ("mmlu.acc => 0.5", "expected a rule 'TASK.METRIC OP BOUND' with OP one of >=, >, <=, <, got 'mmlu.acc => 0.5'"),
    ("mmlu.acc >= champion +", "cannot read the bound 'champion +' of 'mmlu.acc >= champion +'"),
    ("mmlu.acc >= 0.5 + stderr", "uses stderr, the standard error of a difference, without 'base' or 'champion'"),
    ("mmlu.acc >= base + champion", "may compare with one reference, added once"),
]  # fmt: skip
GOOD = [
    "gym_reverse.exact_match >= champion + 2*stderr",
    "mmlu.acc >= base - 0.01",
    "my_qa.exact_match > 0.5",
]


@pytest.mark.parametrize("cases", [WRONG, MALFORMED], ids=["wrong", "malformed"])
def test_every_bad_rule_is_one_sentence_at_its_line(write_toml, cases: list[tuple[str, str]]) -> None:
    rules = "".join(f'  "{rule}",\n' for rule in [*(rule for rule, _ in cases), *GOOD])
    path = write_toml(HEAD + rules + "]\n")
    (path.parent / "tasks").mkdir()
    (path.parent / "tasks" / "mine.yaml").write_text(LOCAL_TASK)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    issues = caught.value.issues
    assert len(issues) == len(cases), str(caught.value)  # the good rules pass, every bad one is reported
    for index, (rule, words) in enumerate(cases):
        (issue,) = [i for i in issues if i.key == f"eval.gates.rules.{index}"]
        assert words in issue.message, (rule, issue.message)
        assert issue.line == 20 + index and issue.column == 3
        assert "\n" not in issue.message

    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    shown = " ".join(result.output.split())  # the terminal may wrap long lines
    assert "gym.toml:21:3: eval.gates.rules.1: " in shown and cases[1][1] in shown
    assert f"{len(cases)} problems found" in result.output


def test_gates_need_scores_a_baseline_and_held_out_rows(write_toml) -> None:
    text = (
        HEAD.replace("eval_fraction = 0.1\n", "")
        .replace('[hub]\nrepo_id = "acme/demo"\n', "")
        .replace(
            'tasks = ["gym_reverse", "mmlu", "tasks/mine.yaml"]', 'tasks = ["gym_reverse"]\nbaseline = false'
        )
    )
    rules = [
        "gym_reverse.exact_match >= base",
        "held-out.eval_loss <= champion",
        "gym_reverse.exact_match >= champion",
    ]
    path = write_toml(text + "".join(f'  "{rule}",\n' for rule in rules) + "]\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    messages = {issue.key: issue.message for issue in caught.value.issues}
    assert (
        "the champion is the model the [hub] repository holds, and this config has no [hub] table"
        in messages["eval.gates.rules.2"]
    )
    assert "eval.baseline = false does not score" in messages["eval.gates.rules.0"]
    assert "held-out scores need a dataset with eval_fraction > 0" in messages["eval.gates.rules.1"]


def test_a_rule_reads_as_written() -> None:
    gate = parse_gate("gsm8k.exact_match,strict-match >= champion - 0.01 + 2*stderr")
    assert (gate.task, gate.metric, gate.filter, gate.op) == ("gsm8k", "exact_match", "strict-match", ">=")
    assert (gate.reference, gate.offset, gate.stderrs) == ("champion", -0.01, 2.0)
    assert gate.label == "exact_match (strict-match)"
    assert parse_gate("held-out.eval_loss < 1.5e-1").offset == pytest.approx(0.15)
