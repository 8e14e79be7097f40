"""``[eval.gates]``: the rules a run's scores must meet before it is pushed, parsed and checked here.

A rule reads ``TASK.METRIC OP BOUND``, for example::

    gym_reverse.exact_match >= 0.9                 # an absolute threshold
    mmlu.acc >= base - 0.01                        # against the base model, scored in the same run
    held-out.eval_loss <= champion                 # against the model the [hub] repo holds now
    gym_reverse.exact_match >= champion + 2*stderr # beyond noise: stderr of the difference

``OP`` is one of ``>=``, ``>``, ``<=``, ``<``. ``BOUND`` is a number, or ``base`` / ``champion``
plus or minus numbers and multiples of ``stderr`` (the standard error of the difference between this
run's score and the reference). ``METRIC`` may name a filter as lm-eval does (``exact_match,strict-match``).

This module is plain Python (no lm-eval, no Hub) so `gym validate` stays fast.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field

from gym.config.base import Section, fail

if TYPE_CHECKING:
    from gym.config.root import GymConfig

Reference = Literal["threshold", "base", "champion"]
OPERATORS = (">=", "<=", ">", "<")
RULE = re.compile(
    r"^\s*(?P<task>[^\s<>=]+)\.(?P<metric>[A-Za-z_][\w\-]*(?:,[\w\-]+)?)\s*(?P<op>>=|<=|>|<)\s*(?P<bound>.*)$"
)
NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
TERM = re.compile(
    rf"\s*(?P<sign>[+-])?\s*(?:(?P<k>{NUMBER})\s*\*\s*stderr|(?P<word>base|champion|stderr)|(?P<n>{NUMBER}))\s*"
)
EXAMPLE = (
    "e.g. 'gym_reverse.exact_match >= 0.9', 'mmlu.acc >= base - 0.01' or 'held-out.eval_loss <= champion'"
)

# Metrics whose direction is known without running the task: lm-eval's usual names and Gym's own.
LOWER_IS_BETTER = {
    "eval_loss",
    "loss",
    "perplexity",
    "word_perplexity",
    "byte_perplexity",
    "bits_per_byte",
    "ter",
}
HIGHER_IS_BETTER = {"acc", "acc_norm", "exact_match", "f1", "bleu", "rouge1", "rouge2", "rougeL", "mcc",
                    "reward_accuracy", "reward_margin", "reward", "chrf", "pass@1"}  # fmt: skip
# Gym's own tasks and what they score (gym/eval/builtin_tasks.py, gym/eval/vision_tasks.py; a test keeps
# them equal), as plain data so `gym validate` never imports the eval layer.
GYM_TASK_METRICS = {"gym_reverse": {"exact_match": True}, "gym_colour": {"exact_match": True}}
HELD_OUT = "held-out"
HELD_OUT_METRICS = ("eval_loss", "reward_accuracy", "reward_margin", "reward")
JUDGE = "judge"  # the LLM judge's scores ([eval.judge]): winrate_vs_base, winrate_vs_champion, criteria


@dataclass(frozen=True)
class Gate:
    """One parsed rule: ``task.metric op reference + offset + stderrs * stderr``."""

    text: str
    task: str
    metric: str  # lm-eval's metric name, without the filter
    filter: str  # "none" unless the rule names one after a comma
    op: str
    reference: Reference
    offset: float = 0.0
    stderrs: float = 0.0

    @property
    def needs_champion(self) -> bool:
        """Whether the rule reads the champion: compares with it, or is the judge's win rate against it."""
        return self.reference == "champion" or (self.task == JUDGE and self.metric == "winrate_vs_champion")

    @property
    def wants_higher(self) -> bool:
        return self.op in (">=", ">")

    @property
    def label(self) -> str:
        """The metric as the results table shows it: ``acc`` or ``exact_match (strict-match)``."""
        return self.metric if self.filter == "none" else f"{self.metric} ({self.filter})"


def parse_gate(text: str) -> Gate:
    """The rule as a :class:`Gate`; raises ValueError with one sentence saying what is wrong."""
    match = RULE.match(text)
    if match is None:
        raise ValueError(
            f"expected a rule 'TASK.METRIC OP BOUND' with OP one of >=, >, <=, <, got {text!r} ({EXAMPLE})"
        )
    metric, _, filt = match["metric"].partition(",")
    bound, position = match["bound"], 0
    reference: Reference = "threshold"
    offset = stderrs = 0.0
    while position < len(bound):
        term = TERM.match(bound, position)
        if term is None or term.end() == position or (position and term["sign"] is None):
            raise ValueError(
                f"cannot read the bound {bound.strip()!r} of {text!r}: write a number, or 'base' or 'champion' "
                f"plus or minus numbers and multiples of stderr ({EXAMPLE})"
            )
        sign = -1.0 if term["sign"] == "-" else 1.0
        if term["word"] in ("base", "champion"):
            if reference != "threshold" or sign < 0:
                raise ValueError(f"{text!r} may compare with one reference, added once: 'base' or 'champion'")
            reference = term["word"]
        elif term["word"] == "stderr" or term["k"] is not None:
            stderrs += sign * (float(term["k"]) if term["k"] is not None else 1.0)
        else:
            offset += sign * float(term["n"])
        position = term.end()
    if not bound.strip():
        raise ValueError(f"{text!r} has nothing after {match['op']!r} ({EXAMPLE})")
    if stderrs and reference == "threshold":
        raise ValueError(
            f"{text!r} uses stderr, the standard error of a difference, without 'base' or 'champion' to differ from"
        )
    return Gate(text.strip(), match["task"], metric, filt or "none", match["op"], reference, offset, stderrs)


def _check_rule(value: str) -> str:
    try:
        parse_gate(value)
    except ValueError as error:
        raise fail(str(error)) from None
    return value


Rule = Annotated[str, AfterValidator(_check_rule)]


class GatesConfig(Section):
    """Promotion gates: a run is pushed to [hub] (and its Space) only when every rule holds."""

    rules: list[Rule] = Field(
        default_factory=list,
        description="Rules 'TASK.METRIC OP BOUND' every one of which must hold before `gym launch` pushes: "
        "BOUND is a number, or 'base' (the base model in this run) or 'champion' (the model the [hub] "
        "repository holds now, read from its card) plus or minus numbers and multiples of 'stderr' (the "
        "standard error of the difference). A failed rule stops the push; `gym deploy --force` pushes anyway.",
        examples=[
            ["gym_reverse.exact_match >= 0.9", "held-out.eval_loss <= champion", "mmlu.acc >= base - 0.01"]
        ],
    )

    @property
    def gates(self) -> list[Gate]:
        return [parse_gate(rule) for rule in self.rules]


def metric_direction(metric: str) -> bool | None:
    """True when higher is better, False when lower is, None when the name does not say."""
    if metric in LOWER_IS_BETTER or metric.endswith(("perplexity", "_loss")):
        return False
    if metric in HIGHER_IS_BETTER or metric.startswith(("acc", "exact_match", "pass@")):
        return True
    return None


def known_metrics(entry: str, config: GymConfig) -> tuple[str, dict[str, bool]] | None:
    """``(task name, {metric: higher is better})`` for a task whose metrics are known offline, else None."""
    if entry in GYM_TASK_METRICS:
        return entry, GYM_TASK_METRICS[entry]
    if not entry.endswith((".yaml", ".yml")):
        return None
    return _local_task_metrics(config.resolve_path(entry))


def _local_task_metrics(path: Path) -> tuple[str, dict[str, bool]] | None:
    """The task name and metric_list of a local lm-eval task YAML (None when it cannot be read simply)."""
    import yaml

    class Lenient(yaml.SafeLoader):
        pass

    Lenient.add_multi_constructor("!", lambda loader, suffix, node: None)
    try:
        with path.open(encoding="utf-8") as stream:
            data = yaml.load(stream, Lenient)  # noqa: S506 - a SafeLoader that ignores !function tags
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("task"), str) or "include" in data:
        return None
    metrics = {}
    for item in data.get("metric_list") or []:
        if isinstance(item, dict) and isinstance(item.get("metric"), str):
            higher = item.get("higher_is_better")
            metrics[item["metric"]] = (
                higher if isinstance(higher, bool) else metric_direction(item["metric"]) is not False
            )
    return (data["task"], metrics) if metrics else None


def gate_issues(config: GymConfig) -> list[tuple[tuple[str | int, ...], str]]:
    """Each rule's task and metric checked against eval.tasks, and its operator against the metric's direction.

    lm-eval registry tasks are not looked up here (that needs lm-eval's 14k task files); their metric
    names are checked when the run has scored them, and a wrong one stops the run before any push.
    """
    issues: list[tuple[tuple[str | int, ...], str]] = []
    tasks: dict[str, dict[str, bool] | None] = {}
    for entry in config.eval.tasks:
        found = known_metrics(entry, config)
        tasks[found[0] if found else entry] = found[1] if found else None
    if any(d.eval_fraction > 0 for d in config.datasets):
        tasks[HELD_OUT] = {name: name != "eval_loss" for name in HELD_OUT_METRICS}
    if config.eval.judge is not None:  # [eval.judge]: win rates and rubric criteria (gym/config/judge.py)
        tasks[JUDGE] = config.eval.judge.metrics
    for index, rule in enumerate(config.eval.gates.rules):
        loc: tuple[str | int, ...] = ("eval", "gates", "rules", index)
        gate = parse_gate(rule)
        if gate.task not in tasks:
            named = ", ".join(repr(t) for t in tasks) or "none"
            hint = "; held-out scores need a dataset with eval_fraction > 0" if gate.task == HELD_OUT else ""
            issues.append((loc, f"{rule!r}: this run scores no task {gate.task!r}; it scores {named}{hint}"))
            continue
        metrics = tasks[gate.task]
        if metrics is not None and gate.metric not in metrics:
            issues.append((loc, f"{rule!r}: task {gate.task!r} produces {', '.join(sorted(metrics))}, "
                                f"not {gate.metric!r}"))  # fmt: skip
            continue
        higher = metrics[gate.metric] if metrics is not None else metric_direction(gate.metric)
        if higher is not None and higher != gate.wants_higher:
            better = "higher" if higher else "lower"
            op = ">=" if higher else "<="
            issues.append((loc, f"{rule!r}: {better} {gate.metric} is better, so {gate.op!r} would keep the worse "
                                f"model; write {op!r}"))  # fmt: skip
        if gate.needs_champion and config.hub is None:
            issues.append((loc, f"{rule!r}: the champion is the model the [hub] repository holds, and this "
                                "config has no [hub] table; add one, or compare with base or a number"))  # fmt: skip
        if gate.reference == "base" and not config.eval.baseline:
            issues.append((loc, f"{rule!r} compares with the base model, which eval.baseline = false does not score; "
                                "set eval.baseline = true or compare with a number"))  # fmt: skip
    if config.eval.gates.rules and not config.eval.tasks and config.eval.judge is None:
        issues.append(
            (
                ("eval", "gates", "rules"),
                "gates need scores, but eval.tasks is empty; list the tasks to score",
            )
        )
    return issues
