"""`gym launch` on this machine: train → eval → card → Space folder, each stage skipped when done.

Each stage is a function of the :class:`GymConfig` that returns what it produced. A small JSON state
file in ``output_dir`` records which stages finished for which resolved config (a hash of it), so
rerunning the same command after a crash or a success redoes only what is missing; a changed config
or ``--force`` reruns everything from the first stage the change affects (here: all of them).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.files import atomic_write_text

if TYPE_CHECKING:
    from gym.config import GymConfig

STATE_FILE = "gym_state.json"


@dataclass
class StageOutcome:
    """What one stage did: 'done' or 'skipped' (with why), and the paths or numbers it produced."""

    status: str
    detail: str = ""
    artifacts: dict[str, Any] = field(default_factory=dict)


Stage = Callable[["GymConfig"], StageOutcome]


def config_hash(config: GymConfig) -> str:
    """Hash of the resolved config: a stage done under another config is not done."""
    blob = json.dumps(config.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def read_state(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / STATE_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def write_state(folder: Path, state: dict[str, Any]) -> None:
    atomic_write_text(folder / STATE_FILE, json.dumps(state, indent=2, default=str) + "\n")


def stage_train(config: GymConfig) -> StageOutcome:
    from gym.data.report import summary_text
    from gym.train.runner import run_training

    result = run_training(config)
    return StageOutcome(
        "done",
        (
            f"{result.steps} steps, {result.tokens_per_second:,.0f} tok/s, final loss {result.final_loss:.4f}"
            if result.final_loss is not None
            else f"{result.steps} steps"
        )
        + (f"; {summary_text(result.data)}" if result.data else ""),
        {"model": result.output_dir, "train_results": str(config.output_path / "train_results.json")},
    )


def stage_eval(config: GymConfig) -> StageOutcome:
    if not config.eval.tasks:
        return StageOutcome("skipped", "eval.tasks is empty")
    from gym.eval import evaluate

    report = evaluate(config)
    path = report.write(config.output_path)
    scores = ", ".join(
        f"{row.task} {row.value:.3f}" + (f" ({row.delta:+.3f} vs base)" if row.delta is not None else "")
        for row in report.results
        if row.value is not None
    )
    return StageOutcome("done", scores or "no scores", {"eval_results": str(path)})


def stage_card(config: GymConfig) -> StageOutcome:
    from gym.eval.report import EvalReport
    from gym.hub.card import write_card

    results = config.output_path / "eval_results.json"
    report = (
        EvalReport.read(results)
        if results.is_file()
        else EvalReport(model=str(config.output_path), results=[])
    )
    path = write_card(report, config, config.output_path)
    return StageOutcome(
        "done", "model card written" + ("" if results.is_file() else " (no scores)"), {"card": str(path)}
    )


def stage_space(config: GymConfig) -> StageOutcome:
    if config.space is None:
        return StageOutcome("skipped", "no [space] table in the config")
    from gym.hub.space import SpaceSettings, render_space

    space = config.space
    model_repo = config.hub.repo_id if config.hub is not None else f"<owner>/{config.project.name}"
    library = config.output_path / "experiences.json"  # written by a training-free GRPO run
    settings = SpaceSettings(
        model_repo, space.repo_id, space.hardware, space.backend, space.api_key_env,
        str(library) if library.is_file() else None,
    )  # fmt: skip
    folder = render_space(config.output_path / "space", settings)
    return StageOutcome("done", "Space folder rendered (push it with `gym deploy`)", {"space": str(folder)})


STAGES: list[tuple[str, Stage]] = [
    ("train", stage_train),
    ("eval", stage_eval),
    ("card", stage_card),
    ("space", stage_space),
]


def run_local(
    config: GymConfig, *, force: bool = False, echo: Callable[[str], None] = print
) -> dict[str, StageOutcome]:
    """Run every stage in order, skipping those already done for this exact config (unless ``force``)."""
    folder = config.output_path
    digest = config_hash(config)
    state = read_state(folder)
    if state.get("config") != digest or force:
        state = {"config": digest, "stages": {}}
    if force:  # a forced run trains from scratch rather than resuming its own last checkpoint
        config = config.model_copy(update={"train": config.train.model_copy(update={"resume": "never"})})
    outcomes: dict[str, StageOutcome] = {}
    for name, stage in STAGES:
        previous = state["stages"].get(name)
        if previous and previous.get("status") == "done":
            outcomes[name] = StageOutcome(
                "done", f"already done ({previous.get('detail', '')})", previous.get("artifacts", {})
            )
            echo(f"[{name}] already done for this config, skipped (--force reruns it)")
            continue
        echo(f"[{name}] running")
        started = time.perf_counter()
        outcome = stage(config)
        outcome.artifacts.setdefault("seconds", round(time.perf_counter() - started, 2))
        outcomes[name] = outcome
        state["stages"][name] = {**asdict(outcome), "finished": time.time()}
        write_state(folder, state)
        echo(f"[{name}] {outcome.status}: {outcome.detail}")
    from gym.launch.results import emit_results

    emit_results(folder, echo)  # a cloud run's results travel back through its log
    return outcomes


def summary_table(config: GymConfig, outcomes: dict[str, StageOutcome]) -> Any:
    """The closing summary of `gym launch`: each stage, what it produced, and the scores."""
    from rich.console import Group
    from rich.markup import escape
    from rich.table import Table

    stages = Table(title=f"gym launch · {config.project.name}", show_lines=False)
    stages.add_column("stage", style="bold")
    stages.add_column("status")
    stages.add_column("details")
    stages.add_column("artifacts")
    for name, outcome in outcomes.items():
        paths = "\n".join(str(v) for k, v in outcome.artifacts.items() if k != "seconds")
        stages.add_row(name, outcome.status, escape(outcome.detail), escape(paths))
    parts: list[Any] = [stages]
    results = config.output_path / "eval_results.json"
    if results.is_file() and "eval" in outcomes:
        from gym.eval.report import EvalReport, results_table_rich

        parts.append(results_table_rich(EvalReport.read(results)))
    return Group(*parts)
