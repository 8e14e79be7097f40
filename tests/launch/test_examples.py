"""The example gym.toml files validate, and the real-world one trains with the offline stand-ins."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym.config import config_from_args, load_config
from tests.conftest import REPO

EXAMPLES = sorted((REPO / "examples").glob("*/gym.toml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_examples_validate(path: Path) -> None:
    load_config(path)


def test_real_world_example_says_what_a_team_needs() -> None:
    config = load_config(REPO / "examples" / "qwen3-alpaca" / "gym.toml")
    assert config.model.name_or_path == "Qwen/Qwen3-0.6B" and config.model.template == "qwen3"
    assert config.eval.tasks == ["mmlu", "cmmlu"]
    assert config.compute is not None and config.hub is not None and config.space is not None


@pytest.mark.slow
def test_real_world_example_trains_offline_with_stand_ins(
    tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Data and training stages of the Qwen3 example, with builtin:tiny and LLaMA-Factory's alpaca demo."""
    from gym.data.prepare import prepare_data
    from gym.model.loading import load_tokenizer
    from gym.train.runner import run_training

    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "cache"))
    stand_ins = [
        "--model_name_or_path", "builtin:tiny",
        "--set", f'datasets.0.path="{fixtures_dir / "llamafactory-data" / "alpaca_en_demo.json"}"',
        "--output_dir", str(tmp_path / "out"),
        "--max_steps", "3", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1",
        "--cutoff_len", "512", "--set", "datasets.0.max_bad_fraction=1.0", "--set", "train.report_to=[]",
        # builtin:tiny's tokenizer spends about a token per character: 44% of the rows exceed 512 tokens
        "--set", "datasets.0.max_skipped_fraction=0.5",
    ]  # fmt: skip
    config = config_from_args(REPO / "examples" / "qwen3-alpaca" / "gym.toml", stand_ins)
    tokenizer = load_tokenizer(config)
    prepared = prepare_data(config, tokenizer)
    assert prepared.reports[0].rows_read == 999 and len(prepared.train) > 100
    assert "<|im_start|>assistant" in tokenizer.decode(prepared.train[0]["input_ids"])
    result = run_training(config, show_progress=False)
    assert result.steps == 3 and (tmp_path / "out" / "adapter_model.safetensors").is_file()


def test_missing_tracker_is_one_sentence_before_loading(tmp_path: Path) -> None:
    import importlib.util

    from gym.train.runner import check_trackers

    config = load_config(REPO / "examples" / "qwen3-alpaca" / "gym.toml")
    if importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX"):
        pytest.skip("tensorboard is installed here")
    with pytest.raises(ValueError, match="pip install tensorboard"):
        check_trackers(config)
