"""`gym init --from` on hostile YAML: bounded in bytes and in values, never blocked by a FIFO, and long lists
of left-behind keys summarised. Every refusal is one sentence and writes nothing."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym.cli import app
from tests.config.test_migrate import LF_SFT, lf_project  # noqa: F401 - the fixture

runner = CliRunner()

# Nine levels of nine aliases: 9**9 (387 million) strings in a few hundred bytes.
ALIAS_BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{','.join([f'*{previous}'] * 9)}]\n"
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True)
)


def refused(source: str) -> str:
    """The one-line refusal of `gym init --from source`; asserts it was quick-ish and wrote nothing."""
    result = runner.invoke(app, ["init", "--from", source, "gym.toml"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert not Path("gym.toml").exists()
    return result.output.splitlines()[0]


def test_alias_bomb_is_refused_at_once(lf_project: Path) -> None:  # noqa: F811
    Path("bomb.yaml").write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB.encode()) < 455
    started = time.perf_counter()
    line = refused("bomb.yaml")
    assert time.perf_counter() - started < 1.0
    assert line == (
        "bomb.yaml: its aliases expand to more than 200,000 values; a training config has a few dozen"
    )
    Path("loop.yaml").write_text("a: &a [1, *a]\n")
    assert refused("loop.yaml") == (
        "loop.yaml: an alias refers to the value that contains it; a training config has no cycles"
    )


def test_a_few_aliases_still_work(lf_project: Path) -> None:  # noqa: F811
    Path("anchors.yaml").write_text(
        LF_SFT.replace("cutoff_len: 2048", "cutoff_len: &len 2048\nmax_new: *len")
    )
    result = runner.invoke(app, ["init", "--from", "anchors.yaml", "gym.toml"])
    assert result.exit_code == 0, result.output
    assert "max_length = 2048" in Path("gym.toml").read_text()


def test_big_file_is_refused_by_its_size(lf_project: Path) -> None:  # noqa: F811
    Path("big.yaml").write_text(LF_SFT + "# " + "x" * 1_100_000 + "\n")
    size = Path("big.yaml").stat().st_size
    assert refused("big.yaml") == f"big.yaml: is {size:,} bytes; a training YAML is read only up to 1 MB"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_fifo_and_devices_are_refused_without_blocking(lf_project: Path) -> None:  # noqa: F811
    os.mkfifo("pipe.yaml")
    outcome: list[str] = []
    worker = threading.Thread(target=lambda: outcome.append(refused("pipe.yaml")), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock the reader so the test process can end, then fail
        with open("pipe.yaml", "w"):
            pass
        pytest.fail("gym init --from blocked on a FIFO")
    expected = "is not a regular file (a pipe, socket or device); give the path of a YAML file"
    assert outcome == [f"pipe.yaml: {expected}"]
    assert refused("/dev/zero") == f"/dev/zero: {expected}"
    Path("folder.yaml").mkdir()
    assert refused("folder.yaml") == "folder.yaml: is a folder, not a YAML file"


def test_many_unknown_keys_are_summarised(lf_project: Path) -> None:  # noqa: F811
    Path("many.yaml").write_text(LF_SFT + "".join(f"junk_{i}: {i}\n" for i in range(5_000)))
    result = runner.invoke(app, ["init", "--from", "many.yaml", "gym.toml"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    dropped = ["optim", *(f"junk_{i}" for i in range(19))]  # LLaMA-Factory's optim, then the junk in order
    assert lines[-21:] == [
        *(f"not carried over {key}: Gym has no equivalent setting" for key in dropped),
        "… and 4,981 more keys not carried over",
    ]
    assert len(lines) == 1 + 5 + 21  # wrote, five notes, the summary
    written = Path("gym.toml").read_text()
    assert "#   junk_18: Gym has no equivalent setting\n#   … and 4,981 more\n" in written
    assert "junk_19" not in written
