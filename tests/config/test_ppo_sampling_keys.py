"""PPO's sampling keys live in [train.ppo]; the same keys under [train.grpo] still work for PPO, with a note."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gym.cli import app
from gym.config import ConfigError, load_config

HEAD = """\
[project]
name = "demo"

[model]
name_or_path = "builtin:tiny"

[[datasets]]
path = "data/train.jsonl"
format = "prompt"

[train]
method = "ppo"
"""  # 12 lines; cases append from line 13 on


def test_train_ppo_sampling_keys_are_read_without_notes(write_toml) -> None:
    config = load_config(
        write_toml(
            HEAD
            + "[train.ppo]\nmax_completion_length = 8\ntemperature = 1.3\n[train.grpo]\nreward = ['exact_match']\n"
        )
    )
    assert (config.train.ppo.max_completion_length, config.train.ppo.temperature) == (8, 1.3)
    assert (config.train.grpo.max_completion_length, config.train.grpo.temperature) == (256, 0.7)
    assert config.train.completion_tokens == 8 and config.notes == []


def test_sampling_keys_under_train_grpo_still_drive_ppo_with_one_note_each(write_toml) -> None:
    path = write_toml(HEAD + "[train.grpo]\nmax_completion_length = 8\ntemperature = 1.3\n")
    config = load_config(path)
    assert (config.train.ppo.max_completion_length, config.train.ppo.temperature) == (8, 1.3)
    assert config.notes == [
        f"{path}:14:25: train.grpo.max_completion_length: method = 'ppo' reads its sampling settings from "
        "[train.ppo]; move this key to train.ppo.max_completion_length (it is used from here for now)",
        f"{path}:15:15: train.grpo.temperature: method = 'ppo' reads its sampling settings from "
        "[train.ppo]; move this key to train.ppo.temperature (it is used from here for now)",
    ]

    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note ")]
    assert notes == [f"note {note}" for note in config.notes]


def test_train_ppo_keys_win_over_train_grpo_and_grpo_keeps_its_own(write_toml) -> None:
    both = "[train.ppo]\nmax_completion_length = 8\n[train.grpo]\nmax_completion_length = 16\n"
    config = load_config(write_toml(HEAD + both))
    assert config.train.ppo.max_completion_length == 8 and config.notes == []
    grpo = load_config(write_toml(HEAD.replace('"ppo"', '"grpo"') + both))
    assert grpo.train.completion_tokens == 16 and grpo.notes == []


@pytest.mark.parametrize(
    ("table", "line"),
    [
        ("[train.ppo]", "train.ppo.max_completion_length"),
        ("[train.grpo]", "train.grpo.max_completion_length"),
    ],
)
def test_a_completion_as_long_as_max_length_is_refused_at_the_key_that_set_it(
    write_toml, table: str, line: str
) -> None:
    path = write_toml(HEAD + f"max_length = 64\n{table}\nmax_completion_length = 64\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert [str(issue) for issue in caught.value.issues] == [
        f"{path}:15:25: {line}: prompt and completion share train.max_length = 64, so "
        "max_completion_length = 64 leaves no room for the prompt; lower it or raise train.max_length"
    ]


def test_a_zero_ppo_temperature_is_one_sentence_at_its_line(write_toml) -> None:
    path = write_toml(HEAD + "[train.ppo]\ntemperature = 0\n")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    assert f"{path.name}:14:15: train.ppo.temperature: expected a number > 0, got 0" in result.output
    assert "Traceback" not in result.output
