"""The job's report-back (gym/launch/report/job.py) through PyGithub against the recording GitHub API: the
sticky comment edited in place, the commit status, a failed run, GitHub failing, and the token kept out of everything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from action.launchers import report_target
from gym.launch.report.job import ReportTarget, report_finished, report_started
from gym.launch.report.render import marker
from tests.action.conftest import RESULTS
from tests.action.github_server import serve
from tests.e2e.loop import GitHubWithStatuses

TOKEN = "github_pat_" + "Z" * 40


@pytest.fixture
def github():
    state = GitHubWithStatuses(token=TOKEN)
    server, _ = serve(state)
    state.pulls[8] = {"head_repo": state.repo}
    yield state
    server.shutdown()
    server.server_close()


def env_for(github: GitHubWithStatuses, pull: int | None = 8) -> dict[str, str]:
    target = ReportTarget(api_url=github.base, repository=github.repo, sha="a" * 40, config="bots/gym.toml",
                          pull=pull, run_url="https://github.example/acme/models/actions/runs/9")  # fmt: skip
    return {"GYM_REPORT_TO": target.as_env(), "GYM_REPORT_TOKEN": TOKEN}


def test_finished_run_edits_the_sticky_comment_and_sets_the_status(github) -> None:
    from gym.launch.report.sticky import RunState

    record = RunState(sha="a" * 40, job_id="7", name="gym-bot", managed=True, approval=1)
    github.comments[8] = [{"id": 5, "body": marker("bots/gym.toml") + "\n" + record.line() + "\nplan",
                           "user": {"login": "github-actions[bot]"}},
                          {"id": 6, "body": "> " + marker("bots/gym.toml") + " a quote", "user": {"login": "bob"}}]  # fmt: skip
    github.comments[8].insert(
        0, {"id": 4, "body": marker("bots/gym.toml") + "\nplanted", "user": {"login": "mallory"}}
    )
    lines: list[str] = []
    report_started("SkyPilot job `gym-bot`", env=env_for(github), echo=lines.append)
    url = report_finished(
        job="SkyPilot job `gym-bot`", results=RESULTS, env=env_for(github), echo=lines.append
    )
    assert url.endswith("#issuecomment-5")
    assert github.comments[8][0]["body"].endswith(
        "planted"
    )  # someone else's comment with the marker: untouched
    body = github.comments[8][1]["body"]
    assert body.startswith(marker("bots/gym.toml")) and "🚀 launched and evaluated" in body
    assert "| gym_reverse | exact_match | 100 | 0.0000 | 0.3500 | 0.0400 | +0.3500 |" in body
    assert github.comments[8][2]["body"].startswith("> ")  # the quote is left alone
    kept = RunState.parse(body)  # the action's job record stays in the comment, now marked ended
    assert kept is not None and (kept.job_id, kept.state, kept.ended) == ("7", "finished", True)
    assert [(s["state"], s["context"]) for s in github.statuses] == [
        ("pending", "gym / bots/gym.toml"), ("success", "gym / bots/gym.toml")]  # fmt: skip
    assert github.statuses[-1]["description"] == "gym_reverse 0.350 (+0.350)"
    assert github.statuses[-1]["target_url"].endswith("/runs/9")
    assert all(r.authorized for r in github.requests)  # every call carried the report token


def test_failed_run_reports_its_error_and_never_the_token(github) -> None:
    report_finished(job="job", results=None, error=f"training failed: bad token {TOKEN}", env=env_for(github),
                    echo=lambda _line: None)  # fmt: skip
    (comment,) = github.comments[8]  # no comment yet: created once
    assert "❌ launch failed" in comment["body"] and TOKEN not in comment["body"]
    assert github.statuses[-1]["state"] == "failure" and TOKEN not in json.dumps(github.statuses)


def test_github_failing_is_one_line_and_the_run_goes_on(github) -> None:
    github.read_only = True  # every write answers 403
    lines: list[str] = []
    assert report_finished(job="job", results=RESULTS, env=env_for(github), echo=lines.append) == ""
    assert any(
        "could not update the pull request comment on GitHub" in line and "403" in line for line in lines
    )
    assert all(TOKEN not in line for line in lines)


def test_no_target_or_no_token_reports_nothing(github) -> None:
    assert report_finished(job="job", results=RESULTS, env={"GYM_REPORT_TOKEN": TOKEN}) == ""
    assert (
        report_finished(job="job", results=RESULTS, env={"GYM_REPORT_TO": env_for(github)["GYM_REPORT_TO"]})
        == ""
    )
    assert github.requests == []


def test_the_action_names_the_target_only_with_a_report_token(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 8, "head": {"sha": "c" * 40}}}))
    env = {"GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(event), "GITHUB_REPOSITORY": "acme/m",
           "GITHUB_RUN_ID": "3", "GITHUB_API_URL": "https://api.github.example"}  # fmt: skip
    assert report_target(env, "gym.toml") is None
    target = report_target({**env, "GYM_REPORT_TOKEN": TOKEN}, "gym.toml")
    assert target == ReportTarget("https://api.github.example", "acme/m", "c" * 40, "gym.toml", 8,
                                  "https://github.com/acme/m/actions/runs/3", "github-actions[bot]")  # fmt: skip
    app = report_target(
        {**env, "GYM_REPORT_TOKEN": TOKEN, "GYM_INPUT_COMMENT_AUTHOR": "@gym-app[bot]"}, "gym.toml"
    )
    assert app is not None and app.author == "gym-app[bot]"
    assert TOKEN not in target.as_env()


def test_hostile_names_in_results_reach_the_pr_as_plain_text(github) -> None:
    """Task, metric and filter names come from task YAML a PR can change: the comment shows them, inert."""
    import copy

    from tests.markdown_view import HOSTILE_FILTER, HOSTILE_METRIC, HOSTILE_TASK, render_markdown

    results = copy.deepcopy(RESULTS)
    results["results"][0].update(task=HOSTILE_TASK, metric=HOSTILE_METRIC, filter=HOSTILE_FILTER)
    report_finished(job="SkyPilot job `gym-bot`", results=results, env=env_for(github), echo=print)
    (comment,) = github.comments[8]
    body = comment["body"]
    seen = render_markdown(body)
    assert not {"img", "script", "b"} & set(seen.tags)
    assert seen.tags.count("details") == 0 and seen.tags.count("!--") == 1  # only the action's own marker
    assert [t for t in seen.tags if t == "a"] == ["a"]  # the workflow-run link, nothing from the names
    assert seen.rows[1][:2] == [HOSTILE_TASK, f"{HOSTILE_METRIC} ({HOSTILE_FILTER})"]  # readable as typed
    assert len(seen.rows) == 2 and len(seen.rows[1]) == len(seen.rows[0])  # one row, no cell broke out
    for raw in ("@acme/admins", "@octocat", "https://evil", "www.evil"):
        assert raw not in body
