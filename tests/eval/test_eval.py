"""`gym eval` / gym.eval: task resolution, Gym's reversal task, lm-eval on builtin:tiny, the offline error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gym.eval import EvalError, EvalReport, TaskScore, results_table_markdown
from gym.eval.builtin_tasks import REVERSE_TASK, materialize_reverse_task
from gym.eval.tasks import builtin_families, resolve_spec
from tests.eval.conftest import make_config

REPO = Path(__file__).resolve().parents[2]
EVAL_MAIN = Path(__file__).with_name("eval_main.py")
ROW_KEYS = {"task", "metric", "filter", "value", "stderr", "samples", "base_value", "delta",
            "higher_is_better", "n_shot", "chat_template", "source", "dataset"}  # fmt: skip


def test_specs_are_classified(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    config = make_config(project)
    gym = resolve_spec(REVERSE_TASK, config)
    assert gym.kind == "gym" and gym.chat_template and Path(gym.load_as).is_file()
    local = resolve_spec("tasks/colors.yaml", config)  # relative to gym.toml's folder
    assert local.kind == "local" and local.load_as == str(project / "tasks" / "colors.yaml")
    assert not local.chat_template
    assert resolve_spec("mmlu", config).kind == "lm-eval"
    with pytest.raises(EvalError, match="unknown Gym task 'gym_nope'"):
        resolve_spec("gym_nope", config)
    with pytest.raises(EvalError, match="does not exist"):
        resolve_spec("tasks/missing.yaml", config)


def test_reverse_task_files_are_held_out_and_stable(tmp_path: Path) -> None:
    import yaml

    from gym.data.builtin_datasets import is_held_out

    path = materialize_reverse_task(tmp_path)
    assert materialize_reverse_task(tmp_path) == path  # same content, same folder
    config = yaml.safe_load(path.read_text())
    assert config["task"] == REVERSE_TASK and config["output_type"] == "generate_until"
    assert config["num_fewshot"] == 0
    rows = [json.loads(line) for line in (path.parent / "test.jsonl").read_text().splitlines()]
    words = {row["instruction"].removeprefix("Reverse: ").replace(" ", "") for row in rows}
    assert len(words) == len(rows) and all(is_held_out(word) for word in words)


def test_builtin_name_narrows_the_index() -> None:
    families = builtin_families(["arc_easy"])
    assert families is not None and [f.name for f in families] == ["arc"]
    assert builtin_families(["no_such_task_anywhere_xyz"]) is None


def test_report_round_trips_and_renders(tmp_path: Path) -> None:
    report = EvalReport(
        model=str(tmp_path),
        base_model="org/base",
        lm_eval_version="0.4.13",
        results=[
            TaskScore(task="t", metric="acc", value=0.5, stderr=0.1, samples=10, base_value=0.25, delta=0.25)
        ],
    )
    path = report.write(tmp_path)
    data = json.loads(path.read_text())
    assert data["format"] == 1 and set(data["results"][0]) == ROW_KEYS
    assert EvalReport.read(tmp_path) == report
    table = results_table_markdown(report)
    assert table.splitlines()[0] == "| task | metric | n | base | tuned | ± stderr | Δ |"
    assert "| t | acc | 10 | 0.2500 | 0.5000 | 0.1000 | +0.2500 |" in table


@pytest.mark.slow
def test_local_and_reverse_tasks_on_tiny_with_baseline(project: Path, module_env: Path) -> None:
    from gym.eval import evaluate
    from gym.model.builtin import ensure_builtin

    config = make_config(project, tasks=[REVERSE_TASK, "tasks/colors.yaml"], limit=3, num_fewshot=1,
                         batch_size=4, baseline=True)  # fmt: skip
    report = evaluate(config, model_path=str(ensure_builtin("builtin:tiny")))
    rows = {(r.task, r.metric): r for r in report.results}
    assert set(rows) == {(REVERSE_TASK, "exact_match"), ("gym_test_colors", "acc")}
    reverse, colors = rows[(REVERSE_TASK, "exact_match")], rows[("gym_test_colors", "acc")]
    assert reverse.samples == 3 and colors.samples == 3
    assert reverse.chat_template and reverse.n_shot == 0 and colors.n_shot == 1
    assert 0.0 <= colors.value <= 1.0 and colors.stderr is not None
    # the "tuned" model is the base itself here, so the delta is exactly zero
    assert colors.base_value == colors.value and colors.delta == 0.0
    assert reverse.dataset == {"id": f"local:{REVERSE_TASK}", "config": None, "split": "test"}
    assert report.base_model == "builtin:tiny" and set(report.wall_seconds) == {"tuned", "base"}
    data = json.loads(report.write(project / "outputs").read_text())
    assert {key for row in data["results"] for key in row} == ROW_KEYS


def _adapter(folder: Path) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gym.model.builtin import ensure_builtin

    base = ensure_builtin("builtin:tiny")
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=2, target_modules=["q_proj"])
    )
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    return folder


def _run_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EVAL_MAIN), "eval", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=240)  # fmt: skip


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(PYTHONPATH=str(REPO), **extra)
    return env


@pytest.mark.slow
def test_cli_scores_a_lora_adapter_and_writes_card(project: Path, module_env: Path, tmp_path: Path) -> None:
    adapter = _adapter(tmp_path / "adapter")
    toml = project / "gym-cli.toml"
    toml.write_text(
        textwrap.dedent(
            f"""\
            [project]
            name = "evalcli"
            output_dir = "{tmp_path / "out"}"
            [model]
            name_or_path = "builtin:tiny"
            template = "chatml"
            [[datasets]]
            path = "data/train.jsonl"
            format = "alpaca"
            [train]
            method = "sft"
            adapter = "lora"
            [eval]
            tasks = ["gym_reverse"]
            limit = 2
            baseline = false
            """
        )
    )
    done = _run_cli([str(toml), "--model", str(adapter)], _env(XDG_CACHE_HOME=str(module_env), HF_HUB_OFFLINE="1"),
                    project)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = EvalReport.read(adapter)
    assert report.base_model is None and report.results[0].task == REVERSE_TASK
    assert report.results[0].base_value is None and report.results[0].delta is None
    assert (adapter / "README.md").is_file() and (adapter / ".eval_results" / "gym_reverse.yaml").is_file()
    assert "gym_reverse" in done.stdout
    from huggingface_hub import ModelCard

    card = ModelCard.load(adapter / "README.md")
    assert [(r.task_name, r.metric_type) for r in card.data.eval_results] == [(REVERSE_TASK, "exact_match")]
    assert card.data.library_name == "peft" and "lora" in card.data.tags


def test_missing_trained_model_is_one_sentence(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gym.eval import evaluate

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    config = make_config(project, tasks=[REVERSE_TASK])
    # outputs/ is empty or holds only another test's eval_results.json: either way, no model there
    with pytest.raises(EvalError, match=r"outputs'.*; run `gym train` first or pass --model PATH"):
        evaluate(config)


def test_offline_hub_task_is_one_clear_sentence(project: Path, tmp_path: Path) -> None:
    toml = project / "gym-offline.toml"
    toml.write_text(
        '[project]\nname = "offline"\n[model]\nname_or_path = "builtin:tiny"\n'
        '[[datasets]]\npath = "data/train.jsonl"\nformat = "alpaca"\n[eval]\ntasks = ["arc_easy"]\n'
    )
    empty = tmp_path / "hf"  # an empty cache, so the dataset cannot be found locally either
    env = _env(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", HF_HOME=str(empty), HF_DATASETS_CACHE=str(empty / "ds"),
               XDG_CACHE_HOME=str(tmp_path / "xdg"))  # fmt: skip
    done = _run_cli([str(toml)], env, project)
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr
    error = [line for line in lines if line.startswith("error")]
    assert len(error) == 1, done.stderr
    assert "task 'arc_easy'" in error[0] and "'allenai/ai2_arc'" in error[0] and "local" in error[0]
