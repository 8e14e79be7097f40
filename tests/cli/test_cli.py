"""The CLI's promises: init -> validate round trip, version/help, and no torch on the fast paths."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym import __version__
from gym.cli import app
from gym.config import load_config
from gym.config.root import FORMATS_BY_METHOD
from tests.conftest import REPO

runner = CliRunner()


@pytest.mark.parametrize("method", sorted(FORMATS_BY_METHOD))
def test_init_then_validate(tmp_path: Path, method: str) -> None:
    target = tmp_path / "my-run" / "gym.toml"
    result = runner.invoke(app, ["init", str(target), "--method", method, "--model", "builtin:tiny"])
    assert result.exit_code == 0, result.output
    text = target.read_text()
    assert "#" in text and f'method = "{method}"' in text
    validated = runner.invoke(app, ["validate", str(target)])
    assert validated.exit_code == 0, validated.output
    assert "is valid" in " ".join(validated.output.split())  # rich wraps long temp paths at 80 columns
    config = load_config(target)
    assert config.project.name == "my-run" and config.train.method == method


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    target = tmp_path / "gym.toml"
    target.write_text("keep me")
    result = runner.invoke(app, ["init", str(target)])
    assert result.exit_code == 1 and "--force" in result.output
    assert target.read_text() == "keep me"


def test_init_rejects_unknown_method(tmp_path: Path) -> None:
    result = runner.invoke(app, ["init", str(tmp_path / "gym.toml"), "--method", "sftt"])
    assert result.exit_code == 2 and "expected one of" in result.output


def test_validate_summary_names_the_essentials() -> None:
    result = runner.invoke(app, ["validate", str(REPO / "examples" / "quickstart" / "gym.toml")])
    assert result.exit_code == 0, result.output
    for words in ("builtin:tiny", "reverse", "sft + full", "600 steps", "gym_reverse"):
        assert words in result.output


def test_validate_accepts_override_flags() -> None:
    path = str(REPO / "examples" / "quickstart" / "gym.toml")
    assert runner.invoke(app, ["validate", path, "--learning_rate", "1e-3"]).exit_code == 0
    bad = runner.invoke(app, ["validate", path, "--learning_rate", "-3"])
    assert bad.exit_code == 1 and "command line: train.learning_rate (--learning_rate)" in bad.output


def test_version_and_help() -> None:
    assert runner.invoke(app, ["--version"]).output.strip() == f"gym {__version__}"
    help_text = runner.invoke(app, ["--help"]).output
    for command in ("init", "validate", "schema", "model"):
        assert command in help_text


def _modules_after(args: list[str]) -> set[str]:
    code = (
        "import sys, json\n"
        "from gym.cli import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write('MODULES' + json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    marker = done.stderr.rindex("MODULES")
    return set(json.loads(done.stderr[marker + len("MODULES") :]))


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["validate", "examples/quickstart/gym.toml"],
        ["init", "--help"],
        ["schema"],
        ["webui", "--help"],
    ],
    ids=["help", "validate", "init-help", "schema", "webui-help"],
)
def test_fast_commands_do_not_import_heavy_libraries(args: list[str]) -> None:
    modules = _modules_after(args)
    assert "gym.cli" in modules
    heavy = {"torch", "transformers", "trl", "peft", "datasets", "sky", "gradio", "lm_eval"} & modules
    assert not heavy, f"`gym {' '.join(args)}` imported {sorted(heavy)}"


def test_console_script_runs() -> None:
    gym = Path(sys.executable).parent / "gym"
    done = subprocess.run(
        [str(gym), "validate", "-q", "examples/quickstart/gym.toml"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


def test_flags_may_come_without_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.jsonl").write_text('{"instruction": "Reverse: a b", "input": "", "output": "b a"}\n')
    flags_only = runner.invoke(
        app, ["validate", "--model_name_or_path", "builtin:tiny", "--dataset", "rows.jsonl"]
    )
    assert flags_only.exit_code == 0, flags_only.output
    assert "valid run" in flags_only.output and "rows: " in flags_only.output
    (tmp_path / "gym.toml").write_text((REPO / "examples" / "quickstart" / "gym.toml").read_text())
    (tmp_path / "data").mkdir()
    assert runner.invoke(app, ["validate", "--learning_rate", "1e-3", "-q"]).exit_code == 0
    negative = runner.invoke(app, ["validate", "--learning_rate", "-1"])
    assert negative.exit_code == 1 and "(--learning_rate): expected a number > 0, got -1" in negative.output


def test_path_after_flags_gets_a_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["validate", "--learning_rate", "1e-3", "other.toml"])
    assert result.exit_code == 1 and "the gym.toml path goes first" in result.output
