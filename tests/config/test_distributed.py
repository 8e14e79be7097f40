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
