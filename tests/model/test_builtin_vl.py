"""`builtin:tiny-vl` builds offline and deterministically and reloads through the Auto VL classes."""

from __future__ import annotations

import filecmp
import os
from pathlib import Path

import pytest

from gym.model.builtin import ensure_builtin


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_builtin("builtin:tiny-vl", root=tmp_path_factory.mktemp("cache"))


def test_two_builds_are_byte_identical(built: Path, tmp_path: Path) -> None:
    second = ensure_builtin("builtin:tiny-vl", root=tmp_path)
    names = sorted(os.listdir(built))
    same, mismatch, errors = filecmp.cmpfiles(built, second, names, shallow=False)
    assert same == names and not mismatch and not errors
    assert sorted(os.listdir(second)) == names


def test_reloads_through_auto_classes_and_runs_an_image(built: Path) -> None:
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(built)
    model = AutoModelForImageTextToText.from_pretrained(built)
    assert type(processor).__name__ == "LlavaProcessor"
    assert model.config.model_type == "llava"
    assert model.config.vision_config.image_size == 32 and model.config.vision_config.patch_size == 8
    assert 200_000 <= sum(p.numel() for p in model.parameters()) <= 1_000_000
    text = "<|im_start|>user\n<image>What colour?<|im_end|>\n<|im_start|>assistant\n"
    red = processor(text=[text], images=[Image.new("RGB", (40, 50), (255, 0, 0))], return_tensors="pt")
    blue = processor(text=[text], images=[Image.new("RGB", (40, 50), (0, 0, 255))], return_tensors="pt")
    image_id = model.config.image_token_index
    assert int((red["input_ids"] == image_id).sum()) == 16  # (32 / 8) ** 2 patches, class token dropped
    with torch.no_grad():
        a = model(**red).logits[0, -1]
        b = model(**blue).logits[0, -1]
    assert not torch.allclose(a, b), "the image does not reach the language model"
