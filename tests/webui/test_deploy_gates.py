"""The web UI's Deploy button checks the promotion gates as `gym deploy` does: a failed gate pushes nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gym.webui.deploy_tab import deploy

CONFIG = """\
[project]
name = "bot"
output_dir = "out"
[model]
name_or_path = "builtin:tiny"
[[datasets]]
path = "data/train.jsonl"
format = "alpaca"
[eval]
tasks = ["gym_reverse"]
[eval.gates]
rules = ["gym_reverse.exact_match >= 0.5"]
[hub]
repo_id = "acme/bot"
"""


@dataclass
class Folder:
    path: Path


def test_deploy_button_refuses_a_run_below_its_gate(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text('{"instruction": "a", "output": "b"}\n')
    (tmp_path / "gym.toml").write_text(CONFIG)
    (tmp_path / "out").mkdir()
    row = {"task": "gym_reverse", "metric": "exact_match", "value": 0.25, "stderr": 0.1, "samples": 4}
    (tmp_path / "out" / "eval_results.json").write_text(
        json.dumps({"model": "out", "results": [row], "limit": 4})
    )
    monkeypatch.setenv("HF_TOKEN", "hf_" + "D" * 34)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing may be sent: a refused port
    shown = deploy(Folder(tmp_path / "gym.toml"), "", dry_run=False)  # type: ignore[arg-type]
    assert shown.startswith(
        "✗ promotion gate 'gym_reverse.exact_match >= 0.5' failed (short by 0.2500); nothing was pushed"
    )
    assert "❌ fail (short by 0.2500)" in shown
    assert not (tmp_path / "out" / "README.md").exists()  # no card written for a push that did not happen
    assert json.loads((tmp_path / "out" / "gate_results.json").read_text())["passed"] is False
