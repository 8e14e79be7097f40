"""The loss curve and held-out evaluation of a run, read from the Trainer's ``log_history``.

``log_history`` is saved in every checkpoint and restored on resume, so curves built from it cover the
whole run, not just the part after the last restart (which is all a callback in this process sees).
"""

from __future__ import annotations

from typing import Any

# Eval metrics that describe speed, not the model.
TIMING = ("runtime", "samples_per_second", "steps_per_second")
# Headline names of what TRL's trainers log, per method: DPO/KTO "rewards/...", the reward model "accuracy".
HEADLINES = {
    "loss": ("loss",),
    "accuracy": ("rewards/accuracies", "accuracy"),
    "margin": ("rewards/margins", "margin"),
    "reward": ("reward",),
}


def loss_curve(history: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """``(step, training loss)`` of every logging step, one per step (a resumed step's newest entry)."""
    by_step: dict[int, float] = {}
    for entry in history:
        if "loss" in entry and "step" in entry:
            by_step[int(entry["step"])] = float(entry["loss"])
    return sorted(by_step.items())


def eval_points(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per evaluation: ``step`` and every ``eval_*`` metric without its prefix (timings dropped)."""
    by_step: dict[int, dict[str, Any]] = {}
    for entry in history:
        metrics = {
            key[len("eval_") :]: value
            for key, value in entry.items()
            if key.startswith("eval_") and key[len("eval_") :] not in TIMING
        }
        if metrics and "step" in entry:
            by_step[int(entry["step"])] = {"step": int(entry["step"]), **metrics}
    return [by_step[step] for step in sorted(by_step)]


def headline(point: dict[str, Any]) -> dict[str, float]:
    """The loss, reward accuracy, margin and reward of one evaluation, under the same names for every method."""
    found = {}
    for name, keys in HEADLINES.items():
        value = next((point[key] for key in keys if isinstance(point.get(key), (int, float))), None)
        if value is not None:
            found[name] = float(value)
    return found


def eval_summary(history: list[dict[str, Any]], rows: int) -> dict[str, Any] | None:
    """What ``train_results.json`` says about the held-out rows: rows, before/after headline and the curve."""
    points = eval_points(history)
    if not points:
        return None
    initial = points[0] if points[0]["step"] == 0 else None
    return {
        "rows": rows,
        "initial": headline(initial) if initial is not None else None,
        "final": {"step": points[-1]["step"], **headline(points[-1])},
        "curve": points,
    }
