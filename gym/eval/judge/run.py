"""``[eval.judge]`` run: the tuned model judged against its base (at eval) and the champion (at the gates).

Results go where the other scores are: rows of task ``judge`` in the report (``winrate_vs_base``,
``winrate_vs_champion``, one per rubric criterion: tuned value, base value, Δ, standard error), and a
``judge`` section in ``eval_results.json`` with what produced them (judge model, prompt versions,
generation settings, calls, tokens, cache hits, unreadable verdicts, intervals) and the three prompts
where the models disagreed most, which the pull-request comment shows.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING, Any

from gym.eval.errors import EvalError
from gym.eval.judge.answers import generate_answers, read_answers, write_answers
from gym.eval.judge.client import Ask, Judge, judgment_key
from gym.eval.judge.items import JudgeItem, read_items
from gym.eval.judge.prompts import JudgePrompt, judge_prompt, reference_block
from gym.eval.judge.scoring import pairwise_verdict, rubric_verdict, stderr, summary, tuned_score
from gym.eval.report import EvalReport, TaskScore

if TYPE_CHECKING:
    from gym.config.judge import JudgeConfig
    from gym.config.root import GymConfig

TASK = "judge"
EXAMPLES = 3
EXAMPLE_CHARS = 1500


def judge_run(config: GymConfig, report: EvalReport, tuned_model: str, folder: Path,
              serve_local: Callable[..., Any] | None) -> None:  # fmt: skip
    """Judge the tuned model (and its base) on eval.judge.prompts; add the rows and section to ``report``."""
    settings = _settings(config)
    items = _items(config)
    prompts = _prompts(config)
    judge = Judge(settings, folder)  # a missing key is said before any model is loaded
    generation = settings.generation.model_dump()
    tuned = generate_answers(serve_local, tuned_model, items, generation, "tuned")
    write_answers(folder, items, tuned, generation)
    base = None
    if "base" in settings.pairwise or settings.rubric:
        base = generate_answers(serve_local, config.model.name_or_path, items, generation, "base")
    section = _section(config, items, prompts)
    if "base" in settings.pairwise and base is not None:
        scores = judge_pairwise(judge, prompts["pairwise"], items, tuned, base, "base", section)
        section["examples"] = _examples(items, tuned, base, scores, "base")
    if settings.rubric and base is not None:
        judge_rubric(judge, prompts["rubric"], settings, items, tuned, base, section)
    section["usage"] = judge.usage.as_dict()
    report.results += _rows(section, config)
    report.judge = section


def judge_champion(
    config: GymConfig, folder: Path, answers: bytes | None, label: str, *, required: bool
) -> None:
    """The tuned model against the champion's recorded answers; rows and section rewritten in eval_results.json.

    ``answers`` is the champion's judge_answers.jsonl (None when it has none): then, when a gate needs the
    win rate (``required``), one sentence says why it cannot be computed, else the section notes it.
    """
    from gym.eval.gates import GateError
    from gym.eval.judge.answers import parse_answers

    settings = _settings(config)
    report = EvalReport.read(folder)
    section = dict(report.judge or _section(config, [], _prompts(config)))
    report.results = [r for r in report.results if not (r.task == TASK and r.metric == "winrate_vs_champion")]
    why = None
    theirs: dict[str, str] = {}
    if answers is None:
        why = f"{label} has no judge_answers.jsonl (it was pushed before [eval.judge] was set)"
    else:
        try:
            theirs, generation = parse_answers(answers, f"the judge_answers.jsonl of {label}")
        except ValueError as error:
            why = str(error)
        else:
            if generation and generation != settings.generation.model_dump():
                section["champion_generation"] = generation
    items = _items(config)
    mine, _ = read_answers(folder)
    shared = [item for item in items if item.key in theirs and item.key in mine]
    if why is None and not shared:
        why = f"{label} answered none of the prompts in {settings.prompts} (they changed since it was judged)"
    if why is not None:
        if required:
            raise GateError(
                f"judge.winrate_vs_champion cannot be computed: {why}; push this run with `gym deploy --force` "
                "or remove the gate"
            )
        section.setdefault("pairwise", {})["champion"] = {"note": why, "against": label}
    else:
        judge = Judge(settings, folder)
        tuned = [mine[item.key] for item in shared]
        other = [theirs[item.key] for item in shared]
        scores = judge_pairwise(
            judge, _prompts(config)["pairwise"], shared, tuned, other, "champion", section
        )
        section["pairwise"]["champion"].update(against=label, prompts=len(items))
        if "examples" not in section or not section["examples"]:
            section["examples"] = _examples(shared, tuned, other, scores, "champion")
        usage = section.get("usage") or {}
        section["usage"] = {k: int(usage.get(k, 0)) + v for k, v in judge.usage.as_dict().items()}
    report.judge = section
    report.results += [row for row in _rows(section, config) if row.metric == "winrate_vs_champion"]
    report.write(folder)


def _settings(config: GymConfig) -> JudgeConfig:
    assert config.eval.judge is not None
    return config.eval.judge


def _items(config: GymConfig) -> list[JudgeItem]:
    settings = _settings(config)
    return read_items(config.resolve_path(settings.prompts), settings.prompts, settings.limit)


def _prompts(config: GymConfig) -> dict[str, JudgePrompt]:
    settings = _settings(config)
    try:
        return {
            kind: judge_prompt(kind, config.resolve_path(override) if override else None)
            for kind, override in (("pairwise", settings.pairwise_prompt), ("rubric", settings.rubric_prompt))
        }
    except ValueError as error:
        raise EvalError(str(error)) from None


def _section(config: GymConfig, items: list[JudgeItem], prompts: dict[str, JudgePrompt]) -> dict[str, Any]:
    settings = _settings(config)
    return {
        "model": settings.model,
        "base_url": settings.base_url,
        "prompts": {"file": settings.prompts, "count": len(items)},
        "prompt_versions": {kind: prompt.version for kind, prompt in prompts.items()},
        "generation": settings.generation.model_dump(),
        "pairwise": {},
        "rubric": {},
    }


def judge_pairwise(judge: Judge, prompt: JudgePrompt, items: list[JudgeItem], tuned: list[str], other: list[str],
              against: str, section: dict[str, Any]) -> list[float | None]:  # fmt: skip
    """Each prompt judged in both orders; per-prompt scores (None: no readable verdict) and the summary."""
    model, version = judge.settings.model, prompt.version
    orders = []
    for item, mine, theirs in zip(items, tuned, other, strict=True):
        reference = reference_block(item.reference)
        first = prompt.fill(question=item.question, reference=reference, answer_a=mine, answer_b=theirs)
        second = prompt.fill(question=item.question, reference=reference, answer_a=theirs, answer_b=mine)
        orders.append(
            (judgment_key(model, version, first), first, judgment_key(model, version, second), second)
        )
    readable = lambda text: pairwise_verdict(text) is not None  # noqa: E731
    texts = judge.ask([Ask(k, p, readable) for k1, p1, k2, p2 in orders for k, p in ((k1, p1), (k2, p2))])
    scores: list[float | None] = []
    unparsed = 0
    for k1, _, k2, _ in orders:
        pair = [
            tuned_score(pairwise_verdict(texts[k1]), True),
            tuned_score(pairwise_verdict(texts[k2]), False),
        ]
        unparsed += pair.count(None)
        read = [s for s in pair if s is not None]
        scores.append(mean(read) if read else None)
    _require_readable(
        judge, unparsed, 2 * len(orders), texts[orders[0][0]] if orders else "", "[[A]], [[B]] or [[C]]"
    )
    section["pairwise"][against] = {**summary(scores), "unparsed": unparsed, "verdicts": 2 * len(orders)}
    return scores


def judge_rubric(judge: Judge, prompt: JudgePrompt, settings: JudgeConfig, items: list[JudgeItem], tuned: list[str],
            base: list[str], section: dict[str, Any]) -> None:  # fmt: skip
    criteria = settings.rubric
    listing = "\n".join(f"- {name}: {settings.description(name)}" for name in criteria)
    asks: dict[str, list[str]] = {"tuned": [], "base": []}
    everything = []
    for who, answers in (("tuned", tuned), ("base", base)):
        for item, answer in zip(items, answers, strict=True):
            text = prompt.fill(question=item.question, reference=reference_block(item.reference), answer=answer,
                               criteria=listing)  # fmt: skip
            key = judgment_key(settings.model, prompt.version, text)
            asks[who].append(key)
            everything.append(Ask(key, text, lambda t: None not in rubric_verdict(t, criteria).values()))
    texts = judge.ask(everything)
    unread_total = 0
    for name in criteria:
        values: dict[str, list[int]] = {}
        unread = 0
        for who in ("tuned", "base"):
            found = [rubric_verdict(texts[key], criteria)[name] for key in asks[who]]
            unread += found.count(None)
            values[who] = [v for v in found if v is not None]
        unread_total += unread
        section["rubric"][name] = {
            "tuned": mean(values["tuned"]) if values["tuned"] else None,
            "base": mean(values["base"]) if values["base"] else None,
            "stderr": stderr([float(v) for v in values["tuned"]]),
            "n": len(values["tuned"]),
            "unparsed": unread,
        }
    example = texts[asks["tuned"][0]] if asks["tuned"] else ""
    _require_readable(
        judge, unread_total, 2 * len(items) * len(criteria), example, "a JSON object of 1-10 scores"
    )


def _require_readable(judge: Judge, unparsed: int, total: int, example: str, expected: str) -> None:
    """No readable verdict at all is one sentence (some unreadable ones are counted and reported)."""
    if total and unparsed == total:
        shown = " ".join(example.split())[:80]
        raise EvalError(
            f"{judge.where()} gave no readable verdict in {total} (expected a last line with {expected}; it "
            f"answered e.g. {shown!r}); use a judge that follows the prompt; nothing is pushed"
        )


def _examples(items: list[JudgeItem], tuned: list[str], other: list[str], scores: list[float | None],
              against: str) -> list[dict[str, Any]]:  # fmt: skip
    """The prompts where the two models were judged furthest apart (and, among equals, answered most unlike)."""

    def apart(index: int) -> tuple[float, float]:
        score = scores[index]
        unlike = 1 - difflib.SequenceMatcher(None, tuned[index], other[index]).ratio()
        return (abs(score - 0.5) if score is not None else -1.0, unlike)

    chosen = sorted(range(len(items)), key=apart, reverse=True)[:EXAMPLES]
    return [{"prompt": items[i].question[:EXAMPLE_CHARS], "tuned": tuned[i][:EXAMPLE_CHARS],
             "other": other[i][:EXAMPLE_CHARS], "against": against, "score": scores[i]} for i in chosen]  # fmt: skip


def _rows(section: dict[str, Any], config: GymConfig) -> list[TaskScore]:
    """The table's rows: one per comparison and criterion (task ``judge``)."""
    dataset = {"id": f"local:{Path(_settings(config).prompts).name}", "config": None, "split": None}
    rows = []
    for against, result in section.get("pairwise", {}).items():
        if "winrate" in result:
            rows.append(TaskScore(task=TASK, metric=f"winrate_vs_{against}", value=result["winrate"], source="judge",
                                  stderr=result["stderr"], samples=result["n"], higher_is_better=True,
                                  dataset=dataset))  # fmt: skip
    for name, result in section.get("rubric", {}).items():
        base, value = result["base"], result["tuned"]
        rows.append(TaskScore(task=TASK, metric=name, value=value, source="judge", stderr=result["stderr"],
                              samples=result["n"], base_value=base, higher_is_better=True, dataset=dataset,
                              delta=None if base is None or value is None else value - base))  # fmt: skip
    return rows
