"""Who may spend money, on what commit, how often: the approval rules against the recording GitHub API.

Each run is the real entrypoint (PyGithub against tests/action/github_server.py); only the launcher
and SkyPilot's job queue and cancel are recorded here. tests/action/test_cloud_cancel.py runs the real
SkyPilot ones against the SkyPilot API double.
"""

from __future__ import annotations

import json

import pytest

from gym.launch.report.outcome import LaunchOutcome
from gym.launch.report.sticky import RunState
from tests.action.conftest import EVENTS, RecordingJobs, RecordingLauncher

SHA_A, SHA_C = "a" * 40, "c" * 40
MARKER = "<!-- gym-action config=gym.toml -->"


def _event(action: str, sha: str) -> dict:
    event = json.loads((EVENTS / "pr_labeled.json").read_text())
    event["action"] = action
    event["pull_request"]["head"]["sha"] = sha
    if action != "labeled":
        event.pop("label", None)
    return event


@pytest.fixture
def pr(github):
    github.pulls[8] = {"head_repo": "acme/models"}
    github.files[8] = [("gym.toml", "modified")]
    github.labels[8] = []
    github.roles.update(wendy="write", tom="triage", max="maintain", rita="read", carl="security-reviewer")
    github.custom_roles.update({"security-reviewer": "triage", "ml-launcher": "maintain"})
    return github


@pytest.fixture
def act(run_action):
    """One workflow run of PR 8 for a pull_request event of ``action`` at head ``sha``."""
    jobs = RecordingJobs()

    def run(action: str, sha: str, launcher: RecordingLauncher, **inputs: str):
        event = _event(action, sha)
        return run_action("pr_labeled.json", "pull_request", launcher, event_data=event, jobs=jobs, **inputs)

    run.jobs = jobs
    return run


def _comment(github) -> dict:
    (comment,) = [c for c in github.comments[8] if c["user"]["login"] == "github-actions[bot]"]
    return comment


def test_label_by_triage_user_only_plans(pr, act) -> None:
    pr.apply_label(8, "gym:launch", "tom")
    launcher = RecordingLauncher()
    result = act("labeled", SHA_A, launcher)
    assert result.rc == 0, result.stdout
    assert launcher.requests == []
    line = (
        "plan only: label `gym:launch` applied by @tom who has triage permission "
        "(launching needs write, maintain or admin)"
    )
    assert f"- {line}\n" in _comment(pr)["body"] and f"- {line}\n" in result.summary
    assert pr.calls("GET", r"/collaborators/tom/permission$")
    assert "gym:launch" in pr.labels[8]  # not a maintainer's label: left where it is
    assert result.outputs["mode"] == "plan" and result.outputs["job-id"] == ""


@pytest.mark.parametrize(("who", "role"), [("wendy", "write"), ("max", "maintain")])
def test_label_by_writer_launches_once_and_is_used_up(pr, act, who, role) -> None:
    pr.apply_label(8, "gym:launch", who)
    launcher = RecordingLauncher()
    result = act("labeled", SHA_A, launcher)
    assert result.rc == 0, result.stdout
    assert len(launcher.requests) == 1
    body = _comment(pr)["body"]
    assert (
        f"launch approved: label `gym:launch` applied by @{who} who has {role} permission, for commit aaaaaaaaaaaa"
        in body
    )
    assert "**Job:** SkyPilot managed job `42` · commit `aaaaaaaaaaaa` · state **finished**" in body
    assert "removed the `gym:launch` label: its approval covered commit aaaaaaaaaaaa only" in body
    assert pr.labels[8] == [] and pr.calls("DELETE", r"/issues/8/labels/gym%3Alaunch$")
    state = RunState.parse(body)
    assert state is not None and (state.sha, state.job_id, state.approved_by) == (SHA_A, "42", who)
    assert result.outputs["job-id"] == "42"


@pytest.mark.parametrize(
    ("role", "shown", "launches"),
    [
        ("security-reviewer", "security-reviewer (based on read)", False),
        ("ml-launcher", "ml-launcher (based on write)", True),
    ],
)
def test_custom_role_counts_by_its_base_permission(pr, act, role, shown, launches) -> None:
    """GitHub answers a custom role's base as `permission` (maintain -> write) and its name as `role_name`."""
    pr.roles["carl"] = role
    pr.apply_label(8, "gym:launch", "carl")
    launcher = RecordingLauncher()
    act("labeled", SHA_A, launcher)
    assert len(launcher.requests) == int(launches)
    assert f"who has {shown} permission" in _comment(pr)["body"]


def test_new_commit_after_launch_waits_for_a_new_approval(pr, act) -> None:
    pr.apply_label(8, "gym:launch", "wendy")
    launcher = RecordingLauncher(outcome=LaunchOutcome(job_id="42", detail="submitted"))
    act("labeled", SHA_A, launcher, wait="false")
    assert len(launcher.requests) == 1

    pushed = act("synchronize", SHA_C, launcher, wait="false")  # the author pushes a new commit
    assert pushed.rc == 0 and len(launcher.requests) == 1
    body = _comment(pr)["body"]
    assert "plan only: commit cccccccccccc is not approved (no `gym:launch` label)" in body
    assert "the job shown below ran commit aaaaaaaaaaaa, not cccccccccccc" in body
    assert "**Job:** SkyPilot managed job `42` · commit `aaaaaaaaaaaa` · state **submitted**" in body
    assert pushed.outputs["job-id"] == "42"

    pr.labels[8].append("gym:launch")  # the label is back on, but no new `labeled` event approved C
    again = act("synchronize", SHA_C, launcher, wait="false")
    assert len(launcher.requests) == 1
    assert "the `gym:launch` label on this PR approved an earlier commit" in _comment(pr)["body"]
    assert again.outputs["mode"] == "plan"


def test_rerun_of_the_same_commit_reports_the_existing_job(pr, act) -> None:
    pr.apply_label(8, "gym:launch", "wendy")
    launcher = RecordingLauncher(outcome=LaunchOutcome(job_id="42", detail="submitted"))
    act("labeled", SHA_A, launcher, wait="false")
    rerun = act("labeled", SHA_A, launcher, wait="false")  # "Re-run jobs" replays the same payload
    assert rerun.rc == 0, rerun.stdout
    assert len(launcher.requests) == 1 and act.jobs.cancelled == []
    body = _comment(pr)["body"]
    line = "no second launch: job 42 for commit aaaaaaaaaaaa already exists (state: RUNNING); a re-run reports it"
    assert line in body and line in rerun.summary
    assert "SkyPilot reports job 42 (commit aaaaaaaaaaaa) as RUNNING" in body
    assert "### Gym · `gym.toml` · 🔁 job 42 for this commit: RUNNING" in body
    assert "**Job:** SkyPilot managed job `42` · commit `aaaaaaaaaaaa` · state **RUNNING**" in body
    assert rerun.outputs["job-id"] == "42"
    assert len(pr.comments[8]) == 1


def test_newer_approved_commit_cancels_the_previous_job(pr, act) -> None:
    pr.apply_label(8, "gym:launch", "wendy")
    act(
        "labeled",
        SHA_A,
        RecordingLauncher(outcome=LaunchOutcome(job_id="42", detail="submitted")),
        wait="false",
    )
    pr.apply_label(8, "gym:launch", "max")  # a maintainer approves commit C
    launcher = RecordingLauncher(outcome=LaunchOutcome(job_id="43", detail="submitted"))
    result = act("labeled", SHA_C, launcher, wait="false")
    assert result.rc == 0, result.stdout
    (cancelled,) = act.jobs.cancelled
    assert (cancelled.job_id, cancelled.sha, cancelled.managed) == ("42", SHA_A, True)
    assert cancelled.name.startswith("gym-support-bot-")  # scoped to repository + config (run_name)
    assert len(launcher.requests) == 1
    body = _comment(pr)["body"]
    assert (
        "cancelled the previous job 42 (commit aaaaaaaaaaaa) through SkyPilot before launching: "
        "one job per pull request and config"
    ) in body
    assert (
        "**Job:** SkyPilot managed job `43` · commit `cccccccccccc` · state **submitted** · approved by @max"
        in body
    )
    assert "earlier: job 42 · commit aaaaaaaaaaaa · cancelled" in body


def test_a_cancel_that_fails_launches_nothing(pr, act) -> None:
    pr.apply_label(8, "gym:launch", "wendy")
    act(
        "labeled",
        SHA_A,
        RecordingLauncher(outcome=LaunchOutcome(job_id="42", detail="submitted")),
        wait="false",
    )
    pr.apply_label(8, "gym:launch", "wendy")
    act.jobs.fail = "could not cancel managed job 42: the jobs controller is not up"
    launcher = RecordingLauncher()
    result = act("labeled", SHA_C, launcher, wait="false")
    assert result.rc == 1 and launcher.requests == []
    body = _comment(pr)["body"]
    assert "could not cancel managed job 42" in body
    assert "**Job:** SkyPilot managed job `42` · commit `aaaaaaaaaaaa` · state **RUNNING**" in body
    assert "gym:launch" in pr.labels[8]  # nothing launched: the approval is not used up


def test_spoofed_marker_comment_is_never_edited_nor_trusted(pr, act) -> None:
    fake_state = RunState(sha=SHA_A, job_id="999", name="gym-x", managed=True, approval=1).line()
    planted = f"{MARKER}\n{fake_state}\nI am the action, trust me"
    spoof = pr.add_comment(8, planted, "mallory")
    pr.apply_label(8, "gym:launch", "wendy")
    launcher = RecordingLauncher()
    result = act("labeled", SHA_A, launcher)
    assert result.rc == 0, result.stdout
    assert len(launcher.requests) == 1  # the planted "job for this commit" did not stop the launch
    assert act.jobs.cancelled == [] and act.jobs.asked == []  # nor did it make the action touch job 999
    assert pr.comments[8][0] == {"id": spoof, "body": planted, "user": {"login": "mallory", "type": "User"}}
    assert not pr.calls("PATCH", rf"/issues/comments/{spoof}$")
    body = _comment(pr)["body"]
    assert f"ignored 1 comment(s) carrying this config's marker by @mallory (comment {spoof})" in body
    assert "ignored 1 comment(s)" in result.summary
    assert pr.calls("GET", r"^/user$")  # the action asked who it is


def test_token_with_a_user_finds_its_own_comment(pr, act) -> None:
    """A personal or app token that may call GET /user: its login is the author to trust."""
    pr.user_login = "gym-bot"
    pr.add_comment(8, f"{MARKER}\nold report", "github-actions[bot]")  # someone else's now
    act("synchronize", SHA_A, RecordingLauncher())
    mine = [c for c in pr.comments[8] if c["user"]["login"] == "gym-bot"]
    assert len(mine) == 1 and mine[0]["body"].startswith(MARKER)
    assert pr.comments[8][0]["body"] == f"{MARKER}\nold report"
    act("synchronize", SHA_C, RecordingLauncher())
    assert len(pr.comments[8]) == 2  # updated its own, never the other


def test_label_by_someone_no_longer_a_collaborator_only_plans(pr, act) -> None:
    pr.apply_label(8, "gym:launch", "former")  # applied, then removed from the repository
    launcher = RecordingLauncher()
    result = act("labeled", SHA_A, launcher)
    assert result.rc == 0 and launcher.requests == []
    assert "label `gym:launch` applied by @former who has no permission" in _comment(pr)["body"]


def test_previous_job_that_already_ended_is_not_cancelled(pr, act) -> None:
    pr.apply_label(8, "gym:launch", "wendy")
    act(
        "labeled",
        SHA_A,
        RecordingLauncher(outcome=LaunchOutcome(job_id="42", detail="submitted")),
        wait="false",
    )
    act.jobs.statuses["42"] = ("SUCCEEDED", True)
    pr.apply_label(8, "gym:launch", "wendy")
    launcher = RecordingLauncher(outcome=LaunchOutcome(job_id="43", detail="submitted"))
    result = act("labeled", SHA_C, launcher, wait="false")
    assert result.rc == 0 and len(launcher.requests) == 1 and act.jobs.cancelled == []
    body = _comment(pr)["body"]
    assert "SkyPilot reports job 42 (commit aaaaaaaaaaaa) as SUCCEEDED" in body
    assert "the previous job 42 (commit aaaaaaaaaaaa) already ended (SUCCEEDED): nothing to cancel" in body
    assert "earlier: job 42 · commit aaaaaaaaaaaa · SUCCEEDED" in body


def test_plan_only_runs_never_ask_skypilot(pr, act) -> None:
    """A push without approval reads no secret and starts no SkyPilot client: the recorded state is shown."""
    pr.apply_label(8, "gym:launch", "wendy")
    act(
        "labeled",
        SHA_A,
        RecordingLauncher(outcome=LaunchOutcome(job_id="42", detail="submitted")),
        wait="false",
    )
    result = act("synchronize", SHA_C, RecordingLauncher(), wait="false")
    assert act.jobs.asked == [] and not ({"GYM_INPUT_HF_TOKEN", "AWS_SECRET_ACCESS_KEY"} & result.env.read)


def test_find_or_create_sticky_is_reusable_on_its_own(pr) -> None:
    """The one find-or-write step other code (a cloud job reporting back) reuses, through PyGithub."""
    from github import Auth, Github

    from gym.launch.report.sticky import find_or_create_sticky, own_login
    from tests.action.conftest import GITHUB_TOKEN

    client = Github(base_url=pr.base, auth=Auth.Token(GITHUB_TOKEN), seconds_between_writes=0)
    pull = client.get_repo(pr.repo).get_pull(8)
    own = own_login(client)
    assert own == "github-actions[bot]"  # GET /user is 403 for the Actions token
    spoof = pr.add_comment(8, f"{MARKER}\nplanted", "mallory")
    first = find_or_create_sticky(pull, MARKER, own, f"{MARKER}\nrunning: step 10")
    second = find_or_create_sticky(pull, MARKER, own, f"{MARKER}\nrunning: step 20")
    assert first.created and not second.created and first.url == second.url
    assert second.impostors == ((spoof, "mallory"),)
    assert [c["body"] for c in pr.comments[8]] == [f"{MARKER}\nplanted", f"{MARKER}\nrunning: step 20"]
    with pytest.raises(ValueError, match="must start with its marker"):
        find_or_create_sticky(pull, MARKER, own, "no marker")


def test_job_is_recorded_before_following_it(pr, act) -> None:
    """wait: true follows the job for hours; a workflow run cancelled meanwhile still left the job id behind,
    so the next approved commit finds and cancels it."""
    pr.apply_label(8, "gym:launch", "wendy")
    seen: list[str] = []

    def launcher(request):
        request.on_submitted(LaunchOutcome(job_id="42", detail="submitted; following it"))
        seen.append(_comment(pr)["body"])
        raise SystemExit(143)  # the runner stops the step (a newer push cancelled the workflow run)

    with pytest.raises(SystemExit):
        act("labeled", SHA_A, launcher)
    (body,) = seen
    assert "**Job:** SkyPilot managed job `42` · commit `aaaaaaaaaaaa` · state **submitted**" in body
    assert "- following the job until it ends" in body
    assert RunState.parse(body).job_id == "42" and pr.labels[8] == []  # approval used up at submission

    pr.apply_label(8, "gym:launch", "wendy")
    relaunch = RecordingLauncher(outcome=LaunchOutcome(job_id="43", detail="submitted"))
    act("labeled", SHA_C, relaunch, wait="false")
    assert [s.job_id for s in act.jobs.cancelled] == ["42"] and len(relaunch.requests) == 1
    assert len([c for c in pr.comments[8] if c["user"]["login"] == "github-actions[bot]"]) == 1


def test_app_token_names_its_comment_author(pr, act) -> None:
    """A GitHub App token cannot call GET /user either; comment-author says whose comment is the action's."""
    pr.bot_login = "gym-app[bot]"
    pr.apply_label(8, "gym:launch", "wendy")
    launcher = RecordingLauncher(outcome=LaunchOutcome(job_id="42", detail="submitted"))
    act("labeled", SHA_A, launcher, wait="false", comment_author="gym-app[bot]")
    act("labeled", SHA_A, launcher, wait="false", comment_author="gym-app[bot]")  # re-run
    assert len(launcher.requests) == 1 and len(pr.comments[8]) == 1
    assert pr.comments[8][0]["user"]["login"] == "gym-app[bot]"
    assert not pr.calls("GET", r"^/user$")


def test_bad_comment_author_is_refused_in_one_sentence(pr, act) -> None:
    result = act("synchronize", SHA_A, RecordingLauncher(), comment_author="x; rm -rf /")
    assert result.rc == 1
    assert (
        "::error::input comment-author: expected a GitHub login such as my-app[bot], got 'x; rm -rf /'"
        in result.stdout
    )
    assert 8 not in pr.comments or pr.comments[8] == []
