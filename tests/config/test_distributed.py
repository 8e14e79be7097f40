"""[train.distributed]: bad combinations are one file:line:col sentence; good ones reach TrainingArguments."""

from __future__ import annotations

import pytest

from gym.config import ConfigError, load_config

HEAD = """\
[project]
name = "demo"

[model]
name_or_path = "builtin:tiny"

[[datasets]]
path = "data/train.jsonl"
format = "alpaca"
"""  # cases start at line 10

CASES = [
    ('[train.distributed]\nstrategy = "fsdpp"\n', "gym.toml:11:12: train.distributed.strategy: unknown "
     "strategy 'fsdpp'; expected one of 'none', 'ddp', 'fsdp', 'deepspeed' (did you mean 'fsdp'?)"),
    ("[train.distributed.deepspeed]\nstage = 1\n",
     "gym.toml:11:9: train.distributed.deepspeed.stage: unknown ZeRO stage 1; expected 2 or 3"),
    ('[train]\nmethod = "ppo"\n[train.distributed]\nstrategy = "ddp"\n',
     "gym.toml:13:12: train.distributed.strategy: PPO trains in one process"),
    ('[train]\nadapter = "qlora"\n[train.distributed]\nstrategy = "deepspeed"\n',
     "gym.toml:13:12: train.distributed.strategy: QLoRA's 4-bit weights cannot be sharded by deepspeed"),
    ('[train.distributed]\nstrategy = "deepspeed"\n[train.distributed.deepspeed]\noffload_params = "cpu"\n',
     "gym.toml:13:18: train.distributed.deepspeed.offload_params: parameter offload needs ZeRO stage 3"),
    ('[train.distributed.fsdp]\nsharding = "full"\n', "train.distributed.fsdp.sharding: unknown FSDP sharding "
     "'full'; expected one of 'full_shard', 'shard_grad_op', 'hybrid_shard', 'no_shard'"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "expected"), CASES)
def test_bad_distributed_is_one_located_sentence(tmp_path, body, expected):
    path = tmp_path / "gym.toml"
    path.write_text(HEAD + body)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    lines = str(raised.value).splitlines()
    assert len(lines) == 1
    assert expected in lines[0].replace(str(tmp_path) + "/", "")


def test_fsdp_reaches_accelerates_plugin(tmp_path):
    """transformers builds accelerate's FSDP plugin arguments from what Gym maps (FSDP2, decoder-layer wrap)."""
    from transformers import TrainingArguments

    from gym.train.distributed import distributed_arguments

    path = tmp_path / "gym.toml"
    path.write_text(HEAD + '[train.distributed]\nstrategy = "fsdp"\n[train.distributed.fsdp]\n'
                    'sharding = "shard_grad_op"\ncpu_offload = true\nstate_dict = "sharded"\n')  # fmt: skip
    dist = load_config(path).train.distributed
    args = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True,
                             **distributed_arguments(dist, bf16=False, launched=True))  # fmt: skip
    plugin = args.fsdp_plugin_args
    assert plugin["fsdp_version"] == 2
    assert (
        plugin["reshard_after_forward"] is False
    )  # shard_grad_op keeps weights between forward and backward
    assert plugin["cpu_offload"] is True
    assert plugin["state_dict_type"] == "SHARDED_STATE_DICT"
    assert plugin["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"


def test_deepspeed_config_zero3_offload(tmp_path):
    from gym.train.distributed import deepspeed_config

    path = tmp_path / "gym.toml"
    path.write_text(HEAD + '[train.distributed]\nstrategy = "deepspeed"\n[train.distributed.deepspeed]\n'
                    'stage = 3\noffload_optimizer = "nvme"\noffload_params = "cpu"\nnvme_path = "/nvme"\n')  # fmt: skip
    ds = deepspeed_config(load_config(path).train.distributed.deepspeed, bf16=True)
    zero = ds["zero_optimization"]
    assert zero["stage"] == 3
    assert zero["offload_optimizer"] == {"device": "nvme", "pin_memory": True, "nvme_path": "/nvme"}
    assert zero["offload_param"] == {"device": "cpu", "pin_memory": True}
    assert zero["stage3_gather_16bit_weights_on_model_save"] is True
    assert ds["bf16"] == {"enabled": True}


def test_deepspeed_without_the_package_names_the_extra(tmp_path):
    import importlib.util

    from gym.train.distributed import distributed_arguments

    if importlib.util.find_spec("deepspeed") is not None:
        pytest.skip("deepspeed is installed here")
    path = tmp_path / "gym.toml"
    path.write_text(HEAD + '[train.distributed]\nstrategy = "deepspeed"\n')
    with pytest.raises(ValueError, match=r"^train.distributed.strategy = 'deepspeed' needs the deepspeed package; "
                       r"install the distributed extra \(pip install 'zoo-gym\[distributed\]'\)"):  # fmt: skip
        distributed_arguments(load_config(path).train.distributed, bf16=False)


def _train(config, *flags: str):
    from typer.testing import CliRunner

    from gym.cli import app

    return CliRunner().invoke(app, ["train", str(config), "--no-progress", *flags])


def test_several_ranks_for_a_one_process_method_are_refused_before_launch(tmp_path, monkeypatch):
    (tmp_path / "gym.toml").write_text(HEAD + '[train]\nmethod = "ppo"\n')
    monkeypatch.chdir(tmp_path)
    done = _train(tmp_path / "gym.toml", "--nproc", "2")
    assert done.exit_code == 1 and "Traceback" not in done.output
    assert done.output.strip() == ("error gym.toml:11:10: PPO trains in one process (its rollout, reward and update "
                                   "loop is not sharded); run gym train without --nproc 2 or use method = 'grpo'")  # fmt: skip
    assert sorted(path.name for path in tmp_path.iterdir()) == ["gym.toml"]  # nothing was started


def test_fsdp_on_a_model_class_it_cannot_wrap_is_one_sentence(tmp_path, monkeypatch):
    """OpenAI GPT names no ``_no_split_modules``: auto-wrap has no decoder-layer class to shard by."""
    import shutil

    from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel

    from gym.data.builtin_datasets import write_reverse_dataset
    from gym.model.builtin import ensure_builtin

    tiny = ensure_builtin("builtin:tiny")
    model = tmp_path / "gpt"
    model.mkdir()
    for name in tiny.iterdir():
        if name.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(name, model / name.name)
    vocab = len(__import__("json").loads((tiny / "tokenizer.json").read_text())["model"]["vocab"])
    OpenAIGPTLMHeadModel(OpenAIGPTConfig(vocab_size=vocab + 8, n_positions=64, n_embd=16, n_layer=1,
                                         n_head=2)).save_pretrained(model)  # fmt: skip
    write_reverse_dataset(tmp_path / "data")
    (tmp_path / "gym.toml").write_text(
        HEAD.replace('"builtin:tiny"', '"gpt"\ntemplate = "chatml"')
        + '[train]\nmax_steps = 2\n[train.distributed]\nstrategy = "fsdp"\n'
    )
    monkeypatch.chdir(tmp_path)
    done = _train(tmp_path / "gym.toml")
    assert done.exit_code == 1 and "Traceback" not in done.output, done.output
    errors = [line for line in done.output.splitlines() if line.startswith("error")]
    assert errors == [
        "error gym.toml:13:1: train.distributed.fsdp.auto_wrap: OpenAIGPTLMHeadModel names no decoder-layer "
        "classes (_no_split_modules) to shard one by one; set auto_wrap = false"
    ]
    assert not (tmp_path / "outputs").exists() or not any((tmp_path / "outputs").rglob("*.safetensors"))


# DeepSpeed's own names (deepspeed/runtime/zero/config.py DeepSpeedZeroConfig fields and aliases,
# zero/offload_config.py, the top-level keys of runtime/config.py), as its config JSON documents them.
DEEPSPEED_TOP = {"train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
                 "train_batch_size", "bf16", "fp16", "zero_optimization", "optimizer", "scheduler"}  # fmt: skip
DEEPSPEED_ZERO = {"stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "allgather_partitions",
                  "allgather_bucket_size", "overlap_comm", "offload_param", "offload_optimizer", "sub_group_size",
                  "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                  "stage3_max_live_parameters", "stage3_max_reuse_distance",
                  "stage3_gather_16bit_weights_on_model_save", "round_robin_gradients"}  # fmt: skip
DEEPSPEED_OFFLOAD = {"device", "nvme_path", "buffer_count", "buffer_size", "pin_memory", "pipeline_read",
                     "pipeline_write", "fast_init", "ratio"}  # fmt: skip


@pytest.mark.parametrize(("stage", "optimizer", "params"), [(2, "none", "none"), (2, "cpu", "none"),
                                                             (3, "nvme", "cpu"), (3, "cpu", "nvme")])  # fmt: skip
def test_deepspeed_json_uses_deepspeeds_keys_and_only_autos_transformers_fills(stage, optimizer, params):
    import inspect
    import json

    from transformers.integrations import deepspeed as hf_deepspeed

    from gym.config.distributed import DeepSpeedConfig
    from gym.train.distributed import deepspeed_config

    ds = deepspeed_config(DeepSpeedConfig(stage=stage, offload_optimizer=optimizer, offload_params=params,
                                          nvme_path="/nvme"), bf16=False)  # fmt: skip
    json.dumps(ds)  # a plain JSON document, as the deepspeed launcher reads it
    assert set(ds) <= DEEPSPEED_TOP and set(ds["zero_optimization"]) <= DEEPSPEED_ZERO
    for key in ("offload_optimizer", "offload_param"):
        assert set(ds["zero_optimization"].get(key, {})) <= DEEPSPEED_OFFLOAD
    assert ds["zero_optimization"]["stage"] == stage
    filled = inspect.getsource(hf_deepspeed)  # transformers replaces "auto" only at the paths it names
    autos = [f"{top}.{key}" if top else key for top, section in [("", ds), ("zero_optimization",
             ds["zero_optimization"])] for key, value in section.items() if value == "auto"]  # fmt: skip
    assert autos and all(f'"{path}"' in filled for path in autos), autos
