"""[train.grpo]'s TRL keys (loss family, clipping, KL, reward scaling, vLLM rollouts) and the GPU speed
switches (train.liger_kernel, train.cut_cross_entropy): each validated, each reaching TRL's or
transformers' own config field by field, each refused with one sentence where it cannot run."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym.cli import app
from gym.config import load_config
from gym.config.grpo import LOSS_TYPES
from tests.launch.conftest import sky_env  # noqa: F401  (a fixture)

BASE = """\
project = { name = "t", output_dir = "out" }
model = { name_or_path = "builtin:tiny", template = "chatml" }
datasets = [{ path = "data.jsonl", format = "prompt" }]
[train]
method = "grpo"
max_steps = 2
batch_size = 4
gradient_accumulation_steps = 1
max_length = 64
logging_steps = 1
save_steps = 2
learning_rate = 1e-2
"""
GRPO = """
[train.grpo]
group_size = 2
max_completion_length = 4
temperature = 1.0
"""


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "cache"))


def project(folder: Path, extra: str = GRPO, train: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"prompt": f"Say ok {i}", "answer": "ok"} for i in range(8)]
    (folder / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    (folder / "gym.toml").write_text(BASE + train + extra, encoding="utf-8")
    return folder / "gym.toml"


def trl_fields() -> dict[str, dataclasses.Field]:
    from trl import GRPOConfig

    return {field.name: field for field in dataclasses.fields(GRPOConfig)}


def test_every_trl_key_names_a_field_of_trls_grpo_config() -> None:
    from gym.config.grpo import GrpoConfig
    from gym.train.methods.grpo import TRL_KEYS

    fields = trl_fields()
    assert [trl for trl in TRL_KEYS.values() if trl not in fields] == []
    gym_only = {"reward", "training_free", "experience_lib_path", "max_experiences_per_group", "api_base",
                "api_key_env", "concurrency", "request_timeout"}  # fmt: skip
    rest = {name for name in GrpoConfig.model_fields if not name.startswith("learner_")} - gym_only
    assert rest == set(TRL_KEYS), "a [train.grpo] key that reaches TRL must be in TRL_KEYS"


def test_loss_types_are_those_the_installed_trl_offers() -> None:
    from gym.train.methods.grpo import trl_loss_types

    assert set(LOSS_TYPES) == set(trl_loss_types() or ())
    assert LOSS_TYPES[0] == trl_fields()["loss_type"].default  # Gym's default is TRL's (dapo)


@pytest.mark.parametrize(
    "grpo",
    [
        "loss_type = 'cispo'\nimportance_sampling_level = 'sequence'\nepsilon = 0.1\nepsilon_high = 0.28\n"
        "beta = 0.04\nscale_rewards = 'batch'\nmask_truncated_completions = true\nnum_generations = 4\n",
        "loss_type = 'dr_grpo'\nscale_rewards = false\nuse_vllm = true\nvllm_gpu_memory_utilization = 0.5\n",
        "use_vllm = true\nvllm_mode = 'server'\nvllm_server_host = '10.0.0.2'\nvllm_server_port = 8010\n",
        "use_vllm = true\nvllm_mode = 'server'\nvllm_server_base_url = 'http://vllm.internal:8000'\n",
    ],
    ids=["loss-family", "colocate", "server-host", "server-url"],
)
def test_grpo_keys_become_trls_config_key_by_key(tmp_path: Path, grpo: str) -> None:
    from trl import GRPOConfig

    from gym.train.arguments import common_arguments
    from gym.train.methods.grpo import TRL_KEYS, completions_per_device, grpo_arguments

    config = load_config(project(tmp_path, "[train.grpo]\nmax_completion_length = 8\n" + grpo))
    common = common_arguments(config, tmp_path / "ckpt")
    batch = completions_per_device(config)  # whole groups, as build_grpo sets it
    common.update(per_device_train_batch_size=batch, per_device_eval_batch_size=batch)
    args = GRPOConfig(**common, **grpo_arguments(config))
    defaults = trl_fields()
    for key, trl_name in TRL_KEYS.items():
        value = getattr(config.train.grpo, key)
        expected = (
            defaults[trl_name].default if value is None and trl_name.startswith("vllm_server_") else value
        )
        assert getattr(args, trl_name) == expected, (key, trl_name)
    written = {line.split(" = ")[0] for line in grpo.splitlines()}
    for key in written - {"num_generations"}:  # what the file says, not a default that happens to match
        assert getattr(args, TRL_KEYS[key]) != defaults[TRL_KEYS[key]].default or key == "use_vllm", key
    assert args.num_generations == config.train.grpo.group_size


@pytest.mark.parametrize(
    ("grpo", "message"),
    [
        ("loss_type = 'ppo'", "train.grpo.loss_type: expected one of 'dapo', 'grpo', 'dr_grpo', 'bnpo', "
         "'cispo', 'sapo', 'luspo' or 'vespo', got the string \"ppo\""),
        ("epsilon = 0.3\nepsilon_high = 0.2", "epsilon_high (0.2) is below epsilon (0.3); the upper clipping "
         "bound must be at least the lower one"),
        ("vllm_mode = 'server'", "vllm_mode applies to vLLM rollouts; set use_vllm = true, or remove it"),
        ("use_vllm = true\nvllm_server_port = 8001", "vllm_server_port is the address of a vLLM server; set "
         "vllm_mode = 'server' to use one"),
        ("use_vllm = true\nvllm_mode = 'server'\nvllm_server_base_url = 'http://a:1'\nvllm_server_port = 2",
         "set vllm_server_base_url or vllm_server_host/vllm_server_port, not both"),
        ("use_vllm = true\nvllm_mode = 'server'\nvllm_gpu_memory_utilization = 0.5",
         "vllm_gpu_memory_utilization applies to vllm_mode = 'colocate'"),
        ("use_vllm = true\nvllm_gpu_memory_utilization = 1.5", "expected a number <= 1, got 1.5"),
        ("group_size = 4\nnum_generations = 4", "set group_size or num_generations (TRL's name for it), not both"),
        ("scale_rewards = 'std'", "expected one of 'group', 'batch' or 'none'"),
    ],
)  # fmt: skip
def test_bad_grpo_keys_are_one_sentence(tmp_path: Path, grpo: str, message: str) -> None:
    path = project(tmp_path, f"[train.grpo]\n{grpo}\n")
    outcome = CliRunner().invoke(app, ["validate", str(path)])
    assert outcome.exit_code == 1, outcome.output
    assert message in " ".join(outcome.output.split()), outcome.output
    assert "Traceback" not in outcome.output


SWITCHES = [
    (GRPO + "use_vllm = true\n", "", "train.grpo.use_vllm", "vLLM samples on CUDA GPUs only", "use_vllm"),
    (GRPO, "liger_kernel = true\n", "train.liger_kernel", "Liger's kernels are Triton GPU code", "liger_kernel"),
    (GRPO, "cut_cross_entropy = true\n", "train.cut_cross_entropy", "Cut Cross-Entropy's kernels are Triton GPU "
     "code", "cut_cross_entropy"),
]  # fmt: skip


@pytest.mark.parametrize(("extra", "train", "key", "why", "last"), SWITCHES, ids=lambda v: str(v)[:12])
def test_gpu_switches_are_refused_on_cpu_before_anything_loads(
    tmp_path: Path, extra: str, train: str, key: str, why: str, last: str
) -> None:
    path = project(tmp_path, extra, train)
    outcome = CliRunner().invoke(app, ["train", str(path), "--no-progress"], env={"CUDA_VISIBLE_DEVICES": ""})
    assert outcome.exit_code == 1, outcome.output
    text = " ".join(outcome.output.split())
    expected = (
        f"{key}: true needs a CUDA GPU ({why}) and this run trains on cpu; set {last} = false here, or train "
        "on a GPU (gym launch --cloud)"
    )
    assert expected in text and "Traceback" not in text, text
    line = next(i for i, row in enumerate(path.read_text().splitlines(), 1) if row.startswith(f"{last} = "))
    assert f"gym.toml:{line}:" in text  # at the key
    assert not (tmp_path / "out").exists()  # nothing loaded, nothing written


@pytest.mark.parametrize(
    ("train", "package", "install"),
    [("liger_kernel = true\n", "liger_kernel", "pip install liger-kernel"),
     ("cut_cross_entropy = true\n", "cut_cross_entropy", "pip install 'cut-cross-entropy[transformers]'")],
)  # fmt: skip
def test_a_gpu_without_the_package_is_told_what_to_install(
    tmp_path: Path, train: str, package: str, install: str
) -> None:
    from gym.train.speed import check_switches

    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    config = load_config(project(tmp_path, GRPO, train))
    with pytest.raises(Exception, match="needs the .* package, which is not installed") as error:
        check_switches(config, "cuda")  # the device plan of a GPU node
    assert install in str(error.value) and "\n" not in str(error.value)


def test_liger_reaches_the_trainers_arguments(tmp_path: Path) -> None:
    from transformers import TrainingArguments
    from trl import GRPOConfig

    from gym.train.arguments import common_arguments
    from gym.train.methods.grpo import grpo_arguments

    config = load_config(project(tmp_path, GRPO, "liger_kernel = true\n"))
    common = common_arguments(config, tmp_path / "ckpt")
    assert TrainingArguments(**common).use_liger_kernel is True
    assert GRPOConfig(**common, **grpo_arguments(config)).use_liger_kernel is True  # TRL's fused GRPO loss
    plain = load_config(project(tmp_path / "plain", GRPO))
    assert TrainingArguments(**common_arguments(plain, tmp_path / "ckpt")).use_liger_kernel is False


def test_vllm_config_dry_runs_for_the_cloud(tmp_path: Path, sky_env: dict[str, str]) -> None:  # noqa: F811
    """The laptop (no GPU) does not refuse a vLLM run it only sends to a cloud GPU."""
    import subprocess
    import sys

    import yaml

    path = project(tmp_path, GRPO + "use_vllm = true\n", "liger_kernel = true\n")
    with path.open("a") as handle:
        handle.write('\n[compute]\naccelerators = ["A100:1"]\n')
    done = subprocess.run([sys.executable, "-m", "gym", "launch", "--cloud", "--dryrun", str(path)],
                          cwd=tmp_path, env=sky_env, capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    task = yaml.safe_load(done.stdout)
    assert task["resources"]["accelerators"] == "A100:1" or "A100" in json.dumps(task["resources"])


@pytest.mark.slow
@pytest.mark.parametrize("loss", LOSS_TYPES)
def test_each_loss_type_trains_and_is_recorded(tmp_path: Path, loss: str) -> None:
    from gym.train.runner import run_training

    level = "sequence" if loss == "luspo" else "token"  # LUSPO is a sequence-level loss
    extra = GRPO + f"loss_type = '{loss}'\nimportance_sampling_level = '{level}'\n"
    result = run_training(load_config(project(tmp_path, extra)), show_progress=False)
    assert result.steps == 2 and result.final_loss is not None
    record = json.loads((tmp_path / "out" / "train_results.json").read_text())
    assert record["grpo"]["loss_type"] == loss and record["grpo"]["importance_sampling_level"] == level
    assert record["grpo"]["use_vllm"] is False
    assert record["gpu_switches"] == {"liger_kernel": False, "cut_cross_entropy": False}


@pytest.mark.parametrize("grpo", ["use_vllm = true\nvllm_mode = 'server'\nvllm_server_port = 8010\n", ""])
def test_the_resolved_gym_toml_reads_back(tmp_path: Path, grpo: str) -> None:
    """The file written beside the weights holds every default (vllm_mode, the memory fraction): it must load."""
    from gym.train.runner import write_resolved_config

    config = load_config(project(tmp_path, GRPO + grpo))
    (tmp_path / "resolved").mkdir()  # the output folder, once training wrote the weights
    write_resolved_config(config, tmp_path / "resolved")
    again = load_config(tmp_path / "resolved" / "gym.toml")
    assert again.train.grpo == config.train.grpo
