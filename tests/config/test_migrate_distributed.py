"""`gym init --from` carries LLaMA-Factory's and axolotl's DeepSpeed / FSDP settings into [train.distributed]."""

from __future__ import annotations

import json
from pathlib import Path

from tests.config.test_migrate import _init_from, lf_project  # noqa: F401  (fixture)

LF_Z3 = """\
### model
model_name_or_path: meta-llama/Meta-Llama-3-8B-Instruct

### method
stage: sft
do_train: true
finetuning_type: full
deepspeed: examples/deepspeed/ds_z3_offload_config.json

### dataset
dataset: identity
template: llama3
cutoff_len: 2048
"""

DS_Z3_OFFLOAD = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "bf16": {"enabled": "auto"},
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "offload_param": {"device": "cpu", "pin_memory": True},
        "overlap_comm": False,
        "stage3_gather_16bit_weights_on_model_save": True,
    },
}

AXOLOTL_FSDP = """\
base_model: NousResearch/Llama-3.2-1B
datasets:
  - path: data/chats.jsonl
    type: alpaca
adapter: lora
lora_r: 16
fsdp:
  - full_shard
  - auto_wrap
fsdp_config:
  fsdp_offload_params: true
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
  fsdp_activation_checkpointing: true
"""


def test_llamafactory_deepspeed_json_becomes_zero3_offload(lf_project: Path) -> None:  # noqa: F811
    Path("examples/deepspeed").mkdir(parents=True)
    Path("examples/deepspeed/ds_z3_offload_config.json").write_text(json.dumps(DS_Z3_OFFLOAD))
    _, toml = _init_from(LF_Z3, "llama3_full_sft_ds3.yaml")
    assert toml["train"]["distributed"] == {
        "strategy": "deepspeed",
        "deepspeed": {"stage": 3, "offload_optimizer": "cpu", "offload_params": "cpu"},
    }


def test_llamafactory_deepspeed_stage_from_the_file_name(lf_project: Path) -> None:  # noqa: F811
    _, toml = _init_from(LF_Z3.replace("ds_z3_offload_config", "ds_z2_config"), "ds2.yaml")
    assert toml["train"]["distributed"] == {"strategy": "deepspeed", "deepspeed": {"stage": 2}}


def test_axolotl_fsdp_and_fsdp_config(lf_project: Path) -> None:  # noqa: F811
    Path("data/chats.jsonl").write_text('{"instruction": "hi", "output": "hello"}\n')
    _, toml = _init_from(AXOLOTL_FSDP, "fsdp.yml", target="run/gym.toml")
    assert toml["train"]["distributed"] == {
        "strategy": "fsdp",
        "fsdp": {"sharding": "full_shard", "cpu_offload": True, "activation_checkpointing": True,
                 "state_dict": "sharded"},
    }  # fmt: skip
