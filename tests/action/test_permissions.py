"""The Action as GitHub really lets it act: the workflow token's permissions, and who authors comments.

The recording GitHub API (tests/action/github_server.py) refuses what the token was not granted with GitHub's
403 "Resource not accessible by integration", and authors a comment created with a fine-grained personal token
(the cloud job's GYM_REPORT_TOKEN) as that token's owner, not as github-actions[bot].
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gym.config.gates import parse_gate
from gym.eval.gates import evaluate_gates
from gym.eval.report import EvalReport
from gym.launch.report.job import ReportTarget, report_finished
from gym.launch.report.render import marker
from tests.action.conftest import GITHUB_TOKEN, RESULTS, RecordingLauncher
from tests.action.test_entrypoint import _pull
from tests.conftest import REPO

REPORT_TOKEN = "github_pat_" + "R" * 40
GATED = {**RESULTS, "gates": evaluate_gates([parse_gate("gym_reverse.exact_match >= 0.3")],
                                             EvalReport.from_dict(RESULTS), None, "acme/bot").to_dict()}  # fmt: skip


def example_permissions() -> dict[str, str]:
    workflow = yaml.safe_load((REPO / "examples" / "workflows" / "gym.yml").read_text())
    return dict(workflow["jobs"]["gym"]["permissions"])


def test_the_example_workflows_permissions_set_the_required_status(github, run_action) -> None:
    github.scopes[GITHUB_TOKEN] = example_permissions()
    _pull(github, 8, "acme/models", [("gym.toml", "added")], labels=["gym:launch"])
    launcher = RecordingLauncher()
    launcher.outcome.results = GATED
    result = run_action("pr_labeled.json", "pull_request", launcher)
    assert result.rc == 0, result.stdout
    (status,) = github.statuses
    assert (status["state"], status["context"]) == ("success", "gym / gym.toml")
    assert github.comments[8] and github.labels[8] == []  # commented, and the used approval removed


def test_a_token_without_statuses_write_is_one_sentence_naming_it(github, run_action) -> None:
    """What the example granted before: `contents: read, pull-requests: write`. GitHub refuses the status."""
    github.scopes[GITHUB_TOKEN] = {"contents": "read", "pull-requests": "write"}
    _pull(github, 8, "acme/models", [("gym.toml", "added")], labels=["gym:launch"])
    launcher = RecordingLauncher()
    launcher.outcome.results = GATED
    result = run_action("pr_labeled.json", "pull_request", launcher)
    assert github.statuses == []
    assert github.calls("POST", r"/statuses/")  # it was asked, and refused
    assert (
        "::error::could not set the commit status `gym / gym.toml`: the workflow's token lacks `statuses: write` "
        "(GitHub answered 403 'Resource not accessible by integration'): add it to the job's `permissions:` "
        "block (see examples/workflows/gym.yml)"
    ) in result.stdout
    assert "Traceback" not in result.stdout and github.comments[8]  # the comment still went out


def test_a_comment_the_job_created_with_the_report_token_is_found_again_not_duplicated(
    github, run_action, tmp_path: Path
) -> None:
    """The job had to create the sticky comment (with GYM_REPORT_TOKEN, owned by `ci-robot`); the next
    Action run (github-actions[bot]) recognises it as its own and updates it in place."""
    github.extra_tokens = (REPORT_TOKEN,)
    github.owners[REPORT_TOKEN] = "ci-robot"
    _pull(github, 7, "acme/models", [("gym.toml", "added")])
    target = ReportTarget(
        api_url=github.base, repository=github.repo, sha="a" * 40, config="gym.toml", pull=7
    )
    env = {"GYM_REPORT_TO": target.as_env(), "GYM_REPORT_TOKEN": REPORT_TOKEN}
    report_finished(job="SkyPilot job `gym-bot`", results=RESULTS, env=env, echo=lambda _: None)
    (created,) = github.comments[7]
    assert created["user"]["login"] == "ci-robot" and created["body"].startswith(marker("gym.toml"))
    reported = created["body"]

    result = run_action(
        "pr_same_repo.json", "pull_request", RecordingLauncher(), extra_env={"GYM_REPORT_TOKEN": REPORT_TOKEN}
    )
    assert result.rc == 0, result.stdout
    (comment,) = github.comments[7]  # one sticky comment per config, updated
    assert comment["id"] == created["id"] and comment["body"] != reported
    assert "ignored" not in result.stdout  # not taken for someone else's
    # the job's second report finds the same comment again
    report_finished(job="SkyPilot job `gym-bot`", results=RESULTS, env=env, echo=lambda _: None)
    assert len(github.comments[7]) == 1
    assert REPORT_TOKEN not in comment["body"]


def test_someone_elses_marker_comment_is_still_not_the_actions(github, run_action) -> None:
    """Recognising the report token's owner widens the identities by exactly one: a third person's comment with
    the marker stays an impostor."""
    github.extra_tokens = (REPORT_TOKEN,)
    github.owners[REPORT_TOKEN] = "ci-robot"
    _pull(github, 7, "acme/models", [("gym.toml", "added")])
    github.add_comment(7, marker("gym.toml") + "\nplanted", "mallory")
    result = run_action(
        "pr_same_repo.json", "pull_request", RecordingLauncher(), extra_env={"GYM_REPORT_TOKEN": REPORT_TOKEN}
    )
    assert result.rc == 0, result.stdout
    assert [c["user"]["login"] for c in github.comments[7]] == ["mallory", "github-actions[bot]"]
    assert github.comments[7][0]["body"].endswith("planted")


def _comment_event(login: str) -> dict:
    """An `issue_comment` on a pull request, as GitHub delivers it (no `pull_request` key at the top)."""
    return {"action": "created", "issue": {"number": 7, "pull_request": {"url": "https://api.github.example/pulls/7"}},
            "comment": {"id": 901, "body": "/launch please", "user": {"login": login}},
            "repository": {"full_name": "acme/models", "default_branch": "main"}, "sender": {"login": login}}  # fmt: skip


def test_mode_launch_on_a_comment_launches_only_for_a_maintainer(github, run_action) -> None:
    github.roles.update({"randy": "read", "tri": "triage", "maya": "maintain"})
    for login, launches in (("randy", False), ("tri", False), ("stranger", False), ("maya", True)):
        launcher = RecordingLauncher()
        result = run_action("pr_same_repo.json", "issue_comment", launcher, event_data=_comment_event(login),
                            mode="launch")  # fmt: skip
        assert result.rc == 0, result.stdout
        assert bool(launcher.requests) is launches, (login, result.stdout)
        if not launches:
            assert f"plan only: issue_comment by @{login} who has" in result.stdout
            assert "(launching needs write, maintain or admin)" in result.stdout
    assert "launch: mode = launch, issue_comment by @maya who has maintain permission" in result.stdout
