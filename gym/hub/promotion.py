"""Whether a finished run may replace what the Hub serves: its ``[eval.gates]`` checked before any push.

`gym launch` (here or as the cloud job) calls :func:`check_gates` between eval and the card; `gym
deploy` calls it again before pushing, since the champion may have changed meanwhile, and with
``--force`` pushes anyway, the card saying so. Nothing here writes to the Hub.

A gate result holds only against the champion commit it was computed on (``GateReport.champion``):
`gym launch` records that commit with its gates stage, checks the gates again on a rerun when the
champion moved (:mod:`gym.launch.stage_hub`), and checks gates it skipped as done once more right
before its push, so no rerun pushes past a champion it has not read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gym.eval.errors import EvalError
from gym.eval.gates import GATES_FILE, GateError, GateReport, GatesFailed, evaluate_gates, gates_table_text

if TYPE_CHECKING:
    from gym.config import GymConfig


def check_gates(
    config: GymConfig,
    folder: Path,
    *,
    force: bool = False,
    token: str | None = None,
    echo: Callable[[str], None] = print,
) -> GateReport | None:
    """Evaluate the gates on ``folder``'s eval results, write ``gate_results.json``, print the table.

    None when the config has no gates (a stale gate file is removed). Raises :class:`GatesFailed` when a
    gate does not hold and ``force`` is off, :class:`GateError` when one cannot be evaluated.
    """
    gates = config.eval.gates.gates
    if not gates:
        (folder / GATES_FILE).unlink(missing_ok=True)
        return None
    from gym.eval.report import RESULTS_FILE, EvalReport

    if not (folder / RESULTS_FILE).is_file():
        raise GateError(f"eval.gates needs scores, but {folder} has no {RESULTS_FILE}: run `gym eval` first")
    report = EvalReport.read(folder)
    champion = None
    hub = config.hub
    if hub is not None and any(gate.needs_champion for gate in gates):
        from gym.hub.champion import read_champion

        champion = read_champion(hub.repo_id, token or os.environ.get(hub.token_env), hub.token_env)
    judge = config.eval.judge
    if champion is not None and judge is not None and "champion" in judge.pairwise:
        from gym.eval.judge import judge_champion

        required = any(g.task == "judge" and g.metric == "winrate_vs_champion" for g in gates)
        label = f"the champion {champion.repo}@{champion.sha[:12]}"
        try:
            judge_champion(config, folder, champion.judge_answers, label, required=required)
        except EvalError as error:  # the judge failed: the gate cannot be computed, so nothing is pushed
            raise GateError(str(error)) from None
        report = EvalReport.read(folder)
    result = evaluate_gates(gates, report, champion, hub.repo_id if hub else None)
    result.forced = force and not result.passed
    result.write(folder)
    echo(gates_table_text(result))
    if not result.passed and not force:
        failed = result.failed
        worst = failed[0]
        raise GatesFailed(
            f"promotion gate {worst.gate!r} failed (short by {abs(worst.margin or 0):.4f})"
            + (f" and {len(failed) - 1} more" if len(failed) > 1 else "")
            + f"; nothing was pushed, the outputs stay in {folder}; `gym deploy --force` pushes them anyway",
            result,
        )
    return result


def gate_deploy(
    config_path: Path | None,
    model_dir: Path,
    *,
    force: bool,
    token: str | None = None,
    echo: Callable[[str], None] = print,
) -> GateReport | None:
    """`gym deploy`'s check: the gates of the gym.toml (if any) on ``model_dir``; the card rewritten to show them."""
    if config_path is None:
        return None
    from gym.config import config_from_args

    config = config_from_args(config_path)
    result = check_gates(config, model_dir, force=force, token=token, echo=echo)
    if result is not None:
        from gym.eval.report import EvalReport
        from gym.hub.card import write_card

        write_card(EvalReport.read(model_dir), config, model_dir)
        if result.forced:
            echo("gates failed; pushing anyway (--force): the card records it")
    return result
