"""`evaluate`: run ``[eval]`` through lm-eval on the tuned model and, with ``eval.baseline``, its base.

Tasks are resolved and their datasets read first (a missing Hub dataset fails before any model is
loaded); then each model is loaded once, wrapped in lm-eval's ``HFLM`` and scored on every task.
Gym's chat tasks and the other tasks run in separate ``simple_evaluate`` calls because lm-eval takes
``apply_chat_template`` per call, not per task (see :attr:`gym.eval.tasks.TaskSpec.chat_template`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.eval.errors import EvalError
from gym.eval.report import EvalReport, TaskScore
from gym.eval.tasks import LOCAL_BUILDERS, LoadedTask, load_tasks, resolve_spec

if TYPE_CHECKING:
    from gym.config.root import GymConfig

BOOTSTRAP_ITERS = 1000  # stderr of non-mean metrics; mean metrics use the closed form anyway
NOT_METRICS = {"alias", "name", "samples", "sample_len", "sample_count"}


def evaluate(
    config: GymConfig,
    model_path: str | Path | None = None,
    *,
    chat_template: bool | None = None,
    quiet: bool = True,
    experiences: str | Path | None = None,
    serve_local: Callable[..., Any] | None = None,
) -> EvalReport:
    """Score the tuned model (``model_path`` or ``config.output_path``) and, with ``eval.baseline``, its base.

    ``chat_template`` forces lm-eval's ``apply_chat_template`` on (or off) for every task; None keeps the
    per-task default (on for Gym's tasks, off for lm-eval's and local ones). With ``experiences`` (a
    training-free GRPO library) the frozen model is scored with the library in its system prompt, and
    the baseline is the same model without it. ``serve_local`` is `gym serve`'s app factory, which
    ``[eval.judge]`` needs to have the models answer its prompts. Raises :class:`EvalError`.
    """
    if experiences is not None:
        return _evaluate_experiences(config, model_path, Path(experiences), chat_template, quiet)
    if not config.eval.tasks and config.eval.judge is None:
        raise EvalError("eval.tasks is empty; list lm-eval task names, task YAML paths, or 'gym_reverse'")
    if quiet:
        for name in ("lm_eval", "lm-eval"):
            logging.getLogger(name).setLevel(logging.ERROR)
    from gym.eval.vision_tasks import VISION_TASKS

    vision = [entry for entry in config.eval.tasks if entry in VISION_TASKS]
    _require_vision_model(vision, config)  # before any model is loaded
    specs = [resolve_spec(entry, config) for entry in config.eval.tasks if entry not in VISION_TASKS]
    manager, loaded = load_tasks(specs) if specs else (None, [])

    from gym.eval.models import load_base, load_tuned

    if model_path is None:
        tuned_path = config.output_path
    elif str(model_path).startswith("builtin:"):
        tuned_path = Path(str(model_path))  # resolved to its cache folder by load_tuned; reported by name
    else:
        tuned_path = Path(model_path).expanduser().resolve()  # a flag: relative to the working directory
    wall: dict[str, float] = {}
    start = time.perf_counter()
    tuned: list[TaskScore] = []
    if config.eval.tasks:  # [eval.judge] alone loads the models through the serving app instead
        model, tokenizer = load_tuned(config, tuned_path)
        lm = hf_lm(model, tokenizer, config) if loaded else None
        tuned = _run(lm, loaded, manager, config, chat_template) if loaded else []
        tuned += _run_vision(model, tokenizer, vision, config)
        wall["tuned"] = round(time.perf_counter() - start, 3)
        del model
    base: dict[tuple[str, str, str], TaskScore] | None = None
    if config.eval.baseline and config.eval.tasks:
        start = time.perf_counter()
        model, tokenizer = load_base(config)
        scores = (
            _run(hf_lm(model, tokenizer, config), loaded, manager, config, chat_template) if loaded else []
        )
        scores += _run_vision(model, tokenizer, vision, config)
        base = {(s.task, s.metric, s.filter): s for s in scores}
        wall["base"] = round(time.perf_counter() - start, 3)
        del model
    for score in tuned:
        other = base.get((score.task, score.metric, score.filter)) if base is not None else None
        if other is not None and other.value is not None:
            score.base_value = other.value
            if score.value is not None:
                score.delta = score.value - other.value
    tuned += held_out(tuned_path, with_base=config.eval.baseline)
    from importlib.metadata import version

    report = EvalReport(
        model=str(model_path) if str(model_path).startswith("builtin:") else str(tuned_path),
        results=tuned,
        base_model=config.model.name_or_path if config.eval.baseline else None,
        lm_eval_version=version("lm_eval"),
        num_fewshot=config.eval.num_fewshot,
        limit=config.eval.limit,
        batch_size=config.eval.batch_size,
        wall_seconds=wall,
        training_data=_training_data(tuned_path),
    )
    if config.eval.judge is not None:
        from gym.eval.judge import judge_run

        start = time.perf_counter()
        folder = tuned_path if tuned_path.is_dir() else config.output_path  # beside the weights
        folder.mkdir(parents=True, exist_ok=True)
        judge_run(config, report, report.model, folder, serve_local)
        wall["judge"] = round(time.perf_counter() - start, 3)
    return report


def _training_data(folder: Path) -> dict:
    """The row accounting the training run wrote beside the weights (train_results.json), if any."""
    import json

    try:
        data = json.loads((folder / "train_results.json").read_text(encoding="utf-8")).get("data")
    except (OSError, ValueError, AttributeError):
        return {}
    return data if isinstance(data, dict) else {}


def held_out(model_dir: Path, *, with_base: bool) -> list[TaskScore]:
    """The held-out rows' scores that training recorded beside the weights (none without eval_fraction)."""
    import json

    from gym.eval.report import held_out_scores

    try:
        recorded = json.loads((model_dir / "train_results.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return []
    scores = held_out_scores(recorded)
    if not with_base:
        for score in scores:
            score.base_value = score.delta = None
    return scores


def _evaluate_experiences(
    config: GymConfig, model_path: str | Path | None, library: Path, chat: bool | None, quiet: bool
) -> EvalReport:
    """Training-free GRPO: the same frozen model with and without its experience library.

    The model is the policy the library was learned with: ``train.grpo.api_base`` when the run used an
    endpoint (scored through lm-eval's chat-completions client), else the local model (or ``model_path``).
    """
    from importlib.metadata import version

    from gym.train.experiences import load_experiences, render_system_prompt

    try:
        system = render_system_prompt(load_experiences(library))
    except (OSError, ValueError) as error:
        raise EvalError(f"cannot read the experience library {library}: {error}") from None
    if quiet:
        for name in ("lm_eval", "lm-eval"):
            logging.getLogger(name).setLevel(logging.ERROR)
    manager, loaded = load_tasks([resolve_spec(entry, config) for entry in config.eval.tasks])
    lm, name = _policy_lm(config, model_path, loaded)
    if config.train.grpo.api_base and model_path is None:
        chat = True  # a chat-completions endpoint is sent messages, never raw text
    wall: dict[str, float] = {}
    start = time.perf_counter()
    with_library = _run(lm, loaded, manager, config, chat, system)
    wall["with_experiences"] = round(time.perf_counter() - start, 3)
    start = time.perf_counter()
    without = {(s.task, s.metric, s.filter): s for s in _run(lm, loaded, manager, config, chat)}
    wall["without_experiences"] = round(time.perf_counter() - start, 3)
    for score in with_library:
        other = without.get((score.task, score.metric, score.filter))
        if other is not None and other.value is not None:
            score.base_value = other.value
            score.delta = None if score.value is None else score.value - other.value
    return EvalReport(
        model=f"{name} + experiences ({library})",
        results=with_library,
        base_model=f"{name} without experiences",
        lm_eval_version=version("lm_eval"),
        num_fewshot=config.eval.num_fewshot,
        limit=config.eval.limit,
        batch_size=config.eval.batch_size,
        wall_seconds=wall,
    )


def hf_lm(model: Any, tokenizer: Any, config: GymConfig) -> Any:
    """A loaded model and tokenizer as lm-eval's ``HFLM`` (lm-eval never reloads it per task)."""
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=model, tokenizer=tokenizer, batch_size=config.eval.batch_size)


def _policy_lm(config: GymConfig, model_path: str | Path | None, loaded: list[LoadedTask]) -> tuple[Any, str]:
    """The lm-eval model of a training-free run's policy, and its name for the report."""
    if config.train.grpo.api_base and model_path is None:
        from gym.eval.endpoint import endpoint_lm

        return endpoint_lm(config, loaded)
    from gym.eval.models import load_base, load_tuned

    model, tokenizer = load_base(config) if model_path is None else load_tuned(config, Path(str(model_path)))
    return hf_lm(model, tokenizer, config), str(model_path or config.model.name_or_path)


def _run(
    lm: Any,
    loaded: list[LoadedTask],
    manager: Any,
    config: GymConfig,
    chat: bool | None,
    system: str | None = None,
) -> list[TaskScore]:
    """Every loaded task on one model, in one or two simple_evaluate calls (with and without chat template)."""
    from lm_eval import simple_evaluate

    from gym.quiet import without_stderr_lines

    scores: list[TaskScore] = []
    for use_chat in (True, False):
        batch = [t for t in loaded if (t.spec.chat_template if chat is None else chat) == use_chat]
        if not batch:
            continue
        objects = [item for t in batch for item in (t.obj if isinstance(t.obj, list) else [t.obj])]
        try:
            with without_stderr_lines():  # lm-eval's `git describe` complains outside a repository
                results = simple_evaluate(
                    model=lm,
                    tasks=objects,
                    num_fewshot=config.eval.num_fewshot,
                    limit=config.eval.limit or None,
                    batch_size=config.eval.batch_size,
                    apply_chat_template=use_chat,
                    fewshot_as_multiturn=use_chat,
                    task_manager=manager,
                    log_samples=False,
                    bootstrap_iters=BOOTSTRAP_ITERS,
                    system_instruction=system,
                )
        except (ValueError, RuntimeError) as error:
            from gym.failures import first_line

            raise EvalError(
                f"lm-eval failed on {', '.join(t.spec.requested for t in batch)}: {first_line(error)}"
            ) from error
        for task in batch:
            scores += _scores(task, results)
    order = {t.name: i for i, t in enumerate(loaded)}
    return sorted(scores, key=lambda s: order.get(s.task, len(order)))


def _run_vision(model: Any, tokenizer: Any, names: list[str], config: GymConfig) -> list[TaskScore]:
    """Gym's image tasks (:mod:`gym.eval.vision_tasks`), scored with the model's own processor."""
    if not names:
        return []
    from gym.eval.vision_tasks import VISION_TASKS
    from gym.model.loading import ModelError
    from gym.model.vision import load_processor

    _require_vision_model(names, config)
    try:
        processor = load_processor(config, tokenizer)
    except ModelError as error:
        raise EvalError(str(error)) from error
    return [VISION_TASKS[name](model, processor, tokenizer, config.eval.limit or None) for name in names]


def _require_vision_model(names: list[str], config: GymConfig) -> None:
    """An image task on a text-only base is one sentence, not a failure deep inside generation."""
    if not names:
        return
    from gym.model.loading import ModelError
    from gym.model.vision import is_vision_model

    try:
        vision = is_vision_model(config)
    except ModelError as error:
        raise EvalError(str(error)) from error
    if not vision:
        raise EvalError(
            f"eval task {names[0]} shows the model images, but '{config.model.name_or_path}' is a "
            "text-only model; use it with a vision-language model (e.g. builtin:tiny-vl)"
        )


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _leaves(obj: Any) -> list[Any]:
    from lm_eval.api.group import Group

    if isinstance(obj, list):
        return obj
    return list(obj.get_all_tasks()) if isinstance(obj, Group) else [obj]


def dataset_info(task: LoadedTask) -> dict[str, Any]:
    """Dataset id, config and split of a task, for the model card; local data gets ``local:<task>``."""
    leaves = _leaves(task.obj)
    cfg = leaves[0].config
    path = cfg.dataset_path or ""
    local = task.spec.kind == "gym" or path in LOCAL_BUILDERS or Path(path).exists()
    same = all(t.config.dataset_path == cfg.dataset_path for t in leaves)
    return {
        "id": f"local:{task.name}" if local else (path if same else path.split("/")[0] + "/*"),
        "config": cfg.dataset_name if len(leaves) == 1 else None,
        "split": cfg.test_split or cfg.validation_split,
    }


def _scores(task: LoadedTask, results: dict[str, Any]) -> list[TaskScore]:
    """The task's rows: its group aggregate when it has one, else each of its tasks."""
    from lm_eval.api.group import Group

    groups = results.get("groups", {})
    if isinstance(task.obj, Group) and groups.get(task.name):
        units = [(task.name, groups[task.name], [t.task_name for t in _leaves(task.obj)])]
    else:
        units = [
            (t.task_name, results["results"].get(t.task_name, {}), [t.task_name]) for t in _leaves(task.obj)
        ]
    info = dataset_info(task)
    rows = []
    for name, metrics, leaves in units:
        counts = [results.get("n-samples", {}).get(leaf, {}).get("effective") for leaf in leaves]
        samples = sum(c for c in counts if c is not None) if any(c is not None for c in counts) else None
        better = results.get("higher_is_better", {}).get(name, {})
        for key, value in metrics.items():
            if key in NOT_METRICS or "," not in key or "_stderr," in key:
                continue
            metric, _, filt = key.partition(",")
            rows.append(
                TaskScore(
                    task=name,
                    metric=metric,
                    filter=filt,
                    value=_number(value),
                    stderr=_number(metrics.get(f"{metric}_stderr,{filt}")),
                    samples=samples,
                    higher_is_better=better.get(metric),
                    n_shot=results.get("n-shot", {}).get(name),
                    source=task.spec.kind,
                    chat_template=task.spec.chat_template,
                    dataset=info,
                )
            )
    return rows
