"""SIGTERM during `gym train` says where a rerun resumes, and the default thread choice keeps reruns
reproducible: a run beside a CPU hog, a run stopped by SIGTERM and resumed, all end with the same bits.

Every run is the real `gym train` on builtin:tiny with the default ``train.cpu_threads = "auto"``.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gym.train.checkpoints import MARKER
from gym.train.termination import where_a_rerun_resumes
from tests.train.test_sft import _write

pytestmark = pytest.mark.slow

STEPS, SAVE_STEPS = 8, 2


def _gym_train(config: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gym", "train", str(config), "--no-progress"], env=env,
                            cwd=config.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def _adapter_sha(folder: Path) -> str:
    return hashlib.sha256((folder / "out" / "adapter_model.safetensors").read_bytes()).hexdigest()


def test_sigterm_names_the_checkpoint_and_the_resumed_run_matches_an_undisturbed_one(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(GYM_CACHE_DIR=str(tmp_path / "cache"), HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="")
    loaded, stopped = (_write(tmp_path / name, adapter="lora", steps=STEPS, save_steps=SAVE_STEPS).parent
                       for name in ("loaded", "stopped"))  # fmt: skip

    # 1. An uninterrupted run while another process keeps a core busy (the load the old default measured).
    hog = subprocess.Popen([sys.executable, "-c", "import os\nos.nice(19)\nwhile True: pass"])
    try:
        run = _gym_train(loaded / "gym.toml", env)
        output = run.communicate(timeout=600)[0]
    finally:
        hog.kill()
        hog.wait()
    assert run.returncode == 0, output

    # 2. The same config on an idle machine, stopped by SIGTERM once its first checkpoint is complete.
    run = _gym_train(stopped / "gym.toml", env)
    first = stopped / "out" / "checkpoints" / f"checkpoint-{SAVE_STEPS}"
    deadline = time.time() + 300
    while not (first / MARKER).exists() and run.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    run.send_signal(signal.SIGTERM)
    output = run.communicate(timeout=120)[0]
    assert run.returncode == -signal.SIGTERM, output  # killed by the signal: 143 in a shell
    complete = sorted(
        int(p.name.split("-")[1]) for p in first.parent.glob("checkpoint-*") if (p / MARKER).exists()
    )
    assert complete and complete[-1] < STEPS, output  # stopped mid-run, after at least one checkpoint
    newest = first.parent / f"checkpoint-{complete[-1]}"
    assert output.splitlines()[-1] == (
        f"stopped: gym train received SIGTERM; a rerun resumes from checkpoint-{complete[-1]} "
        f"(step {complete[-1]}, {newest})"
    )
    assert "Traceback" not in output

    # 3. The rerun resumes there and ends with the bits of the undisturbed run.
    rerun = _gym_train(stopped / "gym.toml", env)
    output = rerun.communicate(timeout=600)[0]
    assert rerun.returncode == 0, output
    assert _adapter_sha(stopped) == _adapter_sha(loaded)


def test_before_any_checkpoint_a_stop_says_the_rerun_starts_over(tmp_path: Path) -> None:
    assert where_a_rerun_resumes(tmp_path / "out" / "checkpoints", "auto") == (
        "no checkpoint was saved yet, so a rerun starts over from step 0"
    )
    assert (
        where_a_rerun_resumes(tmp_path, "never")
        == "train.resume = 'never', so a rerun starts over from step 0"
    )
