"""Bad input in the web UI: an unreadable gym.toml, a dataset that does not exist, a file changed behind
the UI's back, a run killed mid-checkpoint, exposing the UI without a password (a second run on the same
output_dir and a stop while checkpointing are in test_webui_client.py, which has a run to stop). Each gets a clear
sentence, and nothing on disk is lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.webui.conftest import REPO, free_port, write_project


@pytest.fixture
def open_ui(webui_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator:
    """``open_ui(path)`` serves build_app(path) in this process and returns a gradio_client for it."""
    from gradio_client import Client

    for name in ("XDG_CACHE_HOME", "HF_HUB_OFFLINE", "GRADIO_ANALYTICS_ENABLED", "PYTHONPATH"):
        monkeypatch.setenv(name, webui_env[name])
    from gym.webui.app import build_app

    opened = []

    def open_ui(path: Path) -> Client:
        demo = build_app(path)
        demo.queue().launch(
            server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True
        )
        opened.append(demo)
        return Client(demo.local_url, verbose=False)

    yield open_ui
    for demo in opened:
        demo.close()


def test_unreadable_gym_toml_is_reported_and_never_overwritten(tmp_path: Path, open_ui) -> None:
    path = tmp_path / "gym.toml"
    latin1 = '[project]\nname = "café"\n'.encode("latin-1")
    path.write_bytes(latin1)
    client = open_ui(path)
    text, status, *_ = client.predict(api_name="/reload")
    assert text == "" and status.startswith(f"✗ {path}") and "UTF-8" in status  # the loader's own sentence
    saved = client.predict('[project]\nname = "x"\n', api_name="/save")
    assert saved.startswith(f"✗ not saved: {status[2:]}")
    assert "press Reload" in saved
    started = client.predict("", api_name="/start_run")
    assert started == status
    assert path.read_bytes() == latin1  # untouched


def test_a_new_file_starts_from_the_starter(tmp_path: Path, open_ui) -> None:
    path = tmp_path / "new-project" / "gym.toml"
    client = open_ui(path)
    text, status, *_ = client.predict(api_name="/reload")
    assert "does not exist yet" in status and 'name = "new-project"' in text
    assert client.predict(text, api_name="/validate")[0].startswith("✓ valid")
    assert client.predict(text, api_name="/save") == f"✓ saved {path}"
    assert path.read_text() == text.strip() + "\n"


def test_file_changed_on_disk_is_not_overwritten(tmp_path: Path, open_ui) -> None:
    path = write_project(tmp_path)
    client = open_ui(path)
    mine = path.read_text().replace("max_steps = 12", "max_steps = 20")
    theirs = path.read_text() + "# added by a teammate's commit\n"
    path.write_text(theirs)
    saved = client.predict(mine, api_name="/save")
    assert saved.startswith("✗ not saved: ") and "changed on disk since it was opened" in saved
    assert path.read_text() == theirs
    text, *_ = client.predict(api_name="/reload")
    assert text == theirs.strip()  # gr.Code trims the outer whitespace


def test_missing_dataset_path(tmp_path: Path, open_ui) -> None:
    path = write_project(tmp_path, dataset="data/missing.jsonl")
    client = open_ui(path)
    text = path.read_text()
    result, _ = client.predict(text, api_name="/validate")
    assert result.startswith("✓ valid")  # a path may be created later; preview and training say it is missing
    samples, report, histogram = client.predict(text, 3, api_name="/preview")
    assert samples == "" and report.startswith("✗ error:") and "missing.jsonl" in report
    assert histogram["data"] == []
    started = client.predict(text, api_name="/start_run")
    assert started.startswith("✗ nothing started: datasets.0.path: data/missing.jsonl does not exist")
    assert not (tmp_path / "outputs").exists()


def test_bad_rows_are_reported_in_the_preview(tmp_path: Path, open_ui) -> None:
    path = write_project(tmp_path)
    data = tmp_path / "data" / "train.jsonl"
    data.write_text('{"instruction": "no output here"}\n' + data.read_text())
    client = open_ui(path)
    samples, report, histogram = client.predict(path.read_text(), 1, api_name="/preview")
    assert "199 of 200 rows kept, 1 bad" in report
    assert f"{data} row 0: missing field (no 'output' value)" in report
    assert "sample 1" in samples and sum(rows for _, rows in histogram["data"]) == 199


def test_unsaved_editor_is_not_trained(tmp_path: Path, open_ui) -> None:
    path = write_project(tmp_path)
    client = open_ui(path)
    started = client.predict(
        path.read_text().replace("max_steps = 12", "max_steps = 13"), api_name="/start_run"
    )
    assert started.startswith("✗ the editor has unsaved changes: press Save")
    assert not (tmp_path / "outputs").exists()


def test_deploy_and_cloud_plans_before_anything_is_sent(tmp_path: Path, open_ui, monkeypatch) -> None:
    pytest.importorskip("sky", reason="the cloud dry run checks the task with SkyPilot (zoo-gym[cloud])")
    monkeypatch.setenv("HF_TOKEN", "unset")  # recorded, so the token typed below is removed afterwards
    monkeypatch.delenv("HF_TOKEN")
    path = write_project(tmp_path)
    client = open_ui(path)
    assert client.predict("", api_name="/deploy_plan") == (
        f"✗ {tmp_path / 'outputs/run'} does not exist: train first, or pass --model_path"
    )
    assert client.predict("", api_name="/cloud_plan").startswith(
        "✗ gym launch --cloud needs a [compute] table"
    )
    path.write_text(
        path.read_text() + '[compute]\naccelerators = ["L4:1"]\n[hub]\nrepo_id = "acme/webui-test"\n'
    )
    (tmp_path / "outputs/run").mkdir(parents=True)
    (tmp_path / "outputs/run/adapter_config.json").write_text("{}")
    token = "hf_" + "k" * 34
    plan = client.predict(token, api_name="/deploy_plan")
    assert plan.startswith("$HF_TOKEN set for this process (not saved anywhere).")
    assert "→ acme/webui-test (LoRA adapter, private)" in plan and "dry run: nothing was sent" in plan
    assert token not in plan and os.environ["HF_TOKEN"] == token  # held by the process only
    assert token.encode() not in b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    task = client.predict("", api_name="/cloud_plan")
    assert "accelerators: L4:1" in task and "gym launch" in task and token not in task


def test_forced_stop_mid_checkpoint_is_explained(tmp_path: Path) -> None:
    """A run ended by a signal while writing checkpoint-3: the UI says checkpoint-2 is where Resume starts."""
    from gym.webui.runs import run_status

    output = tmp_path / "out"
    for step, complete in ((2, True), (3, False)):
        folder = output / "checkpoints" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        if complete:
            (folder / "gym_complete.json").write_text("{}")
    ended = subprocess.run([sys.executable, "-c", "pass"])  # a pid that no longer runs
    (output / ".gym-webui-run.json").write_text(json.dumps({"pid": 2**22 + ended.returncode, "started": 0,
                                                              "exit_code": -15}))  # fmt: skip
    status = run_status(output)
    assert status.state == "stopped"
    assert status.message == (
        "ended by signal 15 at step 0; Resume continues from checkpoint-2 "
        "(checkpoint-3 was cut off while being written and is discarded)"
    )


@pytest.mark.parametrize("args", [["--host", "0.0.0.0"], ["--share"]])
def test_exposing_the_ui_needs_a_password(tmp_path: Path, args: list[str]) -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "gym", "webui", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "--auth USER:PASSWORD" in done.stderr and "GYM_WEBUI_PASSWORD" in done.stderr
    assert not (tmp_path / "gym.toml").exists()


def test_password_from_the_environment_guards_every_endpoint(
    tmp_path: Path, webui_env: dict[str, str]
) -> None:
    from gradio_client import Client

    from gym.webui.app import build_app, resolve_auth

    credentials = resolve_auth("0.0.0.0", False, None, {"GYM_WEBUI_PASSWORD": "s3cret-pass"})
    assert credentials == ("gym", "s3cret-pass")
    demo = build_app(write_project(tmp_path))
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, auth=credentials, prevent_thread_lock=True,
                        quiet=True)  # fmt: skip
    try:
        with pytest.raises(Exception, match="(?i)login|auth|401|403"):
            Client(demo.local_url, verbose=False).predict("", api_name="/validate")
        client = Client(demo.local_url, auth=credentials, verbose=False)
        assert client.predict((tmp_path / "gym.toml").read_text(), api_name="/validate")[0].startswith(
            "✓ valid"
        )
    finally:
        demo.close()


def test_a_run_started_with_the_cli_blocks_a_second_one(tmp_path: Path) -> None:
    """`gym train` started in a terminal writes progress.jsonl with its pid: the UI will not start another."""
    from gym.webui.runs import RunError, run_status, start_run

    output = tmp_path / "out"
    (output / "checkpoints").mkdir(parents=True)
    begin = {"event": "begin", "step": 0, "max_steps": 50, "pid": os.getpid(), "time": time.time()}
    step = {"event": "step", "step": 7, "max_steps": 50, "tokens": 700, "seconds": 3.5, "time": time.time()}
    (output / "checkpoints" / "progress.jsonl").write_text(json.dumps(begin) + "\n" + json.dumps(step) + "\n")
    status = run_status(output)
    assert (
        status.state == "running" and status.message == "training (started outside the web UI): step 7 of 50"
    )
    with pytest.raises(RunError, match=r"a run is already training into .*started outside the web UI"):
        start_run(tmp_path / "gym.toml", output)
    assert sorted(p.name for p in output.iterdir()) == ["checkpoints"]  # nothing written
