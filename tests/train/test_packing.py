"""Padding-free packing keeps samples apart: a packed sample sees exactly what it sees alone.

The collator concatenates a micro-batch into one row and restarts ``position_ids`` per sample; the
model must then attend within each sample only. If the first sample leaked into the second, the second
sample's logits would differ from its logits computed on its own.
"""

from __future__ import annotations

from typing import Any

import pytest

from gym.train.collate import PackedCollator, PadCollator
from tests.conftest import VALID


@pytest.mark.parametrize("attention", ["sdpa", "gym_packed_sdpa"])
def test_packed_samples_do_not_attend_to_each_other(write_toml: Any, attention: str) -> None:
    """Under transformers' SDPA (a block-diagonal mask from the positions) and under Gym's CPU attention
    (samples laid out as a padded batch), which SFT training on CPU uses."""
    import torch

    from gym.config import load_config
    from gym.model.cpu_kernels.packed_attention import use_packed_attention
    from gym.model.loading import load_model

    path = write_toml(VALID + "packing = true\n")
    (path.parent / "data").mkdir()
    (path.parent / "data" / "train.jsonl").write_text('{"instruction": "a", "output": "b"}\n')
    model = load_model(load_config(path), for_training=True)  # the model exactly as training gets it
    if attention != "sdpa":
        assert use_packed_attention(model)
    model.eval()  # dropout off, so the two forward passes are comparable; the cache stays off
    first = {"input_ids": [5, 17, 99, 23, 41, 7], "labels": [-100, -100, 99, 23, 41, 7]}
    second = {"input_ids": [12, 64, 3, 88], "labels": [-100, 64, 3, 88]}
    third = {"input_ids": [9, 31, 77], "labels": [-100, 31, 77]}
    packed = PackedCollator()([first, second, third])
    assert packed["position_ids"].tolist() == [[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 1, 2]]
    assert packed["labels"].tolist()[0][6] == -100  # no token is trained to follow the previous sample
    with torch.no_grad():
        together = model(input_ids=packed["input_ids"], position_ids=packed["position_ids"]).logits[0]
        alone = [model(**PadCollator(0)([row])).logits[0] for row in (first, second, third)]
    torch.testing.assert_close(together[:6], alone[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(together[6:10], alone[1], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(together[10:], alone[2], rtol=1e-4, atol=1e-4)
    # The check can fail: without restarted positions the second sample attends to the first.
    with torch.no_grad():
        leaked = model(input_ids=packed["input_ids"]).logits[0]
    assert not torch.allclose(leaked[6:10], alone[1], rtol=1e-4, atol=1e-4)


def test_packing_fills_rows_whole_and_keeps_samples_apart(tmp_path: Any) -> None:
    """train.packing: samples packed best-fit into rows of max_length, never cut, split again at collation."""
    from datasets import Dataset

    from gym.train.methods.sft import pack_rows, token_count

    lengths = [30, 100, 70, 20, 90, 10, 60]
    rows = Dataset.from_list(
        [
            {"input_ids": list(range(1, n + 1)), "labels": [-100] * (n // 2) + list(range(n // 2 + 1, n + 1))}
            for n in lengths
        ]
    )
    packed = pack_rows(rows, 128)
    assert len(packed) < len(rows)
    assert token_count(packed) == sum(lengths)  # nothing cut or dropped
    assert all(len(ids) <= 128 for ids in packed["input_ids"])
    assert sorted(n for row in packed["seq_lengths"] for n in row) == sorted(lengths)
    batch = PackedCollator()([packed[i] for i in range(len(packed))])
    positions = batch["position_ids"][0].tolist()
    starts = [i for i, p in enumerate(positions) if p == 0]
    assert len(starts) == len(lengths)  # every sample restarts its positions, inside packed rows too
    labels = batch["labels"][0].tolist()
    assert all(labels[i] == -100 for i in starts)


def test_samples_of_very_different_lengths_run_as_separate_attention_calls(write_toml: Any) -> None:
    """Gym's CPU attention pads samples only to the longest of their own call; the result is the same."""
    import torch

    from gym.config import load_config
    from gym.model.cpu_kernels.packed_attention import layout, use_packed_attention
    from gym.model.loading import load_model

    path = write_toml(VALID)
    (path.parent / "data").mkdir()
    (path.parent / "data" / "train.jsonl").write_text('{"instruction": "a", "output": "b"}\n')
    model = load_model(load_config(path), for_training=True)
    assert use_packed_attention(model)
    model.eval()
    torch.manual_seed(0)
    rows = [
        {"input_ids": torch.randint(3, 500, (n,)).tolist(), "labels": [-100] * n} for n in (5, 300, 10, 296)
    ]
    packed = PackedCollator()(rows)
    calls = layout(packed["position_ids"]).calls
    assert sorted(samples for samples, _ in calls) == [2, 2]  # the short pair apart from the long pair
    with torch.no_grad():
        together = model(input_ids=packed["input_ids"], position_ids=packed["position_ids"]).logits[0]
        alone = torch.cat([model(**PadCollator(0)([row])).logits[0] for row in rows])
    torch.testing.assert_close(together, alone, rtol=1e-4, atol=1e-4)
