"""`prepare_data` and `gym data preview`: tokens, masks, over-long rows, caching, statistics."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym.cli import app
from gym.config import load_config
from gym.data.prepare import prepare_data
from gym.data.templates import IGNORE_INDEX
from gym.data.tokenize import TOO_LONG, TRUNCATED
from gym.model.loading import load_tokenizer

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "gym-cache"))


def _config(
    folder: Path,
    rows: list[dict],
    fmt: str = "openai",
    method: str = "sft",
    max_length: int = 256,
    extra: str = "",
):
    data = folder / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "gym.toml").write_text(
        f"""
[project]
name = "t"
[model]
name_or_path = "builtin:tiny"
template = "chatml"
[[datasets]]
path = "rows.jsonl"
format = "{fmt}"
{extra}
[train]
method = "{method}"
max_length = {max_length}
"""
    )
    return load_config(folder / "gym.toml")


def _chat(*turns: str) -> dict:
    roles = ["user", "assistant"] * len(turns)
    return {"messages": [{"role": r, "content": c} for r, c in zip(roles, turns, strict=False)]}


def _trained_text(tokenizer, row) -> str:
    return tokenizer.decode(
        [t for t, label in zip(row["input_ids"], row["labels"], strict=True) if label != IGNORE_INDEX]
    )


def test_sft_masks_only_answers_and_caches(tmp_path: Path) -> None:
    config = _config(tmp_path, [_chat("Reverse: a b c", "c b a"), _chat("hi", "hello", "bye", "see you")])
    tokenizer = load_tokenizer(config)
    first = prepare_data(config, tokenizer)
    assert [_trained_text(tokenizer, row) for row in first.train] == [
        "c b a<|im_end|>",
        "hello<|im_end|>see you<|im_end|>",
    ]
    assert first.stats.rows == 2 and first.stats.max == max(first.train["length"])
    again = prepare_data(config, tokenizer)
    assert again.from_cache and again.cache_dir == first.cache_dir
    assert again.train["input_ids"] == first.train["input_ids"]
    shorter = prepare_data(
        config.model_copy(update={"train": config.train.model_copy(update={"max_length": 200})}), tokenizer
    )
    assert shorter.cache_dir != first.cache_dir


def test_overlong_conversations_lose_oldest_turns_never_half_an_answer(tmp_path: Path) -> None:
    long_turn = "x " * 120
    rows = [
        _chat(long_turn, long_turn, "last question", "last answer"),  # fits once the first exchange goes
        _chat("q", "a " * 400),  # a single exchange that cannot fit
        _chat("short", "fine"),
    ]
    config = _config(tmp_path, rows, max_length=64, extra="max_skipped_fraction = 0.5")
    tokenizer = load_tokenizer(config)
    prepared = prepare_data(config, tokenizer)
    statuses = dict(zip(prepared.train["index"], prepared.train["status"], strict=True))
    assert statuses == {0: TRUNCATED, 2: "ok"}
    truncated = prepared.train[0]
    assert _trained_text(tokenizer, truncated) == "last answer<|im_end|>"
    assert "x x" not in tokenizer.decode(truncated["input_ids"])
    report = prepared.reports[0]
    assert report.skipped == {TOO_LONG: 1} and report.rows_kept == 2 and report.rows_bad == 0
    assert prepared.stats.truncated == 1 and all(length <= 64 for length in prepared.train["length"])


@pytest.mark.parametrize("users_setting", [None, "true"])
def test_tokenizing_leaves_the_tokenizer_parallelism_setting_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, users_setting: str | None
) -> None:
    """In one process the Rust tokenizer runs on one thread beside the rendering thread, then the
    environment is as before: unset stays unset, a user's own setting is never touched."""
    if users_setting is None:
        monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    else:
        monkeypatch.setenv("TOKENIZERS_PARALLELISM", users_setting)
    config = _config(tmp_path, [_chat(f"q{i}", f"answer {i}") for i in range(80)])
    prepared = prepare_data(config, load_tokenizer(config), num_proc=1)
    assert len(prepared.train) == 80
    assert os.environ.get("TOKENIZERS_PARALLELISM") == users_setting


def test_every_row_too_long_is_one_clear_error(tmp_path: Path) -> None:
    from gym.data.report import DataError

    config = _config(tmp_path, [_chat("q", "a " * 400)], max_length=32)
    with pytest.raises(DataError, match="raise train.max_length"):
        prepare_data(config, load_tokenizer(config))


def test_pretraining_text_is_split_into_blocks(tmp_path: Path) -> None:
    config = _config(
        tmp_path, [{"text": "word " * 100}, {"text": "short"}], fmt="text", method="pt", max_length=32
    )
    tokenizer = load_tokenizer(config)
    prepared = prepare_data(config, tokenizer)
    assert all(length <= 32 for length in prepared.train["length"])
    assert len(prepared.train) > 2
    assert prepared.train[-1]["input_ids"][-1] == tokenizer.eos_token_id
    assert all(row["labels"] == row["input_ids"] for row in prepared.train)


def test_preference_rows_measure_prompt_plus_chosen(tmp_path: Path) -> None:
    rows = [{"prompt": "2+2?", "chosen": "4", "rejected": "5"}]
    config = _config(tmp_path, rows, fmt="preference", method="dpo")
    tokenizer = load_tokenizer(config)
    prepared = prepare_data(config, tokenizer)
    assert _trained_text(tokenizer, prepared.train[0]) == "4<|im_end|>"
    assert json.loads(prepared.train[0]["rejected"])["content"] == "5"


def test_eval_fraction_holds_rows_out(tmp_path: Path) -> None:
    rows = [_chat(f"q{i}", f"a{i}") for i in range(20)]
    config = _config(tmp_path, rows, extra="eval_fraction = 0.25")
    prepared = prepare_data(config, load_tokenizer(config))
    assert len(prepared.train) == 15 and prepared.eval is not None and len(prepared.eval) == 5
    assert not set(prepared.train["index"]) & set(prepared.eval["index"])


def test_glaive_tools_survive_into_the_rendered_text(tmp_path: Path, fixtures_dir: Path) -> None:
    path = fixtures_dir / "llamafactory-data" / "glaive_toolcall_en_demo.json"
    (tmp_path / "gym.toml").write_text(
        f"""
[project]
name = "t"
[model]
name_or_path = "builtin:tiny"
template = "qwen3"
[[datasets]]
path = "{path}"
format = "sharegpt"
columns = {{ messages = "conversations", tools = "tools" }}
max_samples = 20
[train]
max_length = 4096
"""
    )
    config = load_config(tmp_path / "gym.toml")
    tokenizer = load_tokenizer(config)
    prepared = prepare_data(config, tokenizer)
    texts = [tokenizer.decode(ids) for ids in prepared.train["input_ids"]]
    with_calls = [t for t in texts if "<tool_call>" in t]
    assert with_calls and all("<tools>" in t for t in with_calls)
    trained = [_trained_text(tokenizer, row) for row in prepared.train]
    assert any("<tool_call>" in t for t in trained)  # the model learns to call tools
    assert not any("<tool_response>" in t for t in trained)  # but never the tool's output


def test_preview_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [_chat("Reverse: a b", "b a"), {"messages": [{"role": "assistant", "content": "no user"}]}]
    _config(tmp_path, rows, extra="max_bad_fraction = 0.5")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["data", "preview", "-n", "1"])
    assert result.exit_code == 0, result.output
    for words in (
        "sample 1",
        "rows read",
        "length p50 / p95 / max",
        "tokens trained / total",
        "wrong role order",
    ):
        assert words in result.output
    assert "Traceback" not in result.output


def test_preview_reports_unusable_data_in_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "rows.jsonl").write_text('{"nothing": 1}\n')
    (tmp_path / "gym.toml").write_text(
        '[project]\nname = "t"\n[model]\nname_or_path = "builtin:tiny"\n[[datasets]]\npath = "rows.jsonl"\nformat = "alpaca"\n'
    )
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["data", "preview"])
    assert result.exit_code == 1
    assert "error" in result.output and "rows.jsonl" in result.output and "Traceback" not in result.output
