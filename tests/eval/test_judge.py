"""[eval.judge] through the real ``openai`` client against a deterministic local judge (tests/eval/judge_double.py).

The judge's answers are fixed functions of Gym's prompts, so every win rate, interval and count here is
exact: the order swap turns an always-"A" judge into exactly 0.5, a judge that prefers the reference gives
the reference answers a win rate of 1, the cache makes a rerun free, and a judge that answers garbage or
HTTP 500 is one sentence with the unreadable verdicts counted.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gym.config.judge import JudgeConfig
from gym.eval.errors import EvalError
from gym.eval.judge.client import CACHE_FILE, Judge
from gym.eval.judge.items import JudgeItem, read_items
from gym.eval.judge.prompts import judge_prompt
from gym.eval.judge.render import judge_markdown
from gym.eval.judge.run import judge_pairwise, judge_rubric
from gym.eval.judge.scoring import Z95
from tests.eval.judge_double import JudgeDouble, closeness

WORDS = ["cat", "tree", "stone", "river", "lamp", "cloud", "bird", "door"]
ITEMS = [
    JudgeItem([{"role": "user", "content": f"Reverse: {' '.join(w)}"}], " ".join(reversed(w))) for w in WORDS
]
RIGHT = [item.reference or "" for item in ITEMS]
WRONG = ["x y z"] * len(ITEMS)


def settings(url: str, **keys: object) -> JudgeConfig:
    return JudgeConfig.model_validate({"base_url": url, "model": "judge-1", "prompts": "p.jsonl", **keys})


def pairwise(judge: Judge, tuned: list[str], other: list[str], items: list[JudgeItem] = ITEMS) -> dict:
    section: dict = {"pairwise": {}}
    judge_pairwise(judge, judge_prompt("pairwise"), items, tuned, other, "base", section)
    return section["pairwise"]["base"]


def test_the_order_swap_cancels_a_judge_that_always_says_a(tmp_path: Path) -> None:
    with JudgeDouble(mode="biased") as double:
        same = pairwise(Judge(settings(double.url), tmp_path / "same"), RIGHT, RIGHT)
        apart = pairwise(Judge(settings(double.url), tmp_path / "apart"), RIGHT, WRONG)
    assert same["winrate"] == 0.5 and apart["winrate"] == 0.5  # exactly: each prompt wins once and loses once
    assert same["ties"] == len(WORDS) and same["unparsed"] == 0 and same["verdicts"] == 2 * len(WORDS)
    # identical answers make both orders one and the same judge prompt: asked once, read both ways
    assert double.calls == len(WORDS) + 2 * len(WORDS)


def test_a_judge_that_prefers_the_reference_gives_the_reference_answers_every_win(tmp_path: Path) -> None:
    with JudgeDouble() as double:
        result = pairwise(Judge(settings(double.url), tmp_path), RIGHT, WRONG)
        reverse = pairwise(Judge(settings(double.url), tmp_path / "other"), WRONG, RIGHT)
    n = len(WORDS)
    assert (result["winrate"], result["wins"], result["losses"], result["n"]) == (1.0, n, 0, n)
    assert result["stderr"] == 0.0 and result["ci_high"] == 1.0
    assert result["ci_low"] == pytest.approx(n / (n + Z95**2))  # Wilson's lower bound at p = 1
    assert reverse["winrate"] == 0.0 and reverse["losses"] == n


def test_a_rerun_pays_no_judge_call(tmp_path: Path) -> None:
    with JudgeDouble() as double:
        first = Judge(settings(double.url), tmp_path)
        pairwise(first, RIGHT, WRONG)
        calls = double.calls
        again = Judge(settings(double.url), tmp_path)
        assert pairwise(again, RIGHT, WRONG)["winrate"] == 1.0
    assert calls == 2 * len(WORDS) and double.calls == calls
    assert (first.usage.calls, again.usage.calls, again.usage.cached) == (calls, 0, calls)
    assert len((tmp_path / CACHE_FILE).read_text().splitlines()) == calls
    # another judge model is another judgment: nothing of the cache applies
    with JudgeDouble() as double:
        pairwise(Judge(settings(double.url, model="judge-2"), tmp_path), RIGHT, WRONG)
    assert double.calls == 2 * len(WORDS)


def test_garbage_verdicts_are_counted_and_none_at_all_is_one_sentence(tmp_path: Path) -> None:
    half = len(WORDS) // 2
    with JudgeDouble() as double:  # half the prompts judged (and cached) by a judge that answers properly
        pairwise(Judge(settings(double.url), tmp_path), RIGHT[:half], WRONG[:half], ITEMS[:half])
    with JudgeDouble(mode="garbage") as double:
        mixed = pairwise(Judge(settings(double.url), tmp_path), RIGHT, WRONG)
        assert double.calls == 2 * (len(WORDS) - half)
        assert (mixed["unparsed"], mixed["verdicts"], mixed["n"], mixed["winrate"]) == (
            2 * (len(WORDS) - half), 2 * len(WORDS), half, 1.0,
        )  # fmt: skip
        assert len((tmp_path / CACHE_FILE).read_text().splitlines()) == 2 * half  # garbage is asked again
        with pytest.raises(EvalError) as raised:
            pairwise(Judge(settings(double.url), tmp_path / "fresh"), RIGHT, WRONG)
    assert str(raised.value) == (
        f"the judge judge-1 at {double.url} gave no readable verdict in {2 * len(WORDS)} (expected a last line "
        "with [[A]], [[B]] or [[C]]; it answered e.g. 'Both answers have their merits; I would rather not choose.'); "
        "use a judge that follows the prompt; nothing is pushed"
    )


def test_a_judge_that_answers_500_is_one_sentence_after_three_tries(tmp_path: Path) -> None:
    with JudgeDouble(mode="error") as double, pytest.raises(EvalError) as raised:
        pairwise(Judge(settings(double.url, concurrency=1), tmp_path), RIGHT, WRONG)
    assert str(raised.value) == (
        f"the judge judge-1 at {double.url} answered HTTP 500 (3 tries); retry later or use another judge; "
        "nothing is pushed"
    )
    assert double.calls == 3 and not (tmp_path / CACHE_FILE).exists()


def test_an_unreachable_judge_is_one_sentence(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    with pytest.raises(EvalError) as raised:
        pairwise(Judge(settings(url, concurrency=1), tmp_path), RIGHT[:1], WRONG[:1], ITEMS[:1])
    assert str(raised.value) == (
        f"cannot reach the judge judge-1 at {url} (APIConnectionError, 3 tries); start it or fix "
        "eval.judge.base_url; nothing is pushed"
    )


def test_the_caps_refuse_before_the_first_call(tmp_path: Path) -> None:
    with JudgeDouble() as double:
        with pytest.raises(EvalError) as calls:
            pairwise(Judge(settings(double.url, max_calls=15), tmp_path), RIGHT, WRONG)
        with pytest.raises(EvalError) as tokens:
            pairwise(Judge(settings(double.url, max_tokens=1000), tmp_path), RIGHT, WRONG)
        assert double.calls == 0
        pairwise(Judge(settings(double.url, max_calls=16), tmp_path), RIGHT, WRONG)  # exactly enough
    assert str(calls.value) == (
        "eval.judge needs 16 judge calls (0 more are cached), more than eval.judge.max_calls = 15; raise the cap "
        "or judge fewer prompts (eval.judge.limit)"
    )
    assert str(tokens.value).startswith("eval.judge needs about ") and "eval.judge.max_tokens = 1,000" in str(
        tokens.value
    )


def test_the_key_is_sent_to_the_judge_and_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-judge-" + "J" * 30
    with JudgeDouble() as double:
        monkeypatch.delenv("GYM_TEST_JUDGE_KEY", raising=False)
        with pytest.raises(EvalError) as missing:
            Judge(settings(double.url, api_key_env="GYM_TEST_JUDGE_KEY"), tmp_path)
        monkeypatch.setenv("GYM_TEST_JUDGE_KEY", key)
        pairwise(Judge(settings(double.url, api_key_env="GYM_TEST_JUDGE_KEY"), tmp_path), RIGHT[:1], WRONG[:1],
                 ITEMS[:1])  # fmt: skip
    assert str(missing.value) == (
        f"eval.judge.api_key_env: $GYM_TEST_JUDGE_KEY is not set, and the judge at {double.url} needs its key; "
        "set it, or remove api_key_env for an endpoint that needs none"
    )
    assert double.auth == [f"Bearer {key}"] * 2
    assert key not in (tmp_path / CACHE_FILE).read_text()


def test_rubric_scores_per_criterion_with_their_standard_error(tmp_path: Path) -> None:
    section: dict = {"rubric": {}}
    with JudgeDouble() as double:
        config = settings(
            double.url, pairwise=[], rubric=["helpfulness", "tone"], criteria={"tone": "Is it friendly?"}
        )
        judge_rubric(Judge(config, tmp_path), judge_prompt("rubric"), config, ITEMS, RIGHT, WRONG, section)
    assert double.calls == 2 * len(WORDS)  # one call per answer scores every criterion
    for name in ("helpfulness", "tone"):
        result = section["rubric"][name]
        assert (result["tuned"], result["stderr"], result["n"], result["unparsed"]) == (
            10,
            0.0,
            len(WORDS),
            0,
        )
        base = [1 + round(9 * closeness(wrong, right)) for wrong, right in zip(WRONG, RIGHT, strict=True)]
        assert result["base"] == sum(base) / len(base)


def test_prompts_file_mistakes_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(
        '{"prompt": "hi", "reference": "hello"}\n\n{"messages": [{"role": "user", "content": 3}]}\n'
    )
    with pytest.raises(EvalError) as raised:
        read_items(path, "eval/p.jsonl")
    assert str(raised.value) == (
        "eval.judge.prompts: eval/p.jsonl line 3: each turn of 'messages' needs a role (system, user, assistant) "
        "and text content"
    )
    path.write_text('{"prompt": "hi", "reference": "hello"}\nnot json\n')
    with pytest.raises(EvalError, match=r"^eval.judge.prompts: eval/p.jsonl line 2: not a JSON object$"):
        read_items(path, "eval/p.jsonl")
    assert [i.question for i in read_items(path, "eval/p.jsonl", limit=1)] == ["hi"]
    with pytest.raises(EvalError, match=r"eval/none.jsonl does not exist"):
        read_items(tmp_path / "none.jsonl", "eval/none.jsonl")


def test_prompts_are_versioned_and_a_user_file_is_recorded_by_its_hash(tmp_path: Path) -> None:
    assert judge_prompt("pairwise").version == "pairwise_v1" and judge_prompt("rubric").version == "rubric_v1"
    mine = tmp_path / "mine.txt"
    mine.write_text("Q {{question}} R {{reference}} A {{answer_a}} B {{answer_b}} say [[A]] or [[B]]")
    prompt = judge_prompt("pairwise", mine)
    assert prompt.version.startswith("file:mine.txt@") and len(prompt.version) == len("file:mine.txt@") + 12
    assert (
        prompt.fill(question="{x}", reference="", answer_a="1", answer_b="2")
        == "Q {x} R  A 1 B 2 say [[A]] or [[B]]"
    )
    mine.write_text("Q {{question}} A {{answer_a}}")
    with pytest.raises(ValueError) as raised:
        judge_prompt("pairwise", mine)
    assert str(raised.value) == (
        f"eval.judge.pairwise_prompt: {mine} has no {{{{reference}}}} placeholder; a pairwise prompt holds "
        "{{question}}, {{reference}}, {{answer_a}}, {{answer_b}} (see Gym's pairwise_v1.txt)"
    )


def test_the_config_checks_judge_gates_and_criteria_offline() -> None:
    from gym.config.root import GymConfig

    def config(rules: list[str], **judge: object) -> GymConfig:
        return GymConfig.model_validate({
            "project": {"name": "x"}, "model": {"name_or_path": "builtin:tiny"},
            "datasets": [{"path": "d.jsonl", "format": "alpaca"}],
            "eval": {"gates": {"rules": rules},
                     "judge": {"base_url": "http://127.0.0.1:1/v1", "model": "m", "prompts": "p.jsonl", **judge}},
        })  # fmt: skip

    good = config(
        ["judge.winrate_vs_base >= 0.55", "judge.helpfulness >= base + 0.5"], rubric=["helpfulness"]
    )
    assert good.eval.judge is not None and good.eval.judge.metrics == {
        "winrate_vs_base": True,
        "helpfulness": True,
    }
    with pytest.raises(Exception) as wrong:
        config(["judge.winrate_vs_champion >= 0.55"], pairwise=["base", "champion"])
    assert "the champion is the model the [hub] repository holds, and this config has no [hub] table" in str(
        wrong.value
    )
    with pytest.raises(Exception) as undescribed:
        config([], rubric=["tone"])
    assert "rubric criterion 'tone' has no description: add tone = '...' to [eval.judge.criteria]" in str(
        undescribed.value
    )
    with pytest.raises(Exception) as secret:
        config([], base_url="https://user:sk-abc@judge.example/v1")
    assert "the URL holds credentials" in str(secret.value)


def test_the_comment_shows_hostile_answers_as_their_characters() -> None:
    hostile = "```\n</details><img src=x onerror=alert(1)> @acme/team [link](https://evil.example)"
    section = {
        "model": "judge-1", "prompt_versions": {"pairwise": "pairwise_v1"},
        "generation": {"temperature": 0.0, "max_tokens": 64, "seed": 0}, "prompts": {"count": 1},
        "usage": {"calls": 2, "cached": 0, "tokens": 99},
        "pairwise": {"base": {"winrate": 1.0, "ci_low": 0.21, "ci_high": 1.0, "wins": 1, "ties": 0, "losses": 0,
                              "unparsed": 0, "verdicts": 2}},
        "examples": [{"prompt": hostile, "tuned": "ok", "other": hostile, "against": "base", "score": 1.0}],
    }  # fmt: skip
    text = judge_markdown(section)
    assert "| vs base | 1.0000 | 0.21–1.00 | 1 / 0 / 0 | 0 of 2 |" in text
    assert "judge calls, 0 cached, 99 tokens" in text
    # the hostile text only ever sits inside a fence of four backticks, which its three cannot close
    inside = text.split("````text\n")
    assert len(inside) == 3 and all(
        part.split("\n````\n")[0].startswith(("```", "ok")) for part in inside[1:]
    )
    outside = "".join(part.split("\n````\n", 1)[-1] for part in inside)
    assert outside.count("</details>") == 1 and "<img" not in outside and "@acme" not in outside
    assert judge_markdown({}) == "" and judge_markdown(["not", "a", "section"]) == ""
    damaged = judge_markdown(
        {"model": "m", "pairwise": {"base": {"winrate": "1", "wins": True}}, "examples": 3}
    )
    assert "| vs base | — | —–— | 0 / 0 / 0 | 0 of 0 |" in damaged  # wrong kinds are shown as absent
