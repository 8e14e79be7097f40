"""No noise a user did not ask for: git's complaint outside a repository, DDP's unused-parameter warning
from every rank, progress bars cut to 80 columns in a log file."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gym.config import load_config
from tests.conftest import REPO

PROJECT = """\
[project]
name = "quiet"
output_dir = "out"
[model]
name_or_path = "{model}"
template = "chatml"
[[datasets]]
path = "data.jsonl"
format = "alpaca"
[train]
adapter = "full"
max_steps = {steps}
batch_size = 2
gradient_accumulation_steps = 1
max_length = 64
logging_steps = 1
save_steps = 100
"""
NOISE = "fatal: not a git repository"


def project(folder: Path, model: str = "builtin:tiny", steps: int = 3, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"instruction": f"say {i}", "output": str(i)} for i in range(8)]
    (folder / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    (folder / "gym.toml").write_text(PROJECT.format(model=model, steps=steps) + extra, encoding="utf-8")
    return folder / "gym.toml"


def gym(folder: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The real `gym` with stdout and stderr pipes (not a terminal), as in CI or behind `tee`."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "GYM_CACHE_DIR": str(folder / "cache"), "HF_HUB_OFFLINE": "1",
           "COLUMNS": "80", "GIT_CEILING_DIRECTORIES": str(folder.parent)}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "gym", *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


STDERR_FILTER = """
import os, subprocess, sys
from gym.quiet import without_stderr_lines
sys.stderr.write("before\\n")
with without_stderr_lines():
    subprocess.run(["git", "describe", "--always"], stdout=subprocess.DEVNULL)  # as lm-eval runs it
    sys.stderr.write("kept line\\n"); sys.stderr.flush()
    os.write(2, b"10%|#  | 1/10\\r20%|## | 2/10")  # a progress bar's partial line
    os.write(2, b"\\nfatal: not a git repo")  # the noise, split over two writes
    os.write(2, b"sitory (or any of the parent directories): .git\\nfatally fine\\n")
sys.stderr.write("after\\n")
"""


def test_the_git_complaint_is_dropped_and_everything_else_kept(tmp_path: Path) -> None:
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", STDERR_FILTER], cwd=outside, env=env, capture_output=True, timeout=60
    )  # fmt: skip  (bytes: a bar's carriage return kept as written)
    assert done.returncode == 0, done.stderr
    assert done.stderr == b"before\nkept line\n10%|#  | 1/10\r20%|## | 2/10\nfatally fine\nafter\n"


def test_without_the_filter_git_does_complain(tmp_path: Path) -> None:
    """The premise: git writes the sentence to the stderr it inherits (so the filter above is needed)."""
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)}
    done = subprocess.run(
        ["git", "describe", "--always"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode != 0 and done.stderr.startswith(NOISE)


@pytest.mark.slow
def test_gym_launch_outside_a_repository_prints_no_git_complaint(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    project(folder, steps=1, extra='[eval]\ntasks = ["gym_reverse"]\nlimit = 2\nbaseline = false\n')
    done = gym(folder, "launch")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (folder / "out" / "eval_results.json").is_file()  # lm-eval ran (and ran git)
    assert NOISE not in done.stderr + done.stdout


@pytest.mark.slow
def test_progress_in_a_log_is_whole_lines(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    project(folder)
    done = gym(folder, "train")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("train ")]
    assert [line.split()[1] for line in lines] == ["1/3", "2/3", "3/3"], done.stdout
    assert all(" loss " in line and " tok/s " in line and "…" not in line for line in lines), lines


def test_a_progress_line_is_never_cut_however_narrow_the_log() -> None:
    from rich.console import Console

    from gym.train.progress import LineProgress, describe_training

    out = io.StringIO()
    bar = LineProgress(describe_training, news=("loss", "eval"), console=Console(file=out, width=20))
    task = bar.add_task("train", total=600, completed=0, loss="-", speed="-", eval="")
    bar.update(task, completed=600, speed="12,345")  # no news: nothing printed yet
    assert out.getvalue() == ""
    bar.update(task, loss="1.2345", eval="eval loss 1.1000 acc 0.750")
    bar.stop()  # the last line is current: not repeated
    (line,) = out.getvalue().splitlines()
    assert line.startswith("train 600/600 loss 1.2345 12,345 tok/s eval loss 1.1000 acc 0.750 0:00:0")


def test_ddp_searches_for_unused_parameters_only_where_a_step_can_skip_weights(tmp_path: Path) -> None:
    from gym.model.loading import load_model
    from gym.train.arguments import common_arguments
    from gym.train.distributed import needs_unused_parameter_search

    text, vision = (
        load_config(project(tmp_path / "t")),
        load_config(project(tmp_path / "v", "builtin:tiny-vl")),
    )
    text_model, vision_model = load_model(text, for_training=True), load_model(vision, for_training=True)
    assert needs_unused_parameter_search(text_model) is False
    assert needs_unused_parameter_search(vision_model) is True  # a text-only batch skips the vision tower
    assert common_arguments(text, tmp_path, model=text_model)["ddp_find_unused_parameters"] is False
    assert common_arguments(vision, tmp_path, model=vision_model)["ddp_find_unused_parameters"] is True


@pytest.mark.slow
def test_two_ranks_train_without_the_unused_parameter_warning(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    project(folder, steps=2)
    done = gym(folder, "train", "--nproc", "2", "--no-progress", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((folder / "out" / "train_results.json").read_text())["world_size"] == 2
    assert "find_unused_parameters" not in done.stderr


@pytest.mark.parametrize("checkpointing", [True, False])
def test_trl_configs_take_gyms_arguments_without_a_deprecation_warning(
    tmp_path: Path, checkpointing: bool
) -> None:
    """Activation checkpointing goes by the name the installed transformers declares (`activation_checkpointing`
    since 5.23, whose `gradient_checkpointing` alias warns on every run): every method's TRL config takes
    Gym's arguments silently, and the setting arrives."""
    import warnings

    from trl import DPOConfig, GRPOConfig, KTOConfig, SFTConfig

    from gym.train.arguments import common_arguments

    config = load_config(project(tmp_path))
    config.train.gradient_checkpointing = checkpointing
    for trl_config in (SFTConfig, DPOConfig, KTOConfig, GRPOConfig):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            extra = {"num_generations": 2} if trl_config is GRPOConfig else {}  # groups fit one batch
            args = trl_config(**common_arguments(config, tmp_path / trl_config.__name__), **extra)
        assert not [str(w.message) for w in caught if "deprecated" in str(w.message)], trl_config.__name__
        assert (
            args.gradient_checkpointing is checkpointing
        )  # the old name mirrors the new one where both exist
