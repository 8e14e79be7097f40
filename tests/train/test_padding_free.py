"""CPU SFT batches are padding-free and score only trained positions, with the padded batch's loss and gradient."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import VALID

pytestmark = pytest.mark.usefixtures("cpu_kernels_on")  # the kernels' own tests (tests/train/conftest.py)


def sft_trainer(tmp_path: Path, extra: str = "") -> Any:
    from gym.config import load_config
    from gym.data.prepare import prepare_data
    from gym.model.adapters import apply_adapter
    from gym.model.loading import load_model, load_tokenizer
    from gym.train.methods.sft import build_sft
    from gym.train.registry import TrainContext

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"instruction": "a", "output": "b"}\n' * 4)
    path = tmp_path / "gym.toml"
    path.write_text(VALID + extra + "lora.dropout = 0.0\n")
    config = load_config(path)
    tokenizer = load_tokenizer(config)
    context = TrainContext(
        config,
        lambda: apply_adapter(load_model(config, for_training=True), config),
        tokenizer,
        prepare_data(config, tokenizer),
        tmp_path / "checkpoints",
    )
    return build_sft(context), tokenizer


def test_padding_free_step_has_the_loss_and_gradient_of_the_padded_batch(tmp_path: Path) -> None:
    import torch

    from gym.model.cpu_kernels.packed_attention import NAME
    from gym.train.collate import PackedCollator, PadCollator

    trainer, tokenizer = sft_trainer(tmp_path)
    model = trainer.model
    assert isinstance(trainer.data_collator, PackedCollator)  # CPU: padding-free batches by default
    assert model.get_base_model().config._attn_implementation == NAME
    torch.manual_seed(0)
    rows: list[dict[str, Any]] = []
    for n in (9, 120, 14, 118, 11, 125, 16, 12):
        ids = torch.randint(3, 500, (n,)).tolist()
        rows.append({"input_ids": ids, "labels": [-100] * (n // 3) + ids[n // 3 :]})
    padded = PadCollator(tokenizer.pad_token_id)(rows)
    trained = int((padded["labels"][:, 1:] != -100).sum())

    model.train()
    reference_loss = model(**padded, num_items_in_batch=trained).loss  # transformers' loss, padded rows
    reference_loss.backward()
    reference = {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}
    model.zero_grad()

    packed = trainer.data_collator(rows)
    assert packed["input_ids"].shape == (1, sum(len(row["input_ids"]) for row in rows))  # no padding at all
    assert trainer._gym_label_logits_only(packed)  # the LM head runs at trained positions only
    tokens_before = trainer.gym_tokens
    loss = trainer.training_step(model, packed, num_items_in_batch=trained)
    torch.testing.assert_close(loss, reference_loss.detach(), rtol=1e-5, atol=1e-6)
    grads = {name: p.grad for name, p in model.named_parameters() if p.requires_grad}
    assert reference.keys() == grads.keys()
    for name, grad in reference.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    assert trainer.gym_tokens - tokens_before == int(padded["attention_mask"].sum())  # same non-pad tokens


def test_padding_free_false_trains_padded_batches_with_sdpa(tmp_path: Path) -> None:
    """train.padding_free = false: right-padded batches and the model's own attention, as before Gym chose."""
    from gym.train.collate import PadCollator

    trainer, tokenizer = sft_trainer(tmp_path, "padding_free = false\n")
    assert isinstance(trainer.data_collator, PadCollator)
    assert trainer.model.get_base_model().config._attn_implementation == "sdpa"
    batch = trainer.data_collator(
        [{"input_ids": [5, 6, 7], "labels": [5, 6, 7]}, {"input_ids": [8], "labels": [8]}]
    )
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, tokenizer.pad_token_id, tokenizer.pad_token_id]]
    assert not trainer._gym_label_logits_only(batch)  # two rows: transformers' own loss path
    loss = trainer.training_step(trainer.model, batch, num_items_in_batch=3)
    assert loss.item() > 0


def test_padded_inputs_and_generation_keep_transformers_attention(tmp_path: Path) -> None:
    """A padded batch (attention mask) and cached decoding give what plain SDPA gives."""
    import torch

    from gym.train.collate import PadCollator

    trainer, tokenizer = sft_trainer(tmp_path)
    model = trainer.model.eval()
    base = model.get_base_model()
    rows = [
        {"input_ids": [5, 17, 99, 23, 41, 7], "labels": [-100] * 6},
        {"input_ids": [12, 64], "labels": [-100] * 2},
    ]
    batch = {k: v for k, v in PadCollator(tokenizer.pad_token_id)(rows).items() if k != "labels"}
    with torch.no_grad():
        ours = model(**batch).logits
        generated = base.generate(torch.tensor([[5, 17, 99]]), max_new_tokens=5, do_sample=False)
        base.set_attn_implementation("sdpa")
        plain = model(**batch).logits
        plain_generated = base.generate(torch.tensor([[5, 17, 99]]), max_new_tokens=5, do_sample=False)
    mask = batch["attention_mask"].bool()
    torch.testing.assert_close(ours[mask], plain[mask])
    assert generated.tolist() == plain_generated.tolist()
