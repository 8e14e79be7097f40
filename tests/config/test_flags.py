"""Command-line flags, including the seed's LLaMA-Factory-style lines, build the same GymConfig as a file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gym.config import ConfigError, config_from_args, load_config
from gym.config.flags import parse_flags, parse_value
from gym.config.loader import Override


@pytest.fixture
def custom_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A LLaMA-Factory-style data/dataset_info.json naming `custom_dataset`, with the cwd beside it."""
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"instruction": "Reverse: a b", "input": "", "output": "b a"}]
    (data / "custom.json").write_text(json.dumps(rows))
    (data / "dataset_info.json").write_text(json.dumps({"custom_dataset": {"file_name": "custom.json"}}))
    monkeypatch.chdir(tmp_path)
    return data / "custom.json"


def test_seed_train_line_equals_file(custom_dataset: Path, write_toml) -> None:
    argv = ["--model_name_or_path", "Qwen/Qwen3-7B", "--template", "qwen3", "--dataset", "custom_dataset"]
    from_flags = config_from_args(None, argv)
    from_file = load_config(
        write_toml(
            f"""
            [project]
            name = "qwen3-7b-sft"

            [model]
            name_or_path = "Qwen/Qwen3-7B"
            template = "qwen3"

            [[datasets]]
            name = "custom_dataset"
            path = "{custom_dataset.resolve()}"
            format = "alpaca"
            """
        )
    )
    assert from_flags.model_dump() == from_file.model_dump()


def test_seed_training_free_grpo_line_equals_file(custom_dataset: Path, write_toml) -> None:
    argv = [
        "--model_name_or_path", "builtin:tiny", "--dataset", "custom_dataset",
        "--finetuning_type", "grpo", "--grpo_training_free",
        "--grpo_experience_lib_path", "./experiences", "--grpo_group_size", "5",
    ]  # fmt: skip
    from_flags = config_from_args(None, argv)
    from_file = load_config(
        write_toml(
            f"""
            [project]
            name = "tiny-grpo"
            [model]
            name_or_path = "builtin:tiny"
            [[datasets]]
            name = "custom_dataset"
            path = "{custom_dataset.resolve()}"
            format = "alpaca"
            [train]
            method = "grpo"
            [train.grpo]
            training_free = true
            experience_lib_path = "./experiences"
            group_size = 5
            """
        )
    )
    assert from_flags.model_dump() == from_file.model_dump()
    assert from_flags.train.adapter == "lora"  # --finetuning_type grpo keeps the default adapter


def test_flag_overrides_the_file_key(write_toml) -> None:
    path = write_toml(
        """
        [project]
        name = "demo"
        [model]
        name_or_path = "builtin:tiny"
        [[datasets]]
        path = "a.jsonl"
        format = "alpaca"
        max_samples = 10
        [train]
        learning_rate = 1e-4
        """
    )
    config = config_from_args(
        path,
        ["--learning_rate", "3e-3", "--train.batch_size=8", "--set", "train.lora.r=4", "--max_samples", "5"],
    )
    assert config.train.learning_rate == 3e-3
    assert config.train.batch_size == 8
    assert config.train.lora.r == 4
    assert config.datasets[0].max_samples == 5
    assert config.source == path.resolve()


def test_bad_flag_value_is_reported_against_the_flag(write_toml) -> None:
    path = write_toml(
        '[project]\nname = "d"\n[model]\nname_or_path = "x/y"\n[[datasets]]\npath = "a"\nformat = "alpaca"\n'
    )
    with pytest.raises(ConfigError) as caught:
        config_from_args(path, ["--learning_rate", "-1"])
    issue = caught.value.issues[0]
    assert issue.source == "command line" and "--learning_rate" in issue.key and "> 0" in issue.message


def test_unknown_flag_suggests(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_flags(["--learning_rat", "1"])
    assert "did you mean 'learning_rate'" in str(caught.value)


def test_unknown_dataset_name_is_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        parse_flags(["--dataset", "nothing_here"])
    assert "'nothing_here' is neither a dataset in" in str(caught.value)


def test_dataset_path_format_is_sniffed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "chat.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    (tmp_path / "prefs.jsonl").write_text(json.dumps({"prompt": "p", "chosen": "a", "rejected": "b"}) + "\n")
    overrides = parse_flags(["--dataset", "chat.jsonl,prefs.jsonl"])
    datasets = overrides[0].value
    assert [d["format"] for d in datasets] == ["openai", "preference"]


def test_llamafactory_dataset_info_fixtures(fixtures_dir: Path) -> None:
    folder = str(fixtures_dir / "llamafactory-data")
    names = "alpaca_en_demo,glaive_toolcall_en_demo,dpo_en_demo,kto_en_demo,mllm_demo,c4_demo"
    (override,) = parse_flags(["--dataset", names, "--dataset_dir", folder])
    by_name = {d["name"]: d for d in override.value}
    assert by_name["alpaca_en_demo"]["format"] == "alpaca"
    assert by_name["glaive_toolcall_en_demo"] == {
        "name": "glaive_toolcall_en_demo",
        "format": "sharegpt",
        "path": str((fixtures_dir / "llamafactory-data" / "glaive_toolcall_en_demo.json").resolve()),
        "columns": {"messages": "conversations", "tools": "tools"},
    }
    assert by_name["dpo_en_demo"]["format"] == "preference"
    assert by_name["kto_en_demo"]["format"] == "kto" and by_name["kto_en_demo"]["columns"]["label"] == "label"
    assert (
        by_name["mllm_demo"]["format"] == "openai" and by_name["mllm_demo"]["columns"]["images"] == "images"
    )
    assert by_name["c4_demo"] == {**by_name["c4_demo"], "format": "text", "columns": {"text": "text"}}
    assert all(os.path.isfile(d["path"]) for d in override.value)


@pytest.mark.parametrize(
    ("flags", "path", "value"),
    [
        (["--finetuning_type", "qlora"], ("train", "adapter"), "qlora"),
        (["--finetuning_type", "dpo"], ("train", "method"), "dpo"),
        (["--stage", "kto"], ("train", "method"), "kto"),
        (["--use_dora"], ("train", "adapter"), "dora"),
        (["--lora_target", "all"], ("train", "lora", "target_modules"), "all-linear"),
        (["--lora_target", "q_proj,v_proj"], ("train", "lora", "target_modules"), ["q_proj", "v_proj"]),
        (["--report_to", "wandb"], ("train", "report_to"), ["wandb"]),
        (["--cutoff_len", "1024"], ("train", "max_length"), 1024),
        (["--packing", "false"], ("train", "packing"), False),
        (["--project_name", "2024"], ("project", "name"), "2024"),
    ],
)
def test_alias_mapping(flags: list[str], path: tuple, value: object) -> None:
    overrides = parse_flags(flags)
    assert Override(path, value, overrides[-1].flag) in overrides


def test_quantization_bit_implies_qlora() -> None:
    values = {o.path: o.value for o in parse_flags(["--quantization_bit", "4"])}
    assert values == {("model", "quantization"): "bnb-4bit", ("train", "adapter"): "qlora"}


def test_values_parse_as_toml_unless_the_key_is_text() -> None:
    assert parse_value("1e-4", float) == 1e-4
    assert parse_value("[1, 2]", list[int]) == [1, 2]
    assert parse_value("qwen3", str) == "qwen3"
    assert parse_value("123", str) == "123"


def test_quoted_strings_lose_their_quotes() -> None:
    assert parse_value('"never"', str) == "never"
    assert parse_value("'a b'", str) == "a b"
