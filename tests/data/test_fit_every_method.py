"""One over-long rule for every method: oldest exchanges dropped first, a row whose answers cannot fit
skipped and counted, and what TRL finally tokenizes never longer than ``max_length``.

Each method's rows go through `prepare_data` and then through the method's own trainer builder, so
the check is made on the sequences TRL itself tokenized from what Gym handed it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym.config import load_config
from gym.data.prepare import prepare_data
from gym.data.tokenize import TOO_LONG, TOO_LONG_PROMPT, TRUNCATED
from gym.model.loading import load_tokenizer

pytestmark = pytest.mark.slow

MAX = 128
LONG_USER, LONG_ANSWER = "x " * 80, "y " * 80  # one old exchange of ~160 tokens: never fits with the rest


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "cache"))


def _chat(*turns: str) -> list[dict]:
    return [{"role": ("user", "assistant")[i % 2], "content": text} for i, text in enumerate(turns)]


def _config(folder: Path, method: str, fmt: str, rows: list[dict], extra: str = ""):
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (folder / "gym.toml").write_text(
        f"""
[project]
name = "t"
output_dir = "out"
[model]
name_or_path = "builtin:tiny"
template = "chatml"
[[datasets]]
path = "rows.jsonl"
format = "{fmt}"
max_skipped_fraction = 0.5
[train]
method = "{method}"
max_length = {MAX}
batch_size = 2
max_steps = 1
{extra}
""",
        encoding="utf-8",
    )
    return load_config(folder / "gym.toml")


def _trainer(config, tokenizer, data, folder: Path):
    from gym.model.adapters import apply_adapter
    from gym.model.loading import load_model
    from gym.train.registry import TrainContext, trainer_for

    context = TrainContext(
        config,
        lambda: apply_adapter(load_model(config, for_training=True), config),
        tokenizer,
        data,
        folder / "checkpoints",
    )
    return trainer_for(config.train.method)(context)


def _statuses(prepared) -> dict[int, str]:
    return dict(zip(prepared.train["index"], prepared.train["status"], strict=True))


def _preference_rows() -> list[dict]:
    return [
        # 0: whole too long; the last exchange with either answer fits -> the old exchange goes
        {"messages": _chat(LONG_USER, LONG_ANSWER, "question a"), "chosen": "ok", "rejected": "no"},
        # 1: prompt + chosen fits, but the rejected answer alone is longer than max_length -> skipped
        {"messages": _chat("question b"), "chosen": "ok", "rejected": "z " * 150},
        # 2: prompt + chosen fits whole; prompt + rejected only without the first exchange
        {"messages": _chat("x " * 30, "y " * 30, "question c"), "chosen": "ok", "rejected": "w " * 60},
        *({"messages": _chat(f"short {i}"), "chosen": "yes", "rejected": "no"} for i in range(5)),
    ]


def _check_fitted_preferences(prepared, tokenizer) -> None:
    statuses = _statuses(prepared)
    assert statuses[0] == TRUNCATED and statuses[2] == TRUNCATED and 1 not in statuses
    assert prepared.reports[0].skipped == {TOO_LONG: 1}
    rows = {row["index"]: row for row in prepared.train}
    assert json.loads(rows[0]["messages"]) == _chat("question a")  # the kept conversation is handed on
    assert json.loads(rows[2]["messages"]) == _chat("question c")
    assert rows[2]["full_length"] > MAX >= rows[2]["length"]
    for row in prepared.train:  # both sequences of every kept row fit, measured independently
        prompt = json.loads(row["messages"])
        for answer in (row["chosen"], row["rejected"]):
            ids = tokenizer.apply_chat_template([*prompt, json.loads(answer)], tokenize=True)
            assert len(ids["input_ids"] if isinstance(ids, dict) else ids) <= MAX


def test_dpo_measures_the_rejected_answer_and_trl_never_truncates(tmp_path: Path) -> None:
    config = _config(tmp_path, "dpo", "preference", _preference_rows())
    tokenizer = load_tokenizer(config)
    prepared = prepare_data(config, tokenizer)
    _check_fitted_preferences(prepared, tokenizer)
    trainer = _trainer(config, tokenizer, prepared, tmp_path)
    tokenized = trainer.train_dataset
    assert len(tokenized) == len(prepared.train)  # TRL dropped nothing
    for row in tokenized:
        for answer in ("chosen_ids", "rejected_ids"):
            assert len(row["prompt_ids"]) + len(row[answer]) <= MAX
    rejected = [tokenizer.decode(row["rejected_ids"]) for row in tokenized]
    assert any(("w " * 60).strip() in text for text in rejected)  # the long rejected answer is whole


def test_reward_model_rows_fit_whole(tmp_path: Path) -> None:
    config = _config(tmp_path, "rm", "preference", _preference_rows())
    tokenizer = load_tokenizer(config)
    prepared = prepare_data(config, tokenizer)
    _check_fitted_preferences(prepared, tokenizer)
    trainer = _trainer(config, tokenizer, prepared, tmp_path)
    tokenized = trainer.train_dataset
    assert len(tokenized) == len(prepared.train)  # RewardTrainer filters rows over max_length: none here
    assert all(len(r["chosen_ids"]) <= MAX and len(r["rejected_ids"]) <= MAX for r in tokenized)


def test_kto_conversations_lose_old_turns_and_long_answers_are_skipped(tmp_path: Path) -> None:
    rows = [
        {"messages": _chat(LONG_USER, LONG_ANSWER, "question a", "answer a"), "label": True},
        {"messages": _chat("question b", "z " * 150), "label": False},
        *({"messages": _chat(f"short {i}", f"answer {i}"), "label": bool(i % 2)} for i in range(6)),
    ]
    config = _config(tmp_path, "kto", "kto", rows)
    tokenizer = load_tokenizer(config)
    prepared = prepare_data(config, tokenizer)
    statuses = _statuses(prepared)
    assert statuses[0] == TRUNCATED and 1 not in statuses
    assert prepared.reports[0].skipped == {TOO_LONG: 1}
    kept = {row["index"]: json.loads(row["messages"]) for row in prepared.train}
    assert kept[0] == _chat("question a", "answer a")
    trainer = _trainer(config, tokenizer, prepared, tmp_path)
    tokenized = trainer.train_dataset
    assert len(tokenized) == len(prepared.train)
    assert all(len(r["prompt_ids"]) + len(r["completion_ids"]) <= MAX for r in tokenized)


def test_grpo_prompts_leave_room_for_the_completions(tmp_path: Path) -> None:
    completion = 32
    rows = [
        {"messages": _chat(LONG_USER, LONG_ANSWER, "question a"), "answer": "a"},
        {"prompt": "z " * 120, "answer": "b"},  # a prompt that cannot leave 32 tokens free: skipped
        *({"prompt": f"short {i}", "answer": str(i)} for i in range(6)),
    ]
    config = _config(
        tmp_path,
        "grpo",
        "prompt",
        rows,
        f"[train.grpo]\ngroup_size = 2\nmax_completion_length = {completion}",
    )
    tokenizer = load_tokenizer(config)
    prepared = prepare_data(config, tokenizer)
    statuses = _statuses(prepared)
    assert statuses[0] == TRUNCATED and 1 not in statuses
    assert prepared.reports[0].skipped == {TOO_LONG_PROMPT: 1}
    assert prepared.stats.limit == MAX - completion
    trainer = _trainer(config, tokenizer, prepared, tmp_path)
    for row in trainer.train_dataset:
        ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
        assert len(ids["input_ids"] if isinstance(ids, dict) else ids) + completion <= MAX
    first = next(r for r in trainer.train_dataset if r["reference"] == "a")
    assert first["prompt"][-1]["content"] == "question a" and len(first["prompt"]) == 1


def test_sft_row_used_as_grpo_prompt_keeps_its_reference_answer(tmp_path: Path) -> None:
    rows = [
        {"messages": _chat(LONG_USER, LONG_ANSWER, "question a", "the reference")},
        *({"messages": _chat(f"short {i}", str(i))} for i in range(4)),
    ]
    config = _config(
        tmp_path, "grpo", "openai", rows, "[train.grpo]\ngroup_size = 2\nmax_completion_length = 32"
    )
    tokenizer = load_tokenizer(config)
    prepared = prepare_data(config, tokenizer)
    kept = {row["index"]: json.loads(row["messages"]) for row in prepared.train}
    assert kept[0] == _chat("question a", "the reference")  # old exchange gone, reference kept


def test_a_completion_as_long_as_max_length_is_refused_at_validation(tmp_path: Path) -> None:
    from gym.config import ConfigError

    with pytest.raises(ConfigError) as error:
        _config(
            tmp_path,
            "grpo",
            "prompt",
            [{"prompt": "q", "answer": "a"}],
            "[train.grpo]\nmax_completion_length = 128",
        )
    (issue,) = error.value.issues
    assert "gym.toml:" in str(issue) and "max_completion_length = 128 leaves no room for the prompt" in str(
        issue
    )
