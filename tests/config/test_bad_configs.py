"""Every kind of config mistake is reported as `file:line:col: key: sentence`, all at once, never a traceback."""

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
format = "alpaca"
"""  # 9 lines; cases append from line 10 on

# (id, text appended to HEAD or a whole document starting with '#!', line, key, words of the message)
CASES = [
    (
        "negative-lr",
        "[train]\nlearning_rate = -0.1\n",
        11,
        "train.learning_rate",
        "expected a number > 0, got -0.1",
    ),
    ("lr-string", '[train]\nlearning_rate = "fast"\n', 11, "train.learning_rate", "expected a number"),
    ("lr-quoted-number", '[train]\nlearning_rate = "2e-4"\n', 11, "train.learning_rate", "without quotes"),
    ("batch-bool", "[train]\nbatch_size = true\n", 11, "train.batch_size", "expected an integer, got true"),
    ("batch-float", "[train]\nbatch_size = 2.5\n", 11, "train.batch_size", "expected an integer"),
    ("batch-zero", "[train]\nbatch_size = 0\n", 11, "train.batch_size", "expected a number > 0, got 0"),
    ("epochs-zero", "[train]\nepochs = 0\n", 11, "train.epochs", "> 0"),
    ("max-steps", "[train]\nmax_steps = -5\n", 11, "train.max_steps", ">= -1"),
    ("bad-method", '[train]\nmethod = "sftt"\n', 11, "train.method", "did you mean 'sft'"),
    ("bad-adapter", '[train]\nadapter = "lora2"\n', 11, "train.adapter", "expected one of 'lora'"),
    (
        "typo-key",
        "[train]\nlerning_rate = 1e-4\n",
        11,
        "train.lerning_rate",
        "unknown key 'lerning_rate' (did you mean 'learning_rate'?)",
    ),
    ("unknown-table", "[trian]\nepochs = 1\n", 10, "trian", "did you mean 'train'"),
    ("lora-dropout", "[train.lora]\ndropout = 1.5\n", 11, "train.lora.dropout", "< 1"),
    ("lora-r-zero", "[train.lora]\nr = 0\n", 11, "train.lora.r", "> 0"),
    (
        "lora-targets",
        "[train.lora]\ntarget_modules = 3\n",
        11,
        "train.lora.target_modules",
        "'all-linear' or a non-empty array",
    ),
    (
        "report-to",
        '[train]\nreport_to = ["wandb", "foo"]\n',
        11,
        "train.report_to.1",
        "expected one of 'wandb'",
    ),
    ("report-to-string", '[train]\nreport_to = "wandb"\n', 11, "train.report_to", "expected an array"),
    ("grpo-group", "[train.grpo]\ngroup_size = 1\n", 11, "train.grpo.group_size", ">= 2"),
    (
        "grpo-reward",
        '[train.grpo]\nreward = ["exact"]\n',
        11,
        "train.grpo.reward",
        "did you mean 'exact_match'",
    ),
    (
        "grpo-api-base",
        '[train.grpo]\napi_base = "localhost:8000"\n',
        11,
        "train.grpo.api_base",
        "http(s) URL",
    ),
    ("dtype", "[model]\n", None, None, None),  # placeholder replaced below (duplicate table)
    (
        "accelerator",
        '[compute]\naccelerators = ["A100:1", "A100:x"]\n',
        11,
        "compute.accelerators.1",
        "NAME:COUNT",
    ),
    (
        "accelerator-zero",
        '[compute]\naccelerators = ["H100:0"]\n',
        11,
        "compute.accelerators.0",
        "positive count",
    ),
    (
        "bucket-scheme",
        '[compute]\ncheckpoint_bucket = "ftp://b/x"\n',
        11,
        "compute.checkpoint_bucket",
        "s3://",
    ),
    ("num-nodes", "[compute]\nnum_nodes = 0\n", 11, "compute.num_nodes", ">= 1"),
    ("infra", '[compute]\ninfra = "my cloud"\n', 11, "compute.infra", "CLOUD[/REGION[/ZONE]]"),
    ("hub-repo", '[hub]\nrepo_id = "no-slash"\n', 11, "hub.repo_id", "'owner/name'"),
    (
        "hub-token-value",
        '[hub]\nrepo_id = "a/b"\ntoken = "hf_x"\n',
        12,
        "hub.token",
        "secrets never go into gym.toml",
    ),
    (
        "hub-token-env",
        '[hub]\nrepo_id = "a/b"\ntoken_env = "hf abc"\n',
        12,
        "hub.token_env",
        "name of an environment variable",
    ),
    (
        "space-hardware",
        '[space]\nrepo_id = "a/b"\nhardware = "t4-smal"\n',
        12,
        "space.hardware",
        "did you mean 't4-small'",
    ),
    (
        "space-vllm-cpu",
        '[space]\nrepo_id = "a/b"\nbackend = "vllm"\n',
        12,
        "space.backend",
        "needs GPU hardware",
    ),
    (
        "space-missing-repo",
        '[space]\nhardware = "cpu-basic"\n',
        10,
        "space.repo_id",
        "required key 'repo_id' is missing",
    ),
    ("eval-fewshot", "[eval]\nnum_fewshot = -1\n", 11, "eval.num_fewshot", ">= 0"),
    ("eval-tasks", '[eval]\ntasks = "mmlu"\n', 11, "eval.tasks", "expected an array"),
    (
        "env-missing",
        '[hub]\nrepo_id = "${GYM_TEST_UNSET_VAR}"\n',
        11,
        "hub.repo_id",
        "environment variable GYM_TEST_UNSET_VAR is not set",
    ),
    ("qlora-gptq", '[train]\nadapter = "qlora"\n', None, None, None),  # needs a model key; whole doc below
]

WHOLE = [
    ("toml-syntax", '[project]\nname = = "x"\n', 2, "", "TOML syntax error"),
    (
        "toml-duplicate-key",
        '[project]\nname = "a"\nname = "b"\n',
        3,
        "project.name",
        "set twice (first at line 2)",
    ),
    (
        "toml-duplicate-table",
        '[project]\nname = "a"\n[model]\nname_or_path = "x/y"\n[project]\noutput_dir = "o"\n',
        5,
        "project",
        "table [project] is declared twice (first at line 1)",
    ),
    (
        "toml-array-then-array-of-tables",
        HEAD + '[compute]\naccelerators = ["A100:1"]\n[[compute.accelerators]]\nname = "H100"\n',
        12,
        "compute.accelerators",
        "already set at line 11 as a value",
    ),
    ("toml-dotted-duplicate", HEAD + "[train]\nlora.r = 8\nlora.r = 16\n", 12, "train.lora.r", "set twice"),
    ("toml-unclosed-string", HEAD + '[train]\nmethod = "sft\n', 11, "", "TOML syntax error"),
    (
        "missing-model",
        '[project]\nname = "demo"\n\n[[datasets]]\npath = "a.jsonl"\nformat = "alpaca"\n',
        1,
        "model",
        "required table [model] is missing",
    ),
    (
        "missing-datasets",
        '[project]\nname = "demo"\n[model]\nname_or_path = "x/y"\n',
        1,
        "datasets",
        "at least one [[datasets]]",
    ),
    (
        "missing-name",
        '[project]\n\n[model]\nname_or_path = "x/y"\n[[datasets]]\npath = "a"\nformat = "text"\n[train]\nmethod = "pt"\n',
        1,
        "project.name",
        "required key 'name' is missing",
    ),
    (
        "bad-project-name",
        '[project]\nname = "My Bot"\n[model]\nname_or_path = "x/y"\n[[datasets]]\npath = "a"\nformat = "alpaca"\n',
        2,
        "project.name",
        "try 'my-bot'",
    ),
    (
        "path-and-hub",
        HEAD.replace('format = "alpaca"', 'hub = "org/data"\nformat = "alpaca"'),
        7,
        "datasets.0",
        "exactly one of 'path' and 'hub'",
    ),
    (
        "neither-path-nor-hub",
        HEAD.replace('path = "data/train.jsonl"\n', ""),
        7,
        "datasets.0",
        "set one of 'path'",
    ),
    ("bad-format", HEAD.replace('"alpaca"', '"sharegtp"'), 9, "datasets.0.format", "did you mean 'sharegpt'"),
    (
        "bad-column-role",
        HEAD + 'columns = { promt = "instruction" }\n',
        10,
        "datasets.0.columns.promt",
        "did you mean 'prompt'",
    ),
    ("eval-fraction", HEAD + "eval_fraction = 1.0\n", 10, "datasets.0.eval_fraction", "< 1"),
    (
        "dpo-needs-preference",
        HEAD + '[train]\nmethod = "dpo"\n',
        9,
        "datasets.0.format",
        "needs rows in format 'preference'",
    ),
    (
        "duplicate-dataset-name",
        HEAD + '\n[[datasets]]\npath = "other/train.jsonl"\nformat = "alpaca"\n',
        11,
        "datasets.1.name",
        "already used",
    ),
    (
        "qlora-gptq",
        HEAD.replace('name_or_path = "builtin:tiny"', 'name_or_path = "builtin:tiny"\nquantization = "gptq"')
        + '[train]\nadapter = "qlora"\n',
        6,
        "model.quantization",
        "'bnb-4bit'",
    ),
    (
        "full-on-quantized",
        HEAD.replace(
            'name_or_path = "builtin:tiny"', 'name_or_path = "builtin:tiny"\nquantization = "bnb-4bit"'
        )
        + '[train]\nadapter = "full"\n',
        12,
        "train.adapter",
        "cannot be trained",
    ),
    (
        "training-free-needs-grpo",
        HEAD + "[train.grpo]\ntraining_free = true\n",
        11,
        "train.grpo.training_free",
        "needs train.method = 'grpo'",
    ),
    (
        "packing-needs-sft",
        HEAD.replace('"alpaca"', '"preference"') + '[train]\nmethod = "dpo"\npacking = true\n',
        12,
        "train.packing",
        "applies to train.method = 'sft' or 'pt', not 'dpo'",
    ),
    (
        "padding-free-not-for-kto",
        HEAD.replace('"alpaca"', '"kto"') + '[train]\nmethod = "kto"\npadding_free = true\n',
        12,
        "train.padding_free",
        "applies to train.method = 'sft' or 'pt'",
    ),
    (
        "packing-without-padding-free",
        HEAD + "[train]\npacking = true\npadding_free = false\n",
        12,
        "train.padding_free",
        "cannot be combined with padding_free = false",
    ),
    (
        "padding-free-word",
        HEAD + '[train]\npadding_free = "yes"\n',
        11,
        "train.padding_free",
        "expected 'auto', true or false",
    ),
    (
        "unknown-builtin",
        HEAD.replace("builtin:tiny", "builtin:huge"),
        5,
        "model.name_or_path",
        "unknown built-in model",
    ),
    (
        "bad-template",
        HEAD.replace('name_or_path = "builtin:tiny"', 'name_or_path = "builtin:tiny"\ntemplate = "qwen"'),
        6,
        "model.template",
        "did you mean 'qwen3'",
    ),
    (
        "bad-dtype",
        HEAD.replace('name_or_path = "builtin:tiny"', 'name_or_path = "builtin:tiny"\ndtype = "fp16"'),
        6,
        "model.dtype",
        "expected one of 'auto'",
    ),
    (
        "model-not-table",
        HEAD.replace('[model]\nname_or_path = "builtin:tiny"\n', "").replace(
            "[project]", 'model = "x"\n[project]'
        ),
        1,
        "model",
        "expected a table",
    ),
    (
        "ppo-multinode",
        HEAD + '[train]\nmethod = "ppo"\n[compute]\nnum_nodes = 2\n',
        13,
        "compute.num_nodes",
        "runs on one node",
    ),
    (
        "ppo-multigpu",
        HEAD + '[train]\nmethod = "ppo"\n[compute]\naccelerators = ["L4:1", "A100:2"]\n',
        13,
        "compute.accelerators.1",
        "PPO runs as one process, but 'A100:2' starts 2",
    ),
    (
        "training-free-multigpu",
        HEAD
        + '[train]\nmethod = "grpo"\n[train.grpo]\ntraining_free = true\n[compute]\naccelerators = ["H100:8"]\n',
        15,
        "compute.accelerators.0",
        "training-free GRPO runs as one process",
    ),
]

CASES = [case for case in CASES if case[2] is not None] + [
    (f"whole-{c[0]}", "#!" + c[1], *c[2:]) for c in WHOLE
]


def _document(text: str) -> str:
    return text[2:] if text.startswith("#!") else HEAD + text


def test_at_least_thirty_cases() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize(("text", "line", "key", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_error_names_file_line_key_and_sentence(
    write_toml, text: str, line: int | None, key: str, words: str
) -> None:
    path = write_toml(_document(text))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    matching = [i for i in caught.value.issues if i.key == key and words in i.message]
    assert matching, f"no issue for {key!r} with {words!r} in:\n{caught.value}"
    issue = matching[0]
    assert issue.source.endswith("gym.toml")
    if line is not None:
        assert issue.line == line, str(issue)
        assert issue.column is not None and issue.column >= 1

    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    output = result.output
    assert "Traceback" not in output
    assert f"gym.toml:{line}:" in output if line is not None else "gym.toml" in output
    assert words in output
    assert "problem" in output


def test_every_error_reported_at_once(write_toml) -> None:
    path = write_toml(
        HEAD
        + '[train]\nlearning_rate = -0.1\nbatch_size = "4"\nlerning_rate = 1\n[compute]\naccelerators = ["A100:x"]\n'
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    keys = {issue.key for issue in caught.value.issues}
    assert {"train.learning_rate", "train.batch_size", "train.lerning_rate", "compute.accelerators.0"} <= keys
    lines = str(caught.value).splitlines()
    assert lines == sorted(lines, key=lambda line: int(line.split(":")[1]))


def test_exact_format_of_the_documented_example(write_toml) -> None:
    path = write_toml(HEAD + '[train]\nmethod = "sft"\nlearning_rate = -0.1\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value.issues[0]).endswith(
        "gym.toml:12:17: train.learning_rate: expected a number > 0, got -0.1"
    )


def test_missing_file_is_one_sentence(tmp_path) -> None:
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "nope.toml")])
    assert result.exit_code == 1
    assert "file not found" in result.output and "Traceback" not in result.output


def test_secret_from_environment_never_printed(write_toml, monkeypatch) -> None:
    secret = "hf_" + "A1b2C3d4" * 5
    monkeypatch.setenv("HF_TOKEN", secret)
    path = write_toml(HEAD + '[hub]\nrepo_id = "${HF_TOKEN}"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert secret not in str(caught.value)
    assert "${HF_TOKEN}" in str(caught.value)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert secret not in result.output


def test_secret_shaped_values_are_redacted(write_toml) -> None:
    token = "hf_" + "Z9y8X7w6" * 5
    path = write_toml(HEAD + f'[hub]\nrepo_id = "{token}"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert token not in str(caught.value) and "***" in str(caught.value)
