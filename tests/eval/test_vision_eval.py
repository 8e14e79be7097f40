"""`gym_colour`: Gym's image task refuses a text-only model with one sentence, and its held-out rows are
fixed and cached (the scoring itself runs in tests/launch/test_vision_quickstart.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym.config import load_config
from gym.eval.errors import EvalError
from gym.eval.runner import evaluate
from gym.eval.vision_tasks import COLOUR_ROWS, colour_test_rows

pytestmark = pytest.mark.slow


def test_colour_task_on_a_text_only_model_is_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "gym.toml").write_text(
        """
[project]
name = "t"
[model]
name_or_path = "builtin:tiny"
template = "chatml"
[[datasets]]
path = "rows.jsonl"
format = "alpaca"
[eval]
tasks = ["gym_colour"]
baseline = false
"""
    )
    with pytest.raises(EvalError) as error:
        evaluate(load_config(tmp_path / "gym.toml"), "builtin:tiny")
    assert "gym_colour shows the model images" in str(error.value)
    assert "'builtin:tiny' is a text-only model" in str(error.value)


def test_colour_rows_are_fixed_and_balanced(tmp_path: Path) -> None:
    folder, rows = colour_test_rows(tmp_path)
    again_folder, again = colour_test_rows(tmp_path)
    assert again_folder == folder and again == rows and len(rows) == COLOUR_ROWS
    answers = [row["messages"][-1]["content"] for row in rows]
    assert {answers.count(colour) for colour in set(answers)} == {COLOUR_ROWS // 4}
    assert all((folder / row["images"][0]).is_file() for row in rows)
