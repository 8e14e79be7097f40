"""`gym launch` on this machine: train → eval → gates → card → deploy, each stage skipped when done.

The deploy stage pushes the model and creates or updates its Space when gym.toml has ``[hub]``
(otherwise it only renders the Space folder). Under torchrun (several processes) every rank trains;
eval, card, deploy and the results line run on rank 0 alone, so a run makes one model commit.

Each stage is a function of the :class:`GymConfig` that returns what it produced. A small JSON state
file in ``output_dir`` records which stages finished, each with the inputs it consumed and the outputs
it wrote (:mod:`gym.launch.stage_inputs`): the part of the resolved config it reads (gym.toml and the
command-line flags), for training the data's content and the base model's revision, for the gates the
champion's commit, and the files (or, for the deploy stage, the Hub commits) it produced. Rerunning the
same command after a crash or a success redoes only what is missing; a stage reruns, saying why in one
line, when any input changed or its output is no longer what it wrote: a new ``[eval]`` task
re-evaluates the trained model without retraining, an edited dataset file retrains, a `gym train` or
`gym eval` into the same folder is redone rather than adopted, a champion that moved since the gates
were checked is compared again, and a model repo or Space that is gone from the Hub (or at another
commit) is pushed again. A push always follows a fresh read of the champion: gates skipped as done are
checked once more right before it. ``--force`` reruns every stage; a damaged state file stops the run
with one sentence (delete it, or ``--force``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.files import atomic_write_text
from gym.launch.stage_hub import recheck_gates_before_push
from gym.launch.stage_inputs import (
    rerun_reason,
    running_record,
    set_aside_foreign_training,
    stage_inputs,
    stage_record,
)
from gym.launch.state_file import STATE_FILE, load_state

if TYPE_CHECKING:
    from gym.config import GymConfig


@dataclass
class StageOutcome:
    """What one stage did: 'done' or 'skipped' (with why), and the paths or numbers it produced."""

    status: str
    detail: str = ""
    artifacts: dict[str, Any] = field(default_factory=dict)


Stage = Callable[["GymConfig", Callable[[str], None]], StageOutcome]


# The gym.toml tables a stage's result does not depend on (only later stages read them): editing one
# leaves the stage done. Training reads neither [eval] nor the publishing tables; evaluation reads
# neither its gates nor the publishing tables. Every other stage depends on the whole config.
NOT_READ_BY: dict[str, tuple[str, ...]] = {
    "train": ("eval", "hub", "space"),
    "eval": ("eval.gates", "hub", "space"),
}
# How a stage runs, not what it produces: `--force` (resume = "never") leaves later reruns done.
NOT_READ_BY_ANY = ("train.resume",)


def config_hash(config: GymConfig, stage: str | None = None) -> str:
    """Hash of the resolved config, or of the part of it ``stage`` reads: a stage done under another
    config is not done."""
    data = config.model_dump(mode="json")
    for path in (*NOT_READ_BY.get(stage or "", ()), *NOT_READ_BY_ANY):
        *parents, key = path.split(".")
        table = data
        for parent in parents:
            table = table.get(parent) or {}
        table.pop(key, None)
    blob = json.dumps(data, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def read_state(folder: Path) -> dict[str, Any]:
    """The state file ({} when absent); a damaged one raises StateError (a ValueError: one sentence)."""
    return load_state(folder)


def write_state(folder: Path, state: dict[str, Any]) -> None:
    atomic_write_text(folder / STATE_FILE, json.dumps(state, indent=2, default=str) + "\n")


def stage_train(config: GymConfig, echo: Callable[[str], None] = print) -> StageOutcome:
    from gym.api.factory import build_serving_app
    from gym.data.report import summary_text
    from gym.train.runner import run_training

    result = run_training(config, serve_local=build_serving_app)
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


def rank() -> int:
    """This process's global rank under torchrun (0 when started alone)."""
    return int(os.environ.get("RANK", "0"))


def stage_eval(config: GymConfig, echo: Callable[[str], None] = print) -> StageOutcome:
    if not config.eval.tasks and config.eval.judge is None:
        return StageOutcome("skipped", "eval.tasks is empty")
    from gym.api.factory import build_serving_app
    from gym.eval import evaluate
    from gym.hub.payload import is_training_free
    from gym.quiet import quiet_libraries

    quiet_libraries()  # before the model loads (a stage that is skipped never imports the stack)
    if is_training_free(config.output_path):  # the frozen base with and without its library
        report = evaluate(config, experiences=config.output_path / "experiences.json")
    else:  # [eval.judge]'s candidates answer through `gym serve`'s app
        report = evaluate(config, serve_local=build_serving_app)
    path = report.write(config.output_path)
    scores = ", ".join(
        f"{row.task} {row.value:.3f}" + (f" ({row.delta:+.3f} vs base)" if row.delta is not None else "")
        for row in report.results
        if row.value is not None
    )
    return StageOutcome("done", scores or "no scores", {"eval_results": str(path)})


def stage_gates(config: GymConfig, echo: Callable[[str], None] = print) -> StageOutcome:
    """``[eval.gates]`` checked before the card and the push; a failed gate stops the run here."""
    from gym.hub.promotion import check_gates

    result = check_gates(config, config.output_path, echo=echo)
    if result is None:
        return StageOutcome("skipped", "no eval.gates rules")
    artifacts = {"gate_results": str(config.output_path / "gate_results.json")}
    if result.champion:  # the gate results hold against this commit only (a rerun compares it)
        artifacts["champion"] = f"{result.champion['repo']}@{result.champion['sha']}"
    return StageOutcome("done", result.summary(), artifacts)


def stage_card(config: GymConfig, echo: Callable[[str], None] = print) -> StageOutcome:
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


def stage_deploy(config: GymConfig, echo: Callable[[str], None] = print) -> StageOutcome:
    """Push the model and its Space (``[hub]``), or only render the Space folder (``[space]`` alone)."""
    if config.hub is None:
        return _render_space_only(config)
    if config.hub.push == "none":  # e.g. a pull request's run: the numbers are shown, the merge publishes
        return StageOutcome(
            "skipped", "hub.push = 'none': nothing pushed (`gym deploy` publishes this folder)"
        )
    from gym.hub.push import plan_from_config, run_deploy

    plan = plan_from_config(config)
    run_deploy(plan, space_dir=config.output_path / "space", echo=echo)
    space = plan.space.space_repo if plan.space is not None and config.space is not None else None
    detail = f"pushed {plan.model_repo}" if plan.push != "none" else "model not pushed (hub.push = 'none')"
    artifacts: dict[str, Any] = {"model_repo": plan.model_repo}
    if space:
        # RUNNING only when it was followed until it ran and answered (space.wait_minutes > 0)
        detail += (
            f"; Space {space} RUNNING and answering"
            if plan.wait
            else f"; Space {space} updated (not followed)"
        )
        artifacts["space_repo"] = space
    return StageOutcome("done", detail, artifacts)


def _render_space_only(config: GymConfig) -> StageOutcome:
    if config.space is None:
        return StageOutcome("skipped", "no [hub] or [space] table in the config")
    from gym.hub.space import SpaceSettings, render_space

    space = config.space
    model_repo = f"<owner>/{config.project.name}"
    library = config.output_path / "experiences.json"  # written by a training-free GRPO run
    settings = SpaceSettings(
        model_repo, space.repo_id, space.hardware, space.backend, space.api_key_env,
        str(library) if library.is_file() else None,
    )  # fmt: skip
    folder = render_space(config.output_path / "space", settings)
    return StageOutcome(
        "done", "Space folder rendered (add [hub] to push it, or run `gym deploy`)", {"space": str(folder)}
    )


def check_push_token(config: GymConfig) -> None:
    """Refuse before training when the run ends with a push but has no token to push with."""
    hub = config.hub
    if hub is not None and hub.push != "none" and not os.environ.get(hub.token_env):
        raise ValueError(
            f"hub.token_env: ${hub.token_env} is not set, and this run ends by pushing to {hub.repo_id}; "
            "set it, or remove [hub] to keep the run local (`gym deploy` pushes it later)"
        )
    from gym.hub.plans import check_space_plan

    check_space_plan(config)  # a Space the owner's plan cannot have is refused before any training step


STAGES: list[tuple[str, Stage]] = [
    ("train", stage_train),
    ("eval", stage_eval),
    ("gates", stage_gates),
    ("card", stage_card),
    ("deploy", stage_deploy),
]
RANK_ZERO_ONLY = {"eval", "gates", "card", "deploy"}


def run_local(
    config: GymConfig, *, force: bool = False, echo: Callable[[str], None] = print
) -> dict[str, StageOutcome]:
    """Run every stage in order, skipping those already done for this exact config (unless ``force``).

    On a rank other than 0 only the training stage runs (with the others), and no state is written.
    A cloud job launched with report-back (``GYM_REPORT_TO``, see :mod:`gym.launch.report.job`) reports its
    start, its eval table or its failure to the pull request from rank 0.
    """
    check_push_token(config)
    main = rank() == 0
    reporting = main and bool(os.environ.get("GYM_REPORT_TO"))
    job = f"SkyPilot job `gym-{config.project.name}`"
    if reporting:
        from gym.launch.report.job import report_started

        report_started(job, echo=echo)
    try:
        outcomes = _run_stages(config, force=force, echo=echo, main=main)
    except Exception as error:
        from gym.eval.gates import GatesFailed
        from gym.launch.results import emit_results, run_results

        gated = isinstance(error, GatesFailed)  # the scores and the failed gates still go back
        if gated:
            emit_results(config.output_path, echo)
        if reporting:
            from gym.failures import first_line
            from gym.launch.report.job import report_finished

            results = run_results(config.output_path) if gated else None
            report_finished(job=job, results=results, error=first_line(error), echo=echo)
        raise
    if not main:
        return outcomes
    from gym.launch.results import emit_results

    folder = config.output_path
    emit_results(folder, echo)  # a cloud run's results travel back through its log
    if reporting:
        from gym.launch.report.job import report_finished
        from gym.launch.results import run_results

        report_finished(job=job, results=run_results(folder), echo=echo)
    return outcomes


def _run_stages(
    config: GymConfig, *, force: bool, echo: Callable[[str], None], main: bool
) -> dict[str, StageOutcome]:
    folder = config.output_path
    digest = config_hash(config)
    state = {} if force else read_state(folder)  # damaged: one sentence, unless --force starts over
    state.setdefault("stages", {})
    changed = state.get("config") != digest
    state["config"] = digest
    if force:  # a forced run trains from scratch rather than resuming its own last checkpoint
        config = config.model_copy(update={"train": config.train.model_copy(update={"resume": "never"})})
    outcomes: dict[str, StageOutcome] = {}
    rerun = False  # once a stage has produced something, every later stage runs again
    for index, (name, stage) in enumerate(STAGES):
        if not main and name in RANK_ZERO_ONLY:
            continue
        previous = state["stages"].get(name)
        stage_digest = config_hash(config, name)
        inputs = stage_inputs(config, name, stage_digest, previous)
        why = "" if rerun else rerun_reason(config, name, previous, inputs, state)
        if why is None:
            artifacts = previous.get("artifacts")
            outcomes[name] = StageOutcome(
                "done",
                f"already done ({previous.get('detail', '')})",
                artifacts if isinstance(artifacts, dict) else {},
            )
            echo(f"[{name}] already done for this config, skipped (--force reruns it)")
            if name == "train" and changed and main:
                _refresh_saved_config(config, folder)
            continue
        if main and why:
            echo(f"[{name}] {why}")
        stage_config = config
        if name == "train" and not force:  # training this launch did not record is never resumed
            stage_config = set_aside_foreign_training(config, previous, main=main, echo=echo)
            if main:  # before a step: a rerun after a crash resumes only this launch's own checkpoints
                state["stages"][name] = running_record(previous, inputs, stage_digest)
                write_state(folder, state)
        if name == "deploy" and main:  # a push follows a fresh read of the champion, always
            rechecked = recheck_gates_before_push(config, outcomes, stage_gates, echo)
            if rechecked is not None:
                outcomes["gates"] = rechecked
                state["stages"]["gates"] = stage_record(
                    config, "gates", rechecked, {"settings": config_hash(config, "gates")}
                )
                _eval_record_follows_gates(config, state)
                write_state(folder, state)
        if main:
            echo(f"[{name}] running")
        started = time.perf_counter()
        outcome = stage(stage_config, echo)
        outcome.artifacts.setdefault("seconds", round(time.perf_counter() - started, 2))
        outcomes[name] = outcome
        if outcome.status == "done" and not rerun:  # it made something new: what later stages
            rerun = True  # recorded was made from its old output
            for later, _ in STAGES[index + 1 :]:
                state["stages"].pop(later, None)
        if main:
            state["stages"][name] = stage_record(config, name, outcome, inputs)
            if name == "gates":
                _eval_record_follows_gates(config, state)
            write_state(folder, state)
            echo(f"[{name}] {outcome.status}: {outcome.detail}")
    return outcomes


def _eval_record_follows_gates(config: GymConfig, state: dict[str, Any]) -> None:
    """The gates stage adds the judge's champion rows to eval_results.json ([eval.judge]): the eval stage's
    record follows, so a rerun does not take that for another command's rewrite and evaluate again."""
    record = state["stages"].get("eval")
    if config.eval.judge is not None and isinstance(record, dict) and isinstance(record.get("outputs"), dict):
        from gym.launch.stage_inputs import sha256_file

        record["outputs"]["eval_results.json"] = sha256_file(config.output_path / "eval_results.json")


def _refresh_saved_config(config: GymConfig, folder: Path) -> None:
    """The gym.toml beside the weights follows the config a skipped training stage now belongs to (its
    training part is unchanged; [eval], [hub] or [space] may not be), as `gym deploy` uploads it."""
    from gym.train.runner import write_resolved_config

    if (folder / "gym.toml").is_file():
        write_resolved_config(config, folder)


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
