"""`gym serve` refuses a tool parser it does not know before loading anything."""

from __future__ import annotations

from typer.testing import CliRunner

from tests.api.serve_main import app


def test_unknown_tool_parser_is_refused_at_start() -> None:
    result = CliRunner().invoke(app, ["serve", "builtin:tiny", "--tool-parser", "nope"])
    assert result.exit_code == 2
    assert "--tool-parser: expected one of hermes, llama3_json, got 'nope'" in result.output
