"""Drive ``action.main.main`` like the runner does: GITHUB_* variables, files in a temp dir, an API on 127.0.0.1.

The environment is a :class:`RecordingEnv` (a plain Mapping that remembers which names were read), so
a test can prove a fork's run never touched a secret; the launcher is a :class:`RecordingLauncher`.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from action.launchers import LaunchRequest
from action.main import main
from gym.launch.report.outcome import LaunchOutcome
from gym.launch.report.sticky import RunState
from gym.launch.task import LaunchError
from tests.action.github_server import FakeGitHub, serve

EVENTS = Path(__file__).parent / "events"
GITHUB_TOKEN = "ghs_" + "T" * 36
HF_TOKEN = "hf_" + "S" * 34
AWS_SECRET = "aws-secret-value-1234567890"

GYM_TOML = """\
[project]
name = "support-bot"

[model]
name_or_path = "builtin:tiny"
template = "chatml"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"

[train]
method = "sft"
adapter = "lora"

[compute]
accelerators = ["A100:1", "H100:1"]
use_spot = true
managed = true

[hub]
repo_id = "acme/support-bot"
"""

RESULTS = {
    "format": 1,
    "model": "outputs/support-bot",
    "base_model": "builtin:tiny",
    "lm_eval_version": "0.4.9",
    "num_fewshot": 0,
    "limit": 0,
    "batch_size": 8,
    "wall_seconds": {},
    "results": [
        {"task": "gym_reverse", "source": "gym", "metric": "exact_match", "filter": "none", "value": 0.35,
         "stderr": 0.04, "samples": 100, "base_value": 0.0, "delta": 0.35, "higher_is_better": True,
         "n_shot": 0, "chat_template": True, "dataset": {"id": "local:gym_reverse"}},
    ],
}  # fmt: skip


class RecordingEnv(Mapping[str, str]):
    """``os.environ`` stand-in that records every name whose value was read."""

    def __init__(self, data: dict[str, str]) -> None:
        self._data = data
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.read.add(name)
        return self._data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


@dataclass
class RecordingLauncher:
    requests: list[LaunchRequest] = field(default_factory=list)
    outcome: LaunchOutcome = field(
        default_factory=lambda: LaunchOutcome(job_id="42", detail="fake launch", results=RESULTS)
    )
    say: str = ""

    def __call__(self, request: LaunchRequest) -> LaunchOutcome:
        self.requests.append(request)
        if self.say:
            request.echo(self.say)
        return self.outcome


@dataclass
class RecordingJobs:
    """Stands in for SkyPilot's job queue and cancel (tests/action/test_cloud_cancel.py uses the real ones)."""

    statuses: dict[str, tuple[str, bool]] = field(default_factory=dict)  # job id -> (status, ended)
    cancelled: list[RunState] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)
    fail: str = ""

    def status(self, state: RunState) -> tuple[str, bool] | None:
        self.asked.append(state.job_id)
        return self.statuses.get(state.job_id, ("RUNNING", False))

    def cancel(self, state: RunState) -> None:
        if self.fail:
            raise LaunchError(self.fail)
        self.cancelled.append(state)


@dataclass
class Result:
    rc: int
    outputs: dict[str, str]
    summary: str
    env: RecordingEnv
    stdout: str


def parse_outputs(text: str) -> dict[str, str]:
    """Read the heredoc form the runner reads (``name<<DELIM\\nvalue\\nDELIM``)."""
    values, lines = {}, iter(text.splitlines())
    for line in lines:
        name, delimiter = line.split("<<", 1)
        body = []
        for value_line in lines:
            if value_line == delimiter:
                break
            body.append(value_line)
        values[name] = "\n".join(body)
    return values


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    state = FakeGitHub(token=GITHUB_TOKEN)
    server, _ = serve(state)
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    (folder / "data").mkdir(parents=True)
    (folder / "gym.toml").write_text(GYM_TOML)
    (folder / "data" / "train.jsonl").write_text('{"instruction": "Reverse: a b", "output": "b a"}\n')
    return folder


@pytest.fixture
def run_action(tmp_path: Path, workspace: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]):
    """Run the entrypoint for one event fixture; each call gets fresh output and summary files."""
    counter = {"n": 0}

    def run(event: str, name: str, launcher: RecordingLauncher, *, event_data: dict[str, Any] | None = None,
            jobs: RecordingJobs | None = None, extra_env: dict[str, str] | None = None,
            **inputs: str) -> Result:  # fmt: skip
        counter["n"] += 1
        runner = tmp_path / f"runner{counter['n']}"
        runner.mkdir()
        event_path = runner / "event.json"
        if event_data is None:
            shutil.copy(EVENTS / event, event_path)
        else:
            event_path.write_text(json.dumps(event_data))
        data = {
            "GITHUB_EVENT_NAME": name,
            "GITHUB_EVENT_PATH": str(event_path),
            "GITHUB_REPOSITORY": github.repo,
            "GITHUB_API_URL": github.base,
            "GITHUB_SERVER_URL": "https://github.example",
            "GITHUB_RUN_ID": "555",
            "GITHUB_WORKSPACE": str(workspace),
            "GITHUB_OUTPUT": str(runner / "output"),
            "GITHUB_STEP_SUMMARY": str(runner / "summary.md"),
            "GYM_GITHUB_TOKEN": GITHUB_TOKEN,
            "GYM_INPUT_HF_TOKEN": HF_TOKEN,
            "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
            **{f"GYM_INPUT_{key.upper()}": value for key, value in inputs.items()},
            **(extra_env or {}),  # the workflow step's env: (e.g. GYM_REPORT_TOKEN)
        }
        env = RecordingEnv(data)
        rc = main(env, launcher, jobs or RecordingJobs())
        out = runner / "output"
        summary = runner / "summary.md"
        return Result(
            rc=rc,
            outputs=parse_outputs(out.read_text()) if out.exists() else {},
            summary=summary.read_text() if summary.exists() else "",
            env=env,
            stdout=capsys.readouterr().out,
        )

    return run
