"""`gym init --from`: LLaMA-Factory and axolotl YAMLs become a commented gym.toml that validates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomllib
from typer.testing import CliRunner

from gym.cli import app
from gym.config import config_from_args, load_config

runner = CliRunner()

# LLaMA-Factory's examples/train_lora/llama3_lora_sft.yaml, as its users run it.
LF_SFT = """\
### model
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
trust_remote_code: true

### method
stage: sft
do_train: true
finetuning_type: lora
lora_rank: 8
lora_target: all

### dataset
dataset: identity,alpaca_en_demo
template: llama3
cutoff_len: 2048
max_samples: 1000
overwrite_cache: true
preprocessing_num_workers: 16

### output
output_dir: saves/llama3-8b/lora/sft
logging_steps: 10
save_steps: 500
plot_loss: true
overwrite_output_dir: true

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
num_train_epochs: 3.0
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: true
ddp_timeout: 180000000
optim: adamw_torch
"""

# examples/train_qlora/llama3_lora_sft_otfq.yaml and train_lora/llama3_lora_dpo.yaml, shortened.
LF_DPO_QLORA = """\
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct
quantization_bit: 4
quantization_method: bnb
stage: dpo
do_train: true
finetuning_type: lora
lora_rank: 8
lora_target: all
pref_beta: 0.1
pref_loss: sigmoid  # choices: [sigmoid (dpo), orpo, simpo]
dataset: dpo_en_demo
template: qwen
cutoff_len: 2048
output_dir: saves/llama3-8b/lora/dpo
per_device_train_batch_size: 1
learning_rate: 5.0e-6
num_train_epochs: 3.0
bf16: true
val_size: 0.1
"""

# axolotl's examples/llama-3/lora-1b.yml (its empty keys included).
AXOLOTL = """\
base_model: NousResearch/Llama-3.2-1B

load_in_8bit: false
load_in_4bit: false
strict: false

datasets:
  - path: teknium/GPT4-LLM-Cleaned
    type: alpaca
  - path: data/chats.jsonl
    type: chat_template
    field_messages: conversations
    message_property_mappings:
      role: from
      content: value
dataset_prepared_path: last_run_prepared
val_set_size: 0.1
output_dir: ./outputs/lora-out

adapter: lora
lora_model_dir:

sequence_len: 2048
sample_packing: true
eval_sample_packing: true
pad_to_sequence_len: true

lora_r: 16
lora_alpha: 32
lora_dropout: 0.05
lora_fan_in_fan_out:
lora_target_modules:
  - gate_proj
  - down_proj
  - q_proj

wandb_project:
wandb_entity:

gradient_accumulation_steps: 2
micro_batch_size: 2
num_epochs: 1
optimizer: adamw_8bit
lr_scheduler: cosine
learning_rate: 0.0002

train_on_inputs: false
bf16: auto
fp16:
tf32: false
gradient_checkpointing: true
logging_steps: 1
flash_attention: true
warmup_steps: 10
weight_decay: 0.0
chat_template: chatml
special_tokens:
  pad_token: "<|end_of_text|>"
"""


@pytest.fixture
def lf_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A LLaMA-Factory checkout's layout: data/dataset_info.json and the files it names."""
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"instruction": "Say hi", "input": "", "output": "hi"}]
    (data / "identity.json").write_text(json.dumps(rows))
    (data / "alpaca_en_demo.json").write_text(json.dumps(rows))
    pairs = [{"conversations": [{"from": "human", "value": "q"}], "chosen": {"from": "gpt", "value": "a"},
              "rejected": {"from": "gpt", "value": "b"}}]  # fmt: skip
    (data / "dpo_en_demo.json").write_text(json.dumps(pairs))
    (data / "dataset_info.json").write_text(
        json.dumps(
            {
                "identity": {"file_name": "identity.json"},
                "alpaca_en_demo": {"file_name": "alpaca_en_demo.json"},
                "dpo_en_demo": {
                    "file_name": "dpo_en_demo.json",
                    "formatting": "sharegpt",
                    "ranking": True,
                    "columns": {"messages": "conversations", "chosen": "chosen", "rejected": "rejected"},
                },
            }
        )
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _init_from(text: str, name: str, target: str = "gym.toml") -> tuple[str, dict]:
    Path(name).write_text(text)
    result = runner.invoke(app, ["init", "--from", name, target])
    assert result.exit_code == 0, result.output
    written = Path(target).read_text()
    load_config(target)  # validates as written
    return result.output, tomllib.loads(written)


def test_llamafactory_sft_yaml(lf_project: Path) -> None:
    output, toml = _init_from(LF_SFT, "llama3_lora_sft.yaml")
    assert toml["model"] == {
        "name_or_path": "meta-llama/Meta-Llama-3-8B-Instruct",
        "trust_remote_code": True,
        "template": "llama3",
        "dtype": "bfloat16",
    }
    assert [d["name"] for d in toml["datasets"]] == ["identity", "alpaca_en_demo"]
    assert toml["datasets"][0]["path"] == "data/identity.json" and toml["datasets"][0]["format"] == "alpaca"
    assert all(d["max_samples"] == 1000 for d in toml["datasets"])
    train = toml["train"]
    assert (train["method"], train["adapter"], train["max_length"]) == ("sft", "lora", 2048)
    assert (train["learning_rate"], train["epochs"], train["batch_size"]) == (1e-4, 3.0, 1)
    assert (train["gradient_accumulation_steps"], train["resume"]) == (8, "never")
    assert train["lora"] == {"r": 8, "target_modules": "all-linear"}
    assert toml["project"] == {"output_dir": "saves/llama3-8b/lora/sft", "name": "llama3-8b-lora-sft"}
    text = Path("gym.toml").read_text()
    assert "# from per_device_train_batch_size" in text and "# from cutoff_len" in text
    assert "optim: Gym has no equivalent setting" in text  # listed in the file...
    assert "not carried over optim" in output  # ...and on the terminal
    assert "plot_loss: Gym always records the loss curve" in text


def test_llamafactory_dpo_qlora_yaml(lf_project: Path) -> None:
    output, toml = _init_from(LF_DPO_QLORA, "dpo.yaml")
    assert toml["train"]["method"] == "dpo" and toml["train"]["adapter"] == "qlora"
    assert toml["model"]["quantization"] == "bnb-4bit" and toml["model"]["template"] == "qwen2.5"
    assert toml["train"]["dpo"] == {"beta": 0.1, "loss_type": "sigmoid"}
    assert toml["datasets"][0]["format"] == "preference" and toml["datasets"][0]["eval_fraction"] == 0.1
    assert "quantization_method" in output


def test_axolotl_yaml(lf_project: Path) -> None:
    Path("data/chats.jsonl").write_text('{"conversations": [{"from": "human", "value": "hi"}]}\n')
    output, toml = _init_from(AXOLOTL, "lora-1b.yml", target="run/gym.toml")
    assert (
        toml["model"]["name_or_path"] == "NousResearch/Llama-3.2-1B" and toml["model"]["template"] == "chatml"
    )
    hub, local = toml["datasets"]
    assert hub == {"hub": "teknium/GPT4-LLM-Cleaned", "format": "alpaca", "eval_fraction": 0.1}
    assert local["path"] == "../data/chats.jsonl" and local["format"] == "sharegpt"
    assert "columns" not in local  # sharegpt rows keep their messages in "conversations" already
    train = toml["train"]
    assert (train["method"], train["adapter"], train["max_length"], train["packing"]) == (
        "sft",
        "lora",
        2048,
        True,
    )
    assert (train["batch_size"], train["gradient_accumulation_steps"], train["epochs"]) == (2, 2, 1)
    assert train["lora"] == {
        "r": 16,
        "alpha": 32,
        "dropout": 0.05,
        "target_modules": ["gate_proj", "down_proj", "q_proj"],
    }
    assert toml["project"]["output_dir"] == "./outputs/lora-out"
    for key in ("optimizer", "warmup_steps", "train_on_inputs"):
        assert f"not carried over {key}" in output
    assert "load_in_8bit" not in output  # false is the default, nothing to say


def test_unknown_dataset_is_one_sentence_and_nothing_written(lf_project: Path) -> None:
    Path("x.yaml").write_text(LF_SFT.replace("identity,alpaca_en_demo", "not_there"))
    result = runner.invoke(app, ["init", "--from", "x.yaml", "gym.toml"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "not_there" in result.output and not Path("gym.toml").exists()


def test_broken_yaml_is_reported_at_its_line(lf_project: Path) -> None:
    Path("bad.yaml").write_text("stage: sft\nlearning_rate: [1\n")
    result = runner.invoke(app, ["init", "--from", "bad.yaml", "gym.toml"])
    assert result.exit_code == 1 and "bad.yaml:" in result.output and "YAML syntax error" in result.output


def test_llamafactory_bare_boolean_flags(lf_project: Path) -> None:
    notes: list[str] = []
    argv = ["--model_name_or_path", "builtin:tiny", "--dataset", "identity", "--do_train", "--bf16",
            "--plot_loss", "--overwrite_output_dir", "--fp16", "false", "--packing", "--output_dir", "out/x"]  # fmt: skip
    config = config_from_args(None, argv, notes=notes)
    assert config.model.dtype == "bfloat16" and config.train.resume == "never" and config.train.packing
    assert notes == [
        "--do_train: ignored (gym train always trains)",
        "--plot_loss: ignored (Gym always records the loss curve in train_results.json and the model card)",
    ]
    result = runner.invoke(app, ["validate", *argv, "--fp16"])
    assert result.exit_code == 0, result.output
    assert "note --do_train: ignored" in result.output and "expects a value" not in result.output
