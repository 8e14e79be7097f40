"""`gym init --from` with FSDP settings of the wrong kind and DeepSpeed files that are no DeepSpeed config
(nested 200,000 deep, 2 MB, a folder, a name of 5,000 characters): each is left behind with one line saying
why, the rest of the config is converted, and there is no traceback."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym.cli import app
from tests.config.test_migrate import lf_project  # noqa: F401 - the fixture
from tests.config.test_migrate_distributed import AXOLOTL_FSDP, LF_Z3

runner = CliRunner()
AXOLOTL = AXOLOTL_FSDP.split("fsdp:")[0]  # the same run without its FSDP settings
FSDP_OPTIONS = "expected a list of FSDP options like [full_shard, auto_wrap], got"
FSDP_SETTINGS = "expected a mapping of FSDP settings (fsdp_offload_params: true, ...), got"


def left_behind(text: str, name: str = "run.yaml") -> tuple[list[str], dict]:
    """(the 'not carried over' lines, the gym.toml written) of `gym init --from`, which must succeed."""
    import tomllib

    Path("data/chats.jsonl").write_text('{"instruction": "hi", "output": "hello"}\n')
    Path(name).write_text(text)
    result = runner.invoke(app, ["init", "--from", name, "gym.toml", "--force"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.startswith("not carried over")]
    return lines, tomllib.loads(Path("gym.toml").read_text())


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        ("fsdp: 5\n", f"not carried over fsdp: {FSDP_OPTIONS} a number"),
        ("fsdp: true\n", f"not carried over fsdp: {FSDP_OPTIONS} true or false"),
        ("fsdp: {full_shard: 1}\n", f"not carried over fsdp: {FSDP_OPTIONS} a mapping"),
        ("fsdp: [full_shard, [auto_wrap]]\n", f"not carried over fsdp: {FSDP_OPTIONS} a list"),
        (
            "fsdp: [full_shard]\nfsdp_config: [1, 2]\n",
            f"not carried over fsdp_config: {FSDP_SETTINGS} a list",
        ),
        ("fsdp_config: offload\n", f"not carried over fsdp_config: {FSDP_SETTINGS} text"),
        ("fsdp_config: 3\n", f"not carried over fsdp_config: {FSDP_SETTINGS} a number"),
    ],
)
def test_fsdp_settings_of_the_wrong_kind_are_one_line(lf_project: Path, extra: str, line: str) -> None:  # noqa: F811
    lines, toml = left_behind(AXOLOTL + extra)
    assert lines == [line]  # once, though both keys lead to the same pair
    assert "distributed" not in toml["train"]  # nothing half-carried
    assert toml["train"]["adapter"] == "lora"  # the rest converted


def test_valid_fsdp_settings_still_carry(lf_project: Path) -> None:  # noqa: F811
    lines, toml = left_behind(AXOLOTL_FSDP)
    assert lines == []
    assert toml["train"]["distributed"]["fsdp"]["sharding"] == "full_shard"


SETTLE = "set [train.distributed] in gym.toml by hand"


@pytest.mark.parametrize(
    ("content", "line"),
    [
        ("[" * 200_000 + "]" * 200_000, f"ds_z3.json nests too deeply to be a DeepSpeed config; {SETTLE}"),
        ('{"zero_optimization": {"stage": 3}, "pad": "' + "x" * 1_100_000 + '"}',
         "ds_z3.json is 1,100,046 bytes; a DeepSpeed config is read only up to 1 MB; " + SETTLE),
        ('{"zero_optimization": {"stage": 3},', f"ds_z3.json is not JSON at line 1; {SETTLE}"),
        ('{"stage": ' + "3" * 5000 + "}", f"ds_z3.json is not JSON; {SETTLE}"),
        ("[3]", f"ds_z3.json is a list, not a DeepSpeed config (a JSON object); {SETTLE}"),
        (None, f"ds_z3.json is a folder, not a DeepSpeed JSON file; {SETTLE}"),
    ],
)  # fmt: skip
def test_a_deepspeed_file_that_is_no_config_is_one_line(
    lf_project: Path,  # noqa: F811
    content: str | None,
    line: str,
) -> None:
    """Named ds_z3 on purpose: a file that exists is read, its name never stands in for what it holds."""
    if content is None:
        Path("ds_z3.json").mkdir()
    else:
        Path("ds_z3.json").write_text(content)
    started = time.perf_counter()
    lines, toml = left_behind(LF_Z3.replace("examples/deepspeed/ds_z3_offload_config.json", "ds_z3.json"))
    assert time.perf_counter() - started < 10
    assert lines == [f"not carried over deepspeed: {line}"]
    assert "distributed" not in toml["train"]


def test_a_deepspeed_name_too_long_for_the_file_system_is_one_line(lf_project: Path) -> None:  # noqa: F811
    name = "ds_" + "a" * 5000 + ".json"
    lines, toml = left_behind(LF_Z3.replace("examples/deepspeed/ds_z3_offload_config.json", name))
    shown = f"'{name[:39]}…{name[-39:]}'"  # shortened to 80 characters in the middle
    assert lines == [
        f"not carried over deepspeed: {shown} could not be read and its name gives no ZeRO stage"
    ]
    assert "distributed" not in toml["train"]


def test_a_missing_deepspeed_file_still_gives_its_stage_by_name(lf_project: Path) -> None:  # noqa: F811
    lines, toml = left_behind(LF_Z3)
    assert lines == []
    assert toml["train"]["distributed"] == {"strategy": "deepspeed", "deepspeed": {"stage": 3}}
    Path("examples/deepspeed").mkdir(parents=True)
    Path("examples/deepspeed/ds_z3_offload_config.json").write_text(
        json.dumps({"zero_optimization": {"stage": 2}})
    )
    _, toml = left_behind(LF_Z3)
    assert toml["train"]["distributed"] == {
        "strategy": "deepspeed",
        "deepspeed": {"stage": 2},
    }  # read, not named
