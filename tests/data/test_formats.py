"""Dataset loading and format conversion, checked against LLaMA-Factory's demo data (read in place from
shared/fixtures) and against hand-broken files that must give a report or a DataError, not a traceback.

Row counts were counted with the json module and are hard-coded on purpose: a loader that silently
drops or duplicates rows must fail here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gym.config.sections import DatasetConfig
from gym.data.example import Example, ToolCall
from gym.data.formats import FORMATS, get_converter, register_format
from gym.data.loading import load_examples, load_rows, split_eval
from gym.data.report import BadRow, DataError, DataReport

SHAREGPT_ROLE_CONTENT = {"role": "role", "content": "content", "user": "user", "assistant": "assistant"}


@pytest.fixture
def lf_dir(fixtures_dir: Path) -> Path:
    return fixtures_dir / "llamafactory-data"


def load(base: Path, **settings) -> tuple[list[Example], DataReport]:
    return load_examples(DatasetConfig(**settings), base)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def alpaca_rows(count: int) -> list[dict]:
    return [{"instruction": f"q{i}", "input": "", "output": f"a{i}"} for i in range(count)]


# --- the LLaMA-Factory demo datasets -----------------------------------------------------------------


@pytest.mark.parametrize(("file", "rows"), [("alpaca_en_demo.json", 999), ("alpaca_zh_demo.json", 1000)])
def test_alpaca_demo(lf_dir: Path, file: str, rows: int) -> None:
    examples, report = load(lf_dir, path=file, format="alpaca")
    assert (report.rows_read, report.rows_kept, report.rows_bad) == (rows, rows, 0)
    assert len(examples) == rows
    first = examples[0]
    assert [m.role for m in first.messages] == ["user", "assistant"]
    assert first.source == Path(file).stem and first.index == 0


def test_alpaca_joins_instruction_and_input(lf_dir: Path) -> None:
    raw = json.loads((lf_dir / "alpaca_en_demo.json").read_text(encoding="utf-8"))
    index = next(i for i, row in enumerate(raw) if row["input"])
    examples, _ = load(lf_dir, path="alpaca_en_demo.json", format="alpaca")
    assert examples[index].messages[0].content == raw[index]["instruction"] + "\n" + raw[index]["input"]
    assert examples[index].messages[1].content == raw[index]["output"]


def test_identity_placeholders_filled(lf_dir: Path) -> None:
    examples, report = load(
        lf_dir, path="identity.json", format="alpaca", placeholders={"name": "GymBot", "author": "Zoo Labs"}
    )
    assert report.rows_kept == 91
    answers = [e.messages[-1].content for e in examples]
    assert not any("{{" in a for a in answers)
    assert sum("GymBot" in a for a in answers) == 77  # rows with {{name}}, counted in the raw file
    assert sum("Zoo Labs" in a for a in answers) == 60  # rows with {{author}}
    assert (
        answers[0] == "Hello! I am GymBot, an AI assistant developed by Zoo Labs. How can I assist you today?"
    )


def test_glaive_tool_calls(lf_dir: Path) -> None:
    examples, report = load(
        lf_dir,
        path="glaive_toolcall_en_demo.json",
        format="sharegpt",
        columns={"messages": "conversations", "tools": "tools"},
    )
    assert (report.rows_read, report.rows_kept) == (300, 300)
    calls = [m for e in examples for m in e.messages if m.tool_calls]
    tool_turns = [m for e in examples for m in e.messages if m.role == "tool"]
    assert len(calls) == 211 and len(tool_turns) == 211
    assert sum(1 for e in examples if e.tools) == 191
    first = examples[0]
    assert [m.role for m in first.messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ] + [
        "user",
        "assistant",
    ]
    assert first.messages[3].tool_calls == [
        ToolCall(name="search_recipes", arguments={"ingredients": ["chicken", "bell peppers", "rice"]})
    ]
    assert first.messages[4].name == "search_recipes"
    assert first.tools[0]["name"] == "search_recipes"
    assert first.tools[0]["parameters"]["required"] == ["ingredients"]


def test_dpo_demo(lf_dir: Path) -> None:
    examples, report = load(
        lf_dir,
        path="dpo_en_demo.json",
        format="preference",
        columns={"messages": "conversations", "chosen": "chosen", "rejected": "rejected"},
    )
    assert report.rows_kept == 300
    assert all(e.chosen and e.rejected and e.chosen.role == e.rejected.role == "assistant" for e in examples)
    assert all(e.messages[-1].role == "user" for e in examples)
    assert sum(e.messages[0].role == "system" for e in examples) == 80


def test_kto_demo(lf_dir: Path) -> None:
    examples, report = load(
        lf_dir,
        path="kto_en_demo.json",
        format="kto",
        columns={"messages": "messages"},
        tags=SHAREGPT_ROLE_CONTENT,
    )
    assert report.rows_kept == 300
    assert sum(e.label is True for e in examples) == 150
    assert sum(e.label is False for e in examples) == 150
    assert all(e.messages[-1].role == "assistant" for e in examples)


def test_mllm_images_resolved(lf_dir: Path) -> None:
    examples, report = load(
        lf_dir,
        path="mllm_demo.json",
        format="sharegpt",
        columns={"messages": "messages", "images": "images"},
        tags=SHAREGPT_ROLE_CONTENT,
    )
    assert report.rows_kept == 6
    images = [image for e in examples for image in e.images]
    assert len(images) == 8
    assert all(Path(i).is_absolute() and Path(i).is_file() for i in images)
    assert examples[0].images[0] == str((lf_dir / "mllm_demo_data" / "1.jpg").resolve())


def test_c4_text(lf_dir: Path) -> None:
    examples, report = load(lf_dir, path="c4_demo.jsonl", format="text")
    assert report.rows_kept == 300
    assert all(e.text and not e.messages for e in examples)


def test_max_samples(lf_dir: Path) -> None:
    examples, report = load(lf_dir, path="alpaca_en_demo.json", format="alpaca", max_samples=10)
    assert len(examples) == report.rows_read == 10


# --- other formats and file types ---------------------------------------------------------------------


def test_openai_tool_calls_and_system_column(tmp_path: Path) -> None:
    row = {
        "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}},
                    {"type": "function", "function": {"name": "weather", "arguments": '{"city": "Rome"}'}},
                ],
            },
            {"role": "tool", "content": "18C", "name": "weather"},
            {"role": "tool", "content": "24C", "name": "weather"},
            {"role": "assistant", "content": "Paris 18C, Rome 24C."},
        ],
        "system": "Be brief.",
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
    }
    examples, _ = load(tmp_path, path=str(write_jsonl(tmp_path / "chat.jsonl", [row])), format="openai")
    (example,) = examples
    assert [m.role for m in example.messages] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert example.messages[2].tool_calls[1] == ToolCall("weather", {"city": "Rome"})
    assert example.tools[0]["function"]["name"] == "weather"


def test_alpaca_remap_system_history_csv(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text(
        'question,answer,sys,past\nWhy?,Because.,Be kind.,"[[""hi"", ""hello""]]"\n', encoding="utf-8"
    )
    columns = {"prompt": "question", "response": "answer", "system": "sys", "history": "past"}
    examples, _ = load(tmp_path, path="rows.csv", format="alpaca", columns=columns)
    assert [(m.role, m.content) for m in examples[0].messages] == [
        ("system", "Be kind."),
        ("user", "hi"),
        ("assistant", "hello"),
        ("user", "Why?"),
        ("assistant", "Because."),
    ]


def test_parquet_folder_plain_preference_and_prompt(tmp_path: Path) -> None:
    from datasets import Dataset

    folder = tmp_path / "pref"
    folder.mkdir()
    for part in range(2):
        rows = [{"prompt": f"p{part}{i}", "chosen": "good", "rejected": "bad"} for i in range(3)]
        Dataset.from_list(rows).to_parquet(str(folder / f"part{part}.parquet"))
    examples, report = load(tmp_path, path="pref", format="preference")
    assert report.rows_kept == 6
    assert examples[0].messages[0].content == "p00" and examples[0].chosen.content == "good"

    write_jsonl(tmp_path / "math.jsonl", [{"question": "1+1?", "solution": 2}])
    examples, _ = load(
        tmp_path, path="math.jsonl", format="prompt", columns={"prompt": "question", "answer": "solution"}
    )
    assert examples[0].messages[0].content == "1+1?" and examples[0].reference == "2"


def test_register_format_is_a_plain_dict() -> None:
    assert set(FORMATS) >= {"alpaca", "sharegpt", "openai", "preference", "kto", "text", "prompt"}
    register_format("upper", lambda row, ctx: Example(text=row["text"].upper()))
    try:
        assert get_converter("upper")({"text": "a"}, None).text == "A"  # type: ignore[arg-type]
    finally:
        del FORMATS["upper"]
    with pytest.raises(KeyError, match="registered"):
        get_converter("nope")


def test_split_eval_is_deterministic() -> None:
    items = list(range(100))
    train, held = split_eval(items, 0.1, seed=3)
    assert len(held) == 10 and len(train) == 90 and sorted(train + held) == items
    assert split_eval(items, 0.1, seed=3) == (train, held)
    assert split_eval(items, 0.1, seed=4)[1] != held
    assert split_eval(items, 0.0) == (items, [])
    assert [len(part) for part in split_eval([1, 2], 0.01)] == [1, 1]  # a tiny fraction still holds one out


# --- broken input: a report or one DataError, never a traceback --------------------------------------


def test_bad_json_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text('{"text": "ok"}\n{"text": "no end\n{"text": "ok"}\n', encoding="utf-8")
    with pytest.raises(
        DataError,
        match=r"dataset 'broken'.*1 of 3 rows are bad.*broken\.jsonl row 1: broken JSON line \(line 2: ",
    ):
        load(tmp_path, path="broken.jsonl", format="text")


@pytest.mark.parametrize("content", ["", "[]"])
def test_empty_file(tmp_path: Path, content: str) -> None:
    (tmp_path / "empty.json").write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=r"dataset 'empty'.*empty\.json.*(is empty|has no rows)"):
        load(tmp_path, path="empty.json", format="alpaca")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"dataset 'nowhere'.*nowhere\.jsonl does not exist"):
        load(tmp_path, path="nowhere.jsonl", format="alpaca")


def test_missing_columns_every_row_bad(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "cols.jsonl", [{"question": "q", "answer": "a"}] * 4)
    with pytest.raises(
        DataError, match=r"none of the 4 rows is usable \(4 missing field\).*cols\.jsonl row 0"
    ):
        load(tmp_path, path="cols.jsonl", format="alpaca")


def test_bad_rows_counted_by_reason(tmp_path: Path) -> None:
    from PIL import Image

    image = tmp_path / "cat.jpg"
    Image.new("RGB", (8, 8), (200, 100, 50)).save(image)  # a real image: unreadable ones are bad rows
    good = {"conversations": [{"from": "human", "value": "<image>hi"}, {"from": "gpt", "value": "yo"}]}
    rows = [{**good, "images": ["cat.jpg"]} for _ in range(10)] + [
        {"conversations": [{"from": "gpt", "value": "x"}, {"from": "human", "value": "y"}]},  # wrong order
        {"conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": " "}]},  # empty answer
        {"conversations": [{"from": "human", "value": "x"}, {"from": "robot", "value": "y"}]},  # unknown role
        {"conversations": [{"from": "human", "value": "x"}, {"from": "function_call", "value": "{oops"}]},
        {**good, "images": ["gone.jpg"]},  # dangling image path
        {**good, "images": ["missing-too.jpg"]},
        {"images": ["cat.jpg"]},  # no conversation
    ]
    write_jsonl(tmp_path / "mixed.jsonl", rows)
    examples, report = load(tmp_path, path="mixed.jsonl", format="sharegpt", max_bad_fraction=0.5)
    assert (report.rows_read, report.rows_kept, len(examples)) == (17, 10, 10)
    assert report.bad == {
        "wrong role order": 1,
        "empty assistant turn": 1,
        "unknown role": 1,
        "unparseable tool call": 1,
        "missing image file": 2,
        "missing field": 1,
    }
    dangling = report.examples["missing image file"]
    assert [e.index for e in dangling] == [14, 15]
    assert dangling[0].file.endswith("mixed.jsonl") and "gone.jpg" in dangling[0].detail
    assert examples[0].images == [str(image.resolve())]
    assert "missing image file" in report.summary()

    from rich.console import Console

    console = Console(record=True, width=150)
    console.print(report)
    assert "wrong role order" in console.export_text()


def test_bad_fraction_threshold_both_ways(tmp_path: Path) -> None:
    rows = alpaca_rows(9) + [{"instruction": "q", "input": ""}]  # 1 of 10 rows has no output
    write_jsonl(tmp_path / "ten.jsonl", rows)
    examples, report = load(tmp_path, path="ten.jsonl", format="alpaca", max_bad_fraction=0.1)
    assert len(examples) == 9 and report.bad == {"missing field": 1} and report.bad_fraction == 0.1
    with pytest.raises(DataError, match=r"1 of 10 rows are bad \(10\.0% > max_bad_fraction 5\.0%"):
        load(tmp_path, path="ten.jsonl", format="alpaca", max_bad_fraction=0.05)


def test_hub_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a subprocess: huggingface_hub reads the offline flags once, at import."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    script = (
        "from pathlib import Path\n"
        "from gym.config.sections import DatasetConfig\n"
        "from gym.data.loading import load_rows\n"
        "from gym.data.report import DataError\n"
        "try:\n"
        "    load_rows(DatasetConfig(hub='gym-tests/no-such-dataset', format='alpaca'), Path('.'))\n"
        "except DataError as error:\n"
        "    print('DataError:', error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("DataError: dataset 'no-such-dataset'")
    assert "'gym-tests/no-such-dataset'" in out and "unreachable" in out and "offline" in out
    assert "set path instead of hub" in out
    assert "Traceback" not in done.stderr


def test_hub_offline_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataError, match=r"unreachable \(offline.*'gym-tests/no-such-dataset'.*set path"):
        load_rows(DatasetConfig(hub="gym-tests/no-such-dataset", format="alpaca"), Path("."))


def test_bad_row_carries_reason_and_detail() -> None:
    error = BadRow("missing field", "no 'output' value")
    assert (error.reason, error.detail, str(error)) == (
        "missing field",
        "no 'output' value",
        "missing field: no 'output' value",
    )
