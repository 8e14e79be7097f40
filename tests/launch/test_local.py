"""`gym launch` on this machine: every stage's artifact, finished stages skipped, --force reruns them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym.cli import app
from tests.conftest import REPO

pytestmark = pytest.mark.slow


@pytest.fixture
def quickstart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "quickstart"
    shutil.copytree(REPO / "examples" / "quickstart", folder, ignore=shutil.ignore_patterns("outputs"))
    return folder / "gym.toml"


FAST = ["--max_steps", "6", "--save_steps", "3", "--set", "eval.limit=4", "--project.output_dir=out"]


def test_launch_runs_every_stage_then_skips_then_force_reruns(quickstart: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(app, ["launch", str(quickstart), *FAST])
    assert first.exit_code == 0, first.output
    out = quickstart.parent / "out"
    for artifact in (
        "model.safetensors",
        "tokenizer.json",
        "train_results.json",
        "eval_results.json",
        "README.md",
        "gym.toml",
    ):
        assert (out / artifact).is_file(), artifact
    assert list((out / ".eval_results").glob("*.yaml"))
    state = json.loads((out / "gym_state.json").read_text())
    assert {name: stage["status"] for name, stage in state["stages"].items()} == {
        "train": "done", "eval": "done", "gates": "skipped", "card": "done", "deploy": "skipped",
    }  # fmt: skip
    results = json.loads((out / "eval_results.json").read_text())
    assert results["results"][0]["task"] == "gym_reverse" and results["base_model"]
    assert "gym_reverse" in first.output and "tuned" in first.output
    data = json.loads((out / "train_results.json").read_text())["data"]
    assert results["training_data"] == data and data["rows_trained"] > 0  # the rows, in card and PR alike
    assert "| training data | " in (out / "README.md").read_text()
    assert " rows read: " in first.output  # the launch summary says what happened to the rows

    stamp = (out / "model.safetensors").stat().st_mtime_ns
    second = runner.invoke(app, ["launch", str(quickstart), *FAST])
    assert second.exit_code == 0, second.output
    assert second.output.count("already done for this config") == 3
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp

    # A change to [eval] re-evaluates the trained model and rewrites what follows; it does not retrain.
    evaluated = runner.invoke(app, ["launch", str(quickstart), *FAST, "--set", "eval.limit=3"])
    assert evaluated.exit_code == 0, evaluated.output
    assert "[train] already done for this config" in evaluated.output
    assert "[eval] running" in evaluated.output and "[card] running" in evaluated.output
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    assert json.loads((out / "eval_results.json").read_text())["limit"] == 3
    assert "limit = 3" in (out / "gym.toml").read_text()  # the saved config is the one now evaluated
    stages = json.loads((out / "gym_state.json").read_text())["stages"]
    assert stages["train"]["config"] != stages["eval"]["config"]

    forced = runner.invoke(app, ["launch", str(quickstart), *FAST, "--force"])
    assert forced.exit_code == 0, forced.output
    assert "already done" not in forced.output
    assert (out / "model.safetensors").stat().st_mtime_ns != stamp


def test_changed_config_reruns(quickstart: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["launch", str(quickstart), *FAST, "--set", "eval.tasks=[]"]).exit_code == 0
    rerun = runner.invoke(
        app, ["launch", str(quickstart), *FAST, "--set", "eval.tasks=[]", "--learning_rate", "1e-3"]
    )
    assert rerun.exit_code == 0 and "already done" not in rerun.output
    assert "eval.tasks is empty" in rerun.output


def test_launch_errors_are_one_sentence(quickstart: Path) -> None:
    result = CliRunner().invoke(
        app, ["launch", str(quickstart), *FAST, "--set", 'datasets.0.path="missing.jsonl"']
    )
    assert result.exit_code == 1
    assert "missing.jsonl" in result.output and "Traceback" not in result.output


def test_each_stage_is_keyed_by_the_part_of_gym_toml_it_reads(write_toml) -> None:
    from gym.config import load_config
    from gym.launch.local import STAGES, config_hash
    from tests.conftest import VALID

    def hashes(extra: str, name: str, valid: str = VALID) -> dict[str, str]:
        config = load_config(write_toml(valid + extra, name))
        return {stage: config_hash(config, stage) for stage, _ in STAGES}

    base = hashes('[eval]\ntasks = ["gym_reverse"]\n', "a.toml")
    gated = hashes(
        '[eval]\ntasks = ["gym_reverse"]\n[eval.gates]\nrules = ["gym_reverse.exact_match >= 0.5"]\n',
        "b.toml",
    )
    published = hashes('[eval]\ntasks = ["gym_reverse"]\n[hub]\nrepo_id = "acme/bot"\n', "c.toml")
    evaluated = hashes('[eval]\ntasks = ["gym_reverse"]\nlimit = 3\n', "d.toml")
    trained = hashes('[eval]\ntasks = ["gym_reverse"]\n', "e.toml", VALID.replace("2e-4", "1e-4"))

    def rerun(other: dict[str, str]) -> list[str]:
        return [stage for stage in base if other[stage] != base[stage]]

    assert rerun(gated) == ["gates", "card", "deploy"]
    assert rerun(published) == ["gates", "card", "deploy"]
    assert rerun(evaluated) == ["eval", "gates", "card", "deploy"]
    assert rerun(trained) == ["train", "eval", "gates", "card", "deploy"]
