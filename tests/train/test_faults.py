"""Training faults: kill -9 at the end of a run, damaged checkpoints, a loss that becomes NaN.

Each run is the real `gym train` on builtin:tiny (a subprocess where a kill or an exit code matters).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from gym.data.builtin_datasets import write_reverse_dataset
from gym.train.checkpoints import MARKER, resume_point, write_marker

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "cache"))


def _write(folder: Path, *, steps: int, save_steps: int, method_block: str = "", data: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if not data:
        write_reverse_dataset(folder / "data")
        data = 'path = "data/train.jsonl"\nformat = "alpaca"\nmax_samples = 200'
    (folder / "gym.toml").write_text(
        f"""
[project]
name = "t"
output_dir = "out"
[model]
name_or_path = "builtin:tiny"
template = "chatml"
[[datasets]]
{data}
[train]
adapter = "full"
max_steps = {steps}
learning_rate = 3e-3
batch_size = 8
gradient_accumulation_steps = 1
max_length = 64
logging_steps = 1
save_steps = {save_steps}
warmup_ratio = 0.0
{method_block}
"""
    )
    return folder / "gym.toml"


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "GYM_CACHE_DIR": str(tmp_path / "cache"), "CUDA_VISIBLE_DEVICES": ""}


def _train(config: Path) -> tuple[int, str]:
    """`gym train CONFIG` in this process (as a user runs it, minus the interpreter start): exit code, output."""
    from typer.testing import CliRunner

    from gym.cli import app

    outcome = CliRunner().invoke(app, ["train", str(config), "--no-progress"])
    return outcome.exit_code, outcome.output + (
        repr(outcome.exception) if outcome.exit_code not in (0, 1) else ""
    )


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_kill_at_the_end_then_rerun_ends_at_exactly_max_steps_and_a_finished_rerun_is_a_no_op(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path)
    write_reverse_dataset(tmp_path / "data")
    data = 'path = "data/train.jsonl"\nformat = "alpaca"\nmax_samples = 200\neval_fraction = 0.1'
    config = _write(tmp_path, steps=6, save_steps=3, data=data)
    out = tmp_path / "out"
    last = out / "checkpoints" / "checkpoint-6"
    process = subprocess.Popen(
        [sys.executable, "-m", "gym", "train", str(config), "--no-progress"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.time() + 240
    while not (last / MARKER).exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert (last / MARKER).exists(), process.stdout.read() if process.poll() is not None else "timed out"
    process.send_signal(signal.SIGKILL)  # killed after its last checkpoint, before or while saving the result
    process.wait()
    (out / "train_results.json").unlink(missing_ok=True)  # the kill landed before the result was recorded

    code, output = _train(config)
    assert code == 0 and "Traceback" not in output, output
    results = json.loads((out / "train_results.json").read_text())
    assert results["steps"] == 6
    assert [step for step, _ in results["loss_curve"]] == [1, 2, 3, 4, 5, 6]  # the whole curve, not emptied
    assert not (out / "checkpoints" / "checkpoint-7").exists()
    assert [point["step"] for point in results["eval"]["curve"]] == [0, 3, 6]  # held-out rows, whole run
    final, checkpoint = load_file(out / "model.safetensors"), load_file(last / "model.safetensors")
    for name in checkpoint:  # the result is checkpoint-6's weights: no seventh step was trained
        assert torch.equal(final[name], checkpoint[name]), name

    before = {name: _sha(out / name) for name in ("model.safetensors", "train_results.json")}
    (out / "README.md").write_text("# card written by gym eval\n")  # what evaluation adds beside the weights
    (out / "eval_results.json").write_text("{}\n")
    code, output = _train(config)
    assert code == 0, output
    said = " ".join(output.split())
    assert "already trained: 6 steps" in said and "nothing to do" in said, said
    assert {name: _sha(out / name) for name in before} == before  # byte-identical, nothing rewritten
    assert sorted(p.name for p in (out / "checkpoints").iterdir() if p.name.startswith("checkpoint-")) == [
        "checkpoint-3",
        "checkpoint-6",
    ]


def _fake_checkpoint(folder: Path, step: int) -> Path:
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    for name, size in (
        ("model.safetensors", 4096),
        ("optimizer.pt", 8192),
        ("scheduler.pt", 512),
        ("rng_state.pth", 1024),
    ):
        (path / name).write_bytes(os.urandom(size))
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    write_marker(path, step, "f")
    return path


@pytest.mark.parametrize("damaged", ["model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth"])
@pytest.mark.parametrize("how", ["truncated", "flipped", "missing"])
def test_a_damaged_checkpoint_falls_back_to_the_newest_intact_one(
    tmp_path: Path, damaged: str, how: str
) -> None:
    folder = tmp_path / "checkpoints"
    older, newest = _fake_checkpoint(folder, 2), _fake_checkpoint(folder, 4)
    target = newest / damaged
    if how == "truncated":
        target.write_bytes(target.read_bytes()[:100])
    elif how == "flipped":  # same size, other bytes: only the hash sees it
        data = bytearray(target.read_bytes())
        data[10] ^= 0xFF
        target.write_bytes(bytes(data))
    else:
        target.unlink()
    warnings: list[str] = []
    assert resume_point(folder, "auto", "f", warn=warnings.append) == older
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert warnings[0].startswith("checkpoint-4 is damaged") and damaged in warnings[0]
    assert "trying checkpoint-2 instead" in warnings[0]
    assert not newest.exists() and older.exists()


def test_damaged_checkpoint_end_to_end(tmp_path: Path) -> None:
    """A truncated model.safetensors in the newest checkpoint: the rerun warns, resumes the older one, finishes."""
    config = _write(tmp_path, steps=4, save_steps=2)
    code, output = _train(config)
    assert code == 0, output
    checkpoints = tmp_path / "out" / "checkpoints"
    weights = checkpoints / "checkpoint-4" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a partial sync
    (tmp_path / "out" / "train_results.json").unlink()  # as if preempted before the result was written
    longer = config.read_text().replace("max_steps = 4", "max_steps = 6")
    config.write_text(longer)
    code, output = _train(config)
    assert code == 0 and "Traceback" not in output, output
    assert "checkpoint-4 is damaged (model.safetensors has" in " ".join(output.split())
    results = json.loads((tmp_path / "out" / "train_results.json").read_text())
    assert results["steps"] == 6 and results["resumed_from"].endswith("checkpoint-2")


def test_damaged_explicit_resume_path_is_one_sentence(tmp_path: Path) -> None:
    from gym.train.checkpoints import ResumeError

    path = _fake_checkpoint(tmp_path / "checkpoints", 2)
    (path / "optimizer.pt").write_bytes(b"")
    with pytest.raises(ResumeError, match=r"is damaged: optimizer.pt has 0 bytes, 8,192 were written"):
        resume_point(tmp_path, str(path))


NAN_LATER = """
import json, os
def nan_after_three(prompts, completions, **kwargs):
    # A reward that breaks after three calls (one is a probe before training), as a buggy scorer does: the loss becomes NaN.
    path = os.path.join(os.path.dirname(__file__), "calls.json")
    calls = json.load(open(path)) if os.path.exists(path) else 0
    json.dump(calls + 1, open(path, "w"))
    return [float("nan") if calls >= 3 else 1.0 for _ in completions]
"""


def test_a_loss_that_becomes_nan_stops_the_run_with_one_sentence_and_keeps_the_last_good_checkpoint(
    tmp_path: Path,
) -> None:
    (tmp_path / "gym_test_nan_reward.py").write_text(NAN_LATER)
    rows = [{"prompt": f"Say ok {i}", "answer": "ok"} for i in range(16)]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    method = (
        'method = "ppo"\n[train.ppo]\nppo_epochs = 1\n[train.grpo]\nmax_completion_length = 4\n'
        "reward = ['gym_test_nan_reward:nan_after_three']\n"
    )
    config = _write(
        tmp_path, steps=8, save_steps=2, method_block=method, data='path = "prompts.jsonl"\nformat = "prompt"'
    )
    code, output = _train(config)
    assert code == 1 and "Traceback" not in output, output
    said = " ".join(output.split())
    assert "training stopped at step 3: the loss became nan" in said, said
    assert "the last good checkpoint" in said and "checkpoint-2, is kept" in said
    checkpoints = tmp_path / "out" / "checkpoints"
    assert (checkpoints / "checkpoint-2" / MARKER).is_file()
    assert not (checkpoints / "checkpoint-4").exists()
    assert not (tmp_path / "out" / "model.safetensors").exists()  # no NaN weights written as the result


def test_the_guard_stops_a_real_trainer_whose_weights_go_nan(tmp_path: Path) -> None:
    """TRL's trainers through the same callback: weights poisoned at step 3 never reach a marked checkpoint."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

    from gym.model.builtin import ensure_builtin
    from gym.train.checkpoint_callback import CompleteCheckpoints
    from gym.train.checkpoints import checkpoints
    from gym.train.guards import FiniteGuard, NonFiniteError

    model = AutoModelForCausalLM.from_pretrained(ensure_builtin("builtin:tiny", tmp_path / "models"))

    class Poison(TrainerCallback):  # the fault: an overflow that writes inf into one weight at step 3
        def on_step_begin(self, args, state, control, model=None, **kwargs):
            if state.global_step == 2:
                with torch.no_grad():
                    next(model.parameters()).fill_(float("inf"))

    rows = Dataset.from_list([{"input_ids": [1, 2, 3, 4], "labels": [1, 2, 3, 4]} for _ in range(32)])
    args = TrainingArguments(
        output_dir=str(tmp_path / "checkpoints"), max_steps=6, save_steps=2, logging_steps=1,
        per_device_train_batch_size=4, use_cpu=True, report_to=[], logging_nan_inf_filter=False,
        disable_tqdm=True,
    )  # fmt: skip
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=rows,
        callbacks=[Poison(), FiniteGuard(3e-3), CompleteCheckpoints("f")],
    )
    with pytest.raises(
        NonFiniteError, match=r"training stopped at step 3: the loss became (nan|inf)"
    ) as error:
        trainer.train()
    assert "\n" not in str(error.value) and "checkpoint-2, is kept" in str(error.value)
    assert [step for step, _, complete in checkpoints(tmp_path / "checkpoints") if complete] == [2]


def test_a_large_file_is_checked_by_sampled_hash(tmp_path: Path) -> None:
    """Optimizer states of big models are GBs: hashed by sampled blocks, still catching same-size damage."""
    from gym.train.checkpoints import FULL_HASH_LIMIT, SAMPLE_BLOCKS, read_marker

    folder = tmp_path / "checkpoints"
    older, newest = _fake_checkpoint(folder, 2), _fake_checkpoint(folder, 4)
    big = newest / "optimizer.pt"
    size = FULL_HASH_LIMIT + 2**20
    with big.open("wb") as handle:  # sparse: no disk used
        handle.truncate(size)
    write_marker(newest, 4, "f")
    assert "sampled_sha256" in read_marker(newest)["files"]["optimizer.pt"]
    assert resume_point(folder, "auto", "f") == newest
    with big.open("r+b") as handle:  # same size, one sampled block overwritten
        handle.seek(size * 10 // SAMPLE_BLOCKS)
        handle.write(b"\xff" * 4096)
    warnings: list[str] = []
    assert resume_point(folder, "auto", "f", warn=warnings.append) == older
    assert "optimizer.pt does not match the hash" in warnings[0]
