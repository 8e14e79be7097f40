"""`gym init --from` carries GRPO's TRL settings, vLLM rollouts and the GPU speed switches from TRL's,
axolotl's and LLaMA-Factory's YAMLs (written as each tool documents them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from typer.testing import CliRunner

from gym.cli import app
from gym.config import load_config

runner = CliRunner()

# A `trl grpo --config recipe.yaml` file: GRPOConfig's own field names (TRL's docs, grpo_trainer.md).
TRL_GRPO = """\
model_name_or_path: Qwen/Qwen3-0.6B
dataset_name: trl-lib/DeepMath-103K
dataset_train_split: train
output_dir: Qwen3-0.6B-GRPO
learning_rate: 1.0e-6
per_device_train_batch_size: 8
num_generations: 8
max_completion_length: 512
loss_type: dapo
importance_sampling_level: sequence
epsilon: 0.2
epsilon_high: 0.28
beta: 0.0
scale_rewards: batch
mask_truncated_completions: true
use_vllm: true
vllm_mode: colocate
vllm_gpu_memory_utilization: 0.4
reward_funcs: [my_rewards.accuracy]
use_liger_kernel: true
log_completions: true
"""

# axolotl's GRPO example layout: rl: grpo with a trl: block, a vllm: server block, Liger and CCE plugins.
AXOLOTL_GRPO = """\
base_model: Qwen/Qwen2.5-1.5B-Instruct
rl: grpo
trl:
  beta: 0.001
  use_vllm: true
  num_generations: 4
  max_completion_length: 256
  loss_type: dr_grpo
  scale_rewards: false
  reward_funcs: [rewards.think_format_reward]
  log_completions: true
vllm:
  host: 10.0.0.5
  port: 8010
  gpu_memory_utilization: 0.85
plugins:
  - axolotl.integrations.liger.LigerPlugin
  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin
liger_rope: true
liger_rms_norm: true
liger_glu_activation: true
liger_fused_linear_cross_entropy: false
cut_cross_entropy: true
lora_mlp_kernel: true
datasets:
  - path: data/prompts.jsonl
    type: chat_template
micro_batch_size: 4
sequence_len: 1024
"""

LLAMAFACTORY_LIGER = """\
model_name_or_path: Qwen/Qwen3-0.6B
stage: sft
finetuning_type: lora
template: qwen3
dataset: identity
enable_liger_kernel: true
ddp_find_unused_parameters: false
output_dir: saves/qwen3/lora/sft
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "prompts.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    (tmp_path / "data" / "identity.json").write_text('[{"instruction": "hi", "input": "", "output": "ho"}]')
    (tmp_path / "data" / "dataset_info.json").write_text('{"identity": {"file_name": "identity.json"}}')
    return tmp_path


def convert(text: str, name: str) -> tuple[str, dict, str]:
    Path(name).write_text(text)
    outcome = runner.invoke(app, ["init", "--from", name, "gym.toml"])
    assert outcome.exit_code == 0, outcome.output
    load_config("gym.toml")  # validates as written
    written = Path("gym.toml").read_text()
    return outcome.output, tomllib.loads(written), written


def test_trl_grpo_yaml_keeps_its_loss_and_rollouts(folder: Path) -> None:
    output, toml, text = convert(TRL_GRPO, "grpo.yaml")
    assert "(TRL)" in output and "converted from grpo.yaml (TRL)" in text
    assert toml["train"]["method"] == "grpo"
    assert toml["train"]["grpo"] == {
        "group_size": 8,
        "max_completion_length": 512,
        "loss_type": "dapo",
        "importance_sampling_level": "sequence",
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "beta": 0.0,
        "scale_rewards": "batch",
        "mask_truncated_completions": True,
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": 0.4,
        "reward": ["my_rewards:accuracy"],
    }
    assert toml["train"]["liger_kernel"] is True and toml["train"]["batch_size"] == 8
    assert toml["datasets"] == [{"hub": "trl-lib/DeepMath-103K", "format": "prompt", "split": "train"}]
    assert "# from num_generations" in text and "# from use_liger_kernel" in text
    assert "log_completions: Gym has no equivalent setting" in text


def test_axolotl_grpo_yaml_keeps_its_trl_block_vllm_server_and_speed_switches(folder: Path) -> None:
    output, toml, text = convert(AXOLOTL_GRPO, "axolotl.yaml")
    grpo = toml["train"]["grpo"]
    assert toml["train"]["method"] == "grpo"
    assert (grpo["beta"], grpo["group_size"], grpo["loss_type"], grpo["scale_rewards"]) == (
        0.001,
        4,
        "dr_grpo",
        "none",
    )
    assert (grpo["use_vllm"], grpo["vllm_mode"]) == (True, "server")  # a server's address: server mode
    assert (grpo["vllm_server_host"], grpo["vllm_server_port"]) == ("10.0.0.5", 8010)
    assert grpo["reward"] == ["rewards:think_format_reward"]
    assert toml["train"]["liger_kernel"] is True and toml["train"]["cut_cross_entropy"] is True
    assert "trl.log_completions: Gym has no equivalent GRPO setting" in text
    assert "vllm.gpu_memory_utilization: a setting of the vLLM server" in text
    assert "lora_mlp_kernel: axolotl's own Triton LoRA kernels; PEFT has no such option" in text
    assert "Gym turns it on with train.liger_kernel or train.cut_cross_entropy" in text


def test_llamafactory_liger_is_carried_not_ignored(folder: Path) -> None:
    output, toml, text = convert(LLAMAFACTORY_LIGER, "lf.yaml")
    assert toml["train"]["liger_kernel"] is True and "# from enable_liger_kernel" in text
    assert "enable_liger_kernel" not in output  # neither ignored nor left behind
    assert "ddp_find_unused_parameters: Gym turns DDP's search on only for models that skip weights" in text


def test_llamafactory_liger_flag_on_the_command_line(folder: Path) -> None:
    from gym.config.flags import parse_flags

    (override,) = parse_flags(["--enable_liger_kernel"])
    assert (override.path, override.value) == (("train", "liger_kernel"), True)


def test_vllm_settings_without_use_vllm_are_left_behind_with_the_reason(folder: Path) -> None:
    text = TRL_GRPO.replace("use_vllm: true", "use_vllm: false")
    output, toml, written = convert(text, "grpo.yaml")
    assert toml["train"]["grpo"]["use_vllm"] is False
    assert (
        "vllm_mode" not in toml["train"]["grpo"]
        and "vllm_gpu_memory_utilization" not in toml["train"]["grpo"]
    )
    assert "not carried over vllm_mode: a vLLM setting, and use_vllm is not true" in " ".join(output.split())


def test_a_loss_gym_refuses_is_dropped_with_the_sentence(folder: Path) -> None:
    output, toml, text = convert(TRL_GRPO.replace("loss_type: dapo", "loss_type: ppo_clip"), "grpo.yaml")
    assert "loss_type" not in toml["train"]["grpo"]
    assert "loss_type: gym.toml refuses it: expected one of 'dapo'" in " ".join(text.split())
