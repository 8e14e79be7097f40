"""A cloud run's eval table reaches the pull request: printed as one marked log line, read back by the action."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from gym.launch.results import MARKER, emit_results, results_from_lines

RESULTS = {
    "format": 1,
    "model": "out",
    "results": [{"task": "gym_reverse", "metric": "exact_match", "value": 0.9}],
}


def test_marked_line_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "eval_results.json").write_text(json.dumps(RESULTS))
    printed: list[str] = []
    assert not emit_results(tmp_path, printed.append)  # only when the cloud task asks for it
    monkeypatch.setenv("GYM_EMIT_RESULTS", "1")
    assert emit_results(tmp_path, printed.append)
    log = ["setup done\n", None, "[train] done\n" + printed[0] + "\n", "job finished\n"]
    assert results_from_lines(log) == RESULTS
    assert results_from_lines(["no results here", MARKER + "{broken"]) is None


def test_train_task_asks_for_the_results_line() -> None:
    from gym.launch.templates import TRAIN

    assert TRAIN["envs"]["GYM_EMIT_RESULTS"] == "1"


def test_cloud_launcher_waits_and_returns_the_results(monkeypatch: pytest.MonkeyPatch) -> None:
    import gym.launch.cloud as cloud
    from action.launchers import LaunchRequest, launch_on_cloud

    submitted = SimpleNamespace(managed=True, job_id=7, name="gym-demo")
    monkeypatch.setattr(cloud, "launch_cloud", lambda *args, **kwargs: submitted)
    followed: list[int] = []

    def follow(config, job_id, *, managed):
        followed.append(job_id)
        return RESULTS

    monkeypatch.setattr(cloud, "wait_for_results", follow)
    heard: list[tuple[str | None, list[int]]] = []
    request = LaunchRequest(
        config=None, config_path=Path("gym.toml"), flags=[], cloud=True, env={}, echo=lambda _: None,
        on_submitted=lambda launch: heard.append((launch.job_id, list(followed))),
    )  # fmt: skip
    assert launch_on_cloud(request).results is None and followed == []  # wait off: submitted only
    assert heard == []  # nothing to follow: the returned outcome is the whole story
    request.wait = True
    outcome = launch_on_cloud(request)
    assert (
        followed == [7]
        and outcome.results == RESULTS
        and outcome.job_id == "7"
        and "finished" in outcome.detail
    )
    assert heard == [("7", [])]  # told of the job before following it
