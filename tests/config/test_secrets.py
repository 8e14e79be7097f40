"""Secrets pasted into gym.toml or expanded from the environment never reach any output."""

from __future__ import annotations

import pytest
import tomllib
from typer.testing import CliRunner

from gym.cli import app
from gym.config import ConfigError, load_config
from gym.config.errors import redact
from tests.config.test_bad_configs import HEAD

runner = CliRunner()

TOKENS = {
    "huggingface": "hf_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ",
    "openai": "sk-proj-" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34",
    "aws-access-key": "AKIA" + "IOSFODNN7EXAMPLE",
    "aws-secret-key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY",
    "github-classic": "ghp_" + "1234567890abcdefABCDEF1234567890abcd",
    "github-fine-grained": "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "github-oauth": "gho_" + "16C7e42F292c6912E7710c838347Ae178B4a",
}


@pytest.mark.parametrize("token", TOKENS.values(), ids=TOKENS.keys())
def test_redaction_covers_common_key_shapes(token: str) -> None:
    assert token not in redact(f"got '{token}' here") and "***" in redact(f"x {token} y")


def test_a_git_sha_is_not_a_secret() -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert redact(sha) == sha


@pytest.mark.parametrize("token", TOKENS.values(), ids=TOKENS.keys())
def test_token_pasted_anywhere_is_never_echoed(write_toml, token: str) -> None:
    places = [
        f'[hub]\nrepo_id = "a/b"\ntoken_env = "{token}"\n',  # a value where a variable's name belongs
        f'[space]\nrepo_id = "a/b"\napi_key_env = "{token}"\n',
        f'[train]\n"{token}" = 1\n',  # an unknown key (its path is echoed)
        f'[hub]\nrepo_id = "{token}"\n',
        f'[train]\nmethod = "{token}"\n',  # "did you mean" on a literal
        f'[space]\nrepo_id = "a/b"\nhardware = "{token}"\n',
    ]
    for text in places:
        path = write_toml(HEAD + text)
        result = runner.invoke(app, ["validate", str(path)])
        assert result.exit_code == 1, (text, result.output)
        assert token not in result.output and token.lower() not in result.output.lower(), result.output
    project = write_toml(HEAD.replace('name = "demo"', f'name = "{token}"'))
    result = runner.invoke(app, ["validate", str(project)])
    assert result.exit_code == 1 and token.lower() not in result.output.lower()
    assert token.lower().replace("_", "-") not in result.output.lower()  # the slugged "try ..." hint


def test_token_in_an_env_name_field_is_an_error(write_toml) -> None:
    path = write_toml(HEAD + f'[hub]\nrepo_id = "a/b"\ntoken_env = "{TOKENS["huggingface"]}"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    (issue,) = caught.value.issues
    assert issue.key == "hub.token_env" and issue.line == 12 and "looks like a secret token" in issue.message
    ok = write_toml(HEAD + '[hub]\nrepo_id = "a/b"\ntoken_env = "MY_ORG_HF_TOKEN"\n', name="ok.toml")
    assert load_config(ok).hub.token_env == "MY_ORG_HF_TOKEN"


def test_expanded_secret_is_never_printed_even_lowercased(write_toml, monkeypatch) -> None:
    secret = "Sup3rSecretValue_Wh1chMatchesNoShape"
    monkeypatch.setenv("MY_SECRET", secret)
    path = write_toml(HEAD.replace('name = "demo"', 'name = "${MY_SECRET}"'))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1 and "${MY_SECRET}" in result.output
    assert secret.lower() not in result.output.lower()
    assert secret.lower().replace("_", "-") not in result.output.lower()


def test_success_summary_shows_references_not_values(write_toml, monkeypatch) -> None:
    secret = "sk-" + "Zz9" * 10
    monkeypatch.setenv("OUT_SECRET", secret)
    path = write_toml(HEAD.replace('name = "demo"', 'name = "demo"\noutput_dir = "out/${OUT_SECRET}"'))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert secret not in result.output and "${OUT_SECRET}" in result.output


def test_resolved_gym_toml_keeps_references(write_toml, tmp_path, monkeypatch) -> None:
    """What `gym train` writes next to the weights (and `gym deploy` uploads) keeps ${VAR}."""
    from gym.train.runner import write_resolved_config

    secret = "sk-" + "Qq7" * 10
    monkeypatch.setenv("API_KEY_IN_URL", secret)
    path = write_toml(
        HEAD.replace('format = "alpaca"', 'format = "prompt"')
        + '[train]\nmethod = "grpo"\n[train.grpo]\ntraining_free = true\n'
        'api_base = "https://api.example.com/${API_KEY_IN_URL}/v1"\n'
    )
    config = load_config(path)
    assert secret in str(config.train.grpo.api_base)  # the run itself uses the value
    folder = tmp_path / "model"
    folder.mkdir()
    write_resolved_config(config, folder)
    text = (folder / "gym.toml").read_text()
    assert secret not in text
    written = tomllib.loads(text)
    assert written["train"]["grpo"]["api_base"] == "https://api.example.com/${API_KEY_IN_URL}/v1"
    assert written["train"]["lora"]["r"] == 16  # defaults are still filled in
    again = load_config(folder / "gym.toml")  # and the file loads back to the same run
    assert again.train.grpo.api_base == config.train.grpo.api_base
