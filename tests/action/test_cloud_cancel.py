"""Job identity across runs: the real action, SkyPilot's real client, the GitHub and SkyPilot doubles.

``python tests/launch/sky_harness.py RECORD --action`` runs ``action.main`` with its default launcher
and job control (SkyPilot's SDK) against the recording SkyPilot API server, while the recording GitHub
API runs here. HOME is a temp folder (SkyPilot writes ~/.sky on import) that also holds a cached AWS
price list, so the plan's hourly price comes from SkyPilot's own catalog code, offline.

The runs "on fresh runners" run ``action.main`` in a new process with a new HOME each, against the SkyPilot
double (:mod:`tests.launch.sky_double`, ``run_nodes=False``: jobs keep their identity and state, no
training): one long-lived double with basic auth is a team API server both runs share; a new double per
run, found on the local port with no endpoint configured, is the local server SkyPilot starts on a fresh
runner, which cannot see the previous run's jobs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

from gym.config import load_config
from gym.launch.report.sticky import RunState
from gym.launch.sky_server import NO_TEAM_SERVER, untracked_sentence
from gym.launch.task import run_name
from tests.action.conftest import EVENTS, GITHUB_TOKEN, HF_TOKEN
from tests.conftest import REPO
from tests.launch.sky_double import SkyDouble, local_server_env, sky_env

HARNESS = REPO / "tests" / "launch" / "sky_harness.py"
MARKER = "<!-- gym-action config=gym.toml -->"
CATALOG = """\
InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone
p4d.24xlarge,A100,8.0,96.0,1152.0,,32.77,12.50,us-east-1,us-east-1a
a2-like.1g,A100,1.0,12.0,85.0,,4.10,1.25,us-east-1,us-east-1a
p5.4xlarge,H100,1.0,16.0,256.0,,6.88,2.75,us-east-1,us-east-1b
"""


def _catalog_version() -> str:
    """SkyPilot's catalog schema folder (v8, ...), read from its source without importing it."""
    spec = find_spec("sky")
    assert spec is not None and spec.origin
    text = (Path(spec.origin).parent / "skylet" / "constants.py").read_text()
    match = re.search(r"^CATALOG_SCHEMA_VERSION = '(v\d+)'", text, re.MULTILINE)
    assert match
    return match.group(1)


def _job_name(workspace: Path, repository: str = "acme/models") -> str:
    """The SkyPilot name of the workspace's gym.toml in ``repository`` (what the action launches under)."""
    return run_name(load_config(workspace / "gym.toml"), {"GITHUB_REPOSITORY": repository})


def _harness_action(
    github, workspace: Path, tmp_path: Path, jobs: dict
) -> tuple[subprocess.CompletedProcess, list, str]:
    """One launch-approved run of the action against the recording SkyPilot server (a configured one):
    the process, the SkyPilot calls and the summary; the sticky comment records job 41 of ``jobs``."""
    (workspace / "gym.toml").write_text(
        (workspace / "gym.toml")
        .read_text()
        .replace("managed = true", "managed = true\nmax_runtime_hours = 6")
    )
    home = tmp_path / "home"
    catalog = home / ".sky" / "catalogs" / _catalog_version() / "aws"
    catalog.mkdir(parents=True)
    (catalog / "vms.csv").write_text(CATALOG)

    github.pulls[8] = {"head_repo": "acme/models"}
    github.files[8] = [("gym.toml", "modified")]
    github.roles["wendy"] = "write"
    old = RunState(sha="b" * 40, job_id="41", name=_job_name(workspace), managed=True, approval=1)
    github.add_comment(8, f"{MARKER}\n{old.line()}\nearlier report", "github-actions[bot]")
    github.apply_label(8, "gym:launch", "wendy")

    event = json.loads((EVENTS / "pr_labeled.json").read_text())
    event_path, summary, output = tmp_path / "event.json", tmp_path / "summary.md", tmp_path / "output"
    event_path.write_text(json.dumps(event))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "PYTHONPATH": str(REPO),
        "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(event_path),
        "GITHUB_REPOSITORY": github.repo,
        "GITHUB_API_URL": github.base,
        "GITHUB_WORKSPACE": str(workspace),
        "GITHUB_OUTPUT": str(output),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GYM_GITHUB_TOKEN": GITHUB_TOKEN,
        "GYM_INPUT_HF_TOKEN": HF_TOKEN,
        "GYM_INPUT_WAIT": "false",
        "SKY_HARNESS_JOBS": json.dumps(jobs),
    }
    record = tmp_path / "record.json"
    done = subprocess.run(
        [sys.executable, str(HARNESS), str(record), "--action"],
        cwd=workspace, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    calls = json.loads(record.read_text())["calls"]
    return done, calls, summary.read_text() if summary.exists() else ""


def test_new_approval_cancels_the_old_job_through_skypilot(github, workspace, tmp_path) -> None:
    done, calls, summary = _harness_action(
        github, workspace, tmp_path, {"41": ["RUNNING", _job_name(workspace)]}
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    posts = [c["path"] for c in calls if c["method"] == "POST"]
    assert "/jobs/cancel" in posts and "/jobs/launch" in posts
    assert posts.index("/jobs/queue/v2") < posts.index("/jobs/cancel") < posts.index("/jobs/launch")
    assert json.loads(next(c["body"] for c in calls if c["path"] == "/jobs/queue/v2"))["job_ids"] == [41]
    cancel = json.loads(next(c["body"] for c in calls if c["path"] == "/jobs/cancel"))
    assert cancel["job_ids"] == [41]

    body = github.comments[8][0]["body"]
    assert "SkyPilot reports job 41 (commit bbbbbbbbbbbb) as RUNNING" in body
    assert "cancelled the previous job 41 (commit bbbbbbbbbbbb) through SkyPilot before launching" in body
    assert "**Job:** SkyPilot managed job `7` · commit `aaaaaaaaaaaa` · state **submitted**" in body
    # A100:1 spot on the cached AWS list: $1.25/h; H100:1 spot: $2.75/h.
    assert (
        "| hourly price | ≈ $1.25–$2.75/h for 1 node (cheapest cached offer per candidate), "
        "at most ≈ $16.50 for 6 h" in body
    )
    assert "A100:1: $1.25/h spot (aws a2-like.1g)" in body
    assert "| max runtime | 6 h, then the run is stopped (`compute.max_runtime_hours`" in body
    assert NO_TEAM_SERVER not in body  # the recording server is a configured one
    launched = json.loads(next(c["body"] for c in calls if c["path"] == "/jobs/launch"))
    assert "GYM_MAX_RUNTIME_S: '21600'" in launched["task"]
    assert launched["name"] == _job_name(workspace) != _job_name(workspace, "acme/other")
    assert "cancelled the previous job 41" in summary
    assert HF_TOKEN not in body and HF_TOKEN not in done.stdout


def test_a_job_of_another_name_with_the_recorded_id_is_never_cancelled(github, workspace, tmp_path) -> None:
    """Job 41 on this server is another run's (its id was reused): it is not the job the comment recorded."""
    done, calls, _ = _harness_action(github, workspace, tmp_path, {"41": "RUNNING"})  # named gym-recorded
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    posts = [c["path"] for c in calls if c["method"] == "POST"]
    assert "/jobs/cancel" not in posts and "/jobs/launch" in posts
    body = github.comments[8][0]["body"]
    name = _job_name(workspace)
    assert f"SkyPilot has no job 41 named `{name}` (commit bbbbbbbbbbbb) any more: nothing to cancel" in body
    assert "cancelled the previous job" not in body


# -- fresh runners: the same pull request approved twice, each run in a new process with a new HOME ------------
def _approve(github, number: int, sha: str) -> dict:
    """wendy (write) applies the label to the PR at head ``sha``: the event of that run."""
    github.apply_label(number, "gym:launch", "wendy")
    event = json.loads((EVENTS / "pr_labeled.json").read_text())
    event["pull_request"]["head"]["sha"] = sha
    return event


def _fresh_runner(
    github, workspace: Path, runner: Path, event: dict, sky: dict[str, str]
) -> subprocess.CompletedProcess:
    """``action.main`` as a GitHub-hosted runner runs it: a new machine (HOME), the event, the workflow's env."""
    runner.mkdir(parents=True)
    (runner / "event.json").write_text(json.dumps(event))
    env = {**sky, "PYTHONPATH": str(REPO), "GITHUB_EVENT_NAME": "pull_request",
           "GITHUB_EVENT_PATH": str(runner / "event.json"), "GITHUB_REPOSITORY": github.repo,
           "GITHUB_API_URL": github.base, "GITHUB_WORKSPACE": str(workspace),
           "GITHUB_OUTPUT": str(runner / "output"), "GITHUB_STEP_SUMMARY": str(runner / "summary.md"),
           "GYM_GITHUB_TOKEN": GITHUB_TOKEN, "GYM_INPUT_HF_TOKEN": HF_TOKEN, "GYM_INPUT_WAIT": "false"}  # fmt: skip
    code = "import sys; from action.main import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code], cwd=workspace, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def _state(github, number: int = 8) -> RunState:
    (comment,) = github.comments[number]
    state = RunState.parse(comment["body"])
    assert state is not None, comment["body"]
    return state


def _pull(github) -> None:
    github.pulls[8] = {"head_repo": "acme/models"}
    github.files[8] = [("gym.toml", "modified")]
    github.roles["wendy"] = "write"


def test_two_approvals_on_fresh_runners_share_a_team_server(github, workspace, tmp_path) -> None:
    """The second approval finds the first job by name and id on the team server, cancels it, launches."""
    _pull(github)
    name = _job_name(workspace)
    with SkyDouble(tmp_path / "sky", users={"ci": "ci-pass", "bob": "bob-pass"}, run_nodes=False) as team:
        bobs = team.add_job(name, [], status="RUNNING", user="bob")  # same name, another user of the server
        other = team.add_job("gym-support-bot-00000000", [], status="RUNNING", user="ci")  # another config
        first = _fresh_runner(github, workspace, tmp_path / "runner1", _approve(github, 8, "c" * 40),
                              sky_env(tmp_path / "home1", team.url_for("ci")))  # fmt: skip
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        launched = _state(github)
        second = _fresh_runner(github, workspace, tmp_path / "runner2", _approve(github, 8, "a" * 40),
                               sky_env(tmp_path / "home2", team.url_for("ci")))  # fmt: skip
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
        jobs = list(team.jobs.values())
        refused = subprocess.run([sys.executable, "-c", "import sky; sky.get(sky.jobs.queue_v2())"],
                                 env=sky_env(tmp_path / "home3", team.endpoint), capture_output=True, text=True,
                                 timeout=120)  # fmt: skip
    job1, job2 = jobs[2:]
    assert (launched.job_id, launched.name, launched.sha) == (str(job1.job_id), name, "c" * 40)
    assert job1.name == job2.name == name and job1.user == job2.user == "ci"
    assert job1.status == "CANCELLED" and job2.status == "RUNNING"
    assert bobs.status == other.status == "RUNNING"  # another user's job, another config's job: untouched
    state = _state(github)
    assert (state.job_id, state.sha, state.state) == (str(job2.job_id), "a" * 40, "submitted")
    body = github.comments[8][0]["body"]
    assert f"SkyPilot reports job {job1.job_id} (commit cccccccccccc) as RUNNING" in body
    assert f"cancelled the previous job {job1.job_id} (commit cccccccccccc) through SkyPilot" in body
    assert NO_TEAM_SERVER not in body
    assert "ci-pass" not in body + first.stdout + second.stdout + first.stderr + second.stderr
    assert refused.returncode != 0 and "Authentication required for SkyPilot API server" in refused.stderr


def test_without_a_server_the_plan_says_so_and_an_untracked_job_blocks_the_next_launch(
    github, workspace, tmp_path
) -> None:
    _pull(github)
    with SkyDouble(tmp_path / "sky1", run_nodes=False) as runner1_server:
        first = _fresh_runner(github, workspace, tmp_path / "runner1", _approve(github, 8, "c" * 40),
                              local_server_env(tmp_path / "home1", runner1_server))  # fmt: skip
        (job1,) = runner1_server.jobs.values()
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert NO_TEAM_SERVER in github.comments[8][0]["body"]
    recorded = _state(github)
    with SkyDouble(tmp_path / "sky2", run_nodes=False) as runner2_server:  # the next runner's: starts empty
        second = _fresh_runner(github, workspace, tmp_path / "runner2", _approve(github, 8, "a" * 40),
                               local_server_env(tmp_path / "home2", runner2_server))  # fmt: skip
        launched_again = list(runner2_server.jobs.values())
    sentence = untracked_sentence(recorded.job_id, recorded.name, "c" * 40)
    assert second.returncode == 1, second.stdout[-3000:] + second.stderr[-3000:]
    assert launched_again == [] and job1.status == "RUNNING"  # no second job; the first one was never seen
    body = github.comments[8][0]["body"]
    assert sentence in body and NO_TEAM_SERVER in body
    assert f"::error file=gym.toml::{sentence}" in second.stdout
    assert _state(github).job_id == recorded.job_id  # the comment still records the job that may be running


def test_cluster_mode_rerun_after_the_cluster_was_torn_down_relaunches(github, workspace, tmp_path) -> None:
    toml = workspace / "gym.toml"
    toml.write_text(
        toml.read_text()
        .replace("managed = true", "managed = false\nuse_spot = false")
        .replace("use_spot = true\n", "")
    )
    _pull(github)
    name = _job_name(workspace)
    with SkyDouble(tmp_path / "sky", users={"ci": "ci-pass"}, run_nodes=False) as team:
        first = _fresh_runner(github, workspace, tmp_path / "runner1", _approve(github, 8, "c" * 40),
                              sky_env(tmp_path / "home1", team.url_for("ci")))  # fmt: skip
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        team.jobs[1].finish("SUCCEEDED")
        team.tear_down(name)  # autostop with down: the cluster and its job queue are gone
        second = _fresh_runner(github, workspace, tmp_path / "runner2", _approve(github, 8, "a" * 40),
                               sky_env(tmp_path / "home2", team.url_for("ci")))  # fmt: skip
        clusters = set(team.clusters)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    job1, job2 = team.jobs.values()
    assert not job1.managed and job1.name == job2.name == name and job2.status == "RUNNING"
    assert clusters == {name}  # brought up again
    body = github.comments[8][0]["body"]
    assert (
        f"SkyPilot has no job 1 named `{name}` (commit cccccccccccc) any more (its cluster is torn down)"
        in body
    )
    assert _state(github).job_id == str(job2.job_id)


# -- the plan a pull request gets: data the cloud machine would not receive is refused there -----------------
LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 4096\n"


def test_the_plan_refuses_an_lfs_pointer_and_a_gitignored_data_folder(github, workspace, run_action) -> None:
    from tests.action.conftest import RecordingLauncher

    github.pulls[7] = {"head_repo": "acme/models"}
    github.files[7] = [("gym.toml", "modified")]
    data = workspace / "data" / "train.jsonl"
    text = data.read_text()
    data.write_text(LFS_POINTER)  # actions/checkout without `lfs: true`
    pointer = run_action("pr_same_repo.json", "pull_request", RecordingLauncher())
    lfs_body = github.comments[7][0]["body"]
    data.write_text(text)
    subprocess.run(["git", "-C", str(workspace), "init", "-q"], check=True, timeout=60)
    (workspace / ".gitignore").write_text("data/\n")  # e.g. a step that downloads the data it ignores
    ignored = run_action("pr_same_repo.json", "pull_request", RecordingLauncher())
    ignored_body = github.comments[7][0]["body"]
    lfs = (
        "datasets.0.path: data/train.jsonl is a Git LFS pointer file, not the data (the checkout did not fetch "
        "LFS files); in the workflow set `lfs: true` on the actions/checkout step, or run `git lfs pull` here"
    )
    assert pointer.rc == 1 and lfs in lfs_body and f"::error file=gym.toml::{lfs}" in pointer.stdout
    assert (
        ignored.rc == 1
        and "datasets.0.path: data/train.jsonl is excluded by .gitignore (data/)" in ignored_body
    )
    assert NO_TEAM_SERVER not in lfs_body  # no plan was made: the sentence is the whole story
