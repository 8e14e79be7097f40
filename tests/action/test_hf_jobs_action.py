"""The Action on Hugging Face Jobs: the real entrypoint (``python -m action``, PyGithub against the GitHub
double, huggingface_hub against the Hub double whose Jobs really run: tests/launch/hf_jobs_double.py).

- a labelled commit launches a job with only the hf-token input (no cloud keys, no SkyPilot server), follows
  it, and the sticky comment and the ``gym / gym.toml`` status carry its eval table and gates;
- a newer approved commit cancels the job the comment recorded (by id *and* its ``gym-run`` label), on a
  fresh runner, and never a job of another config;
- an account that cannot pay for Jobs is one sentence in the plan, and nothing is uploaded or launched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gym.config import load_config
from gym.launch.report.sticky import RunState
from gym.launch.task import run_name
from tests.action.conftest import EVENTS, GITHUB_TOKEN
from tests.api.conftest import cache_root, free_port  # noqa: F401 - cache_root is a fixture
from tests.conftest import REPO
from tests.hub.hub_double import FREE, HubDouble
from tests.launch.hf_jobs_double import expire_after_checkpoint, wait_ended
from tests.launch.test_hf_jobs import project

TOKEN = "hf_JobsTokenNeverPrinted0123456789"
MARKER = "<!-- gym-action config=gym.toml -->"
GATES = (
    '\n[eval]\ntasks = ["gym_reverse"]\nlimit = 10\n\n[eval.gates]\nrules = ["held-out.eval_loss <= base"]\n'
)


def _pull(github, sha: str) -> Path:
    github.pulls[8] = {"head_repo": "acme/models"}
    github.files[8] = [("gym.toml", "modified")]
    github.roles["wendy"] = "write"
    github.apply_label(8, "gym:launch", "wendy")
    event = json.loads((EVENTS / "pr_labeled.json").read_text())
    event["pull_request"]["head"]["sha"] = sha
    return event


def _action(github, hub: HubDouble, workspace: Path, runner: Path, event: dict, **inputs: str):
    """One workflow run on a fresh runner (new HOME, nothing of the last run but the comment and the Hub)."""
    runner.mkdir(parents=True)
    (runner / "event.json").write_text(json.dumps(event))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(runner / "home"),
        "PYTHONPATH": str(REPO),
        "HF_ENDPOINT": hub.url,
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(runner / "event.json"),
        "GITHUB_REPOSITORY": github.repo,
        "GITHUB_API_URL": github.base,
        "GITHUB_WORKSPACE": str(workspace),
        "GITHUB_OUTPUT": str(runner / "output"),
        "GITHUB_STEP_SUMMARY": str(runner / "summary.md"),
        "GYM_GITHUB_TOKEN": GITHUB_TOKEN,
        "GYM_INPUT_HF_TOKEN": TOKEN,
        **{f"GYM_INPUT_{key.upper()}": value for key, value in inputs.items()},
    }
    return subprocess.run([sys.executable, "-m", "action"], cwd=workspace, env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip


def _comment(github) -> str:
    (comment,) = [c for c in github.comments[8] if c["user"]["login"] == "github-actions[bot]"]
    return comment["body"]


@pytest.mark.slow
def test_a_labelled_commit_runs_on_hf_jobs_and_reports_its_table_and_gates(
    github,
    tmp_path: Path,
    cache_root: Path,  # noqa: F811
) -> None:
    workspace = tmp_path / "repo"
    workspace.mkdir()
    config = project(workspace, "max_runtime_hours = 1", steps=40)
    config.write_text(config.read_text() + GATES)
    event = _pull(github, "a" * 40)
    with HubDouble(TOKEN, free_port()) as hub:
        hub.state.jobs.env.update(XDG_CACHE_HOME=str(cache_root), OMP_NUM_THREADS="1")
        done = _action(github, hub, workspace, tmp_path / "runner1", event, wait="true")
        out = done.stdout + done.stderr
        assert done.returncode == 0, out[-4000:]
        (job,) = hub.state.jobs.jobs.values()
        assert job.stage == "COMPLETED", "\n".join(job.lines[-30:])
        name = run_name(load_config(config), {"GITHUB_REPOSITORY": github.repo})
        assert job.spec["labels"] == {"gym-project": "rev", "gym-run": name}
        assert job.spec["secrets"] == {"HF_TOKEN": TOKEN} and job.spec["flavor"] == "cpu-upgrade"
        assert "model:tester/rev" not in hub.state.repos  # a pull request's run never pushes
    body = _comment(github)
    assert f"Hugging Face Jobs `cpu-upgrade`, job labelled `{name}`" in body  # the plan's "runs on" row
    assert "cpu-upgrade (8 vCPU, 32 GB): $0.03/h, at most $0.03 for compute.max_runtime_hours = 1" in body
    assert f"**Job:** Hugging Face job `{job.id}`" in body and "COMPLETED" in body
    assert "held-out" in body and "eval_loss" in body  # the eval table came back from the job's log
    (status,) = [s for s in github.statuses if s["context"] == "gym / gym.toml"]
    assert status["state"] == "success" and "gates" in status["description"]
    assert TOKEN not in out and TOKEN not in body
    state = RunState.parse(body)
    assert state is not None and state.provider == "hf-jobs" and state.job_id == job.id and state.ended


def test_a_newer_approved_commit_cancels_only_its_own_job_on_a_fresh_runner(github, tmp_path: Path) -> None:
    from huggingface_hub import HfApi

    workspace = tmp_path / "repo"
    workspace.mkdir()
    config = project(workspace, "max_runtime_hours = 1", steps=40)
    name = run_name(load_config(config), {"GITHUB_REPOSITORY": github.repo})
    with HubDouble(TOKEN, free_port()) as hub:
        api = HfApi(endpoint=hub.url, token=TOKEN)
        sleep = ["bash", "-c", "sleep 600"]
        ours = api.run_job(image="python:3.12", command=sleep, flavor="cpu-basic", labels={"gym-run": name})
        other = api.run_job(image="python:3.12", command=sleep, flavor="cpu-basic",
                            labels={"gym-run": "gym-rev-0000other"})  # fmt: skip
        recorded = [
            RunState(sha="b" * 40, job_id=ours.id, name=name, managed=True, approval=1, provider="hf-jobs"),
            RunState(sha="b" * 40, job_id=other.id, name=name, managed=True, approval=1, provider="hf-jobs"),
        ]
        event = _pull(github, "c" * 40)
        for number, previous in enumerate(recorded):
            github.comments[8] = []
            github.add_comment(8, f"{MARKER}\n{previous.line()}\nearlier report", "github-actions[bot]")
            done = _action(github, hub, workspace, tmp_path / f"runner{number}", event, wait="false")
            assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        jobs = hub.state.jobs.jobs
        assert wait_ended(hub.state.jobs, ours.id, timeout=30).stage == "CANCELED"
        assert jobs[other.id].stage == "RUNNING"  # the id was recorded, but the job is another config's
        launched = [j for j in jobs.values() if j.id not in (ours.id, other.id)]
        assert len(launched) == 2 and all(j.spec["labels"]["gym-run"] == name for j in launched)
    body = _comment(github)
    assert f"Hugging Face Jobs has no job {other.id} named `{name}`" in body


def test_an_account_that_cannot_pay_for_jobs_is_refused_in_the_plan(github, tmp_path: Path) -> None:
    workspace = tmp_path / "repo"
    workspace.mkdir()
    project(workspace)
    event = _pull(github, "d" * 40)
    with HubDouble({TOKEN: FREE}, free_port()) as hub:
        started = time.monotonic()
        done = _action(github, hub, workspace, tmp_path / "runner", event, wait="false")
        assert time.monotonic() - started < 120
        assert hub.state.jobs.jobs == {} and not any(k.startswith("dataset:") for k in hub.state.repos)
    assert done.returncode == 1, done.stdout[-3000:]
    body = _comment(github)
    assert (
        "Hugging Face Jobs bill the account's credit balance and freebie has no payment method or credits"
    ) in body
    assert TOKEN not in done.stdout + body


@pytest.mark.slow
def test_a_job_that_hit_its_timeout_is_resumed_by_the_next_approval_from_its_bucket(
    github,
    tmp_path: Path,
    cache_root: Path,  # noqa: F811
) -> None:
    """The first approved run submits the job and returns; the Hub's clock stops it at its timeout after a
    checkpoint reached the bucket. A re-run of the same workflow launches nothing; the maintainer's next
    approval of the same commit launches it again, and the new job resumes from that checkpoint."""
    workspace = tmp_path / "repo"
    workspace.mkdir()
    config = project(workspace, 'checkpoint_volume = "bucket:tester/ckpt"\nmax_runtime_hours = 1', steps=300)
    config.write_text(config.read_text() + GATES)
    event = _pull(github, "e" * 40)
    with HubDouble(TOKEN, free_port()) as hub:
        jobs = hub.state.jobs
        bucket = jobs.create_bucket("tester/ckpt")
        jobs.env.update(XDG_CACHE_HOME=str(cache_root), OMP_NUM_THREADS="1")
        first = _action(github, hub, workspace, tmp_path / "runner1", event, wait="false")
        assert first.returncode == 0, (first.stdout + first.stderr)[-4000:]
        (job,) = jobs.jobs.values()
        stopped = expire_after_checkpoint(jobs, job, lambda: list(bucket.rglob("checkpoint-*")))
        assert stopped.stage == "ERROR" and job.message == "Job timeout"

        rerun = _action(github, hub, workspace, tmp_path / "runner2", event, wait="false")
        assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-4000:]
        assert len(jobs.jobs) == 1  # the same approval, re-run: nothing launched
        assert f"no second launch: job {job.id} for commit {'e' * 12} already exists" in _comment(github)

        again_event = _pull(github, "e" * 40)  # wendy applies the label again
        second = _action(github, hub, workspace, tmp_path / "runner3", again_event, wait="true")
        out = second.stdout + second.stderr
        assert second.returncode == 0, out[-4000:]
        (again,) = [j for j in jobs.jobs.values() if j.id != job.id]
        assert again.stage == "COMPLETED", "\n".join(again.lines[-30:])
        (record,) = bucket.rglob("train_results.json")
        assert "checkpoint-" in (
            json.loads(record.read_text())["resumed_from"] or ""
        )  # resumed, not restarted
        assert "model:tester/rev" not in hub.state.repos  # a pull request's run never pushes
    body = _comment(github)
    assert (
        f"job {job.id} hit its TIMEOUT (Job timeout)" in body
        and f"**Job:** Hugging Face job `{again.id}`" in body
    )
    (status,) = [s for s in github.statuses if s["context"] == "gym / gym.toml"]
    assert status["state"] == "success"
    assert TOKEN not in out + body
