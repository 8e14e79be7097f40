"""Length-grouped micro-batches train the same rows with the same gradient as one padded batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gym.model.cpu_kernels.length_groups import plan_groups, split_batch


def test_plan_covers_every_row_once_and_splits_only_when_padding_costs() -> None:
    assert plan_groups([100] * 8) == [list(range(8))]  # nothing to save: one group
    lengths = [12, 1900, 15, 2000, 10, 1800, 20, 30]
    groups = plan_groups(lengths)
    assert sorted(i for group in groups for i in group) == list(range(8))
    assert len(groups) > 1
    short = groups[0]
    assert {lengths[i] for i in short} == {10, 12, 15, 20, 30}  # short rows never padded to the long ones
    # a group costs as much as GROUP_COST_TOKENS tokens: a few tokens of padding are not worth a group
    assert len(plan_groups([60, 62, 61, 63])) == 1


def test_grouped_step_has_the_gradient_of_one_padded_batch(tmp_path: Path) -> None:
    import torch

    from gym.train.collate import PadCollator
    from tests.train.test_padding_free import sft_trainer

    trainer, tokenizer = sft_trainer(tmp_path)
    model = trainer.model
    torch.manual_seed(0)
    rows: list[dict[str, Any]] = []
    for n in (9, 120, 14, 118, 11, 125, 16, 12):
        ids = torch.randint(3, 500, (n,)).tolist()
        rows.append({"input_ids": ids, "labels": [-100] * (n // 3) + ids[n // 3 :]})
    batch = PadCollator(tokenizer.pad_token_id)(rows)
    assert len(split_batch(batch)) > 1  # the batch really is split: the comparison below can fail
    trained = int((batch["labels"][:, 1:] != -100).sum())

    model.train()
    model(**batch, num_items_in_batch=trained).loss.backward()
    reference = {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}
    model.zero_grad()

    tokens_before = trainer.gym_tokens
    loss = trainer.training_step(model, batch, num_items_in_batch=trained)
    grouped = {name: p.grad for name, p in model.named_parameters() if p.requires_grad}
    assert reference.keys() == grouped.keys()
    for name, grad in reference.items():
        torch.testing.assert_close(grouped[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    with torch.no_grad():
        whole = model(**batch, num_items_in_batch=trained).loss
    torch.testing.assert_close(loss, whole, rtol=1e-5, atol=1e-6)  # the logged loss is the batch's
    assert trainer.gym_tokens - tokens_before == int(batch["attention_mask"].sum())  # same non-pad tokens
