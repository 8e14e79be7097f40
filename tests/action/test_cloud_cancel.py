"""A newer approved commit replaces the running job: the real action, SkyPilot's real client, two doubles.

``python tests/launch/sky_harness.py RECORD --action`` runs ``action.main`` with its default launcher
and job control (SkyPilot's SDK) against the recording SkyPilot API server, while the recording GitHub
API runs here. HOME is a temp folder (SkyPilot writes ~/.sky on import) that also holds a cached AWS
price list, so the plan's hourly price comes from SkyPilot's own catalog code, offline.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

from gym.launch.report.sticky import RunState
from tests.action.conftest import EVENTS, GITHUB_TOKEN, HF_TOKEN
from tests.conftest import REPO

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


def test_new_approval_cancels_the_old_job_through_skypilot(github, workspace, tmp_path) -> None:
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
    old = RunState(sha="b" * 40, job_id="41", name="gym-support-bot", managed=True, approval=1)
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
        "SKY_HARNESS_JOBS": json.dumps({"41": "RUNNING"}),
    }
    record = tmp_path / "record.json"
    done = subprocess.run(
        [sys.executable, str(HARNESS), str(record), "--action"],
        cwd=workspace, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    calls = json.loads(record.read_text())["calls"]
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
    launched = json.loads(next(c["body"] for c in calls if c["path"] == "/jobs/launch"))
    assert "GYM_MAX_RUNTIME_S: '21600'" in launched["task"]
    assert "cancelled the previous job 41" in summary.read_text()
    assert HF_TOKEN not in body and HF_TOKEN not in done.stdout
