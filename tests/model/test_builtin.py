"""`builtin:tiny` builds offline and deterministically, reloads through the Auto classes, and generates."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gym.model.builtin import BUILTIN_MODELS, ensure_builtin, resolve_model_path, spec_key

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_builtin("builtin:tiny", root=tmp_path_factory.mktemp("cache"))


def _identical(a: Path, b: Path) -> bool:
    comparison = filecmp.dircmp(a, b)
    names = sorted(os.listdir(a))
    same, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    return not (comparison.left_only or comparison.right_only or mismatch or errors) and same == names


def test_two_builds_are_byte_identical(built: Path, tmp_path: Path) -> None:
    second = ensure_builtin("builtin:tiny", root=tmp_path)
    assert second != built
    assert _identical(built, second)


def test_cache_is_reused_and_rebuilt_when_incomplete(built: Path) -> None:
    assert ensure_builtin("builtin:tiny", root=built.parent) == built
    marker = built / "gym_builtin.json"
    saved = marker.read_text()
    marker.unlink()  # what an interrupted build would look like
    try:
        assert ensure_builtin("builtin:tiny", root=built.parent) == built
        assert marker.is_file()
    finally:
        if not marker.exists():
            marker.write_text(saved)
    assert not [p for p in built.parent.iterdir() if p.name.startswith(".")], "staging folders left behind"


def test_reloads_offline_and_generates(built: Path) -> None:
    code = f"""
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained({str(built)!r})
model = AutoModelForCausalLM.from_pretrained({str(built)!r})
n = sum(p.numel() for p in model.parameters())
assert model.config.model_type == "llama", model.config.model_type
assert 200_000 <= n <= 1_000_000, n
assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
assert tok.pad_token_id != tok.eos_token_id
text = tok.apply_chat_template([{{"role": "user", "content": "Reverse: a b c"}}], tokenize=False, add_generation_prompt=True)
assert text == "<|im_start|>user\\nReverse: a b c<|im_end|>\\n<|im_start|>assistant\\n", text
ids = tok(text, return_tensors="pt")
assert tok.decode(ids["input_ids"][0]) == text
assert tok.tokenize(" g a e") == ["Ġg", "Ġa", "Ġe"]
out = model.generate(**ids, max_new_tokens=5, do_sample=False)
assert out.shape[1] == ids["input_ids"].shape[1] + 5 or tok.eos_token_id in out[0].tolist()
print("OK", n)
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("OK")


def test_it_can_learn(built: Path) -> None:
    """A few optimiser steps on one reversal example drive its loss down: the weights are trainable."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built)
    model = AutoModelForCausalLM.from_pretrained(built)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Reverse: g a e"}, {"role": "assistant", "content": "e a g"}],
        tokenize=False,
    )
    batch = tok(text, return_tensors="pt")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    torch.manual_seed(0)
    losses = []
    for _ in range(30):
        loss = model(**batch, labels=batch["input_ids"]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.3, losses


def test_resolve_model_path_passes_other_names_through() -> None:
    assert resolve_model_path("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"
    assert resolve_model_path("./local/folder") == "./local/folder"
    with pytest.raises(ValueError, match="unknown built-in model"):
        ensure_builtin("builtin:huge")


def test_cache_key_changes_with_the_spec() -> None:
    from dataclasses import replace

    spec = BUILTIN_MODELS["tiny"]
    assert spec_key("tiny", spec) != spec_key("tiny", replace(spec, hidden_size=64))
