"""The action end to end: event fixtures → recording GitHub API on 127.0.0.1 → comment, summary, outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.action.conftest import AWS_SECRET, EVENTS, GITHUB_TOKEN, HF_TOKEN, RecordingLauncher
from tests.conftest import REPO

SECRETS = {"GYM_INPUT_HF_TOKEN", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY"}


def _pull(github, number: int, head_repo: str, files, labels=()) -> None:
    github.pulls[number] = {"head_repo": head_repo}
    github.files[number] = list(files)
    github.labels[number] = []
    github.roles["wendy"] = "write"
    for label in labels:
        github.apply_label(number, label, "wendy")


def test_same_repo_pr_plans_and_keeps_one_sticky_comment(github, run_action) -> None:
    _pull(github, 7, "acme/models", [("gym.toml", "modified"), ("README.md", "modified")])
    launcher = RecordingLauncher()

    first = run_action("pr_same_repo.json", "pull_request", launcher)
    assert first.rc == 0, first.stdout
    assert launcher.requests == []  # no label: plan only
    comments = github.comments[7]
    assert len(comments) == 1
    body = comments[0]["body"]
    assert body.startswith("<!-- gym-action config=gym.toml -->")
    assert "plan only: commit aaaaaaaaaaaa is not approved (no `gym:launch` label)" in body
    assert "`A100:1`, `H100:1`" in body and "| spot | yes |" in body and "managed job" in body
    assert "HF_TOKEN: <redacted>" in body
    assert first.outputs["mode"] == "plan"
    assert first.outputs["comment-url"].endswith("#issuecomment-1001")
    assert json.loads(first.outputs["results-json"])[0]["valid"] is True
    assert "### Gym · `gym.toml`" in first.summary
    assert all(r.authorized for r in github.requests)

    event = json.loads((EVENTS / "pr_same_repo.json").read_text())
    event["pull_request"]["head"]["sha"] = "c" * 40  # a new push to the PR
    second = run_action("pr_same_repo.json", "pull_request", launcher, event_data=event)
    assert second.rc == 0
    assert len(github.comments[7]) == 1  # updated in place, never a second comment
    assert len(github.calls("POST", r"/issues/7/comments$")) == 1
    assert len(github.calls("PATCH", r"/issues/comments/1001$")) == 1
    assert "cccccccccccc" in github.comments[7][0]["body"]
    assert second.outputs["comment-url"] == first.outputs["comment-url"]


def test_labelled_pr_launches_and_posts_the_eval_table(github, run_action) -> None:
    _pull(github, 8, "acme/models", [("gym.toml", "added")], labels=["gym:launch"])
    launcher = RecordingLauncher(say=f"token is {HF_TOKEN}")

    result = run_action("pr_labeled.json", "pull_request", launcher)
    assert result.rc == 0, result.stdout
    (request,) = launcher.requests
    assert request.cloud is True
    assert request.flags == ["--set", "hub.push=none"]  # a PR never publishes
    assert request.config.hub.push == "none"
    assert request.env["HF_TOKEN"] == HF_TOKEN
    body = github.comments[8][0]["body"]
    assert "🚀 launched and evaluated" in body
    assert "| gym_reverse | exact_match | 100 | 0.0000 | 0.3500 | 0.0400 | +0.3500 |" in body
    assert HF_TOKEN not in body and "token is ***" in body
    assert result.outputs["job-id"] == "42"
    assert json.loads(result.outputs["results-json"])[0]["results"]["results"][0]["delta"] == 0.35
    assert github.calls("GET", r"/issues/8/labels$")  # the label is checked through the API


def test_fork_pr_never_launches_nor_reads_a_secret(github, run_action) -> None:
    _pull(github, 9, "mallory/models", [("gym.toml", "modified")], labels=["gym:launch"])
    github.read_only = True  # the token a fork's PR gets
    launcher = RecordingLauncher()

    result = run_action("pr_fork.json", "pull_request", launcher, mode="launch")
    assert result.rc == 0, result.stdout
    assert launcher.requests == []
    assert not (result.env.read & SECRETS), result.env.read
    assert not github.calls("GET", r"/labels$")  # the label does not matter on a fork
    assert result.outputs["mode"] == "plan" and result.outputs["comment-url"] == ""
    assert "pull request from a fork" in result.summary
    assert (
        "::warning::could not comment on the pull request (HTTP 403: GitHub gives a pull request from a fork a "
        "read-only token)" in result.stdout
    )
    for text in (result.summary, result.stdout, *result.outputs.values()):
        assert HF_TOKEN not in text and AWS_SECRET not in text and GITHUB_TOKEN not in text


def test_push_to_main_launches_without_commenting(github, run_action) -> None:
    github.compares["1111111111111111111111111111111111111111...2222222222222222222222222222222222222222"] = [
        ("gym.toml", "modified")
    ]
    launcher = RecordingLauncher()
    result = run_action("push_main.json", "push", launcher)
    assert result.rc == 0, result.stdout
    (request,) = launcher.requests
    assert request.flags == []  # the default branch publishes: card, model, Space
    assert not github.calls("POST", "comments") and not github.calls("GET", "/pulls/")
    assert "| gym_reverse | exact_match |" in result.summary
    assert result.outputs["job-id"] == "42" and result.outputs["mode"] == "launch"


def test_pr_that_does_not_touch_a_config_does_nothing(github, run_action) -> None:
    _pull(github, 10, "acme/models", [("README.md", "modified"), ("old/gym.toml", "removed")])
    launcher = RecordingLauncher()
    result = run_action("pr_untouched.json", "pull_request", launcher)
    assert result.rc == 0
    assert launcher.requests == [] and 10 not in github.comments
    assert "nothing to do" in result.summary
    assert result.outputs == {"results-json": "[]", "comment-url": "", "job-id": "", "mode": "skip"}


def test_invalid_config_fails_the_check_with_file_line_col(github, run_action, workspace) -> None:
    (workspace / "gym.toml").write_text(
        (workspace / "gym.toml").read_text().replace('adapter = "lora"', "learning_rate = -0.1")
    )
    _pull(github, 8, "acme/models", [("gym.toml", "modified")], labels=["gym:launch"])
    launcher = RecordingLauncher()
    result = run_action("pr_labeled.json", "pull_request", launcher)
    assert result.rc == 1
    assert launcher.requests == []
    body = github.comments[8][0]["body"]
    assert "❌ 1 problem in the config" in body
    assert "gym.toml:14:17: train.learning_rate: expected a number > 0" in body
    assert "::error file=gym.toml,line=14,col=17::train.learning_rate" in result.stdout


def test_config_cannot_expand_a_secret_into_the_plan(github, run_action, workspace) -> None:
    text = (
        (workspace / "gym.toml").read_text().replace('name = "support-bot"', 'name = "x${HF_TOKEN:-unset}"')
    )
    (workspace / "gym.toml").write_text(text)
    _pull(github, 7, "acme/models", [("gym.toml", "modified")])
    result = run_action("pr_same_repo.json", "pull_request", RecordingLauncher())
    assert "gym-xunset" in github.comments[7][0]["body"]
    assert not (result.env.read & SECRETS)


def test_symlinked_config_outside_the_checkout_is_refused(github, run_action, workspace, tmp_path) -> None:
    (tmp_path / "secret.toml").write_text("token = 'x'\n")
    (workspace / "evil").mkdir()
    (workspace / "evil" / "gym.toml").symlink_to(tmp_path / "secret.toml")
    _pull(github, 7, "acme/models", [("evil/gym.toml", "added")])
    result = run_action("pr_same_repo.json", "pull_request", RecordingLauncher(), config="**/gym.toml")
    assert result.rc == 1
    assert "resolves outside the repository checkout" in github.comments[7][0]["body"]


def test_python_dash_m_action_runs_in_the_workspace(github, workspace, tmp_path) -> None:
    """The real entrypoint in a subprocess, started from the action's folder as action.yml does."""
    github.compares["1" * 40 + "..." + "2" * 40] = [("gym.toml", "modified")]
    summary, output = tmp_path / "summary.md", tmp_path / "output"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "GITHUB_EVENT_NAME": "push",
        "GITHUB_EVENT_PATH": str(EVENTS / "push_main.json"),
        "GITHUB_REPOSITORY": github.repo,
        "GITHUB_API_URL": github.base,
        "GITHUB_WORKSPACE": str(workspace),
        "GITHUB_OUTPUT": str(output),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GYM_GITHUB_TOKEN": GITHUB_TOKEN,
        "GYM_INPUT_MODE": "plan",
    }
    done = subprocess.run(
        [sys.executable, "-m", "action"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gym.toml: valid" in done.stdout
    assert f"workdir: {workspace}" in summary.read_text()  # SkyPilot syncs the checkout, not the action
    assert "mode<<" in output.read_text()
