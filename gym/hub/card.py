"""The model card: ``output_dir/README.md`` with scores in ``model-index``, and ``.eval_results/*.yaml``.

Everything is built with huggingface_hub's own classes (``ModelCardData``, ``EvalResult``,
``EvalResultEntry``) so the Hub parses what Gym writes exactly as it parses any other card; a test
reads the card back with ``ModelCard.load``.

``.eval_results/<task>.yaml`` follows the Hub's newer eval-results format (huggingface_hub's
``eval_result_entries_to_yaml``): a list of ``{dataset: {id, task_id}, value, date, notes}``. That
format has no field for the base model's score, so it goes into ``notes`` with the metric, the
lm-eval version and the settings. Local datasets (Gym's built-in tasks, ``dataset_path: json``) have
no Hub id; they are written as ``local:<task>``, which no Hub leaderboard will claim.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym.data.report import summary_text
from gym.eval.report import EvalReport, TaskScore, fmt, results_table_markdown
from gym.markup import md_code, md_text

if TYPE_CHECKING:
    from gym.config.root import GymConfig

CARD_FILE = "README.md"
EVAL_RESULTS_DIR = ".eval_results"
TRAIN_RESULTS = "train_results.json"
LORA_ADAPTERS = {"lora", "qlora", "dora"}

__all__ = ["build_card", "eval_result_entries", "results_table_markdown", "write_card", "write_eval_results"]


def _hub_id(name: str | None) -> str | None:
    """``name`` when it can be a Hub model id (not builtin:, not an existing folder), else None."""
    from gym.model.loading import HUB_ID

    if not name or name.startswith("builtin:") or Path(name).expanduser().exists() or "/" not in name:
        return None
    return name if HUB_ID.match(name) else None


def _library_size(folder: Path) -> int | None:
    """How many experiences a training-free run's library holds (None: not a training-free run)."""
    if not (folder / "training_free.json").is_file():
        return None
    from gym.train.experiences import load_experiences

    try:
        return len(load_experiences(folder / "experiences.json"))
    except (OSError, ValueError):
        return 0


def _train_results(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / TRAIN_RESULTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def eval_results(report: EvalReport) -> list[Any]:
    """One huggingface_hub ``EvalResult`` per task and metric of the tuned model (rows without a value skipped)."""
    from huggingface_hub import EvalResult

    out = []
    for row in report.results:
        if row.value is None:
            continue
        out.append(
            EvalResult(
                task_type="text-generation",
                task_name=row.task,
                dataset_type=row.dataset.get("id") or f"local:{row.task}",
                dataset_name=row.task,
                dataset_config=row.dataset.get("config"),
                dataset_split=row.dataset.get("split"),
                metric_type=row.metric,
                metric_name=row.label,
                metric_value=round(row.value, 6),
            )
        )
    return out


def _tags(config: GymConfig | None, train: dict[str, Any]) -> list[str]:
    method = train.get("method") or (config.train.method if config else None)
    adapter = train.get("adapter") or (config.train.adapter if config else None)
    tags = ["gym", "text-generation"]
    tags += [t for t in (method, adapter) if t]
    if adapter in LORA_ADAPTERS:
        tags += ["lora", "peft"]
    return list(dict.fromkeys(tags))


def _training_section(train: dict[str, Any]) -> str:
    if not train:
        return "No `train_results.json` was found beside the weights.\n"
    params = (
        f"{train['trainable_parameters']:,} of {train['total_parameters']:,}"
        if train.get("trainable_parameters") is not None and train.get("total_parameters")
        else "—"
    )
    rows = [
        ("method", train.get("method")),
        ("adapter", train.get("adapter")),
        ("steps", train.get("steps")),
        ("tokens", f"{train['tokens']:,}" if isinstance(train.get("tokens"), int) else None),
        ("wall time", f"{train['wall_seconds']:.1f} s" if train.get("wall_seconds") is not None else None),
        ("hardware", train.get("hardware")),
        ("final loss", fmt(train.get("final_loss"))),
        ("trainable parameters", params),
        *_held_out_rows(train.get("eval")),
        ("training data", summary_text(train.get("data") or {}) or None),
    ]
    return "| | |\n|---|---|\n" + "".join(f"| {k} | {'—' if v is None else v} |\n" for k, v in rows)


def _held_out_rows(held: Any) -> list[tuple[str, str]]:
    """Held-out rows (datasets.eval_fraction) evaluated during training: before the first step → after the last."""
    if not isinstance(held, dict) or not isinstance(held.get("final"), dict):
        return []
    initial = held.get("initial") or {}
    rows = [("held-out rows", str(held.get("rows", "—")))]
    for key, label in (("loss", "held-out eval loss"), ("accuracy", "held-out reward accuracy"),
                       ("margin", "held-out reward margin"), ("reward", "held-out reward")):  # fmt: skip
        if isinstance(held["final"].get(key), (int, float)):
            before = f"{fmt(initial[key])} → " if isinstance(initial.get(key), (int, float)) else ""
            rows.append((label, before + fmt(held["final"][key])))
    return rows


def _evaluation_notes(report: EvalReport) -> str:
    shots = sorted({r.n_shot for r in report.results if r.n_shot is not None})
    chat = sorted({r.task for r in report.results if r.chat_template})
    parts = [f"lm-eval {report.lm_eval_version}" if report.lm_eval_version else "lm-eval"]
    parts.append(f"{'/'.join(map(str, shots))}-shot" if shots else f"{report.num_fewshot}-shot")
    parts.append(f"at most {report.limit} samples per task" if report.limit else "every sample")
    if chat:
        parts.append("chat template applied for " + ", ".join(md_text(task) for task in chat))
    baseline = f" Base = {md_code(report.base_model)}; Δ = tuned − base." if report.base_model else ""
    return "; ".join(parts) + "." + baseline + "\n"


def _judge_section(report: EvalReport) -> str:
    """[eval.judge]: the judge, its prompt versions and win rates with intervals ('' without a judge)."""
    from gym.eval.judge import judge_markdown

    text = judge_markdown(report.judge)
    return f"\n{text}" if text else ""


def _promotion_section(folder: Path) -> str:
    """The promotion gates this model passed (or was forced past) and the model it replaced."""
    from gym.eval.gates import GateReport, gates_table_markdown

    gates = GateReport.read(folder)
    if gates is None:
        return ""
    if gates.champion:
        repo, sha = gates.champion["repo"], gates.champion["sha"]
        lead = f"Replaced the model {md_code(repo)} held at commit {md_code(sha)}."
    else:
        lead = f"No model to replace: {md_code(gates.repo or 'the repository')} held none when this run was gated."
    if gates.forced:
        lead += f" **Forced:** pushed with `gym deploy --force` although gates failed ({md_text(gates.summary())})."
    return f"\n## Promotion\n\n{lead}\n\n{gates_table_markdown(gates)}"


def build_card(
    report: EvalReport,
    config: GymConfig | None = None,
    *,
    model_dir: str | Path | None = None,
    license: str | None = None,
    model_name: str | None = None,
) -> Any:
    """A huggingface_hub ``ModelCard`` for the tuned model: metadata, scores, training summary, table."""
    from huggingface_hub import ModelCard, ModelCardData

    folder = Path(model_dir or report.model)
    train = _train_results(folder)
    base = config.model.name_or_path if config is not None else report.base_model
    name = model_name or (config.hub.repo_id if config is not None and config.hub else None)
    name = name or (config.project.name if config is not None else folder.name)
    datasets = [d.hub for d in config.datasets if d.hub] if config is not None else []
    is_adapter = (folder / "adapter_config.json").is_file()
    data = ModelCardData(
        model_name=name,
        base_model=_hub_id(base),
        datasets=datasets or None,
        license=license,
        library_name="peft" if is_adapter else "transformers",
        pipeline_tag="text-generation",
        tags=_tags(config, train),
        eval_results=eval_results(report) or None,
    )
    what = md_code(base) if base else "its base model"
    intro = (
        f"Fine-tuned from {what} with [Gym](https://github.com/zoo-gym/gym)"
        + (f" ({train.get('method')}, {train.get('adapter')})" if train else "")
        + "."
    )
    library = _library_size(folder)
    if library is not None:  # training-free GRPO: nothing was tuned but the library
        data.library_name = "transformers"
        data.tags = list(dict.fromkeys([*(data.tags or []), "training-free-grpo", "experience-library"]))
        intro = (
            f"The frozen base model {what} plus an **experience library** of {library} experiences "
            "(`experiences.json`), learned with training-free GRPO by [Gym](https://github.com/zoo-gym/gym). "
            "No weight was changed: this repository holds the library, not weights; the library is given "
            f"to the base as its system prompt (`gym serve {base or '<base>'} --experiences experiences.json`). "
            "Δ compares the base with and without the library."
        )
    body = (
        f"# {md_text(name)}\n\n"
        + intro
        + "\n\n## Evaluation\n\n"
        + results_table_markdown(report)
        + "\n"
        + _evaluation_notes(report)
        + _judge_section(report)
        + _promotion_section(folder)
        + "\n## Training\n\n"
        + _training_section(train)
        + "\n## Reproduce\n\n```bash\ngym train gym.toml\ngym eval gym.toml\n```\n"
    )
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}")


def eval_result_entries(report: EvalReport, date: str | None = None) -> dict[str, list[Any]]:
    """``{task: [EvalResultEntry, ...]}`` for ``.eval_results/``: one entry per metric, base score in notes."""
    from huggingface_hub import EvalResultEntry

    date = date or datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    by_task: dict[str, list[Any]] = {}
    for row in report.results:
        if row.value is None:
            continue
        entries = by_task.setdefault(row.task, [])
        task_id = row.task if not entries else f"{row.task}/{row.label}"
        entries.append(
            EvalResultEntry(
                dataset_id=row.dataset.get("id") or f"local:{row.task}",
                task_id=task_id,
                value=round(row.value, 6),
                date=date,
                notes=_entry_notes(report, row),
            )
        )
    return by_task


def _entry_notes(report: EvalReport, row: TaskScore) -> str:
    notes = [f"metric {row.label}", f"source gym (lm-eval {report.lm_eval_version})"]
    if row.n_shot is not None:
        notes.append(f"{row.n_shot}-shot")
    if row.samples is not None:
        notes.append(f"{row.samples} samples")
    if row.chat_template:
        notes.append("chat template")
    if report.base_model is not None and row.base_value is not None:
        notes.append(f"base {report.base_model} {fmt(row.base_value)} (delta {fmt(row.delta, signed=True)})")
    return "; ".join(notes)


def write_eval_results(report: EvalReport, folder: str | Path) -> list[Path]:
    """Write ``folder/.eval_results/<task>.yaml`` for every task (stale files of this run's tasks replaced)."""
    import yaml
    from huggingface_hub import eval_result_entries_to_yaml

    target = Path(folder) / EVAL_RESULTS_DIR
    target.mkdir(parents=True, exist_ok=True)
    paths = []
    for task, entries in eval_result_entries(report).items():
        path = target / (re.sub(r"[^\w.-]+", "_", task)[:100] + ".yaml")  # a name, never a path
        path.write_text(
            yaml.safe_dump(eval_result_entries_to_yaml(entries), sort_keys=False), encoding="utf-8"
        )
        paths.append(path)
    return paths


def write_card(
    report: EvalReport,
    config: GymConfig | None = None,
    folder: str | Path | None = None,
    *,
    license: str | None = None,
) -> Path:
    """Write ``README.md`` and ``.eval_results/*.yaml`` into ``folder`` (default: the evaluated model's folder)."""
    folder = Path(folder or report.model)
    folder.mkdir(parents=True, exist_ok=True)
    card = build_card(report, config, model_dir=folder, license=license)
    path = folder / CARD_FILE
    card.save(path)
    write_eval_results(report, folder)
    return path


SERVING_HEADING = "## Serving"


def serving_section(gguf_file: str, quality: Any = None) -> str:
    """The card's "Serving" section: the GGUF file the CPU Space serves with llama.cpp, and its quality."""
    kind = gguf_file.rsplit("-", 1)[-1].removesuffix(".gguf")
    lines = [
        SERVING_HEADING,
        "",
        f"The Space serves {md_code(gguf_file)} (GGUF {md_text(kind)}) with llama.cpp on CPU; "
        f"`gym serve {md_text(gguf_file)} --backend llamacpp` serves it locally.",
    ]
    if quality is None:
        lines += [
            "",
            "Quality against the full-precision model was not measured (llama-cpp-python was not installed).",
        ]
    else:
        divergence = (
            "never" if quality.first_divergence is None else f"at answer token {quality.first_divergence + 1}"
        )
        lines += [
            "",
            "| Measure | Full precision | " + md_text(quality.format) + " |",
            "|---|---|---|",
            f"| Greedy token agreement ({quality.answer_tokens} answer tokens, {quality.prompts} prompts) | 100% | "
            f"{quality.agreement:.1%} |",
            f"| Identical greedy answers | {quality.prompts}/{quality.prompts} | "
            f"{quality.identical_answers}/{quality.prompts} (first divergence {divergence}) |",
            f"| Perplexity on {quality.rows} {md_text(quality.rows_source)} | {quality.perplexity_full:.3f} | "
            f"{quality.perplexity_gguf:.3f} |",
        ]
    return "\n".join(lines) + "\n"


def with_section(card: str, section: str) -> str:
    """``card`` with the section ``section`` starts with ("## Serving", "## Source") replaced by it (appended
    when it has none)."""
    heading = section.split("\n", 1)[0] if section.startswith("## ") else SERVING_HEADING
    start = card.find(f"\n{heading}\n")
    if start < 0:
        return card.rstrip("\n") + "\n\n" + section
    end = card.find("\n## ", start + 1)
    rest = card[end:] if end >= 0 else ""
    return card[:start].rstrip("\n") + "\n\n" + section + rest
