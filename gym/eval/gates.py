"""Promotion gates evaluated: this run's scores against thresholds, its base and the champion.

The champion is the model the ``[hub]`` repository holds now (read by :mod:`gym.hub.champion`). A
comparison with it is only made when both were scored the same way (same limit, few-shot count and
number of samples); otherwise the gate is refused with a sentence rather than compared silently.

``stderr`` in a rule is the standard error of the difference: ``sqrt(se_run² + se_champion²)`` for
the champion. For ``base`` Gym records only the tuned model's stderr, so that one is used.

The outcome is ``gate_results.json`` beside ``eval_results.json``; the card, the terminal, the PR
comment and the commit status read it through :class:`GateReport`.
"""

from __future__ import annotations

import json
import math
import operator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.eval.report import EvalReport, TaskScore, fmt

if TYPE_CHECKING:
    from gym.config.gates import Gate

GATES_FILE = "gate_results.json"
COMPARE = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


class GateError(ValueError):
    """A gate that cannot be evaluated (missing score, champion scored differently): one sentence."""


class GatesFailed(ValueError):
    """At least one gate does not hold: the run is not pushed."""

    def __init__(self, message: str, report: GateReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass
class Champion:
    """The model the Hub repository holds now: where it is, which commit, and its recorded scores."""

    repo: str
    sha: str
    report: EvalReport
    judge_answers: bytes | None = None  # its judge_answers.jsonl ([eval.judge]), when it was pushed with one


@dataclass
class GateResult:
    """One rule's outcome; ``passed`` is None when it could not apply (no champion deployed yet)."""

    gate: str
    task: str
    metric: str
    reference: str  # "threshold" | "base" | "champion"
    value: float | None = None  # this run's score
    reference_value: float | None = None  # the base's or the champion's score
    bound: float | None = None  # what the score is compared with
    delta: float | None = None  # value - reference_value
    stderr: float | None = None  # of the difference
    margin: float | None = None  # how far past the bound (> 0) or short of it (< 0), in the better direction
    passed: bool | None = None
    note: str = ""


@dataclass
class GateReport:
    """All rules of one run, the champion they were compared with, and whether the push was forced."""

    passed: bool
    results: list[GateResult]
    repo: str | None = None
    champion: dict[str, str] | None = None  # {"repo", "sha"} of the model this run replaces
    forced: bool = False
    format: int = 1

    @property
    def failed(self) -> list[GateResult]:
        return [r for r in self.results if r.passed is False]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GateReport:
        data = dict(data)
        data["results"] = [GateResult(**row) for row in data.get("results", [])]
        return cls(**data)

    def write(self, folder: str | Path) -> Path:
        path = Path(folder) / GATES_FILE
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def read(cls, folder: str | Path) -> GateReport | None:
        try:
            return cls.from_dict(json.loads((Path(folder) / GATES_FILE).read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError, AttributeError, RecursionError):
            return None  # a damaged record is no record: the gates are checked again

    def summary(self) -> str:
        """One line: how many gates hold, and each failed one with how far it fell short."""
        checked = [r for r in self.results if r.passed is not None]
        held = sum(1 for r in checked if r.passed)
        text = f"{held} of {len(checked)} gates pass"
        if self.failed:
            text += "; failed: " + ", ".join(
                f"{r.gate} (short by {abs(r.margin or 0):.4f})" for r in self.failed
            )
        skipped = len(self.results) - len(checked)
        return text + (f"; {skipped} not applicable (no champion yet)" if skipped else "")


def _find(report: EvalReport, gate: Gate) -> TaskScore:
    rows = [r for r in report.results if r.task == gate.task]
    if not rows:
        scored = ", ".join(sorted({r.task for r in report.results})) or "nothing"
        raise GateError(f"gate {gate.text!r}: this run scored no task {gate.task!r} (it scored {scored})")
    exact = [r for r in rows if r.metric == gate.metric and (r.filter or "none") == gate.filter]
    if not exact and gate.filter == "none":
        exact = [r for r in rows if r.metric == gate.metric]
    if len(exact) != 1:
        names = ", ".join(r.metric if r.filter in ("none", "") else f"{r.metric},{r.filter}" for r in rows)
        which = "several filters of" if exact else "no"
        raise GateError(
            f"gate {gate.text!r}: task {gate.task!r} produced {which} {gate.metric!r}; it produced {names}"
        )
    return exact[0]


def _champion_row(champion: Champion, gate: Gate, row: TaskScore, report: EvalReport) -> TaskScore:
    where = f"the champion {champion.repo}@{champion.sha[:12]}"
    mine = [r for r in champion.report.results if r.task == row.task and r.metric == row.metric
            and (r.filter or "none") == (row.filter or "none")]  # fmt: skip
    if not mine or mine[0].value is None:
        raise GateError(
            f"gate {gate.text!r}: {where} has no {gate.task}.{gate.metric} score to compare with; score it there, "
            "push this run with `gym deploy --force`, or remove the gate"
        )
    theirs = mine[0]
    differences = [
        f"{name} {a} there and {b} here"
        for name, a, b in (
            ("limit", champion.report.limit, report.limit),
            ("few-shot", theirs.n_shot, row.n_shot),
            ("samples", theirs.samples, row.samples),
        )
        if a is not None and b is not None and a != b
    ]
    if differences:
        raise GateError(
            f"gate {gate.text!r} is refused: {where} was scored with different settings ({'; '.join(differences)}); "
            "score this run as the champion was (eval.limit, eval.num_fewshot, the same task data) or remove the gate"
        )
    return theirs


def evaluate_gates(
    gates: list[Gate], report: EvalReport, champion: Champion | None, repo: str | None = None
) -> GateReport:
    """Every gate checked against ``report``; raises :class:`GateError` when one cannot be checked."""
    results = []
    for gate in gates:
        if champion is None and gate.needs_champion and gate.reference == "threshold":  # the judge's win rate
            note = f"no champion yet: {repo or 'the [hub] repository'} holds no model"
            results.append(GateResult(gate.text, gate.task, gate.label, gate.reference, note=note))
            continue
        row = _find(report, gate)
        if row.value is None:
            raise GateError(f"gate {gate.text!r}: {gate.task}.{gate.metric} has no value in this run")
        result = GateResult(gate.text, gate.task, gate.label, gate.reference, value=row.value)
        errors: list[float | None] = [row.stderr]
        reference = 0.0
        if gate.reference == "base":
            if row.base_value is None:
                raise GateError(
                    f"gate {gate.text!r}: the base model has no {gate.task}.{gate.metric} score (eval.baseline)"
                )
            reference = result.reference_value = row.base_value
        elif gate.reference == "champion":
            if champion is None:
                result.note = f"no champion yet: {repo or 'the [hub] repository'} holds no model"
                results.append(result)
                continue
            theirs = _champion_row(champion, gate, row, report)
            assert theirs.value is not None
            reference = result.reference_value = theirs.value
            errors.append(theirs.stderr)
        if gate.reference != "threshold":
            known = [e for e in errors if e is not None]
            result.stderr = math.sqrt(sum(e * e for e in known)) if known else None
            result.delta = row.value - reference
        if gate.stderrs and result.stderr is None:
            raise GateError(
                f"gate {gate.text!r} asks for a margin in stderr, but {gate.task}.{gate.metric} has no standard error"
            )
        result.bound = reference + gate.offset + gate.stderrs * (result.stderr or 0.0)
        result.passed = bool(COMPARE[gate.op](row.value, result.bound))
        result.margin = (row.value - result.bound) if gate.wants_higher else (result.bound - row.value)
        results.append(result)
    passed = all(r.passed is not False for r in results)
    where = {"repo": champion.repo, "sha": champion.sha} if champion is not None else None
    return GateReport(passed=passed, results=results, repo=repo, champion=where)


def _cells(result: GateResult) -> list[str]:
    if result.passed is None:
        verdict = "— " + result.note
    elif result.passed:
        verdict = f"✅ pass (+{abs(result.margin or 0):.4f})"
    else:
        verdict = f"❌ fail (short by {abs(result.margin or 0):.4f})"
    reference = (
        "—" if result.reference == "threshold" else f"{result.reference} {fmt(result.reference_value)}"
    )
    return [result.gate, reference, fmt(result.value), fmt(result.delta, signed=True), fmt(result.stderr),
            fmt(result.bound), verdict]  # fmt: skip


HEADER = ["gate", "champion / base", "this run", "Δ", "± stderr", "bound", "result"]


def gates_table_markdown(report: GateReport) -> str:
    """champion → this run → Δ with pass/fail marks, as GitHub markdown (card, PR comment, job summary)."""

    from gym.markup import md_code, md_text

    def line(cells: list[str]) -> str:  # the rule is shown verbatim; a PR can write anything in it
        return "| " + " | ".join([md_code(cells[0]), *(md_text(c) for c in cells[1:])]) + " |"

    align = "| --- | --- | ---: | ---: | ---: | ---: | --- |"
    return (
        "\n".join(
            [" ".join(["|", " | ".join(HEADER), "|"]), align, *(line(_cells(r)) for r in report.results)]
        )
        + "\n"
    )


def gates_table_text(report: GateReport) -> str:
    """The same table as aligned plain text, for the terminal and logs."""
    rows = [HEADER, *(_cells(r) for r in report.results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )
