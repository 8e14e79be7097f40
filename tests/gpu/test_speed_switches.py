"""The GPU speed switches on a CUDA GPU: train.liger_kernel, train.cut_cross_entropy and GRPO's vLLM rollouts
each train builtin:tiny through `gym train` and are recorded in train_results.json (docs/gpu.md).

Without its package a row is skipped saying what to install; under ``GYM_GPU_TESTS_ON_CPU=1`` each row
checks instead that the CPU run is refused with its one sentence, before anything is written.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.test_cuda_paths import gym_env

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
STEPS = 8

SFT = """\
[project]
name = "gpu-switch"
output_dir = "out"
[model]
name_or_path = "builtin:tiny"
template = "chatml"
[[datasets]]
path = "data/train.jsonl"
format = "alpaca"
[train]
adapter = "lora"
max_steps = {steps}
batch_size = 8
learning_rate = 3e-3
lr_scheduler = "constant"
warmup_ratio = 0.0
logging_steps = 1
save_steps = 1000
{switch}
"""
GRPO = """\
[project]
name = "gpu-vllm"
output_dir = "out"
[model]
name_or_path = "builtin:tiny"
template = "chatml"
[[datasets]]
path = "data/prompts.jsonl"
format = "prompt"
[train]
method = "grpo"
adapter = "lora"
max_steps = {steps}
batch_size = 8
learning_rate = 1e-3
logging_steps = 1
save_steps = 1000
max_length = 128
[train.grpo]
group_size = 4
max_completion_length = 8
temperature = 1.0
use_vllm = true
vllm_mode = "colocate"
vllm_gpu_memory_utilization = 0.2
"""
ROWS = {
    "liger": ("liger_kernel", "pip install liger-kernel", "liger_kernel = true"),
    "cce": ("cut_cross_entropy", "pip install 'cut-cross-entropy[transformers]'", "cut_cross_entropy = true"),
    "vllm": ("vllm", "pip install vllm", None),
}


def write(folder: Path, row: str) -> Path:
    from gym.data.builtin_datasets import write_reverse_dataset

    module, _, switch = ROWS[row]
    write_reverse_dataset(folder / "data", n_train=64, n_test=8)
    prompts = [{"prompt": f"Reverse: {i} a b", "answer": f"b a {i}"} for i in range(32)]
    (folder / "data" / "prompts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in prompts))
    text = GRPO.format(steps=STEPS) if switch is None else SFT.format(steps=STEPS, switch=switch)
    (folder / "gym.toml").write_text(text)
    return folder / "gym.toml"


@pytest.mark.parametrize("row", list(ROWS))
def test_switch_trains_on_cuda_and_is_recorded(tmp_path: Path, gpu_device: str, row: str) -> None:
    module, install, _ = ROWS[row]
    config = write(tmp_path, row)
    if gpu_device == "cuda" and importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed on this GPU machine ({install}; make gpu-wheels)")
    done = subprocess.run([sys.executable, "-m", "gym", "train", str(config), "--no-progress"], cwd=tmp_path,
                          env=gym_env(), capture_output=True, text=True, timeout=900)  # fmt: skip
    if gpu_device == "cpu":  # the same row on the CPU: refused with one sentence, nothing written
        assert done.returncode == 1 and "needs a CUDA GPU" in done.stderr and "Traceback" not in done.stderr
        assert not (tmp_path / "out").exists()
        return
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "train_results.json").read_text())
    assert results["device"]["device"] == "cuda" and results["steps"] == STEPS
    losses = [loss for _, loss in results["loss_curve"]]
    assert losses and all(math.isfinite(loss) for loss in losses)
    if row == "vllm":
        assert results["grpo"]["use_vllm"] is True and results["grpo"]["vllm_mode"] == "colocate"
    else:
        assert results["gpu_switches"][module] is True
        assert losses[-1] < losses[0]  # the kernels compute the same loss: it still falls
