"""Tiny random-weight folders of real vision-language architectures, built here, through Gym's real path.

- LLaVA with a SigLIP vision tower (the builtin uses CLIP): `gym data preview` and `gym train` for one
  step through the CLI, AutoModelForImageTextToText + LlavaProcessor.
- Qwen2-VL, model-side: its processor needs a video processor, which needs torchvision (only a CUDA
  wheel exists for this torch), so the folder has weights and tokenizer only; Gym's loader picks the VL
  class, LoRA goes on, and one optimizer step runs on pixels from Qwen2-VL's own (PIL) image processor
  with image tokens placed by Gym's expansion.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym.cli import app
from gym.model.builtin import TinySpec, build_tokenizer

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "gym-cache"))


def _tokenizer(*extra: str):
    tokenizer = build_tokenizer(TinySpec())
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", *extra]})
    return tokenizer


def _llava_siglip(folder: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor
    from transformers.models.siglip.configuration_siglip import SiglipVisionConfig
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    tokenizer = _tokenizer("<image>")
    processor = LlavaProcessor(
        image_processor=SiglipImageProcessorPil(size={"height": 32, "width": 32}),
        tokenizer=tokenizer,
        patch_size=8,
        vision_feature_select_strategy="full",
        num_additional_image_tokens=0,
        image_token="<image>",
        chat_template=tokenizer.chat_template,
    )
    config = LlavaConfig(
        vision_config=SiglipVisionConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8
        ),
        text_config=LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
        ),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
    )  # fmt: skip
    torch.manual_seed(0)
    LlavaForConditionalGeneration(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def test_llava_siglip_folder_previews_and_trains_one_step(tmp_path: Path, fixtures_dir: Path) -> None:
    model = _llava_siglip(tmp_path / "llava-siglip")
    data = fixtures_dir / "llamafactory-data" / "mllm_demo.json"
    (tmp_path / "gym.toml").write_text(
        f"""
[project]
name = "llava"
output_dir = "out"
[model]
name_or_path = "{model}"
template = "chatml"
[[datasets]]
path = "{data}"
format = "openai"
[train]
method = "sft"
adapter = "lora"
max_steps = 1
batch_size = 2
max_length = 512
"""
    )
    runner = CliRunner()
    preview = runner.invoke(app, ["data", "preview", str(tmp_path / "gym.toml")], terminal_width=120)
    assert preview.exit_code == 0, preview.output
    assert "2 image(s), 32 image tokens" in preview.output  # (32 / 8) ** 2 = 16 per image, no class token
    trained = runner.invoke(app, ["train", str(tmp_path / "gym.toml")])
    assert trained.exit_code == 0, trained.output
    results = json.loads((tmp_path / "out" / "train_results.json").read_text())
    assert results["steps"] == 1 and results["final_loss"] > 0


def _qwen2_vl(folder: Path) -> Path:
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    tokenizer = _tokenizer("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
    config = Qwen2VLConfig(
        text_config={
            "vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
            "bos_token_id": None, "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "depth": 2, "embed_dim": 32, "hidden_size": 64, "num_heads": 2, "mlp_ratio": 2, "patch_size": 14,
            "spatial_merge_size": 2, "temporal_patch_size": 2,
        },
        image_token_id=tokenizer.convert_tokens_to_ids("<|image_pad|>"),
        video_token_id=tokenizer.convert_tokens_to_ids("<|video_pad|>"),
        vision_start_token_id=tokenizer.convert_tokens_to_ids("<|vision_start|>"),
        vision_end_token_id=tokenizer.convert_tokens_to_ids("<|vision_end|>"),
    )  # fmt: skip
    torch.manual_seed(0)
    Qwen2VLForConditionalGeneration(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_qwen2_vl_folder_loads_and_trains_one_step_model_side(tmp_path: Path) -> None:
    import torch
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from gym.config import load_config
    from gym.data.vision import expand_row
    from gym.model.adapters import apply_adapter
    from gym.model.loading import load_model, load_tokenizer
    from gym.train.vision_collate import mm_token_type_ids

    folder = _qwen2_vl(tmp_path / "qwen2-vl")
    (tmp_path / "gym.toml").write_text(
        f"""
[project]
name = "qwen2vl"
[model]
name_or_path = "{folder}"
template = "chatml"
[[datasets]]
path = "rows.jsonl"
format = "openai"
[train]
adapter = "lora"
[train.lora]
target_modules = ["q_proj", "v_proj"]
"""
    )
    config = load_config(tmp_path / "gym.toml")
    tokenizer = load_tokenizer(config)
    model = apply_adapter(load_model(config), config)
    assert type(model.base_model.model).__name__ == "Qwen2VLForConditionalGeneration"

    image_processor = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=112 * 112)
    pixels = image_processor(images=[Image.new("RGB", (90, 70), (200, 30, 30))], return_tensors="pt")
    count = int(pixels["image_grid_thw"].prod()) // 4  # merge_size ** 2 patches per image token
    text = tokenizer.apply_chat_template(
        [
            {"role": "user", "content": "<|vision_start|><|image_pad|><|vision_end|>What colour?"},
            {"role": "assistant", "content": "red"},
        ],
        tokenize=False,
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    answer = tokenizer("red", add_special_tokens=False)["input_ids"]
    start = len(ids) - len(answer) - 2  # "red<|im_end|>\n"
    labels = [-100] * start + ids[start:]
    image_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    ids, labels = expand_row(ids, labels, ["red.png"], image_id=image_id, counts=[count])
    assert ids.count(image_id) == count and all(labels[i] == -100 for i, t in enumerate(ids) if t == image_id)
    batch = {
        "input_ids": torch.tensor([ids]),
        "labels": torch.tensor([labels]),
        "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
        **pixels,
    }
    batch["mm_token_type_ids"] = mm_token_type_ids(batch["input_ids"], image_id)  # as VisionCollator adds it
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert lora and all("lora_" in n for n in lora)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    loss = model(**batch).loss
    assert torch.isfinite(loss)
    loss.backward()
    optimizer.step()
    changed = [n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(p, lora[n])]
    assert changed, "no LoRA weight moved"
