"""`gym train --nproc 2` on CPU: two real gloo ranks, the quickstart with strategy = "fsdp" killed and
resumed, its loss curve against one process with the same global batch, eval and deploy on its output,
and a rank killed mid-run taking the launcher down with one sentence."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from gym.config import load_config
from gym.data.builtin_datasets import write_reverse_dataset
from gym.train.runner import run_training
from tests.conftest import REPO

pytestmark = pytest.mark.slow

STEPS, SAVE_STEPS, PER_RANK_BATCH = 24, 3, 8
LOSS_TOLERANCE = 0.02  # relative, per logged step: rank-averaged vs one-process mean over the same rows
WEIGHT_TOLERANCE = 2e-3  # absolute: two ranks' all-reduced gradients vs one process, 24 steps of Adam


def quickstart(folder: Path, *, batch_size: int, steps: int = STEPS) -> Path:
    """examples/quickstart/gym.toml with strategy = "fsdp", shortened to ``steps`` steps."""
    text = (REPO / "examples" / "quickstart" / "gym.toml").read_text(encoding="utf-8")
    for key, value in (("max_steps", steps), ("save_steps", SAVE_STEPS), ("batch_size", batch_size),
                       ("warmup_ratio", 0.0), ("limit", 8), ("baseline", "false")):  # fmt: skip
        text, count = re.subn(rf"(?m)^{key} = \S+", f"{key} = {value}", text)
        assert count == 1, key
    text = text.replace('output_dir = "outputs/quickstart-reverse"', 'output_dir = "out"')
    text = text.replace("[train]\n", "[train]\nlogging_steps = 1\n")
    folder.mkdir(parents=True, exist_ok=True)
    write_reverse_dataset(folder / "data")
    (folder / "gym.toml").write_text(text + '\n[train.distributed]\nstrategy = "fsdp"\n', encoding="utf-8")
    return folder / "gym.toml"


def gym(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.Popen([sys.executable, "-m", "gym", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)  # fmt: skip


def finish(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def child_with_rank(parent: int, rank: int) -> int | None:
    """The pid below ``parent`` whose environment says RANK=<rank> (a torchrun worker)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            status = (proc / "status").read_text()
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ and b"LOCAL_RANK=" + str(rank).encode() in environ:
            ppid = int(re.search(r"PPid:\s+(\d+)", status)[1])
            if ppid == parent:
                return int(proc.name)
    return None


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, float]:
    """The fsdp quickstart on two ranks; rank 1 is killed (SIGKILL) after the first checkpoint, then the
    same command is run again. Returns the output folder, the killed run's stderr and how long the
    launcher took to exit after the kill."""
    config = quickstart(tmp_path_factory.mktemp("fsdp"), batch_size=PER_RANK_BATCH)
    out = config.parent / "out"
    first = gym("train", str(config), "--nproc", "2", "--no-progress")
    wait_for(out / "checkpoints" / f"checkpoint-{SAVE_STEPS}" / "gym_complete.json", first)
    rank_one = child_with_rank(first.pid, 1)
    assert rank_one is not None
    os.kill(rank_one, signal.SIGKILL)
    killed_at = time.monotonic()
    code, _, killed_err = finish(first, timeout=120)
    took = time.monotonic() - killed_at
    assert code != 0 and not (out / "train_results.json").exists(), killed_err[-3000:]  # stopped mid-run
    code, stdout, err = finish(gym("train", str(config), "--nproc", "2", "--no-progress"))
    assert code == 0, err[-3000:]
    assert stdout.count("✓ trained") == 1, stdout  # rank 0 alone reports and writes the result
    return out, killed_err, took


def test_two_ranks_train_and_resume(fsdp_run: tuple[Path, str, float]) -> None:
    fsdp_run, _, _ = fsdp_run
    record = json.loads((fsdp_run / "train_results.json").read_text())
    assert record["world_size"] == 2  # accelerate's process group had two ranks
    assert record["steps"] == STEPS
    assert re.fullmatch(r".*checkpoint-\d+", record["resumed_from"] or ""), record["resumed_from"]
    assert int(record["resumed_from"].rsplit("-", 1)[1]) >= SAVE_STEPS


def test_same_loss_curve_and_weights_as_one_process(
    fsdp_run: tuple[Path, str, float], tmp_path: Path
) -> None:
    """One process with twice the per-rank batch sees the same rows per step (accelerate hands rank r the
    r-th per-rank slice of each global batch), so its losses and final weights match the two ranks'."""
    fsdp_run, _, _ = fsdp_run
    config = load_config(quickstart(tmp_path, batch_size=2 * PER_RANK_BATCH))
    single = run_training(config, show_progress=False)
    two_ranks = json.loads((fsdp_run / "train_results.json").read_text())["loss_curve"]
    assert [step for step, _ in two_ranks] == [step for step, _ in single.loss_curve]
    for (step, loss), (_, reference) in zip(two_ranks, single.loss_curve, strict=True):
        assert loss == pytest.approx(reference, rel=LOSS_TOLERANCE), step
    resumed, unkilled = (
        load_file(fsdp_run / "model.safetensors"),
        load_file(tmp_path / "out" / "model.safetensors"),
    )
    assert resumed.keys() == unkilled.keys()
    for name, weight in resumed.items():
        torch.testing.assert_close(weight, unkilled[name], atol=WEIGHT_TOLERANCE, rtol=0, msg=name)


def test_eval_and_deploy_work_on_its_output(fsdp_run: tuple[Path, str, float]) -> None:
    fsdp_run, _, _ = fsdp_run
    config = fsdp_run.parent / "gym.toml"
    code, _, err = finish(gym("eval", str(config)))
    assert code == 0, err[-3000:]
    scores = json.loads((fsdp_run / "eval_results.json").read_text())
    assert "gym_reverse" in json.dumps(scores)
    space = fsdp_run.parent / "space"
    code, out, err = finish(gym("deploy", str(config), "--dry-run", "--space-dir", str(space), "--repo-id",
                                "me/reverse", "--space-id", "me/reverse-chat", "--space-hf-token-env", "HF_READ"))  # fmt: skip
    assert code == 0, err[-3000:]
    assert str(fsdp_run) in out.replace("\n", "")  # one model folder: the one rank 0 wrote
    assert "→ me/reverse (model, private)" in " ".join(out.split())
    assert (space / "app.py").is_file()


def test_a_killed_rank_stops_the_launcher_with_one_sentence(fsdp_run: tuple[Path, str, float]) -> None:
    _, err, took = fsdp_run
    assert took < 60  # torchrun stopped rank 0 at once; nothing waited on the dead rank
    assert err.count("gym train: rank 1 of 2 was killed by SIGKILL; the other ranks were stopped") == 1, err
    assert "Traceback" not in err, err[-3000:]
