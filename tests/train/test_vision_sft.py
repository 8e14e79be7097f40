"""SFT on image rows with builtin:tiny-vl: the images reach the model, LoRA and full training run end to
end (LLaMA-Factory's mllm_demo included), and the trained folder reloads with its processor.

Full fine-tuning to a measured score is tests/launch/test_vision_quickstart.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym.config import load_config
from gym.data.builtin_vision import write_colour_dataset
from gym.train.runner import run_training

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "gym-cache"))


def _config(
    folder: Path, data: str, *, adapter: str = "lora", steps: int = 2, fmt: str = "openai", method: str = "sft",
    extra: str = "",
):  # fmt: skip
    (folder / "gym.toml").write_text(
        f"""
[project]
name = "vl"
output_dir = "out"
[model]
name_or_path = "builtin:tiny-vl"
template = "chatml"
[[datasets]]
path = "{data}"
format = "{fmt}"
[train]
method = "{method}"
adapter = "{adapter}"
max_steps = {steps}
batch_size = 2
learning_rate = 1e-3
max_length = 512
logging_steps = 1
save_steps = 100
{extra}"""
    )
    return load_config(folder / "gym.toml")


def test_swapping_the_image_changes_the_loss(tmp_path: Path) -> None:
    """The same prepared row with its image swapped for another colour gives a different loss."""
    import torch

    from gym.data.prepare import prepare_data
    from gym.model.loading import load_model, load_tokenizer
    from gym.model.vision import load_processor, model_vision
    from gym.train.vision_collate import VisionCollator

    paths = write_colour_dataset(tmp_path / "data", n_train=8, n_test=4)
    config = _config(tmp_path, str(paths["train"]))
    tokenizer = load_tokenizer(config)
    row = dict(prepare_data(config, tokenizer, vision=model_vision(config)).train[0])
    collate = VisionCollator(tokenizer.pad_token_id, load_processor(config, tokenizer))
    model = load_model(config, for_training=False)
    test_rows = [json.loads(line) for line in paths["test"].read_text().splitlines()]
    other = next(r for r in test_rows if r["messages"][-1]["content"] != "red")  # test colours cycle
    swapped = {**row, "images": [str(tmp_path / "data" / other["images"][0])]}
    with torch.no_grad():
        original = model(**collate([row])).loss
        changed = model(**collate([swapped])).loss
        again = model(**collate([row])).loss
    assert torch.isfinite(original) and torch.equal(original, again)
    assert not torch.allclose(original, changed), "the image never reached the model"


def test_mllm_demo_trains_with_lora_and_reloads(tmp_path: Path, fixtures_dir: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor

    data = fixtures_dir / "llamafactory-data" / "mllm_demo.json"
    config = _config(tmp_path, str(data), steps=3)
    result = run_training(config, show_progress=False)
    assert result.steps == 3 and result.train_rows == 6
    assert result.final_loss is not None and result.final_loss > 0
    out = tmp_path / "out"
    assert (out / "adapter_model.safetensors").is_file() and (out / "processor_config.json").is_file()
    processor = AutoProcessor.from_pretrained(out)
    assert type(processor).__name__ == "LlavaProcessor"
    from gym.model.builtin import resolve_model_path

    base = AutoModelForImageTextToText.from_pretrained(resolve_model_path("builtin:tiny-vl"))
    tuned = PeftModel.from_pretrained(base, str(out))
    assert any("lora_A" in name for name, _ in tuned.named_parameters())


def test_dpo_on_image_rows_trains(tmp_path: Path) -> None:
    """DPO on image preference rows (chosen: the right colour, rejected: another) runs through TRL's
    vision collator (the LLaVA processor refuses a prompt whose image token has no image) and the DPO
    loss falls."""
    from gym.data.builtin_vision import COLOURS

    paths = write_colour_dataset(tmp_path / "data", n_train=32, n_test=4)
    names = list(COLOURS)
    rows = []
    for line in paths["train"].read_text().splitlines():
        row = json.loads(line)
        right = row["messages"][-1]["content"]
        wrong = names[(names.index(right) + 1) % len(names)]
        rows.append(
            {"messages": row["messages"][:1], "chosen": right, "rejected": wrong, "images": row["images"]}
        )
    (tmp_path / "data" / "prefs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "gym.toml").write_text(
        """
[project]
name = "vldpo"
output_dir = "out"
[model]
name_or_path = "builtin:tiny-vl"
template = "chatml"
[[datasets]]
path = "data/prefs.jsonl"
format = "preference"
[train]
method = "dpo"
adapter = "lora"
max_steps = 6
batch_size = 4
learning_rate = 5e-3
max_length = 128
logging_steps = 1
save_steps = 100
"""
    )
    result = run_training(load_config(tmp_path / "gym.toml"), show_progress=False)
    assert result.steps == 6
    record = json.loads((tmp_path / "out" / "train_results.json").read_text())
    assert record["final_loss"] is not None and record["final_loss"] < record["loss_curve"][0][1]
    assert (tmp_path / "out" / "adapter_model.safetensors").is_file()


def test_qlora_on_image_rows_trains_on_a_4bit_base(tmp_path: Path) -> None:
    """QLoRA on a vision-language model: the base loads in 4-bit and LoRA trains on image rows."""
    pytest.importorskip("bitsandbytes", reason="bitsandbytes (the qlora extra) is not installed")
    import bitsandbytes as bnb

    from gym.model.loading import load_model

    paths = write_colour_dataset(tmp_path / "data", n_train=8, n_test=4)
    config = _config(tmp_path, str(paths["train"]), adapter="qlora")
    base = load_model(config)
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in base.modules()), "the base was not loaded in 4-bit"
    del base
    result = run_training(config, show_progress=False)
    assert result.steps == 2 and result.final_loss is not None and result.final_loss > 0
    assert (tmp_path / "out" / "adapter_model.safetensors").is_file()
