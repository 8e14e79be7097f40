"""Paths a gym.toml names: a name longer than a file system allows is one sentence with the value cut,
and the output folder is never a root, a system folder or the home folder; the web UI keeps it beside
the gym.toml unless project.allow_output_outside."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gym.cli import app
from gym.webui.workspace import SaveError, Workspace
from tests.webui.conftest import GYM_TOML

runner = CliRunner()
LONG = "a" * 300  # a file system allows 255 bytes per name
LONG_SAID = (
    f"the name '{'a' * 60}…' is 300 bytes long; file systems allow at most 255 bytes per file or folder name"
)


def _gym(*args: str) -> list[str]:
    """The lines of a command that must fail with sentences: exit 1, no traceback."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.output.splitlines()


def _toml(
    path: Path, *, output_dir: str = "outputs/run", dataset: str = "data/train.jsonl", extra: str = ""
) -> Path:
    text = GYM_TOML.format(steps=4, save_steps=4, dataset=dataset).replace(
        'output_dir = "outputs/run"', f"output_dir = '{output_dir}'{extra}"
    )
    path.write_text(text, encoding="utf-8")
    return path


def test_a_too_long_dataset_path_is_one_sentence_at_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _toml(tmp_path / "gym.toml", dataset=f"data/{LONG}")
    assert _gym("validate", "gym.toml") == [f"gym.toml:11:8: datasets.0.path: {LONG_SAID}", "1 problem found"]


def test_a_too_long_dataset_flag_is_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert _gym("validate", "--model_name_or_path", "builtin:tiny", "--dataset", LONG) == [
        f"command line: --dataset: {LONG_SAID}",
        "1 problem found",
    ]
    Path("lf.yaml").write_text(f"model_name_or_path: builtin:tiny\nstage: sft\ndataset: {LONG}\n")
    lines = _gym("init", "--from", "lf.yaml", "gym.toml")
    assert f"lf.yaml: dataset: not carried over: {LONG_SAID}" in lines and not Path("gym.toml").exists()


def test_a_path_past_the_file_systems_limit_is_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every name fits, the whole path does not (4,096 bytes on Linux): data commands say so, shortened."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GYM_CACHE_DIR", str(tmp_path / "cache"))
    deep = "/".join(["b" * 250] * 20) + "/x.jsonl"
    _toml(tmp_path / "gym.toml", dataset=deep)
    result = runner.invoke(app, ["data", "preview", "gym.toml"])
    assert result.exit_code == 1 and "Traceback" not in result.output and "Errno" not in result.output
    (line,) = result.output.splitlines()
    assert line.startswith(f"error dataset 'x': {'b' * 58}…") and line.endswith(
        "/x.jsonl is too long a path for this file system; check path in gym.toml"
    )
    assert len(line) < 250


@pytest.mark.parametrize(
    ("output_dir", "said"),
    [
        ("/", "'/' is the root of the file system; write the run's files to a folder of your project"),
        ("../" * 40, f"'{('../' * 40)[:60]}…' is the root of the file system; write the run's files to a folder of your project"),
        ("/etc/gym", "'/etc/gym' is a system folder; write the run's files to a folder of your project"),
        ("/usr", "'/usr' is a system folder; write the run's files to a folder of your project"),
        ("/var", "'/var' is a system folder; write the run's files to a folder of your project"),
        ("C:\\Windows\\Temp", "'C:\\Windows\\Temp' is a system folder; write the run's files to a folder of your project"),
        ("~", "'~' is your home folder itself; name a folder inside it, e.g. '~/gym-runs/<name>'"),
    ],
)  # fmt: skip
def test_a_system_output_dir_is_refused_at_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output_dir: str, said: str
) -> None:
    monkeypatch.chdir(tmp_path)
    _toml(tmp_path / "gym.toml", output_dir=output_dir)
    assert _gym("validate", "gym.toml") == [f"gym.toml:4:14: project.output_dir: {said}", "1 problem found"]
    assert _gym("train", "gym.toml") == [f"gym.toml:4:14: project.output_dir: {said}", "1 problem found"]


def test_the_web_ui_saves_an_output_dir_outside_its_folder_only_when_allowed(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    path = _toml(project / "gym.toml")
    before = path.read_text()
    workspace = Workspace(path)
    outside = before.replace("output_dir = 'outputs/run'", 'output_dir = "../../elsewhere"')
    assert outside != before
    with pytest.raises(SaveError, match=r"not saved: 1 problem\(s\); fix them first"):
        workspace.save(outside)
    assert workspace.validate(outside).problems == [
        f"{workspace.display}:4:14: project.output_dir: '../../elsewhere' is outside the folder of this gym.toml; "
        "the web UI writes only inside it (set project.allow_output_outside = true to allow it)"
    ]
    assert path.read_text() == before  # nothing written
    allowed = outside.replace(
        'output_dir = "../../elsewhere"', 'output_dir = "../../elsewhere"\nallow_output_outside = true'
    )
    assert workspace.save(allowed) == f"saved {workspace.display}"
    assert "allow_output_outside = true" in path.read_text()
    # The command line takes such a folder without the flag: only the web UI keeps the output beside it.
    path.write_text(outside)
    result = runner.invoke(app, ["validate", str(path), "-q"])
    assert result.exit_code == 0, result.output


def test_training_never_takes_over_checkpoints_it_did_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """checkpoint-N folders of another tool in the checkpoints folder: resuming would load them, cleaning up
    or rotating would delete them. gym train refuses, and leaves every byte where it was."""
    monkeypatch.chdir(tmp_path)
    _toml(tmp_path / "gym.toml")
    foreign = tmp_path / "outputs" / "run" / "checkpoints" / "checkpoint-500"
    foreign.mkdir(parents=True)
    (foreign / "optimizer.pt").write_bytes(b"someone else's state")
    folder = foreign.parent
    assert _gym("train", "gym.toml") == [
        f"error {folder} holds checkpoint folders Gym did not write (checkpoint-500); Gym would resume from "
        "them or delete them: move them elsewhere, or set project.output_dir to another folder"
    ]
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == [
        "checkpoint-500",
        "checkpoint-500/optimizer.pt",
    ]
    assert (foreign / "optimizer.pt").read_bytes() == b"someone else's state"


def test_an_output_dir_holding_the_gym_toml_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gym writes gym.toml and README.md into the output folder: never over the project's own."""
    monkeypatch.chdir(tmp_path)
    _toml(tmp_path / "gym.toml", output_dir=".")
    assert _gym("validate", "gym.toml") == [
        "gym.toml:4:14: project.output_dir: '.' holds this gym.toml; Gym writes gym.toml, README.md and the "
        "weights into the output folder: name a subfolder, such as outputs/<name>",
        "1 problem found",
    ]
