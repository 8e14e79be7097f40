"""`gym schema` is a valid JSON Schema that accepts the starter files, and docs/gym-toml.md is generated from it."""

from __future__ import annotations

import json

import jsonschema
import pytest
import tomlkit
from typer.testing import CliRunner

from gym.cli import app
from gym.config.root import FORMATS_BY_METHOD
from gym.config.schema_docs import json_schema, markdown
from gym.config.starter import starter_toml
from tests.conftest import REPO


def _schema_from_cli() -> dict:
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_schema_is_valid_draft_2020_12() -> None:
    schema = _schema_from_cli()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["train"]
    description = schema["$defs"]["TrainConfig"]["properties"]["learning_rate"]["description"]
    assert "learning rate" in description.lower()


@pytest.mark.parametrize("method", sorted(FORMATS_BY_METHOD))
@pytest.mark.parametrize("model", ["Qwen/Qwen3-0.6B", "builtin:tiny"])
def test_starter_files_validate_against_schema(method: str, model: str) -> None:
    document = tomlkit.parse(starter_toml(name="demo", model=model, method=method)).unwrap()
    jsonschema.Draft202012Validator(json_schema()).validate(document)


def test_schema_rejects_what_the_loader_rejects() -> None:
    document = tomlkit.parse(starter_toml()).unwrap()
    document["train"]["lerning_rate"] = 1.0
    document["train"]["adapter"] = "nope"
    errors = list(jsonschema.Draft202012Validator(json_schema()).iter_errors(document))
    assert len(errors) == 2


def test_docs_are_generated_from_the_schema() -> None:
    committed = (REPO / "docs" / "gym-toml.md").read_text(encoding="utf-8")
    assert committed == markdown(), "docs/gym-toml.md is stale: run `make docs`"
    assert json.loads((REPO / "docs" / "gym.schema.json").read_text()) == json_schema()
    for section in (
        "[project]",
        "[model]",
        "[[datasets]]",
        "[train]",
        "[train.lora]",
        "[train.grpo]",
        "[compute]",
        "[hub]",
        "[space]",
    ):
        assert f"`{section}`" in committed
