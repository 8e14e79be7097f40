"""The fast preprocessing path gives the tokens HF's own chat template gives, row for row.

`prepare_data` tokenizes in threads or worker processes, renders Gym's templates outside the Jinja
sandbox and measures over-long rows from the tokens of the whole row (gym/data/splice.py). The
reference here owes nothing to that code: ``tokenizer.apply_chat_template(messages, tools=...,
return_assistant_tokens_mask=True)`` on the conversation as kept (sandboxed transformers rendering,
one plain tokenizer call, its own assistant mask). Every kept row of the real fixtures must match it
exactly, including the rows that lost their oldest exchanges.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gym.data.prepare as prepare
from gym.config import load_config
from gym.data.prepare import prepare_data
from gym.data.splice import AddedTokens, splice
from gym.data.templates import IGNORE_INDEX, TEMPLATES
from gym.data.templates.render import render_chat_generation
from gym.data.tokenize import TRUNCATED
from gym.model.loading import load_tokenizer

pytestmark = pytest.mark.slow

CASES = {  # fixture: (format, template, extra keys)
    "alpaca_en_demo": ("alpaca", "chatml", ""),
    "alpaca_zh_demo": ("alpaca", "chatml", ""),  # Chinese: token positions past multi-byte characters
    "glaive_toolcall_en_demo": (
        "sharegpt",
        "qwen3",
        'columns = { messages = "conversations", tools = "tools" }',
    ),
}


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "gym-cache"))


def _config(folder: Path, data: Path, fmt: str, template: str, extra: str, max_length: int):
    (folder / "gym.toml").write_text(f"""
[project]
name = "t"
[model]
name_or_path = "builtin:tiny"
template = "{template}"
[[datasets]]
path = "{data}"
format = "{fmt}"
max_bad_fraction = 1.0
max_skipped_fraction = 1.0
{extra}
[train]
max_length = {max_length}
""")  # fmt: skip
    return load_config(folder / "gym.toml")


def _reference(tokenizer, row) -> tuple[list[int], list[int]]:
    """The row's conversation as kept, tokenized and masked by transformers alone."""
    out = tokenizer.apply_chat_template(
        json.loads(row["messages"]),
        tools=json.loads(row["tools"]) or None,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    ids = list(out["input_ids"])
    return ids, [t if m else IGNORE_INDEX for t, m in zip(ids, out["assistant_masks"], strict=True)]


def _assert_matches_reference(tokenizer, train) -> None:
    mismatched = []
    for row in train:
        ids, labels = _reference(tokenizer, row)
        if ids != list(row["input_ids"]) or labels != list(row["labels"]):
            mismatched.append(row["index"])
    assert not mismatched, f"rows whose tokens or labels differ from apply_chat_template: {mismatched[:10]}"


@pytest.mark.parametrize(("name", "max_length"), [("alpaca_en_demo", 2048), ("alpaca_zh_demo", 2048),
                                                  ("glaive_toolcall_en_demo", 2048), ("glaive_toolcall_en_demo", 768)])  # fmt: skip
def test_fixture_rows_match_the_tokenizers_own_template(
    tmp_path: Path, fixtures_dir: Path, name: str, max_length: int
) -> None:
    fmt, template, extra = CASES[name]
    data = fixtures_dir / "llamafactory-data" / f"{name}.json"
    config = _config(tmp_path, data, fmt, template, extra, max_length)
    tokenizer = load_tokenizer(config)
    prepared = prepare_data(config, tokenizer, num_proc=1)
    train = prepared.train
    assert len(train) > 0.09 * len(json.loads(data.read_text()))
    assert max(train["length"]) <= max_length
    if name.startswith("glaive"):  # over-long conversations were fitted (their oldest exchanges dropped)
        assert train["status"].count(TRUNCATED) > 20
    _assert_matches_reference(tokenizer, train)


def test_worker_processes_give_what_one_process_gives(
    tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fmt, template, extra = CASES["glaive_toolcall_en_demo"]
    data = fixtures_dir / "llamafactory-data" / "glaive_toolcall_en_demo.json"
    config = _config(tmp_path, data, fmt, template, extra, 1024)
    tokenizer = load_tokenizer(config)
    alone = prepare_data(config, tokenizer, num_proc=1, use_cache=False)
    monkeypatch.setattr(prepare, "PARALLEL_FROM_ROWS", 0)  # 300 rows: below the size that starts workers
    workers = prepare_data(config, tokenizer, num_proc=2, use_cache=False)
    assert workers.train.to_dict() == alone.train.to_dict()
    assert workers.summary() == alone.summary()
    assert workers.summary()["rows_truncated"] > 0


def _turns(count: int, words: int) -> list[dict]:
    messages = []
    for k in range(count):
        messages.append({"role": "user", "content": f"question {k}: " + " ".join(["tell me more"] * words)})
        messages.append({"role": "assistant", "content": f"answer {k}: " + " ".join(["here it is"] * words)})
    return messages


@pytest.mark.parametrize("template", ["chatml", "vicuna"])
def test_fitted_rows_match_the_reference_with_and_without_special_token_cuts(
    tmp_path: Path, template: str
) -> None:
    """chatml opens each turn with <|im_start|> (fitted rows are measured from the whole row's tokens);
    vicuna's ``USER:`` is plain text, so its fitted rows are tokenized again. Both match transformers."""
    rows = [
        {"messages": [{"role": "system", "content": "Be brief."}, *_turns(6 + k % 3, 8 + k)]}
        for k in range(12)
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = _config(tmp_path, data, "openai", template, "", 420)
    tokenizer = load_tokenizer(config)
    train = prepare_data(config, tokenizer, num_proc=1).train
    assert train["status"].count(TRUNCATED) >= 10
    for row in train:  # the system prompt stays, whole exchanges are dropped from the front
        kept = json.loads(row["messages"])
        assert kept[0]["role"] == "system" and kept[1]["role"] == "user" and kept[-1]["role"] == "assistant"
    if template == "chatml":
        _assert_matches_reference(tokenizer, train)
    else:  # vicuna: compare with one fresh render + tokenization per row (HF's mask differs at a space)
        from gym.data.templates import tokenize_with_mask

        for row in train:
            ids, labels = tokenize_with_mask(
                tokenizer, json.loads(row["messages"]), TEMPLATES[template].jinja
            )
            assert (ids, labels) == (list(row["input_ids"]), list(row["labels"]))


def test_splice_needs_cuts_before_special_tokens(tmp_path: Path) -> None:
    config = _config(tmp_path, tmp_path / "unused.json", "openai", "chatml", "", 256)
    tokenizer = load_tokenizer(config)
    added = AddedTokens.of(tokenizer)
    assert added is not None
    messages = [{"role": "system", "content": "Be brief."}, *_turns(3, 2)]
    kept = messages[:1] + messages[3:]  # the first exchange dropped
    for template, expect_cut in (("chatml", True), ("vicuna", False)):
        jinja = TEMPLATES[template].jinja
        whole_text, whole_spans = render_chat_generation(tokenizer, messages, jinja)
        text, spans = render_chat_generation(tokenizer, kept, jinja)
        encoding = tokenizer.backend_tokenizer.encode(whole_text, add_special_tokens=False)
        cut = splice(whole_text, encoding, encoding.ids, whole_spans, text, spans, added)
        assert (cut is not None) == expect_cut, template
        if cut is not None:
            i, j = cut
            fresh = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
            assert encoding.ids[:i] + encoding.ids[j:] == fresh
    # a rendering that is not the whole text with one stretch cut out is never spliced
    jinja = TEMPLATES["chatml"].jinja
    whole_text, whole_spans = render_chat_generation(tokenizer, messages, jinja)
    edited = [dict(m) for m in kept]
    edited[-1]["content"] += "!"
    text, spans = render_chat_generation(tokenizer, edited, jinja)
    encoding = tokenizer.backend_tokenizer.encode(whole_text, add_special_tokens=False)
    assert splice(whole_text, encoding, encoding.ids, whole_spans, text, spans, added) is None


def test_held_out_rows_all_too_long_still_train_and_cache(tmp_path: Path) -> None:
    """When every held-out row is skipped as too long, training goes on without an eval split; the
    cache entry is complete (an empty saved split used to make it unreadable)."""
    from gym.data.loading import split_eval

    count = 8
    config = _config(tmp_path, tmp_path / "rows.jsonl", "openai", "chatml", "eval_fraction = 0.25", 256)
    _, held = split_eval(list(range(count)), 0.25, config.train.seed)  # the rows the seed holds out
    rows = [
        {"messages": _turns(1, 150 if index in held else 2)} for index in range(count)
    ]  # held-out rows: one long exchange, nothing older to drop
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tokenizer = load_tokenizer(config)
    first = prepare_data(config, tokenizer)
    assert first.eval is None and len(first.train) == count - len(held)
    summary = first.summary()
    assert (summary["rows_skipped"], summary["rows_held_out"], summary["rows_trained"]) == (len(held), 0, 6)
    again = prepare_data(config, tokenizer)
    assert again.from_cache and again.eval is None and again.train.to_dict() == first.train.to_dict()
