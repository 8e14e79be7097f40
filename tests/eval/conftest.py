"""Fixtures for the evaluation tests: builtin:tiny in a per-module cache, a small local multiple-choice task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

# A made-up multiple-choice set (not from any benchmark): question, four choices, index of the answer.
COLOR_ROWS = [
    ("What color is the sky on a clear day?", ["blue", "green", "red", "black"], 0),
    ("What color is fresh grass?", ["purple", "green", "white", "orange"], 1),
    ("What color is snow?", ["white", "blue", "brown", "pink"], 0),
    ("What color is a ripe banana?", ["grey", "blue", "yellow", "black"], 2),
    ("What color is coal?", ["white", "yellow", "green", "black"], 3),
    ("What color is a ripe tomato?", ["red", "blue", "white", "grey"], 0),
]

COLOR_TASK = """\
task: gym_test_colors
dataset_path: json
dataset_kwargs:
  data_files:
    test: colors.jsonl
test_split: test
fewshot_split: test
output_type: multiple_choice
doc_to_text: "Question: {{question}}\\nAnswer:"
doc_to_choice: "{{choices}}"
doc_to_target: "{{answer}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


@pytest.fixture(scope="module")
def xdg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gym.model.builtin import ensure_builtin

    root = tmp_path_factory.mktemp("xdg")
    ensure_builtin("builtin:tiny", root=root / "gym" / "builtin")
    return root


@pytest.fixture(scope="module")
def module_env(xdg: Path):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(xdg))
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("TOKENIZERS_PARALLELISM", "false")
        yield xdg


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project folder: data/, tasks/colors.yaml (+ its JSONL, relative to the YAML), outputs/."""
    root = tmp_path_factory.mktemp("project")
    (root / "data").mkdir()
    (root / "data" / "train.jsonl").write_text('{"instruction": "a", "input": "", "output": "b"}\n')
    (root / "tasks").mkdir()
    rows = [json.dumps({"question": q, "choices": c, "answer": a}) for q, c, a in COLOR_ROWS]
    (root / "tasks" / "colors.jsonl").write_text("\n".join(rows) + "\n")
    (root / "tasks" / "colors.yaml").write_text(COLOR_TASK)
    return root


def make_config(project: Path, **eval_keys: Any):
    from gym.config.root import GymConfig

    config = GymConfig.model_validate(
        {
            "project": {"name": "evaltest", "output_dir": str(project / "outputs")},
            "model": {"name_or_path": "builtin:tiny", "template": "chatml"},
            "datasets": [{"path": str(project / "data" / "train.jsonl"), "format": "alpaca"}],
            "train": {"method": "sft", "adapter": "lora"},
            "eval": eval_keys,
        }
    )
    config._source = project / "gym.toml"
    return config
