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
    from gym.model.loading import load_model
    from gym.train.packed_attention import use_packed_attention

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
