"""Broken, foreign and hostile data files: one sentence naming the file (and line), never a traceback.

The loader is driven through :func:`load_examples` (what `gym train` and `gym data preview` call) and,
for the cases the issue names, through `gym data preview` itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gym.cli import app
from gym.config import load_config
from gym.config.errors import ConfigError
from gym.data.loading import load_examples
from gym.data.report import DataError
from gym.failures import printable


def _toml(folder: Path, path: str, extra: str = "") -> Path:
    (folder / "gym.toml").write_text(
        '[project]\nname = "t"\n[model]\nname_or_path = "builtin:tiny"\ntemplate = "chatml"\n'
        f'[[datasets]]\npath = "{path}"\nformat = "alpaca"\n{extra}\n',
        encoding="utf-8",
    )
    return folder / "gym.toml"


def _load(folder: Path, path: str, extra: str = ""):
    config = load_config(_toml(folder, path, extra))
    return load_examples(config.datasets[0], config.base_dir)


def _lines(count: int = 31) -> list[str]:
    return [json.dumps({"instruction": f"q{i}", "output": f"a{i}"}) for i in range(count)]


def test_one_broken_json_line_is_a_bad_row_with_its_line_number(tmp_path: Path) -> None:
    lines = _lines()
    lines[14] = '{"instruction": "q14", "output": "a'  # cut off mid-string
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    examples, report = _load(tmp_path, "rows.jsonl")
    assert len(examples) == 30 and report.rows_read == 31
    assert report.bad == {"broken JSON line": 1}
    (example,) = report.examples["broken JSON line"]
    assert example.index == 14 and "line 15" in example.detail
    assert [e.index for e in examples] == [i for i in range(31) if i != 14]  # the others keep their rows


def test_too_many_broken_lines_still_fail_with_the_line(tmp_path: Path) -> None:
    lines = _lines(10)
    lines[3] = lines[7] = "not json"
    (tmp_path / "rows.jsonl").write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(DataError, match=r"2 of 10 rows are bad.*line 4.*one JSON object"):
        _load(tmp_path, "rows.jsonl")


def test_lines_in_another_encoding_are_bad_rows(tmp_path: Path) -> None:
    good = "\n".join(_lines(30)).encode()
    latin = '{"instruction": "café", "output": "ok"}'.encode("latin-1")
    (tmp_path / "rows.jsonl").write_bytes(good + b"\n" + latin + b"\n")
    examples, report = _load(tmp_path, "rows.jsonl")
    assert len(examples) == 30 and report.bad == {"not UTF-8 text": 1}
    assert "line 31: byte 0xe9" in report.examples["not UTF-8 text"][0].detail


@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        ("rows.json", '[{"instruction": "café", "output": "x"}]'.encode("latin-1"), "is not UTF-8 text (byte 0xe9 at line 1"),
        ("rows.csv", "instruction,output\ncafé,ok\n".encode("latin-1"), "is not UTF-8 text (byte 0xe9 at line 2, column 4)"),
        ("rows.jsonl", '{"instruction": "q", "output": "a"}\n'.encode("utf-16"), "is UTF-16 text"),
        ("rows.jsonl", '{"instruction": "café", "output": "a"}\n'.encode("latin-1") * 3, "save the file as UTF-8"),
        ("rows.parquet", b"PAR1 this is not parquet PAR1", "is not a readable Parquet file"),
    ],
)  # fmt: skip
def test_foreign_encodings_and_damaged_files_are_one_sentence(
    tmp_path: Path, name: str, data: bytes, words: str
) -> None:
    (tmp_path / name).write_bytes(data)
    with pytest.raises(DataError) as caught:
        _load(tmp_path, name)
    assert words in str(caught.value) and name in str(caught.value)


def test_zero_row_parquet_says_it_has_no_rows(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    empty = pa.table({"instruction": pa.array([], pa.string()), "output": pa.array([], pa.string())})
    pq.write_table(empty, tmp_path / "rows.parquet")
    with pytest.raises(DataError, match=r"rows\.parquet has no rows"):
        _load(tmp_path, "rows.parquet")


def test_file_system_oddities(tmp_path: Path) -> None:
    os.symlink("loop.jsonl", tmp_path / "loop.jsonl")
    with pytest.raises(DataError, match="loop.jsonl is a symbolic link that loops back on itself"):
        _load(tmp_path, "loop.jsonl")
    os.symlink(tmp_path / "gone.jsonl", tmp_path / "dangling.jsonl")
    with pytest.raises(DataError, match="dangling.jsonl is a broken symbolic link"):
        _load(tmp_path, "dangling.jsonl")
    os.mkfifo(tmp_path / "pipe.jsonl")  # reading it would block forever
    with pytest.raises(DataError, match="pipe.jsonl is a FIFO, not a regular file"):
        _load(tmp_path, "pipe.jsonl")
    # One name over 255 bytes is refused with the config, at its key; a path of short names past the
    # system's limit is refused where the file is opened.
    with pytest.raises(ConfigError, match="is 5,006 bytes long; file systems allow at most 255 bytes"):
        _load(tmp_path, "x" * 5000 + ".jsonl")
    with pytest.raises(DataError, match="too long a path"):
        _load(tmp_path, "/".join(["y" * 200] * 25) + ".jsonl")


def _preview(folder: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(folder)
    monkeypatch.setenv("GYM_CACHE_DIR", str(folder / "cache"))
    return CliRunner().invoke(app, ["data", "preview", "-n", "1"])


@pytest.mark.slow
def test_preview_names_the_file_without_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rows.jsonl").write_bytes(b'{"instruction": "\xff\xfe", "output": "x"}\n')
    _toml(tmp_path, "rows.jsonl")
    result = _preview(tmp_path, monkeypatch)
    assert result.exit_code == 1 and not isinstance(result.exception, UnicodeError)
    assert "rows.jsonl" in result.output and "not UTF-8 text" in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_preview_shows_ansi_escapes_instead_of_obeying_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    row = {"instruction": "\x1b[2J\x1b]0;pwned\x07[bold]hi[/bold]", "output": "\x1b[31mred\x1b[0m"}
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    _toml(tmp_path, "rows.jsonl")
    result = _preview(tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "␛[2J" in result.output and "␛[31mred" in result.output
    assert "[bold]hi[/bold]" in result.output  # data is never read as rich markup


def test_printable_neutralises_controls_and_keeps_text() -> None:
    assert printable("a\x1b[31mb\r\n\tc\x9b\ud800é") == "a␛[31mb␍\n\tc\\x9b\ufffdé"


# --- fuzz: arbitrary bytes, encodings and file-system shapes -------------------------------------------------

ROWS = st.lists(
    st.fixed_dictionaries(
        {
            "instruction": st.text(max_size=20),
            "output": st.one_of(st.text(max_size=20), st.integers(), st.none()),
        }
    ),
    max_size=5,
)
ENCODINGS = st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "latin-1", "cp1252", "utf-32"])


@st.composite
def data_files(draw: st.DrawFn) -> tuple[str, bytes]:
    """A file name and its bytes: valid rows in some encoding, mangled, or random bytes."""
    suffix = draw(st.sampled_from([".jsonl", ".json", ".csv", ".parquet"]))
    kind = draw(st.sampled_from(["rows", "mangled", "bytes"]))
    if kind == "bytes":
        return "data" + suffix, draw(st.binary(max_size=200))
    rows = draw(ROWS)
    if suffix == ".jsonl":
        text = "".join(json.dumps(r, ensure_ascii=draw(st.booleans())) + "\n" for r in rows)
    elif suffix == ".json":
        text = json.dumps(rows, ensure_ascii=draw(st.booleans()))
    else:
        text = "instruction,output\n" + "".join(f'"{r["instruction"]}",{r["output"]}\n' for r in rows)
    try:
        data = text.encode(draw(ENCODINGS))
    except UnicodeEncodeError:
        data = text.encode("utf-8", errors="surrogatepass")
    if kind == "mangled" and data:
        position = draw(st.integers(0, len(data) - 1))
        data = data[:position] + draw(st.binary(min_size=1, max_size=4)) + data[position + 1 :]
    return "data" + suffix, data


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(file=data_files(), shape=st.sampled_from(["file", "folder", "symlink", "loop", "dangling", "fifo"]))
def test_fuzz_any_file_loads_or_fails_in_one_sentence_naming_it(
    tmp_path_factory: pytest.TempPathFactory, file: tuple[str, bytes], shape: str
) -> None:
    folder = tmp_path_factory.mktemp("fuzz")
    name, data = file
    target = folder / name
    if shape == "folder":
        (folder / "shards").mkdir()
        (folder / "shards" / name).write_bytes(data)
        path = "shards"
    elif shape in ("symlink", "loop", "dangling"):
        (folder / "real").write_bytes(data)
        os.symlink({"symlink": "real", "loop": name, "dangling": "missing"}[shape], target)
        path = name
    elif shape == "fifo":
        os.mkfifo(target)
        path = name
    else:
        target.write_bytes(data)
        path = name
    try:
        examples, report = _load(folder, path, "max_bad_fraction = 1.0")
    except DataError as error:
        message = str(error)
        assert path in message or name in message, message
        assert "\n" not in message.strip(), message
    else:
        assert report.rows_read == len(examples) + report.rows_bad
