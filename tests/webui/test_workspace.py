"""The form ↔ gym.toml edits behind the Config tab: tomlkit keeps comments and order, every result validates."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym.webui.workspace import SaveError, Workspace, apply_form, form_values
from tests.webui.conftest import GYM_TOML

TEXT = GYM_TOML.format(steps=12, save_steps=4, dataset="data/train.jsonl")


def test_form_edits_keep_comments_and_validate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    workspace = Workspace(tmp_path / "gym.toml")
    text = apply_form(TEXT, "train.lora.r", 8.0)  # gr.Number sends floats; integer keys get ints
    text = apply_form(text, "eval.tasks", "gym_reverse, arc_easy")
    text = apply_form(text, "hub.repo_id", "acme/model")
    text = apply_form(text, "train.learning_rate", 1e-4)
    assert "# the web UI keeps this comment" in text and "# large: LoRA on a random base" in text
    assert "[train.lora]\nr = 8\n" in text and 'tasks = ["gym_reverse", "arc_easy"]' in text
    assert '[hub]\nrepo_id = "acme/model"' in text
    assert workspace.validate(text).ok, workspace.validate(text).problems
    values = dict(zip(["model", "template"], form_values(text)[:2], strict=True))
    assert values == {"model": "builtin:tiny", "template": "chatml"}
    assert form_values(text)[12] == "gym_reverse, arc_easy"
    cleared = apply_form(text, "hub.repo_id", "")
    assert "repo_id" not in cleared and workspace.validate(cleared).ok
    assert "[hub]" not in cleared  # an emptied table goes too: [hub] without repo_id would not validate
    workspace.loaded_text = TEXT  # as if the file held TEXT
    assert workspace.command_line(cleared) == (
        'gym train gym.toml --train.learning_rate=0.0001 --train.lora.r=8 \'--eval.tasks=["gym_reverse", "arc_easy"]\''
    )
    # the line is equivalent: the saved file plus those flags is the config in the editor
    import shlex

    from gym.config import config_from_args

    (tmp_path / "gym.toml").write_text(TEXT)
    flags = shlex.split(workspace.command_line(cleared))[3:]
    edited = workspace.validate(cleared).config
    assert config_from_args(tmp_path / "gym.toml", flags).model_dump() == edited.model_dump()
    assert workspace.command_line(apply_form(cleared, "eval.limit", "")).endswith(
        "# unsaved changes remove keys: press Save, then run this"
    )


def test_form_cannot_invent_a_dataset_table() -> None:
    text = TEXT.replace('[[datasets]]\npath = "data/train.jsonl"\nformat = "alpaca"\nmax_samples = 200\n', "")
    with pytest.raises(SaveError, match=r"datasets.0.path: there is no \[\[datasets\]\] table 0"):
        apply_form(text, "datasets.0.path", "data/x.jsonl")
    assert apply_form(text, "datasets.0.path", "") == text  # clearing a key that is not there changes nothing
