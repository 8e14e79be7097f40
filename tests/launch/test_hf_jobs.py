"""`gym launch --cloud` on Hugging Face Jobs (``provider = "hf-jobs"``), through huggingface_hub's Jobs client,
against the Hub double's Jobs (tests/launch/hf_jobs_double.py), which runs the job for real: Gym's wheel in a
fresh venv, the staged inputs mounted read-only, a Storage Bucket mounted read-write."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.conftest import free_port, server_env
from tests.hub.hub_double import HubDouble
from tests.launch.hf_jobs_double import expire_after_checkpoint, wait_ended

TOKEN = "hf_JobsTokenNeverPrinted0123456789"
API_KEY = "sk-jobs-space-key-2718"


def project(folder: Path, extra: str = "", steps: int = 40) -> Path:
    """The quickstart (builtin:tiny learns to reverse letters) on HF Jobs, pushing to tester/rev."""
    from gym.data.builtin_datasets import write_reverse_dataset

    write_reverse_dataset(folder / "data", n_train=300, n_test=10)
    path = folder / "gym.toml"
    path.write_text(f"""\
[project]
name = "rev"

[model]
name_or_path = "builtin:tiny"
template = "chatml"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"
eval_fraction = 0.1

[train]
adapter = "full"
max_steps = {steps}
learning_rate = 3e-3
batch_size = 16
max_length = 64
save_steps = 5

[hub]
repo_id = "tester/rev"
private = false

[compute]
provider = "hf-jobs"
flavor = "cpu-upgrade"
{extra}
""")
    return path


def gym(args: list[str], cwd: Path, cache: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gym", *args], cwd=cwd, capture_output=True, text=True,
                          env=server_env(cache, HF_HUB_OFFLINE="0", COLUMNS="300", **env), timeout=600)  # fmt: skip


def test_dry_run_shows_the_job_spec_and_price_and_sends_nothing(tmp_path: Path, cache_root: Path) -> None:
    config = project(tmp_path, 'max_runtime_hours = 2\ncheckpoint_volume = "bucket:tester/ckpt"')
    done = gym(
        ["launch", "--cloud", "--dryrun", str(config)], tmp_path, cache_root, HF_ENDPOINT="http://127.0.0.1:9"
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert (
        "flavor   cpu-upgrade (8 vCPU, 32 GB): $0.03/h, at most $0.06 for compute.max_runtime_hours = 2"
        in out
    )
    assert "timeout  7200s" in out and "secrets  HF_TOKEN (by name)" in out
    assert "volume   bucket tester/ckpt -> /checkpoints (read-write)" in out
    assert "--output_dir /checkpoints/rev" in out and "dry run: nothing was uploaded or launched" in out


def test_a_misspelt_flavor_is_refused_with_the_nearest(tmp_path: Path, cache_root: Path) -> None:
    config = project(tmp_path)
    config.write_text(config.read_text().replace('flavor = "cpu-upgrade"', 'flavor = "a100-larg"'))
    done = gym(["validate", str(config)], tmp_path, cache_root)
    assert done.returncode == 1
    assert "expected a Hugging Face Jobs flavor" in done.stderr and "did you mean 'a100-large'" in done.stderr
    spot = project(tmp_path, "use_spot = true")
    done = gym(["validate", str(spot)], tmp_path, cache_root)
    assert done.returncode == 1 and "Hugging Face Jobs has no spot instances" in done.stderr


@pytest.mark.slow
def test_a_job_trains_pushes_and_a_timed_out_job_resumes_from_its_bucket(
    tmp_path: Path, cache_root: Path
) -> None:
    """The first job is stopped by its timeout once it has checkpointed; the next launch resumes from the
    bucket, finishes, and the model is pushed once. `gym status` and `gym logs` find the jobs by label."""
    with HubDouble(TOKEN, free_port()) as hub:
        jobs = hub.state.jobs
        bucket = jobs.create_bucket("tester/ckpt")
        jobs.env.update(XDG_CACHE_HOME=str(cache_root), OMP_NUM_THREADS="1")
        config = project(
            tmp_path, 'checkpoint_volume = "bucket:tester/ckpt"\nmax_runtime_hours = 1', steps=300
        )
        env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN}
        first = gym(["launch", "--cloud", str(config)], tmp_path, cache_root, **env)
        assert first.returncode == 0, first.stdout + first.stderr
        assert "uploading the run's inputs to tester/gym-staging-rev (private)" in first.stdout
        (job,) = jobs.jobs.values()
        assert f"Hugging Face job {job.id} on cpu-upgrade" in first.stdout
        assert job.spec["secrets"] == {"HF_TOKEN": TOKEN} and TOKEN not in first.stdout + first.stderr
        stopped = expire_after_checkpoint(
            jobs, job, lambda: list(bucket.glob("rev/checkpoints/checkpoint-*"))
        )
        assert stopped.stage == "ERROR" and job.message == "Job timeout"
        assert "model:tester/rev" not in hub.state.repos

        status = gym(["status", str(config)], tmp_path, cache_root, **env)
        assert f"job {job.id} hit its TIMEOUT (Job timeout); launch again to resume" in status.stdout

        second = gym(["launch", "--cloud", str(config)], tmp_path, cache_root, **env)
        assert second.returncode == 0, second.stdout + second.stderr
        (again,) = [j for j in jobs.jobs.values() if j.id != job.id]
        assert wait_ended(jobs, again.id).stage == "COMPLETED", "\n".join(again.lines[-30:])
        record = json.loads((bucket / "rev" / "train_results.json").read_text())
        assert "checkpoint-" in (record["resumed_from"] or ""), record  # resumed, not restarted
        assert hub.state.commits.count("model:tester/rev") == 1  # pushed once, by the job that finished
        assert "config.json" in hub.state.files["model:tester/rev"]
        logs = gym(["logs", "--no-follow", "--job-id", again.id, str(config)], tmp_path, cache_root, **env)
        assert logs.returncode == 0, logs.stderr
        assert "[deploy] done" in logs.stdout or "pushed tester/rev" in logs.stdout
