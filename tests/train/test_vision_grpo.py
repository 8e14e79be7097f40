"""GRPO on image rows with builtin:tiny-vl through TRL's GRPOTrainer and the model's processor.

- the processor renders a prompt's blocks as the text SFT trains on (the run's chat template, the model's
  image placeholder where the row's ``<image>`` marker was, images kept in place);
- a GRPO run samples and scores with the images: the vision tower runs on every rollout and forward pass
  (counted with a torch forward hook), the rewards are logged and the run records its method.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym.data.builtin_vision import write_colour_dataset
from tests.train.test_vision_sft import _config as vision_config

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "gym-cache"))


GRPO = """
[train.grpo]
group_size = 4
max_completion_length = 3
temperature = 1.0
reward = ["exact_match"]
"""


def _config(folder: Path, data: Path):
    return vision_config(folder, str(data), adapter="full", method="grpo", extra=GRPO)


@pytest.mark.parametrize(
    "text",
    ["<image>What colour is the shape?", "Look: <image> and <image>, which is red?", "No image here."],
)
def test_block_prompts_render_as_the_text_sft_trains_on(tmp_path: Path, text: str) -> None:
    from gym.model.loading import load_tokenizer
    from gym.model.vision import image_placeholder
    from gym.train.methods.vision_grpo import blocks, vision_processor

    config = _config(tmp_path, tmp_path / "unused.jsonl")
    tokenizer = load_tokenizer(config)
    processor = vision_processor(config, tokenizer)
    placeholder = image_placeholder(processor, tokenizer)
    conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": blocks(text)}]
    rendered = processor.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    reference = tokenizer.apply_chat_template(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": text.replace("<image>", placeholder)},
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert rendered == reference
    assert rendered.count(placeholder) == text.count("<image>")


def test_grpo_on_image_rows_samples_and_learns_with_the_images(tmp_path: Path) -> None:
    import torch

    from gym.train.runner import run_training

    paths = write_colour_dataset(tmp_path / "data", n_train=16, n_test=4)
    config = _config(tmp_path, paths["train"])
    seen: list[int] = []

    def count_vision(module: torch.nn.Module, args: tuple, output: object) -> None:
        if type(module).__name__ == "CLIPVisionModel":
            seen.append(int(args[0].shape[0]) if args and hasattr(args[0], "shape") else 1)

    handle = torch.nn.modules.module.register_module_forward_hook(count_vision)
    try:
        result = run_training(config, show_progress=False)
    finally:
        handle.remove()
    assert result.steps == 2
    assert seen and sum(seen) >= 2 * 4, "the vision tower never ran: the images did not reach the policy"
    progress = tmp_path / "out" / "checkpoints" / "progress.jsonl"  # Gym's per-step log
    history = [json.loads(line) for line in progress.read_text().splitlines()]
    rewards = [entry["rewards/exact_match/mean"] for entry in history if "rewards/exact_match/mean" in entry]
    assert len(rewards) == 2 and all(0.0 <= value <= 1.0 for value in rewards), history
    record = json.loads((tmp_path / "out" / "train_results.json").read_text())
    assert record["method"] == "grpo" and record["grpo"]["group_size"] == 4


def test_a_prompt_without_the_marker_of_its_image_is_one_sentence(tmp_path: Path) -> None:
    """The marker sits in the answer, which GRPO drops (it becomes the reference): the image has no place."""
    from datasets import Dataset

    from gym.train.methods.vision_grpo import vision_prompt_rows

    messages = [{"role": "user", "content": "What colour?"}, {"role": "assistant", "content": "<image> red"}]
    rows = Dataset.from_list([{"messages": json.dumps(messages), "reference": None, "images": ["a.png"],
                               "source": "colours", "index": 3}])  # fmt: skip
    with pytest.raises(ValueError) as error:
        vision_prompt_rows(rows)
    assert str(error.value) == (
        "dataset 'colours' row 3: its prompt has 0 <image> marker(s) for 1 image(s); GRPO samples from the prompt "
        "only, so each image needs its marker there"
    )
