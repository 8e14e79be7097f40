"""Built-in rewards on plain and conversational completions, and resolving 'module.path:function'."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gym.config.training import BUILTIN_REWARDS
from gym.train.rewards import (
    REWARDS,
    RewardError,
    completion_text,
    exact_match,
    length_penalty,
    numeric_match,
    regex_format,
    regex_reward,
    register_reward,
    resolve_rewards,
)


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def test_registry_matches_the_names_the_config_accepts() -> None:
    assert tuple(REWARDS) == BUILTIN_REWARDS


def test_completion_text_of_every_shape() -> None:
    assert completion_text("a b") == "a b"
    assert completion_text(chat("a b")) == "a b"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "x"}]}]) == "x"
    assert completion_text([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]) == "a"


def test_exact_match_on_strings_and_conversations() -> None:
    prompts = ["Reverse: a b c"] * 4
    completions = ["c b a", "  C  B A. ", "a b c", ""]
    expected = [1.0, 1.0, 0.0, 0.0]
    assert exact_match(prompts, completions, reference=["c b a"] * 4) == expected
    assert exact_match(prompts, [chat(c) for c in completions], answer=["c b a"] * 4) == expected


def test_exact_match_reads_solution_and_skips_rows_without_reference() -> None:
    assert exact_match(["p", "q"], ["x", "y"], solution=["x", None]) == [1.0, None]


def test_reward_without_a_reference_column_is_one_sentence() -> None:
    with pytest.raises(
        RewardError, match=r"^reward 'exact_match' needs a reference answer, but the rows have none"
    ):
        exact_match(["p"], ["x"], trainer_state=None)


def test_numeric_match() -> None:
    completions = [
        "The answer is 42.",
        chat(r"so \boxed{3.50}"),
        "1,000 apples",
        "I think 41",
        "no idea",
        "-7",
    ]
    references = ["42", "3.5", "Natalia sold 1000 clips.\n#### 1,000", "42", "42", "the result is -7.0"]
    assert numeric_match(["p"] * 6, completions, reference=references) == [1.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    assert numeric_match(["p"], ["5"], reference=["five"]) == [None]


def test_regex_format_and_custom_patterns() -> None:
    completions = [
        "<think>reverse it</think>\nc b a",
        "c b a",
        "<think>x</think>",
        chat("<think>a</think> b"),
    ]
    assert regex_format(["p"] * 4, completions) == [1.0, 0.0, 0.0, 1.0]
    answer_tag = regex_reward(r".*<answer>.+</answer>\s*", name="answer_tag")
    assert answer_tag.__name__ == "answer_tag"
    assert answer_tag(["p", "p"], ["so <answer>4</answer>", "4"]) == [1.0, 0.0]


def test_length_penalty_within_each_prompt_group() -> None:
    prompts = ["a", "a", "a", "b", "b"]
    completions = ["xx", "xxxx", "xxxxxx", "same", chat("same")]
    assert length_penalty(prompts, completions) == [0.5, 0.0, -0.5, 0.0, 0.0]
    # A wrong answer is never rewarded for being short; token lengths win over characters.
    rewards = length_penalty(
        ["a", "a"], ["c b a", "wrong"], reference=["c b a", "c b a"], completion_ids=[[1], [2, 3]]
    )
    assert rewards == [0.5, -0.5]
    assert length_penalty(["a", "a"], ["x", "wrong"], reference=["x", "x"], completion_ids=[[1, 2], [3]]) == [
        -0.5,
        0.0,
    ]


def test_resolve_builtin_and_module_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_rewards_7f3a.py").write_text(
        "def brevity(prompts, completions, **kwargs):\n    return [1.0 / (1 + len(c)) for c in completions]\n"
    )
    monkeypatch.setattr(sys, "path", list(sys.path))  # resolve_rewards puts base_dir on sys.path
    functions = resolve_rewards(
        ["exact_match", "my_rewards_7f3a:brevity", "gym.train.rewards:numeric_match"], tmp_path
    )
    assert functions[0] is exact_match and functions[2] is numeric_match
    assert functions[1](["p"], ["abc"]) == [0.25]


def test_resolve_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "broken_rewards_7f3a.py").write_text("import not_a_module_7f3a\n")
    (tmp_path / "raising_rewards_7f3a.py").write_text("raise RuntimeError('boom')\nscore = 1\n")
    cases = {
        "exact_mach": r"^unknown reward 'exact_mach' \(did you mean 'exact_match'\?\); built-in rewards: exact_match",
        "no_such_module_7f3a:fn": r"^reward 'no_such_module_7f3a:fn': module 'no_such_module_7f3a' was not found",
        "gym.no_such_7f3a:fn": r"^reward 'gym.no_such_7f3a:fn': module 'gym.no_such_7f3a' was not found",
        "gym.train.rewards:exact_mach": r"has no function 'exact_mach' \(did you mean 'exact_match'\?\)$",
        "gym.train.rewards:REWARD_REFERENCE": r"'REWARD_REFERENCE' in module 'gym.train.rewards' is not a function",
        "broken_rewards_7f3a:f": r"importing module 'broken_rewards_7f3a' failed: No module named 'not_a_module_7f3a'",
        "raising_rewards_7f3a:f": r"importing module 'raising_rewards_7f3a' failed: RuntimeError: boom$",
    }
    for name, message in cases.items():
        with pytest.raises(RewardError, match=message):
            resolve_rewards([name], tmp_path)


def test_register_reward() -> None:
    register_reward("always_one", lambda prompts, completions, **kwargs: [1.0] * len(completions))
    try:
        assert resolve_rewards(["always_one"])[0](["p"], ["c"]) == [1.0]
    finally:
        REWARDS.pop("always_one")
