"""Bad chat-template input, as the user meets it: one sentence each, no traceback, nothing lost.

A misspelt template name suggests the nearest names; a user's .jinja file that does not parse names
its line before any row is rendered; an official template that refuses a conversation (Gemma and a
system message) makes that row a bad row with its file and row number, while the other rows train.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym.cli import app
from gym.data.templates import get_template

pytestmark = pytest.mark.slow

ROWS = [
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]},
    {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
        ]
    },
    {"messages": [{"role": "user", "content": "Bye"}, {"role": "assistant", "content": "See you."}]},
]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A gym.toml (with ``template`` and extra dataset keys) and three openai rows, in the working folder."""
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "gym-cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")

    def write(template: str, dataset_extra: str = "") -> Path:
        (tmp_path / "gym.toml").write_text(
            f'[project]\nname = "t"\n[model]\nname_or_path = "builtin:tiny"\ntemplate = "{template}"\n'
            f'[[datasets]]\npath = "rows.jsonl"\nformat = "openai"\n{dataset_extra}',
            encoding="utf-8",
        )
        return tmp_path

    return write


def one_line(output: str) -> str:
    return " ".join(output.split())


def test_a_misspelt_template_name_suggests_the_nearest_names(project) -> None:
    project("mistral-v0.4")
    result = CliRunner().invoke(app, ["validate"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert one_line(result.output).endswith(
        "got 'mistral-v0.4' (did you mean 'mistral-v0.3', 'mistral-v0.2' or 'mistral-v0.1'?) 1 problem found"
    )
    with pytest.raises(ValueError) as raised:
        get_template("llama3.4")
    assert str(raised.value).startswith(
        "unknown chat template 'llama3.4' (did you mean 'llama3.3', 'llama3.2' or 'llama3.1'?); "
        "known templates: chatml, qwen3, qwen2.5, llama3, llama3.1,"
    )


def test_a_jinja_file_that_does_not_parse_is_one_sentence_with_its_line(project) -> None:
    folder = project("templates/mine.jinja")
    (folder / "templates").mkdir()
    (folder / "templates" / "mine.jinja").write_text(
        "{% for m in messages %}\n{{ m.content }}\n{% if m.role == 'user' }}\n{% endfor %}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, ["data", "preview"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert one_line(result.output) == (
        f"error chat template file {folder / 'templates' / 'mine.jinja'} does not parse: line 3: unexpected '}}'"
    )


def test_an_official_template_that_refuses_a_row_makes_it_a_bad_row(project, fixtures_dir: Path) -> None:
    """Gemma's own template raises on a system message: that row is bad, the two others train."""
    from gym.config import load_config
    from gym.data.prepare import prepare_data
    from gym.data.report import DataError
    from gym.model.loading import load_tokenizer

    official = fixtures_dir / "official_chat_templates" / "gemma.jinja"
    if not official.is_file():
        pytest.skip(
            f"official chat templates not found at {official.parent} (the project's shared/fixtures folder)"
        )
    folder = project(str(official))
    result = CliRunner().invoke(app, ["data", "prepare"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    data = folder / "rows.jsonl"
    assert one_line(result.output).endswith(
        f"error dataset 'rows' ({data}): 1 of 3 rows are bad (33.3% > max_bad_fraction 5.0%; "
        f"1 chat template failed to render); e.g. {data} row 1: chat template failed to render "
        "(System role not supported)"
    )

    config = load_config(project(str(official), "max_bad_fraction = 0.5\n") / "gym.toml")
    prepared = prepare_data(config, load_tokenizer(config))
    (report,) = prepared.reports
    assert report.bad == {"chat template failed to render": 1}
    assert [str(e) for e in report.examples["chat template failed to render"]] == [
        f"{data} row 1: chat template failed to render (System role not supported)"
    ]
    assert sorted(prepared.train["index"]) == [0, 2]  # nothing else lost
    with pytest.raises(DataError):  # and the default threshold still stops training on it
        prepare_data(load_config(project(str(official)) / "gym.toml"), load_tokenizer(config))
