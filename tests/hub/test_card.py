"""The model card: model-index and .eval_results round-trip through huggingface_hub's own parsers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gym.eval import EvalReport, TaskScore, results_table_markdown
from gym.hub.card import write_card


def make_report(folder: Path, base: str | None = "Qwen/Qwen3-0.6B") -> EvalReport:
    mmlu = {"id": "cais/mmlu", "config": None, "split": "test"}
    rows = [
        TaskScore(task="mmlu", metric="acc", value=0.61, stderr=0.004, samples=14042, base_value=0.58, delta=0.03,
                  higher_is_better=True, n_shot=5, dataset=mmlu),
        TaskScore(task="gsm8k", metric="exact_match", filter="strict-match", value=0.42, stderr=0.01, samples=1319,
                  base_value=0.40, delta=0.02, n_shot=5, dataset={"id": "openai/gsm8k", "config": "main", "split": "test"}),
        TaskScore(task="gsm8k", metric="exact_match", filter="flexible-extract", value=0.45, stderr=0.01,
                  samples=1319, base_value=0.41, delta=0.04, n_shot=5,
                  dataset={"id": "openai/gsm8k", "config": "main", "split": "test"}),
        TaskScore(task="gym_reverse", metric="exact_match", value=0.9, stderr=0.03, samples=100, base_value=0.0,
                  delta=0.9, source="gym", n_shot=0, chat_template=True,
                  dataset={"id": "local:gym_reverse", "config": None, "split": "test"}),
    ]  # fmt: skip
    if base is None:
        for row in rows:
            row.base_value = row.delta = None
    return EvalReport(
        model=str(folder), results=rows, base_model=base, lm_eval_version="0.4.13", num_fewshot=5
    )


def make_config(base: str):
    from gym.config.root import GymConfig

    return GymConfig.model_validate(
        {
            "project": {"name": "card-test"},
            "model": {"name_or_path": base},
            "datasets": [{"hub": "my-org/support-chats", "format": "sharegpt"}],
            "train": {"method": "sft", "adapter": "lora"},
            "hub": {"repo_id": "my-org/support-bot"},
        }
    )


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    train = {"method": "sft", "adapter": "lora", "steps": 120, "tokens": 51234, "wall_seconds": 93.5,
             "hardware": "CPU (2 cores, x86_64)", "final_loss": 0.83, "trainable_parameters": 8192,
             "total_parameters": 664704,
             "data": {"rows_read": 999, "rows_trained": 195, "rows_held_out": 0, "rows_truncated": 3,
                      "rows_skipped": 804, "skipped_share": 0.8048, "rows_bad": 0, "length_p95": 1451,
                      "max_length": 128, "length_limit": 128}}  # fmt: skip
    (folder / "train_results.json").write_text(json.dumps(train))
    return folder


def test_card_round_trips_through_huggingface_hub(model_dir: Path) -> None:
    from huggingface_hub import ModelCard

    report = make_report(model_dir)
    path = write_card(report, make_config("Qwen/Qwen3-0.6B"), model_dir, license="apache-2.0")
    card = ModelCard.load(path)
    data = card.data
    assert data.base_model == "Qwen/Qwen3-0.6B" and data.license == "apache-2.0"
    assert data.datasets == ["my-org/support-chats"] and data.library_name == "peft"
    assert {"gym", "sft", "lora", "peft"} <= set(data.tags)
    assert data.model_name == "my-org/support-bot"
    results = data.eval_results
    assert len(results) == len(report.results)  # one per task and metric
    got = {(r.task_name, r.metric_name): r for r in results}
    mmlu = got[("mmlu", "acc")]
    assert (mmlu.dataset_type, mmlu.dataset_split, mmlu.metric_type, mmlu.metric_value) == (
        "cais/mmlu",
        "test",
        "acc",
        0.61,
    )
    gsm = got[("gsm8k", "exact_match (flexible-extract)")]
    assert gsm.dataset_config == "main" and gsm.metric_value == 0.45
    assert got[("gym_reverse", "exact_match")].dataset_type == "local:gym_reverse"
    assert results_table_markdown(report) in card.text
    assert "| steps | 120 |" in card.text and "| hardware | CPU (2 cores, x86_64) |" in card.text
    assert "+0.0300" in card.text
    assert (
        "| training data | 999 rows read: 195 trained, 3 truncated (oldest turns dropped), "
        "804 skipped as too long (80.5%), 0 bad; p95 length 1,451 tokens vs max_length 128 |" in card.text
    )


def test_eval_results_files_follow_the_hub_format(model_dir: Path) -> None:
    from huggingface_hub import parse_eval_result_entries

    report = make_report(model_dir)
    write_card(report, make_config("Qwen/Qwen3-0.6B"), model_dir)
    files = sorted(p.name for p in (model_dir / ".eval_results").iterdir())
    assert files == ["gsm8k.yaml", "gym_reverse.yaml", "mmlu.yaml"]
    raw = yaml.safe_load((model_dir / ".eval_results" / "gsm8k.yaml").read_text())
    assert set(raw[0]) == {"dataset", "value", "date", "notes"} and set(raw[0]["dataset"]) == {
        "id",
        "task_id",
    }
    entries = parse_eval_result_entries(raw)
    assert [e.task_id for e in entries] == ["gsm8k", "gsm8k/exact_match (flexible-extract)"]
    assert entries[0].dataset_id == "openai/gsm8k" and entries[0].value == 0.42
    assert (
        "base Qwen/Qwen3-0.6B 0.4000 (delta +0.0200)" in entries[0].notes and "source gym" in entries[0].notes
    )
    reverse = parse_eval_result_entries(
        yaml.safe_load((model_dir / ".eval_results" / "gym_reverse.yaml").read_text())
    )
    assert reverse[0].dataset_id == "local:gym_reverse" and reverse[0].value == 0.9


def test_builtin_base_without_baseline(model_dir: Path) -> None:
    from huggingface_hub import ModelCard

    report = make_report(model_dir, base=None)
    card = ModelCard.load(write_card(report, make_config("builtin:tiny"), model_dir))
    assert card.data.base_model is None  # not a Hub id, so not claimed as one
    assert "`builtin:tiny`" in card.text and "| task | metric | n | tuned | ± stderr |" in card.text
    assert len(card.data.eval_results) == 4


def test_hostile_task_metric_and_filter_names_render_as_plain_text(model_dir: Path) -> None:
    """Names a PR can set through a local lm-eval task YAML: no HTML, link, image or mention comes out."""
    from huggingface_hub import ModelCard

    from tests.markdown_view import HOSTILE_FILTER, HOSTILE_METRIC, HOSTILE_TASK, render_markdown

    report = make_report(model_dir)
    row = report.results[-1]
    row.task, row.metric, row.filter = HOSTILE_TASK, HOSTILE_METRIC, HOSTILE_FILTER
    text = ModelCard.load(write_card(report, make_config("Qwen/Qwen3-0.6B"), model_dir)).text
    seen = render_markdown(text)
    assert not {"img", "script", "details", "b", "!--"} & set(seen.tags)
    assert seen.tags.count("a") == 1  # the card's own link to Gym, nothing from the names
    assert [HOSTILE_TASK, f"{HOSTILE_METRIC} ({HOSTILE_FILTER})"] in [r[:2] for r in seen.rows]  # readable
    for raw in ("@acme/admins", "@octocat", "https://evil", "www.evil"):  # mentions and autolinks broken
        assert raw not in text
    table = seen.rows[: len(report.results) + 1]  # the results table, then the training table's rows
    assert [len(cells) for cells in table] == [7] * len(table) and seen.rows[len(table) + 1][0] == "method"
    assert any(p.name.startswith("_details_img_src_x") for p in (model_dir / ".eval_results").iterdir())
