"""No row dropped in silence: `gym train` reports rows read, trained, truncated and skipped, stops when
too many would be skipped, records the numbers in train_results.json, and never resumes a checkpoint
trained on data that has since been edited.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym.cli import app
from gym.config import load_config
from gym.train.runner import run_training

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "cache"))


def test_alpaca_demo_at_128_tokens_stops_before_training(
    tmp_path: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = fixtures_dir / "llamafactory-data" / "alpaca_en_demo.json"
    (tmp_path / "gym.toml").write_text(
        f'[project]\nname = "t"\noutput_dir = "out"\n[model]\nname_or_path = "builtin:tiny"\ntemplate = "chatml"\n'
        f'[[datasets]]\npath = "{data}"\nformat = "alpaca"\n[train]\nmax_length = 128\nmax_steps = 1\n',
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["train", "--no-progress"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    message = " ".join(result.output.split())
    assert "804 of 999 rows (80.5%) are longer than max_length = 128" in message
    assert "more than max_skipped_fraction = 0.1" in message
    assert "raise train.max_length" in message and "max_skipped_fraction = 0.81" in message
    assert not (tmp_path / "out").exists()  # stopped before any model was loaded or trained


def _write(folder: Path, rows: list[dict], steps: int, extra: str = "") -> Path:
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (folder / "gym.toml").write_text(
        f"""
[project]
name = "t"
output_dir = "out"
[model]
name_or_path = "builtin:tiny"
template = "chatml"
[[datasets]]
path = "rows.jsonl"
format = "openai"
max_skipped_fraction = 0.2
{extra}
[train]
method = "sft"
adapter = "full"
max_steps = {steps}
batch_size = 4
gradient_accumulation_steps = 1
max_length = 64
save_steps = 2
logging_steps = 1
""",
        encoding="utf-8",
    )
    return folder / "gym.toml"


def _chat(*turns: str) -> dict:
    return {"messages": [{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(turns)]}


def _rows() -> list[dict]:
    return [
        _chat("x " * 40, "y " * 40, "last question", "last answer"),  # truncated: the old exchange goes
        _chat("q", "a " * 100),  # skipped: one exchange that cannot fit
        *(_chat(f"question {i}", f"answer {i}") for i in range(10)),
    ]


def test_train_reports_and_records_what_happened_to_the_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_training(load_config(_write(tmp_path, _rows(), steps=2)), show_progress=False)
    line = " ".join(capsys.readouterr().err.split())
    assert (
        "data: 12 rows read: 11 trained, 1 truncated (oldest turns dropped), 1 skipped as too long (8.3%), "
        "0 bad; p95 length" in line
    )
    assert "vs max_length 64" in line
    data = json.loads((tmp_path / "out" / "train_results.json").read_text())["data"]
    assert data["rows_read"] == 12 and data["rows_trained"] == 11 and data["rows_truncated"] == 1
    assert data["rows_skipped"] == 1 and data["skipped_share"] == pytest.approx(1 / 12, abs=1e-4)
    assert data["max_length"] == 64 and data["length_p95"] > 64  # the skipped row is 100+ tokens whole


def test_edited_data_never_resumes_an_old_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _write(tmp_path, _rows(), steps=2)
    run_training(load_config(config), show_progress=False)
    assert (tmp_path / "out" / "checkpoints" / "checkpoint-2").is_dir()

    same = run_training(load_config(_write(tmp_path, _rows(), steps=3)), show_progress=False)
    assert same.resumed_from is not None and same.resumed_from.endswith("checkpoint-2")

    edited = _rows()
    edited[5] = _chat("question 3", "a different answer")  # train.jsonl edited in place; gym.toml alike
    capsys.readouterr()
    again = run_training(load_config(_write(tmp_path, edited, steps=3)), show_progress=False)
    assert again.resumed_from is None and again.steps == 3
    note = " ".join(capsys.readouterr().err.split())
    assert "not resuming from checkpoint-2, checkpoint-3" in note and "training starts over" in note


def test_preview_shows_data_that_would_stop_training_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = _rows()[:6]  # 1 of 6 skipped: over the 0.1 threshold set below
    _write(tmp_path, rows, steps=1, extra="").write_text(
        (tmp_path / "gym.toml")
        .read_text()
        .replace("max_skipped_fraction = 0.2", "max_skipped_fraction = 0.1")
    )
    monkeypatch.chdir(tmp_path)
    preview = CliRunner().invoke(app, ["data", "preview", "-n", "1"])
    assert preview.exit_code == 0, preview.output
    text = " ".join(preview.output.split())
    assert "sample 1" in text and "skipped (too long) │ 1 (16.7%)" in text
    assert "training would stop: dataset 'rows'" in text and "1 of 6 rows (16.7%)" in text
    train = CliRunner().invoke(app, ["train", "--no-progress"])
    assert train.exit_code == 1 and "1 of 6 rows (16.7%) are longer than max_length = 64" in " ".join(
        train.output.split()
    )
