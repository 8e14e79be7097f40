"""A secret's value is never printed, whatever key it was interpolated into: the values of HF_TOKEN and of
the variables a gym.toml names in its ``*_env`` keys are redacted from every message, plan and task YAML
Gym prints, even when they look like no known token. Every output and written file is scanned."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym.cli import app
from tests.launch.conftest import BASE, project, sky_env  # noqa: F401 - fixtures
from tests.launch.test_cloud import _run

HUB_TOKEN = "plain-hub-secret-4711"  # shaped like no known token: only its variable's name gives it away
API_KEY = "orchard-velvet-9931"
SPACE = """
[hub]
repo_id = "acme/demo"
[space]
repo_id = "acme/demo-chat"
api_key_env = "CHAT_KEY"
reuse_push_token = true
"""


def _no_secret_in(folder: Path, *outputs: str) -> None:
    for text in outputs:
        assert HUB_TOKEN not in text and API_KEY not in text, text
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert HUB_TOKEN.encode() not in data and API_KEY.encode() not in data, path


def test_deploy_dry_run_never_prints_a_token_interpolated_into_a_path(
    project,  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = project(SPACE, BASE.replace('name = "demo"', 'name = "demo"\noutput_dir = "out/${HF_TOKEN}"'))
    monkeypatch.chdir(path.parent)
    monkeypatch.setenv("HF_TOKEN", HUB_TOKEN)
    monkeypatch.setenv("CHAT_KEY", API_KEY)
    result = CliRunner().invoke(app, ["deploy", "--dry-run", "gym.toml"])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        f"error: {path.parent}/out/*** does not exist: train first, or pass --model_path"
    ]
    _no_secret_in(tmp_path, result.output)


def test_cloud_dry_run_never_prints_the_api_key_interpolated_into_infra_or_bucket(
    project,  # noqa: F811 - the fixture
    sky_env,  # noqa: F811 - the fixture
    tmp_path: Path,  # noqa: F811
) -> None:
    compute = '\n[compute]\naccelerators = ["A100:1"]\ninfra = "aws/${CHAT_KEY}"\ncheckpoint_bucket = "s3://${CHAT_KEY}-ckpt"\n'
    path = project(SPACE + compute)
    env = {**sky_env, "HF_TOKEN": HUB_TOKEN, "CHAT_KEY": API_KEY}
    done, record = _run(["launch", "--cloud", "--dryrun"], path.parent, env, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "  infra: aws/***\n" in done.stdout and "s3://***-ckpt" in done.stdout  # still readable
    assert record["calls"] == []  # a dry run talks to no server
    _no_secret_in(tmp_path, done.stdout, done.stderr)


def test_summary_and_warnings_never_print_an_interpolated_key(
    project,  # noqa: F811 - the fixture
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    path = project(
        SPACE,
        BASE.replace('path = "data/train.jsonl"', 'path = "data/${CHAT_KEY}.jsonl"\nname = "x-${CHAT_KEY}"'),
    )
    monkeypatch.chdir(path.parent)
    monkeypatch.setenv("CHAT_KEY", API_KEY)
    result = CliRunner().invoke(app, ["validate", "gym.toml"])
    assert result.exit_code == 0, result.output
    assert "datasets.0.path: data/${CHAT_KEY}.jsonl does not exist (yet)" in " ".join(result.output.split())
    _no_secret_in(tmp_path, result.output)
