"""`gym eval --experiences`: a training-free library scored with vs without, on the same frozen model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytestmark = pytest.mark.slow


def _project(folder: Path) -> Path:
    (folder / "gym.toml").write_text(
        '[project]\nname = "tf"\noutput_dir = "out"\n[model]\nname_or_path = "builtin:tiny"\ntemplate = "chatml"\n'
        '[[datasets]]\npath = "rows.jsonl"\nformat = "prompt"\n'
        '[train]\nmethod = "grpo"\n[train.grpo]\ntraining_free = true\n'
        '[eval]\ntasks = ["gym_reverse"]\nlimit = 3\nnum_fewshot = 0\n'
    )
    (folder / "rows.jsonl").write_text(json.dumps({"prompt": "Reverse: a b", "answer": "b a"}) + "\n")
    library = folder / "experiences.json"
    library.write_text(json.dumps(["When asked to reverse letters, write them from the last to the first."]))
    return library


def test_library_is_scored_with_and_without(tmp_path: Path, module_env: Path) -> None:
    from gym.config import load_config
    from gym.eval import evaluate

    library = _project(tmp_path)
    report = evaluate(load_config(tmp_path / "gym.toml"), experiences=library)
    assert "experiences" in report.model and "without experiences" in (report.base_model or "")
    row = report.results[0]
    assert row.task == "gym_reverse" and row.base_value is not None and row.delta is not None
    assert set(report.wall_seconds) == {"with_experiences", "without_experiences"}


def test_cli_writes_results_and_rejects_a_broken_library(
    tmp_path: Path, module_env: Path, monkeypatch
) -> None:
    from gym.cli import app

    library = _project(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["eval", "--experiences", str(library), "--no-card"])
    assert result.exit_code == 0, result.output
    assert (
        json.loads((tmp_path / "out" / "eval_results.json").read_text())["results"][0]["task"]
        == "gym_reverse"
    )
    library.write_text("{not json")
    broken = CliRunner().invoke(app, ["eval", "--experiences", str(library), "--no-card"])
    assert (
        broken.exit_code == 1 and "experience library" in broken.output and "Traceback" not in broken.output
    )
